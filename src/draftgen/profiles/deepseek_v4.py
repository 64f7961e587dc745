"""DeepSeek V4 and V4.1: Python chat encoders (V4's ``encoding/encoding_dsv4.py``, V4.1's
``encoding/encoding.py``), DSML tool calls, tool results inside user turns.

V4's prompt ends ``<｜Assistant｜><think>`` or ``<｜Assistant｜></think>`` (one token either way, so
the mode is proven from the response); ``reasoning_effort="max"`` adds a paragraph before the
first message. History reasoning before the last user turn is dropped unless a message carries
tools. The vocabulary is V3.2's too: the encoder identifies the family.

V4.1 keeps that layout and changes four things: a ``<｜System｜>`` token (id 128799, a placeholder
in V4's vocabulary) opens the prompt when it starts with a system message or thinks; thinking puts
the line ``Reasoning Effort: N (range 1-100, ...)`` first (``low`` 50, ``high`` 75 by default,
``max`` 100, or an int 1..100) instead of V4's paragraph; a later system message is a
``<｜System｜>`` turn the assistant header follows; the DSML tags gain a leading space
(``<｜DSML｜ calls>``, ``<｜DSML｜ invoke``, ``<｜DSML｜ parameter``). Its vocabulary
(``<｜System｜>``) identifies it, and its encoder's name only with that vocabulary (``encoding.py``
says nothing alone). vLLM's V4.1 wrapper thinks unless told not to.
"""

from __future__ import annotations

from draftgen.profiles.base import ModelProfile, ToolCallWriter

# How V4 and V4.1 write the tool calls they generate (V3.2's block was ``function_calls``).
DSML_V4_TOOL_CALLS = "dsml-v4"
DSML_V4_1_TOOL_CALLS = "dsml-v4.1"
DSML = "｜DSML｜"
SYSTEM = "<｜System｜>"


def dsml_calls_writer(calls: str, invoke: str, parameter: str) -> ToolCallWriter:
    """A writer of ``\\n\\n<｜DSML｜{calls}>\\n``, the invokes joined by ``\\n`` (one ``parameter``
    per key, ``string="true"`` for text, JSON otherwise) and ``\\n</｜DSML｜{calls}>``: what the
    encoder writes for a history turn and its own parser reads back, under these tag names."""

    def write(
        parsed: list, arguments: list, content: str, lead_free: bool
    ) -> tuple[str, tuple[str, ...]]:
        invokes = []
        for (name, _, _), params in zip(parsed, arguments, strict=True):
            values = "\n".join(
                f'<{DSML}{parameter} name="{key}" string="{"true" if is_text else "false"}">'
                f"{value}</{DSML}{parameter}>"
                for key, value, is_text in params
            )
            invokes.append(f'<{DSML}{invoke} name="{name}">\n{values}\n</{DSML}{invoke}>')
        lead = "" if lead_free else "\n\n"
        return f"{lead}<{DSML}{calls}>\n" + "\n".join(invokes) + f"\n</{DSML}{calls}>", ()

    return write


write_dsml_v4_calls = dsml_calls_writer("tool_calls", "invoke", "parameter")
write_dsml_v4_1_calls = dsml_calls_writer(" calls", " invoke", " parameter")


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
    tool_arguments_dump="unicode",
    tool_call_writer=write_dsml_v4_calls,
    xml_arguments=True,
    thinking_variable="thinking",
    # The encoder takes None, "high" (the same prompt) or "max" (a paragraph first); vLLM's
    # wrapper sends OpenRouter's minimal..high as "high", xhigh and max as "max".
    effort_variable="reasoning_effort",
    efforts=("high", "max"),
    effort_map=(("xhigh", "max"),),
    # vLLM's V4 wrapper thinks unless told not to (vllm/tokenizers/deepseek_v4.py).
    encoder_thinks_by_default=True,
    encoder_files=("encoding_dsv4.py",),
    detect_by_vocab=False,
    encoder_tools_join_system=True,
    encoder_always_drops_thinking=True,
)

DEEPSEEK_V4_1 = ModelProfile(
    name="deepseek-v4.1",
    think_start="<think>",
    think_end="</think>",
    end_of_turn="<｜end▁of▁sentence｜>",
    marker_tokens=(SYSTEM, "<｜User｜>", "<｜Assistant｜>", "<｜end▁of▁sentence｜>", DSML),
    tool_call_tokens=(DSML,),
    reasoning_split_markers=("</think>",),
    # V4's shape under the renamed tags: the encoder's history turn and its parser agree, and
    # the server's streamed output in SGLang's and vLLM's V4.1 parser tests has it.
    tool_call_format=DSML_V4_1_TOOL_CALLS,
    tool_arguments_dump="unicode",
    tool_call_writer=write_dsml_v4_1_calls,
    xml_arguments=True,
    thinking_variable="thinking",
    # The released encoder takes low/high/max (50/75/100) or an int; OpenRouter's other efforts
    # go to the tier servers give them (deepseek-recipe and SGLang take xhigh as 75; medium as
    # high is DeepSeek's API convention). Unconfirmed for any provider: vLLM's wrapper refuses
    # minimal and medium, and servers that carry the pre-release table (low 25, high 50, xhigh 75)
    # write another number at the same count.
    effort_variable="reasoning_effort",
    efforts=("low", "high", "max"),
    effort_map=(("minimal", "low"), ("medium", "high"), ("xhigh", "high")),
    encoder_part_separator="\n\n",
    encoder_files=("encoding.py", "encoding_dsv41.py"),
    encoder_tools_join_system=True,
    encoder_tools_join_first_system=True,
    encoder_always_drops_thinking=True,
    encoder_thinks_by_default=True,
)

PROFILES = (DEEPSEEK_V4_1, DEEPSEEK_V4)
ALIASES: dict[str, ModelProfile] = {}

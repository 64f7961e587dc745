"""DeepSeek V3.1 and V3.2: ``<｜User｜>…<｜Assistant｜>`` turns, ``<think>``/``</think>`` switches.

V3.1's Jinja template is non-thinking unless ``thinking`` is true and concatenates tool-call
arguments as text; V3.2 ships a Python encoder (``encoding/encoding_dsv32.py``) instead of a
template and writes tool calls in DSML. Both prompts end in one token either way (``<think>`` or
``</think>``), so the thinking mode must be proven from the response.
"""

from __future__ import annotations

from draftgen.profiles.base import DEEPSEEK_TOOL_CALLS, DSML_TOOL_CALLS, ModelProfile


def write_tool_calls(
    parsed: list, arguments: list, content: str, lead_free: bool
) -> tuple[str, tuple[str, ...]]:
    """V3.1: ``<｜tool▁calls▁begin｜>``, then per call
    ``<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>ARGS<｜tool▁call▁end｜>``."""
    parts = [
        f"<｜tool▁call▁begin｜>{name}<｜tool▁sep｜>{args}<｜tool▁call▁end｜>"
        for (name, _, _), args in zip(parsed, arguments, strict=True)
    ]
    return "<｜tool▁calls▁begin｜>" + "".join(parts) + "<｜tool▁calls▁end｜>", ()


def write_dsml_calls(
    parsed: list, arguments: list, content: str, lead_free: bool
) -> tuple[str, tuple[str, ...]]:
    """V3.2's DSML: ``\\n\\n<｜DSML｜function_calls>``, one ``invoke`` per call with one
    ``parameter`` per key (``string="true"`` for text, JSON otherwise)."""
    parts = []
    for (name, _, _), params in zip(parsed, arguments, strict=True):
        values = "\n".join(
            f'<｜DSML｜parameter name="{key}" string="{"true" if is_text else "false"}">'
            f"{value}</｜DSML｜parameter>"
            for key, value, is_text in params
        )
        parts.append(f'<｜DSML｜invoke name="{name}">\n{values}\n</｜DSML｜invoke>')
    lead = "" if lead_free else "\n\n"
    calls = "\n".join(parts)
    return f"{lead}<｜DSML｜function_calls>\n{calls}\n</｜DSML｜function_calls>", ()


DEEPSEEK_V3 = ModelProfile(
    name="deepseek-v3",
    think_start="<think>",
    think_end="</think>",
    end_of_turn="<｜end▁of▁sentence｜>",
    marker_tokens=("<｜User｜>", "<｜Assistant｜>", "<｜end▁of▁sentence｜>"),
    tool_call_tokens=(
        "<｜tool▁calls▁begin｜>",
        "<｜tool▁calls▁end｜>",
        "<｜tool▁call▁begin｜>",
        "<｜tool▁call▁end｜>",
        "<｜tool▁sep｜>",
    ),
    reasoning_split_markers=("</think>",),
    tool_call_format=DEEPSEEK_TOOL_CALLS,
    tool_call_writer=write_tool_calls,
    thinking_variable="thinking",
)

# V3.2 chats like V3.1 but writes tool calls in DSML. Its vocabulary cannot be told from V4's
# (both carry ｜DSML｜): its Python chat encoder identifies it.
DEEPSEEK_V32 = ModelProfile(
    name="deepseek-v3.2",
    think_start="<think>",
    think_end="</think>",
    end_of_turn="<｜end▁of▁sentence｜>",
    marker_tokens=("<｜User｜>", "<｜Assistant｜>", "<｜end▁of▁sentence｜>", "｜DSML｜"),
    tool_call_tokens=("｜DSML｜",),
    reasoning_split_markers=("</think>",),
    tool_call_format=DSML_TOOL_CALLS,
    tool_arguments_dump="unicode",
    tool_call_writer=write_dsml_calls,
    xml_arguments=True,
    thinking_variable="thinking",
    encoder_files=("encoding_dsv32.py",),
    detect_by_vocab=False,
    tool_call_format_unconfirmed=(
        "DeepSeek V3.2's DSML tool-call markup is written from its encoder's published shape; "
        "its whitespace and parameter typing are unconfirmed"
    ),
)

PROFILES = (DEEPSEEK_V3, DEEPSEEK_V32)
ALIASES = {"deepseek-v3.1": DEEPSEEK_V3}

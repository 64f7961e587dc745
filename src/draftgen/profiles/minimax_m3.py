"""MiniMax-M3: M2's ``]~b]`` role headers and ``[e~[`` turn ends, reasoning in ``<mm:think>``,
tool calls whose every tag carries the namespace token ``]<]minimax[>[``, arguments as elements
named after their keys, and a three-way ``thinking_mode`` (enabled / disabled / adaptive).

The generation prompt is ``]~b]ai\\n`` followed by ``<mm:think>`` (enabled: the model writes
``R</mm:think>A[e~[``), ``</mm:think>`` (disabled: ``A[e~[``) or nothing (adaptive, the
template's default: ``<mm:think>R</mm:think>A[e~[``, or ``</mm:think>A[e~[`` when the model
decides not to think). Providers turn thinking on with ``adaptive`` (MiniMax's API knows
``adaptive`` and ``disabled``), so that is the value ``--reasoning-effort`` sets.
"""

from __future__ import annotations

import json

from draftgen.profiles.base import ModelProfile, ToolCallFormatError

MINIMAX_M3_TOOL_CALLS = "minimax-m3"
NAMESPACE = "]<]minimax[>["


def xml_value(value: object) -> str:
    """A value as the template's recursive XML writer prints it: mappings and lists as nested
    elements (``item`` per list entry, none-valued keys left out), booleans as JSON, strings as
    they are, other scalars as Python prints them (Jinja's ``{{ value }}``)."""
    if isinstance(value, dict):
        return "".join(
            f"{NAMESPACE}<{key}>{xml_value(item)}{NAMESPACE}</{key}>"
            for key, item in value.items()
            if item is not None
        )
    if isinstance(value, list):
        return "".join(f"{NAMESPACE}<item>{xml_value(item)}{NAMESPACE}</item>" for item in value)
    if value is None:
        return ""
    if isinstance(value, bool):
        return json.dumps(value)
    return str(value)


def write_tool_calls(
    parsed: list, arguments: list, content: str, lead_free: bool
) -> tuple[str, tuple[str, ...]]:
    """``NS<tool_call>\\n`` + ``NS<invoke name="F">`` + elements + ``NS</invoke>\\n`` per call +
    ``NS</tool_call>``, right after the content. ``arguments`` are JSON texts (any spelling reads
    the same: containers are elements, not JSON)."""
    invokes = []
    for index, ((name, _, _), text) in enumerate(zip(parsed, arguments, strict=True)):
        try:
            values = json.loads(text) if isinstance(text, str) else text
        except ValueError:
            raise ToolCallFormatError(
                f"tool_calls[{index}] arguments are not valid JSON, so no elements can be rebuilt"
            ) from None
        if not isinstance(values, dict):
            raise ToolCallFormatError(f"tool_calls[{index}] arguments are not a JSON object")
        invokes.append(
            f'{NAMESPACE}<invoke name="{name}">{xml_value(values)}{NAMESPACE}</invoke>\n'
        )
    return f"{NAMESPACE}<tool_call>\n" + "".join(invokes) + f"{NAMESPACE}</tool_call>", ()


MINIMAX_M3 = ModelProfile(
    name="minimax-m3",
    think_start="<mm:think>",
    think_end="</mm:think>",
    end_of_turn="[e~[",
    # M2's role markers and M3's own think token: M3 is detected before M2.
    marker_tokens=("]~!b[", "]~b]", "[e~[", "<mm:think>"),
    tool_call_tokens=(NAMESPACE, "<tool_call>", "</tool_call>"),
    reasoning_split_markers=("</mm:think>",),
    tool_call_format=MINIMAX_M3_TOOL_CALLS,
    tool_arguments_dump="unicode",
    tool_call_writer=write_tool_calls,
    bare_think_end=True,
    thinking_variable="thinking_mode",
    thinking_values=("adaptive", "disabled"),
)

PROFILES = (MINIMAX_M3,)
ALIASES: dict[str, ModelProfile] = {}

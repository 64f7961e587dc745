"""MiniMax-M2: ``]~b]`` role headers, ``[e~[`` turn ends, a prompt that opens ``<think>\\n``,
tool calls as ``<minimax:tool_call>`` with one ``<parameter>`` per key. It always thinks.

Providers that keep the think block in content (vLLM's minimax_m2_append_think) prepend
``<think>`` to it.
"""

from __future__ import annotations

from draftgen.profiles.base import MINIMAX_TOOL_CALLS, ModelProfile


def write_tool_calls(
    parsed: list, arguments: list, content: str, lead_free: bool
) -> tuple[str, tuple[str, ...]]:
    """``\\n<minimax:tool_call>\\n`` + one ``<invoke name=..>`` per call + the closing tag."""
    parts = []
    for (name, _, _), params in zip(parsed, arguments, strict=True):
        values = "".join(
            f'<parameter name="{key}">{value}</parameter>\n' for key, value, _ in params
        )
        parts.append(f'<invoke name="{name}">\n{values}</invoke>\n')
    lead = "" if lead_free else "\n"
    return f"{lead}<minimax:tool_call>\n" + "".join(parts) + "</minimax:tool_call>", ()


# The prompt opens "<think>\n"; the model writes "R\n</think>\n\nA[e~[".
MINIMAX_M2 = ModelProfile(
    name="minimax-m2",
    think_start="<think>",
    think_end="</think>",
    end_of_turn="[e~[",
    marker_tokens=("]~!b[", "]~b]", "[e~["),
    tool_call_tokens=("<minimax:tool_call>", "</minimax:tool_call>"),
    reasoning_split_markers=("</think>",),
    tool_call_format=MINIMAX_TOOL_CALLS,
    tool_arguments_dump="unicode",
    tool_call_writer=write_tool_calls,
    xml_arguments=True,
    reasoning_pad=("\n", "\n"),
    answer_lead="\n\n",
)

PROFILES = (MINIMAX_M2,)
ALIASES: dict[str, ModelProfile] = {}

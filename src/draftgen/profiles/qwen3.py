"""Qwen3 (and Qwen3-2507 thinking / instruct): ``<|im_start|>`` turns, ``<think>`` blocks the
model opens itself, ``enable_thinking``, JSON tool calls in ``<tool_call>`` tags.
"""

from __future__ import annotations

from draftgen.profiles.base import QWEN3_TOOL_CALLS, ModelProfile


def write_tool_calls(
    parsed: list, arguments: list, content: str, lead_free: bool
) -> tuple[str, tuple[str, ...]]:
    """``<tool_call>\\n{"name": ..., "arguments": ...}\\n</tool_call>`` per call, "\\n" between."""
    parts = []
    for index, ((name, _, _), args) in enumerate(zip(parsed, arguments, strict=True)):
        # The template puts "\n" before a call after content; a parser that hands back the
        # "\n\n" after </think> as content makes that lead spurious (the count decides).
        lead = "\n" if index or (content and not lead_free) else ""
        parts.append(f'{lead}<tool_call>\n{{"name": "{name}", "arguments": {args}}}\n</tool_call>')
    return "".join(parts), ()


QWEN3 = ModelProfile(
    name="qwen3",
    think_start="<think>",
    think_end="</think>",
    end_of_turn="<|im_end|>",
    # <tool_call> too: other ChatML models with <think> (Phi-4-reasoning) write no Qwen tool calls.
    marker_tokens=("<|im_start|>", "<|im_end|>", "<think>", "<tool_call>"),
    tool_call_tokens=("<tool_call>", "</tool_call>"),
    reasoning_split_markers=("</think>",),
    tool_call_format=QWEN3_TOOL_CALLS,
    tool_arguments_dump="unicode",
    tool_call_writer=write_tool_calls,
    thinking_variable="enable_thinking",
    # Qwen3 writes "<think>\nR\n</think>\n\nA".
    reasoning_pad=("\n", "\n"),
    answer_lead="\n\n",
)

PROFILES = (QWEN3,)
ALIASES: dict[str, ModelProfile] = {}

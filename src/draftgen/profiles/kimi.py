"""Kimi K2 / K2-Thinking / K2.5 (Moonshot): ``<|im_*|>`` turns, ``<think>``, tool-call sections.

Turns end with ``<|im_end|>`` although the tokenizer names ``[EOS]`` as eos; K2.5's prompt opens
``<think>`` (or ``<think></think>`` with ``thinking=false``); K2-Thinking's model opens it itself.
"""

from __future__ import annotations

import re

from draftgen.profiles.base import KIMI_TOOL_CALLS, ModelProfile

# Kimi names each call ``functions.NAME:INDEX`` in the markup; providers may rename it.
KIMI_CALL_ID = re.compile(r"functions\.[^\s:]+:\d+")


def write_tool_calls(
    parsed: list, arguments: list, content: str, lead_free: bool
) -> tuple[str, tuple[str, ...]]:
    """``<|tool_calls_section_begin|>`` + one ``<|tool_call_begin|>ID<|tool_call_argument_begin|>
    ARGS<|tool_call_end|>`` per call; an id that is not Kimi's own is rebuilt from the position."""
    notes: list[str] = []
    parts: list[str] = []
    for index, ((name, call_id, _), args) in enumerate(zip(parsed, arguments, strict=True)):
        if not KIMI_CALL_ID.fullmatch(call_id):
            call_id = f"functions.{name}:{index}"
            if "tool_call_id_rebuilt" not in notes:
                notes.append("tool_call_id_rebuilt")
        parts.append(
            f"<|tool_call_begin|>{call_id}<|tool_call_argument_begin|>{args}<|tool_call_end|>"
        )
    text = "<|tool_calls_section_begin|>" + "".join(parts) + "<|tool_calls_section_end|>"
    return text, tuple(notes)


KIMI_K2 = ModelProfile(
    name="kimi-k2",
    think_start="<think>",
    think_end="</think>",
    end_of_turn="<|im_end|>",
    marker_tokens=("<|im_middle|>", "<|im_assistant|>", "<|im_end|>"),
    tool_call_tokens=(
        "<|tool_calls_section_begin|>",
        "<|tool_calls_section_end|>",
        "<|tool_call_begin|>",
        "<|tool_call_argument_begin|>",
        "<|tool_call_end|>",
    ),
    reasoning_split_markers=("</think>", "<|tool_calls_section_begin|>"),
    tool_call_format=KIMI_TOOL_CALLS,
    tool_call_writer=write_tool_calls,
    thinking_variable="thinking",
)

PROFILES = (KIMI_K2,)
ALIASES: dict[str, ModelProfile] = {}

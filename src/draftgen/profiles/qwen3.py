"""Qwen3 (and Qwen3-2507 thinking / instruct): ``<|im_start|>`` turns, ``<think>`` blocks the
model opens itself, ``enable_thinking``, JSON tool calls in ``<tool_call>`` tags.
"""

from __future__ import annotations

from draftgen.profiles.base import QWEN3_TOOL_CALLS, ModelProfile
from draftgen.profiles.fixture import QwenBpeFixture


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
    tool_call_writer=write_tool_calls,
    thinking_variable="enable_thinking",
    # Qwen3 writes "<think>\nR\n</think>\n\nA".
    reasoning_pad=("\n", "\n"),
    answer_lead="\n\n",
)

PROFILES = (QWEN3,)
ALIASES: dict[str, ModelProfile] = {}

# -- fixtures ----------------------------------------------------------------------------------

# Qwen3's added tokens, all at their real ids (the same order Qwen3.5 keeps from 248044).
QWEN3_SPECIAL_TOKENS: dict[int, str] = dict(
    enumerate(
        (
            "<|endoftext|>",
            "<|im_start|>",
            "<|im_end|>",
            "<|object_ref_start|>",
            "<|object_ref_end|>",
            "<|box_start|>",
            "<|box_end|>",
            "<|quad_start|>",
            "<|quad_end|>",
            "<|vision_start|>",
            "<|vision_end|>",
            "<|vision_pad|>",
            "<|image_pad|>",
            "<|video_pad|>",
            "<tool_call>",
            "</tool_call>",
            "<|fim_prefix|>",
            "<|fim_middle|>",
            "<|fim_suffix|>",
            "<|fim_pad|>",
            "<|repo_name|>",
            "<|file_sep|>",
            "<tool_response>",
            "</tool_response>",
            "<think>",
            "</think>",
        ),
        start=151643,
    )
)
# Qwen3 marks these `special: false` (skip_special_tokens keeps them); text still matches them.
QWEN3_NON_SPECIAL = frozenset(QWEN3_SPECIAL_TOKENS[i] for i in range(151657, 151669))

_QWEN3 = QwenBpeFixture(
    added_tokens=QWEN3_SPECIAL_TOKENS,
    vocab_size=max(QWEN3_SPECIAL_TOKENS) + 1,
    non_special=QWEN3_NON_SPECIAL,
    # Qwen2/Qwen3's tokenizer.json normalizes to NFC, so decomposed text does not round-trip.
    nfc=True,
    config={
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "model_max_length": 131072,
    },
)
# Qwen3-2507 ships separate thinking and instruct models: the same vocabulary, other templates.
FIXTURES = {"qwen3": _QWEN3, "qwen3-thinking-2507": _QWEN3, "qwen3-instruct-2507": _QWEN3}

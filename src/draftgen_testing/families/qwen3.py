"""Qwen3's offline tokenizers: Qwen's ranks and its added tokens at their real ids, one
vocabulary with three templates.
"""

from __future__ import annotations

from draftgen_testing.specs import QwenBpeFixture

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

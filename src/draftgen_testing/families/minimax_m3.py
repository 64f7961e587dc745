"""MiniMax-M3's offline tokenizer: Qwen's ranks, M3's markers after them."""

from __future__ import annotations

from draftgen.profiles.minimax_m3 import NAMESPACE
from draftgen_testing.specs import QwenBpeFixture

# The tokens M3's template and parsers treat as single vocabulary entries (the think pair, the
# namespace, the tool_call tags; llama.cpp keeps them as "preserved tokens") and its role
# markers. Their real ids are not known here (*unconfirmed*): the fixture appends them after
# Qwen's ranks, so every id differs from the real model's.
MINIMAX_M3_SPECIAL_TOKENS: dict[int, str] = dict(
    enumerate(
        (
            "]~!b[",
            "]~b]",
            "[e~[",
            "<mm:think>",
            "</mm:think>",
            NAMESPACE,
            "<tool_call>",
            "</tool_call>",
            "]<]image[>[",
            "]<]video[>[",
        ),
        start=151643,
    )
)

FIXTURES = {
    "minimax-m3": QwenBpeFixture(
        added_tokens=MINIMAX_M3_SPECIAL_TOKENS,
        vocab_size=max(MINIMAX_M3_SPECIAL_TOKENS) + 1,
        config={
            "bos_token": "]~!b[",
            "eos_token": "[e~[",
            "unk_token": None,
            "model_max_length": 1048576,
        },
    ),
}

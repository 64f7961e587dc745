"""MiniMax-M2's offline tokenizer: Qwen's ranks, M2's markers after them."""

from __future__ import annotations

from draftgen_testing.specs import QwenBpeFixture

# MiniMax-M2's role markers and the tokens its template writes. Their real ids (in a 200064-token
# vocabulary) are not known here: the fixture appends them after Qwen's ranks, so every id
# differs from the real model's.
MINIMAX_M2_SPECIAL_TOKENS: dict[int, str] = dict(
    enumerate(
        (
            "]~!b[",
            "]~b]",
            "[e~[",
            "<think>",
            "</think>",
            "<minimax:tool_call>",
            "</minimax:tool_call>",
        ),
        start=151643,
    )
)

FIXTURES = {
    "minimax-m2": QwenBpeFixture(
        added_tokens=MINIMAX_M2_SPECIAL_TOKENS,
        vocab_size=max(MINIMAX_M2_SPECIAL_TOKENS) + 1,
        config={
            "bos_token": "]~!b[",
            "eos_token": "[e~[",
            "unk_token": None,
            "model_max_length": 196608,
        },
    ),
}

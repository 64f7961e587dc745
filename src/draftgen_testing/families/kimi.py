"""Kimi K2's offline tokenizers: Qwen's ranks with Kimi's added tokens at their real ids, and
K2.5 as Moonshot ships it (remote code).
"""

from __future__ import annotations

from draftgen_testing.specs import QwenBpeFixture, RemoteCodeFixture

KIMI_SPECIAL_TOKENS: dict[int, str] = {
    163584: "[BOS]",
    163585: "[EOS]",
    163586: "<|im_end|>",
    163587: "<|im_user|>",
    163588: "<|im_assistant|>",
    163593: "[EOT]",
    163594: "<|im_system|>",
    163595: "<|tool_calls_section_begin|>",
    163596: "<|tool_calls_section_end|>",
    163597: "<|tool_call_begin|>",
    163598: "<|tool_call_argument_begin|>",
    163599: "<|tool_call_end|>",
    163601: "<|im_middle|>",
    163606: "<think>",
    163607: "</think>",
    # Kimi's tokenizer_config.json names these as unk/pad at the top of its vocabulary.
    163838: "[UNK]",
    163839: "[PAD]",
}
KIMI_VOCAB_SIZE = 163840
# As Kimi's tokenizer_config.json: eos is [EOS] although turns end with <|im_end|>.
KIMI_CONFIG = {
    "bos_token": "[BOS]",
    "eos_token": "[EOS]",
    "unk_token": "[UNK]",
    "pad_token": "[PAD]",
    "model_max_length": 262144,
}
# In K2.5's tokenizer_config.json the think and tool-call tokens are added tokens marked
# `special: false`: skip_special_tokens keeps them, and slow decoding treats them apart.
KIMI_K25_NON_SPECIAL = frozenset(
    {
        "<think>",
        "</think>",
        "<|tool_calls_section_begin|>",
        "<|tool_calls_section_end|>",
        "<|tool_call_begin|>",
        "<|tool_call_argument_begin|>",
        "<|tool_call_end|>",
    }
)

FIXTURES = {
    "kimi-k2.5": QwenBpeFixture(
        added_tokens=KIMI_SPECIAL_TOKENS, vocab_size=KIMI_VOCAB_SIZE, config=KIMI_CONFIG
    ),
    "kimi-k2-thinking": QwenBpeFixture(
        added_tokens=KIMI_SPECIAL_TOKENS, vocab_size=KIMI_VOCAB_SIZE, config=KIMI_CONFIG
    ),
    # K2.5 as its repository ships it: remote code (a slow tiktoken tokenizer) and the same ranks
    # and template as "kimi-k2.5", so both give the same prompt ids.
    "kimi-k2.5-remote": RemoteCodeFixture(
        added_tokens=KIMI_SPECIAL_TOKENS,
        vocab_size=KIMI_VOCAB_SIZE,
        code="tokenization_kimi_fixture.py",
        module="tokenization_kimi.py",
        class_name="TikTokenTokenizer",
        template="kimi-k2.5",
        non_special=KIMI_K25_NON_SPECIAL,
        config={
            **KIMI_CONFIG,
            "additional_special_tokens": [
                "<|im_end|>",
                "<|im_user|>",
                "<|im_assistant|>",
                "[EOT]",
                "<|im_system|>",
                "<|im_middle|>",
            ],
        },
    ),
}

"""Kimi K3's offline tokenizer: remote code that encodes K3's segments, Qwen's ranks standing in."""

from __future__ import annotations

from draftgen.profiles.kimi_k3 import CLOSE, END_OF_MSG, OPEN, SEP
from draftgen_testing.specs import RemoteCodeFixture

# K3's named ids, from its tokenizer_config.json as SGLang's K3 test generator lists them
# (offsets from 163584); the rest of 163584..163839 are reserved.
KIMI_K3_SPECIAL_TOKENS: dict[int, str] = {
    163584: "[BOS]",
    163585: "[EOS]",
    163586: END_OF_MSG,
    163587: OPEN,
    163588: CLOSE,
    163589: SEP,
    163590: "[start_header_id]",
    163591: "[end_header_id]",
    163593: "[EOT]",
    163602: "<|media_begin|>",
    163603: "<|media_content|>",
    163604: "<|media_end|>",
    163605: "<|media_pad|>",
    163649: "<osagent_mode>",
    163838: "[UNK]",
    163839: "[PAD]",
}

FIXTURES = {
    # K3 as its repository ships it: remote code (a slow tiktoken tokenizer whose
    # apply_chat_template encodes segment by segment) and encoding_k3.py beside it; no
    # chat_template. Qwen's ranks stand in for K3's. Its tokenizer_config.json names [EOS]
    # (163585) as eos and leaves model_max_length unset; generation stops on <|end_of_msg|>
    # (config.json's and generation_config.json's eos_token_id 163586).
    "kimi-k3": RemoteCodeFixture(
        added_tokens=KIMI_K3_SPECIAL_TOKENS,
        vocab_size=163840,
        code="tokenization_kimi_k3_fixture.py",
        module="tokenization_kimi.py",
        class_name="TikTokenTokenizer",
        template=None,
        companions={"encoding_k3.py": "encoding_k3_fixture.py"},
        config={
            "bos_token": "[BOS]",
            "eos_token": "[EOS]",
            "unk_token": "[UNK]",
            "pad_token": "[PAD]",
            "additional_special_tokens": [END_OF_MSG],
        },
    ),
}

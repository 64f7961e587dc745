"""gpt-oss's offline tokenizer: o200k's ranks and o200k_harmony's added tokens from quicktok-v1."""

from __future__ import annotations

from draftgen_testing.specs import QwenBpeFixture

# gpt-oss's real vocabulary: o200k's ranks 0..199997 (quicktok-v1's data/o200k.vocab, the file
# tiktoken and openai-harmony pin: draftgen.tokens.o200k checks it), split by o200k's pattern,
# then o200k_harmony's added tokens from 199998 (data/o200k_harmony.special, which also names
# every reserved id, <|reserved_200000|> and on). The named ones, as the real ids:
GPT_OSS_SPECIAL_TOKENS: dict[int, str] = {
    199998: "<|startoftext|>",
    199999: "<|endoftext|>",
    200002: "<|return|>",
    200003: "<|constrain|>",
    200005: "<|channel|>",
    200006: "<|start|>",
    200007: "<|end|>",
    200008: "<|message|>",
    200012: "<|call|>",
    200018: "<|endofprompt|>",
}
GPT_OSS_VOCAB_SIZE = 201088
GPT_OSS_BASE_VOCAB = 199998
# tiktoken's o200k_base pat_str (tiktoken_ext/openai_public.py), the Split regex of gpt-oss's
# tokenizer.json: cased words with their contraction, digits in threes, "/" kept after punctuation.
O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)

FIXTURES = {
    "gpt-oss": QwenBpeFixture(
        added_tokens=GPT_OSS_SPECIAL_TOKENS,
        vocab_size=GPT_OSS_VOCAB_SIZE,
        config={
            "bos_token": "<|startoftext|>",
            "eos_token": "<|return|>",
            "pad_token": "<|endoftext|>",
            "unk_token": None,
            "model_max_length": 131072,
        },
        ranks="quicktok:o200k",
        base_vocab=GPT_OSS_BASE_VOCAB,
        pattern=O200K_PATTERN,
        # 200018 is both <|endofprompt|> and <|reserved_200018|> there: the named one is taken.
        specials="quicktok:o200k_harmony",
    ),
}

"""Llama 3.3's and Llama 4's offline tokenizers: Meta's rank files from llama-models, specials at
their ids.
"""

from __future__ import annotations

from draftgen_testing.families.gpt_oss import O200K_PATTERN
from draftgen_testing.specs import QwenBpeFixture

# Llama 3.x's added tokens, 128000..128255 after its 128,000 BPE ranks (llama_models/llama3/
# tokenizer.model), named as the Hugging Face tokenizer.json of Llama 3.1/3.3 names them (what vLLM
# loads): Meta's tokenizer.py (llama_models/llama3/tokenizer.py) gives the same ids to every token
# below, but calls 128005 <|step_id|> and 128011 <|image|> where the Hugging Face file keeps the
# reserved names of Llama 3.0 (<|reserved_special_token_2|>, _3, ... up to _247 at 128255).
LLAMA3_NAMED: dict[int, str] = {
    128000: "<|begin_of_text|>",
    128001: "<|end_of_text|>",
    128004: "<|finetune_right_pad_id|>",
    128006: "<|start_header_id|>",
    128007: "<|end_header_id|>",
    128008: "<|eom_id|>",
    128009: "<|eot_id|>",
    128010: "<|python_tag|>",
}
LLAMA3_BASE_VOCAB = 128000
LLAMA3_VOCAB_SIZE = 128256


def _llama3_added() -> dict[int, str]:
    added: dict[int, str] = {}
    count = 0
    for token_id in range(LLAMA3_BASE_VOCAB, LLAMA3_VOCAB_SIZE):
        if token_id in LLAMA3_NAMED:
            added[token_id] = LLAMA3_NAMED[token_id]
        else:
            added[token_id] = f"<|reserved_special_token_{count}|>"
            count += 1
    return added


LLAMA3_SPECIAL_TOKENS = _llama3_added()
# llama_models/llama3/tokenizer.py's pat_str (also the Split regex of Llama 3's tokenizer.json):
# Qwen's, but digits in runs of up to three.
LLAMA3_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"""
    r"""| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

# Llama 4's added tokens, 200000..202047 after its 200,000 BPE ranks (llama_models/llama4/
# tokenizer.model), in the order of llama_models/llama4/tokenizer.py: BASIC_SPECIAL_TOKENS, then
# the text post-training, vision and reasoning lists, then <|reserved_special_token_N|> up to its
# 2048 special tokens. Whether the Hugging Face tokenizer.json names the reserved ids alike is not
# confirmed (the named ones below are the ones any prompt or answer uses).
LLAMA4_BASE_VOCAB = 200000
LLAMA4_VOCAB_SIZE = 202048


def _reserved(name: str, count: int, start: int = 0) -> list[str]:
    return [f"<|{name}_reserved_special_token_{i}|>" for i in range(start, start + count)]


def _llama4_added() -> dict[int, str]:
    basic = [
        "<|begin_of_text|>",
        "<|end_of_text|>",
        "<|fim_prefix|>",
        "<|fim_middle|>",
        "<|fim_suffix|>",
    ]
    text = [
        "<|header_start|>",
        "<|header_end|>",
        "<|eom|>",
        "<|eot|>",
        "<|step|>",
        *_reserved("text_post_train", 6),
        "<|python_start|>",
        "<|python_end|>",
        "<|finetune_right_pad|>",
        *_reserved("text_post_train", 61, 8),
    ]
    vision = [
        "<|image_start|>",
        "<|image_end|>",
        *_reserved("vision", 2),
        "<|tile_x_separator|>",
        "<|tile_y_separator|>",
        *_reserved("vision", 4, 2),
        "<|image|>",
        *_reserved("vision", 1, 6),
        "<|patch|>",
        *_reserved("vision", 1041, 7),
    ]
    reasoning = [
        *_reserved("reasoning", 8),
        "<|reasoning_thinking_start|>",
        "<|reasoning_thinking_end|>",
    ]
    named = basic + text + vision + reasoning
    size = LLAMA4_VOCAB_SIZE - LLAMA4_BASE_VOCAB
    tokens = named + [f"<|reserved_special_token_{i}|>" for i in range(size - len(named))]
    return dict(enumerate(tokens, start=LLAMA4_BASE_VOCAB))


LLAMA4_SPECIAL_TOKENS = _llama4_added()
# llama_models/llama4/tokenizer.py's O200K_PATTERN: o200k's split, the one gpt-oss uses.
LLAMA4_PATTERN = O200K_PATTERN

FIXTURES = {
    "llama-3.3": QwenBpeFixture(
        added_tokens=LLAMA3_SPECIAL_TOKENS,
        vocab_size=LLAMA3_VOCAB_SIZE,
        config={
            "bos_token": "<|begin_of_text|>",
            "eos_token": "<|eot_id|>",
            "pad_token": None,
            "unk_token": None,
            "model_max_length": 131072,
        },
        ranks="llama_models:llama3/tokenizer.model",
        base_vocab=LLAMA3_BASE_VOCAB,
        pattern=LLAMA3_PATTERN,
    ),
    "llama-4": QwenBpeFixture(
        added_tokens=LLAMA4_SPECIAL_TOKENS,
        vocab_size=LLAMA4_VOCAB_SIZE,
        config={
            "bos_token": "<|begin_of_text|>",
            "eos_token": "<|eot|>",
            "pad_token": "<|finetune_right_pad|>",
            "unk_token": None,
            "model_max_length": 10485760,
        },
        ranks="llama_models:llama4/tokenizer.model",
        base_vocab=LLAMA4_BASE_VOCAB,
        pattern=LLAMA4_PATTERN,
    ),
}

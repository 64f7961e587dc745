"""Models no draftgen profile claims, for the generic profile (its layout derived from the chat
template): Gemma 3, Phi-4-reasoning and Seed-OSS-shaped tokenizers. Qwen's ranks with each
model's own chat tokens after them (their real ids and ranks are not shipped in a PyPI package:
every id past the ranks differs from the real model's), and a template written here after the
published one. None of them holds another family's marker tokens, so none is detected as one.
"""

from __future__ import annotations

from draftgen_testing.specs import QwenBpeFixture

QWEN_RANKS = 151643


def _fixture(tokens: tuple[str, ...], eos: str, bos: str | None = None) -> QwenBpeFixture:
    added = dict(enumerate(tokens, start=QWEN_RANKS))
    return QwenBpeFixture(
        added_tokens=added,
        vocab_size=max(added) + 1,
        config={"bos_token": bos, "eos_token": eos, "unk_token": None, "model_max_length": 131072},
    )


FIXTURES = {
    # Gemma 3 (<bos>, turns in <start_of_turn>/<end_of_turn>, "model" as the assistant's role).
    "gemma-3": _fixture(("<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>"), "<eos>", "<bos>"),
    # Phi-4-reasoning (ChatML with <|im_sep|>, a think block in content, no Qwen tool tokens).
    "phi-4-reasoning": _fixture(
        ("<|endoftext|>", "<|im_start|>", "<|im_sep|>", "<|im_end|>", "<think>", "</think>"),
        "<|im_end|>",
    ),
    # Seed-OSS (<seed:bos>/<seed:eos> turns, <seed:think> blocks, a thinking budget variable).
    "seed-oss": _fixture(
        ("<seed:bos>", "<seed:eos>", "<seed:pad>", "<seed:think>", "</seed:think>"), "<seed:eos>"
    ),
}

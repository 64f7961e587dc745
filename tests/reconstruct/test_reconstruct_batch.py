"""Batched reconstruction gives exactly the samples one-at-a-time reconstruction gives."""

from __future__ import annotations

import asyncio
import collections
import threading

import pytest
from conftest import write_prompts

from draftgen.reconstruct import text
from draftgen.reconstruct.background import reconstruct_all
from draftgen.reconstruct.batch import PreEncodedTokenizer, reconstruct_batches
from draftgen.reconstruct.text import reconstruct_sample
from draftgen.run.pipeline import RunOptions, run
from draftgen.simulator import SimConfig, SimulatorThread
from draftgen.store.database import Store
from draftgen.tokens.rendering import resolve_profile
from draftgen.tokens.tokenizer import decode, encode, load_tokenizer

QUIRKS = {
    "drift": 0.1,
    "strip_whitespace": 0.1,
    "leak_eot": 0.1,
    "no_split": 0.1,
    "empty_reasoning": 0.1,
    "tool_call_text": 0.1,
    "reasoning_content_field": 0.1,
}


@pytest.mark.parametrize(
    "tokenizer",
    [
        "fixture:kimi-k2.5",
        "fixture:kimi-k2-thinking",
        "fixture:qwen3",
        "fixture:deepseek-v3-thinking",
    ],
)
def test_batches_equal_one_at_a_time(tmp_path, monkeypatch, tokenizer):
    monkeypatch.setenv("OPENROUTER_API_KEY", "test")
    config = SimConfig(
        tokenizer=tokenizer, quirks=QUIRKS, faults={"finish_error": 0.0}, seed=3, max_tokens=120
    )
    with SimulatorThread(config) as sim:
        options = RunOptions(
            inputs=[str(write_prompts(tmp_path / "p.jsonl", 120))],
            model="m",
            tokenizer=tokenizer,
            out=tmp_path / "run",
            base_url=sim.base_url,
            concurrency=16,
            max_tokens=100,
            progress_interval=1000,
        )
        asyncio.run(run(options))
    tok = load_tokenizer(tokenizer)
    profile = resolve_profile(tok, None)
    store = Store(tmp_path / "run")
    stored = list(store.completions.read())
    assert len(stored) > 50
    one_by_one = [reconstruct_sample(s, tok, profile) for s in stored]
    reads: collections.Counter = collections.Counter()
    monkeypatch.setattr(text, "read_completion", _counted(text.read_completion, reads))
    batched = [
        sample
        for batch in reconstruct_batches(
            (stored[i : i + 7] for i in range(0, len(stored), 7)), tok, profile
        )
        for sample in batch
    ]
    assert batched == one_by_one
    # The quirks made some samples fail verification: the comparison covered more than "ok".
    assert len({s.reason for s in one_by_one}) > 1
    # A batch reads each completion once for all its steps (prepare, repairs, the sample).
    assert {reads[id(s.completion), s.rendering.text] for s in stored} == {1}
    store.close()


def _counted(read, reads):
    """``read_completion`` that counts its calls by (completion, prompt)."""

    def counted(completion, prompt_text, profile):
        reads[id(completion), prompt_text] += 1
        return read(completion, prompt_text, profile)

    return counted


def test_pre_encoded_tokenizer_falls_back_for_texts_not_given():
    tok = load_tokenizer("fixture:qwen3")
    cached = PreEncodedTokenizer(tok)
    cached.encode_ahead(["hello world", "café 日本 🎉"], ["café 日本 🎉"])
    assert encode(cached, "hello world") == encode(tok, "hello world")
    assert encode(cached, "not given") == encode(tok, "not given")
    ids = encode(cached, "café 日本 🎉")
    assert decode(cached, ids) == "café 日本 🎉"
    # The batch's own list is handed out (callers never change ids); another is decoded for real.
    assert encode(cached, "café 日本 🎉") is ids
    assert decode(cached, [*ids, encode(tok, "!")[0]]) == "café 日本 🎉!"


def test_following_reconstruction_takes_completions_stored_while_it_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENROUTER_API_KEY", "test")
    tokenizer = "fixture:kimi-k2.5"
    config = SimConfig(tokenizer=tokenizer, seed=1, max_tokens=60)
    with SimulatorThread(config) as sim:
        options = RunOptions(
            inputs=[str(write_prompts(tmp_path / "p.jsonl", 40, invalid=False))],
            model="m",
            tokenizer=tokenizer,
            out=tmp_path / "run",
            base_url=sim.base_url,
            concurrency=8,
            progress_interval=1000,
        )
        asyncio.run(run(options))
    store = Store(tmp_path / "run")
    total = store.tallies.counts()["completions"]
    store.samples.clear_samples()
    # Follow with generation already done: one pass, then the last pass from the start.
    done = threading.Event()
    done.set()
    profile = resolve_profile(load_tokenizer(tokenizer), None)
    assert reconstruct_all(store, tokenizer, profile, batch=5, follow=done) == total
    assert store.tallies.counts()["unreconstructed"] == 0
    stop = threading.Event()
    stop.set()
    store.samples.clear_samples()
    assert reconstruct_all(store, tokenizer, profile, batch=5, stop=stop) == 0
    store.close()

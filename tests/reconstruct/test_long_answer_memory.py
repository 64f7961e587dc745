"""The memory of reconstructing one long answer whose count matches no reading (issue #25: "a 20
MB message must not cost gigabytes"): its 15 whitespace repairs are counted from the pieces around
its edges, so ``draftgen export`` peaks about where it does for the same answer verified at once.

Before: each repair was a full-length copy of the answer encoded whole, all in one batch call; a
15 MB answer's export peaked at 3,131 MiB against 912 MiB for the same answer verified.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import write_prompts

from draftgen.run.pipeline import RunOptions, run
from draftgen.simulator import SimConfig, SimulatorThread
from draftgen.tokens.tokenizer import load_tokenizer

pytestmark = pytest.mark.long

TOKENIZER = "fixture:qwen3"
WORDS = 2_500_000  # one token each: a 15 MB answer
# Bytes of peak memory a repaired answer may cost beyond the verified one's, per character.
BYTES_PER_CHAR = 8


def store_long_answer(tmp: Path, monkeypatch) -> tuple[Path, str, int]:
    """A run of four answers, the first replaced with ``WORDS`` one-token words of Qwen3's
    vocabulary: (run directory, its key, its true completion count)."""
    out = tmp / "run"
    monkeypatch.setenv("OPENROUTER_API_KEY", "test")
    config = SimConfig(tokenizer=TOKENIZER, seed=3, max_tokens=60)
    with SimulatorThread(config) as sim:
        options = RunOptions(
            inputs=[str(write_prompts(tmp / "p.jsonl", 4, invalid=False))],
            model="m",
            tokenizer=TOKENIZER,
            out=out,
            base_url=sim.base_url,
            concurrency=4,
            max_tokens=60,
            progress_interval=1000,
        )
        asyncio.run(run(options))
    tokenizer = load_tokenizer(TOKENIZER)
    db = sqlite3.connect(out / "draftgen.sqlite")
    try:
        key, content, count = db.execute(
            "SELECT key, content, completion_tokens FROM completions ORDER BY rowid LIMIT 1"
        ).fetchone()
        vocabulary = ("alpha", "beta", "gamma", "delta", "river", "light", "house", "stream")
        text = " ".join(vocabulary[(i * 7 + i // 3) % 8] for i in range(WORDS))
        count += WORDS - len(tokenizer.encode(content, add_special_tokens=False))
        db.execute("UPDATE completions SET content = ? WHERE key = ?", (text, key))
        db.commit()
    finally:
        db.close()
    return out, key, count


def export_with_count(out: Path, key: str, count: int) -> tuple[tuple, int]:
    """Store ``count`` as the answer's completion count, forget every sample and export in a
    process of its own: ((verified, reason, detail) of the answer, the export's peak RSS)."""
    db = sqlite3.connect(out / "draftgen.sqlite")
    try:
        (usage,) = db.execute("SELECT usage FROM completions WHERE key = ?", (key,)).fetchone()
        db.execute(
            "UPDATE completions SET completion_tokens = ?, usage = ? WHERE key = ?",
            (count, json.dumps({**json.loads(usage), "completion_tokens": count}), key),
        )
        db.execute("DELETE FROM samples")
        db.commit()
    finally:
        db.close()
    command = [sys.executable, "-m", "draftgen.cli", "export", str(out), "--format", "specforge"]
    command += ["--out", str(out.parent / "export.jsonl"), "--include-unverified"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage_of_child = os.wait4(process.pid, 0)
    err = process.stderr.read().decode()
    process.stderr.close()
    assert os.waitstatus_to_exitcode(status) == 0, err
    db = sqlite3.connect(out / "draftgen.sqlite")
    try:
        sample = db.execute(
            "SELECT verified, reason, detail FROM samples WHERE key = ?", (key,)
        ).fetchone()
    finally:
        db.close()
    return sample, usage_of_child.ru_maxrss * 1024


def test_a_long_answer_whose_count_matches_nothing_costs_what_a_verified_one_does(
    tmp_path, monkeypatch
):
    out, key, count = store_long_answer(tmp_path, monkeypatch)
    chars = 6 * WORDS - 1
    verified, verified_peak = export_with_count(out, key, count)
    assert verified == (1, "ok", "")
    # Five ids more than any reading or repair: all 15 repairs are counted and none matches.
    unmatched, unmatched_peak = export_with_count(out, key, count + 5)
    assert unmatched == (
        0,
        "completion_count_mismatch",
        f"completion {count} ids, provider {count + 5}; re-tokenization (the model's ids are not "
        "the canonical encoding of its text) or altered text",
    )
    # One more: the first repair (a space after the content) matches; its provider never
    # returned content with edge whitespace, so the run names it a strip.
    repaired, repaired_peak = export_with_count(out, key, count + 1)
    assert repaired == (
        0,
        "whitespace_altered",
        f"completion {count} ids, provider {count + 1}; restoring '' before and ' ' after the "
        "content would also match the count; this provider never returned content with "
        "whitespace at its edges, so it strips it",
    )
    mib = 1 << 20
    print(
        f"15 MB answer: export peak {verified_peak // mib} MiB verified, "
        f"{unmatched_peak // mib} MiB with no repair matching, {repaired_peak // mib} MiB repaired"
    )
    # Before: 3,131 MiB against 912 MiB (2.2 GB more, ~150 bytes a character).
    for peak in (unmatched_peak, repaired_peak):
        assert peak < verified_peak + BYTES_PER_CHAR * chars, (peak, verified_peak)

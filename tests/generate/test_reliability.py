"""Money and shutdown safety: --max-cost, Ctrl-C, the run-wide retry budget, a full disk."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time

import pytest
from conftest import SECRET, SimProcess, assert_worked, draftgen, run_args, write_prompts

from draftgen.records import Completion
from draftgen.store.database import CompletionWriter, Store, StoreError

TOKENIZER = "fixture:kimi-k2.5"


def stored_count(out):
    return (
        sqlite3.connect(out / "draftgen.sqlite")
        .execute("SELECT count(*) FROM completions")
        .fetchone()[0]
    )


def spent(out):
    return (
        sqlite3.connect(out / "draftgen.sqlite")
        .execute("SELECT sum(cost) FROM completions")
        .fetchone()[0]
    )


def test_max_cost_stops_sending_says_what_was_spent_and_resumes(tmp_path):
    sim = SimProcess(tmp_path, TOKENIZER)
    try:
        inputs = write_prompts(tmp_path / "p.jsonl", 60, invalid=False)
        # Without --max-tokens each request reserves the listing's longest answer (262,144
        # tokens, $0.66 here): none is sent under a $0.003 cap, and the line says why.
        result = draftgen(
            *run_args(sim, [inputs], tmp_path / "unbounded", TOKENIZER),
            *("--concurrency", "16", "--max-cost", "0.003"),
        )
        assert result.returncode == 3, result.stderr
        assert "tokens and its prompt at the listed prices of test/model), more than the" in (
            result.stderr
        )
        assert sim.truth() == []
        out = tmp_path / "run"
        # One completion costs about $0.0003 here; allow roughly ten of them.
        capped = ("--concurrency", "16", "--max-tokens", "200")
        result = draftgen(*run_args(sim, [inputs], out, TOKENIZER, *capped, "--max-cost", "0.003"))
        assert result.returncode == 3, result.stderr
        assert "reached --max-cost $0.0030: spent $" in result.stderr
        first = stored_count(out)
        assert 3 <= first < 50
        assert spent(out) <= 0.003
        assert len(sim.truth()) == first  # nothing bought that was not stored
        result = draftgen(*run_args(sim, [inputs], out, TOKENIZER, *capped))
        assert_worked(result, out)
        assert stored_count(out) > first
    finally:
        sim.stop()


def start_run(sim, inputs, out, *extra):
    env = {**os.environ, "DRAFTGEN_TEST_KEY": SECRET}
    return subprocess.Popen(
        [sys.executable, "-m", "draftgen.cli", *run_args(sim, [inputs], out, TOKENIZER, *extra)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for_stored(out, count, process, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()
        try:
            if stored_count(out) >= count:
                return
        except sqlite3.Error:
            pass
        time.sleep(0.05)
    raise AssertionError("the run stored too little")


def test_ctrl_c_stops_sending_and_stores_what_was_in_flight(tmp_path):
    sim = SimProcess(tmp_path, TOKENIZER, extra=["--latency", "0.5"])
    try:
        inputs = write_prompts(tmp_path / "p.jsonl", 200, invalid=False)
        out = tmp_path / "run"
        process = start_run(sim, inputs, out, "--concurrency", "8")
        wait_for_stored(out, 8, process)
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=60)
        assert process.returncode == 130, stderr
        # All eight workers may be between two requests (their answers being committed) as the
        # signal comes: the line then says there is nothing to wait for.
        waiting = ("stopping; waiting up to 30 s for", "stopping; no request is in flight")
        assert any(line in stderr for line in waiting) and "interrupted" in stderr
        # Every response the server produced reached the store: nothing in flight was thrown away.
        assert stored_count(out) == len(sim.truth()) < 150
        # The interrupted run reconstructed what it reached in the background; export does the
        # rest, so nothing paid is unusable.
        result = draftgen(
            "export",
            str(out),
            "--format",
            "specforge",
            "--out",
            str(tmp_path / "x.jsonl"),
            "--include-unverified",
        )
        assert result.returncode == 0, result.stderr
        done_late = re.search(r"reconstructed (\d+) samples", result.stdout)
        assert done_late is None or int(done_late.group(1)) <= stored_count(out)
        assert len((tmp_path / "x.jsonl").read_text().splitlines()) == stored_count(out)
    finally:
        sim.stop()


def test_second_ctrl_c_abandons_requests_in_flight(tmp_path):
    sim = SimProcess(tmp_path, TOKENIZER, extra=["--latency", "20"])
    try:
        inputs = write_prompts(tmp_path / "p.jsonl", 10, invalid=False)
        out = tmp_path / "run"
        process = start_run(sim, inputs, out, "--concurrency", "4")
        deadline = time.monotonic() + 60
        while not (out / "draftgen.lock").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.5)  # requests are on the wire now
        process.send_signal(signal.SIGINT)
        time.sleep(0.3)
        started = time.monotonic()
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=30)
        assert process.returncode == 130, stderr
        assert "abandoning the requests in flight" in stderr
        assert time.monotonic() - started < 15  # did not wait for the 20 s responses
        assert stored_count(out) == 0
    finally:
        sim.stop()


def test_run_wide_retry_budget_stops_a_hopeless_run(tmp_path):
    # It served at first (a server failing from the start is a dead endpoint, stopped sooner:
    # test_dead_endpoint.py), then answers HTTP 500 to everything.
    sim = SimProcess(tmp_path, TOKENIZER, extra=["--fail-after", "10"])
    try:
        inputs = write_prompts(tmp_path / "p.jsonl", 20, invalid=False)
        result = draftgen(
            *run_args(sim, [inputs], tmp_path / "run", TOKENIZER, "--max-retries", "10")
        )
        assert result.returncode == 2
        assert "used up its retry budget (10 retries, last: server_error)" in result.stderr
    finally:
        sim.stop()


def test_full_disk_gives_a_clear_error_and_a_resumable_store(tmp_path):
    store = Store(tmp_path)
    writer = CompletionWriter(store.path)
    completion = Completion(
        "g",
        "p",
        "m",
        "r" * 2000,
        "a" * 2000,
        None,
        "stop",
        "stop",
        {"prompt_tokens": 1, "completion_tokens": 1, "cost": 0.1},
    )
    request = b'{"messages": [], "tools": null}'

    async def fill():
        committed = 0
        for i in range(10_000):
            try:
                await writer.add_completion(f"k{i}", "s", 0, request, completion, 1, [], 0.0)
            except StoreError as exc:
                return committed, str(exc)
            committed += 1
            if i == 5:  # the disk fills up now: SQLite answers SQLITE_FULL from here on
                pages = writer._db.execute("PRAGMA page_count").fetchone()[0]
                writer._db.execute(f"PRAGMA max_page_count = {pages}")
        return committed, None

    committed, message = asyncio.run(fill())
    writer.close()
    assert message == "cannot write to the store: database or disk is full"
    reopened = Store(tmp_path)
    assert reopened.db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert reopened.tallies.counts()["completions"] == committed >= 6


def test_unreadable_run_directory_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(StoreError) as info:
        Store(blocker / "run")
    assert str(info.value).startswith(f"cannot open the store in {blocker / 'run'}")

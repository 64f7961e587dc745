"""Buying again survives ``kill -9``: a run killed while it buys an excluded provider's spoiled
samples again loses none of what was stored, and its resume buys each one left exactly once
more (what was in flight at the kill is the only allowance, as for any request)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest
from conftest import SimProcess, run_args

from draftgen.simulator.wire import REVISION_PROVIDER

TOKENIZER = "fixture:kimi-k2.5"
ROWS = 120
CONCURRENCY = 4

pytestmark = [pytest.mark.long, pytest.mark.slow]


def rebought_so_far(out) -> int:
    try:
        with sqlite3.connect(f"file:{out / 'draftgen.sqlite'}?mode=ro", uri=True) as db:
            return db.execute("SELECT count(*) FROM replaced_completions").fetchone()[0]
    except sqlite3.Error:
        return 0


def test_a_kill_while_buying_again_loses_nothing_and_the_resume_buys_the_rest_once(tmp_path):
    inputs = tmp_path / "p.jsonl"
    inputs.write_text(
        "".join(
            json.dumps({"id": f"r{i}", "messages": [{"role": "user", "content": f"Item {i}?"}]})
            + "\n"
            for i in range(ROWS)
        )
    )
    out = tmp_path / "run"
    sim = SimProcess(
        tmp_path, TOKENIZER, quirks=[("template_revision", 0.25)], extra=["--latency", "0.5"]
    )
    env = {**os.environ, "DRAFTGEN_TEST_KEY": "sk-test"}
    command = [
        sys.executable,
        "-m",
        "draftgen.cli",
        *run_args(sim, [inputs], out, TOKENIZER, "--concurrency", str(CONCURRENCY)),
    ]
    try:
        log = tmp_path / "first.log"
        with open(log, "wb") as handle:
            first = subprocess.Popen(command, env=env, stdout=handle, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while b"spoiled samples of" not in log.read_bytes():
            assert first.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "the run never started buying again"
            time.sleep(0.05)
        # Killed as soon as the first re-buy is committed: the others are in flight or queued.
        while not rebought_so_far(out):
            assert first.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "no re-buy was ever committed"
            time.sleep(0.02)
        os.kill(first.pid, signal.SIGKILL)
        first.wait()
        with sqlite3.connect(out / "draftgen.sqlite") as db:
            bought_before = db.execute("SELECT count(*) FROM replaced_completions").fetchone()[0]
            assert db.execute("SELECT count(*) FROM completions").fetchone()[0] == ROWS
        spoiled = sum(1 for r in sim.truth() if r["provider"] == REVISION_PROVIDER)
        assert 0 < bought_before <= spoiled
        second = subprocess.run(command, env=env, capture_output=True, timeout=300)
        assert second.returncode == 0, second.stderr.decode()
        truth = sim.truth()
    finally:
        sim.stop()
    with sqlite3.connect(out / "draftgen.sqlite") as db:
        replaced = db.execute("SELECT count(*) FROM replaced_completions").fetchone()[0]
        verified = db.execute("SELECT count(*) FROM samples WHERE verified = 1").fetchone()[0]
        completions = db.execute("SELECT count(*) FROM completions").fetchone()[0]
    # Not one request more to the provider left out, every spoiled sample replaced once.
    assert sum(1 for r in truth if r["provider"] == REVISION_PROVIDER) == spoiled
    assert replaced == spoiled and completions == ROWS and verified == ROWS
    # Bought: each row once, each spoiled one once more, and what was in flight at the kill.
    assert ROWS + spoiled <= len(truth) <= ROWS + spoiled + CONCURRENCY

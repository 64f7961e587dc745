"""SIGHUP (a closed terminal or SSH session) stops a live run the way Ctrl-C and SIGTERM do:
no new requests, the ones in flight stored, the summary printed, exit 128 + the signal's number
(130 for Ctrl-C, 143 for SIGTERM, 129 for SIGHUP)."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest
from conftest import SECRET, SimProcess, run_args, write_prompts

TOKENIZER = "fixture:qwen3"


def stored_count(out) -> int:
    # Read-only, and only once the run made it: a plain connect would create the database first.
    path = out / "draftgen.sqlite"
    if not path.exists():
        return 0
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return db.execute("SELECT count(*) FROM completions").fetchone()[0]
    finally:
        db.close()


@pytest.mark.parametrize(
    ("signum", "code"), [(signal.SIGHUP, 129), (signal.SIGTERM, 143), (signal.SIGINT, 130)]
)
def test_a_signal_stops_sending_stores_what_was_in_flight_and_prints_the_summary(
    tmp_path, signum, code
):
    sim = SimProcess(tmp_path, TOKENIZER, extra=["--latency", "0.3"])
    try:
        inputs = write_prompts(tmp_path / "p.jsonl", 200, invalid=False)
        out = tmp_path / "run"
        process = subprocess.Popen(
            [sys.executable, "-m", "draftgen.cli", *run_args(sim, [inputs], out, TOKENIZER)]
            + ["--concurrency", "4"],
            env={**os.environ, "DRAFTGEN_TEST_KEY": SECRET},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "the run stored nothing"
            try:
                if stored_count(out) >= 4:
                    break
            except sqlite3.Error:
                pass
            time.sleep(0.05)
        process.send_signal(signum)
        stdout, stderr = process.communicate(timeout=30)
        assert process.returncode == code, stderr
        assert "draftgen: stopping; waiting up to 30 s for" in stderr
        assert "interrupted; everything stored is kept and the same command resumes" in stderr
        assert stdout.startswith(f"run {out}\n")  # the summary
        # Every response the server produced reached the store: nothing in flight was lost.
        assert stored_count(out) == len(sim.truth()) < 40
    finally:
        sim.stop()

"""Ctrl-C while a run reconstructs what it bought (issue #41, item 3): answered at once, not after
the encoder is done with every long text; the run ends interrupted, everything stored."""

from __future__ import annotations

import json
import os
import queue
import signal
import sqlite3
import subprocess
import sys
import threading

import pytest
from conftest import SECRET, SimProcess, run_args

pytestmark = pytest.mark.long

TOKENIZER = "fixture:kimi-k2.5"
ROWS = 4
# Each answer a text with no safe cut (one run of letters), under --max-answer-bytes: encoded
# whole, seconds of the encoder's work apiece.
TEXT_BYTES = 3_000_000
ACK = (
    "draftgen: interrupted; reconstruction stops after the text in hand, every completion is "
    "stored and the same command reconstructs the rest"
)


def lines_of(stream, into: queue.Queue) -> None:
    for line in iter(stream.readline, b""):
        into.put(line.decode(errors="replace").rstrip("\n"))
    into.put(None)


def test_ctrl_c_while_reconstructing_is_answered_while_the_encoder_works(tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text(
        "".join(
            json.dumps({"id": f"q{i}", "messages": [{"role": "user", "content": f"Long {i}?"}]})
            + "\n"
            for i in range(ROWS)
        )
    )
    sim = SimProcess(
        tmp_path,
        TOKENIZER,
        extra=["--hostile", "oversized", "--hostile-share", "1"]
        + ["--hostile-bytes", str(TEXT_BYTES)],
    )
    out = tmp_path / "run"
    args = run_args(sim, [rows], out, TOKENIZER, "--concurrency", "4", "--stream")
    args += ["--max-response-bytes", str(4 * TEXT_BYTES)]
    process = subprocess.Popen(
        [sys.executable, "-m", "draftgen.cli", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        # The reconstruction in a thread, as a run this small has it.
        env={**os.environ, "DRAFTGEN_TEST_KEY": SECRET, "DRAFTGEN_RECONSTRUCT": "thread"},
    )
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lines_of, args=(process.stderr, lines), daemon=True).start()
    seen = []
    try:
        # The last progress line: every answer is stored, reconstruction has them all to do.
        while (line := lines.get(timeout=240)) is not None:
            seen.append(line)
            if f"rows {ROWS}/{ROWS}" in line:
                break
        assert line is not None, "\n".join(seen)
        process.send_signal(signal.SIGINT)
        while (line := lines.get(timeout=240)) not in (ACK, None):
            seen.append(line)
        # The word came while the encoder still works on texts of seconds each: the process
        # has not ended yet.
        assert line == ACK and process.poll() is None, "\n".join(seen)
        assert process.wait(timeout=240) == 128 + signal.SIGINT
    finally:
        process.kill()
        process.wait()
        sim.stop()
    db = sqlite3.connect(out / "draftgen.sqlite")
    try:
        completions = db.execute("SELECT count(*) FROM completions").fetchone()[0]
        samples = db.execute("SELECT count(*) FROM samples").fetchone()[0]
    finally:
        db.close()
    assert completions == ROWS and samples < ROWS

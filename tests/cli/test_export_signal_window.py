"""A signal that comes after the library's export has returned, before ``draftgen export`` has
printed what it wrote (issue #27): the export is complete, so the command prints it and exits 0,
never 130. The CLI is held between the two by a slowed ``say_snapshot`` and sent a real signal."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time

import pytest

from draftgen.records import Completion, TokenSample
from draftgen.store.database import CompletionWriter, Store

# The export command held after the library's export returned: it marks, then waits until the
# test has sent its signal (the signal is pending before the second marker exists).
HELD_AFTER_EXPORT = """
import sys, time
from pathlib import Path
import draftgen.cli.present as present

said = present.say_snapshot

def held(*args, **kwargs):
    Path(sys.argv[1] + ".held").touch()
    while not Path(sys.argv[1] + ".sent").exists():
        time.sleep(0.01)
    return said(*args, **kwargs)

present.say_snapshot = held
from draftgen.cli.main import main
sys.exit(main(sys.argv[2:]))
"""


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("window") / "run"
    store = Store(path)
    writer = CompletionWriter(store.path)
    completion = Completion("g", "p", "m", "", "a", None, "stop", "stop", {})
    keys = [f"k{i}" for i in range(3)]
    for key in keys:
        asyncio.run(writer.add_completion(key, key, 0, b'{"messages": []}', completion, 1, [], 0))
    writer.close()
    store.samples.add_samples([TokenSample(k, [1, 2, 3], 1, True, "ok") for k in keys])
    store.close()
    return path


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_after_the_export_returned_still_prints_it_and_exits_0(run_dir, tmp_path, signum):
    out, marker = tmp_path / "train.jsonl", tmp_path / "exported"
    args = ["export", str(run_dir), "--out", str(out)]
    process = subprocess.Popen(
        [sys.executable, "-c", HELD_AFTER_EXPORT, str(marker), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 20
    while not marker.with_suffix(".held").exists():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the export never returned"
        time.sleep(0.01)
    process.send_signal(signum)
    marker.with_suffix(".sent").touch()
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr
    assert stdout == f"wrote 3 rows to {out}\n"
    assert stderr == (
        f"draftgen: {signal.Signals(signum).name} came once the export was complete: "
        f"{out} is kept, and the command ends as it would have\n"
    )
    assert len(out.read_text().splitlines()) == 3

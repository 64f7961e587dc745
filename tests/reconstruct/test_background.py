"""Reconstruction beside a run, in a thread or in a process of its own: the same samples either
way; the process's errors, logs and death reach the run; the run's death ends the process;
no way of ending leaves multiprocessing's resource tracker anything to report."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sample_runs import TOKENIZER, make_run

from draftgen.reconstruct import background as reconstruction
from draftgen.reconstruct.background import (
    BackgroundReconstruction,
    ReconstructionError,
)
from draftgen.store.database import Store
from draftgen.store.samples import Samples
from draftgen.tokens.tokenizer import TokenizerLoadError


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    return make_run(tmp_path_factory.mktemp("reconstruction"))


def _copy_without_samples(run: Path, to: Path) -> Path:
    shutil.copytree(run, to)
    store = Store(to)
    store.samples.clear_samples()
    store.close()
    return to


def _samples(run: Path) -> list[tuple]:
    with sqlite3.connect(run / "draftgen.sqlite") as db:
        return db.execute("SELECT * FROM samples ORDER BY key").fetchall()


def _profile(run: Path) -> str:
    store = Store(run)
    try:
        return store.settings.meta("profile")
    finally:
        store.close()


async def _reconstruct(run: Path, tokenizer: str = TOKENIZER, kill_child: bool = False) -> int:
    """A generation that has just ended, followed by a reconstruction forced into a process."""
    background = BackgroundReconstruction(run, tokenizer, _profile(run), expected_chars=10**9)
    background.generation_started.set()
    if kill_child:
        process = background._worker._process
        await asyncio.sleep(0.2)
        os.kill(process.pid, signal.SIGKILL)
    return await background.finish()


def test_a_big_run_reconstructs_in_a_process_with_the_same_samples(finished_run, tmp_path):
    expected = _samples(finished_run)
    run = _copy_without_samples(finished_run, tmp_path / "copy")
    made = asyncio.run(_reconstruct(run))
    assert made == len(expected) > 40
    assert _samples(run) == expected


def test_the_size_decides_where_unless_the_environment_says(monkeypatch, tmp_path):
    monkeypatch.delenv(reconstruction.WHERE_ENV, raising=False)

    async def where(chars: int) -> str:
        background = BackgroundReconstruction(tmp_path, TOKENIZER, "kimi-k2", chars)
        background.cancel()
        return type(background._worker).__name__

    small, big = reconstruction.PROCESS_FROM_CHARS - 1, reconstruction.PROCESS_FROM_CHARS
    assert asyncio.run(where(small)) == "_ThreadWorker"
    assert asyncio.run(where(big)) == "_ProcessWorker"
    monkeypatch.setenv(reconstruction.WHERE_ENV, "thread")
    assert asyncio.run(where(big)) == "_ThreadWorker"


@pytest.mark.parametrize("where", ["thread", "process"])
def test_a_run_stopped_before_its_first_request_leaves_its_directory_untouched(
    monkeypatch, tmp_path, where
):
    """A run refused before its first request (a held lock, other settings) cancels the
    reconstruction it started beside it: nothing is written, no process is left."""
    monkeypatch.setenv(reconstruction.WHERE_ENV, where)
    run = tmp_path / "run"

    async def refused() -> None:
        background = BackgroundReconstruction(run, TOKENIZER, None, 10**9)
        process = getattr(background._worker, "_process", None)
        pid = process.pid if process is not None else None
        await asyncio.sleep(0.5)
        background.cancel()
        if where == "process":
            assert not _alive(pid)
        else:
            assert await background._worker._task == 0

    asyncio.run(refused())
    assert not run.exists()


def test_the_process_errors_and_logs_reach_the_run(finished_run, tmp_path, caplog):
    run = _copy_without_samples(finished_run, tmp_path / "copy")
    with pytest.raises(TokenizerLoadError, match="unknown tokenizer fixture 'no-such'"):
        asyncio.run(_reconstruct(run, "fixture:no-such"))
    caplog.set_level(logging.INFO, logger="draftgen")
    asyncio.run(_reconstruct(run))
    # The fast encoder's verdict, said in the reconstruction process, logged here.
    assert any(r.name == "draftgen.encoder" and "identical" in r.message for r in caplog.records)


def test_a_killed_process_is_reported_and_a_resume_finishes(finished_run, tmp_path):
    run = _copy_without_samples(finished_run, tmp_path / "copy")
    with pytest.raises(ReconstructionError, match="exit code -9.*reconstructs what it left"):
        asyncio.run(_reconstruct(run, kill_child=True))
    # What the killed process wrote stays; the resume makes exactly the rest, none twice.
    kept = len(_samples(run))
    expected = _samples(finished_run)
    assert asyncio.run(_reconstruct(run)) == len(expected) - kept
    assert _samples(run) == expected


def test_the_process_ends_when_the_run_is_killed(finished_run, tmp_path):
    run = _copy_without_samples(finished_run, tmp_path / "copy")
    parent = _run_script(
        f"    b = BackgroundReconstruction(Path({str(run)!r}), {TOKENIZER!r},"
        " 'kimi-k2', 10**9)\n"
        "    await asyncio.sleep(2)  # the process is past its start, waiting for answers\n"
        "    print(b._worker._process.pid, flush=True)\n"
        "    await asyncio.sleep(60)\n"
    )
    try:
        child = int(parent.stdout.readline())
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and _alive(child):
            time.sleep(0.1)
        assert not _alive(child), "the reconstruction process outlived its run"
        # The stream closes when the last process writing to it (the child, the resource
        # tracker multiprocessing starts with it) has ended.
        _assert_quiet(parent.communicate(timeout=20)[1])
    finally:
        parent.kill()


def test_a_process_that_ends_without_clean_up_leaves_nothing_to_report(finished_run, tmp_path):
    """As after a crash or a double Ctrl-C: ``os._exit`` runs no finalizer."""
    run = _copy_without_samples(finished_run, tmp_path / "copy")
    parent = _run_script(
        f"    b = BackgroundReconstruction(Path({str(run)!r}), {TOKENIZER!r},"
        " 'kimi-k2', 10**9)\n"
        "    b.generation_started.set()\n"
        "    print(await b.finish(), flush=True)\n"
        "    os._exit(0)\n"
    )
    try:
        made, errors = parent.communicate(timeout=120)
        assert (parent.returncode, int(made)) == (0, len(_samples(finished_run)))
        _assert_quiet(errors)
    finally:
        parent.kill()


def _run_script(main: str) -> subprocess.Popen:
    """A Python process running the body ``main`` of an ``async def main()``."""
    script = (
        "import asyncio, os\n"
        "from pathlib import Path\n"
        "from draftgen.reconstruct.background import BackgroundReconstruction\n"
        f"async def main():\n{main}"
        "asyncio.run(main())\n"
    )
    return subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _assert_quiet(stderr: str) -> None:
    """No word from multiprocessing's resource tracker ("leaked semaphore objects")."""
    assert "resource_tracker" not in stderr and "leaked" not in stderr, stderr


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its reaper counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_failed_write_of_samples_stops_reconstruction_and_keeps_what_was_written(
    finished_run, tmp_path, monkeypatch
):
    """Samples are written a batch behind, in a thread: a write that fails is raised by the
    next batch's, and the batches written before it stay."""
    from draftgen.profiles import get_profile
    from draftgen.store.database import StoreError

    run = _copy_without_samples(finished_run, tmp_path / "copy")
    writes = []
    real = Samples.add_samples

    def add_samples(self, samples):
        writes.append(len(samples))
        if len(writes) == 2:
            raise StoreError("disk full")
        real(self, samples)

    monkeypatch.setattr(Samples, "add_samples", add_samples)
    store = Store(run)
    try:
        with pytest.raises(StoreError, match="disk full"):
            reconstruction.reconstruct_all(store, TOKENIZER, get_profile(_profile(run)), batch=8)
    finally:
        store.close()
    assert len(_samples(run)) == writes[0] == 8

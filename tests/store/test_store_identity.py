"""The store's identity under attack, through real runs against the simulator: a database deleted
or replaced mid-run, an emptied or foreign database file, a lock file deleted under a run, a disk
that refuses writes. Each time, every completion the simulator served is stored exactly once, or
kept where the error says."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import SECRET, SimProcess, draftgen, fill_disk, run_args, write_prompts

from draftgen.api import RunDir
from draftgen.records import Completion
from draftgen.run.pipeline import RunError, RunOptions, run
from draftgen.simulator import SimConfig, SimulatorThread
from draftgen.store import database, writer
from draftgen.store.database import (
    INSERT_COMPLETION,
    INSERT_ENDPOINT_EVENT,
    CompletionWriter,
    RunLock,
    Store,
    StoreError,
    StoreHalted,
    read_side_file,
    side_file_line,
)
from draftgen.store.reserve import Reserve
from draftgen.store.writer import _completion_ids  # the keys of a refused group

TOKENIZER = "fixture:kimi-k2.5"
FULL = "database or disk is full"


def write_rows(path: Path, count: int) -> Path:
    path.write_text(
        "".join(
            json.dumps({"id": f"r{i}", "messages": [{"role": "user", "content": f"Q{i}?"}]}) + "\n"
            for i in range(count)
        )
    )
    return path


def stored(db: Path) -> int | None:
    """Completions in the store at ``db``; None if there is none. Not read-only: a read-only
    connection leaves the WAL journal files it makes behind."""
    if not db.exists():
        return None
    connection = sqlite3.connect(db)
    try:
        return connection.execute("SELECT count(*) FROM completions").fetchone()[0]
    except sqlite3.Error:
        return None
    finally:
        connection.close()


class AfterStored(threading.Thread):
    """Does ``action`` once the store at ``db`` holds ``count`` completions."""

    def __init__(self, db: Path, count: int, action) -> None:
        super().__init__(daemon=True)
        self.db, self.count, self.action = db, count, action
        self.done = False

    def run(self) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if (stored(self.db) or 0) >= self.count:
                self.action()
                self.done = True
                return
            time.sleep(0.002)


@pytest.fixture
def sim(monkeypatch):
    monkeypatch.setenv("OPENROUTER_API_KEY", "test")
    config = SimConfig(tokenizer=TOKENIZER, seed=3, min_tokens=8, max_tokens=40, latency=0.05)
    with SimulatorThread(config) as simulator:
        yield simulator


def options(tmp_path: Path, sim: SimulatorThread, rows: int = 40, **extra) -> RunOptions:
    return RunOptions(
        no_calibrate=True,
        inputs=[str(write_rows(tmp_path / "p.jsonl", rows))],
        model="m",
        tokenizer=TOKENIZER,
        out=tmp_path / "run",
        base_url=sim.base_url,
        concurrency=extra.pop("concurrency", 4),
        retry_base_delay=0.01,
        progress_interval=3600,
        **extra,
    )


# -- the database deleted or replaced under a run ------------------------------------------------


def test_a_store_deleted_mid_run_stops_it_and_the_saved_store_is_resumed(tmp_path, sim):
    run_options = options(tmp_path, sim)
    db = run_options.out / "draftgen.sqlite"
    deleter = AfterStored(db, 8, db.unlink)
    deleter.start()
    with pytest.raises(RunError) as info:
        asyncio.run(run(run_options))
    assert deleter.done
    [saved] = sorted(run_options.out.glob("recovered-*.sqlite"))
    assert str(info.value) == (
        f"{db} was deleted or replaced while the run was writing to it; the store it held is "
        f"saved in {saved}, which the same command resumes from"
    )
    served = len(sim.truth)
    # Before: the run went on into the unlinked file, exit 0, and the resume bought all again.
    assert 8 <= stored(saved) == served < 40  # the requests in flight were stored too
    assert sorted(p.name for p in run_options.out.iterdir()) == sorted(
        ["draftgen.journal", "draftgen.lock", "rejected.jsonl", saved.name]
    )  # the lost file's journal is gone: SQLite would lay it over the next store
    asyncio.run(run(run_options))
    assert stored(db) == len(sim.truth) == 40  # the resume bought only what was missing
    assert not list(run_options.out.glob("recovered-*"))


def test_a_store_replaced_mid_run_stops_it_and_the_resume_asks_which_to_keep(tmp_path, sim):
    run_options = options(tmp_path, sim)
    db = run_options.out / "draftgen.sqlite"
    Store(tmp_path / "other").close()  # another store, put in place of the run's
    replacer = AfterStored(db, 8, lambda: os.replace(tmp_path / "other" / "draftgen.sqlite", db))
    replacer.start()
    with pytest.raises(RunError) as info:
        asyncio.run(run(run_options))
    [saved] = sorted(run_options.out.glob("recovered-*.sqlite"))
    assert str(info.value) == (
        f"{db} was deleted or replaced while the run was writing to it; the store it held is "
        f"saved in {saved}: move it to {db}, in place of the file put there, and rerun the same "
        "command to resume"
    )
    assert 8 <= stored(saved) == len(sim.truth) < 40
    assert stored(db) == 0  # the file put there is untouched
    assert not (run_options.out / "draftgen.sqlite-wal").exists()
    with pytest.raises(StoreError) as info:
        asyncio.run(run(run_options))
    assert str(info.value) == (
        f"{saved} holds the store of a run whose draftgen.sqlite was replaced under it: move it "
        f"to {db} to resume from it, or out of {run_options.out} to resume from the store there"
    )
    os.replace(saved, db)
    asyncio.run(run(run_options))
    assert stored(db) == len(sim.truth) == 40


def test_a_store_deleted_after_the_last_commit_is_saved_before_the_run_ends(tmp_path):
    store = Store.open_run(tmp_path / "run")
    writer = store.open_writer()

    async def write(count: int) -> None:
        for i in range(count):
            await writer.add_completion(f"k{i}", "s", i, b"{}", answer(), 1, [], 0.0)

    asyncio.run(write(3))
    writer.close()
    store.path.unlink()
    with pytest.raises(StoreHalted) as info:
        store.identity.check(store.db)  # what the run does before its summary
    [saved] = sorted((tmp_path / "run").glob("recovered-*.sqlite"))
    assert str(info.value).endswith(f"saved in {saved}, which the same command resumes from")
    store.close()
    assert stored(saved) == 3
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == [
        "draftgen.journal",
        "draftgen.lock",
        saved.name,
    ]


# -- an emptied or foreign database file ---------------------------------------------------------


@pytest.mark.parametrize(
    "content, message",
    [
        (
            b"",
            "{db} is empty (0 bytes) but {out} holds a run's files (draftgen.lock, rejected.jsonl)"
            ": put the store back from a backup, or delete it to start the run over (every "
            "completion is then bought again)",
        ),
        (
            b"<html>not a database</html>" * 200,
            "{db} is not an SQLite database: put the run's store back from a backup, or move it "
            "out of {out} to start the run over",
        ),
    ],
)
def test_an_emptied_or_foreign_store_in_a_run_directory_is_refused(tmp_path, sim, content, message):
    run_options = options(tmp_path, sim, rows=5)
    asyncio.run(run(run_options))
    db, out = run_options.out / "draftgen.sqlite", run_options.out
    (out / "draftgen.journal").unlink()  # a store from before the record: nothing rebuilds it
    db.write_bytes(content)
    with pytest.raises(StoreError) as info:
        asyncio.run(run(run_options))
    expected = message.format(db=db, out=out)
    assert str(info.value) == expected
    with pytest.raises(StoreError) as info:
        RunDir(out).status()  # what status, export and report say
    assert str(info.value) == expected
    assert db.read_bytes() == content  # never made a new store
    assert len(sim.truth) == 5  # nothing bought again


def test_a_brand_new_directory_still_starts_a_run(tmp_path):
    Store.open_run(tmp_path / "new").close()
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "draftgen.sqlite").touch()  # no run's files beside it
    Store.open_run(tmp_path / "empty").close()
    assert stored(tmp_path / "empty" / "draftgen.sqlite") == 0


# -- the lock ------------------------------------------------------------------------------------


def other_process(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)


def test_deleting_the_lock_file_does_not_free_the_directory(tmp_path):
    lock = RunLock(tmp_path)
    lock.acquire()
    (tmp_path / "draftgen.lock").unlink()
    try:
        other = other_process(
            "from draftgen.store.database import RunLock, StoreError\n"
            f"print(RunLock.holder({str(tmp_path)!r}))\n"
            f"try:\n    RunLock({str(tmp_path)!r}).acquire()\nexcept StoreError as e:\n"
            "    print(e)\n"
        )
        assert other.stdout.splitlines() == [
            "another process",
            f"{tmp_path} is in use by another draftgen process (its draftgen.lock was deleted); "
            "wait for it to finish or stop it before running again on this directory",
        ]
        assert not (tmp_path / "draftgen.lock").exists()  # the refused one made nothing
        lock.keep()  # what the run's writer does after each commit
        assert (tmp_path / "draftgen.lock").read_text() == f"pid {os.getpid()}"
        assert RunLock.holder(tmp_path) == f"pid {os.getpid()}"
        assert RunLock.holder(tmp_path, ignore_own=True) is None
    finally:
        lock.release()
    take = f"from draftgen.store.database import RunLock\nRunLock({str(tmp_path)!r}).acquire()"
    assert other_process(take).returncode == 0  # released: free again


@pytest.mark.long
def test_a_second_run_is_refused_after_the_lock_file_is_deleted(tmp_path):
    sim = SimProcess(tmp_path, TOKENIZER, extra=["--latency", "0.2"])
    try:
        inputs = write_prompts(tmp_path / "p.jsonl", 30, invalid=False)
        out = tmp_path / "run"
        flags = ("--concurrency", "2")
        first = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "draftgen.cli",
                *run_args(sim, [inputs], out, TOKENIZER, *flags),
            ],
            env={**os.environ, "DRAFTGEN_TEST_KEY": SECRET},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 60
        while (stored(out / "draftgen.sqlite") or 0) < 3 and time.monotonic() < deadline:
            assert first.poll() is None, first.communicate()
            time.sleep(0.02)
        (out / "draftgen.lock").unlink()
        # Before: the second run took a new lock file and ran beside the first (536 served for
        # 300 prompts).
        second = draftgen(*run_args(sim, [inputs], out, TOKENIZER))
        assert second.returncode == 2
        assert second.stderr.splitlines()[-1] in (
            f"draftgen: {out} is in use by {who}; wait for it to finish or stop it before "
            "running again on this directory"
            for who in (
                f"draftgen pid {first.pid}",  # the first run already made its lock file again
                "another draftgen process (its draftgen.lock was deleted)",
            )
        )
        assert RunDir(out).status()["active_run"] in (f"pid {first.pid}", "another process")
        while lock_text(out) != f"pid {first.pid}" and time.monotonic() < deadline:
            time.sleep(0.02)  # the first run makes it again at its next commit
        assert RunDir(out).status()["active_run"] == f"pid {first.pid}"
        _, stderr = first.communicate(timeout=60)
        assert first.returncode == 0, stderr
        assert "draftgen.lock was deleted or replaced during the run; it is made again" in stderr
        assert stored(out / "draftgen.sqlite") == len(sim.truth())  # nothing bought twice
    finally:
        sim.stop()


def lock_text(out: Path) -> str | None:
    try:
        return (out / "draftgen.lock").read_text()
    except FileNotFoundError:
        return None


# -- a disk that refuses writes ------------------------------------------------------------------


class RefusedWrites:
    """``CompletionWriter._write`` failing with SQLITE_FULL on chosen calls (or while ``full``),
    noting the keys of every group it refused."""

    def __init__(self, monkeypatch, calls=(), full_from: int | None = None) -> None:
        self.calls, self.full_from, self.count = set(calls), full_from, 0
        self.refused_keys: list[str] = []
        self.full = full_from is not None
        original = CompletionWriter._write

        def write(writer, batch):
            self.count += 1
            if self.count in self.calls or (self.full and self.count >= self.full_from):
                self.refused_keys += [key for key, _ in _completion_ids(batch)]
                raise sqlite3.OperationalError(FULL)
            return original(writer, batch)

        monkeypatch.setattr(CompletionWriter, "_write", write)


def store_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "draftgen.store"]


@pytest.fixture
def no_reserve(monkeypatch):
    """No room held in reserve (the disk had none as the run started): the writer's patience
    alone keeps the writes a full disk refuses."""
    monkeypatch.setattr(Reserve, "hold", lambda reserve: False)


def test_a_disk_full_for_a_while_holds_the_writes_and_stores_each_once(
    tmp_path, sim, monkeypatch, caplog, no_reserve
):
    monkeypatch.setattr(writer, "RETRY_FIRST_DELAY", 0.01)
    refused = RefusedWrites(monkeypatch, calls=range(3, 9))  # six refusals in a row
    caplog.set_level(logging.WARNING, "draftgen.store")
    run_options = options(tmp_path, sim, concurrency=8)
    asyncio.run(run(run_options))
    # Before: the group's completions were thrown away and the run stopped.
    assert refused.refused_keys  # the group was refused six times, then stored
    assert stored(run_options.out / "draftgen.sqlite") == len(sim.truth) == 40
    assert not list(run_options.out.glob("unstored-*"))
    warnings = store_warnings(caplog)
    assert re.fullmatch(
        rf"cannot write to the store \({FULL}\): \d+ writes wait in memory and are tried again "
        rf"for up to 300 s more; free disk space in {re.escape(str(run_options.out))}",
        warnings[0],
    )
    assert re.fullmatch(r"the store took the waiting writes after \d+\.\d s", warnings[1])
    assert len(warnings) == 2


def test_a_disk_full_past_patience_keeps_the_writes_in_a_side_file_the_resume_imports(
    tmp_path, sim, monkeypatch, no_reserve
):
    monkeypatch.setattr(writer, "STORE_PATIENCE", 1.0)
    refused = RefusedWrites(monkeypatch, full_from=4)
    run_options = options(tmp_path, sim)
    db = run_options.out / "draftgen.sqlite"
    with pytest.raises(RunError) as info:
        asyncio.run(run(run_options))
    [side] = sorted(run_options.out.glob("unstored-*.jsonl"))
    assert str(info.value) == (
        f"cannot write to the store for 1 s ({FULL}); the writes it refused are kept in {side}, "
        "which the next run imports: free disk space and rerun the same command to resume"
    )
    kept = [params[0] for sql, params in read_side_file(side) if sql == INSERT_COMPLETION]
    # Each refused completion once, the ones in flight when the run stopped too: none lost.
    assert sorted(kept) == sorted(set(refused.refused_keys))
    assert stored(db) + len(kept) == len(sim.truth) < 40
    refused.full = False  # space was freed
    asyncio.run(run(run_options))
    assert not side.exists()
    assert stored(db) == len(sim.truth) == 40  # the kept ones were imported, not bought again


def test_a_write_that_cannot_be_kept_anywhere_names_its_completions(
    tmp_path, sim, monkeypatch, caplog, no_reserve
):
    monkeypatch.setattr(writer, "STORE_PATIENCE", 0.0)
    RefusedWrites(monkeypatch, calls={3})

    def no_space(writer, batch):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(CompletionWriter, "_append_side_file", no_space)
    caplog.set_level(logging.WARNING, "draftgen.store")
    run_options = options(tmp_path, sim, concurrency=1)
    with pytest.raises(RunError) as info:
        asyncio.run(run(run_options))
    stored_ids = stored_generations(run_options.out / "draftgen.sqlite")
    [generation] = [g for g in sim.truth if g not in stored_ids]
    key = re.search(r"completions were paid for and are not stored: (\S+) ", caplog.text)[1]
    assert re.fullmatch(
        rf"cannot write to the store \({FULL}\) nor to {re.escape(str(run_options.out))}/"
        r"unstored-\d{8}T\d{6}-\d+\.jsonl \(\[Errno 28\] No space left on device\): the 1 "
        r"completions of the failed write are lost, and the log lists their keys and generation "
        rf"ids \({key} \(generation {generation}\)\); free disk space and rerun the same command",
        str(info.value),
    )
    assert len(sim.truth) == 3  # two stored, and the one the error names


def stored_generations(db: Path) -> set[str]:
    connection = sqlite3.connect(db)
    try:
        return {g for (g,) in connection.execute("SELECT generation_id FROM completions")}
    finally:
        connection.close()


def test_a_side_file_is_imported_once_even_if_the_import_was_cut_short(tmp_path):
    store = Store.open_run(tmp_path / "run")
    store.close()
    lines = [side_file_line(INSERT_ENDPOINT_EVENT, ("http://e", "ejected", "x", 1.0))]
    lines += [side_file_line(sql, params) for sql, params in completion_statements("k1")]
    side = tmp_path / "run" / "unstored-20260101T000000-1.jsonl"
    side.write_bytes(b"".join(lines) + b'{"sql": "INSERT')  # a line cut short by a crash
    store = Store.open_run(tmp_path / "run")
    assert not side.exists()
    store.close()
    # As if the process died after the import's commit and before the file was deleted.
    side.write_bytes(b"".join(lines))
    with sqlite3.connect(tmp_path / "run" / "draftgen.sqlite") as db:
        db.execute("INSERT INTO meta (name, value) VALUES ('imported ' || ?, '4')", (side.name,))
    with Store.open_run(tmp_path / "run") as store:
        assert store.tables.row_count("endpoint_events") == 1
        assert [c.key for c in store.completions.read()] == ["k1"]
        assert store.settings.meta(f"imported {side.name}") is None
    assert not side.exists()


def answer() -> Completion:
    return Completion("g", "p", "m", None, "hi", None, "stop", None, usage={"prompt_tokens": 1})


def completion_statements(key: str) -> list[tuple[str, tuple]]:
    return database.completion_statements(key, "s", 0, b'{"messages": []}', answer(), 1, [], 0.0)


def fill_for_a_while(disk: Path, seconds: float) -> None:
    """Fill ``disk`` to the last byte, keep it full for ``seconds``, then free it."""
    ballast = fill_disk(disk)
    try:
        time.sleep(seconds)
    finally:
        ballast.unlink()


def test_a_real_full_disk_for_a_while_loses_nothing(tmp_path, sim, small_disk, caplog, no_reserve):
    caplog.set_level(logging.WARNING, "draftgen.store")
    run_options = options(tmp_path, sim)
    run_options.out = small_disk / "run"
    db = run_options.out / "draftgen.sqlite"
    filler = AfterStored(db, 8, lambda: fill_for_a_while(small_disk, 1.5))
    filler.start()
    asyncio.run(run(run_options))
    assert filler.done
    assert stored(db) == len(sim.truth) == 40  # every completion of the full disk's time kept
    assert not list(run_options.out.glob("unstored-*"))
    warnings = store_warnings(caplog)
    # The record is appended before each commit, so either may meet the full disk first.
    journal_full = r"cannot append to \S+/draftgen\.journal: No space left on device"
    refused = rf"({re.escape(FULL)}|{journal_full})"
    assert re.match(rf"cannot write to the store \({refused}\): ", warnings[0]), warnings[0]
    assert re.fullmatch(r"the store took the waiting writes after \d\.\d s", warnings[-1])


def test_a_store_deleted_mid_batch_run_stops_it_and_the_resume_pays_nothing_twice(tmp_path, sim):
    # Batch mode writes through the run's writer too: the same stop, the same saved store.
    run_options = options(tmp_path, sim, batch=True, batch_size=5, batch_poll=0.05)
    db = run_options.out / "draftgen.sqlite"
    deleter = AfterStored(db, 5, db.unlink)
    deleter.start()
    with pytest.raises(StoreError, match="was deleted or replaced while the run was writing"):
        asyncio.run(run(run_options))
    assert deleter.done
    [saved] = sorted(run_options.out.glob("recovered-*.sqlite"))
    assert 5 <= stored(saved) <= 40  # batches finish fast here: all may be in by then
    asyncio.run(run(run_options))
    assert stored(db) == 40
    assert len(sim.truth) == 40  # every row bought once

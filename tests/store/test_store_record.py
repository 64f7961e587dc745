"""The record beside the store (``draftgen.journal``) under attack, through real runs against the
simulator: a store truncated, overwritten, deleted; a disk that fills and stays full; a directory
made read-only for a while. Each time every answer the simulator served is stored exactly once,
and nothing is bought twice."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import test_store_identity
from conftest import fill_disk
from test_store_identity import (
    AfterStored,
    answer,
    completion_statements,
    options,
    store_warnings,
    stored,
)

from draftgen.api import RunDir
from draftgen.reconstruct import background
from draftgen.run.pipeline import RunError, run
from draftgen.store import journal, reserve, samples, writer
from draftgen.store.database import (
    INSERT_COMPLETION,
    CompletionWriter,
    Store,
    StoreError,
    StoreHalted,
    read_side_file,
)

sim = test_store_identity.sim  # the fixture: a simulator in a thread

REBUILT = (
    r"{db} is {damage}: it is moved to {out}/broken-\d{{8}}T\d{{6}}-\d+\.sqlite, and the store "
    r"is rebuilt with the {count} completions of {out}/draftgen\.journal \(samples and verdicts "
    r"are made again by the reconstruction\)"
)


def recorded_keys(out: Path) -> list[str]:
    """The keys of the completions the record in ``out`` stores, in its order."""
    return [
        params[0]
        for sql, params in read_side_file(out / "draftgen.journal")
        if sql == INSERT_COMPLETION or sql.startswith('INSERT OR IGNORE INTO "completions"')
    ]


def table(db: Path, sql: str) -> list[tuple]:
    connection = sqlite3.connect(db)
    try:
        return connection.execute(sql).fetchall()
    finally:
        connection.close()


# -- the record ----------------------------------------------------------------------------------


def test_every_write_is_in_the_record_with_one_fsync_per_group(tmp_path, monkeypatch):
    store = Store.open_run(tmp_path / "run")
    writer = store.open_writer()
    synced, commits = [], []
    original_fsync, original_write = os.fsync, CompletionWriter._write

    def fsync(fd):
        if os.readlink(f"/proc/self/fd/{fd}").endswith("draftgen.journal"):
            synced.append(fd)
        return original_fsync(fd)

    def write(self, batch):
        commits.append(len(batch))
        return original_write(self, batch)

    monkeypatch.setattr(journal.os, "fsync", fsync)
    monkeypatch.setattr(CompletionWriter, "_write", write)

    async def go():
        await asyncio.gather(
            *(
                writer.add_completion(f"k{i}", "s", i, b"{}", answer(), 1, [], 0.0)
                for i in range(200)
            )
        )
        await writer.add_failure("f1", "s", 0, "rejected", 1, [])

    asyncio.run(go())
    writer.close()
    store.close()
    # Before: no record at all.
    assert recorded_keys(tmp_path / "run") == [f"k{i}" for i in range(200)]
    assert len(synced) == len(commits) < 201  # one fsync per group, not per answer
    failures = [
        p for sql, p in read_side_file(tmp_path / "run" / "draftgen.journal") if "failures (" in sql
    ]
    assert [p[0] for p in failures] == ["f1"]


CHILD = """
import asyncio, sys
from draftgen.store.database import Store
from draftgen.records import Completion
store = Store.open_run(sys.argv[1])
writer = store.open_writer()
answer = Completion("g", "p", "m", None, "hi", None, "stop", None, usage={"prompt_tokens": 1})
async def go():
    for i in range(100000):
        await writer.add_completion(f"k{i}", "s", i, b"{}", answer, 1, [], 0.0)
        print(f"k{i}", flush=True)
asyncio.run(go())
"""


def test_a_kill_9_keeps_every_acknowledged_write_in_the_record(tmp_path):
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path / "run")], stdout=subprocess.PIPE, text=True
    )
    acknowledged = [child.stdout.readline().strip() for _ in range(300)]
    child.send_signal(signal.SIGKILL)
    acknowledged += child.stdout.read().split()
    child.wait()
    recorded = recorded_keys(tmp_path / "run")
    assert recorded[: len(acknowledged)] == acknowledged  # each once, in order
    assert len(recorded) - len(acknowledged) <= 1  # at most the one not yet acknowledged


# -- a store truncated, overwritten or deleted ---------------------------------------------------


def test_a_store_truncated_after_a_checkpoint_is_rebuilt_and_the_run_resumes(tmp_path, sim, caplog):
    run_options = options(tmp_path, sim)
    asyncio.run(run(run_options))
    out = run_options.out
    db = out / "draftgen.sqlite"
    whole = db.read_bytes()
    os.truncate(db, len(whole) // 2)
    caplog.set_level(logging.WARNING, "draftgen.store")
    # Before: RunError "database disk image is malformed", 40 paid completions unreadable.
    asyncio.run(run(run_options))
    assert stored(db) == 40
    assert len(sim.truth) == 40  # nothing bought again
    [broken] = sorted(out.glob("broken-*.sqlite"))
    assert broken.read_bytes() == whole[: len(whole) // 2]  # moved aside, never deleted
    [rebuilt] = [w for w in store_warnings(caplog) if "rebuilt" in w]
    damage = re.escape("damaged (database disk image is malformed)")
    assert re.fullmatch(
        REBUILT.format(db=re.escape(str(db)), damage=damage, out=re.escape(str(out)), count=40),
        rebuilt,
    )
    assert RunDir(out).status()["completions"] == 40
    assert table(db, "SELECT count(*) FROM samples") == [(40,)]  # made again


def test_a_page_overwritten_is_rebuilt_by_status_and_the_resume_buys_nothing(tmp_path, sim):
    run_options = options(tmp_path, sim)
    asyncio.run(run(run_options))
    db = run_options.out / "draftgen.sqlite"
    before = table(db, "SELECT key, content, cost FROM completions ORDER BY key")
    with open(db, "r+b") as handle:
        handle.seek(4096 * 2)
        handle.write(os.urandom(4096))
    # Before: status and run exited 1 ("database disk image is malformed").
    assert RunDir(run_options.out).status()["completions"] == 40
    assert table(db, "SELECT key, content, cost FROM completions ORDER BY key") == before
    asyncio.run(run(run_options))
    assert len(sim.truth) == 40
    assert len(list(run_options.out.glob("broken-*.sqlite"))) == 1


@pytest.mark.parametrize(
    "content, damage",
    [(b"", "empty (0 bytes)"), (b"<html>not a database</html>" * 200, "not an SQLite database")],
)
def test_an_emptied_or_foreign_store_beside_its_record_is_rebuilt(
    tmp_path, sim, caplog, content, damage
):
    run_options = options(tmp_path, sim, rows=5)
    asyncio.run(run(run_options))
    out = run_options.out
    db = out / "draftgen.sqlite"
    db.write_bytes(content)
    caplog.set_level(logging.WARNING, "draftgen.store")
    # Before: refused ("is empty (0 bytes) but ... holds a run's files", "is not an SQLite
    # database"): the user was told to find a backup.
    assert RunDir(out).status()["completions"] == 5
    [broken] = sorted(out.glob("broken-*.sqlite"))
    assert broken.read_bytes() == content
    [rebuilt] = [w for w in store_warnings(caplog) if "rebuilt" in w]
    assert re.fullmatch(
        REBUILT.format(
            db=re.escape(str(db)), damage=re.escape(damage), out=re.escape(str(out)), count=5
        ),
        rebuilt,
    )
    asyncio.run(run(run_options))
    assert len(sim.truth) == 5  # nothing bought again


def test_a_store_deleted_before_the_reconstruction_opens_it_resumes_with_the_same_command(
    tmp_path, sim, monkeypatch
):
    # The reconstruction opens the store once its tokenizer is loaded (seconds for a real one):
    # the store is deleted before that.
    following = background._follow_run

    def late(*args):
        time.sleep(1.0)
        return following(*args)

    monkeypatch.setattr(background, "_follow_run", late)
    run_options = options(tmp_path, sim)
    db = run_options.out / "draftgen.sqlite"
    deleter = AfterStored(db, 1, lambda: (time.sleep(0.5), db.unlink()))
    deleter.start()
    with pytest.raises(RunError, match="was deleted or replaced while the run was writing"):
        asyncio.run(run(run_options))
    assert deleter.done
    assert not db.exists()  # before: the reconstruction made a new store there
    # Before: "recovered-... holds the store of a run whose draftgen.sqlite was replaced under
    # it: move it to ..." until the user moved it by hand.
    asyncio.run(run(run_options))
    assert stored(db) == len(sim.truth) == 40


def test_a_store_deleted_after_the_run_is_rebuilt_from_the_record(tmp_path, sim):
    run_options = options(tmp_path, sim)
    asyncio.run(run(run_options))
    db = run_options.out / "draftgen.sqlite"
    db.unlink()
    # Before: "holds no draftgen run (draftgen.sqlite is missing)", and a run bought all again.
    assert RunDir(run_options.out).status()["completions"] == 40
    asyncio.run(run(run_options))
    assert stored(db) == len(sim.truth) == 40
    assert not list(run_options.out.glob("broken-*"))  # nothing was there to move aside


def test_replaying_the_record_twice_stores_nothing_twice(tmp_path):
    store = Store.open_run(tmp_path / "run")
    writer = store.open_writer()

    async def go():
        for i in range(5):
            await writer.add_completion(f"k{i}", "s", i, b"{}", answer(), 1, [], 0.0)
        await writer.add_failure("f", "s", 9, "rejected", 2, [{"status": 500}])
        await writer.write(completion_statements("k0"))  # the same answer again: kept once

    asyncio.run(go())
    writer.close()
    store.close()
    out = tmp_path / "run"
    original = {t: table(out / "draftgen.sqlite", f"SELECT * FROM {t}") for t in TABLES}
    assert journal.rebuild(out, "lost") == 5
    db = sqlite3.connect(out / "draftgen.sqlite", isolation_level=None)
    assert journal.replay(db, out / "draftgen.journal") == 0
    db.close()
    assert {t: table(out / "draftgen.sqlite", f"SELECT * FROM {t}") for t in TABLES} == original


TABLES = ("completions", "failures", "server_ids", "logprob_tokens")


def test_a_store_from_before_the_record_is_copied_into_one_as_a_run_opens_it(tmp_path):
    store = Store(tmp_path / "run")
    for i in range(3):
        for sql, params in completion_statements(f"k{i}"):
            store.db.execute(sql, params)
    store.settings.set_meta("settings", "{}")
    store.close()
    assert not (tmp_path / "run" / "draftgen.journal").exists()
    Store.open_run(tmp_path / "run").close()
    assert recorded_keys(tmp_path / "run") == ["k0", "k1", "k2"]
    (tmp_path / "run" / "draftgen.sqlite").unlink()
    with Store.open_run(tmp_path / "run") as store:
        assert [c.key for c in store.completions.read()] == ["k0", "k1", "k2"]
        assert store.settings.meta("settings") == "{}"


# -- a disk that fills and stays full ------------------------------------------------------------


@pytest.fixture
def small_disk(small_disk, monkeypatch):
    """conftest's 8 MiB tmpfs, 1 MiB of it held in reserve by a run."""
    monkeypatch.setattr(reserve, "RESERVE_BYTES", 1 << 20)
    return small_disk


def test_a_disk_that_stays_full_stops_the_run_with_the_answers_in_flight_stored(
    tmp_path, sim, small_disk, caplog
):
    caplog.set_level(logging.WARNING, "draftgen.store")
    run_options = options(tmp_path, sim, concurrency=8)
    run_options.out = small_disk / "run"
    db = run_options.out / "draftgen.sqlite"
    filled = []
    filler = AfterStored(db, 8, lambda: filled.append((stored(db), fill_disk(small_disk))))
    filler.start()
    with pytest.raises(RunError) as info:
        asyncio.run(run(run_options))
    assert filler.done
    [(before, ballast)] = filled
    said = re.fullmatch(
        rf"the disk holding {re.escape(str(run_options.out))} is full: the (\d+) answers? that "
        r"arrived after it filled (?:is|are) stored in draftgen\.sqlite and draftgen\.journal "
        r"there, in the 1 MiB held in reserve; free disk space and rerun the same command to "
        r"resume",
        str(info.value),
    )
    kept = int(said[1])
    # Before: 4 lost and 4 bought again, the final message saying 1 while the log named 4.
    assert stored(db) == len(sim.truth)  # every answer served is stored
    # The count said is what was written after the disk refused a write (some may have been
    # written between the count before the fill and the refusal).
    assert 1 <= kept <= stored(db) - before
    assert not list(run_options.out.glob("unstored-*"))
    ballast.unlink()  # space freed
    asyncio.run(run(run_options))
    assert stored(db) == len(sim.truth) == 40  # nothing bought twice
    assert not (run_options.out / "draftgen.reserve").exists()  # held while writing only


def test_the_stop_for_a_full_disk_counts_exactly_the_answers_written_in_the_reserve(
    tmp_path, monkeypatch
):
    store = Store.open_run(tmp_path / "run")
    writer = store.open_writer()
    assert store.reserve is not None and store.reserve.path.stat().st_size == 32 << 20
    original, calls = CompletionWriter._write, []

    def write(self, batch):
        calls.append(len(batch))
        if len(calls) == 3:  # the disk fills at the third commit: the reserve makes room
            raise sqlite3.OperationalError("database or disk is full")
        return original(self, batch)

    monkeypatch.setattr(CompletionWriter, "_write", write)

    async def go():
        outcomes = []
        for i in range(10):
            try:
                await writer.add_completion(f"k{i}", "s", i, b"{}", answer(), 1, [], 0.0)
                outcomes.append(None)
            except StoreHalted as exc:
                outcomes.append(exc)
        return outcomes

    outcomes = asyncio.run(go())
    writer.close()
    assert outcomes[:2] == [None, None]
    [stop] = set(outcomes[2:])  # the same stop for each write after the disk filled
    assert str(stop) == (
        f"the disk holding {tmp_path / 'run'} is full: the 8 answers that arrived after it "
        "filled are stored in draftgen.sqlite and draftgen.journal there, in the 32 MiB held "
        "in reserve; free disk space and rerun the same command to resume"
    )
    keys = store.db.execute("SELECT key FROM completions ORDER BY rowid").fetchall()
    assert keys == [(f"k{i}",) for i in range(10)]  # all stored, the 8 in the reserve's room
    assert not store.reserve.path.exists()
    store.close()


KILLED_RUN = """
import asyncio, sys
sys.path[:0] = sys.argv[3:]
from draftgen.store import reserve
reserve.RESERVE_BYTES = 1 << 20
import test_store_identity as T
from draftgen.run.pipeline import run
from pathlib import Path
class Sim:
    base_url = sys.argv[1]
options = T.options(Path(sys.argv[2]), Sim(), concurrency=8)
options.out = Path(sys.argv[2]) / "disk" / "run"
asyncio.run(run(options))
"""


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM])
def test_a_kill_while_the_disk_is_full_loses_nothing(tmp_path, sim, small_disk, how):
    out = small_disk / "run"
    db = out / "draftgen.sqlite"
    here = str(Path(__file__).parent)
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            KILLED_RUN,
            sim.base_url,
            str(tmp_path),
            here,
            str(Path(here).parent),
        ],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "OPENROUTER_API_KEY": "test"},
    )
    deadline = time.monotonic() + 120
    while (stored(db) or 0) < 8 and time.monotonic() < deadline:
        time.sleep(0.002)
    ballast = fill_disk(small_disk)
    lines = []
    for line in child.stderr:  # until the writer has given the reserve back
        lines.append(line)
        if "held in reserve" in line:
            break
    if how == signal.SIGKILL:
        time.sleep(0.3)  # the answers in flight arrive and are written
    # SIGTERM at once: the run has stopped itself, and the signal is still its first (it had
    # been taken for a second one, abandoning the requests in flight).
    child.send_signal(how)
    child.communicate(timeout=60)
    served = len(sim.truth)
    ballast.unlink()
    assert sorted(recorded_keys(out)) == sorted(set(recorded_keys(out)))
    # Before: 4 answers lost at each kill while the disk was full.
    assert len(set(recorded_keys(out))) == served
    options_ = options(tmp_path, sim, concurrency=8)
    options_.out = out
    asyncio.run(run(options_))
    assert stored(db) == len(sim.truth) == 40  # not one answer bought twice


# -- a directory made read-only for a while ------------------------------------------------------


def immutable(path: Path, on: bool) -> None:
    done = subprocess.run(["chattr", "+i" if on else "-i", str(path)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot make {path} read-only here: {done.stderr.decode().strip()}")


def test_a_directory_made_read_only_for_a_while_waits_and_the_run_goes_on(
    tmp_path, sim, monkeypatch, caplog
):
    # chattr +i holds for root too, where chmod -w does not. The reconstruction opens the store
    # while it is read-only, as it did in the report (its clear_samples failed, exit 1).
    following = background._follow_run

    def late(*args):
        time.sleep(0.5)
        return following(*args)

    monkeypatch.setattr(background, "_follow_run", late)
    caplog.set_level(logging.WARNING, "draftgen.store")
    run_options = options(tmp_path, sim)
    db = run_options.out / "draftgen.sqlite"
    opened = threading.Event()

    def read_only_for_a_while():
        immutable(db, True)
        immutable(run_options.out, True)
        opened.set()
        time.sleep(3.0)
        immutable(run_options.out, False)
        immutable(db, False)

    locker = AfterStored(db, 1, read_only_for_a_while)
    locker.start()
    try:
        asyncio.run(run(run_options))
    finally:
        locker.join(10)
        subprocess.run(["chattr", "-i", str(run_options.out), str(db)], capture_output=True)
    assert opened.is_set()
    assert stored(db) == len(sim.truth) == 40
    assert table(db, "SELECT count(*) FROM samples") == [(40,)]
    assert any(
        re.fullmatch(
            r"cannot write to the store \(attempt to write a readonly database\): \d+ samples "
            rf"wait in memory and are tried again for up to \d+ s more; make "
            rf"{re.escape(str(run_options.out))} writable",
            warning,
        )
        for warning in store_warnings(caplog)
    )


def test_a_directory_read_only_past_the_patience_stops_with_one_sentence(
    tmp_path, sim, monkeypatch
):
    # Read-only for good (simulated: every sample write refused as SQLite refuses it).
    def refused(db, sql, rows):
        error = sqlite3.OperationalError("attempt to write a readonly database")
        error.sqlite_errorcode = sqlite3.SQLITE_READONLY
        raise error

    monkeypatch.setattr(samples, "_transaction", refused)
    monkeypatch.setattr(writer, "STORE_PATIENCE", 1.0)
    run_options = options(tmp_path, sim)
    with pytest.raises(StoreError) as info:  # the CLI's "draftgen: ..." and exit 2
        asyncio.run(run(run_options))
    # Before: not waited on at all, and the reconstruction's clear_samples ended the run with
    # exit 1 ("attempt to write a readonly database").
    assert str(info.value) == (
        "cannot write samples to the store (attempt to write a readonly database); the "
        "completions are stored: free disk space or make the directory writable, and run "
        "draftgen export to reconstruct the rest"
    )
    assert stored(run_options.out / "draftgen.sqlite") == len(sim.truth)


# -- merge reads a damaged shard as status does ------------------------------------------------


@pytest.mark.parametrize("damage", ["overwritten", "emptied", "deleted"])
def test_merge_rebuilds_a_damaged_shard_from_its_record(tmp_path, sim, damage):
    from draftgen.store.merge import merge_runs

    run_options = options(tmp_path, sim, rows=12)
    asyncio.run(run(run_options))
    db = run_options.out / "draftgen.sqlite"
    before = table(db, "SELECT key, content FROM completions ORDER BY key")
    if damage == "overwritten":
        with open(db, "r+b") as handle:
            handle.seek(4096 * 2)
            handle.write(os.urandom(4096))
    elif damage == "emptied":
        db.write_bytes(b"")
    else:
        db.unlink()
    # Before: "internal error: DatabaseError" (overwritten), "OperationalError: no such table:
    # meta" (emptied), "holds no draftgen run" (deleted).
    summary = merge_runs([run_options.out], tmp_path / "merged")
    assert summary.completions == 12
    merged = tmp_path / "merged" / "draftgen.sqlite"
    assert table(merged, "SELECT key, content FROM completions ORDER BY key") == before


def test_merge_names_a_damaged_shard_without_a_record_in_one_sentence(tmp_path, sim):
    from draftgen.store.merge import MergeError, merge_runs

    run_options = options(tmp_path, sim, rows=12)
    asyncio.run(run(run_options))
    (run_options.out / "draftgen.journal").unlink()
    db = run_options.out / "draftgen.sqlite"
    with open(db, "r+b") as handle:
        handle.seek(4096 * 2)
        handle.write(os.urandom(4096))
    with pytest.raises(MergeError) as refused:
        merge_runs([run_options.out], tmp_path / "merged")
    message = str(refused.value)
    assert message.startswith(f"{run_options.out}'s store cannot be read (it is damaged")
    assert message.endswith(
        "and no record (draftgen.journal) rebuilt it; merge the other runs, or run that one again"
    )
    assert not (tmp_path / "merged").exists()

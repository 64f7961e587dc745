"""Store: one SQLite database per run directory, the single source of truth of a run.

Completions are committed the moment they arrive (WAL, ``synchronous=FULL``) by one writer thread
that groups whatever is queued into one transaction, so thousands of requests in flight cost one
fsync per batch and the event loop never waits on disk. A ``kill -9`` loses nothing committed.
The store keeps a run's rows and what was judged of them and of its providers (their figures,
the ones left out, what calibration asked them), never how to reach a provider: no HTTP, no
tokenizer. A run's store also watches its own file: a database deleted or replaced under a run,
a disk that refuses writes or a second run on the directory never costs a completion that was
paid for (``Store.open_run``, ``StoreIdentity``, the writer's patience).

This module is the front. ``Store`` opens, locks and closes a run's store, and holds its parts
over the one connection (``StoreFile``), each an attribute named by what it keeps and a module of
its own; a caller names the part it uses (``store.samples.add_samples(...)``):

- ``store.settings`` (module ``settings``): what the run was made with (``meta``), checked on
  every resume;
- ``store.completions`` (``completions``): the reads of stored completions;
- ``store.samples`` (``samples``): samples and verdicts, the exports' reads;
- ``store.providers`` (``providers``): providers' figures, the ones left out, re-buys;
- ``store.calibrations`` (``calibration``): what calibration asked each provider, what it proved;
- ``store.batches`` (``batch_timing``): the figures of the run's batches;
- ``store.tallies`` (``tallies``): what ``status`` counts, reading the other parts' figures;
- ``store.tables``, ``store.merge`` (``merge_tables``): the file's tables, a store's side of a
  merge.

Beside them, modules with no part: ``schema`` (the tables, the statements that fill them, the
connection), ``identity`` (the directory's lock, the checks of the file, the watch on the file
opened, recovery of a store lost), ``writer`` (the write path alone: ``CompletionWriter`` and its
patience with the disk), ``journal`` (the record of every write, and the store rebuilt from it:
``mend``), ``reserve`` (room held on the disk while a run writes), ``refused`` (answers refused
for their usage), ``batch_ledger`` (the batch tables' reads and writes for a batch run).

A part reaches another only through what it is given (``tallies`` is given the parts whose
figures ``counts`` reads); a setting to change (a test's shorter patience) is changed in the
module that reads it (``writer.STORE_PATIENCE``).
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

from draftgen.store import writer
from draftgen.store.batch_timing import Batches
from draftgen.store.calibration import Calibrations
from draftgen.store.completions import (
    SAME_AS,
    Completions,
    completion_statements,
    pack_message,
    unpack_message,
)
from draftgen.store.identity import (
    DB_NAME,
    LOCK_NAME,
    RECOVERED_GLOB,
    REJECTED_NAME,
    UNSTORED_GLOB,
    RunLock,
    StoreError,
    StoreHalted,
    StoreIdentity,
    check_run_dir,
    check_store_file,
    not_a_store,
    read_side_file,
    restore_recovered,
    run_files,
    side_file_line,
)
from draftgen.store.journal import Journal, RecordRefused, mend, needs_rebuild
from draftgen.store.merge_tables import Merge, Tables
from draftgen.store.providers import (
    PROVIDER_FIGURES,
    UNKNOWN_PROVIDER,
    Providers,
    exclusion_statements,
    provider_figures,
    replacement_statements,
)
from draftgen.store.reserve import Reserve
from draftgen.store.samples import (
    FIGURES_EVERY,
    FIGURES_SHARE,
    Samples,
    SampleTally,
    sample_row,
)
from draftgen.store.schema import (
    INSERT_COMPLETION,
    INSERT_ENDPOINT_EVENT,
    INSERT_FAILURE,
    INSERT_LOGPROB_TOKENS,
    INSERT_SAMPLE,
    INSERT_SERVER_IDS,
    KEYED_TABLES,
    LOCK_WAIT,
    SCHEMA,
    SELECT_COMPLETIONS,
    StoreFile,
    add_missing_columns,
    begin_immediate,
    connect,
    write_transaction,
)
from draftgen.store.settings import SIMULATED, Settings
from draftgen.store.tallies import Tallies, rejection_kind
from draftgen.store.writer import (
    RETRY_FIRST_DELAY,
    RETRY_MAX_DELAY,
    STORE_PATIENCE,
    WARN_EVERY,
    CompletionWriter,
    write_patiently,
)

__all__ = [
    "DB_NAME",
    "FIGURES_EVERY",
    "FIGURES_SHARE",
    "INSERT_COMPLETION",
    "INSERT_ENDPOINT_EVENT",
    "INSERT_FAILURE",
    "INSERT_LOGPROB_TOKENS",
    "INSERT_SAMPLE",
    "INSERT_SERVER_IDS",
    "KEYED_TABLES",
    "LOCK_NAME",
    "LOCK_WAIT",
    "PROVIDER_FIGURES",
    "RECOVERED_GLOB",
    "REJECTED_NAME",
    "RETRY_FIRST_DELAY",
    "RETRY_MAX_DELAY",
    "SAME_AS",
    "SCHEMA",
    "SELECT_COMPLETIONS",
    "SIMULATED",
    "STORE_PATIENCE",
    "UNKNOWN_PROVIDER",
    "UNSTORED_GLOB",
    "WARN_EVERY",
    "CompletionWriter",
    "RunLock",
    "SampleTally",
    "Store",
    "StoreError",
    "StoreHalted",
    "StoreIdentity",
    "begin_immediate",
    "check_store_file",
    "completion_statements",
    "connect",
    "exclusion_statements",
    "not_a_store",
    "pack_message",
    "provider_figures",
    "read_side_file",
    "rejection_kind",
    "replacement_statements",
    "restore_recovered",
    "run_files",
    "sample_row",
    "side_file_line",
    "unpack_message",
    "write_patiently",
]


_log = logging.getLogger("draftgen.store")


class Store:
    """A run's store: its parts' reads and synchronous writes over one connection;
    ``CompletionWriter`` does the writes of a live run."""

    reserve: Reserve | None = None  # room held for a full disk while a run's writer is open
    lock: RunLock | None = None
    identity: StoreIdentity | None = None

    def __init__(self, run_dir: Path, *, create: bool = True, lock: RunLock | None = None) -> None:
        """``lock``: the run's lock on the directory (``open_run``), released on ``close``."""
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / DB_NAME
        self.lock = lock
        check_run_dir(self.run_dir)
        if lock is None:
            mend_if_idle(self.run_dir)
        # The lock file a run made a moment ago is no sign that a run was here before.
        check_store_file(
            self.run_dir, create, ignore={LOCK_NAME} if lock and lock.made_file else ()
        )
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            db = connect(self.path)
            self._hold(StoreFile(self.path, self.run_dir, db))
            db.executescript(SCHEMA)
            add_missing_columns(db)
            self.identity = StoreIdentity(self.path, lock)
        except sqlite3.DatabaseError as exc:
            if getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_NOTADB:
                raise not_a_store(self.path) from None
            raise StoreError(f"cannot open the store in {self.run_dir}: {exc}") from None
        except OSError as exc:
            raise StoreError(f"cannot open the store in {self.run_dir}: {exc}") from None

    @classmethod
    def open_run(cls, run_dir: Path) -> Store:
        """The store of a run about to write: the directory locked against other runs (before
        its files are judged), a store a run saved when its own was deleted put back, and the
        writes a full disk kept in side files imported."""
        run_dir = Path(run_dir)
        check_run_dir(run_dir)
        try:
            run_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as exc:
            raise StoreError(f"cannot open the store in {run_dir}: {exc}") from None
        lock = RunLock(run_dir)
        lock.acquire()
        try:
            mend(run_dir)
            store = cls(run_dir, lock=lock)
        except BaseException:
            lock.release()
            raise
        try:
            store.import_unstored()
            Journal(run_dir).seed(store.db)
        except BaseException:
            store.close()
            raise
        return store

    @classmethod
    def as_found(cls, run_dir: Path) -> Store:
        """A run's store opened to be read as it is: no table or column is added and no journal
        mode set, so a store an older draftgen made is read, not upgraded."""
        store = cls.__new__(cls)
        store.run_dir = Path(run_dir)
        store.path = store.run_dir / DB_NAME
        store._hold(
            StoreFile(store.path, store.run_dir, sqlite3.connect(store.path, isolation_level=None))
        )
        return store

    @classmethod
    def unjournalled(cls, path: Path) -> Store:
        """A new store file at ``path`` filled in one go, with no journal and no syncs: its
        maker syncs it and renames it into a run directory (a crash leaves a file to delete)."""
        store = cls.__new__(cls)
        store.path = Path(path)
        store.run_dir = store.path.parent
        db = sqlite3.connect(store.path, isolation_level=None)
        store._hold(StoreFile(store.path, store.run_dir, db))
        db.execute("PRAGMA synchronous=OFF")
        db.execute("PRAGMA journal_mode=OFF")
        db.executescript(SCHEMA)
        return store

    def _hold(self, file: StoreFile) -> None:
        """The parts over ``file``'s one connection."""
        self.file = file
        self.settings = Settings(file)
        self.completions = Completions(file)
        self.samples = Samples(file)
        self.providers = Providers(file)
        self.calibrations = Calibrations(file)
        self.batches = Batches(file)
        self.tallies = Tallies(
            file,
            settings=self.settings,
            providers=self.providers,
            calibrations=self.calibrations,
            batches=self.batches,
        )
        self.tables = Tables(file)
        self.merge = Merge(file, self.tables)

    @property
    def db(self) -> sqlite3.Connection:
        """The one connection every part uses (one opened again is theirs too)."""
        return self.file.db

    def import_unstored(self) -> int:
        """Write the statements a run kept in side files (``unstored-*.jsonl``) when the disk
        refused them, then delete the files: the completions stored. A file's import is marked
        in the same transaction until the file is gone, so an import cut short is done again
        and never twice (keys are unique; events and failures are not)."""
        completions = 0
        for side in sorted(self.run_dir.glob(UNSTORED_GLOB)):
            marker = f"imported {side.name}"
            if self.settings.meta(marker) is None:
                statements = read_side_file(side)
                try:
                    with write_transaction(self.db):
                        for sql, params in statements:
                            self.db.execute(sql, params)
                        self.settings.set_meta(marker, str(len(statements)))
                except sqlite3.Error as exc:
                    raise StoreError(
                        f"cannot import {side} into the store ({exc}); free disk space and rerun "
                        "the same command"
                    ) from None
                imported = sum(sql == INSERT_COMPLETION for sql, _ in statements)
                completions += imported
                _log.warning(
                    "imported %d completions a run could not store from %s", imported, side
                )
            side.unlink()
            self.db.execute("DELETE FROM meta WHERE name = ?", (marker,))
        return completions

    def open_writer(self, patience: float | None = None) -> CompletionWriter:
        """The run's completion writer: it appends every write to the record before committing
        it, after every commit it checks that this store's file is still the one at its path,
        and it holds a write the disk refuses for up to ``patience`` seconds
        (``STORE_PATIENCE``) before keeping it in a side file. A run's store holds room in
        reserve for a full disk meanwhile (``Reserve``, given back on ``close``)."""
        self.identity.check(self.db)
        # What the run was made with, as it stands now: a store rebuilt from the record is
        # resumed with the same checks as the one it replaces.
        journal = Journal(self.run_dir)
        try:
            journal.append(
                ("INSERT OR REPLACE INTO meta (name, value) VALUES (?, ?)", row)
                for row in self.db.execute("SELECT name, value FROM meta")
            )
        except RecordRefused as exc:
            raise StoreError(f"{exc}: free disk space or make {self.run_dir} writable") from None
        finally:
            journal.close()
        if self.lock is not None:  # a run's: room for the answers in flight if the disk fills
            reserve = Reserve(self.run_dir)
            self.reserve = reserve if reserve.hold() else None
        default = writer.STORE_PATIENCE  # read now: a test shortens it
        return CompletionWriter(
            self.path, self.identity, default if patience is None else patience, self.reserve
        )

    def close(self) -> None:
        self.db.close()
        if self.reserve is not None:
            self.reserve.release()
        if self.identity is not None and self.identity.lost is not None:
            self.identity.drop_journal()  # the run's last connection to the lost file is closed
        if self.lock is not None:  # after the database: no connection of this run is left
            self.lock.release()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def mend_if_idle(run_dir: Path) -> None:
    """``mend`` a store lost or broken for a command that does not run (status, export, merge) if no
    run holds the directory (a run mends its own as it opens it)."""
    if RunLock.holder(run_dir) is not None or not needs_rebuild(run_dir):
        return
    lock = RunLock(run_dir)
    lock.acquire()
    try:
        mend(run_dir)  # judged again under the lock: another command may have done it
    finally:
        lock.release()

"""The write path: ``CompletionWriter``, the one thread that commits a live run's completions and
failures in groups, and its patience with a disk that refuses a write (``write_patiently``).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import errno
import logging
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path

import orjson

from draftgen.records import Completion
from draftgen.store.completions import _json_or_none, completion_statements
from draftgen.store.identity import (
    DB_NAME,
    StoreError,
    StoreHalted,
    StoreIdentity,
    _sync_directory,
    side_file_line,
)
from draftgen.store.journal import JOURNAL_NAME, Journal, RecordRefused, disk_full
from draftgen.store.reserve import Reserve
from draftgen.store.schema import (
    INSERT_COMPLETION,
    INSERT_ENDPOINT_EVENT,
    INSERT_FAILURE,
    connect,
    write_transaction,
)

# Seconds a run's writer keeps trying a write the disk refuses (full, I/O error, locked) before
# it keeps the write in a side file and stops the run; the rows wait in memory meanwhile, and the
# workers waiting on them send nothing new.
STORE_PATIENCE = 300.0
RETRY_FIRST_DELAY = 0.05  # seconds before the first retry of a refused write, doubling ...
RETRY_MAX_DELAY = 5.0  # ... up to this
WARN_EVERY = 30.0  # seconds between warnings while writes wait

_log = logging.getLogger("draftgen.store")


class CompletionWriter:
    """A thread committing completions and failures in groups; awaiting a write means durable.

    A group's writers are woken by one call into their event loop, not one each: thousands of
    completions a second would otherwise cost as many wake-ups of the loop.

    ``identity``: the file the run's store opened (None: the one at ``path`` now), checked after
    every commit. ``patience``: seconds a write the disk refuses (full, I/O error, locked) is
    tried again, its rows held in memory, before it is kept in a side file
    (``unstored-<time>.jsonl``, imported by the next run) and the run stopped; None: it fails at
    once, as for a store written outside a run (``Store.open_writer`` gives a run's writer).

    Every group is appended to the store's record (``Journal``) and fsync'd before its commit.
    ``reserve``: room held on the disk, given back the first time the disk is full so that the
    group and the answers still in flight are written; each group is then acknowledged with a
    ``DiskFullStop``, which stops the run saying how many answers the reserve took.
    """

    def __init__(
        self,
        path: Path,
        identity: StoreIdentity | None = None,
        patience: float | None = None,
        reserve: Reserve | None = None,
    ) -> None:
        self.failure_reasons: collections.Counter = collections.Counter()  # this process's
        # (statements, the future of the coroutine awaiting them, or None), or None to stop.
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._db = connect(path)
        self._identity = identity or StoreIdentity(Path(path))
        self._patience = patience
        self._journal = Journal(Path(path).parent)
        self._reserve = reserve
        self._full: DiskFullStop | None = None  # the disk filled and the reserve was given back
        self._side_file = Path(path).parent / (
            f"unstored-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}.jsonl"
        )
        self._gave_up = False  # a write went to the side file: later ones wait no longer
        self._waited = 0.0  # seconds the last refused write was tried
        self._unsaved = False  # rows written after the store was lost, not yet saved
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._run, name="draftgen-store", daemon=True)
        self._thread.start()

    async def add_completion(
        self,
        key: str,
        source_id: str,
        turn: int,
        request: bytes,
        completion: Completion,
        attempts: int,
        errors: list[dict],
        latency: float,
    ) -> None:
        await self._submit(
            completion_statements(
                key, source_id, turn, request, completion, attempts, errors, latency
            )
        )

    async def write(self, statements: list[tuple[str, tuple]]) -> None:
        """Commit ``statements`` in one transaction (with whatever else is queued); durable
        once awaited."""
        await self._submit(statements)

    async def add_failure(
        self, key: str, source_id: str, turn: int, reason: str, attempts: int, errors: list[dict]
    ) -> None:
        row = (key, source_id, turn, reason, attempts, _json_or_none(errors), time.time())
        self.failure_reasons[reason] += 1
        await self._submit([(INSERT_FAILURE, row)])

    def note_endpoint_event(self, endpoint: str, event: str, detail: str) -> None:
        """Queue an endpoint's ejection, readmission or removal; not awaited, since the router
        that reports it runs in no coroutine of its own (a lost event costs only a figure)."""
        row = (endpoint, event, detail[:500], time.time())
        self._queue.put(([(INSERT_ENDPOINT_EVENT, row)], None))

    async def _submit(self, statements: list) -> None:
        future = asyncio.get_running_loop().create_future()
        self._queue.put((statements, future))
        await future

    def close(self) -> None:
        self._closing.set()  # a write being retried goes to the side file now
        self._queue.put(None)
        self._thread.join()
        self._journal.close()
        if self._unsaved:
            self._identity.save_again(self._db)
        self._db.close()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            batch = [item]
            while len(batch) < 1000:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    self._queue.put(None)
                    break
                batch.append(nxt)
            self._commit(batch)

    def _commit(self, batch: list[tuple[list, asyncio.Future | None]]) -> None:
        """Commit a group in one transaction and wake its writers; whatever fails, fails their
        awaits with a ``StoreError``, never this thread (its death left a run waiting forever)."""
        started = time.monotonic()
        try:
            self._write_patiently(batch)
        except sqlite3.OperationalError as exc:
            self._waited = time.monotonic() - started
            # The store itself (disk full, I/O, lock): every write of the group fails alike.
            if self._patience is None:
                _settle(batch, StoreError(f"cannot write to the store: {exc}"))
            else:
                _settle(batch, StoreHalted(self._keep_aside(batch, exc)))
                if self._full is not None:
                    self._full.aside += _completions_in(batch)
                    self._full.side_file = self._side_file
            return
        except Exception as exc:
            if len(batch) > 1:
                # A value one write could not bind (an int past 64 bits): the rest are kept.
                for item in batch:
                    self._commit([item])
                return
            _settle(batch, StoreError(_write_failure(exc)))
            return
        was_lost = self._identity.lost is not None
        try:
            # After the commit: the rows are in the file the connection holds, which a loss saves.
            self._identity.check(self._db)
        except StoreHalted as exc:
            self._unsaved = was_lost
            _settle(batch, exc)
            return
        if self._full is not None:
            self._full.stored += _completions_in(batch)
        _settle(batch, self._full)

    def _write_patiently(self, batch: list[tuple[list, asyncio.Future | None]]) -> None:
        """The group appended to the record (once) and ``_write``, tried again while the disk
        refuses it for up to ``patience`` seconds (none once a write went to the side file, or
        as the writer closes); the reserve given back the first time the disk is full. Raises
        the last error."""
        recorded = []

        def write() -> None:
            if not recorded:
                self._journal.append(s for statements, _ in batch for s in statements)
                recorded.append(True)
            self._write(batch)

        def write_or_release() -> None:
            try:
                write()
            except sqlite3.OperationalError as exc:
                if self._full is not None or not disk_full(exc) or not self._release(exc):
                    raise
                write()  # in the room the reserve gave back

        write_patiently(
            write_or_release,
            0.0 if self._gave_up or self._patience is None else self._patience,
            lambda: f"{len(batch) + self._queue.qsize()} writes",
            self._side_file.parent,
            self._closing,
        )

    def _release(self, exc: sqlite3.OperationalError) -> bool:
        """Give the reserve back (False: none was held); the run stops once the answers in
        flight are written."""
        released = self._reserve is not None and self._reserve.release()
        if released:
            self._full = DiskFullStop(self._journal.path.parent, self._reserve.size)
            _log.warning(
                "the disk is full (%s): the %d MiB held in reserve in %s were given back to "
                "write the answers in flight, and the run stops",
                exc,
                self._reserve.size >> 20,
                self._reserve.path,
            )
        return released

    def _write(self, batch: list[tuple[list, asyncio.Future | None]]) -> None:
        with write_transaction(self._db):
            for statements, _ in batch:
                for sql, params in statements:
                    self._db.execute(sql, params)

    def _keep_aside(self, batch: list[tuple[list, asyncio.Future | None]], exc: Exception) -> str:
        """Keep a write the store refused in the side file, or at least list its completions in
        the log; the sentence that stops the run."""
        waited = f" for {self._waited:.0f} s" if self._waited >= 1 else ""
        reason = f"cannot write to the store{waited} ({exc})"
        try:
            self._append_side_file(batch)
        except (OSError, TypeError, orjson.JSONEncodeError) as err:
            paid = [f"{key} (generation {gen})" for key, gen in _completion_ids(batch)]
            _log.error(
                "%s nor to %s (%s); these completions were paid for and are not stored: %s",
                reason,
                self._side_file,
                err,
                ", ".join(paid) or "none",
            )
            listed = ", ".join(paid[:3]) + (f" and {len(paid) - 3} more" if len(paid) > 3 else "")
            return (
                f"{reason} nor to {self._side_file} ({err}): the {len(paid)} completions of the "
                f"failed write are lost, and the log lists their keys and generation ids ("
                f"{listed or 'none'}); free disk space and rerun the same command"
            )
        if not self._gave_up:
            _log.warning("kept a write the store refused in %s", self._side_file)
        self._gave_up = True
        return (
            f"{reason}; the writes it refused are kept in {self._side_file}, which the next run "
            "imports: free disk space and rerun the same command to resume"
        )

    def _append_side_file(self, batch: list[tuple[list, asyncio.Future | None]]) -> None:
        lines = b"".join(
            side_file_line(sql, params) for statements, _ in batch for sql, params in statements
        )
        made = not self._side_file.exists()
        try:
            with open(self._side_file, "ab") as handle:
                handle.write(lines)
                handle.flush()
                os.fsync(handle.fileno())
        except OSError:
            if made:  # an empty or cut file would only say something was kept
                self._side_file.unlink(missing_ok=True)
            raise
        if made:
            _sync_directory(self._side_file.parent)


class DiskFullStop(StoreHalted):
    """The disk filled during the run and the writer wrote the answers in flight in the room
    held in reserve: those answers are stored (every write it acknowledges with this is), and
    the run stops. Its sentence is made when it is read, so it counts every answer so kept."""

    def __init__(self, run_dir: Path, reserve: int) -> None:
        super().__init__("the disk is full")
        self.run_dir, self.reserve = run_dir, reserve
        self.stored = 0  # completions written after the disk filled
        self.aside = 0  # ... kept in a side file when even the reserve was not enough
        self.side_file: Path | None = None

    def __str__(self) -> str:
        aside = (
            f", and {self.aside} more in {self.side_file}, which the next run imports"
            if self.aside
            else ""
        )
        answers = (
            "the 1 answer that arrived after it filled is"
            if self.stored == 1
            else f"the {self.stored} answers that arrived after it filled are"
        )
        return (
            f"the disk holding {self.run_dir} is full: {answers} stored in {DB_NAME} and "
            f"{JOURNAL_NAME} there, in the {self.reserve >> 20} MiB held in reserve{aside}; "
            "free disk space and rerun the same command to resume"
        )


def write_patiently(
    write: Callable[[], None],
    patience: float,
    waiting: Callable[[], str],
    where: Path,
    stop: threading.Event | None = None,
    reopen: Callable[[], None] | None = None,
) -> None:
    """Call ``write``, and again while the disk refuses it (``_disk_refused``) for up to
    ``patience`` seconds, sooner if ``stop`` is set; a warning every ``WARN_EVERY`` seconds
    names what waits (``waiting()``) and where space is wanted. ``reopen``: called after a
    refusal for want of permission (a connection opened read-only stays so). Raises the last
    error."""
    started = time.monotonic()
    delay, warned = RETRY_FIRST_DELAY, None
    while True:
        try:
            write()
        except sqlite3.OperationalError as exc:
            waited = time.monotonic() - started
            stopped = stop is not None and stop.is_set()
            if not _disk_refused(exc) or stopped or waited >= patience:
                raise
            if warned is None or time.monotonic() - warned >= WARN_EVERY:
                warned = time.monotonic()
                _log.warning(
                    "cannot write to the store (%s): %s wait in memory and are tried again for "
                    "up to %.0f s more; %s",
                    exc,
                    waiting(),
                    patience - waited,
                    f"make {where} writable" if _unwritable(exc) else f"free disk space in {where}",
                )
            (stop or threading.Event()).wait(min(delay, patience - waited))
            if reopen is not None and _unwritable(exc):
                with contextlib.suppress(sqlite3.Error, OSError):
                    reopen()
            delay = min(delay * 2, RETRY_MAX_DELAY)
            continue
        if warned is not None:
            _log.warning(
                "the store took the waiting writes after %.1f s", time.monotonic() - started
            )
        return


def _transaction(db: sqlite3.Connection, sql: str, rows: list[tuple]) -> None:
    """``executemany`` in one write transaction, rolled back if it fails."""
    with write_transaction(db):
        db.executemany(sql, rows)


def _disk_refused(exc: sqlite3.OperationalError) -> bool:
    """A write the disk or another connection refused for now (full, I/O error, locked, made
    read-only), which a later try may get through, unlike a statement that cannot work."""
    if isinstance(exc, RecordRefused):
        return exc.errno in _REFUSING_ERRNOS
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        primary = code & 0xFF
        return primary in (
            sqlite3.SQLITE_FULL,
            sqlite3.SQLITE_IOERR,
            sqlite3.SQLITE_BUSY,
            sqlite3.SQLITE_LOCKED,
            sqlite3.SQLITE_READONLY,
            sqlite3.SQLITE_CANTOPEN,
        )
    text = str(exc)
    return any(
        words in text for words in ("disk is full", "disk I/O error", "is locked", "readonly")
    )


# What an append to the record meets on a disk that may take it later: full, out of quota, an
# I/O error, a directory or file made read-only.
_REFUSING_ERRNOS = frozenset(
    {errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EACCES, errno.EPERM, errno.EROFS}
)


def _unwritable(exc: sqlite3.OperationalError) -> bool:
    """A write refused for want of permission (a directory or file made read-only)."""
    if isinstance(exc, RecordRefused):
        return exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS)
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CANTOPEN)
    return "readonly" in str(exc)


def _completion_ids(batch: list[tuple[list, asyncio.Future | None]]) -> list[tuple[str, str]]:
    """(key, generation id) of each completion a group of writes stores."""
    return [
        (params[0], params[4])
        for statements, _ in batch
        for sql, params in statements
        if sql == INSERT_COMPLETION
    ]


def _completions_in(batch: list[tuple[list, asyncio.Future | None]]) -> int:
    return len(_completion_ids(batch))


def _write_failure(exc: Exception) -> str:
    if isinstance(exc, sqlite3.Error):
        return f"cannot write to the store: {exc}"
    return f"cannot write to the store: {exc} ({exc.__class__.__name__})"


def _settle(batch: list[tuple[list, asyncio.Future | None]], error: Exception | None) -> None:
    """Wake the writers of a committed (or failed) group, in their order, one call per loop."""
    by_loop: dict[asyncio.AbstractEventLoop, list[asyncio.Future]] = {}
    for _, future in batch:
        if future is not None:
            by_loop.setdefault(future.get_loop(), []).append(future)
    for loop, futures in by_loop.items():
        try:
            loop.call_soon_threadsafe(_settle_futures, futures, error)
        except RuntimeError:
            pass  # the loop is closed: no coroutine awaits these any more


def _settle_futures(futures: list[asyncio.Future], error: Exception | None) -> None:
    for future in futures:
        if future.done():  # its coroutine was cancelled; the write stands all the same
            continue
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(error)

"""The record of every paid answer: an append-only, fsync'd file beside the store (``Journal``) that
the writer fills before each commit, and the store rebuilt from it when its file is lost or broken.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import sqlite3
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from draftgen.store.identity import (
    DB_NAME,
    RECOVERED_GLOB,
    StoreError,
    _sync_directory,
    read_side_file,
    restore_recovered,
    side_file_line,
)
from draftgen.store.schema import (
    INSERT_ENDPOINT_EVENT,
    SCHEMA,
    add_missing_columns,
    connect,
    write_transaction,
)

JOURNAL_NAME = "draftgen.journal"
# An endpoint's ejections and readmissions are figures, not money: a rebuilt store goes without.
UNRECORDED = frozenset({INSERT_ENDPOINT_EVENT})
# Tables a store's first record copies (``seed``): all but what the reconstruction makes again
# and the figures above.
DERIVED_TABLES = frozenset({"samples", "endpoint_events"})

_log = logging.getLogger("draftgen.store")


class RecordRefused(sqlite3.OperationalError):
    """The disk refused an append to the record: waited on like a refused commit."""

    def __init__(self, path: Path, exc: OSError) -> None:
        super().__init__(f"cannot append to {path}: {exc.strerror or exc}")
        self.errno = exc.errno


class Journal:
    """``draftgen.journal`` beside a store: every statement the writer commits, as side-file lines,
    appended and fsync'd before the commit, once per group. A line cut short by a crash was never
    acknowledged and is skipped on reading; an append the disk refuses is cut back off."""

    def __init__(self, run_dir: Path) -> None:
        self.path = Path(run_dir) / JOURNAL_NAME
        self._fd: int | None = None
        self._key: tuple[int, int] | None = None

    def append(self, statements: Iterable[tuple[str, tuple]]) -> None:
        """Append ``statements`` and fsync; raises ``RecordRefused`` if the disk refuses (the
        record then ends as it did), TypeError or orjson's error for a value it cannot hold."""
        lines = b"".join(
            side_file_line(sql, params) for sql, params in statements if sql not in UNRECORDED
        )
        if not lines:
            return
        try:
            fd = self._open()
            size = os.fstat(fd).st_size
            try:
                view = memoryview(lines)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            except OSError:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, size)  # a cut line would swallow the next append's first
                raise
        except OSError as exc:
            raise RecordRefused(self.path, exc) from None

    def _open(self) -> int:
        """The record's descriptor, opened again if the file was deleted or replaced (its lines
        then start a new record, which the store still holding the earlier ones does not need)."""
        try:
            stat = os.stat(self.path)
            current = (stat.st_dev, stat.st_ino)
        except FileNotFoundError:
            current = None
        if self._fd is not None and current == self._key:
            return self._fd
        self.close()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        stat = os.fstat(fd)
        self._fd, self._key = fd, (stat.st_dev, stat.st_ino)
        if current is None:
            _sync_directory(self.path.parent)
        elif stat.st_size and _last_byte(self.path) != b"\n":
            os.write(fd, b"\n")  # a crash cut the last line: the next one starts on its own
        return fd

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def seed(self, db: sqlite3.Connection) -> int:
        """Start a record missing or empty beside a store that holds rows (a store from before
        the record, or a merge's): a copy of its tables, written whole or not at all. The rows."""
        with contextlib.suppress(FileNotFoundError):
            if self.path.stat().st_size:
                return 0
        partial = self.path.with_name(f".{JOURNAL_NAME}.partial")
        rows = 0
        with open(partial, "wb") as handle:
            for sql, params in _table_rows(db):
                handle.write(side_file_line(sql, params))
                rows += 1
            handle.flush()
            os.fsync(handle.fileno())
        if not rows:
            partial.unlink()
            return 0
        os.replace(partial, self.path)
        _sync_directory(self.path.parent)
        return rows


def _last_byte(path: Path) -> bytes:
    with open(path, "rb") as handle:
        handle.seek(-1, os.SEEK_END)
        return handle.read(1)


def _table_rows(db: sqlite3.Connection) -> Iterator[tuple[str, tuple]]:
    tables = [
        name
        for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        if name not in DERIVED_TABLES and not name.startswith("sqlite_")
    ]
    for table in tables:
        columns = [row[1] for row in db.execute(f'PRAGMA table_info("{table}")')]
        names = ", ".join(f'"{c}"' for c in columns)
        sql = f'INSERT OR IGNORE INTO "{table}" ({names}) VALUES ({", ".join("?" * len(columns))})'
        for values in db.execute(f'SELECT {names} FROM "{table}"'):
            yield sql, tuple(values)


def replay(db: sqlite3.Connection, path: Path) -> int:
    """Write the statements of the record at ``path`` into ``db`` in one transaction, each that
    finds its row already there (or cannot be written) left out, so a replay twice stores
    nothing twice; the completions it added."""
    before = db.execute("SELECT count(*) FROM completions").fetchone()[0]
    with write_transaction(db):
        for sql, params in read_side_file(path):
            with contextlib.suppress(sqlite3.IntegrityError, OverflowError):
                db.execute(sql, params)
    return db.execute("SELECT count(*) FROM completions").fetchone()[0] - before


def store_damage(path: Path) -> str | None:
    """Why the store at ``path`` cannot be read whole (its file cut short, a page overwritten,
    not SQLite at all), or None: SQLite's ``quick_check``, which reads every page once."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    if stat.st_size == 0:
        return "empty (0 bytes)"
    # A file this process found whole and nothing changed since: a command opens its store
    # several times (status's figures), and a check reads it all.
    seen = (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)
    if _FOUND_WHOLE.get(path) == seen:
        return None
    try:
        db = sqlite3.connect(f"file:{path}?mode=rw", uri=True, timeout=30)
        try:
            found = db.execute("PRAGMA quick_check").fetchall()
        finally:
            db.close()
    except sqlite3.DatabaseError as exc:
        code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
        if code == sqlite3.SQLITE_NOTADB:
            return "not an SQLite database"
        if code == sqlite3.SQLITE_CORRUPT:
            return f"damaged ({exc})"
        return None  # busy or unwritable: not damage, and the open that follows says so
    if found == [("ok",)]:
        _FOUND_WHOLE[path] = seen
        return None
    # quick_check's first finding, on one line ("*** in database main ***" is its heading).
    finding = found[0][0].replace("*** in database main ***", "").strip().splitlines()[0]
    return f"damaged (SQLite's check: {finding})"


_FOUND_WHOLE: dict[Path, tuple[int, int, int, int]] = {}


def needs_rebuild(run_dir: Path) -> str | None:
    """Why the store in ``run_dir`` must be rebuilt from its record, or None (no record, or a
    store that reads whole)."""
    journal = Path(run_dir) / JOURNAL_NAME
    if not journal.exists() or journal.stat().st_size == 0:
        return None
    path = Path(run_dir) / DB_NAME
    if not path.exists():
        return "missing"
    return store_damage(path)


def mend(run_dir: Path) -> None:
    """Before a store is opened, with the directory's lock held: a store a run saved when its
    file was deleted put back (a damaged file in its place moved aside first) and the record
    replayed into it, or a store missing or damaged rebuilt from the record."""
    run_dir = Path(run_dir)
    path, journal = run_dir / DB_NAME, run_dir / JOURNAL_NAME
    if path.exists() and any(run_dir.glob(RECOVERED_GLOB)) and store_damage(path):
        _set_aside(path)  # a file made at the path after the loss: the saved store is the run's
    if restore_recovered(run_dir) and journal.exists():
        db = connect(path)
        try:
            added = replay(db, journal)
        finally:
            db.close()
        if added:
            _log.warning("took %d completions the saved store lacked from %s", added, journal)
    damage = needs_rebuild(run_dir)
    if damage:
        rebuild(run_dir, damage)


def _set_aside(path: Path) -> Path:
    """Move a damaged store and its journal files to ``broken-<time>-<pid>.sqlite``, kept."""
    aside = path.with_name(f"broken-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}.sqlite")
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.replace(f"{path}{suffix}", f"{aside}{suffix}")
    return aside


def rebuild(run_dir: Path, damage: str) -> int:
    """Move the store aside (``broken-<time>.sqlite``, never deleted), build a new one and replay
    the record into it; the directory's lock must be held. Logs one sentence; the completions."""
    run_dir = Path(run_dir)
    path, journal = run_dir / DB_NAME, run_dir / JOURNAL_NAME
    aside = None
    if path.exists():
        aside = _set_aside(path)
    else:
        for suffix in ("-wal", "-shm"):  # the deleted file's journal: not this store's pages
            Path(f"{path}{suffix}").unlink(missing_ok=True)
    partial = run_dir / f".{DB_NAME}.rebuild"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{partial}{suffix}").unlink(missing_ok=True)
    try:
        db = connect(partial)
        try:
            db.executescript(SCHEMA)
            add_missing_columns(db)
            completions = replay(db, journal)
        finally:
            db.close()
        with open(partial, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(partial, path)
        _sync_directory(run_dir)
    except (OSError, sqlite3.Error) as exc:
        raise StoreError(
            f"{path} is {damage} and cannot be rebuilt from {journal} ({exc})"
            + (f"; the old file is kept in {aside}" if aside else "")
            + ": free disk space and rerun the same command"
        ) from None
    kept = f"it is moved to {aside}, and " if aside else ""
    _log.warning(
        "%s is %s: %sthe store is rebuilt with the %d completions of %s (samples and verdicts "
        "are made again by the reconstruction)",
        path,
        damage,
        kept,
        completions,
        journal,
    )
    return completions


def disk_full(exc: Exception) -> bool:
    """A write refused because the disk (or the user's quota) has no room left."""
    if isinstance(exc, RecordRefused):
        return exc.errno in (errno.ENOSPC, errno.EDQUOT)
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF == sqlite3.SQLITE_FULL
    return "disk is full" in str(exc)

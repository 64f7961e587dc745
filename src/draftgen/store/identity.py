"""A run's files and who holds them: the directory's lock (``RunLock``), the checks of a store's
file before it is opened, the watch on the file a run opened (``StoreIdentity``), and what a run
saved beside a store it lost or a write the disk refused, which the next run takes back.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Collection
from pathlib import Path
from typing import ClassVar

import orjson

from draftgen.errors import DraftgenError

DB_NAME = "draftgen.sqlite"
REJECTED_NAME = "rejected.jsonl"  # the rows a run could not use, beside the store
LOCK_NAME = "draftgen.lock"
# What a run saves beside a store that was deleted or replaced under it (``StoreIdentity``), and
# the writes a full disk kept out of the store (``CompletionWriter``); a resume takes both back.
RECOVERED_GLOB = "recovered-*.sqlite"
UNSTORED_GLOB = "unstored-*.jsonl"

_log = logging.getLogger("draftgen.store")


class StoreError(DraftgenError, RuntimeError):
    """The run directory cannot be used as asked; the message says what to do."""


class StoreHalted(StoreError):
    """The run must stop: its store's file is gone or the disk kept refusing a write. The message
    says where the rows are and what to do, so a caller adds nothing to it."""


class RunLock:
    """An exclusive lock on a run directory, naming the process that holds it.

    Two ``flock``s: one on the directory itself, which deleting a file cannot free, keeps other
    runs out; one on ``draftgen.lock``, whose text names the holder for ``status`` (and which
    a draftgen from before the directory lock still honours). A lock file deleted under a run is
    made again at the run's next commit (``keep``).
    """

    # (st_dev, st_ino) of the directories this process holds: its own run is not "another run".
    _held: ClassVar[set[tuple[int, int]]] = set()

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_NAME
        self.made_file = False  # the lock file did not exist before ``acquire``
        self._handle = None
        self._file_key: tuple[int, int] | None = None
        self._dir_fd: int | None = None
        self._dir_key: tuple[int, int] | None = None

    def acquire(self) -> None:
        fd = os.open(self.run_dir, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise self._in_use(_lock_file_text(self.path)) from None
        try:
            self.made_file = not self.path.exists()
            self._take_file()
        except BaseException:
            os.close(fd)
            raise
        self._dir_fd, self._dir_key = fd, _fd_key(fd)
        RunLock._held.add(self._dir_key)

    def _take_file(self) -> None:
        """Open and lock the lock file (made if missing) and write this process's pid in it."""
        handle = open(self.path, "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or None
            handle.close()
            raise self._in_use(holder) from None  # a draftgen that locks only the file
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}")
        handle.flush()
        self._handle, self._file_key = handle, _fd_key(handle.fileno())

    def _in_use(self, holder: str | None) -> StoreError:
        who = (
            f"draftgen {holder}"
            if holder
            else f"another draftgen process (its {LOCK_NAME} was deleted)"
        )
        return StoreError(
            f"{self.run_dir} is in use by {who}; wait for it to finish or stop it before running "
            "again on this directory"
        )

    def keep(self) -> None:
        """Make the lock file again if it was deleted or replaced, so that ``status`` still
        names this process; the directory's own lock keeps other runs out meanwhile, so the run
        goes on."""
        if self._dir_fd is None:
            return
        try:
            if _file_key(self.path) == self._file_key:
                return
        except FileNotFoundError:
            pass
        except OSError:
            return  # cannot tell (permissions): nothing to mend
        old = self._handle
        try:
            self._take_file()
        except (OSError, StoreError):
            return  # an older draftgen holds the new file: the directory is still this run's
        if old is not None:
            old.close()
        _log.warning("%s was deleted or replaced during the run; it is made again", self.path)

    def release(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None
        if self._dir_fd is not None:
            RunLock._held.discard(self._dir_key)
            os.close(self._dir_fd)
            self._dir_fd = None

    @staticmethod
    def holder(run_dir: Path, ignore_own: bool = False) -> str | None:
        """Who holds the directory now (``"pid N"``, or ``"another process"`` if its lock file
        is gone: a run is working on the directory), or None.

        Reading takes no lock a run would wait for: a shared lock is tried and let go at once.
        ``ignore_own``: this process's own run is not "another run" (a run's final summary).
        """
        try:
            fd = os.open(Path(run_dir), os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            return None  # no directory: no run can hold it
        try:
            own = _fd_key(fd) in RunLock._held
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                fcntl.flock(fd, fcntl.LOCK_UN)
                held = False
            except BlockingIOError:
                held = True
        finally:
            os.close(fd)
        if own:
            return None if ignore_own else f"pid {os.getpid()}"
        named = _lock_file_holder(Path(run_dir) / LOCK_NAME)
        if held:
            return named or "another process"
        return named  # a draftgen from before the directory lock holds only the file


def _lock_file_holder(path: Path) -> str | None:
    """The text of a lock file whose lock is held (``"another process"`` if it is blank), or
    None if no process holds it."""
    try:
        handle = open(path)
    except OSError:
        return None
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return handle.read().strip() or "another process"
        fcntl.flock(handle, fcntl.LOCK_UN)
    return None


def _lock_file_text(path: Path) -> str | None:
    """What a lock file says (``"pid N"``), or None if it is gone or blank."""
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def _fd_key(fd: int) -> tuple[int, int]:
    stat = os.fstat(fd)
    return stat.st_dev, stat.st_ino


def _file_key(path: Path) -> tuple[int, int]:
    stat = os.stat(path)
    return stat.st_dev, stat.st_ino


def check_run_dir(run_dir: Path) -> None:
    if run_dir.exists() and not run_dir.is_dir():
        raise StoreError(
            f"{run_dir} is a file, not a run directory; give a directory (new or a run's) instead"
        )


def run_files(run_dir: Path) -> list[str]:
    """The files of a run in ``run_dir`` besides its database: what shows a run was here."""
    names = [LOCK_NAME, REJECTED_NAME, f"{DB_NAME}-wal", f"{DB_NAME}-shm"]
    found = [name for name in names if (run_dir / name).exists()]
    for pattern in (RECOVERED_GLOB, UNSTORED_GLOB):
        found += sorted(path.name for path in run_dir.glob(pattern))
    return found


def check_store_file(run_dir: Path, create: bool, ignore: Collection[str] = ()) -> None:
    """Refuse a database file that is not a run's store before SQLite would take it for a new
    one: an empty (0-byte) file where a run's other files show a run was here (a store emptied
    under a run would start it over, buying everything again), or a file that is not SQLite. A
    brand-new directory (``create``) starts a new run; ``ignore``: files that show nothing."""
    path = run_dir / DB_NAME
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        if create:
            return
        saved = sorted(run_dir.glob(RECOVERED_GLOB))
        hint = f"; {saved[-1]} holds the store a run saved: move it to {path}" if saved else ""
        raise StoreError(f"{run_dir} holds no draftgen run ({DB_NAME} is missing{hint})") from None
    except OSError:
        return  # SQLite's open says what is wrong
    if size == 0:
        found = [name for name in run_files(run_dir) if name not in ignore]
        if found:
            raise StoreError(
                f"{path} is empty (0 bytes) but {run_dir} holds a run's files ({', '.join(found)}):"
                " put the store back from a backup, or delete it to start the run over (every "
                "completion is then bought again)"
            )
        if not create:
            raise StoreError(f"{run_dir} holds no draftgen run ({DB_NAME} is empty)")
    # A file that is not SQLite is refused by SQLite's own first read (``not_a_store``): opening
    # it here would not do, since closing any descriptor of the file drops every lock this
    # process's connections hold on it, and another process would then take the store for idle.


def not_a_store(path: Path) -> StoreError:
    return StoreError(
        f"{path} is not an SQLite database: put the run's store back from a backup, or move it "
        f"out of {path.parent} to start the run over"
    )


def restore_recovered(run_dir: Path) -> bool:
    """Put back the store a run saved when its database was deleted under it (see
    ``StoreIdentity``), or refuse a directory where that store and another one compete; whether
    one was put back."""
    path = run_dir / DB_NAME
    if not path.exists():
        # A journal without its database is the deleted store's: SQLite would lay its pages
        # over the next database opened here.
        for suffix in ("-wal", "-shm"):
            (run_dir / f"{DB_NAME}{suffix}").unlink(missing_ok=True)
    recovered = sorted(run_dir.glob(RECOVERED_GLOB))
    if not recovered:
        return False
    if len(recovered) == 1 and not path.exists():
        os.replace(recovered[0], path)
        _log.warning("resuming from %s, saved when the store was deleted under a run", recovered[0])
        return True
    names = ", ".join(str(p) for p in recovered)
    if path.exists():
        raise StoreError(
            f"{names} holds the store of a run whose {DB_NAME} was replaced under it: move it to "
            f"{path} to resume from it, or out of {run_dir} to resume from the store there"
        )
    raise StoreError(
        f"{run_dir} holds {len(recovered)} saved stores ({names}) and no {DB_NAME}: move the one "
        f"to resume from to {path} and the others out of {run_dir}"
    )


class StoreIdentity:
    """The database file a store opened (device and inode), checked against its path.

    SQLite goes on writing to a file deleted or replaced under it, where nothing will find the
    rows: the run's writer checks after every commit (an ``os.stat`` of the database and one of
    the lock file, 4 µs together, where a commit's fsync takes 300 µs or more) and, if the file
    at the path is another one, saves what the still-open connection holds to
    ``recovered-<time>.sqlite`` with SQLite's backup and stops the run. The run's lock file is
    watched too (``RunLock.keep``).
    """

    def __init__(self, path: Path, lock: RunLock | None = None) -> None:
        self.path = path
        self.key = _file_key(path)
        self.lock = lock
        self.recovery: Path | None = None  # where the rows were saved once the file was lost
        self.lost: str | None = None  # the message of the loss, once found
        self._journal: dict[Path, tuple[int, int]] = {}  # the lost file's -wal and -shm
        self._saving = threading.Lock()

    def check(self, db: sqlite3.Connection) -> None:
        """Raise ``StoreHalted`` if the file at the path is not the one opened, having saved
        what ``db`` (a connection to the file opened) holds on the first time."""
        if self.lost is None and self._holds_path():
            if self.lock is not None:
                self.lock.keep()
            return
        with self._saving:
            if self.lost is None:
                self.lost = self._save(db)
        raise StoreHalted(self.lost)

    def save_again(self, db: sqlite3.Connection) -> None:
        """Save what ``db`` holds once more, over the first save: rows written after the loss."""
        with self._saving:
            if self.recovery is not None:
                with contextlib.suppress(OSError, sqlite3.Error):
                    _backup(db, self.recovery)

    def drop_journal(self) -> None:
        """Delete the lost file's journal (``-wal``, ``-shm``) once no connection of this
        process holds the file: SQLite keeps it when its file has moved, and would lay its pages
        over the next database opened at the path."""
        for path, key in self._journal.items():
            with contextlib.suppress(OSError):
                if _file_key(path) == key:
                    path.unlink()

    def _holds_path(self) -> bool:
        try:
            return _file_key(self.path) == self.key
        except (FileNotFoundError, NotADirectoryError):
            return False
        except OSError:
            return True  # cannot tell (permissions): a paid run is not stopped on a guess

    def _save(self, db: sqlite3.Connection) -> str:
        """Save the rows ``db`` holds beside the path; the sentence that stops the run."""
        deleted = not self.path.exists()
        for suffix in ("-wal", "-shm"):  # still the lost file's: its connections have them open
            with contextlib.suppress(OSError):
                journal = self.path.with_name(self.path.name + suffix)
                self._journal[journal] = _file_key(journal)
        what = f"{self.path} was deleted or replaced while the run was writing to it"
        target = self.path.parent / f"recovered-{time.strftime('%Y%m%dT%H%M%S')}.sqlite"
        try:
            completions = _backup(db, target)
        except (OSError, sqlite3.Error) as exc:
            return (
                f"{what}, and the store it held could not be saved ({exc}): its completions are "
                "lost, and the same command starts the run over"
            )
        self.recovery = target
        _log.warning("saved the %d completions of the lost store in %s", completions, target)
        if deleted:
            return (
                f"{what}; the store it held is saved in {target}, which the same command "
                "resumes from"
            )
        return (
            f"{what}; the store it held is saved in {target}: move it to {self.path}, in place "
            "of the file put there, and rerun the same command to resume"
        )


def _backup(db: sqlite3.Connection, target: Path) -> int:
    """Copy the database ``db`` holds to ``target`` (whole, or not at all); its completions."""
    partial = target.with_name(f".{target.name}.partial")
    partial.unlink(missing_ok=True)
    copy = sqlite3.connect(partial)
    try:
        db.backup(copy)
        completions = copy.execute("SELECT count(*) FROM completions").fetchone()[0]
    finally:
        copy.close()
    with open(partial, "rb+") as handle:
        os.fsync(handle.fileno())
    os.replace(partial, target)
    _sync_directory(target.parent)
    return completions


def _sync_directory(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def side_file_line(sql: str, params: tuple) -> bytes:
    """One statement of a side file as a JSON line (blobs as hex, their places listed)."""
    blobs = [i for i, value in enumerate(params) if isinstance(value, bytes)]
    values = [value.hex() if i in blobs else value for i, value in enumerate(params)]
    return orjson.dumps({"sql": sql, "params": values, "blobs": blobs}) + b"\n"


def read_side_file(path: Path) -> list[tuple[str, tuple]]:
    """The statements of a side file; a line cut short by a crash is left out (its write was
    never reported done, so its turn is asked again)."""
    statements = []
    with open(path, "rb") as handle:
        for line in handle:
            try:
                entry = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            params = [
                bytes.fromhex(value) if i in entry["blobs"] else value
                for i, value in enumerate(entry["params"])
            ]
            statements.append((entry["sql"], tuple(params)))
    return statements

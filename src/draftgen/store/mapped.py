"""The store's shared-memory file (SQLite's ``-shm``, mapped by every connection in WAL mode) while
it cannot be written: a write to its mapped pages is then waited out, not a SIGBUS that kills.

On ext4 (and others) a page of a file made immutable (``chattr +i``) faults with SIGBUS when it is
next written through a mapping, once writeback has cleaned it. Every connection writes the
``-shm`` (a reader takes a read mark there), so a run directory made immutable for 30 s killed the
run with no word (issue #41, item 4). ``PRAGMA mmap_size=0`` does not cover the ``-shm``, and
``locking_mode=EXCLUSIVE`` (no mapping) would shut ``draftgen status`` out of a running store.

With ``waiting_out_bus_errors`` installed, Python's own handler takes the signal: the kernel
delivers it to the thread that wrote, the handler returns and the write is tried again, fault
after fault, until the file takes it (the thread holds no GIL meanwhile: SQLite runs without it).
The handler, which runs in the main thread, says once that the run waits, and ends the process
with one sentence if the writes are refused for longer than the store's patience. A SIGBUS in the
main thread itself waits the same way, silently: the main thread is the one that speaks.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from draftgen.store.writer import STORE_PATIENCE

_log = logging.getLogger("draftgen.store")

# Faults further apart than this are two waits, not one.
QUIET = 5.0
# The exit status when the store's files stayed unwritable past the patience (the CLI's
# EXIT_ERROR: what the user must fix); os._exit, since the thread that faults cannot be stopped.
UNWRITABLE_EXIT = 2


class BusErrorWait:
    """The SIGBUS handler of one run directory: when the faults of one wait began, whether it
    was said, and how long the store may stay unwritable (``patience``)."""

    def __init__(self, run_dir: Path, patience: float = STORE_PATIENCE) -> None:
        self.run_dir = run_dir
        self.patience = patience
        self.began: float | None = None
        self.last = 0.0
        self.waits = 0  # waits begun (for tests)

    def __call__(self, signum: int, frame: object) -> None:
        # Set before anything that may run Python again: the next fault's call can come in the
        # middle of this one (the log line's), and must see the same wait.
        now, last = time.monotonic(), self.last
        self.last = now
        if self.began is None or now - last > QUIET:
            self.began = now
            self.waits += 1
            _quiet_wakeup_fd()
            _log.warning(
                "the store's files in %s cannot be written (made immutable?): the run waits "
                "until they can, for up to %.0f s; nothing stored is lost",
                self.run_dir,
                self.patience,
            )
        if now - self.began > self.patience:
            print(
                f"draftgen: the store's files in {self.run_dir} could not be written for "
                f"{now - self.began:.0f} s (made immutable?); what was committed is kept: make "
                "the directory writable and rerun the same command to resume",
                file=sys.stderr,
                flush=True,
            )
            os._exit(UNWRITABLE_EXIT)


def _quiet_wakeup_fd() -> None:
    """Python writes each signal to the loop's wakeup fd; faults by the thousand a second fill it,
    and each write that fails would print a warning: kept, unwarned."""
    with contextlib.suppress(ValueError):
        fd = signal.set_wakeup_fd(-1)
        if fd != -1:
            signal.set_wakeup_fd(fd, warn_on_full_buffer=False)


@contextlib.contextmanager
def waiting_out_bus_errors(
    run_dir: Path, patience: float = STORE_PATIENCE
) -> Iterator[BusErrorWait]:
    """SIGBUS waited out (``BusErrorWait``) while the block runs; from the main thread only (a
    signal handler is the main thread's), elsewhere nothing changes."""
    wait = BusErrorWait(run_dir, patience)
    try:
        previous = signal.signal(signal.SIGBUS, wait)
    except ValueError:  # not the main thread: its caller's process keeps its own handling
        yield wait
        return
    hook = sys.unraisablehook

    def unraisable(report) -> None:
        # Until the handler quiets it, each fault's write to a full wakeup fd is reported.
        if "signal wakeup fd" not in (report.err_msg or ""):
            hook(report)

    sys.unraisablehook = unraisable
    try:
        yield wait
    finally:
        sys.unraisablehook = hook
        # None: a handler set from C (faulthandler's), which Python cannot set back.
        signal.signal(signal.SIGBUS, previous if previous is not None else signal.SIG_DFL)

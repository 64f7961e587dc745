"""Room held in reserve for a full disk: a file of ``RESERVE_BYTES`` made in the run directory
as a run starts, which its writer deletes when the disk is full so the answers in flight fit.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

RESERVE_NAME = "draftgen.reserve"
# Room for the answers in flight when the disk fills, each written twice (the record, then the
# store's WAL): 64 answers in flight of 128 KB each, with room to spare for SQLite's pages.
RESERVE_BYTES = 32 << 20

_log = logging.getLogger("draftgen.store")


class Reserve:
    """``draftgen.reserve`` in ``run_dir``: its blocks allocated (``posix_fallocate``, not a
    sparse file the full disk could not fill in), held while the run writes."""

    def __init__(self, run_dir: Path, size: int | None = None) -> None:
        self.path = Path(run_dir) / RESERVE_NAME
        self.size = RESERVE_BYTES if size is None else size

    def hold(self) -> bool:
        """Make the file (or keep the one a stopped run left); False, with a warning, if the
        disk has no room for it: the run then goes on with the writer's patience alone."""
        try:
            with contextlib.suppress(FileNotFoundError):
                if self.path.stat().st_size >= self.size:
                    return True
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o600)
            try:
                os.posix_fallocate(fd, 0, self.size)
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            self.path.unlink(missing_ok=True)
            _log.warning(
                "cannot hold %d MiB in reserve in %s (%s): a full disk will stop the run with "
                "the answers in flight kept in memory, not on disk",
                self.size >> 20,
                self.path.parent,
                exc.strerror or exc,
            )
            return False
        return True

    def release(self) -> bool:
        """Delete the file, giving its room back to the disk; False if there was none."""
        try:
            self.path.unlink()
        except OSError:  # gone, or the directory made read-only: no room to give
            return False
        return True

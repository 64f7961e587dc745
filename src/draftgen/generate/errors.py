"""The error of a run a user can act on (the CLI prints its message as one sentence); apart from
``pipeline`` so that the live engine (``engine``) raises it without importing the run.
"""

from __future__ import annotations

from draftgen.errors import DraftgenError


class RunError(DraftgenError, RuntimeError):
    """A run that cannot start or must stop; the message says what to do. ``reason``: why, without
    where the run's data is and how to resume (what a caller that made the run directory itself
    and deletes it says instead)."""

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason or message

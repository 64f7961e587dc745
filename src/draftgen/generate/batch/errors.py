"""The error of a batch run a user can act on (the CLI prints it as one sentence, exit 2)."""

from __future__ import annotations

from draftgen.errors import DraftgenError


class BatchRunError(DraftgenError, RuntimeError):
    """A batch run that cannot start or must stop; the message says what to do."""

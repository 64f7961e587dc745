"""The one base of every error a user can act on; the CLI prints its message as one sentence."""

from __future__ import annotations


class DraftgenError(Exception):
    """An error whose message says what went wrong and what to do (never a secret)."""

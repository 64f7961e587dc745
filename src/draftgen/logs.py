"""Logging for draftgen: one stderr handler writing plain or JSON lines, secrets redacted.

``configure`` is called once by the CLI (``--log-level``, ``--log-json``); the library logs through
``logging.getLogger("draftgen.<module>")`` and registers API keys with ``add_secret``.
"""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime

import orjson

from draftgen.redact import MASK, redact

LEVELS = ("debug", "info", "warning", "error")
# The attributes every LogRecord has; anything else on a record came from ``extra=``.
_RECORD_ATTRIBUTES = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message",
    "asctime",
    "taskName",
}
__all__ = ["LEVELS", "MASK", "REDACTOR", "add_secret", "configure"]


class SecretRedactor(logging.Filter):
    """Replaces registered secrets (and key-shaped text, ``draftgen.redact``) in a record's
    message and extras."""

    def __init__(self) -> None:
        super().__init__()
        self.secrets: set[str] = set()

    def redact(self, text: str) -> str:
        return redact(text, self.secrets)

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = self.redact(record.getMessage())
        record.args = None
        for name, value in list(vars(record).items()):
            if name not in _RECORD_ATTRIBUTES and isinstance(value, str):
                setattr(record, name, self.redact(value))
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.redact(record.exc_text)
        return True


REDACTOR = SecretRedactor()


def add_secret(value: str | None) -> None:
    """Never let ``value`` reach a log line (short values are too common to mask safely)."""
    if value and len(value) >= 8:
        REDACTOR.secrets.add(value)


def extra_fields(record: logging.LogRecord) -> dict:
    """What the caller passed in ``extra=``: the fields a JSON line carries beside the message.

    Private names are left out: libraries add their own to every record (Ray's log record
    factory adds ``_ray_timestamp_ns`` once ``ray.init`` has run in the process).
    """
    return {k: v for k, v in vars(record).items() if k not in _RECORD_ATTRIBUTES and k[0] != "_"}


class JsonFormatter(logging.Formatter):
    """One JSON object a line: ts (UTC, ISO 8601), level, logger, message, then the extras."""

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name, value in extra_fields(record).items():
            line.setdefault(name, value)
        if record.exc_text:
            line["exception"] = record.exc_text
        return orjson.dumps(line, default=str).decode()


class PlainFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at the time (tests and wrappers replace it)."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass


def configure(level: str = "info", json: bool = False) -> logging.Handler:
    """Send draftgen's records at ``level`` and up (other libraries' from warning) to stderr.

    Calling it again replaces the handler it installed before, so it is safe per command.
    """
    if level not in LEVELS:
        raise ValueError(f"log level {level!r} is not one of {', '.join(LEVELS)}")
    root = logging.getLogger()
    for handler in list(root.handlers):
        if getattr(handler, "draftgen", False):
            root.removeHandler(handler)
    handler = _StderrHandler()
    handler.draftgen = True
    handler.addFilter(REDACTOR)
    handler.setFormatter(JsonFormatter() if json else PlainFormatter())
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    logging.getLogger("draftgen").setLevel(level.upper())
    return handler

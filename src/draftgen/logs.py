"""Logging for draftgen: one stderr handler writing plain or JSON lines, secrets redacted.

``configure`` is called once by the CLI (``--log-level``, ``--log-json``); the library logs through
``logging.getLogger("draftgen.<module>")`` and registers API keys with ``add_secret``.
"""

from __future__ import annotations

import io
import logging
import sys
from datetime import UTC, datetime

import orjson

from draftgen.redact import MASK, printable, printable_json, redact

LEVELS = ("debug", "info", "warning", "error")
# The attributes every LogRecord has; anything else on a record came from ``extra=``.
_RECORD_ATTRIBUTES = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message",
    "asctime",
    "taskName",
}
__all__ = ["LEVELS", "MASK", "REDACTOR", "add_secret", "adopt_third_party", "configure"]
# Libraries whose loggers draftgen takes over: their own handlers (huggingface_hub and
# transformers each add one that prints every retry raw, the URL and its hub id in it) are
# removed, and what they log goes through draftgen's handler, redacted, at error and up (warning
# and up with --log-level debug).
THIRD_PARTY = (
    "huggingface_hub",
    "transformers",
    "urllib3",
    "filelock",
    "httpx",
    "httpx2",
    "httpcore",
    "datasets",
    "fsspec",
)


class SecretRedactor(logging.Filter):
    """Replaces registered secrets (and key-shaped text, ``draftgen.redact``) in a record's
    message and extras."""

    def __init__(self) -> None:
        super().__init__()
        self.secrets: set[str] = set()

    def redact(self, text: str) -> str:
        # Log lines quote servers and files: no escape sequence they hold reaches a terminal
        # (a traceback keeps its newlines).
        return printable(redact(text, self.secrets), newlines=True)

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            # A value put into a line (a provider's name, a server's words) is one line of it: a
            # newline it holds is shown as \n, so it cannot start a line that looks like draftgen's.
            record.args = tuple(
                printable(arg) if isinstance(arg, str) else arg for arg in record.args
            )
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
        return printable_json(line)


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
    adopt_third_party()
    return handler


def adopt_third_party() -> None:
    """Route the ``THIRD_PARTY`` loggers through draftgen's handler only, at error and up.

    Called again after importing such a library: huggingface_hub adds its handler and sets its
    level when it is first imported.
    """
    debug = logging.getLogger("draftgen").level <= logging.DEBUG
    for name in THIRD_PARTY:
        logger = logging.getLogger(name)
        for handler in list(logger.handlers):
            logger.removeHandler(handler)
        logger.propagate = True
        logger.setLevel(logging.WARNING if debug else logging.ERROR)


def json_line(message: str, level: str = "info", logger: str = "draftgen") -> str:
    """``message`` as one JSON line of ``JsonFormatter``'s shape (no newline)."""
    line = {
        "ts": datetime.now(UTC).isoformat(timespec="milliseconds"),
        "level": level,
        "logger": logger,
        "message": REDACTOR.redact(message),
    }
    return printable_json(line)


class JsonLineStream(io.TextIOBase):
    """stderr under ``--log-json``: every line that reaches it is a JSON object. A line already
    one (a log record) passes as it is; any other (a message printed for people, argparse's
    error) becomes ``json_line(text)``. It is no terminal, so the live display of a run gives
    way to its progress records."""

    def __init__(self, stream) -> None:
        super().__init__()
        self.stream = stream
        self._pending = ""
        self.level = "info"  # of the plain lines written next (main sets error for errors)

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def write(self, text: str) -> int:
        self._pending += text
        *lines, self._pending = self._pending.split("\n")
        for line in lines:
            self.stream.write(self._as_json(line) + "\n")
        return len(text)

    def _as_json(self, line: str) -> str:
        if line.startswith("{"):
            try:
                orjson.loads(line)
                return line
            except orjson.JSONDecodeError:
                pass
        return json_line(line, self.level, "draftgen.cli")

    def flush(self) -> None:
        self.stream.flush()

    def finish(self) -> None:
        """Write what is left of a line that never ended."""
        if self._pending:
            pending, self._pending = self._pending, ""
            self.stream.write(self._as_json(pending) + "\n")
        self.flush()

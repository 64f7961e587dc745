"""The signals that stop a draftgen command (Ctrl-C, SIGTERM, SIGHUP) and the setting and putting
back of their handlers, for generation, exports and the CLI alike (the standard library only).
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

# SIGHUP (a closed terminal or SSH session) and SIGTERM would by default end the process at once,
# losing what is in flight or leaving work files behind: all three are handled alike.
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class SignalInterrupt(KeyboardInterrupt):
    """SIGTERM or SIGHUP (or Ctrl-C) raised as Ctrl-C is, with its number: the command exits
    128 + ``signum``, as a shell reports a process the signal ended."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class SignalHandlers:
    """``handler`` for each of ``SIGNALS`` from ``install`` (or entering the block) to ``restore``,
    which puts back the handlers before. Set only in the main thread (Python's rule): elsewhere
    both do nothing."""

    def __init__(self, handler: Callable[[int, FrameType | None], Any]) -> None:
        self.handler = handler
        self._saved: dict[int, Any] = {}

    def install(self) -> None:
        if threading.current_thread() is threading.main_thread():
            for signum in SIGNALS:
                self._saved[signum] = signal.signal(signum, self.handler)

    def restore(self) -> None:
        for signum, previous in self._saved.items():
            signal.signal(signum, previous)
        self._saved.clear()

    def __enter__(self) -> SignalHandlers:
        self.install()
        return self

    def __exit__(self, *exc: object) -> None:
        self.restore()


def add_loop_handlers(loop: asyncio.AbstractEventLoop, callback: Callable[[int], Any]) -> None:
    """``callback(signum)`` for each of ``SIGNALS``, run by the event loop (not inside whatever
    code the signal interrupted)."""
    for signum in SIGNALS:
        loop.add_signal_handler(signum, callback, signum)


def remove_loop_handlers(loop: asyncio.AbstractEventLoop) -> None:
    """The loop's handlers of ``SIGNALS`` taken away (asyncio puts back Python's defaults)."""
    for signum in SIGNALS:
        loop.remove_signal_handler(signum)

"""Ctrl-C, SIGTERM and SIGHUP during generation, the same for every engine: the first signal
stops sending and lets what is in flight finish; a second abandons it.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Protocol

from draftgen.signals import add_loop_handlers, remove_loop_handlers

if TYPE_CHECKING:
    from draftgen.generate.progress import RunProgress


class Interruptible(Protocol):
    """An engine as the signal handler sees it; each method does its step and returns the
    sentence that tells the user what happens now."""

    stop: asyncio.Event  # set once the engine sends nothing new
    progress: RunProgress  # the first signal is kept in its ``signal`` (the exit status's)

    def on_first_signal(self) -> str: ...

    def on_second_signal(self) -> str: ...


class SignalStop:
    """The engine's signal handling while it generates: ``install`` ... ``remove``.

    The one place an engine writes to stderr itself: the user pressed a key and waits for word.
    """

    def __init__(self, engine: Interruptible, loop: asyncio.AbstractEventLoop) -> None:
        self.engine = engine
        self.loop = loop

    def install(self) -> None:
        add_loop_handlers(self.loop, self.on_signal)

    def remove(self) -> None:
        remove_loop_handlers(self.loop)
        if (after := _AFTER.get(self.loop)) is not None:
            add_loop_handlers(self.loop, after)

    @staticmethod
    @contextlib.contextmanager
    def afterwards(
        loop: asyncio.AbstractEventLoop, handler: Callable[[int], None]
    ) -> Iterator[None]:
        """``handler`` hears the signals from the moment an engine removes its own until the
        block ends (the run's tail: the writer's last rows, the reconstruction's rest), so a
        Ctrl-C there is answered at once, not taken for a crash once the tail is done."""
        _AFTER[loop] = handler
        try:
            yield
        finally:
            del _AFTER[loop]
            remove_loop_handlers(loop)

    def on_signal(self, signum: int) -> None:
        # A second signal, not a stop the run made itself (a store that took no more, a full
        # disk): the requests in flight, paid for, are still given their grace after that one.
        if self.engine.progress.signal is not None:
            self.say(self.engine.on_second_signal())
        else:
            self.engine.progress.signal = signum
            self.say(self.engine.on_first_signal())

    @staticmethod
    def say(text: str) -> None:
        print(text, file=sys.stderr)


# The handler a run's tail gives the signals once an engine lets go of them (``afterwards``).
_AFTER: dict[asyncio.AbstractEventLoop, Callable[[int], None]] = {}

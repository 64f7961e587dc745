"""Ctrl-C, SIGTERM and SIGHUP while an export or a vocabulary is written: the work files are
removed, and once the finished files are being put in place the signal is only noted.
"""

from __future__ import annotations

import contextlib
import threading

from draftgen.signals import SignalHandlers, SignalInterrupt


class StopSignals:
    """SIGTERM and SIGHUP during an export raise ``KeyboardInterrupt`` as Ctrl-C does (a
    ``SignalInterrupt`` naming which), so the
    cleanup that removes the ``.partial`` file and the ``.draftgen-hf-*`` work directory runs
    for them too (their default would end the process on the spot, leaving both behind).

    Any of the three during ``swap`` (the renames that put a finished export in place) or after
    it is noted, not raised: a previous export is never left half replaced, and an export in
    place is complete, so the command reports it and succeeds (``after_swap`` names the
    signal). Handlers are set only in the main thread (Python's rule) and put back on the way
    out.
    """

    def __init__(self) -> None:
        self._handlers = SignalHandlers(self._on_signal)
        self._swapping = False
        self._swapped = False
        self.after_swap: int | None = None  # a signal that came during or after the swap

    def __enter__(self) -> StopSignals:
        self._swapped = False
        self.after_swap = None
        self._handlers.install()
        return self

    def __exit__(self, *exc: object) -> None:
        self._handlers.restore()

    def _on_signal(self, signum: int, frame: object) -> None:
        if self._swapping or self._swapped:
            self.after_swap = signum
            return
        raise SignalInterrupt(signum)

    @contextlib.contextmanager
    def swap(self):
        if threading.current_thread() is not threading.main_thread():
            yield  # signals are handled in the main thread: nothing to hold off here
            return
        self._swapping = True
        try:
            yield
            self._swapped = True  # the export is in place: what is left is tidying up
        finally:
            self._swapping = False


STOP_SIGNALS = StopSignals()

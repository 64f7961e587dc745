"""One thread that runs calls in the order they are given, off the event loop, and hands their
results back in that order, a group at a time: one wake-up of the loop for what is ready, not one
per call (``run_in_executor`` costs a wake-up and two futures a call).
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from typing import Any


class SerialExecutor:
    """``await executor.run(fn, *args)``: ``fn(*args)`` on the executor's thread, first come first
    served (a run that renders its prompts here sends them in the order they were asked for)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._calls: queue.SimpleQueue = queue.SimpleQueue()  # (future, fn, args), None: stop
        self._lock = threading.Lock()
        self._done: list[tuple[asyncio.Future, Any, BaseException | None]] = []
        self._delivering = False  # a delivery is scheduled on the loop and has not run yet
        self._thread: threading.Thread | None = None
        self._closed = False

    def run(self, fn: Callable, *args: Any) -> asyncio.Future:
        """A future of ``fn(*args)``'s result (or exception)."""
        if self._closed:
            raise RuntimeError(f"{self.name} is shut down")
        future = asyncio.get_running_loop().create_future()
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name=self.name, daemon=True)
            self._thread.start()
        self._calls.put((future, fn, args))
        return future

    def shutdown(self) -> None:
        """Run nothing more: the call in hand finishes, the waiting ones are cancelled (call it
        from the loop's thread)."""
        self._closed = True
        while True:
            try:
                call = self._calls.get_nowait()
            except queue.Empty:
                break
            if call is not None:
                call[0].cancel()
        self._calls.put(None)

    def _work(self) -> None:
        while (call := self._calls.get()) is not None:
            future, fn, args = call
            if future.done():  # cancelled while it waited
                continue
            try:
                result, error = fn(*args), None
            except BaseException as exc:  # handed to the awaiting coroutine, as an executor does
                result, error = None, exc
            with self._lock:
                self._done.append((future, result, error))
                if self._delivering:
                    continue
                self._delivering = True
            try:
                future.get_loop().call_soon_threadsafe(self._deliver)
            except RuntimeError:  # the loop is closed: nobody waits for the results
                return

    def _deliver(self) -> None:
        with self._lock:
            done, self._done = self._done, []
            self._delivering = False
        for future, result, error in done:
            if future.done():
                continue
            if error is None:
                future.set_result(result)
            else:
                future.set_exception(error)

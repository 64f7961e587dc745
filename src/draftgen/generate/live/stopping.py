"""When a live run stops: a stop asked for (the budget, a fatal error, a signal), the store halting,
the requests in flight given their grace and then abandoned; what ``signals.SignalStop`` drives.
"""

from __future__ import annotations

import asyncio
from typing import Any

from draftgen.generate.client import ChatClient
from draftgen.generate.progress import RunProgress
from draftgen.store.database import StoreHalted


class Stopping:
    """The run's stop (``signals.Interruptible``): ``stop`` is set once nothing new is sent;
    ``workers`` and ``producer`` are the tasks a stop cancels, set as the engine starts them."""

    def __init__(self, options: Any, progress: RunProgress, client: ChatClient) -> None:
        self.options = options
        self.progress = progress
        self.client = client
        self.stop = asyncio.Event()
        self.halted: StoreHalted | None = None  # the store took no more: the run's error
        self.workers: list[asyncio.Task] = []
        self.producer: asyncio.Task | None = None

    def halt(self, error: StoreHalted) -> None:
        """The store takes no more (its file is gone, the disk refused a write too long): send
        nothing new and give the requests in flight, already paid for, ``shutdown_grace``
        seconds to reach the writer, which keeps them where ``error`` says; then stop with it."""
        if self.halted is None:
            self.halted = error
            self.request_stop(str(error))
            asyncio.get_running_loop().call_later(self.options.shutdown_grace, self.abandon)

    def request_stop(self, reason: str) -> None:
        """Send nothing new and let workers finish their turn in hand; the first reason stays."""
        if not self.stop.is_set():
            self.progress.stopped = reason
            self.client.stop(reason)
            self.stop.set()

    def abandon(self) -> None:
        """Cancel the workers, and with them the requests they wait on."""
        for task in self.workers:
            task.cancel()

    def on_first_signal(self) -> str:
        """Ctrl-C (or SIGTERM, SIGHUP): send nothing new and give the requests in flight
        ``shutdown_grace`` seconds, then abandon them."""
        self.request_stop("interrupted")
        if self.producer is not None:
            self.producer.cancel()
        grace = self.options.shutdown_grace
        asyncio.get_running_loop().call_later(grace, self.abandon)
        in_flight = self.client.limiter.in_flight
        if not in_flight:
            return "draftgen: stopping; no request is in flight, so there is nothing to wait for"
        requests = "1 request" if in_flight == 1 else f"{in_flight} requests"
        return (
            f"draftgen: stopping; waiting up to {grace:.0f} s for {requests} in flight "
            "(Ctrl-C again to abandon them)"
        )

    def on_second_signal(self) -> str:
        self.abandon()
        return "draftgen: abandoning the requests in flight"

    def on_producer_done(self, task: asyncio.Task) -> None:
        if not task.cancelled() and task.exception() is not None:
            self.abandon()  # an unreadable input: the workers would wait forever

    def producer_error(self) -> BaseException | None:
        """What the producer raised (an unreadable input), to be the run's error."""
        producer = self.producer
        if producer is not None and producer.done() and not producer.cancelled():
            return producer.exception()
        return None

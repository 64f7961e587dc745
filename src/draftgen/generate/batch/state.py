"""What the parts of one batch run share: the store's writer and ledger, where each turn stands in
this process, the progress shown, and the stop that ends the run's waits.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from dataclasses import dataclass, field
from typing import Any

from draftgen.generate.batch.dialects import Dialect
from draftgen.generate.batch.progress import BatchDisplay, BatchProgress
from draftgen.generate.batch.submit import BatchTarget
from draftgen.generate.resume import StoredTurns
from draftgen.store.batch_ledger import Ledger
from draftgen.store.writer import CompletionWriter


@dataclass
class BatchRunState:
    """One batch run's shared values (``generate.BatchRun`` makes them; ``rounds.RoundSender``
    sends, ``polling.BatchPoller`` collects)."""

    options: Any  # the run's RunOptions
    dialect: Dialect
    target: BatchTarget
    writer: CompletionWriter
    ledger: Ledger
    stored: StoredTurns
    progress: BatchProgress
    display: BatchDisplay
    poll: float  # seconds of the first wait: between polls, after a 429
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    tries: collections.Counter = field(default_factory=collections.Counter)  # retried sends
    given_up: set[str] = field(default_factory=set)  # failed for good in this process

    def request_stop(self, reason: str) -> None:
        if not self.stop.is_set():
            self.progress.stopped = reason
            self.stop.set()

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds``, or less if the run stops meanwhile."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stop.wait(), timeout=seconds)


class BatchPart:
    """A part of a batch run (``rounds.RoundSender``, ``polling.BatchPoller``): the run's shared
    state under the names the parts use, each the one value ``BatchRunState`` holds."""

    def __init__(self, state: BatchRunState) -> None:
        self.options = state.options
        self.dialect = state.dialect
        self.target = state.target
        self.ledger = state.ledger
        self.writer = state.writer
        self.stored = state.stored
        self.progress = state.progress
        self.display = state.display
        self.stop = state.stop
        self.tries = state.tries
        self.given_up = state.given_up
        self.poll = state.poll
        self.sleep = state.sleep
        self.request_stop = state.request_stop

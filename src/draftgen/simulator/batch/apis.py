"""The simulator's batch APIs mounted on its app: both wire formats' routes over one book of
batches, and the ticker that finishes rows when their time comes.
"""

from __future__ import annotations

import asyncio
import time

from aiohttp import web

from draftgen.simulator.batch.book import BatchBook
from draftgen.simulator.batch.openai_files import OpenAIFileBatchRoutes
from draftgen.simulator.batch.openrouter import OpenRouterBatchRoutes
from draftgen.simulator.exchange import Host


class BatchSimulator:
    """Batches of one simulator, served in both dialects on its app: ``book`` holds them, each
    format (``openrouter``, ``openai_files``) answers its own routes."""

    def __init__(self, simulator: Host) -> None:
        self.book = BatchBook(simulator)
        self.config = simulator.config
        self.batches = self.book.batches  # by id, both dialects: the tests' ground truth
        self.log = self.book.log  # what batch_log_path gets, also in memory for tests
        self.prices = self.book.prices  # (prompt, completion) per token at the batch discount
        self.routes = (OpenRouterBatchRoutes(self.book), OpenAIFileBatchRoutes(self.book))
        self._ticker: asyncio.Task | None = None

    def close(self) -> None:
        self.book.close()

    def register(self, app: web.Application) -> None:
        for routes in self.routes:
            routes.register(app)
        app.on_startup.append(self._start_ticker)
        app.on_cleanup.append(self._stop_ticker)

    async def _start_ticker(self, app: web.Application) -> None:
        self._ticker = asyncio.create_task(self._tick())

    async def _stop_ticker(self, app: web.Application) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            await asyncio.gather(self._ticker, return_exceptions=True)

    async def _tick(self) -> None:
        """Rows finish when their time comes, whether or not anyone asks (they are billed)."""
        while True:
            await asyncio.sleep(0.05)
            now = time.monotonic()
            for batch in list(self.batches.values()):
                if not batch.terminal:
                    self.book.advance(batch, now)
                    await asyncio.sleep(0)

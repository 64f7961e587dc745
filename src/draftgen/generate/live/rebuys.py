"""Buying an excluded provider's spoiled samples again (``run.rebuy``): each queued within the
re-buy budget, asked with its first request, its answer stored in the spoiled one's place.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson

from draftgen.generate.budget import BudgetReached
from draftgen.generate.client import GenerationFailed, RunStopped
from draftgen.generate.contract import Rebuys
from draftgen.generate.live.requests import Requests
from draftgen.generate.live.stopping import Stopping
from draftgen.generate.progress import ProgressDisplay, RunProgress
from draftgen.inputs.plan import sample_of
from draftgen.records import GenerationSettings
from draftgen.store.database import StoreHalted, completion_statements, replacement_statements

if TYPE_CHECKING:
    from draftgen.store.writer import CompletionWriter

_log = logging.getLogger("draftgen.generate")


class Rebuying:
    """Spoiled completions (``providers.spoiled_completions``) queued by ``produce_rebuys`` and
    bought by the workers (``rebuy_one``); what it came to is ``rebuys``."""

    def __init__(
        self,
        options: Any,
        queue: asyncio.Queue,
        stopping: Stopping,
        progress: RunProgress,
        display: ProgressDisplay,
        writer: CompletionWriter,
        requests: Requests,
        sample_settings: Callable[[int], GenerationSettings],
    ) -> None:
        self.options = options
        self.queue = queue
        self.stopping = stopping
        self.progress = progress
        self.display = display
        self.writer = writer
        self.requests = requests
        self.sample_settings = sample_settings
        self.rebuys = Rebuys()
        self._reserved = 0.0  # expected cost of the re-buys queued and not yet answered

    async def produce_rebuys(self, spoiled: list[dict], allowance: float) -> None:
        """Queue each spoiled completion to be bought again while what the re-buys cost, spent
        and expected (a re-buy is expected to cost what the spoiled answer did), stays within
        ``allowance``; then one end mark per worker."""
        for row in spoiled:
            expected = max(row["cost"] or 0.0, 0.0)
            if self.rebuys.cost + self._reserved + expected > allowance:
                self.rebuys.over_budget += 1
                self.progress.rows_done += 1
                continue
            self._reserved += expected
            await self.queue.put(row)
            self.display.refresh()
        for _ in range(self.options.concurrency):
            await self.queue.put(None)

    async def rebuy_one(self, spoiled: dict) -> None:
        """Buy a spoiled completion's turn again with the request it was asked with (the same
        messages and tools, the excluded providers left out) and store the answer in its place."""
        expected = max(spoiled["cost"] or 0.0, 0.0)
        try:
            await self.buy_again(spoiled)
        except RunStopped:
            pass
        except BudgetReached as exc:
            self.stopping.request_stop(str(exc))
        except StoreHalted as exc:
            self.stopping.halt(exc)
        except GenerationFailed as exc:
            self.rebuys.failed += 1
            _log.info("buying %s again failed (%s); it stays as it was", spoiled["key"], exc)
        finally:
            self._reserved -= expected

    async def buy_again(self, spoiled: dict) -> None:
        requests = self.requests
        request = spoiled["request"]
        asked = orjson.loads(request)
        body = orjson.dumps(
            requests.request_body(
                self.sample_settings(sample_of(spoiled["source_id"])),
                asked["messages"],
                asked.get("tools"),
                requests.stream,
                self.options.logprobs,
            )
        )
        requests.sending()
        began = time.monotonic()
        keep = requests.refused.of(spoiled["key"], spoiled["source_id"], spoiled["turn"])
        completion, errors = await requests.client.complete(body, requests.stream, keep)
        requests.count_cost(completion, request)
        self.rebuys.cost += max(completion.cost, 0.0)
        await self.writer.write(
            replacement_statements(spoiled)
            + completion_statements(
                spoiled["key"],
                spoiled["source_id"],
                spoiled["turn"],
                request,
                completion,
                len(errors) + 1,
                [e.as_dict() for e in errors],
                time.monotonic() - began,
            )
        )
        self.rebuys.bought += 1
        self.progress.record_completion(
            completion.prompt_tokens, completion.completion_tokens, completion.cost
        )

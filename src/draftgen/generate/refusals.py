"""Answers refused but billed (a false cost, a count out of range, a text past --max-answer-bytes),
as a live run keeps them: stored apart before the request is sent again, counted as spent.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from draftgen.backends.base import Billed
from draftgen.generate.budget import CostCounter, Prices, SpendGuard, counted_cost
from draftgen.generate.client import KeepRefused
from draftgen.store.refused import refused_statements

if TYPE_CHECKING:
    from draftgen.store.writer import CompletionWriter

_log = logging.getLogger("draftgen.generate")


class RefusedAnswers:
    """Keeps each answer refused for its usage or its length through the run's ``writer`` and
    counts it in ``budget`` (--max-cost, if any). ``costs`` is the run's ``CostCounter`` once
    --max-cost found its prices; without --max-cost the prices are found (``find``) at the
    first refusal, once for all the refusals waiting on them."""

    def __init__(
        self,
        writer: CompletionWriter,
        budget: SpendGuard | None,
        find: Callable[[], Awaitable[Prices]],
    ) -> None:
        self.writer = writer
        self.budget = budget
        self.costs: CostCounter | None = None
        self._find = find
        self._finding: asyncio.Future[Prices] | None = None

    def of(self, key: str | None, source_id: str, turn: int) -> KeepRefused:
        """What keeps the refused answers of one turn's request (key None: calibration's)."""
        return functools.partial(self.keep, key, source_id, turn)

    async def keep(
        self, key: str | None, source_id: str, turn: int, billed: Billed, request_bytes: int
    ) -> None:
        """Store the answer apart, counted as spent at its billed estimate (``counted_cost`` of
        its believable numbers, bytes bounding the others): the server billed it. With
        --max-cost the estimate counts before any await, so no attempt is admitted on the
        lower figure."""
        if self.costs is None:
            if self._finding is None:
                self._finding = asyncio.ensure_future(self._find())
            prices = await asyncio.shield(self._finding)
            self.costs = self.costs or CostCounter(prices)
        prompt, completion = billed.prompt_tokens, billed.completion_tokens
        cost, _ = counted_cost(
            billed.cost,
            prompt if prompt is not None else request_bytes,
            completion if completion is not None else billed.answer_bytes,
            self.costs.prices,
        )
        if self.budget is not None:
            self.budget.add_refused(cost)
        _log.warning(
            "an answer refused (%s) is kept apart as billed, counted at $%.6g",
            billed.reason,
            cost,
        )
        row = {"key": key, "source_id": source_id, "turn": turn, "reason": billed.reason}
        row.update(generation_id=billed.generation_id, provider=billed.provider)
        row.update(usage=billed.usage, answer=billed.answer, cost=cost)
        row.update(prompt_tokens=prompt, completion_tokens=completion)
        await self.writer.write(refused_statements(row))

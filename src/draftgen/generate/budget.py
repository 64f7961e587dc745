"""The spending limit of a run (``--max-cost``), checked before every attempt is sent."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class BudgetReached(Exception):
    """Sending one more request could pass the limit; the message says how much was spent."""


class SpendGuard:
    """Refuses a new attempt once spend plus the in-flight estimate would pass the limit.

    The in-flight estimate is the mean cost of a completion so far times the requests in flight.
    Until a first cost is known, one request at a time probes the price, so a first wave at high
    concurrency cannot overshoot blindly. Costs come from ``usage.cost``; a server that reports
    none is never stopped by this guard.
    """

    def __init__(self, limit: float, spent: float = 0.0, completions: int = 0) -> None:
        self.limit = limit
        self.spent = spent
        self.completions = completions
        self._probing = False

    @asynccontextmanager
    async def admit(self, in_flight: int) -> AsyncIterator[None]:
        while self.completions == 0 and self._probing:
            await asyncio.sleep(0.05)
        probe = self.completions == 0
        if probe:
            self._probing = True
        elif self.spent >= self.limit or self.spent + in_flight * self.mean_cost > self.limit:
            raise BudgetReached(self.sentence())
        try:
            yield
        finally:
            if probe:
                self._probing = False

    @property
    def mean_cost(self) -> float:
        return self.spent / self.completions if self.completions else 0.0

    def record(self, cost: float) -> None:
        self.spent += cost
        self.completions += 1

    def sentence(self) -> str:
        return (
            f"reached --max-cost ${self.limit:.4f}: spent ${self.spent:.4f} on "
            f"{self.completions} completions in this run directory; raise --max-cost and rerun "
            "the same command to continue"
        )

"""The spending limit of a run (``--max-cost``), checked before every attempt is sent, and what a
completion counts against it: its ``usage.cost`` when believable, else its tokens at listed prices.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass

import orjson

from draftgen.backends.listing import listed_prices
from draftgen.records import Completion

_log = logging.getLogger("draftgen.budget")

# USD per prompt / completion token when no listed price is known: Claude Opus's $15 / $75 per
# million, dearer than nearly every model served, so a cap errs toward stopping early.
DEFAULT_PRICES = (15e-6, 75e-6)
# A reported cost below this share of its tokens' listed price is not believed: cached prompts
# and discounts take off up to ~90 %; 1e-9 dollars a completion is no discount.
PLAUSIBLE_SHARE = 0.01
# With no listed price, a reported cost below $0.01 per million tokens is not believed: no paid
# model is listed that cheap.
UNLISTED_FLOOR = 1e-8


class BudgetReached(Exception):
    """Sending one more request could pass the limit; the message says how much was spent."""


@dataclass(frozen=True)
class Prices:
    """USD per token a completion's tokens are counted at, and where the prices come from."""

    prompt: float
    completion: float
    listed: bool  # from the model listing; else draftgen's conservative default
    source: str  # for the warning: "the listed prices of M" or the default and why

    def of(self, prompt_tokens: int, completion_tokens: int) -> float:
        return prompt_tokens * self.prompt + completion_tokens * self.completion


async def find_prices(base_url: str, model: str, api_key: str | None) -> Prices:
    """The model's prices from ``GET {base_url}/models`` (as ``estimate`` prices a run), else
    ``DEFAULT_PRICES`` with the reason there are none."""
    listed = await listed_prices(base_url, model, api_key)
    if isinstance(listed, tuple):
        return Prices(*listed, True, f"the listed prices of {model}")
    return Prices(*DEFAULT_PRICES, False, f"draftgen's default prices ({listed})")


def counted_cost(
    cost: float, prompt_tokens: int, completion_tokens: int, prices: Prices
) -> tuple[float, str]:
    """What one completion counts against ``--max-cost``, and why its reported ``cost`` was not
    believed ("" if it was): a cost that is missing (0), negative or implausibly small for its
    tokens is replaced by their price."""
    priced = prices.of(prompt_tokens, completion_tokens)
    if prices.listed:
        least, below = PLAUSIBLE_SHARE * priced, f"below 1% of ${priced:.6g} at listed prices"
    else:
        least = UNLISTED_FLOOR * (prompt_tokens + completion_tokens)
        below = "below $0.01 per million tokens"
    if cost >= least:  # NaN never is
        return cost, ""
    if cost == 0:
        return priced, "usage.cost is missing or 0"
    if cost < 0:
        return priced, f"usage.cost ${cost:.6g} is negative"
    return priced, f"usage.cost ${cost:.6g} is {below}"


class CostCounter:
    """``counted_cost`` of the completions of a run, logging once per run (not per response) the
    first time prices stand in for a reported cost."""

    def __init__(self, prices: Prices) -> None:
        self.prices = prices
        self.warned = False

    def count(
        self,
        cost: float,
        prompt_tokens: int | None,
        completion_tokens: int | None,
        request_bytes: int | None = None,
        answer_bytes: int | None = None,
    ) -> float:
        """A missing token count is taken as the bytes of the request or answer: a token of
        these vocabularies holds at least one byte of text, so bytes bound it from above."""
        counted, doubt = counted_cost(
            cost,
            prompt_tokens if prompt_tokens is not None else request_bytes or 0,
            completion_tokens if completion_tokens is not None else answer_bytes or 0,
            self.prices,
        )
        if doubt and not self.warned:
            self.warned = True
            _log.warning(
                "--max-cost counts a completion whose usage.cost is missing, negative or "
                "implausibly small at %s ($%.4g / $%.4g per million prompt / completion tokens), "
                "so that a server's word cannot lift the cap; the first: %s",
                self.prices.source,
                self.prices.prompt * 1e6,
                self.prices.completion * 1e6,
                doubt,
            )
        return counted

    def total(self, rows: Iterable[tuple]) -> tuple[float, int]:
        """(counted spend, completions) of ``count`` argument rows (``Store.spend_rows``)."""
        spent, completions = 0.0, 0
        for row in rows:
            spent += self.count(*row)
            completions += 1
        return spent, completions


def answer_bytes(completion: Completion) -> int:
    """The bytes of an answer's texts and tool calls, as ``Store.spend_rows`` measures them."""
    calls = orjson.dumps(completion.tool_calls) if completion.tool_calls else b""
    texts = (completion.content or "") + (completion.reasoning or "")
    return len(texts.encode("utf-8", "surrogatepass")) + len(calls)


class SpendGuard:
    """Refuses a new attempt once spend plus the in-flight estimate would pass the limit.

    The in-flight estimate is the mean cost of a completion so far times the requests in flight.
    Until a first cost is known, one request at a time probes the price, so a first wave at high
    concurrency cannot overshoot blindly. The client records each ``usage.cost``; the run adds
    what a completion counts beyond it (``CostCounter``), so a server reporting no cost, or a
    false one, is stopped all the same.
    """

    def __init__(self, limit: float, spent: float = 0.0, completions: int = 0) -> None:
        self.limit = limit
        self.spent = spent
        self.completions = completions
        self.refused = 0  # answers refused for their usage, billed all the same
        self._probing = False

    @asynccontextmanager
    async def admit(self, in_flight: int) -> AsyncIterator[None]:
        while self.billed == 0 and self._probing:
            await asyncio.sleep(0.05)
        if self.spent >= self.limit:
            raise BudgetReached(self.sentence())
        probe = self.billed == 0
        if probe:
            self._probing = True
        elif self.spent + in_flight * self.mean_cost > self.limit:
            raise BudgetReached(self.sentence())
        try:
            yield
        finally:
            if probe:
                self._probing = False

    @property
    def billed(self) -> int:
        """Answers the server billed: completions, and answers refused for their usage."""
        return self.completions + self.refused

    @property
    def mean_cost(self) -> float:
        return self.spent / self.billed if self.billed else 0.0

    def record(self, cost: float) -> None:
        self.spent += cost
        self.completions += 1

    def add(self, amount: float) -> None:
        """Count ``amount`` more for a completion already recorded (beyond its reported cost)."""
        self.spent += amount

    def add_refused(self, amount: float) -> None:
        """Count an answer refused for its usage that the server billed, at ``amount``."""
        self.spent += amount
        self.refused += 1

    def sentence(self) -> str:
        return (
            f"reached --max-cost ${self.limit:.4f}: spent ${self.spent:.4f} on "
            f"{self.completions} completions in this run directory; raise --max-cost and rerun "
            "the same command to continue"
        )

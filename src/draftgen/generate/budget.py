"""The spending limit of a run (``--max-cost``): every attempt reserves its worst case before it is
sent, and a completion counts its ``usage.cost`` when believable, else its tokens at listed prices.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass

import orjson

from draftgen.backends.listing import completion_limit, listed_model, prices_of
from draftgen.generate.waiters import Waiters
from draftgen.records import Completion
from draftgen.redact import usd

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
    # The most completion tokens one answer can have, as the listing says (None: not listed):
    # what an attempt reserves without --max-tokens.
    most_tokens: int | None = None

    def of(self, prompt_tokens: int, completion_tokens: int) -> float:
        return prompt_tokens * self.prompt + completion_tokens * self.completion


async def find_prices(base_url: str, model: str, api_key: str | None) -> Prices:
    """The model's prices and longest answer from ``GET {base_url}/models`` (as ``estimate``
    prices a run), else ``DEFAULT_PRICES`` with the reason there are none."""
    entry = await listed_model(base_url, model, api_key)
    listed = entry if isinstance(entry, str) else prices_of(entry, model)
    most = None if isinstance(entry, str) else completion_limit(entry)
    if isinstance(listed, tuple):
        return Prices(*listed, True, f"the listed prices of {model}", most)
    return Prices(*DEFAULT_PRICES, False, f"draftgen's default prices ({listed})", most)


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
        """(counted spend, completions) of ``count`` argument rows
        (``Store.tallies.spend_rows``)."""
        spent, completions = 0.0, 0
        for row in rows:
            spent += self.count(*row)
            completions += 1
        return spent, completions


def answer_bytes(completion: Completion) -> int:
    """The bytes of an answer's texts and tool calls, as ``Store.tallies.spend_rows`` measures
    them."""
    calls = orjson.dumps(completion.tool_calls) if completion.tool_calls else b""
    texts = (completion.content or "") + (completion.reasoning or "")
    return len(texts.encode("utf-8", "surrogatepass")) + len(calls)


@dataclass
class Tally:
    """What the completions of a run directory count against ``--max-cost`` (``CostCounter``),
    what their ``usage.cost`` said (as ``draftgen status`` sums it: a negative one is 0), how
    many there are, and the dearest one."""

    counted: float = 0.0
    reported: float = 0.0
    completions: int = 0
    doubted: int = 0  # those whose usage.cost was not believed
    dearest: float = 0.0


def tally(counter: CostCounter, rows: Iterable[tuple]) -> Tally:
    """The ``Tally`` of ``count`` argument rows (``Store.tallies.spend_rows``)."""
    found = Tally()
    for row in rows:
        counted = counter.count(*row)
        found.counted += counted
        found.reported += max(row[0] or 0.0, 0.0)
        found.completions += 1
        found.doubted += counted != row[0]
        found.dearest = max(found.dearest, counted)
    return found


class SpendGuard:
    """``--max-cost``: every attempt reserves its worst case before it is sent, and is sent only
    while what was spent, what the attempts in flight reserve and its own worst case stay within
    the limit; an attempt that would pass it waits for the attempts in flight to settle, and
    the run stops once even an attempt alone would pass it.

    The worst case of an attempt (``worst_case``) is its ``max_tokens`` (without --max-tokens,
    the listing's longest answer: ``Prices.most_tokens``) and its prompt (the request's bytes,
    which bound its tokens) at the prices ``--max-cost`` counts by (listed, else
    ``DEFAULT_PRICES``), so the limit holds whatever the server reports, at any concurrency.
    Only where neither bounds an answer's length does the dearest answer so far stand in for
    the worst case (until one is known, a single attempt is in flight), and the limit may be
    passed: the run says so as it starts. Once the attempt is over its reservation is
    released; the client records the answer's ``usage.cost`` and the run adds what
    ``CostCounter`` counts beyond it (both before any other attempt can be admitted), or what
    an answer refused for its usage is billed on.

    What was spent is said as ``draftgen status`` and the report say it (``shown``): the
    completions' own ``usage.cost`` and the refused answers' billed estimates; what
    ``--max-cost`` counts beyond that (costs it did not believe, at listed prices) is named
    apart in the stop line.
    """

    def __init__(self, limit: float, spent: float = 0.0, completions: int = 0) -> None:
        self.limit = limit
        self.spent = spent  # what --max-cost counts: reported costs, and more where not believed
        self.reported = spent  # the completions' own usage.cost, as draftgen status sums it
        self.completions = completions
        self.refused = 0  # answers refused for their usage, billed all the same
        self.refused_cost = 0.0  # what they are counted at (kept with them in the store)
        self.doubted = 0  # completions whose usage.cost was not believed
        self.dearest = 0.0  # the most one answer counted
        self.reserved = 0.0  # the worst cases of the attempts in flight
        self.prices: Prices | None = None
        self.max_tokens: int | None = None
        self.reached = False  # an attempt was refused: the run stopped at the limit
        self.too_dear: float | None = None  # the worst case that alone would have passed it
        self._last = 0.0  # what the last recorded completion counts so far
        self._holding = 0  # attempts holding a reservation
        self._waiters = Waiters()

    def begin(
        self,
        prices: Prices,
        max_tokens: int | None,
        stored: Tally,
        refused: tuple[int, float] = (0, 0.0),
    ) -> None:
        """Count by ``prices``, reserve ``max_tokens`` (else the listing's longest answer) for
        every attempt, and start from what the run directory holds (``tally`` of its
        completions; the ``refused`` answers kept and what they are counted at)."""
        self.prices = prices
        self.max_tokens = max_tokens or prices.most_tokens
        self.spent, self.reported = stored.counted + refused[1], stored.reported
        self.completions, self.doubted = stored.completions, stored.doubted
        self.refused, self.refused_cost = refused
        self.dearest = stored.dearest
        if max_tokens is None and prices.most_tokens is not None:
            _log.info(
                "--max-cost without --max-tokens: each request reserves the longest answer the "
                "listing allows (%s tokens) at %s, so the limit is never passed; --max-tokens "
                "reserves less and sends more requests at once",
                f"{prices.most_tokens:,}",
                prices.source,
            )
        elif max_tokens is None:
            _log.warning(
                "--max-cost without --max-tokens, and no listing names the model's longest "
                "answer: each request reserves what the dearest answer so far cost, and the "
                "answers in flight may pass the limit by what they cost beyond it; give "
                "--max-tokens for a limit that is never passed"
            )

    def worst_case(self, request_bytes: int) -> float | None:
        """The most an attempt of ``request_bytes`` can cost at the counted prices; None
        without ``max_tokens`` or a listed longest answer (or prices): its answer's length is
        not bounded."""
        if self.prices is None or self.max_tokens is None:
            return None
        return self.prices.of(request_bytes, self.max_tokens)

    @asynccontextmanager
    async def admit(self, request_bytes: int) -> AsyncIterator[float]:
        """Reserve the worst case of an attempt of ``request_bytes`` while it is in flight
        (yields it); ``BudgetReached`` if even alone it could pass the limit."""
        while True:
            if self.spent >= self.limit:
                raise self._reached()
            worst = self.worst_case(request_bytes)
            if worst is None:
                # Unbounded: the dearest answer so far stands in, and before one is billed this
                # attempt takes all the room left (one at a time).
                worst = self.dearest if self.billed else self.limit - self.spent
            if self.spent + worst > self.limit:
                self.too_dear = worst
                raise self._reached()
            if not self._holding or self.spent + self.reserved + worst <= self.limit:
                break
            await self._waiters.wait()  # the attempts in flight settle: room, or the limit
        self.reserved += worst
        self._holding += 1
        try:
            yield worst
        finally:
            self._holding -= 1
            # Sums of floats drift: with nothing in flight nothing is reserved, exactly.
            self.reserved = self.reserved - worst if self._holding else 0.0
            self._waiters.wake_all()

    def _reached(self) -> BudgetReached:
        self.reached = True
        return BudgetReached(self.sentence())

    @property
    def billed(self) -> int:
        """Answers the server billed: completions, and answers refused for their usage."""
        return self.completions + self.refused

    def record(self, cost: float) -> None:
        """Count a completion at its reported ``usage.cost``."""
        self.spent += cost
        self.reported += max(cost, 0.0)
        self.completions += 1
        self._last = cost
        self.dearest = max(self.dearest, cost)

    def add(self, amount: float) -> None:
        """Count ``amount`` more for the completion recorded last (beyond its reported cost:
        ``CostCounter`` did not believe it)."""
        self.spent += amount
        if amount > 0:
            self.doubted += 1
        self._last += amount
        self.dearest = max(self.dearest, self._last)

    def add_refused(self, amount: float) -> None:
        """Count an answer refused for its usage that the server billed, at ``amount``."""
        self.spent += amount
        self.refused += 1
        self.refused_cost += amount
        self.dearest = max(self.dearest, amount)

    @property
    def shown(self) -> float:
        """What was spent as ``draftgen status`` and the report say it: the completions' own
        ``usage.cost`` (a negative one 0) and the refused answers' billed estimates."""
        return self.reported + self.refused_cost

    def sentence(self) -> str:
        """Why the run stopped, with what was spent as ``draftgen status`` shows it (and what
        ``--max-cost`` counts beyond that, and why)."""
        refused = f" and {self.refused} answers refused for their usage" if self.refused else ""
        beyond = self.spent - self.shown
        counted = ""
        if beyond > 0 and self.doubted:
            source = self.prices.source if self.prices is not None else "listed prices"
            counted = (
                f"; --max-cost counts {usd(beyond)} more: {self.doubted} completions whose "
                f"usage.cost was not believed, counted at {source}"
            )
        return (
            f"reached --max-cost ${self.limit:.4f}: spent {usd(self.shown)} on "
            f"{self.completions} completions{refused} in this run directory, as draftgen status "
            f"shows{counted}{self._next_request()}; raise --max-cost and rerun the same command "
            "to continue"
        )

    def _next_request(self) -> str:
        """Why the next request was not sent although the limit was not reached: its worst case
        (said where most of the limit is left: a run stopped at its first requests)."""
        left = self.limit - self.spent
        if self.too_dear is None or left < self.limit / 2 or self.max_tokens is None:
            return ""
        return (
            f"; one more request could cost {usd(self.too_dear)} ({self.max_tokens:,} tokens "
            f"and its prompt at {self.prices.source if self.prices else 'listed prices'}), more "
            f"than the {usd(left)} left: a lower --max-tokens lets it go"
        )

"""Money against a hostile server: ``usage`` numbers checked at the door, and ``--max-cost``
counting a missing, negative or implausibly small cost at listed prices (fails closed)."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import sqlite3

import orjson
import pytest
from aiohttp import web
from conftest import run_on_app

from draftgen.backends.base import ApiError, StreamAccumulator, checked_usage, parse_completion
from draftgen.generate.budget import (
    DEFAULT_PRICES,
    BudgetReached,
    CostCounter,
    Prices,
    SpendGuard,
    counted_cost,
)

TOKENIZER = "fixture:kimi-k2.5"
# 2**-20 dollars a token (~$0.95 per million): 512 + 512 tokens cost exactly 2**-10, so the
# sums below are exact in binary and a cap of $0.005 holds exactly 5 completions (5.12).
PRICE = 2.0**-20
LISTED = Prices(PRICE, PRICE, True, "the listed prices of test/model")
PER_COMPLETION = 2.0**-10


def body_with(usage: dict) -> bytes:
    return orjson.dumps(
        {
            "choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}],
            "usage": usage,
        }
    )


def refusal(usage: dict) -> str:
    with pytest.raises(ApiError) as info:
        checked_usage(usage)
    assert (info.value.kind, info.value.retryable, info.value.fatal) == (
        "malformed_response",
        True,
        False,
    )
    return info.value.message


# -- the door ------------------------------------------------------------------------------------


def test_counts_out_of_range_or_not_ints_are_refused_naming_field_and_value():
    count = "not a count from 0 to 2147483647"
    assert refusal({"completion_tokens": 2**63}) == (
        f"usage.completion_tokens is 9223372036854775808, {count}"
    )
    assert refusal({"prompt_tokens": -1}) == f"usage.prompt_tokens is -1, {count}"
    assert refusal({"prompt_tokens": "1"}) == f"usage.prompt_tokens is '1', {count}"
    assert refusal({"completion_tokens": True}) == f"usage.completion_tokens is True, {count}"
    assert refusal({"completion_tokens": 12.0}) == f"usage.completion_tokens is 12.0, {count}"
    assert refusal({"completion_tokens_details": {"reasoning_tokens": 2**31}}) == (
        f"usage.completion_tokens_details.reasoning_tokens is 2147483648, {count}"
    )
    assert refusal({"completion_tokens_details": "x"}) == (
        "usage.completion_tokens_details is 'x', not an object"
    )


def test_bad_costs_are_refused_naming_the_value():
    dollars = "not a finite number of dollars from 0 up"
    assert refusal({"cost": -1}) == f"usage.cost is -1, {dollars}"
    assert refusal({"cost": -5000.0}) == f"usage.cost is -5000.0, {dollars}"
    assert refusal({"cost": "1"}) == f"usage.cost is '1', {dollars}"
    assert refusal({"cost": True}) == f"usage.cost is True, {dollars}"
    assert refusal({"cost": float("1e400")}) == f"usage.cost is inf, {dollars}"
    assert refusal({"cost": math.nan}) == f"usage.cost is nan, {dollars}"
    assert refusal({"cost": "x" * 100}) == f"usage.cost is '{'x' * 38}…, {dollars}"


def test_zero_missing_and_null_costs_and_the_largest_count_are_accepted():
    for usage in (
        {"cost": 0},
        {"cost": 0.0, "prompt_tokens": 0},
        {"prompt_tokens": 3},
        {"cost": None, "completion_tokens": None, "completion_tokens_details": None},
        {"completion_tokens": 2**31 - 1, "completion_tokens_details": {}},
    ):
        assert checked_usage(usage) is usage
    assert checked_usage(None) == {}
    assert checked_usage([1]) == {}


def test_both_parsers_refuse_a_body_the_store_could_not_hold():
    with pytest.raises(ApiError) as info:
        parse_completion(body_with({"completion_tokens": 2**63}))
    assert str(info.value) == (
        "malformed_response: usage.completion_tokens is 9223372036854775808, not a count from 0 "
        "to 2147483647"
    )
    assert parse_completion(body_with({"completion_tokens": 5})).completion_tokens == 5
    stream = StreamAccumulator()
    stream.feed({"choices": [{"delta": {"content": "hi"}, "finish_reason": "stop"}]})
    stream.feed({"choices": [], "usage": {"cost": -5000}})
    with pytest.raises(ApiError) as info:
        stream.finish()
    assert str(info.value) == (
        "malformed_response: usage.cost is -5000, not a finite number of dollars from 0 up"
    )


# -- what a completion counts against --max-cost ---------------------------------------------------


def test_a_missing_negative_or_tiny_cost_counts_at_listed_prices():
    assert counted_cost(0.0, 512, 512, LISTED) == (PER_COMPLETION, "usage.cost is missing or 0")
    assert counted_cost(-1000.0, 512, 512, LISTED) == (
        PER_COMPLETION,
        "usage.cost $-1000 is negative",
    )
    assert counted_cost(1e-9, 512, 512, LISTED) == (
        PER_COMPLETION,
        "usage.cost $1e-09 is below 1% of $0.000976562 at listed prices",
    )
    assert counted_cost(math.nan, 512, 512, LISTED)[0] == PER_COMPLETION
    # A discount (cached prompt) is believed down to 1% of the listed price.
    assert counted_cost(PER_COMPLETION / 2, 512, 512, LISTED) == (PER_COMPLETION / 2, "")
    assert counted_cost(PER_COMPLETION / 100, 512, 512, LISTED) == (PER_COMPLETION / 100, "")
    free = Prices(0.0, 0.0, True, "the listed prices of a free model")
    assert counted_cost(0.0, 512, 512, free) == (0.0, "")


def test_without_listed_prices_a_floor_decides_and_the_default_price_counts():
    default = Prices(*DEFAULT_PRICES, False, "draftgen's default prices (no listing)")
    assert counted_cost(1e-9, 100, 100, default) == (
        100 * 15e-6 + 100 * 75e-6,
        "usage.cost $1e-09 is below $0.01 per million tokens",
    )
    assert counted_cost(0.0, 100, 100, default)[0] == pytest.approx(0.009)
    assert counted_cost(3e-6, 100, 100, default) == (3e-6, "")  # $0.015 per million: believed


def test_missing_token_counts_are_bounded_by_bytes_and_one_warning_is_logged(caplog):
    counter = CostCounter(LISTED)
    with caplog.at_level(logging.WARNING, logger="draftgen.budget"):
        assert counter.count(0.0, None, None, 3000, 1000) == 4000 * PRICE
        assert counter.count(-5.0, 512, 512) == PER_COMPLETION
        assert counter.count(0.25, 512, 512) == 0.25
    assert [r.getMessage() for r in caplog.records] == [
        "--max-cost counts a completion whose usage.cost is missing, negative or implausibly "
        "small at the listed prices of test/model ($0.9537 / $0.9537 per million prompt / "
        "completion tokens), so that a server's word cannot lift the cap; the first: "
        "usage.cost is missing or 0"
    ]


def admitted_until_the_cap(guard: SpendGuard, counter: CostCounter, reported: float) -> int:
    """Completions the guard admits one at a time, each recorded as the client and the engine
    record it (the reported cost, then what it counts beyond)."""

    async def go() -> int:
        bought = 0
        while bought < 1000:
            try:
                async with guard.admit(1):
                    guard.record(reported)
                    guard.add(counter.count(reported, 512, 512) - reported)
                    bought += 1
            except BudgetReached:
                return bought
        return bought

    return asyncio.run(go())


@pytest.mark.parametrize("reported", [0.0, 1e-9, -1000.0])
def test_the_guard_holds_the_cap_when_the_server_reports_no_true_cost(reported):
    guard = SpendGuard(0.005)
    assert admitted_until_the_cap(guard, CostCounter(LISTED), reported) == 5
    assert guard.spent == 5 * PER_COMPLETION  # counted, not reported
    assert guard.sentence().startswith("reached --max-cost $0.0050: spent $")


def test_stored_negative_costs_never_take_money_off_the_total():
    counter = CostCounter(LISTED)
    rows = [(-1000.0, 512, 512, None, None), (0.0, 512, 512, None, None), (0.25, 512, 512, 0, 0)]
    assert counter.total(rows) == (2 * PER_COMPLETION + 0.25, 3)


# -- whole runs against a server that reports no cost --------------------------------------------


class CostlessProvider:
    """An OpenRouter-shaped API on loopback: the model listed at ``PRICE`` a token, every answer
    512 + 512 tokens with no ``usage.cost``. ``served`` counts the completions it sold."""

    def __init__(self) -> None:
        self.served = 0

    def app(self) -> web.Application:
        """A new app for each run (an aiohttp app belongs to the loop that serves it)."""
        app = web.Application()
        app.router.add_get("/v1/models", self.models)
        app.router.add_post("/v1/chat/completions", self.complete)
        return app

    async def models(self, request: web.Request) -> web.Response:
        price = f"{PRICE:.30f}".rstrip("0")  # decimal strings, as OpenRouter sends them
        pricing = {"prompt": price, "completion": price}
        return web.json_response({"data": [{"id": "test/model", "pricing": pricing}]})

    async def complete(self, request: web.Request) -> web.Response:
        self.served += 1
        return web.json_response(
            {
                "id": f"gen-{self.served}",
                "model": "test/model",
                "choices": [
                    {"message": {"role": "assistant", "content": "Fine."}, "finish_reason": "stop"}
                ],
                "usage": {"prompt_tokens": 512, "completion_tokens": 512, "total_tokens": 1024},
            }
        )


def write_rows(path, count: int):
    rows = (
        {"id": f"r{i}", "messages": [{"role": "user", "content": f"Question {i}"}]}
        for i in range(count)
    )
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def run_against(provider: CostlessProvider, tmp_path, monkeypatch, **overrides):
    """``run`` against ``provider`` (bounded to 60 s: a hang fails the test)."""
    inputs = write_rows(tmp_path / "rows.jsonl", 40)
    return run_on_app(provider.app(), inputs, tmp_path / "run", TOKENIZER, monkeypatch, **overrides)


def stored_completions(tmp_path) -> int:
    db = sqlite3.connect(tmp_path / "run" / "draftgen.sqlite")
    return db.execute("SELECT count(*) FROM completions").fetchone()[0]


def test_a_run_without_costs_stops_at_the_cap_by_listed_prices(tmp_path, monkeypatch, caplog):
    provider = CostlessProvider()
    with caplog.at_level(logging.WARNING, logger="draftgen.budget"):
        summary = run_against(provider, tmp_path, monkeypatch, concurrency=16, max_cost=0.005)
    # Before: every answer cost $0 to the guard, and all 40 were bought under a $0.005 cap.
    assert summary.stopped.startswith("reached --max-cost $0.0050: spent $")
    assert 1 <= provider.served <= 5  # 5 x 2**-10 = $0.00488; a sixth would pass the cap
    assert stored_completions(tmp_path) == provider.served
    doubts = [r for r in caplog.records if "usage.cost is missing, negative" in r.getMessage()]
    assert len(doubts) == 1  # once, not per answer
    # No listing names the model's longest answer, and no --max-tokens bounds it: said at once.
    assert "no listing names the model's longest answer" in caplog.records[0].getMessage()


def test_a_resume_after_a_stored_negative_cost_still_holds_the_cap(tmp_path, monkeypatch):
    provider = CostlessProvider()
    first = run_against(provider, tmp_path, monkeypatch, concurrency=1, limit=3)
    assert (first.stopped, provider.served) == (None, 3)
    db = sqlite3.connect(tmp_path / "run" / "draftgen.sqlite")
    with db:
        db.execute("UPDATE completions SET cost = -1000 WHERE rowid = 1")  # as main stored it
    summary = run_against(provider, tmp_path, monkeypatch, concurrency=1, max_cost=0.005)
    # Before: spent started at $-1000, so the cap never held; now the row counts its tokens.
    assert summary.stopped == (
        "reached --max-cost $0.0050: spent $0.00 on 5 completions in this run directory, as "
        "draftgen status shows; --max-cost counts $0.004883 more: 5 completions whose "
        "usage.cost was not believed, counted at the listed prices of test/model; raise "
        "--max-cost and rerun the same command to continue"
    )
    assert provider.served == 5
    assert summary.counts["cost"] == 0.0  # status clamps the negative row too


class FalseCostProvider(CostlessProvider):
    """Every answer 512 + 512 tokens with a ``usage.cost`` that is no number of dollars: each
    is refused at the door, retried, and billed all the same."""

    def __init__(self, cost: object) -> None:
        super().__init__()
        self.cost = cost

    async def complete(self, request: web.Request) -> web.Response:
        self.served += 1
        usage = {"prompt_tokens": 512, "completion_tokens": 512, "cost": self.cost}
        return web.json_response(
            {
                "id": f"gen-{self.served}",
                "choices": [{"message": {"content": "Fine."}, "finish_reason": "stop"}],
                "usage": usage,
            }
        )


@pytest.mark.parametrize("cost", ["free", -5.0, float("nan")])
def test_answers_refused_for_a_false_cost_still_count_against_the_cap(tmp_path, monkeypatch, cost):
    provider = FalseCostProvider(cost if not isinstance(cost, float) or cost == cost else "NaN")
    summary = run_against(
        provider, tmp_path, monkeypatch, concurrency=1, max_cost=0.005, max_attempts=50
    )
    # Before: refused answers counted nothing, and the server billed 0.0103 under a 0.005 cap.
    assert provider.served * PER_COMPLETION <= 0.005  # 5 x 2**-10 = $0.00488
    assert provider.served == 5
    assert summary.stopped.startswith("reached --max-cost $0.0050")
    assert stored_completions(tmp_path) == 0

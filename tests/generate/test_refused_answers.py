"""Answers refused for their usage (a false cost, a count out of range) are billed: each is stored
apart before anything else happens to it, counted as spent, bought again at most once, and never
exported (issue #35). Counted at the server."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time

import orjson
import pytest
from aiohttp import web
from conftest import SimProcess, assert_worked, draftgen, run_args, run_on_app, start_app

from draftgen.backends.base import ApiError, StreamAccumulator, parse_completion

TOKENIZER = "fixture:kimi-k2.5"
PRICE = 2.0**-20  # dollars a token: 512 + 512 tokens cost 2**-10, sums exact in binary
PER_ANSWER = 2.0**-10


def refusal_of(parse) -> ApiError:
    with pytest.raises(ApiError) as info:
        parse()
    assert info.value.billed is not None
    return info.value


def test_a_refused_body_keeps_the_answer_its_usage_and_why():
    body = orjson.dumps(
        {
            "id": "gen-7",
            "provider": "Acme",
            "choices": [{"message": {"content": "Fine."}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 512, "completion_tokens": 2**63, "cost": 0.25},
        }
    )
    billed = refusal_of(lambda: parse_completion(body)).billed
    assert billed.answer == body
    assert (billed.generation_id, billed.provider) == ("gen-7", "Acme")
    assert (billed.prompt_tokens, billed.completion_tokens, billed.cost) == (512, None, 0.25)
    assert billed.reason == (
        "usage.completion_tokens is 9223372036854775808, not a count from 0 to 2147483647"
    )
    assert json.loads(billed.usage) == {
        "prompt_tokens": 512,
        "completion_tokens": 2**63,
        "cost": 0.25,
    }


def test_a_refused_stream_keeps_its_folded_answer():
    accumulator = StreamAccumulator()
    events = [
        {"id": "gen-8", "choices": [{"delta": {"content": "Fi"}}]},
        {"choices": [{"delta": {"content": "ne."}, "finish_reason": "stop"}]},
        {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2, "cost": "free"}},
    ]
    for event in events:
        accumulator.feed_bytes(b"data: " + orjson.dumps(event) + b"\n\n")
    billed = refusal_of(accumulator.finish).billed
    answer = json.loads(billed.answer)
    assert answer["message"] == {"role": "assistant", "content": "Fine."}
    assert (answer["id"], answer["finish_reason"]) == ("gen-8", "stop")
    assert (billed.prompt_tokens, billed.completion_tokens, billed.cost) == (3, 2, 0.0)
    assert billed.reason == "usage.cost is 'free', not a finite number of dollars from 0 up"


class FalseCostProvider:
    """An OpenRouter-shaped API on loopback: the model listed at ``PRICE`` a token, every answer
    512 + 512 tokens with ``usage.cost`` "free". ``served`` counts the answers it sold."""

    def __init__(self) -> None:
        self.served = 0

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/v1/models", self.models)
        app.router.add_post("/v1/chat/completions", self.complete)
        return app

    async def models(self, request: web.Request) -> web.Response:
        price = f"{PRICE:.30f}".rstrip("0")
        pricing = {"prompt": price, "completion": price}
        return web.json_response({"data": [{"id": "test/model", "pricing": pricing}]})

    async def complete(self, request: web.Request) -> web.Response:
        self.served += 1
        return web.json_response(
            {
                "id": f"gen-{self.served}",
                "provider": "Acme",
                "choices": [{"message": {"content": "Fine."}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 512, "completion_tokens": 512, "cost": "free"},
            }
        )


def run_against(provider: FalseCostProvider, tmp_path, monkeypatch, rows: int, **overrides):
    inputs = tmp_path / "rows.jsonl"
    inputs.write_text(
        "".join(
            json.dumps({"id": f"r{i}", "messages": [{"role": "user", "content": f"Q {i}"}]}) + "\n"
            for i in range(rows)
        )
    )
    out = tmp_path / "run"
    try:
        return run_on_app(provider.app(), inputs, out, TOKENIZER, monkeypatch, **overrides)
    except Exception as exc:  # every turn failed: the run says so, the store stays
        return exc


def test_every_refused_answer_is_stored_counted_and_bought_again_once(tmp_path, monkeypatch):
    provider = FalseCostProvider()
    run_against(provider, tmp_path, monkeypatch, rows=3, concurrency=2)
    # Before: each turn was retried --max-attempts (8) times, 24 answers billed, none stored.
    assert provider.served == 6
    db = sqlite3.connect(tmp_path / "run" / "draftgen.sqlite")
    kept = db.execute(
        "SELECT source_id, turn, generation_id, provider, reason, answer, cost FROM refused_answers"
        " ORDER BY generation_id"
    ).fetchall()
    assert sorted(row[2] for row in kept) == [f"gen-{i}" for i in range(1, 7)]
    assert sorted(row[0] for row in kept) == ["r0", "r0", "r1", "r1", "r2", "r2"]
    for _, turn, _, acme, reason, answer, cost in kept:
        assert (turn, acme, cost) == (0, "Acme", PER_ANSWER)
        assert reason == "usage.cost is 'free', not a finite number of dollars from 0 up"
        assert json.loads(answer)["choices"][0]["message"]["content"] == "Fine."
    assert db.execute("SELECT count(*) FROM completions").fetchone()[0] == 0
    assert dict(db.execute("SELECT reason, count(*) FROM failures GROUP BY 1")) == {
        "refused_usage": 3
    }
    status = json.loads(draftgen("status", str(tmp_path / "run"), "--json").stdout)
    assert status["refused_usage"] == {"answers": 6, "cost": 6 * PER_ANSWER}
    assert status["cost"] == 6 * PER_ANSWER
    assert status["failures"] == {"refused_usage": 3}
    assert status["providers"]["Acme"]["cost"] == 6 * PER_ANSWER
    # Never exported: nothing of them is a sample.
    out = tmp_path / "export.jsonl"
    draftgen("export", str(tmp_path / "run"), "--format", "specforge", "--out", str(out))
    assert not out.exists() or out.read_text() == ""


def test_a_resume_counts_the_refused_answers_against_max_cost(tmp_path, monkeypatch):
    provider = FalseCostProvider()
    run_against(provider, tmp_path, monkeypatch, rows=2, concurrency=1)
    assert provider.served == 4
    # 4 refused answers kept ($0.0039); a cap of $0.005 leaves room for one more answer only.
    summary = run_against(provider, tmp_path, monkeypatch, rows=2, concurrency=1, max_cost=0.005)
    assert provider.served == 5
    assert summary.stopped == (
        "reached --max-cost $0.0050: spent $0.004883 on 0 completions and 5 answers refused for "
        "their usage in this run directory, as draftgen status shows; raise --max-cost and rerun "
        "the same command to continue"
    )


@pytest.mark.parametrize("stream", [False, True])
def test_every_answer_the_simulator_billed_is_stored_or_kept_apart(tmp_path, stream):
    """Half the answers carry counts of 2**63 or below 0: each billed answer is a completion or
    a refused answer in the store, none lost; no prompt bought more than twice."""
    rows = tmp_path / "rows.jsonl"
    rows.write_text(
        "".join(
            json.dumps({"id": f"u{i}", "messages": [{"role": "user", "content": f"Usage {i}?"}]})
            + "\n"
            for i in range(20)
        )
    )
    sim = SimProcess(
        tmp_path,
        TOKENIZER,
        extra=["--max-tokens", "50", "--hostile", "bad-usage", "--hostile-share", "0.5"],
    )
    out = tmp_path / "run"
    try:
        result = draftgen(
            *run_args(sim, [rows], out, TOKENIZER, "--concurrency", "4"),
            "--stream" if stream else "--no-stream",
        )
        truth = list(sim.thread.truth.values())
    finally:
        sim.stop()
    assert_worked(result, out)
    db = sqlite3.connect(out / "draftgen.sqlite")
    completions = {r[0] for r in db.execute("SELECT generation_id FROM completions")}
    refused = [r[0] for r in db.execute("SELECT generation_id FROM refused_answers")]
    hostile = {t["generation_id"] for t in truth if t.get("hostile") == "bad-usage"}
    # Before: 13 paid, none of the refused ones stored.
    assert len(hostile) >= 3
    assert set(refused) == hostile and len(refused) == len(hostile)
    assert completions | hostile == {t["generation_id"] for t in truth}
    failed = dict(db.execute("SELECT reason, count(*) FROM failures GROUP BY 1"))
    assert len(completions) + failed.get("refused_usage", 0) == 20
    bought: dict[str, int] = {}
    for t in truth:
        bought[t["prompt_sha256"]] = bought.get(t["prompt_sha256"], 0) + 1
    assert max(bought.values()) <= 2


class HeldAfterARefusal(FalseCostProvider):
    """The first answer carries a false cost; every later request is held unanswered."""

    release: asyncio.Event | None = None

    async def complete(self, request: web.Request) -> web.Response:
        if self.served:
            self.served += 1
            self.release = self.release or asyncio.Event()
            await self.release.wait()  # until the test ends
        return await super().complete(request)


def test_a_refused_answer_is_durable_before_the_request_is_sent_again(tmp_path):
    """kill -9 while the request is asked again: the refused answer is in the store."""
    provider = HeldAfterARefusal()
    loop = asyncio.new_event_loop()
    started = threading.Event()
    where: list = []

    def serve() -> None:
        asyncio.set_event_loop(loop)
        where.append(loop.run_until_complete(start_app(provider.app())))
        started.set()
        loop.run_forever()

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    assert started.wait(10)
    runner, base_url = where[0]
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"id": "r0", "messages": [{"role": "user", "content": "Q"}]}) + "\n")
    out = tmp_path / "run"
    process = subprocess.Popen(
        [sys.executable, "-m", "draftgen.cli", "run", "--model", "test/model"]
        + ["--tokenizer", TOKENIZER, "--input", str(rows), "--out", str(out)]
        + ["--base-url", base_url, "--api-key-env", "DRAFTGEN_TEST_KEY", "--no-calibrate"]
        + ["--no-stream", "--retry-base-delay", "0.01"],
        env={**os.environ, "DRAFTGEN_TEST_KEY": "sk-test"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while provider.served < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert provider.served == 2  # asked again only once the refused answer was stored
        process.send_signal(signal.SIGKILL)
        process.wait(10)
    finally:
        process.kill()
        if provider.release is not None:
            loop.call_soon_threadsafe(provider.release.set)
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        server.join(10)
    db = sqlite3.connect(out / "draftgen.sqlite")
    assert db.execute("SELECT generation_id, cost FROM refused_answers").fetchall() == [
        ("gen-1", PER_ANSWER)
    ]

"""A dead endpoint stops the run within seconds (issue #35): the run's first 8 attempts all
answered with a server error (HTTP 5xx) and none succeeded, or 10 s of nothing but server errors
with no attempt on the wire. The sentence names the status and the server's own words; the
library raises it as the CLI prints it."""

from __future__ import annotations

import asyncio
import json

import pytest
from aiohttp import web
from conftest import SimProcess, draftgen, run_args, start_app

from draftgen.api import Run, RunDir, RunOptions
from draftgen.backends.base import ApiError
from draftgen.errors import DraftgenError
from draftgen.generate.client import ChatClient, DeadEndpoint, FatalApiError, RetryPolicy
from draftgen.simulator import SimConfig, SimulatorThread

TOKENIZER = "fixture:kimi-k2.5"
KEY = "sk-dead-0123456789abcdef"


def error(status: int | None, message: str = "boom", kind: str = "server_error") -> ApiError:
    return ApiError(kind, message, status=status)


def judged(outcomes: list[tuple[int, ApiError | None]], **rule) -> DeadEndpoint:
    """A rule that saw ``outcomes`` (attempt number, error or None for an answer), every attempt
    sent before any ended."""

    async def go() -> DeadEndpoint:
        start = DeadEndpoint(**{"seconds": 3600.0, **rule})
        for _ in range(max(number for number, _ in outcomes)):
            start.sending()
        for number, outcome in outcomes:
            start.ended(number, outcome, "http://127.0.0.1:9/v1")
        start.settle()  # the timer
        return start

    return asyncio.run(go())


# -- the rule ------------------------------------------------------------------------------------


def test_the_first_eight_attempts_all_server_errors_are_a_verdict():
    start = judged([(n, error(500, "upstream is down")) for n in range(1, 9)])
    assert start.verdict == (
        "http://127.0.0.1:9/v1 answered each of the run's first 8 attempts with HTTP 500 and none "
        'succeeded, saying "upstream is down"; check that the server is up and serves this model'
    )
    assert start.dead.is_set()
    assert judged([(n, error(500)) for n in range(1, 8)]).verdict is None  # 7 are not 8


def test_mixed_statuses_are_counted_and_the_commonest_words_quoted():
    outcomes = [(n, error(502, "Provider returned error")) for n in range(1, 6)]
    outcomes += [(n, error(500, "\x1b[2Jcleared")) for n in range(6, 9)]
    assert judged(outcomes).verdict.startswith(
        "http://127.0.0.1:9/v1 answered each of the run's first 8 attempts with server errors "
        '(HTTP 502 5 times, HTTP 500 3 times) and none succeeded, saying "Provider returned error"'
    )
    words = judged([(n, error(500, "\x1b[2Jcleared")) for n in range(1, 9)]).verdict
    assert 'saying "\\x1b[2Jcleared"' in words and "\x1b" not in words
    assert 'saying "nothing"' in judged([(n, error(503, "")) for n in range(1, 9)]).verdict


@pytest.mark.parametrize(
    "other",
    [
        None,
        error(429, kind="rate_limited"),
        error(None, kind="timeout"),
        error(400, kind="rejected"),
    ],
    ids=["an answer", "a rate limit", "a timeout", "a 4xx"],
)
def test_one_of_the_first_eight_ending_otherwise_is_no_verdict(other):
    outcomes = [(n, error(500)) for n in range(1, 8)] + [(8, other)]
    outcomes += [(n, error(500)) for n in range(9, 40)]
    assert judged(outcomes).verdict is None


def test_fast_errors_beside_slow_answers_still_on_the_wire_are_no_verdict():
    """Attempts 9 to 40 fail at once while the first 8 are still generating: they are not the
    first attempts, and nothing says the first will not answer."""
    start = judged([(n, error(502)) for n in range(9, 41)], seconds=0.0)
    assert start.verdict is None
    assert start.in_flight == 8


def test_time_alone_is_a_verdict_when_only_server_errors_ended_and_none_is_on_the_wire():
    async def go(in_flight: int) -> tuple[str | None, bool]:
        start = DeadEndpoint(seconds=0.2)
        for number in (1, 2):
            start.sending()
            start.ended(number, error(500, "dead"), "http://e/v1")
        for _ in range(in_flight):
            start.sending()
        await asyncio.sleep(1.0)  # the timer, at 0.2 s
        verdict = start.verdict
        start.settle()
        return verdict, start.dead.is_set()

    verdict, dead = asyncio.run(go(0))
    assert dead and verdict == (
        "http://e/v1 answered all 2 attempts of the run's first 0.2 s with HTTP 500 and none "
        'succeeded, saying "dead"; check that the server is up and serves this model'
    )
    assert asyncio.run(go(1)) == (None, False)  # an attempt still on the wire may yet answer


def test_after_an_answer_failures_alone_are_no_verdict_until_the_quiet_time_passes():
    outcomes = [(1, None)] + [(n, error(500)) for n in range(2, 40)]
    assert judged(outcomes).verdict is None  # 38 in a row, but within the hour since the answer


# -- an outage mid-run (issue #41: 200 prompts, 1,351 retries over 2 min, then exit 0) -----------


def test_an_outage_after_answers_is_a_verdict_once_quiet_long_enough():
    outcomes = [(1, None), (2, None)] + [(n, error(502, "bad gateway")) for n in range(3, 11)]
    assert judged(outcomes, seconds=0.0).verdict == (
        "http://127.0.0.1:9/v1 answered each of the last 8 attempts, over the 0 s since its last "
        'answer, with HTTP 502 and none succeeded, saying "bad gateway"; check that the server '
        "is up and serves this model"
    )
    assert judged(outcomes[:-1], seconds=0.0).verdict is None  # 7 are not 8


def test_a_dropped_server_counts_mid_run_but_not_before_its_first_answer():
    refused = error(None, "connection refused", kind="connect_failed")
    later = judged([(1, None)] + [(n, refused) for n in range(2, 10)], seconds=0.0).verdict
    assert later is not None and "with connect_failed and none succeeded" in later
    # Before any answer, the probe judged reachability; a refused connection is no 5xx.
    assert judged([(n, refused) for n in range(1, 9)], seconds=0.0).verdict is None


@pytest.mark.parametrize(
    "alive",
    [None, error(429, kind="rate_limited"), error(400, kind="rejected")],
    ids=["an answer", "a rate limit", "a 4xx"],
)
def test_a_sign_of_life_mid_outage_starts_the_count_again(alive):
    outcomes = [(1, None)] + [(n, error(500)) for n in range(2, 9)] + [(9, alive)]
    outcomes += [(n, error(500)) for n in range(10, 17)]
    assert judged(outcomes, seconds=0.0).verdict is None  # 7 and 7, never 8 in a row


# -- the client ----------------------------------------------------------------------------------


class DeadServer:
    """Answers every chat request with HTTP ``status`` and an error naming the key it was sent."""

    def __init__(self, status: int = 500) -> None:
        self.status = status
        self.hits = 0

    async def answer(self, request: web.Request) -> web.Response:
        self.hits += 1
        await request.read()
        message = f"upstream gone\r\n(your key {request.headers['Authorization'][7:]})"
        body = {"error": {"code": self.status, "message": message}}
        return web.json_response(body, status=self.status)


def gather_completions(server: DeadServer, requests: int, concurrency: int, **client) -> list:
    async def go():
        app = web.Application()
        app.router.add_post("/v1/chat/completions", server.answer)
        runner, base_url = await start_app(app)
        try:
            async with ChatClient(base_url, KEY, concurrency=concurrency, **client) as chat:
                return await asyncio.gather(
                    *(chat.complete(b'{"model": "m"}', False) for _ in range(requests)),
                    return_exceptions=True,
                )
        finally:
            await runner.cleanup()

    return asyncio.run(asyncio.wait_for(go(), 60))


def test_the_client_stops_every_request_after_the_first_wave():
    server = DeadServer(502)
    outcomes = gather_completions(server, 40, concurrency=16, retry=RetryPolicy(8, base_delay=0.5))
    assert all(isinstance(o, FatalApiError) for o in outcomes), outcomes
    # Before: 40 requests x 8 attempts = 320 answers of HTTP 502, over a minute of backoff.
    # Now each request's first attempt at most (a slot freed by a failure takes the next
    # request), and a retry only where its backoff ended before the verdict.
    assert 8 <= server.hits < 80
    said = str(outcomes[0])
    assert said.startswith("http://127.0.0.1:")
    assert said.endswith(
        "/v1 answered each of the run's first 8 attempts with HTTP 502 and none succeeded, "
        'saying "upstream gone (your key ***)"; check that the server is up and serves this model'
    )
    assert KEY not in said


def test_one_request_at_a_time_stops_at_the_time_bound_cutting_its_backoff():
    server = DeadServer(500)
    outcomes = gather_completions(
        server,
        1,
        concurrency=1,
        retry=RetryPolicy(50, base_delay=0.2, max_delay=30),
        dead_endpoint=DeadEndpoint(seconds=1.0),
    )
    assert isinstance(outcomes[0], FatalApiError), outcomes
    assert "attempts of the run's first 1 s with HTTP 500" in str(outcomes[0])
    assert 2 <= server.hits < 8  # before: all 50 attempts, minutes of backoff


# -- whole runs ------------------------------------------------------------------------------------


def write_rows(path, count: int):
    path.write_text(
        "".join(
            json.dumps({"id": f"d{i}", "messages": [{"role": "user", "content": f"Dead {i}?"}]})
            + "\n"
            for i in range(count)
        )
    )
    return path


def test_the_library_raises_what_the_cli_prints(tmp_path, monkeypatch):
    monkeypatch.setenv("DRAFTGEN_TEST_KEY", "sk-test")
    with SimulatorThread(SimConfig(tokenizer=TOKENIZER, fail_after=0)) as sim:
        options = RunOptions(
            inputs=[str(write_rows(tmp_path / "rows.jsonl", 40))],
            model="test/model",
            tokenizer=TOKENIZER,
            out=tmp_path / "run",
            base_url=sim.base_url,
            api_key_env="DRAFTGEN_TEST_KEY",
            retry_base_delay=0.01,
            progress_interval=3600,
        )
        with pytest.raises(DraftgenError) as caught:
            Run(options).execute()
        requests = sim.stats["requests"]
    # Before: every turn failed 8 times (320 requests) and execute() returned normally.
    assert 8 <= requests <= 64 + 8  # the first wave (and calibration's questions), at most
    message = str(caught.value)
    assert "answered each of the run's first 8 attempts with HTTP 500 and none succeeded, " in (
        message
    )
    assert 'saying "simulated outage"' in message
    assert message.endswith("the same command resumes")
    assert f"stored in {tmp_path / 'run'}" in message


def test_the_command_exits_2_within_the_first_wave(tmp_path):
    sim = SimProcess(tmp_path, TOKENIZER, extra=["--fail-after", "0"])
    try:
        rows = write_rows(tmp_path / "rows.jsonl", 200)
        result = draftgen(*run_args(sim, [rows], tmp_path / "run", TOKENIZER))
        requests = sim.thread.stats["requests"]
    finally:
        sim.stop()
    # Before: 200 prompts x 8 attempts, 1,600 requests and minutes, and a last line naming
    # neither the status nor the server's words.
    assert result.returncode == 2, result.stderr
    assert requests <= 64 + 8  # one attempt a worker, and a retry whose backoff ended first
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"draftgen: stopped: {sim.base_url} answered each of the run's first 8")
    assert 'with HTTP 500 and none succeeded, saying "simulated outage"' in last


@pytest.mark.slow
def test_an_endpoint_that_dies_mid_run_stops_it_with_a_sentence(tmp_path, monkeypatch):
    monkeypatch.setenv("DRAFTGEN_TEST_KEY", "sk-test")
    with SimulatorThread(SimConfig(tokenizer=TOKENIZER, fail_after=10)) as sim:
        options = RunOptions(
            inputs=[str(write_rows(tmp_path / "rows.jsonl", 200))],
            model="test/model",
            tokenizer=TOKENIZER,
            out=tmp_path / "run",
            base_url=sim.base_url,
            api_key_env="DRAFTGEN_TEST_KEY",
            no_calibrate=True,
            progress_interval=3600,  # the default backoff: each turn's retries span a minute
        )
        with pytest.raises(DraftgenError) as caught:
            Run(options).execute()
        stored = sim.stats["completions"] if "completions" in sim.stats else None
    message = str(caught.value)
    # Before: 2 min 11 s, 1,351 retries, 193 of 200 turns failed, and exit 0.
    assert "answered each of the last " in message and " since its last answer, with HTTP 500" in (
        message
    )
    assert message.endswith("the same command resumes")
    status = RunDir(tmp_path / "run").status()
    assert status["completions"] == 10, (status, stored)

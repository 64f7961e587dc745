"""Several endpoints: the router (least outstanding, ejection, readmission, all down) on a fake
clock, the client over two scripted servers, and a run over two simulators, one failing halfway."""

from __future__ import annotations

import asyncio
import json
import sqlite3

import orjson
import pytest
from aiohttp import web
from conftest import (
    SimProcess,
    check_against_truth,
    draftgen,
    export_all,
    run_args,
    start_app,
    write_prompts,
)

from draftgen.backends.base import ApiError
from draftgen.cli.main import build_parser
from draftgen.cli.present import format_status
from draftgen.generate.client import AdaptiveLimiter, ChatClient, FatalApiError, RetryPolicy
from draftgen.generate.endpoints import (
    EJECTED,
    HEALTHY,
    REMOVED,
    EndpointsDown,
    EndpointSpec,
    HealthPolicy,
    Router,
    endpoint_label,
)
from draftgen.inputs.mix import Suite, read_suite
from draftgen.inputs.plan import plan_turns
from draftgen.store.database import Store

TOKENIZER = "fixture:kimi-k2.5"
SERVER_ERROR = ApiError("server_error", "Internal Server Error", True, False, False, None, 500)
RATE_LIMITED = ApiError("rate_limited", "slow down", True, False, True, None, 429)
REJECTED = ApiError("rejected", "bad request", False, False, status=400)
AUTH = ApiError("auth", "the API rejected the key", False, True, status=401)


class FakeClock:
    """Time that moves only when told to, or when the router sleeps."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        # Others run first, so a sleep cut short by a wake-up (and cancelled) moves no time.
        target = self.now + seconds
        for _ in range(4):
            await asyncio.sleep(0)
        self.now = max(self.now, target)


def router(count=3, *, probe=None, policy=None, concurrency=8, events=None, clock=None):
    clock = clock or FakeClock()
    specs = [EndpointSpec(f"http://10.0.0.{i}:8000/v1") for i in range(count)]
    return (
        Router(
            specs,
            concurrency=concurrency,
            limiter_factory=AdaptiveLimiter,
            policy=policy or HealthPolicy(eject_after=3, cooldown=2.0, all_down_wait=30.0),
            probe=probe,
            on_event=(lambda *e: events.append(e)) if events is not None else None,
            clock=clock,
            sleep=clock.sleep,
        ),
        clock,
    )


def test_least_outstanding_with_round_robin_ties():
    r, _ = router(3)
    picks = [r.choose().index for _ in range(3)]
    assert picks == [0, 1, 2]  # all tied at each step: round robin
    r.release(r.endpoints[1])
    assert r.choose().index == 1  # the only one with fewer outstanding
    assert [r.choose().index for _ in range(3)] == [2, 0, 1]  # tied again, from after the last
    assert r.in_flight == 6 and [e.limiter.in_flight for e in r.endpoints] == [2, 2, 2]


def test_a_retry_prefers_an_endpoint_it_has_not_failed_on():
    r, _ = router(2)
    first = r.choose()
    assert first.index == 0
    # Endpoint 0 is failed on: a retry goes to 1 even though 1 now has as many outstanding.
    assert r.choose(avoid={first.label}).index == 1
    assert r.choose(avoid={first.label}).index == 1  # 1 is busier now, still preferred
    r.endpoints[1].state = EJECTED
    assert r.choose(avoid={first.label}).index == 0  # no alternative: the avoided one will do


def test_total_and_per_endpoint_caps():
    r = Router(
        [EndpointSpec("http://a/v1", concurrency=1), EndpointSpec("http://b/v1")],
        concurrency=3,
        endpoint_concurrency=5,
        limiter_factory=AdaptiveLimiter,
    )
    assert [e.limiter.max for e in r.endpoints] == [1, 5]
    taken = [r.choose() for _ in range(4)]
    assert [e.index if e else None for e in taken] == [0, 1, 1, None]  # a full, then total cap


def test_pushback_throttles_only_the_endpoint_that_sent_it():
    r, _ = router(2, concurrency=16)
    a, b = r.endpoints
    r.failed(a, RATE_LIMITED)
    assert (a.limiter.limit, b.limiter.limit) == (8, 16)
    assert a.state == b.state == HEALTHY  # pushback is not ill health


def test_ejection_after_consecutive_server_failures_only():
    events = []
    r, clock = router(2, events=events)
    a = r.endpoints[0]
    for error in (SERVER_ERROR, SERVER_ERROR, REJECTED, RATE_LIMITED):
        r.failed(a, error)  # 4xx and 429 neither count nor reset
    assert a.state == HEALTHY and a.consecutive_failures == 2
    r.succeeded(a)
    assert a.consecutive_failures == 0
    for _ in range(3):
        r.failed(a, ApiError("connect_failed", "cannot connect"))
    assert a.state == EJECTED and a.ejections == 1 and a.probe_at == clock.now + 2.0
    assert events == [
        (a.label, "ejected", "3 failures in a row, last connect_failed: cannot connect")
    ]
    assert [r.choose().index for _ in range(3)] == [1, 1, 1]  # nothing goes to the ejected one


def test_a_single_endpoint_is_never_ejected():
    r, _ = router(1)
    for _ in range(10):
        r.failed(r.endpoints[0], SERVER_ERROR)
    assert r.endpoints[0].state == HEALTHY and r.choose() is r.endpoints[0]
    assert r.failed(r.endpoints[0], AUTH) is False  # fatal stays fatal: the run stops


def test_readmission_after_a_probe_with_backoff_and_probation():
    probes = []
    answers = [False, True]

    async def probe(endpoint):
        probes.append(clock.now)
        return answers.pop(0)

    events = []
    r, clock = router(2, probe=probe, events=events)
    a = r.endpoints[0]

    async def main():
        for _ in range(3):
            r.failed(a, SERVER_ERROR)
        ejected_at = clock.now
        r.choose()
        await asyncio.sleep(0)
        assert probes == []  # the cooldown has not passed
        clock.now = ejected_at + 2.0
        r.choose()  # a pick starts the due probe
        await asyncio.sleep(0)
        assert probes == [ejected_at + 2.0] and a.state == EJECTED  # no answer: back off
        assert a.probe_at == clock.now + 4.0
        clock.now += 4.0
        r.choose()
        await asyncio.sleep(0)
        assert a.state == HEALTHY and len(probes) == 2
        r.failed(a, SERVER_ERROR)  # on probation: one failure ejects it again, for longer
        assert a.state == EJECTED and a.probe_at == clock.now + 8.0
        r.succeeded(a)
        assert a.level == 0

    asyncio.run(main())
    assert [e[1] for e in events] == ["ejected", "readmitted", "ejected"]


def test_with_all_down_requests_wait_for_readmission():
    async def probe(endpoint):
        return endpoint.index == 1 and clock.now >= 1010.0

    r, clock = router(2, probe=probe)

    async def main():
        for endpoint in r.endpoints:
            for _ in range(3):
                r.failed(endpoint, SERVER_ERROR)
        assert r.choose() is None
        endpoint = await asyncio.wait_for(r.acquire(), timeout=5)
        return endpoint, clock.now

    endpoint, when = asyncio.run(main())
    assert endpoint.index == 1 and 1010.0 <= when < 1030.0  # waited, within the bound


def test_with_all_down_too_long_the_run_stops_with_the_reason():
    async def probe(endpoint):
        return False

    r, clock = router(2, probe=probe)

    async def main():
        for endpoint in r.endpoints:
            for _ in range(3):
                r.failed(endpoint, SERVER_ERROR)
        start = clock.now
        with pytest.raises(EndpointsDown) as caught:
            await asyncio.wait_for(r.acquire(), timeout=5)
        return clock.now - start, str(caught.value)

    waited, message = asyncio.run(main())
    assert 30.0 <= waited < 31.0
    assert message.startswith(
        "all 2 endpoints are down and no endpoint answered a health probe for 30 s ("
        "http://10.0.0.0:8000/v1 ejected after HTTP 500 server_error: Internal Server Error; "
    )


def test_a_401_removes_one_endpoint_of_a_fleet_and_stops_at_the_last():
    events = []
    r, _ = router(2, events=events)
    a, b = r.endpoints
    assert r.failed(a, AUTH) is True and a.state == REMOVED
    assert events[0][:2] == (a.label, "removed")
    assert [r.choose().index for _ in range(2)] == [1, 1]
    assert r.failed(b, AUTH) is False  # nothing left: the caller stops the run


def test_endpoint_label_drops_credentials_and_query():
    assert (
        endpoint_label("https://u:pw@Host.example:8443/v1/?k=1") == "https://host.example:8443/v1"
    )
    assert endpoint_label("http://[::1]:30000/") == "http://[::1]:30000"


# -- the client over two loopback servers ----------------------------------------------------

OK = {
    "id": "gen-1",
    "choices": [{"finish_reason": "stop", "message": {"content": "fine"}}],
    "usage": {"prompt_tokens": 1, "completion_tokens": 2},
}


async def serve(status: int):
    seen = []

    async def chat(request):
        seen.append(request.path)
        body = OK if status == 200 else {"error": {"code": status, "message": "down"}}
        return web.json_response(body, status=status)

    async def models(request):
        seen.append(request.path)
        return web.json_response({"data": []}, status=status)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/v1/models", models)
    runner, base_url = await start_app(app)
    return runner, base_url, seen


def test_client_routes_around_a_failing_endpoint_and_records_where():
    async def main():
        bad_runner, bad, bad_seen = await serve(500)
        good_runner, good, good_seen = await serve(200)
        events = []
        try:
            async with ChatClient(
                [bad, good],
                "key",
                concurrency=4,
                retry=RetryPolicy(4, base_delay=0.001),
                health=HealthPolicy(eject_after=2, cooldown=60.0),
                on_endpoint_event=lambda *e: events.append(e),
            ) as client:
                results = [await client.complete(b'{"model": "m"}', False) for _ in range(6)]
        finally:
            await bad_runner.cleanup()
            await good_runner.cleanup()
        return bad, good, results, bad_seen, good_seen, events

    bad, good, results, bad_seen, good_seen, events = asyncio.run(main())
    assert all(c.endpoint == good and c.endpoint_latency >= 0 for c, _ in results)
    # Round robin sends the first request to the bad one first; its retry goes to the other.
    first_errors = results[0][1]
    assert [(e.kind, e.status, e.endpoint) for e in first_errors] == [("server_error", 500, bad)]
    assert first_errors[0].as_dict()["endpoint"] == bad
    assert len(bad_seen) == 2 and len(good_seen) == 6  # ejected after two, never probed (60 s)
    assert [(e[0], e[1]) for e in events] == [(bad, "ejected")]


def test_client_stops_when_the_whole_fleet_rejects_the_key():
    async def main():
        runners, urls = [], []
        for _ in range(2):
            runner, url, _ = await serve(401)
            runners.append(runner)
            urls.append(url)
        try:
            async with ChatClient(urls, "sk-1", concurrency=2, retry=RetryPolicy(5, 0.001)) as c:
                with pytest.raises(FatalApiError) as caught:
                    await c.complete(b"{}", False)
                return str(caught.value), c.stats.requests
        finally:
            for runner in runners:
                await runner.cleanup()

    message, requests = asyncio.run(main())
    assert requests == 2 and message.startswith("HTTP 401 auth: the API rejected the key")


# -- store, status, flags ----------------------------------------------------------------------


def test_an_old_store_gains_the_endpoint_columns_and_keeps_its_rows(tmp_path):
    db = sqlite3.connect(tmp_path / "draftgen.sqlite")
    db.execute(
        "CREATE TABLE completions (key TEXT PRIMARY KEY, source_id TEXT NOT NULL, turn INTEGER"
        " NOT NULL, request BLOB NOT NULL, generation_id TEXT, provider TEXT, model TEXT,"
        " reasoning TEXT, content TEXT, tool_calls TEXT, finish_reason TEXT,"
        " native_finish_reason TEXT, prompt_tokens INTEGER, completion_tokens INTEGER,"
        " reasoning_tokens INTEGER, cost REAL NOT NULL DEFAULT 0, usage TEXT, raw_message TEXT,"
        " attempts INTEGER NOT NULL, errors TEXT, latency REAL, created_at REAL NOT NULL)"
    )
    errors = json.dumps([{"kind": "timeout", "message": "x", "status": None, "at": 1.0}])
    db.execute(
        "INSERT INTO completions (key, source_id, turn, request, content, attempts, errors,"
        " created_at) VALUES ('k', 's', 0, '{}', 'old answer', 2, ?, 1.0)",
        (errors,),
    )
    db.commit()
    db.close()
    with Store(tmp_path) as store:
        assert store.completions.answer("k") == ("old answer", None)
        columns = {row[1] for row in store.db.execute("PRAGMA table_info(completions)")}
        assert {"endpoint", "endpoint_latency"} <= columns
        assert store.tallies.endpoint_figures() == {}  # nothing recorded, nothing made up
        assert "endpoints:" not in format_status(store.tallies.counts(), tmp_path)


def test_base_url_repeats_and_a_single_one_stays_a_list_of_one():
    parser = build_parser()
    args = parser.parse_args(
        [
            "run",
            "--base-url",
            "http://a/v1",
            "--base-url",
            "http://b/v1",
            "--endpoint-concurrency",
            "3",
        ]
    )
    assert args.base_url == ["http://a/v1", "http://b/v1"] and args.endpoint_concurrency == 3
    assert parser.parse_args(["run", "--base-url", "http://a/v1"]).base_url == ["http://a/v1"]


# -- a run over two simulators, one going down halfway ----------------------------------------


class Fleet:
    """The ground truth of several simulators, as ``check_against_truth`` reads one."""

    def __init__(self, *sims: SimProcess) -> None:
        self.sims = sims

    def truth(self) -> list[dict]:
        return [record for sim in self.sims for record in sim.truth()]


def test_two_endpoints_one_failing_halfway(tmp_path):
    inputs = write_prompts(tmp_path / "prompts.jsonl", 40, invalid=False)
    keys = {
        plan.key
        for item in read_suite(Suite.from_inputs([str(inputs)]))
        for plan in plan_turns(item)
    }
    steady = SimProcess(tmp_path, TOKENIZER, extra=["--latency", "0.01"])
    failing = SimProcess(tmp_path, TOKENIZER, extra=["--latency", "0.01", "--fail-after", "12"])
    try:
        out = tmp_path / "run"
        args = run_args(steady, [inputs], out, TOKENIZER, "--concurrency", "4")
        args += ["--base-url", failing.base_url]
        result = draftgen(*args)
        assert result.returncode == 0, result.stderr
        export = export_all(out, tmp_path / "export.jsonl")
        exact, flagged, rows = check_against_truth(out, Fleet(steady, failing), export)
    finally:
        steady.stop()
        failing.stop()
    db = sqlite3.connect(out / "draftgen.sqlite")
    assert {key for (key,) in db.execute("SELECT key FROM completions")} == keys
    assert len(rows) == len(keys) and exact == len(keys) and flagged == 0
    served = dict(db.execute("SELECT endpoint, count(*) FROM completions GROUP BY endpoint"))
    assert set(served) == {steady.base_url, failing.base_url}
    assert 0 < served[failing.base_url] <= 12 < len(keys)  # used until it failed, no more
    events = [
        e
        for (e,) in db.execute(
            "SELECT event FROM endpoint_events WHERE endpoint = ?", (failing.base_url,)
        )
    ]
    assert events and set(events) == {"ejected"}  # probes find it still down
    status = draftgen("status", str(out), "--json")
    figures = orjson.loads(status.stdout)["endpoints"]
    assert figures[failing.base_url]["ejections"] == len(events)
    assert figures[failing.base_url]["error_kinds"]["server_error"] >= 3
    assert figures[steady.base_url]["errors"] == 0
    assert figures[steady.base_url]["completions"] == served[steady.base_url]
    text = draftgen("status", str(out)).stdout
    assert f"    {failing.base_url}  [ejected {len(events)}x, readmitted 0x]" in text

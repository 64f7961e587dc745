"""Calibration beside the work (issue #41, item 1): the run's first request waits for no
question, a question that gets no usable answer is asked once and leaves today's doubt, a question
held open with keep-alives ends at the idle timeout while the work goes on, and each answer is
kept as it comes, so a resume after kill -9 asks no provider that had answered."""

from __future__ import annotations

import asyncio
import collections
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time

import orjson
from aiohttp import ClientSession, web
from conftest import start_app

from draftgen.generate.calibrate import ASK, Calibrator, RendererQuestion
from draftgen.generate.calibration_task import CalibrationTasks
from draftgen.records import Completion, GenerationSettings
from draftgen.run.pipeline import RunOptions, run
from draftgen.simulator import SimConfig, SimulatorThread, wire
from draftgen.store.calibration import RENDERER, RENDERS_AS_DRAFTGEN, UNSETTLED
from draftgen.store.database import Store

TOKENIZER = "fixture:kimi-k2.5"
KEEP_ALIVE = b": OPENROUTER PROCESSING\n\n"
HOLD = 120.0  # seconds a question is held at most: far beyond every bound the runs set
ROUTE = {name: wire.ENDPOINT_FACTS[name][0] for name in wire.PROVIDERS}  # provider.only's names


def rows(count: int) -> list[dict]:
    return [
        {"id": f"p{i}", "messages": [{"role": "user", "content": f"Tell me fact {i}."}]}
        for i in range(count)
    ]


class Proxy:
    """In front of the simulator: the calibration's renderer questions go to ``question``
    (``None`` from it: forwarded), everything else is forwarded; what arrived when is noted."""

    def __init__(self, upstream: str, question=None) -> None:
        self.upstream = upstream.rstrip("/")
        self.question = question
        self.asked: collections.Counter = collections.Counter()  # route -> questions received
        self.work: list[float] = []  # arrival of each request of the work
        self.work_arrived = asyncio.Event()
        self.questions_ended: list[float] = []  # a held question's client left
        self.answered_after_work: list[bool] = []  # a question answered: was the work there?

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/v1/{tail:.*}", self.handle)
        return app

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        if request.method == "POST" and request.path.endswith("/chat/completions"):
            payload = orjson.loads(body)
            if is_question(payload):
                route = ((payload.get("provider") or {}).get("only") or [None])[0]
                self.asked[route] += 1
                if self.question is not None:
                    reply = await self.question(self, request, payload)
                    if reply is not None:
                        return reply
            else:
                self.work.append(time.monotonic())
                self.work_arrived.set()
        return await self.forward(request, body)

    async def forward(self, request: web.Request, body: bytes) -> web.Response:
        url = self.upstream + "/" + request.match_info["tail"]
        headers = {k: v for k, v in request.headers.items() if k.lower() in FORWARDED}
        async with (
            ClientSession() as session,
            session.request(
                request.method, url, params=request.query, data=body, headers=headers
            ) as answer,
        ):
            data = await answer.read()
            kind = answer.headers.get("Content-Type", "application/json")
        return web.Response(body=data, status=answer.status, headers={"Content-Type": kind})


FORWARDED = {"authorization", "content-type"}


def is_question(payload: dict) -> bool:
    """The renderer question: a prompt of a few tokens that starts with calibration's ASK."""
    messages = payload.get("messages") or []
    content = messages[-1].get("content") if messages else None
    return payload.get("max_tokens") == 1 and str(content or "").startswith(ASK)


async def keep_alive_forever(proxy: Proxy, request: web.Request, payload: dict):
    """OpenRouter's busy comments, and never a token, until the client leaves."""
    response = web.StreamResponse(headers={"Content-Type": "application/json"})
    await response.prepare(request)
    deadline = time.monotonic() + HOLD
    try:
        while time.monotonic() < deadline:
            transport = request.transport
            if transport is None or transport.is_closing():
                break
            await response.write(KEEP_ALIVE)
            await asyncio.sleep(0.05)
    except (ConnectionError, RuntimeError):
        pass  # the client left while a comment was written
    proxy.questions_ended.append(time.monotonic())
    return response


async def canned_wrong_answer(proxy: Proxy, request: web.Request, payload: dict):
    """The same answer to every question, refused for its usage (a negative cost) yet billed."""
    body = {
        "id": "gen-canned",
        "provider": "Canned",
        "choices": [{"finish_reason": "stop", "message": {"content": "ready"}}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 1, "cost": -0.5},
    }
    return web.json_response(body)


async def after_the_work(proxy: Proxy, request: web.Request, payload: dict):
    """Held until a request of the work has arrived (``HOLD`` at most), then answered by the
    simulator: a question the work waited for is answered only after ``HOLD``."""
    try:
        await asyncio.wait_for(proxy.work_arrived.wait(), HOLD / 12)
    except TimeoutError:
        pass
    proxy.answered_after_work.append(proxy.work_arrived.is_set())
    return None


def run_through(tmp_path, monkeypatch, proxy_question, count: int = 12, **overrides):
    """A calibrated run of ``count`` rows through a ``Proxy`` in front of the simulator: (proxy,
    ground truth by generation id, exported rows, calibrations)."""
    (tmp_path / "rows.jsonl").write_text(
        "".join(json.dumps(row) + "\n" for row in rows(count)), encoding="utf-8"
    )
    monkeypatch.setenv("DRAFTGEN_TEST_KEY", "sk-test")
    config = SimConfig(tokenizer=TOKENIZER, seed=5, min_tokens=10, max_tokens=30)
    with SimulatorThread(config) as sim:

        async def go():
            proxy = Proxy(sim.base_url, proxy_question)
            runner, base_url = await start_app(proxy.app())
            options = RunOptions(
                inputs=[str(tmp_path / "rows.jsonl")],
                model="test/model",
                tokenizer=TOKENIZER,
                out=tmp_path / "run",
                base_url=base_url,
                api_key_env="DRAFTGEN_TEST_KEY",
                concurrency=4,
                retry_base_delay=0.01,
                progress_interval=3600,
                **overrides,
            )
            try:
                await asyncio.wait_for(run(options), HOLD)
            finally:
                await runner.cleanup()
            return proxy

        proxy = asyncio.run(go())
        truth = dict(sim.truth)
    with Store(tmp_path / "run", create=False) as store:
        exported = list(store.samples.export_rows(include_unverified=True))
        asked = store.calibrations.read()
    return proxy, truth, exported, asked


def test_a_question_held_with_keep_alives_leaves_the_work_to_finish(tmp_path, monkeypatch):
    """Every question answered with ': OPENROUTER PROCESSING' forever: before, the run sent no
    work until each question's two attempts had each waited out the idle timeout."""
    proxy, truth, exported, asked = run_through(
        tmp_path, monkeypatch, keep_alive_forever, idle_timeout=2
    )
    assert len(exported) == 12 and all(row["verified"] for row in exported)
    # Each provider asked once; its question ended at the idle timeout, unsettled.
    assert set(proxy.asked) == set(ROUTE.values())
    assert set(proxy.asked.values()) == {1}
    assert len(proxy.questions_ended) == len(wire.PROVIDERS)
    assert {q[RENDERER]["verdict"] for q in asked.values()} == {UNSETTLED}
    assert set(asked) == set(wire.PROVIDERS)
    # The work was sent while the questions were held, not after them.
    assert proxy.work and min(proxy.work) < min(proxy.questions_ended)


def test_a_canned_wrong_answer_to_the_question_is_asked_once(tmp_path, monkeypatch):
    proxy, truth, exported, asked = run_through(tmp_path, monkeypatch, canned_wrong_answer)
    assert set(proxy.asked) == set(ROUTE.values())
    assert set(proxy.asked.values()) == {1}  # before: twice each, each a paid answer
    assert {q[RENDERER]["verdict"] for q in asked.values()} == {UNSETTLED}
    assert len(exported) == 12 and all(row["verified"] for row in exported)
    # Each refused answer is kept as billed, and counted in what the run spent.
    with Store(tmp_path / "run", create=False) as store:
        refused = store.db.execute(
            "SELECT count(*), sum(cost) FROM refused_answers WHERE key IS NULL"
        ).fetchone()
        spent = store.tallies.spent()
    assert refused[0] == len(wire.PROVIDERS) and refused[1] > 0
    assert spent >= refused[1]


def test_the_first_request_of_the_work_waits_for_no_answer(tmp_path, monkeypatch):
    proxy, truth, exported, asked = run_through(tmp_path, monkeypatch, after_the_work)
    # Each question was answered only once the work's first request had arrived.
    assert proxy.answered_after_work == [True] * len(wire.PROVIDERS)
    assert set(proxy.asked.values()) == {1}
    # The answers still count: every provider proven, every sample verified.
    assert {q[RENDERER]["verdict"] for q in asked.values()} == {RENDERS_AS_DRAFTGEN}
    assert set(asked) == set(wire.PROVIDERS)
    assert len(exported) == 12 and all(row["verified"] for row in exported)
    assert len(truth) == 12 + len(wire.PROVIDERS)


class ProxyThread:
    """A ``Proxy`` served on a loop of its own thread, for a run in another process."""

    def __init__(self, upstream: str, question) -> None:
        self.upstream, self.question = upstream, question
        self.ready = threading.Event()
        self.thread = threading.Thread(target=asyncio.run, args=(self._serve(),), daemon=True)
        self.thread.start()
        assert self.ready.wait(30)

    async def _serve(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.proxy = Proxy(self.upstream, self.question)
        self.done = asyncio.Event()
        runner, self.base_url = await start_app(self.proxy.app())
        self.ready.set()
        await self.done.wait()
        await runner.cleanup()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.done.set)
        self.thread.join(30)


def stored_calibrations(path) -> set[str]:
    """The providers with a calibration row, read as another process commits them."""
    if not path.exists():
        return set()
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1) as db:
            return {p for (p,) in db.execute("SELECT provider FROM provider_calibrations")}
    except sqlite3.Error:
        return set()  # not made yet


def test_a_resume_after_kill_keeps_the_answers_that_came(tmp_path, monkeypatch):
    """One provider's question held with keep-alives, the others answered: each answer is
    committed as it comes (before, all waited for the held one), so a run killed meanwhile keeps
    them, and its resume asks only the provider that had not answered."""
    held = wire.PROVIDERS[0]

    async def hold_one(proxy, request, payload):
        if (payload.get("provider") or {}).get("only") == [ROUTE[held]]:
            return await keep_alive_forever(proxy, request, payload)
        return None

    (tmp_path / "rows.jsonl").write_text(
        "".join(json.dumps(row) + "\n" for row in rows(8)), encoding="utf-8"
    )
    out = tmp_path / "run"
    config = SimConfig(tokenizer=TOKENIZER, seed=5, min_tokens=10, max_tokens=30)
    with SimulatorThread(config) as sim:
        proxy = ProxyThread(sim.base_url, hold_one)
        try:
            command = [sys.executable, "-m", "draftgen.cli", "run", "--input"]
            command += [str(tmp_path / "rows.jsonl"), "--model", "test/model", "--tokenizer"]
            command += [TOKENIZER, "--base-url", proxy.base_url, "--api-key-env"]
            command += ["DRAFTGEN_TEST_KEY", "--out", str(out), "--idle-timeout", "100"]
            command += ["--retry-base-delay", "0.01", "--concurrency", "4"]
            env = {**os.environ, "DRAFTGEN_TEST_KEY": "sk-test"}
            process = subprocess.Popen(
                command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
            )
            others = set(wire.PROVIDERS) - {held}
            deadline = time.monotonic() + 60
            while stored_calibrations(out / "draftgen.sqlite") != others:
                assert process.poll() is None, process.stderr.read().decode()
                assert time.monotonic() < deadline, "the answers that came were not committed"
                time.sleep(0.1)
            os.kill(process.pid, signal.SIGKILL)
            process.wait()
            process.stderr.close()
            assert proxy.proxy.asked[ROUTE[held]] == 1
            # The resume, every question answered now: only the held provider is asked again.
            proxy.proxy.question = None
            monkeypatch.setenv("DRAFTGEN_TEST_KEY", "sk-test")
            options = RunOptions(
                inputs=[str(tmp_path / "rows.jsonl")],
                model="test/model",
                tokenizer=TOKENIZER,
                out=out,
                base_url=proxy.base_url,
                api_key_env="DRAFTGEN_TEST_KEY",
                concurrency=4,
                retry_base_delay=0.01,
                progress_interval=3600,
            )
            asyncio.run(asyncio.wait_for(run(options), HOLD))
            asked = dict(proxy.proxy.asked)
        finally:
            proxy.stop()
    assert asked == {ROUTE[held]: 2, **{ROUTE[name]: 1 for name in others}}
    with Store(out, create=False) as store:
        calibrations = store.calibrations.read()
        exported = list(store.samples.export_rows(include_unverified=True))
    assert {p: q[RENDERER]["verdict"] for p, q in calibrations.items()} == dict.fromkeys(
        wire.PROVIDERS, RENDERS_AS_DRAFTGEN
    )
    assert len(exported) == 8 and all(row["verified"] for row in exported)


async def until(condition) -> None:
    """Let the loop's tasks run until ``condition()`` holds (they wait on nothing outside)."""
    for _ in range(10_000):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("the condition never held")


def test_a_providers_samples_wait_to_be_judged_until_its_answer_is_committed():
    """``CalibrationTasks`` on its own: a provider waits while the listing or its question is
    out, and stops waiting only once its answer's statements were written; one the answer
    proves to render otherwise is left out once, after the answer is kept."""

    async def go():
        answers = {"a/fp8": asyncio.Event(), "b/fp8": asyncio.Event()}
        listing = asyncio.Event()
        events: list[tuple] = []

        async def send(body: bytes):
            route = orjson.loads(body)["provider"]["only"][0]
            await answers[route].wait()
            count = 33 if route == "a/fp8" else 25  # B renders as a default system prompt
            usage = {"prompt_tokens": count, "completion_tokens": 1, "cost": 0.001}
            return Completion(None, None, None, None, "ready", None, "stop", "stop", usage), []

        calibrator = Calibrator(
            send=send,
            request_body=lambda settings, messages, tools, stream: {
                "messages": messages,
                "provider": settings.provider,
            },
            settings=GenerationSettings(model="m"),
            pin=lambda routing, route: {"only": [route]},
            question=RendererQuestion([{"role": "user", "content": ASK}], 33, {"x": 25}),
            tools=False,
            profile=None,
        )

        async def list_routes():
            await listing.wait()
            return [("a/fp8", "A"), ("b/fp8", "B")]

        async def write(statements):
            events.append(("written", statements[0][1][0]))

        async def exclude(provider, evidence):
            excluded.append(provider)
            events.append(("excluded", provider))

        excluded: list[str] = []
        tasks = CalibrationTasks(
            calibrator, list_routes, write, exclude, excluded, print, asyncio.Event()
        )
        tasks.start()
        tasks.start()  # started once
        assert tasks.waiting(["A", "B", "C"]) == {"A", "B", "C"}  # the listing may name any
        listing.set()
        await until(lambda: set(tasks.out) == {"A", "B"})
        assert tasks.waiting(["A", "B", "C"]) == {"A", "B"}
        tasks.seen({"A": {"completions": 3}})  # asked already: not again
        answers["a/fp8"].set()
        await until(lambda: "A" not in tasks.out)
        assert events == [("written", "A")] and tasks.waiting(["A", "B"]) == {"B"}
        answers["b/fp8"].set()
        await tasks.finish(lambda: {"A": {"completions": 3}, "B": {"completions": 1}})
        assert events == [("written", "A"), ("written", "B"), ("excluded", "B")]
        assert tasks.waiting(["A", "B"]) == set() and excluded == ["B"]

    asyncio.run(asyncio.wait_for(go(), 30))

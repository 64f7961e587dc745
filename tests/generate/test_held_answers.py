"""A whole answer whose connection is never ended (issue #35): a stream that delivered its finish
reason and usage but no ``data: [DONE]``, or a body without Content-Length whose JSON is complete,
is taken at once and stored; the connection is closed, the answer never bought again."""

from __future__ import annotations

import asyncio
import collections
import json
import sqlite3

import orjson
import pytest
from aiohttp import web
from conftest import SimProcess, draftgen, run_args, start_app

from draftgen.backends.base import StreamAccumulator
from draftgen.generate.client import ChatClient, FatalApiError, GenerationFailed, RetryPolicy
from draftgen.simulator import SimConfig, SimulatorThread

TOKENIZER = "fixture:kimi-k2.5"
HOLD = 20.0  # seconds a server below holds a connection at most; the client's idle timeout too
EVENTS = [
    {"id": "gen-1", "choices": [{"delta": {"role": "assistant", "content": ""}}]},
    {"choices": [{"delta": {"content": "fi"}}]},
    {"choices": [{"delta": {"content": "ne"}, "finish_reason": "stop"}]},
    {"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 2, "cost": 0.5}},
]
BODY = {
    "id": "gen-1",
    "choices": [{"finish_reason": "stop", "message": {"content": "{fine}"}}],
    "usage": {"prompt_tokens": 1, "completion_tokens": 2},
}


def sse(events: list[dict]) -> bytes:
    return b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in events)


class HoldingServer:
    """Answers every chat request with ``writes`` (a Content-Length of ``length`` if given), then
    holds the connection open, writing nothing, until the client leaves (``left`` counts those)
    or ``HOLD`` seconds pass."""

    def __init__(self, writes: list[bytes], length: int | None = None) -> None:
        self.writes = writes
        self.length = length
        self.hits = 0
        self.left = 0

    async def answer(self, request: web.Request) -> web.StreamResponse:
        self.hits += 1
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        if self.length is not None:
            response.content_length = self.length
        await response.prepare(request)
        for piece in self.writes:
            await response.write(piece)
        for _ in range(int(HOLD / 0.02)):
            transport = request.transport
            if transport is None or transport.is_closing():
                self.left += 1
                break
            await asyncio.sleep(0.02)
        return response


def complete(server: HoldingServer, stream: bool, **options):
    """One ``complete`` of one attempt against ``server``: (completion or None, error or None).
    The server's handler is given time to see the client leave before it is stopped."""

    async def go():
        app = web.Application()
        app.router.add_post("/v1/chat/completions", server.answer)
        runner, base_url = await start_app(app)
        try:
            async with ChatClient(
                base_url,
                "sk-held",
                concurrency=2,
                retry=RetryPolicy(1, base_delay=0.01),
                idle_timeout=options.pop("idle_timeout", HOLD),
                **options,
            ) as client:
                try:
                    completion, _ = await client.complete(b'{"model": "m"}', stream)
                    result = completion, None
                except (GenerationFailed, FatalApiError) as exc:
                    result = None, exc
            for _ in range(100):
                if server.left == server.hits:
                    break
                await asyncio.sleep(0.02)
            return result
        finally:
            await runner.cleanup()

    return asyncio.run(asyncio.wait_for(go(), 3 * HOLD))


def test_a_stream_held_open_after_its_usage_chunk_is_taken_at_once_and_closed():
    server = HoldingServer([sse(EVENTS)])
    completion, error = complete(server, stream=True)
    # Before: the stream waited for [DONE] until the idle timeout, and the answer was dropped.
    assert error is None
    assert (completion.content, completion.finish_reason, completion.cost) == ("fine", "stop", 0.5)
    assert (server.hits, server.left) == (1, 1)  # the client left; the server never ended it


@pytest.mark.parametrize("cut", [1, 5, 9])
def test_a_held_stream_whose_done_line_is_cut_short_is_taken(cut):
    """``data: [DONE]`` begun but never finished: the answer was whole before it."""
    blob = sse(EVENTS) + b"data: [DONE]\n\n"[:cut]
    completion, error = complete(HoldingServer([blob]), stream=True)
    assert error is None and completion.content == "fine"


def test_a_stream_held_after_its_finish_reason_but_before_its_usage_is_not_taken():
    """Usage is the last chunk: without it the answer may not be whole (the idle timeout)."""
    completion, error = complete(HoldingServer([sse(EVENTS[:3])]), stream=True, idle_timeout=0.5)
    assert completion is None
    assert [e.kind for e in error.errors] == ["timeout"]


@pytest.mark.parametrize("length", [None, 4096], ids=["no length", "a length never reached"])
def test_a_body_held_open_after_its_json_is_whole_is_taken_at_once(length):
    """Chunked without its last chunk, or a Content-Length larger than what comes; braces in
    the content do not fool the count."""
    server = HoldingServer([orjson.dumps(BODY)[:20], orjson.dumps(BODY)[20:]], length)
    completion, error = complete(server, stream=False)
    assert error is None
    assert (completion.content, completion.completion_tokens) == ("{fine}", 2)
    assert (server.hits, server.left) == (1, 1)


def test_a_body_cut_inside_its_json_is_not_taken():
    """Cut where its braces balance and a "}" is last (the content's own braces): not JSON."""
    message = {"content": "a}}}"}
    body = orjson.dumps({**BODY, "choices": [{"finish_reason": "stop", "message": message}]})
    server = HoldingServer([body[: body.index(b"}}}") + 3]])
    completion, error = complete(server, stream=False, idle_timeout=0.5)
    assert completion is None and [e.kind for e in error.errors] == ["timeout"]


def test_the_accumulator_reads_nothing_after_the_usage_chunk():
    accumulator = StreamAccumulator()
    accumulator.feed_bytes(sse(EVENTS) + b"data: {not json\n\n")
    assert accumulator.complete and not accumulator.done
    assert accumulator.finish().content == "fine"
    early = StreamAccumulator()
    early.feed_bytes(sse(EVENTS[:3]))
    assert not early.complete  # the finish reason alone
    usage_first = StreamAccumulator()
    usage_first.feed_bytes(sse([EVENTS[3], *EVENTS[:2]]))
    assert not usage_first.complete  # usage before the finish reason says nothing


# -- the simulator's held answers ---------------------------------------------------------------


def test_the_simulator_holds_a_billed_answer_open_and_the_client_takes_it():
    config = SimConfig(
        tokenizer=TOKENIZER, hostile=("held",), hostile_share=1.0, stall_seconds=HOLD
    )

    async def ask(base_url: str, stream: bool):
        # An idle timeout far below the hold: before, each answer ended as a timeout.
        async with ChatClient(base_url, "sk-test", concurrency=1, idle_timeout=1) as client:
            body = {"model": "a/b", "messages": [{"role": "user", "content": "Hi"}]}
            body["stream"] = stream
            return await client.complete(orjson.dumps(body), stream)

    with SimulatorThread(config) as sim:
        answers = [asyncio.run(ask(sim.base_url, stream)) for stream in (False, True)]
        stats, truth = dict(sim.stats), list(sim.truth.values())
    assert stats["held"] == 2 and [t["hostile"] for t in truth] == ["held", "held"]
    assert [errors for _, errors in answers] == [[], []]
    assert [c.generation_id for c, _ in answers] == [t["generation_id"] for t in truth]
    assert [c.completion_tokens for c, _ in answers] == [t["completion_tokens"] for t in truth]


# -- whole runs against the simulator's held answers --------------------------------------------


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "no stream"])
def test_a_run_against_held_answers_stores_every_one_and_buys_none_twice(tmp_path, stream):
    rows = tmp_path / "rows.jsonl"
    rows.write_text(
        "".join(
            json.dumps(
                {"id": f"h{i}", "messages": [{"role": "user", "content": f"Held question {i}?"}]}
            )
            + "\n"
            for i in range(30)
        )
    )
    sim = SimProcess(
        tmp_path,
        TOKENIZER,
        extra=["--max-tokens", "200", "--hostile", "held", "--hostile-share", "0.25"],
    )
    out = tmp_path / "run"
    try:
        result = draftgen(
            *run_args(sim, [rows], out, TOKENIZER, "--concurrency", "8", "--idle-timeout", "2"),
            "--stream" if stream else "--no-stream",
        )
        stats = dict(sim.thread.stats)
        truth = list(sim.thread.truth.values())
    finally:
        sim.stop()
    assert result.returncode == 0, result.stderr
    db = sqlite3.connect(out / "draftgen.sqlite")
    stored = dict(db.execute("SELECT generation_id, errors FROM completions").fetchall())
    db.close()
    held = {t["generation_id"] for t in truth if t.get("hostile") == "held"}
    assert stats["held"] == len(held) >= 3  # the draw gave this run something to prove
    # Counted at the server: every answer it billed is stored, and no prompt was bought twice.
    # Before: each held answer timed out, was lost and bought again (8 of 30 in each mode).
    assert set(stored) == {t["generation_id"] for t in truth}
    assert held <= set(stored)
    bought = collections.Counter(t["prompt_sha256"] for t in truth)
    assert len(stored) == len(bought) == 30 and max(bought.values()) == 1
    assert all(json.loads(errors or "[]") == [] for errors in stored.values())
    print(
        f"held ({'stream' if stream else 'no stream'}): {stats['requests']} requests, "
        f"{len(truth)} billed, {len(stored)} stored, {len(held)} held"
    )


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "body"])
def test_a_whole_answer_is_handed_over_before_its_tail_is_read(stream):
    """Issue #41: every answer waited up to TAIL_GRACE reading what follows it before the run
    could store it, a window a kill -9 lost paid answers in (47 in 10 kills). Now the caller has
    the answer while its tail is still being read beside it."""
    server = HoldingServer([sse(EVENTS)] if stream else [orjson.dumps(BODY)])

    async def go():
        app = web.Application()
        app.router.add_post("/v1/chat/completions", server.answer)
        runner, base_url = await start_app(app)
        try:
            async with ChatClient(
                base_url, "sk-held", concurrency=2, retry=RetryPolicy(1, base_delay=0.01)
            ) as client:
                completion, _ = await client.complete(b'{"model": "m"}', stream)
                draining = len(client._drains)
            return completion, draining
        finally:
            await runner.cleanup()

    completion, draining = asyncio.run(asyncio.wait_for(go(), 3 * HOLD))
    assert completion.finish_reason == "stop"
    assert draining == 1  # its tail read after it was handed over, not before


class KeepAliveServer(HoldingServer):
    """Answers with ``: OPENROUTER PROCESSING`` comments (and blank lines) every 20 ms and never
    a token, until the client leaves or ``HOLD`` seconds pass."""

    def __init__(self) -> None:
        super().__init__([])

    async def answer(self, request: web.Request) -> web.StreamResponse:
        self.hits += 1
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        for _ in range(int(HOLD / 0.02)):
            try:
                await response.write(b": OPENROUTER PROCESSING\n\n")
            except (ConnectionError, RuntimeError):
                self.left += 1
                break
            await asyncio.sleep(0.02)
        return response


def test_a_body_of_keep_alives_alone_times_out_at_the_idle_timeout():
    """Issue #41: a calibration question (a whole body, not a stream) answered with comments every
    second and never a token hung the run 240 s with --idle-timeout 20."""
    server = KeepAliveServer()
    completion, error = complete(server, stream=False, idle_timeout=0.5)
    assert completion is None
    assert [(e.kind, e.message) for e in error.errors] == [
        ("timeout", "no part of the answer within the idle timeout (0.5 s), only keep-alives")
    ]

"""The client against servers that misbehave on purpose: bodies and events past the byte cap,
endless streams, keep-alives that never become data, slow-loris trickles and redirects."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
import tracemalloc

import orjson
import pytest
from aiohttp import web
from conftest import start_app

from draftgen.generate.client import (
    ChatClient,
    EventClock,
    FatalApiError,
    GenerationFailed,
    RetryPolicy,
)
from draftgen.run.pipeline import RunOptions, run

KEY = "sk-secret-123"
CAP = 256 * 1024  # the byte cap of these tests: far below what the hostile servers send
HUGE = 16 * 2**20  # what a hostile server tries to send
PIECE = 64 * 1024  # what it writes at a time
# What the client may hold beyond the cap: one read of the socket (asyncio reads up to 256 KiB)
# and aiohttp's buffer before it pauses reading. Without the cap it would hold 2 x HUGE.
SLACK = 1024 * 1024
OK = {
    "id": "gen-1",
    "choices": [{"finish_reason": "stop", "message": {"content": "fine"}}],
    "usage": {"prompt_tokens": 1, "completion_tokens": 2},
}
EVENTS = [
    {"id": "gen-1", "choices": [{"delta": {"role": "assistant", "content": ""}}]},
    {"choices": [{"delta": {"content": "fi"}}]},
    {"choices": [{"delta": {"content": "ne"}, "finish_reason": "stop"}]},
    {"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 2}},
]


def event(obj: dict) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


class Server:
    """The chat route, any method, answered by ``handler``; counts requests and the bytes it
    got out."""

    def __init__(self, handler) -> None:
        self.handler = handler
        self.hits = 0
        self.written = 0

    async def start(self) -> str:
        app = web.Application()
        app.router.add_route("*", "/v1/chat/completions", self._answer)
        self.runner, base_url = await start_app(app)
        return base_url

    async def _answer(self, request: web.Request) -> web.StreamResponse:
        self.hits += 1
        await request.read()
        return await self.handler(self, request)

    async def send(
        self, request: web.Request, head: bytes, piece: bytes, *, total: int, every: float = 0.0
    ) -> web.StreamResponse:
        """``head``, then ``piece`` again and again until ``total`` bytes or the client leaves."""
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        try:
            await response.write(head)
            self.written += len(head)
            while self.written < total:
                await response.write(piece)
                self.written += len(piece)
                if every:
                    await asyncio.sleep(every)
        except ConnectionError:
            pass  # the client stopped reading: what this server wants to see
        return response


async def complete(server: Server, *, stream: bool, attempts: int = 1, **client_options):
    """One ``complete`` against ``server``: (result, exception, seconds, peak bytes allocated
    while it ran)."""
    base_url = await server.start()
    try:
        async with ChatClient(
            base_url,
            KEY,
            concurrency=4,
            retry=RetryPolicy(attempts, base_delay=0.01),
            **client_options,
        ) as client:
            tracemalloc.start()
            began = time.monotonic()
            try:
                result, error = await client.complete(b'{"model": "m"}', stream), None
            except (GenerationFailed, FatalApiError) as exc:
                result, error = None, exc
            seconds = time.monotonic() - began
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            return result, error, seconds, peak
    finally:
        await server.runner.cleanup()


def attempt(handler, **options):
    """``complete`` against a new server of ``handler``: (result, exception, server, seconds,
    peak bytes)."""
    server = Server(handler)
    result, error, seconds, peak = asyncio.run(complete(server, **options))
    return result, error, server, seconds, peak


def kinds(error: GenerationFailed) -> list[str]:
    return [e.kind for e in error.errors]


# -- the byte cap --------------------------------------------------------------------------------


@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "chunked"])
def test_an_oversized_body_is_refused_at_the_cap(declared):
    async def oversized(server, request):
        if declared:  # refused on its Content-Length, before a byte of it is read
            response = web.StreamResponse(headers={"Content-Type": "application/json"})
            response.content_length = HUGE
            await response.prepare(request)
            return await _flood(server, response, b'{"id": "' + b"x" * PIECE)
        return await server.send(request, b'{"id": "', b"x" * PIECE, total=HUGE)

    result, error, server, seconds, peak = attempt(
        oversized, stream=False, attempts=2, max_response_bytes=CAP
    )
    assert result is None and kinds(error) == ["response_too_large"] * 2
    assert error.errors[0].message == (
        "the response passed 262,144 bytes and was dropped; pass a larger --max-response-bytes "
        "if answers this long are expected"
    )
    assert server.hits == 2 and server.written < 2 * HUGE
    assert peak < CAP + SLACK, f"{peak:,} bytes held for a {CAP:,}-byte cap"
    assert seconds < 5


async def _flood(server: Server, response: web.StreamResponse, piece: bytes):
    try:
        while server.written < HUGE:
            await response.write(piece)
            server.written += len(piece)
    except ConnectionError:
        pass
    return response


def test_an_oversized_sse_event_is_refused_at_the_cap():
    # One event that never ends its line: nothing to parse, only bytes to hold.
    async def one_event(server, request):
        head = b'data: {"choices": [{"delta": {"content": "'
        return await server.send(request, head, b"x" * PIECE, total=HUGE)

    result, error, server, seconds, peak = attempt(one_event, stream=True, max_response_bytes=CAP)
    assert result is None and kinds(error) == ["response_too_large"]
    assert server.hits == 1 and server.written < HUGE
    assert peak < CAP + SLACK, f"{peak:,} bytes held for a {CAP:,}-byte cap"
    assert seconds < 5


def test_an_endless_stream_stops_at_the_cap():
    # Valid events that never finish: each one is progress, so only the cap ends it.
    async def endless(server, request):
        piece = event({"choices": [{"delta": {"content": "and more "}}]}) * 500
        return await server.send(request, event(EVENTS[0]), piece, total=HUGE)

    result, error, server, seconds, peak = attempt(endless, stream=True, max_response_bytes=CAP)
    assert result is None and kinds(error) == ["response_too_large"]
    assert server.hits == 1 and server.written < HUGE
    assert peak < CAP + SLACK, f"{peak:,} bytes held for a {CAP:,}-byte cap"
    assert seconds < 5


def test_an_error_body_is_read_only_as_far_as_its_message():
    async def huge_error(server, request):
        response = web.StreamResponse(status=500, headers={"Content-Type": "application/json"})
        await response.prepare(request)
        await response.write(b'{"error": {"message": "upstream died", "pad": "')
        return await _flood(server, response, b"x" * PIECE)

    result, error, server, seconds, peak = attempt(huge_error, stream=False, max_response_bytes=CAP)
    # Cut short, the JSON does not parse: its first 200 bytes are the message.
    assert kinds(error) == ["server_error"]
    assert error.errors[0].message.startswith('{"error": {"message": "upstream died", "pad": "xxx')
    assert server.written < HUGE and peak < CAP + SLACK


@pytest.mark.parametrize("stream", [False, True], ids=["body", "stream"])
def test_an_answer_under_the_cap_parses(stream):
    async def normal(server, request):
        if stream:
            return await server.send(request, b"".join(map(event, EVENTS)), b"", total=0)
        return web.json_response(OK)

    (completion, errors), error, server, _, _ = attempt(
        normal, stream=stream, max_response_bytes=4096
    )
    assert error is None and errors == [] and server.hits == 1
    assert (completion.content, completion.finish_reason, completion.completion_tokens) == (
        "fine",
        "stop",
        2,
    )


# -- time: idle data events and the attempt deadline ---------------------------------------------


@pytest.mark.parametrize(
    "keepalive", [b": OPENROUTER PROCESSING\n\n", b"\n"], ids=["comment", "blank-line"]
)
def test_keep_alives_are_not_progress(keepalive):
    # A keep-alive every 50 ms keeps aiohttp's 0.3 s read timeout from ever firing.
    async def processing(server, request):
        return await server.send(request, event(EVENTS[0]), keepalive, total=HUGE, every=0.05)

    # The deadline only bounds this test should keep-alives ever count again.
    result, error, server, seconds, _ = attempt(
        processing, stream=True, idle_timeout=0.3, attempt_timeout=3
    )
    assert result is None and kinds(error) == ["timeout"]
    assert error.errors[0].message == (
        "no data event within the idle timeout (0.3 s), only keep-alives"
    )
    assert 0.3 <= seconds < 10  # it ends: the bound is loose for a loaded machine


def test_only_data_events_move_the_idle_clock():
    clock = EventClock(0.3)
    chunks = [
        b": OPENROUTER PROCESSING\n\n",
        b'data: {"a"',  # an event split across reads counts in both
        b": 1}\n\n",
        b"\n",
        b": data: {}\n",  # a comment that quotes a data line
        b"data: \n\n",  # an empty data line
        b'data: {}\n\ndata: {"b": 2}\n\n',
        b'event: delta\ndata: {"c": 3}\n\n',
    ]
    seen = [clock._carries_event(chunk) for chunk in chunks]
    assert seen == [False, True, True, False, False, False, True, True]


def test_data_events_keep_a_stream_alive_past_the_idle_timeout():
    # Events every 50 ms for 0.8 s, between keep-alives: more than twice the idle timeout.
    async def slow_but_steady(server, request):
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(event(EVENTS[0]))
        for _ in range(16):
            await asyncio.sleep(0.05)
            await response.write(b": OPENROUTER PROCESSING\n\n")
            await response.write(event({"choices": [{"delta": {"content": "."}}]}))
        await response.write(b"".join(map(event, EVENTS[1:])) + b"data: [DONE]\n\n")
        return response

    (completion, errors), error, _, seconds, _ = attempt(
        slow_but_steady, stream=True, idle_timeout=0.3
    )
    assert error is None and errors == []
    assert completion.content == "." * 16 + "fine" and seconds >= 0.8


@pytest.mark.parametrize("stream", [False, True], ids=["body", "stream"])
def test_a_slow_loris_ends_at_the_attempt_deadline(stream):
    # A byte every 50 ms: each one resets aiohttp's read timeout, and inside an event (or a
    # body's JSON) each one is progress; only the deadline ends it. Whitespace alone would not
    # be (test_held_answers: keep-alives).
    async def trickle(server, request):
        if stream:
            return await server.send(request, b'data: {"id": "', b"x", total=210, every=0.05)
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.content_length = 210
        await response.prepare(request)
        try:
            await response.write(b'{"id": "')  # then the id a byte at a time: progress
            for _ in range(202):
                await response.write(b"x")
                server.written += 1
                await asyncio.sleep(0.05)
        except ConnectionError:
            pass
        return response

    result, error, server, seconds, _ = attempt(
        trickle, stream=stream, idle_timeout=0.3, attempt_timeout=0.5
    )
    assert result is None and kinds(error) == ["timeout"]
    assert error.errors[0].message == (
        "the attempt passed its 0.5 s deadline (--attempt-timeout) before the response ended"
    )
    assert 0.5 <= seconds < 10 and server.written < 210


# -- redirects -----------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [302, 307])
def test_a_redirect_is_not_followed(status):
    async def answer(server, request):
        return web.json_response(OK)

    async def main():
        elsewhere = Server(answer)
        target = await elsewhere.start()
        # The query holds the key: the message shows neither.
        location = f"{target}/chat/completions?key={KEY}"

        async def redirect(server, request):
            return web.Response(status=status, headers={"Location": location})

        server = Server(redirect)
        try:
            outcome = await complete(server, stream=False, attempts=3)
        finally:
            await elsewhere.runner.cleanup()
        return outcome, server.hits, elsewhere.hits, target

    (result, error, _, _), hits, redirected_hits, target = asyncio.run(main())
    assert result is None and isinstance(error, FatalApiError)
    assert str(error) == (
        f"HTTP {status} redirected: the endpoint answered {status} with a redirect to "
        f"{target}/chat/completions; draftgen does not follow redirects with a prompt body: use "
        "the final URL as --base-url"
    )
    assert KEY not in str(error)
    assert (hits, redirected_hits) == (1, 0)


# -- a whole run ---------------------------------------------------------------------------------


def test_a_run_retries_an_oversized_answer_and_stores_every_row_once(tmp_path, monkeypatch):
    rows = tmp_path / "prompts.jsonl"
    rows.write_text(
        "".join(
            json.dumps({"id": f"r{i}", "messages": [{"role": "user", "content": f"Q{i}"}]}) + "\n"
            for i in range(4)
        )
    )
    monkeypatch.setenv("DRAFTGEN_TEST_KEY", "sk-test")
    oversized = {**OK, "choices": [{"finish_reason": "stop", "message": {"content": "x" * CAP}}]}

    async def first_oversized(server, request):
        return web.json_response(oversized if server.hits == 1 else OK)

    async def main():
        server = Server(first_oversized)
        base_url = await server.start()
        try:
            options = RunOptions(
                no_calibrate=True,
                inputs=[str(rows)],
                model="test/model",
                tokenizer="fixture:kimi-k2.5",
                out=tmp_path / "run",
                base_url=base_url,
                api_key_env="DRAFTGEN_TEST_KEY",
                concurrency=2,
                stream=False,
                retry_base_delay=0.01,
                progress_interval=3600,
                max_response_bytes=CAP,
            )
            return await run(options), server.hits
        finally:
            await server.runner.cleanup()

    summary, hits = asyncio.run(main())
    assert summary.stopped is None and hits == 5
    counts = summary.counts
    assert (counts["completions"], counts["failures"]) == (4, {})
    assert counts["retried_errors"] == {"response_too_large": 1}
    db = sqlite3.connect(tmp_path / "run" / "draftgen.sqlite")
    stored = db.execute("SELECT source_id, content, attempts FROM completions ORDER BY 1")
    rows = stored.fetchall()
    assert [(source_id, content) for source_id, content, _ in rows] == [
        (f"r{i}", "fine") for i in range(4)
    ]
    assert sorted(attempts for _, _, attempts in rows) == [1, 1, 1, 2]


def test_a_base_url_that_redirects_is_refused_by_the_probe_before_any_request():
    from draftgen.run.probe import ProbeError, probe_endpoints

    async def scenario():
        hits = []

        async def moved(request):
            hits.append(request.path)
            raise web.HTTPFound("http://127.0.0.1:9/v1" + request.path[3:])

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", moved)
        runner, base_url = await start_app(app)
        try:
            with pytest.raises(ProbeError) as caught:
                await probe_endpoints([base_url], None, "m", "vllm")
        finally:
            await runner.cleanup()
        return str(caught.value), hits

    message, hits = asyncio.run(scenario())
    assert "answered HTTP 302 with a redirect to http://127.0.0.1:9/v1" in message
    assert message.endswith("use the final URL as --base-url")
    assert len(hits) == 1


@pytest.mark.parametrize(
    "status, body, kind",
    [
        (200, b"<html><body>Sign in to continue</body></html>", "text/html"),
        (404, b"<!DOCTYPE HTML><title>Error response</title>File not found", "text/html"),
    ],
)
def test_an_endpoint_that_is_not_an_api_is_refused_by_the_probe(status, body, kind):
    """A login page answering 200 to everything and a static file server's 404 page used to
    pass the probe; every request then failed and the run exited 0."""
    from draftgen.run.probe import ProbeError, probe_endpoints

    async def scenario():
        async def page(request):
            return web.Response(status=status, body=body, content_type=kind)

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", page)
        runner, base_url = await start_app(app)
        try:
            with pytest.raises(ProbeError) as caught:
                await probe_endpoints([base_url], None, "a/b", "openrouter")
        finally:
            await runner.cleanup()
        return str(caught.value), base_url

    message, base_url = asyncio.run(scenario())
    assert message.startswith(f"GET {base_url}/key answered HTTP {status} with {kind} (")
    assert message.endswith(
        "not JSON: this is not an OpenAI-compatible API; check --base-url (it usually ends in "
        "/v1, or /api/v1 for OpenRouter)"
    )

"""The HTTP client against a scripted loopback server: retries, Retry-After, fatal errors."""

from __future__ import annotations

import asyncio
import time

import orjson
import pytest
from aiohttp import web
from conftest import start_app

from draftgen.generate.client import (
    AdaptiveLimiter,
    ChatClient,
    FatalApiError,
    GenerationFailed,
    RetryPolicy,
)

OK = {
    "id": "gen-1",
    "choices": [{"finish_reason": "stop", "message": {"content": "fine"}}],
    "usage": {"prompt_tokens": 1, "completion_tokens": 2, "cost": 0.5},
}


async def serve(script):
    """Answer request n with script[n] (a callable returning a Response); record each request."""
    seen = []

    async def handler(request):
        seen.append((time.monotonic(), request.headers.get("Authorization"), await request.read()))
        step = script[min(len(seen) - 1, len(script) - 1)]
        return await step(request)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)
    runner, base_url = await start_app(app)
    return runner, base_url, seen


def reply(status=200, body=OK, headers=None):
    async def step(request):
        return web.Response(
            status=status, body=orjson.dumps(body), headers=headers, content_type="application/json"
        )

    return step


def run(script, *, stream=False, attempts=5, key="sk-secret-123", **complete):
    async def main():
        runner, url, seen = await serve(script)
        try:
            async with ChatClient(
                url, key, concurrency=4, retry=RetryPolicy(attempts, base_delay=0.01)
            ) as client:
                try:
                    answer = await client.complete(b'{"model": "m"}', stream, **complete)
                    return answer, seen, None
                except (GenerationFailed, FatalApiError) as exc:
                    return None, seen, exc
        finally:
            await runner.cleanup()

    return asyncio.run(main())


def test_success_sends_key_and_body():
    (completion, errors), seen, _ = run([reply()])
    assert completion.content == "fine" and errors == []
    assert seen[0][1] == "Bearer sk-secret-123" and seen[0][2] == b'{"model": "m"}'


def test_retry_after_is_honoured_and_errors_are_recorded():
    (completion, errors), seen, _ = run(
        [
            reply(429, {"error": {"code": 429, "message": "slow down"}}, {"Retry-After": "0.3"}),
            reply(503, {"error": {"code": 503, "message": "no provider"}}),
            reply(200, {"error": {"code": 502, "message": "upstream"}}),
            reply(200, {"choices": [{"finish_reason": None, "message": {"content": ""}}]}),
            reply(),
        ]
    )
    assert completion.content == "fine"
    assert [e.kind for e in errors] == [
        "rate_limited",
        "overloaded",
        "error_in_body",
        "empty_completion",
    ]
    assert seen[1][0] - seen[0][0] >= 0.29


def test_bad_request_is_not_retried():
    _, seen, exc = run([reply(400, {"error": {"code": 400, "message": "bad"}}), reply()])
    assert isinstance(exc, GenerationFailed) and exc.reason == "rejected" and len(seen) == 1


def test_gives_up_after_max_attempts():
    _, seen, exc = run([reply(500, {})], attempts=3)
    assert isinstance(exc, GenerationFailed)
    assert exc.reason == "gave_up_after_3_attempts" and len(seen) == 3


def test_a_request_given_fewer_attempts_buys_no_more_answers():
    """A calibration question answered with a malformed (yet billed) body: 8 paid answers once."""
    _, seen, exc = run([reply(200, {"choices": []})], attempts=8, max_attempts=2)
    assert isinstance(exc, GenerationFailed)
    assert exc.reason == "gave_up_after_2_attempts" and len(seen) == 2


@pytest.mark.parametrize(
    "status, body",
    [
        (401, {"error": {"code": 401, "message": "bad key sk-secret-123"}}),
        (402, {"error": {"code": 402, "message": "no credits"}}),
    ],
)
def test_fatal_errors_stop_and_never_echo_the_key(status, body):
    _, seen, exc = run([reply(status, body), reply()])
    assert isinstance(exc, FatalApiError) and len(seen) == 1
    assert "sk-secret-123" not in str(exc)


def test_dropped_stream_is_retried():
    async def dropped(request):
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b'data: {"choices": [{"delta": {"content": "par"}}]}\n\n')
        request.transport.close()
        return response

    async def whole(request):
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for event in (
            {"id": "g", "choices": [{"delta": {"reasoning": "r"}}]},
            {"choices": [{"delta": {"content": "done"}, "finish_reason": "stop"}]},
            {"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 3}},
        ):
            await response.write(b"data: " + orjson.dumps(event) + b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        return response

    (completion, errors), _, _ = run([dropped, whole], stream=True)
    assert (completion.reasoning, completion.content, completion.completion_tokens) == (
        "r",
        "done",
        3,
    )
    assert [e.kind for e in errors] == ["connection_dropped"]


def test_limiter_halves_on_pushback_and_recovers():
    async def main():
        limiter = AdaptiveLimiter(8)
        limiter.on_pushback(None)
        assert limiter.limit == 4
        limiter.on_pushback(None)  # the same storm: not cut again within a second
        assert limiter.limit == 4
        for _ in range(10):
            limiter.on_success()
        assert limiter.limit == 8
        held = [await limiter.acquire() for _ in range(8)]
        assert len(held) == 8 and limiter.in_flight == 8
        waiter = asyncio.create_task(limiter.acquire())
        await asyncio.sleep(0.01)
        assert not waiter.done()
        limiter.release()
        await asyncio.wait_for(waiter, 1)
        assert limiter.in_flight == 8

    asyncio.run(main())

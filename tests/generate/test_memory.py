"""The answers being read share one byte budget for the whole run (``generate.memory``): past it,
every answer but the largest waits before its next read and nothing new is sent, so memory is
bounded by the budget and not by the per-answer cap times the answers in flight (issue #35)."""

from __future__ import annotations

import asyncio
import gc
import tracemalloc

import orjson
from aiohttp import web
from conftest import start_app

from draftgen.backends.base import StreamAccumulator
from draftgen.generate.client import ChatClient, GenerationFailed, RetryPolicy
from draftgen.generate.memory import ResponseMemory

MiB = 2**20


def test_past_the_budget_only_the_largest_answer_reads_on_and_new_requests_wait():
    async def go() -> list[str]:
        memory = ResponseMemory(100)
        said: list[str] = []

        async def sender() -> None:
            await memory.room()
            said.append("sent")

        large_reading, small_reading = memory.reading(), memory.reading()
        large, small = large_reading.__enter__(), small_reading.__enter__()
        memory.charge(large, 80)
        memory.charge(small, 30)
        assert memory.held == 110 and memory.peak == 110
        # The largest never waits: it ends, or passes its cap and is refused.
        assert await memory.wait_to_read(large) is False
        waiting = asyncio.create_task(memory.wait_to_read(small))
        sending = asyncio.create_task(sender())
        await asyncio.sleep(0.01)
        assert not waiting.done() and not sending.done()
        said.append("large ends")
        large_reading.__exit__(None, None, None)
        # Released whatever way it ended: the smaller reads on, the request goes out.
        assert await waiting is True
        await sending
        assert memory.held == 30 and memory.paused == 1
        small_reading.__exit__(None, None, None)
        assert memory.held == 0
        return said

    assert asyncio.run(go()) == ["large ends", "sent"]


def test_of_answers_that_grow_in_step_the_earliest_reads_on():
    async def go() -> list[bool]:
        memory = ResponseMemory(100)
        with memory.reading() as first, memory.reading() as second:
            memory.charge(first, 60)
            memory.charge(second, 60)
            waits = asyncio.create_task(memory.wait_to_read(second))
            reads = await memory.wait_to_read(first)
            await asyncio.sleep(0.01)
            still_waiting = not waits.done()
        await waits
        return [reads, still_waiting]

    assert asyncio.run(go()) == [False, True]


def test_a_reading_that_ends_in_an_error_releases_its_bytes():
    memory = ResponseMemory(10)
    try:
        with memory.reading() as reading:
            memory.charge(reading, 50)
            raise ValueError("refused at its cap")
    except ValueError:
        pass
    assert memory.held == 0 and memory.peak == 50


class Endless:
    """A chat route that streams valid deltas forever (every request), counting the requests."""

    def __init__(self) -> None:
        self.hits = 0

    async def answer(self, request: web.Request) -> web.StreamResponse:
        self.hits += 1
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        delta = {"choices": [{"delta": {"content": "and more "}}]}
        piece = (b"data: " + orjson.dumps(delta) + b"\n\n") * 400
        try:
            while True:
                await response.write(piece)
        except ConnectionError:
            pass
        return response


def test_endless_answers_at_once_hold_the_budget_not_the_cap_times_the_answers():
    """Sixteen endless streams at once, each capped at 4 MiB: before, they held up to 64 MiB
    together; with a 4 MiB budget at most the budget, the largest's cap (it reads on while the
    others wait) and one read more each, and each still ends at its own cap, none hangs."""
    server = Endless()

    async def go() -> tuple[list[str], ResponseMemory]:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", server.answer)
        runner, base_url = await start_app(app)
        memory = ResponseMemory(4 * MiB)
        try:
            async with ChatClient(
                base_url,
                "sk-test",
                concurrency=16,
                retry=RetryPolicy(1),
                max_response_bytes=4 * MiB,
                memory=memory,
            ) as client:

                async def one() -> str:
                    try:
                        await client.complete(b'{"model": "m"}', True)
                    except GenerationFailed as exc:
                        return exc.errors[-1].kind
                    return "answered"

                kinds = await asyncio.wait_for(asyncio.gather(*(one() for _ in range(16))), 60)
        finally:
            await runner.cleanup()
        return kinds, memory

    kinds, memory = asyncio.run(go())
    assert kinds == ["response_too_large"] * 16
    assert server.hits == 16
    assert memory.paused > 0 and memory.held == 0
    # One socket read is at most 256 KiB.
    assert 4 * MiB <= memory.peak <= 4 * MiB + 4 * MiB + 16 * 256 * 1024, memory.peak


def test_what_a_refused_answer_read_is_freed_at_once_not_by_the_collector():
    """Before, the refused attempt's error kept its traceback, whose frames held the 4 MiB read
    in a cycle with the frame that kept the error: freed only when the collector ran (which a
    run paces for thousands of requests), so 32 endless bodies held 2.0 GB."""
    server = Endless()

    async def go() -> int:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", server.answer)
        runner, base_url = await start_app(app)
        try:
            async with ChatClient(
                base_url, "sk-test", concurrency=1, retry=RetryPolicy(1), max_response_bytes=4 * MiB
            ) as client:
                try:
                    await client.complete(b'{"model": "m"}', True)
                except GenerationFailed as exc:
                    assert exc.errors[-1].kind == "response_too_large"
                return tracemalloc.get_traced_memory()[0]
        finally:
            await runner.cleanup()

    gc.collect()
    gc.disable()
    tracemalloc.start()
    try:
        held = asyncio.run(go())
    finally:
        tracemalloc.stop()
        gc.enable()
    assert held < MiB, f"{held:,} bytes still held"


def test_a_streams_thousands_of_deltas_are_held_a_thousand_at_a_time():
    """A str costs ~50 bytes beyond its text: 5,000 one-character deltas were 5,000 objects
    (~280 KB for 5 KB of text); joined 1,024 at a time they are 908, 4 blocks and the 904 since,
    and the budget is charged what the folded answer holds, not the 235 KB of events read."""
    accumulator = StreamAccumulator()
    events = b"".join(
        b"data: " + orjson.dumps({"choices": [{"delta": {"content": "abcde"[i % 5]}}]}) + b"\n\n"
        for i in range(5000)
    )
    accumulator.feed_bytes(events)
    assert len(accumulator.content) == 4 + 904
    assert accumulator.held_bytes() == 5000 + 908 * 56
    assert len(events) > 4 * accumulator.held_bytes()
    finish = {"choices": [{"delta": {}, "finish_reason": "stop"}], "usage": {}}
    accumulator.feed_bytes(b"data: " + orjson.dumps(finish) + b"\n\n")
    assert accumulator.finish().content == "abcde" * 1000

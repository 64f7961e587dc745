"""The render thread: calls run one at a time in the order given; results come back in order."""

from __future__ import annotations

import asyncio
import threading

import pytest

from draftgen.generate.serial import SerialExecutor


def test_calls_run_on_one_thread_in_order_and_their_results_come_back_in_order():
    executor = SerialExecutor("draftgen-test")
    ran: list[tuple[int, str]] = []

    def call(index: int) -> int:
        ran.append((index, threading.current_thread().name))
        if index == 3:
            raise ValueError("three")
        return index * 10

    async def main():
        order: list[int] = []

        async def one(index: int) -> object:
            try:
                result = await executor.run(call, index)
            except ValueError as exc:
                result = str(exc)
            order.append(index)
            return result

        results = await asyncio.gather(*(one(i) for i in range(6)))
        return results, order

    results, order = asyncio.run(main())
    executor.shutdown()
    assert results == [0, 10, 20, "three", 40, 50]
    assert order == list(range(6))
    assert ran == [(i, "draftgen-test") for i in range(6)]


def test_shutdown_cancels_the_calls_still_waiting_and_refuses_new_ones():
    executor = SerialExecutor("draftgen-test")
    release = threading.Event()

    async def main():
        first = executor.run(release.wait, 10)
        waiting = executor.run(lambda: "never")
        await asyncio.sleep(0.05)  # the first call is on the thread, the second in the queue
        executor.shutdown()
        release.set()
        assert await first is True
        with pytest.raises(asyncio.CancelledError):
            await waiting
        with pytest.raises(RuntimeError, match="shut down"):
            executor.run(lambda: None)

    asyncio.run(main())

"""Coroutines waiting for room, all woken when some is made: how the spending limit
(``budget.SpendGuard``) and the memory of the answers being read (``memory.ResponseMemory``)
hold requests. Each waiter looks again at what it waits for once woken.
"""

from __future__ import annotations

import asyncio


class Waiters:
    """The coroutines waiting (``wait``) until the next ``wake_all``."""

    def __init__(self) -> None:
        self._futures: list[asyncio.Future] = []

    async def wait(self) -> None:
        future = asyncio.get_running_loop().create_future()
        self._futures.append(future)
        try:
            await future
        finally:
            if future in self._futures:  # cancelled before it was woken
                self._futures.remove(future)

    def wake_all(self) -> None:
        futures, self._futures = self._futures, []
        for future in futures:
            if not future.done():
                future.set_result(None)

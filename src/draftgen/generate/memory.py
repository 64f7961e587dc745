"""The memory of the answers being read: one byte budget shared by every response in flight, so a
run's memory is bounded for the whole run, not per answer (issue #35).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from draftgen.generate.waiters import Waiters

# The bytes all answers being read may hold at once: 32 answers at the 64 MiB cap of one answer
# would be 2 GiB, and each is copied at least once more as it is joined and parsed.
RUN_RESPONSE_BYTES = 512 * 2**20


class Reading:
    """One answer being read: the bytes it has charged so far, and when it began (of two that
    hold as much, the earlier reads on: answers that grow in step must not all wait, nor all
    read)."""

    __slots__ = ("held", "number")

    def __init__(self, number: int) -> None:
        self.held = 0
        self.number = number


class ResponseMemory:
    """The bytes the answers being read hold, against ``budget`` for the whole run.

    Each answer charges what it holds (``reading``): a body what it has read, a stream its
    folded answer (``StreamAccumulator.held_bytes``). Once the answers hold the whole budget,
    an answer waits before its next read until others let go, except the one that holds the
    most: it reads on to its own byte cap, so reading never deadlocks (the largest either ends,
    or passes its cap and is refused, and its bytes are released). A new request is not sent
    while the budget is spent (``room``). A paused answer is not read, so the server's bytes
    wait in the socket's buffers, not in this process (aiohttp pauses the transport, and its
    read timeout with it).
    """

    def __init__(self, budget: int = RUN_RESPONSE_BYTES) -> None:
        self.budget = budget
        self.held = 0
        self.peak = 0  # the most the answers being read have held at once (for tests, trials)
        self.paused = 0  # reads that waited for room
        self._readings: set[Reading] = set()
        self._begun = 0
        self._waiters = Waiters()

    @contextmanager
    def reading(self) -> Iterator[Reading]:
        """An answer's reading: what it charges is released when it ends, however it ends."""
        self._begun += 1
        reading = Reading(self._begun)
        self._readings.add(reading)
        try:
            yield reading
        finally:
            self._readings.discard(reading)
            self.held -= reading.held
            self._waiters.wake_all()

    def charge(self, reading: Reading, size: int) -> None:
        """``size`` more bytes read by ``reading``."""
        self.hold(reading, reading.held + size)

    def hold(self, reading: Reading, size: int) -> None:
        """``reading`` holds ``size`` bytes now (a stream's folded answer: less than it read)."""
        self.held += size - reading.held
        reading.held = size
        self.peak = max(self.peak, self.held)

    async def wait_to_read(self, reading: Reading) -> bool:
        """Wait before ``reading``'s next read while the budget is spent and another answer
        holds more; whether it waited (its idle clock then starts again)."""
        waited = False
        while self.held >= self.budget and not self._largest(reading):
            if not waited:
                self.paused += 1
                waited = True
            await self._waiters.wait()
        return waited

    async def room(self) -> None:
        """Wait until the answers being read hold less than the budget (before a request)."""
        while self.held >= self.budget:
            await self._waiters.wait()

    def _largest(self, reading: Reading) -> bool:
        return reading is max(self._readings, key=lambda other: (other.held, -other.number))

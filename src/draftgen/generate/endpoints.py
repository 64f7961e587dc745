"""Several endpoints: least-outstanding routing, a limiter per endpoint, ejection and readmission.

The router decides which base URL an attempt goes to and whether that URL is healthy; the client
does the HTTP. It knows endpoints and their errors, not prompts, tokenizers or the store.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit, urlunsplit

from draftgen.backends.base import ApiError

# Failures that say the server (not the request) is unwell: they count towards ejection.
HEALTH_KINDS = frozenset({"connect_failed", "connection_dropped", "timeout"})
# Errors that say this endpoint is set up wrong (key, path, model): in a fleet it is removed for
# the rest of the run instead of stopping it, since the others may be set up right.
MISCONFIGURED_KINDS = frozenset({"auth", "not_found", "redirected"})

HEALTHY, EJECTED, REMOVED = "healthy", "ejected", "removed"


class EndpointsDown(Exception):
    """No endpoint can take requests and none came back in time; the message says which and why."""


@dataclass(frozen=True)
class EndpointSpec:
    """One base URL of the run, with its own in-flight cap (None: the run's shared default)."""

    url: str
    concurrency: int | None = None


def endpoint_specs(base_url: str | Sequence[str | EndpointSpec]) -> list[EndpointSpec]:
    """One base URL, or several (strings or ``EndpointSpec``), as endpoint specs."""
    items = [base_url] if isinstance(base_url, str) else list(base_url)
    return [item if isinstance(item, EndpointSpec) else EndpointSpec(item) for item in items]


@dataclass(frozen=True)
class HealthPolicy:
    """When an endpoint is ejected, how it is probed, and how long a run waits with all down."""

    eject_after: int = 3  # consecutive server-side failures (5xx, timeouts, connection errors)
    cooldown: float = 2.0  # seconds before the first probe; doubles per failed probe
    max_cooldown: float = 60.0
    all_down_wait: float = 300.0  # with every endpoint ejected, requests wait this long


class Limiter(Protocol):
    max: int
    limit: float
    in_flight: int

    def try_acquire(self) -> bool: ...
    def release(self) -> None: ...
    def on_success(self) -> None: ...
    def on_pushback(self, retry_after: float | None) -> None: ...
    def pause_left(self) -> float: ...


def counts_against_health(error: ApiError) -> bool:
    """Whether ``error`` says the endpoint is unwell; 4xx are the request's own fault."""
    return error.kind in HEALTH_KINDS or (error.status is not None and error.status >= 500)


def endpoint_label(url: str) -> str:
    """The URL as stored and shown: without user:password, query or trailing slash."""
    parts = urlsplit(url.strip())
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"  # IPv6 literal
    netloc = host + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


class Endpoint:
    """One base URL: its limiter, its health and its figures for this process."""

    def __init__(self, index: int, spec: EndpointSpec, limiter: Limiter) -> None:
        self.index = index
        self.url = spec.url.strip().rstrip("/")
        self.label = endpoint_label(spec.url)
        self.limiter = limiter
        self.state = HEALTHY
        self.consecutive_failures = 0
        self.level = 0  # cooldown exponent: grows per ejection and failed probe, 0 on success
        self.probe_at = 0.0
        self.probing = False
        self.last_error = ""
        self.requests = 0
        self.errors = 0
        self.ejections = 0

    def has_room(self) -> bool:
        return self.state == HEALTHY and self.limiter.try_acquire()


class Router:
    """Picks an endpoint per attempt: the healthy one with the fewest requests outstanding.

    Ties go round-robin. Each endpoint has its own limiter, so pushback from one throttles only
    that one. With a single endpoint nothing is ever ejected: it behaves as one client did.
    """

    def __init__(
        self,
        specs: Sequence[EndpointSpec],
        *,
        concurrency: int,
        limiter_factory: Callable[[int], Limiter],
        endpoint_concurrency: int | None = None,
        policy: HealthPolicy | None = None,
        probe: Callable[[Endpoint], Awaitable[bool]] | None = None,
        on_event: Callable[[str, str, str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if not specs:
            raise ValueError("a router needs at least one endpoint")
        labels = [endpoint_label(s.url) for s in specs]
        duplicate = next((label for label in labels if labels.count(label) > 1), None)
        if duplicate is not None:
            raise ValueError(f"endpoint {duplicate} is listed twice; list each base URL once")
        self.endpoints = [
            Endpoint(
                i, spec, limiter_factory(spec.concurrency or endpoint_concurrency or concurrency)
            )
            for i, spec in enumerate(specs)
        ]
        self.total_limit = concurrency
        self.in_flight = 0
        self.policy = policy or HealthPolicy()
        self.health_checks = len(self.endpoints) > 1
        self._probe = probe
        self._on_event = on_event
        self._clock = clock
        self._sleep = sleep
        self._next = 0  # round-robin position among ties
        self._waiters: collections.deque[asyncio.Future] = collections.deque()
        self._probes: set[asyncio.Task] = set()
        self._all_down_since: float | None = None

    # -- choosing ----------------------------------------------------------------------------

    def choose(self, avoid: frozenset[str] | set[str] = frozenset()) -> Endpoint | None:
        """Take a slot on the best endpoint now, preferring ones not in ``avoid``; None if full."""
        self._start_due_probes()
        if self.in_flight >= self.total_limit:
            return None
        count = len(self.endpoints)
        # Least outstanding first, then round-robin order from the last pick; untried first.
        order = sorted(
            (e for e in self.endpoints if e.state == HEALTHY),
            key=lambda e: (e.label in avoid, e.limiter.in_flight, (e.index - self._next) % count),
        )
        for endpoint in order:
            if endpoint.has_room():
                self._next = (endpoint.index + 1) % count
                self.in_flight += 1
                return endpoint
        return None

    async def acquire(self, avoid: frozenset[str] | set[str] = frozenset()) -> Endpoint:
        """Wait for a slot; with every endpoint ejected wait for one to come back, up to
        ``policy.all_down_wait``, then raise ``EndpointsDown``."""
        while True:
            endpoint = self.choose(avoid)
            if endpoint is not None:
                return endpoint
            delay = self._next_event_in()
            if all(e.state == REMOVED for e in self.endpoints):
                raise EndpointsDown(self._down_message("every endpoint was removed"))
            if self._all_down_since is not None:
                left = self._all_down_since + self.policy.all_down_wait - self._clock()
                if left <= 0:
                    raise EndpointsDown(
                        self._down_message(
                            f"no endpoint answered a health probe for "
                            f"{self.policy.all_down_wait:g} s"
                        )
                    )
                delay = left if delay is None else min(delay, left)
            await self._wait(delay)

    def release(self, endpoint: Endpoint) -> None:
        endpoint.limiter.release()
        self.in_flight -= 1
        self._wake(1)

    def has_alternative(self, avoid: set[str]) -> bool:
        """Whether a healthy endpoint outside ``avoid`` exists (a retry need not wait)."""
        return any(e.state == HEALTHY and e.label not in avoid for e in self.endpoints)

    # -- outcomes ----------------------------------------------------------------------------

    def succeeded(self, endpoint: Endpoint) -> None:
        endpoint.consecutive_failures = 0
        endpoint.level = 0
        before = int(endpoint.limiter.limit)
        endpoint.limiter.on_success()
        if int(endpoint.limiter.limit) > before:
            self._wake(1)

    def failed(self, endpoint: Endpoint, error: ApiError) -> bool:
        """Record a failed attempt; True if the fleet absorbs an error that would otherwise
        stop the run (this endpoint is set up wrong and is removed; others remain)."""
        endpoint.errors += 1
        endpoint.last_error = str(error)
        if error.pushback:
            endpoint.limiter.on_pushback(error.retry_after)
        if not self.health_checks:
            return False
        if error.kind in MISCONFIGURED_KINDS:
            if endpoint.state != REMOVED:
                endpoint.state = REMOVED
                self._event(endpoint, "removed", str(error))
                self._after_state_change()
            return any(e.state != REMOVED for e in self.endpoints)
        if not counts_against_health(error):
            return False
        endpoint.consecutive_failures += 1
        if endpoint.state == HEALTHY and endpoint.consecutive_failures >= self.policy.eject_after:
            self._eject(
                endpoint, f"{endpoint.consecutive_failures} failures in a row, last {error}"
            )
        return False

    # -- health ------------------------------------------------------------------------------

    def _cooldown(self, endpoint: Endpoint) -> float:
        seconds = min(self.policy.max_cooldown, self.policy.cooldown * 2**endpoint.level)
        endpoint.level += 1
        return seconds

    def _eject(self, endpoint: Endpoint, reason: str) -> None:
        endpoint.state = EJECTED
        endpoint.ejections += 1
        endpoint.probe_at = self._clock() + self._cooldown(endpoint)
        self._event(endpoint, "ejected", reason)
        self._after_state_change()

    def _readmit(self, endpoint: Endpoint) -> None:
        endpoint.state = HEALTHY
        # On probation: a probe proves the server answers, not that it generates, so one more
        # failure ejects it again (with a longer cooldown, since ``level`` is kept until success).
        endpoint.consecutive_failures = self.policy.eject_after - 1
        self._event(endpoint, "readmitted", "answered a health probe")
        self._after_state_change()

    def _after_state_change(self) -> None:
        if any(e.state == HEALTHY for e in self.endpoints):
            self._all_down_since = None
        elif self._all_down_since is None:
            self._all_down_since = self._clock()
        self._wake(len(self._waiters))  # everyone recomputes what to wait for

    def _start_due_probes(self) -> None:
        if not self.health_checks:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # picked outside a loop (a synchronous caller): probes wait for the next pick
        now = self._clock()
        for endpoint in self.endpoints:
            if endpoint.state == EJECTED and not endpoint.probing and endpoint.probe_at <= now:
                endpoint.probing = True
                task = loop.create_task(self._run_probe(endpoint))
                self._probes.add(task)
                task.add_done_callback(self._probes.discard)

    async def _run_probe(self, endpoint: Endpoint) -> None:
        try:
            alive = await self._probe(endpoint) if self._probe is not None else True
        except Exception:  # a probe that cannot even be made counts as no answer
            alive = False
        finally:
            endpoint.probing = False
        if endpoint.state != EJECTED:
            return
        if alive:
            self._readmit(endpoint)
        else:
            endpoint.probe_at = self._clock() + self._cooldown(endpoint)
            self._wake(len(self._waiters))

    def _next_event_in(self) -> float | None:
        """Seconds until something may free a slot without a release: a probe, a pause ending."""
        now = self._clock()
        times = [
            max(0.0, e.probe_at - now)
            for e in self.endpoints
            if e.state == EJECTED and not e.probing
        ]
        times += [
            e.limiter.pause_left()
            for e in self.endpoints
            if e.state == HEALTHY and e.limiter.pause_left() > 0
        ]
        return min(times) if times else None

    def _down_message(self, why: str) -> str:
        detail = "; ".join(
            f"{e.label} {e.state}" + (f" after {e.last_error}" if e.last_error else "")
            for e in self.endpoints
        )
        return f"all {len(self.endpoints)} endpoints are down and {why} ({detail})"

    def _event(self, endpoint: Endpoint, event: str, detail: str) -> None:
        if self._on_event is not None:
            self._on_event(endpoint.label, event, detail)

    # -- waiting -----------------------------------------------------------------------------

    async def _wait(self, delay: float | None) -> None:
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        timer = asyncio.ensure_future(self._sleep(delay)) if delay is not None else None
        try:
            await asyncio.wait(
                [waiter] if timer is None else [waiter, timer],
                return_when=asyncio.FIRST_COMPLETED,
            )
        finally:
            if timer is not None:
                timer.cancel()
            if not waiter.done():  # not woken (a timer or a cancel): still queued
                waiter.cancel()
                self._waiters.remove(waiter)

    def _wake(self, count: int) -> None:
        while count > 0 and self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                count -= 1

    async def close(self) -> None:
        for task in list(self._probes):
            task.cancel()
        await asyncio.gather(*self._probes, return_exceptions=True)

    def figures(self) -> list[dict]:
        """This process's per-endpoint counts (the store keeps the run's)."""
        return [
            {
                "endpoint": e.label,
                "state": e.state,
                "requests": e.requests,
                "errors": e.errors,
                "ejections": e.ejections,
                "in_flight": e.limiter.in_flight,
            }
            for e in self.endpoints
        ]

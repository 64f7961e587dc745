"""Generate: an asyncio client on aiohttp that holds many requests in flight and retries safely.

Retry policy lives here and only here: exponential backoff with full jitter, ``Retry-After``
honoured, and an adaptive limit that halves the requests in flight when the server pushes back
(429, 503, transient 402) and grows back by one per success. It knows HTTP, not tokenizers.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import aiohttp

from draftgen.backends import Backend
from draftgen.backends.base import (
    ApiError,
    StreamAccumulator,
    error_from_status,
    parse_completion,
)
from draftgen.generate.budget import SpendGuard
from draftgen.generate.endpoints import (
    Endpoint,
    EndpointsDown,
    EndpointSpec,
    HealthPolicy,
    Router,
    endpoint_specs,
)
from draftgen.logs import add_secret
from draftgen.records import Completion

_log = logging.getLogger("draftgen.client")
PROBE_TIMEOUT = 10.0  # seconds a health probe (GET /models) may take


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 8
    base_delay: float = 0.5
    max_delay: float = 60.0

    def backoff(self, attempt: int) -> float:
        """Full jitter: uniform in [0, base * 2**(attempt-1)], capped."""
        return random.uniform(0, min(self.max_delay, self.base_delay * 2 ** (attempt - 1)))


@dataclass
class AttemptError:
    kind: str
    message: str
    status: int | None
    at: float
    endpoint: str | None = None  # the base URL the attempt went to

    def as_dict(self) -> dict:
        out = {"kind": self.kind, "message": self.message, "status": self.status, "at": self.at}
        if self.endpoint is not None:
            out["endpoint"] = self.endpoint
        return out


class GenerationFailed(Exception):
    """Every attempt for one request failed, or it failed in a way that will not get better."""

    def __init__(self, reason: str, errors: list[AttemptError]) -> None:
        super().__init__(reason)
        self.reason = reason
        self.errors = errors


class FatalApiError(Exception):
    """The run cannot continue (bad key, out of credits, wrong model): stop, keep what is stored."""


class RunStopped(Exception):
    """No new attempts: the run is shutting down or reached its budget (nothing is recorded)."""


@dataclass
class ClientStats:
    # Every failed attempt by kind, and those of them that were tried again.
    errors: collections.Counter = field(default_factory=collections.Counter)
    retried: collections.Counter = field(default_factory=collections.Counter)
    requests: int = 0
    retries: int = 0


class AdaptiveLimiter:
    """A semaphore whose size shrinks on pushback and recovers on success."""

    def __init__(self, limit: int) -> None:
        self.max = limit
        self.limit = float(limit)
        self.in_flight = 0
        self.paused_until = 0.0
        self._last_cut = 0.0
        self._waiters: collections.deque[asyncio.Future] = collections.deque()

    async def acquire(self) -> None:
        while True:
            delay = self.paused_until - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
                continue
            if self.in_flight < int(self.limit):
                self.in_flight += 1
                return
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            await waiter

    def release(self) -> None:
        self.in_flight -= 1
        self._wake()

    def try_acquire(self) -> bool:
        """Take a slot now if one is free and no pause is on (the router does the waiting)."""
        if self.pause_left() > 0 or self.in_flight >= int(self.limit):
            return False
        self.in_flight += 1
        return True

    def pause_left(self) -> float:
        return max(0.0, self.paused_until - time.monotonic())

    def on_success(self) -> None:
        if self.limit < self.max:
            self.limit = min(self.max, self.limit + 1)
            self._wake()

    def on_pushback(self, retry_after: float | None) -> None:
        now = time.monotonic()
        # Many requests in flight see the same storm; cut once per second, not once per reply.
        if now - self._last_cut > 1.0:
            self.limit = max(1.0, self.limit / 2)
            self._last_cut = now
        if retry_after:
            self.paused_until = max(self.paused_until, now + retry_after)

    def _wake(self) -> None:
        free = int(self.limit) - self.in_flight
        while free > 0 and self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                free -= 1


class ChatClient:
    """POSTs chat completion bodies to one OpenAI-compatible endpoint, or routes them over
    several (``draftgen.generate.endpoints``): least outstanding first, unhealthy ones ejected."""

    def __init__(
        self,
        base_url: str | Sequence[str | EndpointSpec],
        api_key: str | None,
        *,
        concurrency: int,
        retry: RetryPolicy | None = None,
        idle_timeout: float = 300.0,
        max_retries: int | None = None,
        budget: SpendGuard | None = None,
        backend: Backend | None = None,
        endpoint_concurrency: int | None = None,
        health: HealthPolicy | None = None,
        on_endpoint_event: Callable[[str, str, str], None] | None = None,
    ) -> None:
        """``max_retries`` bounds retries across the whole run; ``budget`` refuses attempts
        that could pass a spending limit. With several endpoints, ``concurrency`` is the run's
        total and ``endpoint_concurrency`` (or a spec's own) caps each; ``on_endpoint_event``
        hears (endpoint, "ejected" | "readmitted" | "removed", why)."""
        self.backend = backend
        self._path = backend.path if backend is not None else "/chat/completions"
        self.router = Router(
            endpoint_specs(base_url),
            concurrency=concurrency,
            endpoint_concurrency=endpoint_concurrency,
            limiter_factory=AdaptiveLimiter,
            policy=health,
            probe=self._probe,
            on_event=on_endpoint_event,
        )
        self._api_key = api_key
        self.retry = retry or RetryPolicy()
        self.stats = ClientStats()
        self.stop_reason: str | None = None
        self._max_retries = max_retries
        self._budget = budget
        self._idle_timeout = idle_timeout
        self._session: aiohttp.ClientSession | None = None

    @property
    def limiter(self) -> AdaptiveLimiter | Router:
        """What bounds the requests in flight (``in_flight``): the one endpoint's limiter, or
        the router over several."""
        if len(self.router.endpoints) == 1:
            return self.router.endpoints[0].limiter
        return self.router

    def stop(self, reason: str) -> None:
        """Send nothing new; attempts already on the wire finish."""
        self.stop_reason = self.stop_reason or reason

    async def __aenter__(self) -> ChatClient:
        headers = {"Content-Type": "application/json", "User-Agent": "draftgen/0.1"}
        add_secret(self._api_key)  # the key rides in every request: keep it out of the logs
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        self._session = aiohttp.ClientSession(
            headers=headers,
            connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=300),
            timeout=aiohttp.ClientTimeout(
                total=None, sock_connect=30, sock_read=self._idle_timeout
            ),
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.router.close()
        if self._session is not None:
            await self._session.close()

    async def complete(self, body: bytes, stream: bool) -> tuple[Completion, list[AttemptError]]:
        """One completion for ``body``, retried as policy allows; errors of failed attempts too."""
        errors: list[AttemptError] = []
        tried: set[str] = set()  # a retry prefers an endpoint this request has not failed on
        for attempt in range(1, self.retry.max_attempts + 1):
            if self.stop_reason:
                raise RunStopped(self.stop_reason)
            try:
                endpoint = await self.router.acquire(tried)
            except EndpointsDown as exc:
                raise FatalApiError(self._redact(str(exc))) from None
            started = time.monotonic()
            try:
                if self.stop_reason:
                    raise RunStopped(self.stop_reason)
                if self._budget is None:
                    completion = await self._attempt(endpoint, body, stream)
                else:
                    async with self._budget.admit(self.router.in_flight):
                        completion = await self._attempt(endpoint, body, stream)
                        self._budget.record(completion.cost)
            except ApiError as exc:
                error = exc
            else:
                self.router.succeeded(endpoint)
                completion.endpoint = endpoint.label
                completion.endpoint_latency = time.monotonic() - started
                if _log.isEnabledFor(logging.DEBUG):  # every request passes here: build no extra
                    _log.debug(
                        "attempt %d on %s: completion in %.3f s",
                        attempt,
                        endpoint.label,
                        completion.endpoint_latency,
                        extra={"endpoint": endpoint.label, "attempt": attempt},
                    )
                return completion, errors
            finally:
                self.router.release(endpoint)
            self.stats.errors[error.kind] += 1
            errors.append(
                AttemptError(
                    error.kind,
                    self._redact(error.message),
                    error.status,
                    time.time(),
                    endpoint.label,
                )
            )
            tried.add(endpoint.label)
            _log.debug(
                "attempt %d on %s failed: %s",
                attempt,
                endpoint.label,
                errors[-1].message,
                extra={"endpoint": endpoint.label, "attempt": attempt, "kind": error.kind},
            )
            # Pushback and health are per endpoint; a fleet absorbs one misconfigured member.
            absorbed = self.router.failed(endpoint, error)
            if error.fatal and not absorbed:
                raise FatalApiError(self._redact(str(error)))
            if not error.retryable and not absorbed:
                raise GenerationFailed(error.kind, errors)
            if attempt < self.retry.max_attempts:
                self.stats.retries += 1
                self.stats.retried[error.kind] += 1
                if self._max_retries is not None and self.stats.retries > self._max_retries:
                    raise FatalApiError(
                        f"the run used up its retry budget ({self._max_retries} retries, last: "
                        f"{error.kind}); the server keeps failing, so try again later"
                    )
                wait = error.retry_after
                if wait is not None and self.router.has_alternative(tried):
                    wait = None  # Retry-After speaks for the endpoint that sent it, not the rest
                await asyncio.sleep(wait if wait is not None else self.retry.backoff(attempt))
        raise GenerationFailed(f"gave_up_after_{self.retry.max_attempts}_attempts", errors)

    async def _attempt(self, endpoint: Endpoint, body: bytes, stream: bool) -> Completion:
        assert self._session is not None, "use ChatClient as an async context manager"
        self.stats.requests += 1
        endpoint.requests += 1
        try:
            async with self._session.post(endpoint.url + self._path, data=body) as response:
                if response.status != 200:
                    payload = await response.read()
                    raise error_from_status(
                        response.status, response.headers.get("Retry-After"), payload
                    )
                backend = self.backend
                if not stream:
                    parse = backend.parse_completion if backend else parse_completion
                    return parse(await response.read())
                accumulator = backend.stream_accumulator() if backend else StreamAccumulator()
                async for data in response.content.iter_any():
                    accumulator.feed_bytes(data)
                    if accumulator.done:
                        break
                return accumulator.finish()
        except ApiError:
            raise
        except (TimeoutError, aiohttp.ServerTimeoutError):
            raise ApiError("timeout", "no data from the server within the idle timeout") from None
        except aiohttp.ClientConnectorError as exc:
            raise ApiError("connect_failed", f"cannot connect ({exc.os_error})") from None
        except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError) as exc:
            raise ApiError("connection_dropped", f"connection dropped mid-body ({exc})") from None
        except aiohttp.ClientError as exc:
            raise ApiError("connection_dropped", f"{exc.__class__.__name__}: {exc}") from None

    async def _probe(self, endpoint: Endpoint) -> bool:
        """Whether an ejected endpoint answers at all: any reply below 500 to ``GET /models``
        (a 404 from a server without that route still proves it is up)."""
        if self._session is None:
            return False
        try:
            async with self._session.get(
                endpoint.url + "/models", timeout=aiohttp.ClientTimeout(total=PROBE_TIMEOUT)
            ) as response:
                await response.read()
                return response.status < 500
        except (aiohttp.ClientError, TimeoutError):
            return False

    def _redact(self, text: str) -> str:
        if self._api_key and self._api_key in text:
            return text.replace(self._api_key, "***")
        return text

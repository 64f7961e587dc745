"""Generate: an asyncio client on aiohttp that holds many requests in flight and retries safely.

Retry policy lives here and only here: exponential backoff with full jitter, ``Retry-After``
honoured, and an adaptive limit that halves the requests in flight when the server pushes back
(429, 503, transient 402) and grows back by one per success. Every answer is bounded, whatever
the server sends: a byte cap, an idle clock that only data events move, a deadline per attempt,
and no redirects. It knows HTTP, not tokenizers.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from urllib.parse import urljoin

import aiohttp
import orjson

from draftgen.backends import Accumulator, Backend
from draftgen.backends.base import (
    ApiError,
    Billed,
    StreamAccumulator,
    error_from_status,
    parse_completion,
)
from draftgen.generate.budget import SpendGuard
from draftgen.generate.endpoints import (
    HEALTH_KINDS,
    Endpoint,
    EndpointsDown,
    EndpointSpec,
    HealthPolicy,
    Router,
    endpoint_label,
    endpoint_specs,
)
from draftgen.generate.memory import ResponseMemory
from draftgen.logs import add_secret
from draftgen.records import Completion
from draftgen.redact import printable

_log = logging.getLogger("draftgen.client")
PROBE_TIMEOUT = 10.0  # seconds a health probe (GET /models) may take

# The byte cap of one response (body or stream). A streamed token costs far more than its text:
# OpenRouter frames each in a ~330-byte chunk (id, model, provider, choices), logprobs or server
# ids add ~100-200 more, so 1 KiB per token leaves room; the fixed part covers what does not grow
# with tokens (an encrypted reasoning_details item of several MB, the usage event). Without
# --max-tokens the provider's limit applies, unknown here: 64 MiB is ~200k streamed tokens.
RESPONSE_BYTES_BASE = 16 * 2**20
RESPONSE_BYTES_PER_TOKEN = 2**10
RESPONSE_BYTES_WITHOUT_MAX_TOKENS = 64 * 2**20
# An error answer is read only this far: its message and type sit at the start.
ERROR_BODY_BYTES = 64 * 2**10
# After a whole answer (a stream's usage chunk, a body's last brace) what follows (``[DONE]``,
# the body's end) is awaited this long and no further: read, the connection serves the next
# request; held open by the server, it is closed and the answer kept all the same.
TAIL_GRACE = 0.1
DEFAULT_ATTEMPT_TIMEOUT = 3600.0  # seconds; RunOptions.attempt_timeout says why
# A dead endpoint stops the run at once (``DeadEndpoint``): the run's first 8 attempts (the default
# --max-attempts of one request; at --concurrency 8 or more, its first wave) all answered with a
# server error (HTTP 5xx) and none succeeded; or 10 s after the first attempt with none
# succeeded, every attempt that ended a server error and none other on the wire; or, mid-run,
# 8 attempts in a row failed so and 10 s passed since the last answer.
DEAD_START_ATTEMPTS = 8
DEAD_START_SECONDS = 10.0
# Answers refused for their usage (a false cost, a count out of range) one request may buy: the
# first is bought again (a glitch of one answer still yields the turn), the second fails the
# request as ``REFUSED_USAGE``: a server that bills every answer so pays for two a turn, not
# --max-attempts. Each is kept (``keep_refused``) and counted as spent.
REFUSED_ANSWERS = 2
REFUSED_USAGE = "refused_usage"
# What hears an answer refused for its usage: (what it is billed on, the request's bytes).
KeepRefused = Callable[[Billed, int], Awaitable[None]]
# The text one answer may hold (content, reasoning and tool calls, UTF-8): four times the longest
# answer a listing allows (262,144 tokens of ~4 bytes). Reconstruction encodes a text with no
# safe cut (``tokens.long_text``) whole, its time and memory growing with it: 8 answers of 30 MB
# held a run for minutes at 3.5 GB. A longer answer is refused as it passes the cap (a stream is
# no longer read, so no longer paid for), kept apart as billed, and bought once more.
ANSWER_BYTES = 4 * 2**20
ANSWER_TOO_LONG = "answer_too_long"
# A stream's folded answer is measured exactly (an O(n) count) only as it nears the cap, and then
# at most once per this many more characters: the cap is passed by at most 4 times as many bytes.
ANSWER_CHECK_STEP = 16 * 2**10


def default_response_bytes(max_tokens: int | None) -> int:
    """The byte cap of one response when --max-response-bytes is not given."""
    if max_tokens is None:
        return RESPONSE_BYTES_WITHOUT_MAX_TOKENS
    return RESPONSE_BYTES_BASE + max_tokens * RESPONSE_BYTES_PER_TOKEN


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


class DeadEndpoint:
    """Whether the run's endpoint is dead: a verdict (a sentence naming what the server answered
    and said) that stops the run, kept stored, for the same command to resume.

    From the start: once the first ``attempts`` attempts sent all ended in a server error (HTTP
    5xx), or ``seconds`` after the first was sent with every attempt that ended a server error
    (two at least) and none other on the wire (one request at a time spends that time in its
    backoff). Attempts are numbered as they are sent, so fast errors beside slow answers still on
    the wire make no verdict.

    Later (an outage mid-run): once the server has answered, ``attempts`` attempts in a row
    ended in a server error or a failed connection, and ``seconds`` have passed since its last
    answer. Any other ending (an answer, a 4xx, pushback) shows the server alive and starts the
    count again."""

    def __init__(
        self, attempts: int = DEAD_START_ATTEMPTS, seconds: float = DEAD_START_SECONDS
    ) -> None:
        self.attempts = attempts
        self.seconds = seconds
        self.verdict: str | None = None
        self.dead = asyncio.Event()  # set with the verdict: a retry's backoff ends at once
        self.sent = 0
        self.in_flight = 0
        self._started_at: float | None = None
        # Of the first ``attempts`` sent, those that ended in a server error; None once one of
        # them ended otherwise.
        self._first_failed: int | None = 0
        self._all_failed = True  # every attempt that ended so far was a server error
        self._answered_at: float | None = None  # the last answer, once there was one
        self._said: collections.Counter[tuple[str, str]] = collections.Counter()
        self._where: dict[str, None] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._closed = False

    def sending(self) -> int:
        """An attempt goes on the wire: its number (1 for the run's first)."""
        self.sent += 1
        self.in_flight += 1
        if self._started_at is None:
            self._started_at = time.monotonic()
            if self.seconds > 0:
                self._timer = asyncio.get_running_loop().call_later(self.seconds, self._judge)
        return self.sent

    def ended(self, number: int, error: ApiError | None, endpoint: str) -> None:
        """Attempt ``number`` ended: answered (``error`` None) or failed with ``error``."""
        self.in_flight -= 1
        if self.verdict is not None or self._closed:
            return
        if error is None:
            self._answered_at = time.monotonic()
            self._said.clear()
            self._where.clear()
            self._stop_start_rule()
            return
        answered = self._answered_at is not None
        if not _server_down(error, later=answered):
            self._all_failed = False
            if number <= self.attempts:
                self._first_failed = None
            self._said.clear()  # the server is alive: an outage's count starts again
            self._where.clear()
            return
        said = f"HTTP {error.status}" if error.status is not None else error.kind
        self._said[said, error.message] += 1
        self._where[endpoint] = None
        if number <= self.attempts and self._first_failed is not None:
            self._first_failed += 1
        self._judge()

    def abandoned(self) -> None:
        """An attempt left the wire without an outcome (cancelled: the run is stopping)."""
        self.in_flight -= 1

    def settle(self) -> None:
        """No verdict will come: the client closes."""
        self._closed = True
        self._stop_start_rule()

    def _stop_start_rule(self) -> None:
        self._first_failed = None
        self._all_failed = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _judge(self) -> None:
        if self.verdict is not None or self._closed:
            return
        failed = sum(self._said.values())
        if self._answered_at is not None:
            quiet = time.monotonic() - self._answered_at
            if failed >= self.attempts and quiet >= self.seconds:
                self._declare(
                    f"each of the last {failed} attempts, over the {quiet:.0f} s since its "
                    "last answer,"
                )
            return
        if self._first_failed is not None and self._first_failed >= self.attempts:
            self._declare(f"each of the run's first {self.attempts} attempts")
            return
        started = self._started_at
        late = started is not None and time.monotonic() - started >= self.seconds
        if self._all_failed and late and failed >= 2 and self.in_flight == 0:
            self._declare(f"all {failed} attempts of the run's first {self.seconds:g} s")

    def _declare(self, which: str) -> None:
        kinds: collections.Counter[str] = collections.Counter()
        for (said, _), count in self._said.items():
            kinds[said] += count
        if len(kinds) == 1:
            answered = next(iter(kinds))
        else:
            answered = (
                "server errors ("
                + ", ".join(f"{said} {count} times" for said, count in kinds.most_common())
                + ")"
            )
        (_, words), _ = self._said.most_common(1)[0]
        self.verdict = (
            f"{', '.join(self._where)} answered {which} with {answered} and none succeeded, "
            f'saying "{printable(words) if words.strip() else "nothing"}"; check that the '
            "server is up and serves this model"
        )
        self.settle()
        self.dead.set()


def _server_down(error: ApiError, later: bool) -> bool:
    """Whether ``error`` says the server is down: a server error (HTTP 5xx); once it has
    answered, a connection refused, dropped or timed out too (at the start those are the
    probe's to judge, before the first request)."""
    if error.status is not None and error.status >= 500:
        return True
    return later and error.status is None and error.kind in HEALTH_KINDS


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
        attempt_timeout: float | None = DEFAULT_ATTEMPT_TIMEOUT,
        max_response_bytes: int = RESPONSE_BYTES_WITHOUT_MAX_TOKENS,
        max_answer_bytes: int | None = ANSWER_BYTES,
        max_retries: int | None = None,
        budget: SpendGuard | None = None,
        backend: Backend | None = None,
        endpoint_concurrency: int | None = None,
        health: HealthPolicy | None = None,
        on_endpoint_event: Callable[[str, str, str], None] | None = None,
        dead_endpoint: DeadEndpoint | None = None,
        memory: ResponseMemory | None = None,
    ) -> None:
        """``idle_timeout`` bounds the silence between data events (0: none), ``attempt_timeout``
        one attempt in all (0 or None: none), ``max_response_bytes`` its response,
        ``max_answer_bytes`` the text of its answer (None: no cap; ``ANSWER_BYTES``).
        ``max_retries`` bounds retries across the whole run; ``budget`` reserves each
        attempt's worst case, holding or refusing attempts that could pass a spending limit.
        With several endpoints, ``concurrency`` is the run's total and ``endpoint_concurrency``
        (or a spec's own) caps each; ``on_endpoint_event``
        hears (endpoint, "ejected" | "readmitted" | "removed", why). ``dead_endpoint`` stops
        the run when its attempts show a dead endpoint, at the start or later (``DeadEndpoint``);
        ``memory`` is the byte budget the answers being read share (``ResponseMemory``)."""
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
        self.dead_endpoint = dead_endpoint or DeadEndpoint()
        self._drains: set[asyncio.Task] = set()  # whole answers' tails being read
        self.memory = memory or ResponseMemory()
        self._idle_timeout = idle_timeout
        self._attempt_timeout = attempt_timeout or None
        self._max_response_bytes = max_response_bytes
        self._max_answer_bytes = max_answer_bytes
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

    def _drain_later(self, response: aiohttp.ClientResponse) -> None:
        task = asyncio.get_running_loop().create_task(_drain(response))
        self._drains.add(task)
        task.add_done_callback(self._drains.discard)

    async def __aexit__(self, *exc: object) -> None:
        for task in list(self._drains):
            task.cancel()
        await asyncio.gather(*self._drains, return_exceptions=True)
        self.dead_endpoint.settle()
        await self.router.close()
        if self._session is not None:
            await self._session.close()

    async def complete(
        self,
        body: bytes,
        stream: bool,
        keep_refused: KeepRefused | None = None,
        max_attempts: int | None = None,
    ) -> tuple[Completion, list[AttemptError]]:
        """One completion for ``body``, retried as policy allows; errors of failed attempts too.

        An answer refused for its usage was billed all the same: ``keep_refused`` hears it (what
        it is billed on, the request's bytes) and stores it before anything else happens; it is
        bought again once (``REFUSED_ANSWERS``), and a second refusal fails the request as
        ``refused_usage``. ``max_attempts`` lowers the run's attempts for this request (a
        calibration question: each retry of an answered one is another paid answer)."""
        attempts = min(self.retry.max_attempts, max_attempts or self.retry.max_attempts)
        errors: list[AttemptError] = []
        tried: set[str] = set()  # a retry prefers an endpoint this request has not failed on
        refused = 0
        for attempt in range(1, attempts + 1):
            if self.stop_reason:
                raise RunStopped(self.stop_reason)
            if self.dead_endpoint.verdict is not None:
                raise FatalApiError(self._redact(self.dead_endpoint.verdict))
            await self.memory.room()  # nothing new is sent while the answers hold the budget
            try:
                endpoint = await self.router.acquire(tried)
            except EndpointsDown as exc:
                raise FatalApiError(self._redact(str(exc))) from None
            started = time.monotonic()
            try:
                completion = await self._within_budget(endpoint, body, stream)
            except ApiError as exc:
                # Without its traceback: its frames hold what was read (up to the byte cap), and
                # the frame that keeps it would make a cycle only the collector frees.
                error = exc.with_traceback(None)
                if exc.billed is not None and keep_refused is not None:
                    refused += 1
                    await keep_refused(exc.billed, len(body))
            else:
                self._succeeded(endpoint, completion, started, attempt)
                return completion, errors
            finally:
                self.router.release(endpoint)
            tried.add(endpoint.label)
            self._note_failure(
                endpoint, error, errors, attempt, refused >= REFUSED_ANSWERS, attempts
            )
            if attempt < attempts:
                wait = error.retry_after
                if wait is not None and self.router.has_alternative(tried):
                    wait = None  # Retry-After speaks for the endpoint that sent it, not the rest
                await self._pause(wait if wait is not None else self.retry.backoff(attempt))
        raise GenerationFailed(f"gave_up_after_{attempts}_attempts", errors)

    async def _within_budget(self, endpoint: Endpoint, body: bytes, stream: bool) -> Completion:
        """One attempt, its worst case reserved under ``--max-cost`` while it is in flight."""
        if self.stop_reason:
            raise RunStopped(self.stop_reason)
        if self._budget is None:
            return await self._attempt(endpoint, body, stream)
        # An attempt that waited for room may find the run stopped meanwhile.
        async with self._budget.admit(len(body)):
            if self.stop_reason:
                raise RunStopped(self.stop_reason)
            completion = await self._attempt(endpoint, body, stream)
            self._budget.record(completion.cost)
            return completion

    def _succeeded(
        self, endpoint: Endpoint, completion: Completion, started: float, attempt: int
    ) -> None:
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

    def _note_failure(
        self,
        endpoint: Endpoint,
        error: ApiError,
        errors: list[AttemptError],
        attempt: int,
        refused_out: bool,
        attempts: int,
    ) -> None:
        """Record failed attempt ``attempt`` of ``attempts``; raise what ends the request
        (``refused_out``: its answers refused for their usage are all it may buy) or the run, and
        count a retry when one follows."""
        self.stats.errors[error.kind] += 1
        errors.append(
            AttemptError(
                error.kind, self._redact(error.message), error.status, time.time(), endpoint.label
            )
        )
        _log.debug(
            "attempt %d on %s failed: %s",
            attempt,
            endpoint.label,
            errors[-1].message,
            extra={"endpoint": endpoint.label, "attempt": attempt, "kind": error.kind},
        )
        # Pushback and health are per endpoint; a fleet absorbs one misconfigured member.
        absorbed = self.router.failed(endpoint, error)
        if self.dead_endpoint.verdict is not None:
            raise FatalApiError(self._redact(self.dead_endpoint.verdict))
        if error.fatal and not absorbed:
            raise FatalApiError(self._redact(str(error)))
        if refused_out:
            kind = ANSWER_TOO_LONG if error.kind == ANSWER_TOO_LONG else REFUSED_USAGE
            raise GenerationFailed(kind, errors)
        if not error.retryable and not absorbed:
            raise GenerationFailed(error.kind, errors)
        if attempt < attempts:
            self.stats.retries += 1
            self.stats.retried[error.kind] += 1
            if self._max_retries is not None and self.stats.retries > self._max_retries:
                raise FatalApiError(
                    f"the run used up its retry budget ({self._max_retries} retries, last: "
                    f"{error.kind}); the server keeps failing, so try again later"
                )

    async def _pause(self, seconds: float) -> None:
        """The wait before a retry, cut short by a dead endpoint's verdict."""
        if self.dead_endpoint.verdict is None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.dead_endpoint.dead.wait(), seconds)

    async def _attempt(self, endpoint: Endpoint, body: bytes, stream: bool) -> Completion:
        assert self._session is not None, "use ChatClient as an async context manager"
        self.stats.requests += 1
        endpoint.requests += 1
        number = self.dead_endpoint.sending()
        try:
            completion = await self._attempt_once(endpoint, body, stream)
        except ApiError as error:
            self.dead_endpoint.ended(number, error, endpoint.label)
            raise
        except BaseException:
            self.dead_endpoint.abandoned()
            raise
        self.dead_endpoint.ended(number, None, endpoint.label)
        return completion

    async def _attempt_once(self, endpoint: Endpoint, body: bytes, stream: bool) -> Completion:
        deadline = asyncio.timeout(self._attempt_timeout)
        try:
            async with deadline:
                return await self._exchange(endpoint.url + self._path, body, stream)
        except ApiError:
            raise
        except TimeoutError:  # aiohttp's ServerTimeoutError (sock_read) is one too
            if deadline.expired():
                raise ApiError(
                    "timeout",
                    f"the attempt passed its {self._attempt_timeout:g} s deadline "
                    "(--attempt-timeout) before the response ended",
                ) from None
            raise ApiError("timeout", "no data from the server within the idle timeout") from None
        except aiohttp.ClientConnectorError as exc:
            raise ApiError("connect_failed", f"cannot connect ({exc.os_error})") from None
        except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError) as exc:
            raise ApiError("connection_dropped", f"connection dropped mid-body ({exc})") from None
        except aiohttp.ClientError as exc:
            raise ApiError("connection_dropped", f"{exc.__class__.__name__}: {exc}") from None

    async def _exchange(self, url: str, body: bytes, stream: bool) -> Completion:
        """One POST and its answer, read no further than the byte cap."""
        assert self._session is not None
        # A redirect would carry the prompt (and, followed by hand, the key) to a host the run
        # never checked: 301/302 even turn the POST into a GET and answer for another endpoint.
        response = await self._session.post(url, data=body, allow_redirects=False)
        answered = False
        try:
            completion = await self._answer(response, stream)
            answered = True
            return completion
        finally:
            if answered and not response.content.at_eof():
                # A whole answer goes to be stored now; what follows it ("[DONE]", the body's
                # end) is read meanwhile, so the connection serves the next request.
                self._drain_later(response)
            else:
                response.release()

    async def _answer(self, response: aiohttp.ClientResponse, stream: bool) -> Completion:
        """The completion a 200 response carries, or the ``ApiError`` another one says."""
        if 300 <= response.status < 400:
            raise _redirect_error(response)
        if response.status != 200:
            payload = await _read_at_most(response, ERROR_BODY_BYTES)
            raise error_from_status(response.status, response.headers.get("Retry-After"), payload)
        backend = self.backend
        if not stream:
            parse = backend.parse_completion if backend else parse_completion
            raw = await self._read_body(response)
            try:
                completion = parse(raw)
            except ApiError as error:
                if error.billed is not None and not error.billed.answer:
                    error.billed = replace(error.billed, answer=raw)  # a backend's own parse
                raise
            cap = self._max_answer_bytes
            if cap is not None and len(raw) > cap and (size := answer_size(completion)) > cap:
                named = (completion.generation_id, completion.provider)
                raise _too_long(size, cap, completion.usage, raw, named, whole=True)
            return completion
        accumulator = backend.stream_accumulator() if backend else StreamAccumulator()
        return await self._read_stream(response, accumulator)

    async def _read_body(self, response: aiohttp.ClientResponse) -> bytes:
        """A non-streamed body, refused as soon as it passes the cap (or says it will); taken
        as soon as it holds a whole JSON object, whether or not the server ends it (a body
        without Content-Length that is never closed is paid for all the same)."""
        cap = self._max_response_bytes
        if response.content_length is not None and response.content_length > cap:
            raise _too_large(cap)
        pieces: list[bytes] = []
        received = 0
        braces = 0  # "{" less "}" so far: 0 (and a "}" last) is when the object may be whole
        closed = False
        clock = BodyClock(self._idle_timeout)
        with self.memory.reading() as reading:
            async for piece in response.content.iter_any():
                received += len(piece)
                if received > cap:
                    raise _too_large(cap)
                clock.observe(piece)
                pieces.append(piece)
                self.memory.charge(reading, len(piece))
                braces += piece.count(b"{") - piece.count(b"}")
                last = piece.rstrip()
                closed = last.endswith(b"}") if last else closed
                if braces == 0 and closed and not response.content.at_eof():
                    body = b"".join(pieces)
                    if _whole_json_object(body):
                        return body
                    del body
                await self.memory.wait_to_read(reading)
            return b"".join(pieces)

    async def _read_stream(
        self, response: aiohttp.ClientResponse, accumulator: Accumulator
    ) -> Completion:
        """Fold an event stream, counting its bytes against the cap and its data events against
        the idle timeout; the answer is taken once it is whole (``[DONE]``, or its finish reason
        and usage: a server that then holds the connection open has sent all it will)."""
        cap = self._max_response_bytes
        clock = EventClock(self._idle_timeout)
        received = 0
        # What the folded answer holds, far less than its events' bytes; an accumulator of
        # another shape is charged what it read.
        held = getattr(accumulator, "held_bytes", None)
        chars = getattr(accumulator, "text_chars", None)
        answer_cap = self._max_answer_bytes if chars else None
        # The exact byte count (up to 4 a character) is taken once the characters could pass
        # the cap, and again only after as many more as could pass what is left of it.
        check_from = answer_cap // 4 if answer_cap is not None else None
        with self.memory.reading() as reading:
            async for data in response.content.iter_any():
                received += len(data)
                if received > cap:
                    raise _too_large(cap)
                clock.observe(data)
                accumulator.feed_bytes(data)
                holding = held() if held else received
                self.memory.hold(reading, holding)
                if check_from is not None and (text := chars()) > check_from:
                    size = accumulator.answer_bytes()
                    if size > answer_cap:
                        named = (
                            getattr(accumulator, "generation_id", None),
                            getattr(accumulator, "provider", None),
                        )
                        raise _too_long(size, answer_cap, None, folded_answer(accumulator), named)
                    check_from = text + max((answer_cap - size) // 4, ANSWER_CHECK_STEP)
                if accumulator.done:
                    break
                # Every accumulator is a StreamAccumulator's; one of another shape never says so.
                if getattr(accumulator, "complete", False):
                    break
                if await self.memory.wait_to_read(reading):
                    clock.restart()  # a pause for memory is not the server's silence
            return accumulator.finish()

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


class EventClock:
    """The idle clock of one stream, moved only by data events: SSE comments (OpenRouter sends
    ``: OPENROUTER PROCESSING`` every second), blank lines and empty ``data:`` lines keep the
    socket busy, so aiohttp's read timeout never fires, yet they are not progress."""

    def __init__(self, idle_timeout: float | None) -> None:
        self.idle_timeout = idle_timeout or None  # 0: no idle timeout, as aiohttp's sock_read
        self.last_event = time.monotonic()
        self._at_line_start = True
        self._in_event = False  # the last chunk ended inside a data line with a value

    def restart(self) -> None:
        """Start the idle clock again (the reading paused: the server was not idle)."""
        self.last_event = time.monotonic()

    def observe(self, chunk: bytes) -> None:
        """Note what ``chunk`` carries; raise a timeout once only keep-alives came for too long."""
        if self._carries_event(chunk):
            self.last_event = time.monotonic()
        elif self.idle_timeout is not None and (
            time.monotonic() - self.last_event > self.idle_timeout
        ):
            raise ApiError(
                "timeout",
                f"no data event within the idle timeout ({self.idle_timeout:g} s), only "
                "keep-alives",
            )

    def _carries_event(self, chunk: bytes) -> bool:
        if self._at_line_start and chunk.startswith(b"data: {") and chunk.endswith(b"\n"):
            return True  # whole events, as most reads are: the line state stays as it is
        # A data line split across reads counts in each of them: a multi-megabyte event is
        # progress all the way. A line that trickles in forever is the attempt deadline's.
        found = self._in_event or (self._at_line_start and _data_with_value(chunk))
        if not found:
            at = chunk.find(b"\ndata:")
            while at >= 0 and not found:
                found = _data_with_value(chunk[at + 1 : at + 70])
                at = chunk.find(b"\ndata:", at + 1)
        last = chunk.rfind(b"\n")
        if last >= 0:
            tail = chunk[last + 1 :]
            self._at_line_start = not tail
            self._in_event = _data_with_value(tail)
        elif self._at_line_start:
            self._at_line_start = False
            self._in_event = _data_with_value(chunk)
        return found


class BodyClock:
    """The idle clock of a whole (not streamed) body: whitespace and ``:`` comment lines, which a
    server may send while it generates, keep the socket busy but are not the answer, so they do
    not count as progress forever (a calibration question once hung 240 s on them)."""

    def __init__(self, idle_timeout: float | None) -> None:
        self.idle_timeout = idle_timeout or None
        self.last_progress = time.monotonic()
        self._at_line_start = True
        self._in_comment = False

    def observe(self, piece: bytes) -> None:
        if self._carries_answer(piece):
            self.last_progress = time.monotonic()
        elif self.idle_timeout is not None and (
            time.monotonic() - self.last_progress > self.idle_timeout
        ):
            raise ApiError(
                "timeout",
                f"no part of the answer within the idle timeout ({self.idle_timeout:g} s), only "
                "keep-alives",
            )

    def _carries_answer(self, piece: bytes) -> bool:
        found = False
        lines = piece.split(b"\n")
        for index, text in enumerate(lines):
            if self._at_line_start and text.lstrip().startswith(b":"):
                self._in_comment = True
            if not self._in_comment and text.strip():
                found = True
            if index < len(lines) - 1:  # the line ended: the next one starts afresh
                self._at_line_start, self._in_comment = True, False
            elif text:
                self._at_line_start = False
        return found


def _data_with_value(line: bytes) -> bool:
    """Whether ``line`` starts a ``data:`` field with something in it."""
    if not line.startswith(b"data:"):
        return False
    value = line[5:69].lstrip(b" \t")
    return bool(value) and value[:1] not in (b"\r", b"\n")


def _whole_json_object(body: bytes) -> bool:
    try:
        return isinstance(orjson.loads(body), dict)
    except orjson.JSONDecodeError:
        return False


def answer_size(completion: Completion) -> int:
    """The bytes of an answer's texts and tool calls (UTF-8), as ``--max-answer-bytes`` counts."""
    texts = (completion.content or "", completion.reasoning or "")
    size = sum(len(text.encode("utf-8", "surrogatepass")) for text in texts)
    return size + (len(orjson.dumps(completion.tool_calls)) if completion.tool_calls else 0)


def folded_answer(accumulator: Accumulator) -> bytes:
    """What a stream cut short had folded (JSON): its texts and the ids that name it."""
    message = {
        "content": "".join(getattr(accumulator, "content", [])),
        "reasoning": "".join(getattr(accumulator, "reasoning", [])),
    }
    answer = {"id": getattr(accumulator, "generation_id", None), "message": message}
    answer["provider"] = getattr(accumulator, "provider", None)
    return json.dumps(answer).encode()  # ASCII: a lone surrogate a server sent is kept too


async def _drain(response: aiohttp.ClientResponse) -> None:
    """What follows a whole answer, read after the answer went to be stored, for
    ``TAIL_GRACE`` seconds and ``ERROR_BODY_BYTES`` at most: a server that ends the body lets the
    connection serve another request; one that holds it open (or sends more) has it closed as
    the response is released."""
    size = 0
    try:
        async with asyncio.timeout(TAIL_GRACE):
            while not response.content.at_eof() and size < ERROR_BODY_BYTES:
                size += len(await response.content.readany())
    except (TimeoutError, aiohttp.ClientError):
        pass
    finally:
        response.release()


async def _read_at_most(response: aiohttp.ClientResponse, limit: int) -> bytes:
    """The body's first ``limit`` bytes; reading stops there, whatever the server sends."""
    pieces: list[bytes] = []
    size = 0
    async for piece in response.content.iter_any():
        pieces.append(piece)
        size += len(piece)
        if size >= limit:
            break
    return b"".join(pieces)[:limit]


def _redirect_error(response: aiohttp.ClientResponse) -> ApiError:
    """A 3xx answer: the run stops, since every request to this URL would be redirected too."""
    location = response.headers.get("Location")
    # Shown without user:password or query: either may hold a credential.
    target = endpoint_label(urljoin(str(response.url), location))[:200] if location else "nowhere"
    return ApiError(
        "redirected",
        f"the endpoint answered {response.status} with a redirect to {target}; draftgen does not "
        "follow redirects with a prompt body: use the final URL as --base-url",
        retryable=False,
        fatal=True,
        status=response.status,
    )


def _too_large(cap: int) -> ApiError:
    return ApiError(
        "response_too_large",
        f"the response passed {cap:,} bytes and was dropped; pass a "
        "larger --max-response-bytes if answers this long are expected",
    )


def _too_long(
    size: int,
    cap: int,
    usage: dict | None,
    answer: bytes,
    named: tuple[str | None, str | None],
    whole: bool = False,
) -> ApiError:
    """An answer whose text passed ``--max-answer-bytes`` (``cap``): refused, and billed (a whole
    body on its usage; a stream cut at the cap on its bytes), so kept apart, never lost."""
    usage = usage or {}
    cost = usage.get("cost")
    what = "an answer" if whole else "a streamed answer, no longer read,"
    message = (
        f"{what} held {size:,} bytes of text, more than --max-answer-bytes "
        f"{cap:,}; a --max-tokens bounds the answers, or a larger "
        "--max-answer-bytes takes them"
    )
    billed = Billed(
        usage.get("prompt_tokens"),
        usage.get("completion_tokens"),
        size,
        float(cost) if isinstance(cost, (int, float)) else 0.0,
        message,
        orjson.dumps(usage).decode() if usage else "",
        answer,
        *named,
    )
    return ApiError(ANSWER_TOO_LONG, message, billed=billed)

"""Batch APIs on the wire: OpenRouter's inline batches and OpenAI-style file batches.

Both are read into the same plain values (``BatchInfo``, ``ResultPage``, ``ResultRow``); nothing
else in the batch step knows a dialect's field names. Lookups, listings and result pages are
retried; a create never is blindly (a lost answer is reconciled, see
``draftgen.generate.batch.submit``).
Facts: OpenRouter's Batch API reference, OpenAI's Files and Batches API; what is unconfirmed and
what the code does about it: docs/batch.md.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import aiohttp
import orjson

from draftgen.backends import all_backends
from draftgen.backends.base import error_from_status, parse_retry_after
from draftgen.logs import add_secret
from draftgen.store.batch_timing import FINAL_STATUSES as ENDED_STATUSES

CHAT_ENDPOINT = "/v1/chat/completions"
FINAL_STATUSES = frozenset(ENDED_STATUSES)
STATUSES = (
    "validating",
    "in_progress",
    "finalizing",
    "completed",
    "failed",
    "expired",
    "cancelling",
    "cancelled",
)
# Request-level kinds of row errors that asking again cannot fix (as the live client decides).
FINAL_ROW_ERRORS = frozenset(
    {"invalid_request_error", "invalid_request", "context_length_exceeded", "rejected"}
)


class BatchApiError(RuntimeError):
    """A batch call that failed for good; the message is one sentence. ``fatal``: the run
    cannot go on (a refused key, no credits)."""

    def __init__(self, message: str, status: int | None = None, fatal: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.fatal = fatal


class CreateRefused(BatchApiError):
    """The API answered the create with a refusal: no batch was made."""

    def __init__(self, message: str, status: int, retry_after: float | None = None) -> None:
        super().__init__(message, status, fatal=status in (401, 402))
        self.retry_after = retry_after


class CreateUnknown(BatchApiError):
    """The create got no clear answer (timeout, dropped connection, 5xx): a batch may exist."""


@dataclass
class BatchInfo:
    """A batch as the API reports it, in either dialect."""

    id: str
    status: str
    created_at: float | None = None
    model: str | None = None
    endpoint: str | None = None
    total: int | None = None
    completed: int | None = None
    failed: int | None = None
    cost: float | None = None  # what the API says the batch was charged (OpenRouter usage.cost)
    error: str | None = None  # why it failed, as the API says it
    nonce: str | None = None  # draftgen's nonce, where the API keeps metadata (openai-files)
    input_file_id: str | None = None
    output_file_id: str | None = None
    error_file_id: str | None = None
    raw: dict = field(default_factory=dict, repr=False)

    @property
    def final(self) -> bool:
        return self.status in FINAL_STATUSES

    def counts(self) -> dict:
        return {"total": self.total, "completed": self.completed, "failed": self.failed}


@dataclass
class RowError:
    kind: str
    message: str
    retryable: bool = True
    status: int | None = None


@dataclass
class ResultRow:
    """One row of a batch's results: the endpoint's response body, or why there is none."""

    custom_id: str
    body: dict | None = None
    error: RowError | None = None


@dataclass
class ResultPage:
    rows: list[ResultRow]
    next_cursor: str | None  # None: this was the last page


@dataclass
class Answer:
    status: int
    headers: dict
    body: bytes

    def json(self) -> object:
        try:
            return orjson.loads(self.body)
        except orjson.JSONDecodeError:
            return None

    def message(self) -> str:
        obj = self.json()
        error = obj.get("error") if isinstance(obj, dict) else None
        if isinstance(error, dict) and error.get("message"):
            text = str(error["message"])
        elif isinstance(obj, dict) and obj.get("message"):
            text = str(obj["message"])
        else:
            text = self.body[:200].decode("utf-8", "replace") or "no message"
        return " ".join(text.split())[:300]


class Unanswered(Exception):
    """The request got no HTTP answer (connection refused or dropped, timeout)."""


class BatchHttp:
    """One aiohttp session to a batch API root, with retries for calls safe to repeat."""

    def __init__(
        self,
        url: str,
        api_key: str | None,
        *,
        timeout: float = 300.0,
        attempts: int = 6,
        base_delay: float = 0.5,
        max_delay: float = 30.0,
    ) -> None:
        self.url = url.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout
        self.attempts = attempts
        self.base_delay = base_delay
        self.max_delay = max_delay
        self._session: aiohttp.ClientSession | None = None
        add_secret(api_key)

    async def __aenter__(self) -> BatchHttp:
        headers = {"User-Agent": "draftgen/batch"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        self._session = aiohttp.ClientSession(
            headers=headers, timeout=aiohttp.ClientTimeout(total=self.timeout)
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def call(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        form: Callable[[], aiohttp.FormData] | None = None,
        params: list[tuple[str, str]] | None = None,
        retry: bool = True,
    ) -> Answer:
        """One call; with ``retry``, 5xx, 408, 429 and lost connections are tried again."""
        assert self._session is not None, "use BatchHttp as an async context manager"
        headers = {"Content-Type": "application/json"} if body is not None else None
        last = ""
        for attempt in range(1, (self.attempts if retry else 1) + 1):
            try:
                data = form() if form is not None else body
                async with self._session.request(
                    method, self.url + path, data=data, params=params, headers=headers
                ) as response:
                    answer = Answer(response.status, dict(response.headers), await response.read())
            except (aiohttp.ClientError, TimeoutError) as exc:
                last = f"{exc.__class__.__name__}: {exc}" if str(exc) else exc.__class__.__name__
                if not retry:
                    raise Unanswered(last) from None
                await asyncio.sleep(self._backoff(attempt))
                continue
            if retry and (answer.status >= 500 or answer.status in (408, 429)):
                last = f"HTTP {answer.status}: {answer.message()}"
                wait = parse_retry_after(answer.headers.get("Retry-After"))
                await asyncio.sleep(wait if wait is not None else self._backoff(attempt))
                continue
            return answer
        raise BatchApiError(
            f"{method} {self.url}{path} failed {self.attempts} times (last: {last})"
        )

    def _backoff(self, attempt: int) -> float:
        return random.uniform(0, min(self.max_delay, self.base_delay * 2 ** (attempt - 1)))


def fail(answer: Answer, what: str) -> BatchApiError:
    """The error for an answer that is not what ``what`` needed, as one sentence."""
    message = answer.message()
    if answer.status == 401:
        return BatchApiError(f"{what}: the API rejected the key ({message})", 401, fatal=True)
    if answer.status == 402:
        return BatchApiError(f"{what}: out of credits or over budget ({message})", 402, fatal=True)
    return BatchApiError(f"{what}: HTTP {answer.status} ({message})", answer.status)


def _object(answer: Answer, what: str) -> dict:
    obj = answer.json()
    if not isinstance(obj, dict):
        raise BatchApiError(f"{what}: the answer is not a JSON object")
    return obj


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _number(value: object) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


def _status(value: object) -> str:
    text = str(value or "").lower()
    return "cancelling" if text == "canceling" else text


def row_result(raw: object) -> ResultRow | None:
    """A result row of either dialect, or None when it names no custom_id."""
    if not isinstance(raw, dict) or not isinstance(raw.get("custom_id"), str):
        return None
    custom_id = raw["custom_id"]
    response = raw.get("response") if isinstance(raw.get("response"), dict) else None
    error = raw.get("error") if isinstance(raw.get("error"), dict) else None
    status = _int(response.get("status_code")) if response else None
    if response is not None and status == 200 and error is None:
        body = response.get("body")
        if isinstance(body, dict):
            return ResultRow(custom_id, body=body)
        return ResultRow(custom_id, error=RowError("malformed_row", "response has no body"))
    if response is not None and status is not None and status != 200:
        api = error_from_status(status, None, orjson.dumps(response.get("body") or {}))
        return ResultRow(custom_id, error=RowError(api.kind, api.message, api.retryable, status))
    if error is not None:
        code = str(error.get("code") or error.get("type") or error.get("error_type") or "error")
        message = " ".join(str(error.get("message") or "no message").split())[:300]
        if code in FINAL_ROW_ERRORS:
            return ResultRow(custom_id, error=RowError("rejected", message, False))
        return ResultRow(custom_id, error=RowError(code, message, True))
    return ResultRow(custom_id, error=RowError("malformed_row", "neither response nor error"))


class OpenRouterBatches:
    """``POST /batches`` with the requests inline (OpenRouter, beta or GA root)."""

    name = "openrouter"
    # A batch carries OpenRouter's provider routing (only BATCH_PROVIDER_FIELDS of it).
    routes_provider = True
    # A cancelled batch returns none of its rows, finished ones included (they are billed).
    cancelled_rows_return = False
    max_rows = 5000
    max_bytes = 190 * 1024 * 1024  # of a 200 MB limit, room for the envelope
    page_size = 1000

    def row_body(self, body: dict) -> dict:
        # ``body.model``, if set, must equal the batch's model; ``stream`` fails the batch.
        return {k: v for k, v in body.items() if k not in ("model", "stream", "provider")}

    async def submit(
        self,
        http: BatchHttp,
        nonce: str,
        model: str,
        rows: list[tuple[str, bytes]],
        provider: dict | None,
        on_upload: Callable[[str], Awaitable[None]],
    ) -> BatchInfo:
        # endpoint and model before requests: the body is parsed as a stream (400 otherwise).
        head = {"endpoint": CHAT_ENDPOINT, "model": model, "completion_window": "24h"}
        if provider:
            head["provider"] = provider
        payload = (
            orjson.dumps(head)[:-1]
            + b',"requests":['
            + b",".join(
                b'{"custom_id":' + orjson.dumps(cid) + b',"body":' + body + b"}"
                for cid, body in rows
            )
            + b"]}"
        )
        try:
            answer = await http.call("POST", "/batches", body=payload, retry=False)
        except Unanswered as exc:
            raise CreateUnknown(f"the create got no answer ({exc})") from None
        if answer.status in (200, 201, 202):
            obj = answer.json()
            if not isinstance(obj, dict) or not isinstance(obj.get("id"), str):
                raise CreateUnknown(f"the create answered HTTP {answer.status} without a batch id")
            return self.info(obj)
        if answer.status >= 500 or answer.status == 408:
            raise CreateUnknown(f"the create answered HTTP {answer.status}: {answer.message()}")
        retry_after = parse_retry_after(answer.headers.get("Retry-After"))
        raise CreateRefused(
            f"the API refused the batch: HTTP {answer.status} ({answer.message()})",
            answer.status,
            retry_after,
        )

    def info(self, obj: dict) -> BatchInfo:
        counts = obj.get("request_counts") if isinstance(obj.get("request_counts"), dict) else {}
        usage = obj.get("usage") if isinstance(obj.get("usage"), dict) else {}
        error = obj.get("error") if isinstance(obj.get("error"), dict) else None
        return BatchInfo(
            id=str(obj.get("id") or ""),
            status=_status(obj.get("status")),
            created_at=_number(obj.get("created_at")),
            model=obj.get("model") if isinstance(obj.get("model"), str) else None,
            endpoint=obj.get("endpoint") if isinstance(obj.get("endpoint"), str) else None,
            total=_int(counts.get("total")),
            completed=_int(counts.get("completed")),
            failed=_int(counts.get("failed")),
            cost=_number(usage.get("cost")),
            error=str(error.get("message")) if error and error.get("message") else None,
            raw={k: v for k, v in obj.items() if k != "results"},
        )

    async def get(self, http: BatchHttp, batch_id: str) -> BatchInfo | None:
        answer = await http.call("GET", f"/batches/{batch_id}")
        if answer.status == 404:
            return None  # also for seconds right after the 202
        if answer.status != 200:
            raise fail(answer, f"GET batch {batch_id}")
        return self.info(_object(answer, f"GET batch {batch_id}"))

    async def list_since(self, http: BatchHttp, created_after: float) -> list[BatchInfo]:
        found: list[BatchInfo] = []
        after = None
        while True:
            params = [("limit", "100"), ("created_after", str(int(created_after)))]
            if after:
                params.append(("after", after))
            answer = await http.call("GET", "/batches", params=params)
            if answer.status != 200:
                raise fail(answer, "listing batches")
            obj = _object(answer, "listing batches")
            data = obj.get("data") if isinstance(obj.get("data"), list) else []
            page = [self.info(item) for item in data if isinstance(item, dict)]
            found += [b for b in page if b.created_at is None or b.created_at >= created_after]
            after = obj.get("last_id") or (page[-1].id if page else None)
            if not obj.get("has_more") or not page:
                return found

    async def results(self, http: BatchHttp, info: BatchInfo, cursor: str | None) -> ResultPage:
        params = [("limit", str(self.page_size))]
        if cursor:
            params.append(("cursor", cursor))
        answer = await http.call("GET", f"/batches/{info.id}/results", params=params)
        if answer.status != 200:
            raise fail(answer, f"reading the results of batch {info.id}")
        obj = _object(answer, f"results of batch {info.id}")
        data = obj.get("data") if isinstance(obj.get("data"), list) else []
        rows = [row for row in map(row_result, data) if row is not None]
        more = bool(obj.get("has_more")) and isinstance(obj.get("next_cursor"), str)
        return ResultPage(rows, obj["next_cursor"] if more else None)

    async def cancel(self, http: BatchHttp, batch_id: str) -> tuple[int, BatchInfo | None, str]:
        answer = await http.call("POST", f"/batches/{batch_id}/cancel")
        obj = answer.json()
        info = self.info(obj) if answer.status == 200 and isinstance(obj, dict) else None
        return answer.status, info, answer.message()


class OpenAIFileBatches:
    """A JSONL upload to ``/files``, then ``/batches`` on its id (OpenAI, Kimi, DeepInfra, Groq)."""

    name = "openai-files"
    routes_provider = False
    cancelled_rows_return = True  # in its output file, which the next run stores
    max_rows = 50000
    max_bytes = 95 * 1024 * 1024  # Kimi and Together stop at 100 MB, OpenAI at 200 MB
    page_size = 1000
    NONCE_KEY = "draftgen_nonce"

    def __init__(self) -> None:
        self._files: dict[str, list[bytes]] = {}  # the last file read, by id, as lines

    def row_body(self, body: dict) -> dict:
        # Each line names its model (there is no batch-level one); ``stream`` fails the batch.
        return {k: v for k, v in body.items() if k not in ("stream", "provider")}

    async def submit(
        self,
        http: BatchHttp,
        nonce: str,
        model: str,
        rows: list[tuple[str, bytes]],
        provider: dict | None,
        on_upload: Callable[[str], Awaitable[None]],
        file_id: str | None = None,
    ) -> BatchInfo:
        if file_id is None:
            file_id = await self.upload(http, nonce, rows)
            await on_upload(file_id)
        body = orjson.dumps(
            {
                "input_file_id": file_id,
                "endpoint": CHAT_ENDPOINT,
                "completion_window": "24h",
                "metadata": {self.NONCE_KEY: nonce},
            }
        )
        try:
            answer = await http.call("POST", "/batches", body=body, retry=False)
        except Unanswered as exc:
            raise CreateUnknown(f"the create got no answer ({exc})") from None
        if answer.status in (200, 201, 202):
            obj = answer.json()
            if isinstance(obj, dict) and isinstance(obj.get("job"), dict):
                obj = obj["job"]  # Together wraps the batch as {"job": {...}}
            if not isinstance(obj, dict) or not isinstance(obj.get("id"), str):
                raise CreateUnknown(f"the create answered HTTP {answer.status} without a batch id")
            return self.info(obj)
        if answer.status >= 500 or answer.status == 408:
            raise CreateUnknown(f"the create answered HTTP {answer.status}: {answer.message()}")
        raise CreateRefused(
            f"the API refused the batch: HTTP {answer.status} ({answer.message()})",
            answer.status,
            parse_retry_after(answer.headers.get("Retry-After")),
        )

    async def upload(self, http: BatchHttp, nonce: str, rows: list[tuple[str, bytes]]) -> str:
        """Upload the JSONL; an upload repeated or left unused costs nothing, so it is retried."""
        lines = b"".join(
            b'{"custom_id":'
            + orjson.dumps(cid)
            + b',"method":"POST","url":"'
            + CHAT_ENDPOINT.encode()
            + b'","body":'
            + body
            + b"}\n"
            for cid, body in rows
        )

        def form() -> aiohttp.FormData:
            data = aiohttp.FormData()
            data.add_field("purpose", "batch")
            data.add_field(
                "file", lines, filename=f"{nonce}.jsonl", content_type="application/jsonl"
            )
            return data

        answer = await http.call("POST", "/files", form=form)
        if answer.status not in (200, 201):
            raise fail(answer, "uploading the batch file")
        obj = _object(answer, "uploading the batch file")
        file_id = obj.get("id")
        if not isinstance(file_id, str) or not file_id:
            raise BatchApiError("uploading the batch file: the answer names no file id")
        return file_id

    def info(self, obj: dict) -> BatchInfo:
        counts = obj.get("request_counts") if isinstance(obj.get("request_counts"), dict) else {}
        metadata = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
        errors = obj.get("errors") if isinstance(obj.get("errors"), dict) else {}
        data = errors.get("data") if isinstance(errors.get("data"), list) else []
        messages = [
            f"line {e['line']}: {e.get('message')}" if e.get("line") else str(e.get("message"))
            for e in data
            if isinstance(e, dict)
        ]
        error = "; ".join(messages) or (str(obj["error"]) if obj.get("error") else None)
        return BatchInfo(
            id=str(obj.get("id") or ""),
            status=_status(obj.get("status")),
            created_at=_number(obj.get("created_at")),
            model=obj.get("model") if isinstance(obj.get("model"), str) else None,
            endpoint=obj.get("endpoint") if isinstance(obj.get("endpoint"), str) else None,
            total=_int(counts.get("total")),
            completed=_int(counts.get("completed")),
            failed=_int(counts.get("failed")),
            cost=None,  # OpenAI-style APIs report tokens per row, never a price
            error=error,
            nonce=metadata.get(self.NONCE_KEY) if isinstance(metadata, dict) else None,
            input_file_id=obj.get("input_file_id"),
            output_file_id=obj.get("output_file_id"),
            error_file_id=obj.get("error_file_id"),
            raw=obj,
        )

    async def get(self, http: BatchHttp, batch_id: str) -> BatchInfo | None:
        answer = await http.call("GET", f"/batches/{batch_id}")
        if answer.status == 404:
            return None
        if answer.status != 200:
            raise fail(answer, f"GET batch {batch_id}")
        return self.info(_object(answer, f"GET batch {batch_id}"))

    async def list_since(self, http: BatchHttp, created_after: float) -> list[BatchInfo]:
        """Newest first, until the batches are older than ``created_after`` (OpenAI's listing
        has no time filter)."""
        found: list[BatchInfo] = []
        after = None
        while True:
            params = [("limit", "100")] + ([("after", after)] if after else [])
            answer = await http.call("GET", "/batches", params=params)
            if answer.status != 200:
                raise fail(answer, "listing batches")
            obj = _object(answer, "listing batches")
            data = obj.get("data") if isinstance(obj.get("data"), list) else []
            page = [self.info(item) for item in data if isinstance(item, dict)]
            found += [b for b in page if b.created_at is None or b.created_at >= created_after]
            older = any(b.created_at is not None and b.created_at < created_after for b in page)
            after = obj.get("last_id") or (page[-1].id if page else None)
            if older or not obj.get("has_more") or not page:
                return found

    async def results(self, http: BatchHttp, info: BatchInfo, cursor: str | None) -> ResultPage:
        """The output file's rows, then the error file's, ``page_size`` lines a page; the
        cursor is ``output:N`` or ``error:N`` (lines read of that file)."""
        files = [("output", info.output_file_id), ("error", info.error_file_id)]
        files = [(name, file_id) for name, file_id in files if file_id]
        kind, _, done = (cursor or "").partition(":")
        start = int(done) if done.isdigit() else 0
        names = [name for name, _ in files]
        index = names.index(kind) if kind in names else 0
        if not files or index >= len(files):
            return ResultPage([], None)
        name, file_id = files[index]
        lines = await self._lines(http, file_id)
        chunk = lines[start : start + self.page_size]
        rows = []
        for line in chunk:
            try:
                row = row_result(orjson.loads(line))
            except orjson.JSONDecodeError:
                row = None
            if row is not None:
                rows.append(row)
        if start + self.page_size < len(lines):
            return ResultPage(rows, f"{name}:{start + self.page_size}")
        if index + 1 < len(files):
            return ResultPage(rows, f"{files[index + 1][0]}:0")
        return ResultPage(rows, None)

    async def _lines(self, http: BatchHttp, file_id: str) -> list[bytes]:
        if file_id not in self._files:
            answer = await http.call("GET", f"/files/{file_id}/content")
            if answer.status != 200:
                raise fail(answer, f"reading the batch file {file_id}")
            self._files.clear()  # one file in memory at a time
            self._files[file_id] = [line for line in answer.body.splitlines() if line.strip()]
        return self._files[file_id]

    async def cancel(self, http: BatchHttp, batch_id: str) -> tuple[int, BatchInfo | None, str]:
        answer = await http.call("POST", f"/batches/{batch_id}/cancel")
        obj = answer.json()
        info = self.info(obj) if answer.status == 200 and isinstance(obj, dict) else None
        return answer.status, info, answer.message()


Dialect = OpenRouterBatches | OpenAIFileBatches
# The batch dialects the backends declare (``Backend.batch_dialects``), in their order, and the
# class that speaks each (a test checks every declared name has one).
DIALECT_NAMES: tuple[str, ...] = tuple(
    dict.fromkeys(name for backend in all_backends() for name in backend.batch_dialects)
)
DIALECTS: dict[str, type] = {
    dialect.name: dialect for dialect in (OpenRouterBatches, OpenAIFileBatches)
}


def get_dialect(name: str) -> Dialect:
    try:
        return DIALECTS[name]()
    except KeyError:
        raise ValueError(
            f"unknown batch dialect {name!r}: use one of {', '.join(DIALECT_NAMES)}"
        ) from None

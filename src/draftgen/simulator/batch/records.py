"""A simulated batch and its rows, and what both wire formats share: ids, list pages, query
numbers, OpenRouter's error shape, and ``WireFormat`` (what the timeline asks of a format).
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field
from typing import Protocol

import orjson
from aiohttp import web

from draftgen.simulator import wire
from draftgen.simulator.exchange import seeded_rng

SERVED_ENDPOINT = "/v1/chat/completions"  # the only one the simulated model answers
WINDOW_SECONDS = 24 * 3600
TERMINAL = frozenset({"completed", "failed", "expired", "cancelled"})


@dataclass
class BatchRow:
    custom_id: str
    body: dict
    error: dict | None = None  # decided at creation (row_error): this row fails
    result: dict | None = None  # the row as the results hold it, once finished


@dataclass
class SimBatch:
    id: str
    dialect: str
    model: str
    endpoint: str
    provider: str
    rows: list[BatchRow]
    created: float  # monotonic
    created_at: int  # epoch seconds, as the API reports it
    seq: int
    metadata: dict | None = None
    input_file_id: str | None = None
    invalid: str | None = None  # why validation fails the whole batch
    invalid_line: int | None = None
    expire_share: float | None = None  # the share of the rows done when it expires
    cancel_at: float | None = None
    status: str = "validating"
    produced: int = 0  # rows finished so far, in order
    results: list[dict] = field(default_factory=list)
    usage: dict = field(default_factory=lambda: {"prompt_tokens": 0, "completion_tokens": 0})
    cost: float = 0.0  # billed: finished rows, whether or not they are ever returned
    completed: int = 0
    failed: int = 0
    times: dict = field(default_factory=dict)  # status -> epoch second it began
    output_file_id: str | None = None
    error_file_id: str | None = None

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL


class WireFormat(Protocol):
    """A batch wire format as the shared book and timeline see it: where the two dialects
    differ once a batch exists (its visibility, a failed row's shape, the usage a row shows, and
    what its end writes)."""

    name: str  # SimBatch.dialect
    id_prefix: str  # of the batch ids it makes

    def visible(self, batch: SimBatch, now: float) -> bool: ...

    def failed_row(self, row: BatchRow, row_id: str, request_id: str) -> dict: ...

    def hide_price(self, usage: dict) -> None: ...

    def ended(self, batch: SimBatch) -> list[str]: ...


def batch_rng(seed: int, *parts: object) -> random.Random:
    """The batch APIs' seeded draws: ids, faults, providers (``exchange.seeded_rng``)."""
    return seeded_rng(seed, "batch", *parts)


def result_row_id(seed: int, batch_id: str, custom_id: str) -> str:
    """A row's id in the results, the same wherever the row is written."""
    return f"batch_req_{batch_rng(seed, 'row', batch_id, custom_id).getrandbits(64):016x}"


def body_digest(body: dict) -> str:
    """A request body's identity across dialects (the model, named per batch or per line, and
    the stream switch aside)."""
    rest = {k: v for k, v in body.items() if k not in ("model", "stream")}
    return hashlib.sha256(orjson.dumps(rest, option=orjson.OPT_SORT_KEYS)).hexdigest()


def page_after(items: list[SimBatch], after: str | None, limit: int) -> tuple[list, bool]:
    start = 0
    if after:
        ids = [b.id for b in items]
        start = ids.index(after) + 1 if after in ids else len(items)
    page = items[start : start + limit]
    return page, start + limit < len(items)


def query_int(text: str | None, default: int | None, low: int, high: int | None) -> int | None:
    try:
        value = int(text) if text is not None else default
    except ValueError:
        value = default
    if value is None:
        return None
    value = max(low, value)
    return min(high, value) if high is not None else value


def error(status: int, message: str, error_type: str) -> web.Response:
    """An error in OpenRouter's shape (also what both dialects answer for a missing batch)."""
    return web.Response(
        status=status,
        body=wire.error_body(status, message, error_type),
        content_type="application/json",
    )


def dumps(value: object) -> str:
    return orjson.dumps(value).decode()

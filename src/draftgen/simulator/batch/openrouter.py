"""OpenRouter's inline batches on the simulator: ``/api/v1/batches`` (and ``/api/beta``), the
requests in the create's body, the results paged by cursor.
"""

from __future__ import annotations

import base64
import time

import orjson
from aiohttp import web

from draftgen.simulator import wire
from draftgen.simulator.batch.book import BatchBook
from draftgen.simulator.batch.records import (
    SERVED_ENDPOINT,
    WINDOW_SECONDS,
    BatchRow,
    SimBatch,
    dumps,
    error,
    page_after,
    query_int,
)
from draftgen.simulator.exchange import close_connection

PREFIXES = ("/api/v1", "/api/beta")  # GA and beta roots of /batches
ENDPOINTS = ("/v1/chat/completions", "/v1/responses", "/v1/messages", "/v1/embeddings")
MAX_REQUESTS = 5000  # rows in one batch (OpenAI's file batches take 50000, never reached here)
MAX_CUSTOM_ID = 64
ORDER_ERROR = "endpoint and model are required and must appear before requests in the request body"


class OpenRouterBatchRoutes:
    """OpenRouter's batch routes over the simulator's ``BatchBook``, and its shapes of what the
    timeline writes (``records.WireFormat``)."""

    name = "openrouter"
    id_prefix = "batch_"

    def __init__(self, book: BatchBook) -> None:
        self.book = book
        self.sim = book.sim
        self.config = book.config
        book.formats[self.name] = self

    def register(self, app: web.Application) -> None:
        for prefix in PREFIXES:
            app.router.add_post(prefix + "/batches", self.create)
            app.router.add_get(prefix + "/batches", self.list_batches)
            app.router.add_get(prefix + "/batches/{id}", self.get)
            app.router.add_get(prefix + "/batches/{id}/results", self.results)
            app.router.add_post(prefix + "/batches/{id}/cancel", self.cancel)
            app.router.add_delete(prefix + "/batches/{id}", self.delete)

    # -- routes -----------------------------------------------------------------------------

    async def create(self, request: web.Request) -> web.StreamResponse:
        if not self.sim._authorized(request):
            return self.sim._unauthorized()
        self.sim.stats["batch_creates"] += 1
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError as exc:
            return error(400, f"request body is not valid JSON: {exc}", "invalid_request")
        if not isinstance(body, dict):
            return error(400, "request body must be a JSON object", "invalid_request")
        keys = list(body)
        # The body is parsed as a stream: what routes the batch must come before the requests.
        before = keys[: keys.index("requests")] if "requests" in keys else keys
        if "endpoint" not in before or "model" not in before:
            return error(400, ORDER_ERROR, "invalid_request")
        if "callback_url" in keys and "callback_url" not in before:
            return error(400, ORDER_ERROR, "invalid_request")
        problem = self._routing_problem(body)
        if problem:
            return problem
        rows = _rows(body)
        if isinstance(rows, web.Response):
            return rows
        provider = self._provider(body.get("provider"))
        if provider is None:
            message = "No endpoints found matching your provider preferences"
            return error(404, message, "no_endpoints")
        fault = self.book.create_fault()
        if fault == "create_refused":
            return error(503, "Batch service is overloaded, try again", "provider_overloaded")
        batch = self.book.new_batch(self.name, body["model"], body["endpoint"], provider, rows)
        if fault == "create_lost":
            close_connection(request)
            return web.Response(status=500)
        if fault == "create_5xx":
            return error(502, "Bad gateway", "provider_unavailable")
        return web.json_response(
            self.batch_object(batch, with_results=False), status=202, dumps=dumps
        )

    def _routing_problem(self, body: dict) -> web.Response | None:
        endpoint, model = body.get("endpoint"), body.get("model")
        if endpoint not in ENDPOINTS:
            return error(400, f"endpoint must be one of {', '.join(ENDPOINTS)}", "invalid_request")
        if endpoint != SERVED_ENDPOINT:
            return error(400, f"this simulator serves {SERVED_ENDPOINT} only", "invalid_request")
        if not isinstance(model, str) or not model:
            return error(400, ORDER_ERROR, "invalid_request")
        base = model.removesuffix(":batch")
        listed = self.config.batch_models
        if listed is not None and base not in listed:
            message = f"Model '{base}' does not have a :batch endpoint."
            return error(400, message, "invalid_request")
        window = body.get("completion_window", "24h")
        if window != "24h":
            return error(400, 'completion_window must be "24h"', "invalid_request")
        provider = body.get("provider")
        if provider is not None and (
            not isinstance(provider, dict) or set(provider) - {"only", "allow_fallbacks"}
        ):
            message = "provider takes only `only` and `allow_fallbacks`"
            return error(400, message, "invalid_request")
        callback = body.get("callback_url")
        if callback is not None and not (
            isinstance(callback, str) and callback.startswith("https://")
        ):
            return error(400, "callback_url must be an https URL", "invalid_request")
        return None

    def _provider(self, prefs: object) -> str | None:
        """One provider serves a whole batch: the request's ``only`` list, else one of all."""
        allowed = list(self.sim.providers)
        if isinstance(prefs, dict) and isinstance(prefs.get("only"), list):
            only = {str(name).lower() for name in prefs["only"]}
            allowed = [p for p in allowed if wire.routing_names(p) & only]
        if not allowed:
            return None
        return self.book.rng("provider", self.book.seq).choice(allowed)

    async def list_batches(self, request: web.Request) -> web.Response:
        if not self.sim._authorized(request):
            return self.sim._unauthorized()
        if self.book.request_fault("get_5xx"):
            return error(502, "Bad gateway", "provider_unavailable")
        query = request.query
        limit = query_int(query.get("limit"), 20, 1, 100)
        statuses = set(query.getall("status", []))
        created_after = query_int(query.get("created_after"), None, 0, None)
        created_before = query_int(query.get("created_before"), None, 0, None)
        now = time.monotonic()
        listed = [
            b
            for b in self.book.newest_first(self.name)
            if self.visible(b, now)
            and (created_after is None or b.created_at >= created_after)
            and (created_before is None or b.created_at < created_before)
        ]
        for batch in listed:
            self.book.advance(batch, now)
        if statuses:
            listed = [b for b in listed if b.status in statuses]
        page, more = page_after(listed, query.get("after"), limit)
        body = {
            "object": "list",
            "data": [self.batch_object(b, with_results=False) for b in page],
            "first_id": page[0].id if page else None,
            "last_id": page[-1].id if page else None,
            "has_more": more,
        }
        return web.json_response(body, dumps=dumps)

    async def get(self, request: web.Request) -> web.Response:
        batch, problem = self.book.lookup(request, self.name)
        if problem:
            return problem
        if self.book.request_fault("get_5xx"):
            return error(502, "Bad gateway", "provider_unavailable")
        return web.json_response(self.batch_object(batch, with_results=True), dumps=dumps)

    async def results(self, request: web.Request) -> web.Response:
        batch, problem = self.book.lookup(request, self.name)
        if problem:
            return problem
        if self.book.request_fault("results_5xx"):
            return error(500, "Internal Server Error", "server_error")
        limit = query_int(request.query.get("limit"), 100, 1, 1000)
        start = _cursor_offset(request.query.get("cursor"), batch.id)
        if start is None:
            return error(400, "cursor is not one this API returned", "invalid_request")
        rows = readable(batch)
        page = rows[start : start + limit]
        more = start + limit < len(rows)
        body = {
            "object": "list",
            "data": page,
            "has_more": more,
            "next_cursor": _cursor(batch.id, start + limit) if more else None,
        }
        return web.json_response(body, dumps=dumps)

    async def cancel(self, request: web.Request) -> web.Response:
        batch, problem = self.book.cancel(request, self.name)
        if problem:
            return problem
        return web.json_response(self.batch_object(batch, False), dumps=dumps)

    async def delete(self, request: web.Request) -> web.Response:
        batch, problem = self.book.lookup(request, self.name)
        if problem:
            return problem
        if not batch.terminal:
            return error(409, f"batch {batch.id} is {batch.status}: only a final one", "conflict")
        del self.book.batches[batch.id]
        return web.json_response({"id": batch.id, "object": "batch", "deleted": True})

    def batch_object(self, batch: SimBatch, with_results: bool) -> dict:
        return {
            "id": batch.id,
            "object": "batch",
            "endpoint": batch.endpoint,
            "model": batch.model,
            "completion_window": "24h",
            "status": batch.status,
            "created_at": batch.created_at,
            "finalized_at": batch.times.get(batch.status) if batch.terminal else None,
            "expires_at": batch.created_at + WINDOW_SECONDS,
            "provider": batch.provider,
            "request_counts": {
                "total": len(batch.rows),
                "completed": batch.completed,
                "failed": batch.failed,
            },
            "usage": self._usage(batch) if batch.terminal else None,
            "results": readable(batch) if with_results and batch.terminal else None,
            "error": {"message": batch.invalid} if batch.status == "failed" else None,
        }

    def _usage(self, batch: SimBatch) -> dict:
        prompt, completion = batch.usage["prompt_tokens"], batch.usage["completion_tokens"]
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "cost": round(batch.cost, 12),
            "is_byok": False,
        }

    # -- the timeline's shapes (records.WireFormat) ---------------------------------------------

    def visible(self, batch: SimBatch, now: float) -> bool:
        """OpenRouter answered 404 for seconds after the 202 in its own captures
        (OpenRouterTeam/docs, ``docs/batch-research``)."""
        return now - batch.created >= self.config.batch_visible_after

    def failed_row(self, row: BatchRow, row_id: str, request_id: str) -> dict:
        """A row drawn to fail: no response, the error beside it."""
        return {"id": row_id, "custom_id": row.custom_id, "response": None, "error": row.error}

    def hide_price(self, usage: dict) -> None:
        """Nothing: OpenRouter's rows carry their cost."""

    def ended(self, batch: SimBatch) -> list[str]:
        """The custom ids a results request returns answered."""
        return [r["custom_id"] for r in readable(batch) if r.get("error") is None]


def readable(batch: SimBatch) -> list[dict]:
    """The rows a results request returns: none for a failed or cancelled batch (cancelled
    rows that finished are billed all the same), the finished ones otherwise."""
    if batch.status in ("failed", "cancelled"):
        return []
    return batch.results


def _cursor(batch_id: str, offset: int) -> str:
    return base64.urlsafe_b64encode(f"{batch_id}:{offset}".encode()).decode().rstrip("=")


def _cursor_offset(cursor: str | None, batch_id: str) -> int | None:
    if not cursor:
        return 0
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        owner, _, offset = text.rpartition(":")
        return int(offset) if owner == batch_id and int(offset) >= 0 else None
    except (ValueError, UnicodeDecodeError):
        return None


def _rows(body: dict) -> list[BatchRow] | web.Response:
    """The rows of an inline batch, or the answer refusing the first that cannot be one."""
    requests = body.get("requests")
    if not isinstance(requests, list) or not requests:
        return error(400, "requests must be a non-empty array", "invalid_request")
    if len(requests) > MAX_REQUESTS:
        return error(
            400,
            f"a batch holds at most {MAX_REQUESTS} requests, not {len(requests)}",
            "invalid_request",
        )
    rows: list[BatchRow] = []
    seen: set[str] = set()
    for index, item in enumerate(requests):
        if not isinstance(item, dict) or not isinstance(item.get("body"), dict):
            return error(400, f"requests[{index}] needs custom_id and body", "invalid_request")
        custom_id = item.get("custom_id")
        if not isinstance(custom_id, str) or not custom_id:
            return error(422, f"requests[{index}].custom_id must be a string", "invalid")
        if len(custom_id) > MAX_CUSTOM_ID:
            return error(422, f"custom_id {custom_id!r} is longer than {MAX_CUSTOM_ID}", "invalid")
        if custom_id in seen:
            return error(422, f"Duplicate custom_id '{custom_id}' in requests", "invalid")
        seen.add(custom_id)
        model = item["body"].get("model")
        if model is not None and model != body["model"]:
            return error(
                400,
                f"requests[{index}].body.model {model!r} must equal the batch model "
                f"{body['model']!r}",
                "invalid_request",
            )
        rows.append(BatchRow(custom_id, item["body"]))
    return rows

"""OpenAI-style file batches on the simulator: ``/v1/files`` and ``/v1/batches``, the requests in
an uploaded JSONL file, the results in an output file and an error file.
"""

from __future__ import annotations

import time

import orjson
from aiohttp import web

from draftgen.simulator.batch.book import BatchBook
from draftgen.simulator.batch.records import (
    SERVED_ENDPOINT,
    WINDOW_SECONDS,
    BatchRow,
    SimBatch,
    dumps,
    page_after,
    query_int,
    result_row_id,
)
from draftgen.simulator.exchange import close_connection

PREFIX = "/v1"  # /v1/files and /v1/batches, as OpenAI lays them out
EXPIRED_MESSAGE = "This request could not be executed before the completion window expired."
CANCELLED_MESSAGE = "This request was not executed because the batch was cancelled."


class OpenAIFileBatchRoutes:
    """OpenAI's file and batch routes over the simulator's ``BatchBook``, and its shapes of what
    the timeline writes (``records.WireFormat``)."""

    name = "openai-files"
    id_prefix = "batch_oa"

    def __init__(self, book: BatchBook) -> None:
        self.book = book
        self.sim = book.sim
        self.config = book.config
        book.formats[self.name] = self

    def register(self, app: web.Application) -> None:
        app.router.add_post(PREFIX + "/files", self.upload)
        app.router.add_get(PREFIX + "/files/{id}", self.file)
        app.router.add_get(PREFIX + "/files/{id}/content", self.file_content)
        app.router.add_post(PREFIX + "/batches", self.create)
        app.router.add_get(PREFIX + "/batches", self.list_batches)
        app.router.add_get(PREFIX + "/batches/{id}", self.get)
        app.router.add_post(PREFIX + "/batches/{id}/cancel", self.cancel)

    # -- files ----------------------------------------------------------------------------------

    async def upload(self, request: web.Request) -> web.Response:
        if not self.sim._authorized(request):
            return self.sim._unauthorized()
        try:
            form = await request.post()
        except Exception as exc:  # not multipart, or cut short
            return _error(400, f"expected a multipart form with file and purpose ({exc})")
        purpose, upload = form.get("purpose"), form.get("file")
        if purpose not in ("batch", "batch-api"):
            return _error(400, "purpose must be 'batch'")
        if upload is None or not hasattr(upload, "file"):
            return _error(400, "file is required")
        data = upload.file.read()
        files = self.book.files
        file_id = f"file-{self.book.rng('file', len(files), data[:64]).getrandbits(96):024x}"
        entry = {
            "id": file_id,
            "object": "file",
            "bytes": len(data),
            "created_at": int(time.time()),
            "filename": upload.filename or "batch.jsonl",
            "purpose": purpose,
            "status": "processed",
        }
        files[file_id] = {**entry, "content": data}
        self.sim.stats["batch_files"] += 1
        return web.json_response(entry)

    async def file(self, request: web.Request) -> web.Response:
        if not self.sim._authorized(request):
            return self.sim._unauthorized()
        entry = self.book.files.get(request.match_info["id"])
        if entry is None:
            return _error(404, "No such File object")
        return web.json_response({k: v for k, v in entry.items() if k != "content"})

    async def file_content(self, request: web.Request) -> web.Response:
        if not self.sim._authorized(request):
            return self.sim._unauthorized()
        entry = self.book.files.get(request.match_info["id"])
        if entry is None:
            return _error(404, "No such File object")
        if self.book.request_fault("results_5xx"):
            return _error(500, "The server had an error processing your request")
        return web.Response(body=entry["content"], content_type="application/jsonl")

    # -- batches --------------------------------------------------------------------------------

    async def create(self, request: web.Request) -> web.StreamResponse:
        if not self.sim._authorized(request):
            return self.sim._unauthorized()
        self.sim.stats["batch_creates"] += 1
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError as exc:
            return _error(400, f"request body is not valid JSON: {exc}")
        if not isinstance(body, dict):
            return _error(400, "request body must be a JSON object")
        entry = self.book.files.get(body.get("input_file_id") or "")
        if entry is None:
            return _error(400, "Invalid input_file_id: no such file")
        endpoint = body.get("endpoint")
        if endpoint != SERVED_ENDPOINT:
            return _error(400, f"endpoint must be {SERVED_ENDPOINT}")
        if body.get("completion_window", "24h") != "24h":
            return _error(400, "completion_window must be '24h'")
        metadata = body.get("metadata")
        if metadata is not None and not isinstance(metadata, dict):
            return _error(400, "metadata must be an object")
        rows, invalid, model = _parse_lines(entry["content"], endpoint)
        if not rows and invalid is None:
            return _error(400, "the input file holds no requests")
        fault = self.book.create_fault()
        if fault == "create_refused":
            return _error(503, "The server is overloaded, try again")
        provider = self.book.rng("provider", self.book.seq).choice(self.sim.providers)
        batch = self.book.new_batch(
            self.name,
            model or "",
            endpoint,
            provider,
            rows,
            metadata=metadata,
            input_file_id=entry["id"],
            invalid=invalid,
        )
        if fault == "create_lost":
            close_connection(request)
            return web.Response(status=500)
        if fault == "create_5xx":
            return _error(502, "Bad gateway")
        return web.json_response(self.batch_object(batch), dumps=dumps)

    async def list_batches(self, request: web.Request) -> web.Response:
        if not self.sim._authorized(request):
            return self.sim._unauthorized()
        if self.book.request_fault("get_5xx"):
            return _error(502, "Bad gateway")
        limit = query_int(request.query.get("limit"), 20, 1, 100)
        listed = self.book.newest_first(self.name)
        now = time.monotonic()
        for batch in listed:
            self.book.advance(batch, now)
        page, more = page_after(listed, request.query.get("after"), limit)
        body = {
            "object": "list",
            "data": [self.batch_object(b) for b in page],
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
            return _error(502, "Bad gateway")
        return web.json_response(self.batch_object(batch), dumps=dumps)

    async def cancel(self, request: web.Request) -> web.Response:
        batch, problem = self.book.cancel(request, self.name)
        if problem:
            return problem
        return web.json_response(self.batch_object(batch), dumps=dumps)

    def batch_object(self, batch: SimBatch) -> dict:
        times = batch.times
        errors = None
        if batch.status == "failed":
            errors = {
                "object": "list",
                "data": [
                    {
                        "code": "invalid_request",
                        "message": batch.invalid,
                        "line": batch.invalid_line,
                    }
                ],
            }
        return {
            "id": batch.id,
            "object": "batch",
            "endpoint": batch.endpoint,
            "model": batch.model,
            "errors": errors,
            "input_file_id": batch.input_file_id,
            "completion_window": "24h",
            "status": batch.status,
            "output_file_id": batch.output_file_id,
            "error_file_id": batch.error_file_id,
            "created_at": batch.created_at,
            "in_progress_at": times.get("in_progress"),
            "expires_at": batch.created_at + WINDOW_SECONDS,
            "finalizing_at": times.get("finalizing"),
            "completed_at": times.get("completed"),
            "failed_at": times.get("failed"),
            "expired_at": times.get("expired"),
            "cancelling_at": times.get("cancelling"),
            "cancelled_at": times.get("cancelled"),
            "request_counts": {
                "total": len(batch.rows),
                "completed": batch.completed,
                "failed": batch.failed,
            },
            "metadata": batch.metadata,
        }

    # -- the timeline's shapes (records.WireFormat) ---------------------------------------------

    def visible(self, batch: SimBatch, now: float) -> bool:
        """At once: OpenAI shows a batch as soon as it answers the create."""
        return True

    def failed_row(self, row: BatchRow, row_id: str, request_id: str) -> dict:
        """A row drawn to fail: OpenAI puts the failed response in the row."""
        response = {
            "status_code": 500,
            "request_id": request_id,
            "body": {"error": {"message": row.error["message"], "type": "server_error"}},
        }
        return {"id": row_id, "custom_id": row.custom_id, "response": response, "error": None}

    def hide_price(self, usage: dict) -> None:
        """OpenAI's usage carries tokens, never a price."""
        for name in ("cost", "is_byok", "cost_details"):
            usage.pop(name, None)

    def ended(self, batch: SimBatch) -> list[str]:
        """Rows never run count as failed; the output and error files are written. The custom
        ids the output file holds."""
        if batch.status in ("expired", "cancelled"):
            batch.failed += len(batch.rows) - batch.produced
        self._write_files(batch)
        return [
            r["custom_id"]
            for r in batch.results
            if (r.get("response") or {}).get("status_code") == 200
        ]

    def _write_files(self, batch: SimBatch) -> None:
        """OpenAI's output file (answered rows) and error file (failed, expired, cancelled)."""
        if batch.status == "failed":
            return
        output, errors = [], []
        for row in batch.results:
            ok = (row.get("response") or {}).get("status_code") == 200
            (output if ok else errors).append(orjson.dumps(row))
        code, message = {
            "expired": ("batch_expired", EXPIRED_MESSAGE),
            "cancelled": ("batch_cancelled", CANCELLED_MESSAGE),
        }.get(batch.status, (None, None))
        for row in batch.rows[batch.produced :] if code else ():
            errors.append(
                orjson.dumps(
                    {
                        "id": result_row_id(self.config.seed, batch.id, row.custom_id),
                        "custom_id": row.custom_id,
                        "response": None,
                        "error": {"code": code, "message": message},
                    }
                )
            )
        # An all-failed batch still completes, with no output file (kaapi#723).
        if output:
            batch.output_file_id = self._store_file(batch, "output", output)
        if errors:
            batch.error_file_id = self._store_file(batch, "error", errors)

    def _store_file(self, batch: SimBatch, kind: str, lines: list[bytes]) -> str:
        data = b"\n".join(lines) + b"\n"
        file_id = f"file-{self.book.rng('file', batch.id, kind).getrandbits(96):024x}"
        self.book.files[file_id] = {
            "id": file_id,
            "object": "file",
            "bytes": len(data),
            "created_at": int(time.time()),
            "filename": f"{batch.id}_{kind}.jsonl",
            "purpose": "batch_output",
            "status": "processed",
            "content": data,
        }
        return file_id


def _parse_lines(
    content: bytes, endpoint: str
) -> tuple[list[BatchRow], tuple[str, int] | None, str | None]:
    """The file's requests; a bad line (the whole batch then fails) as (message, line)."""
    rows: list[BatchRow] = []
    seen: set[str] = set()
    model = None
    for number, line in enumerate(content.splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = orjson.loads(line)
        except orjson.JSONDecodeError:
            return rows, (f"line {number} is not valid JSON", number), model
        body = item.get("body") if isinstance(item, dict) else None
        custom_id = item.get("custom_id") if isinstance(item, dict) else None
        if not isinstance(body, dict) or not isinstance(custom_id, str) or not custom_id:
            return rows, (f"line {number} needs custom_id, method, url and body", number), model
        if custom_id in seen:
            return rows, (f"Duplicate custom_id '{custom_id}' on line {number}", number), model
        if item.get("url") != endpoint or item.get("method", "POST") != "POST":
            message = f"line {number}: url must be {endpoint} with method POST"
            return rows, (message, number), model
        seen.add(custom_id)
        model = model or body.get("model")
        if body.get("model") != model:
            return rows, (f"line {number}: every line must use the same model", number), model
        rows.append(BatchRow(custom_id, body))
    return rows, None, model


def _error(status: int, message: str) -> web.Response:
    body = {"error": {"message": message, "type": "invalid_request_error", "param": None}}
    return web.Response(status=status, body=orjson.dumps(body), content_type="application/json")

"""The batches and files one simulator holds, in both dialects: made with their faults drawn,
found, cancelled, advanced on their timeline, and logged for the tests' ground truth.
"""

from __future__ import annotations

import random
import time

import orjson
from aiohttp import web

from draftgen.simulator.batch.records import (
    BatchRow,
    SimBatch,
    WireFormat,
    batch_rng,
    body_digest,
    error,
)
from draftgen.simulator.batch.timeline import Timeline
from draftgen.simulator.exchange import Host


class BatchBook:
    """What both wire formats share: the batches, the uploaded and written files, the request
    count the faults are drawn from, the log; each format adds itself to ``formats``."""

    def __init__(self, simulator: Host) -> None:
        self.sim = simulator
        self.config = simulator.config
        self.batches: dict[str, SimBatch] = {}
        self.files: dict[str, dict] = {}
        self.log: list[dict] = []  # what batch_log_path gets, also in memory for tests
        self.seq = 0
        self._requests = 0
        self._log_file = (
            open(self.config.batch_log_path, "ab")  # noqa: SIM115
            if self.config.batch_log_path
            else None
        )
        discount = self.config.batch_discount
        self.prices = (self.config.prompt_price * discount, self.config.completion_price * discount)
        self.formats: dict[str, WireFormat] = {}
        self.timeline = Timeline(simulator, self.prices, self.write_log, self.formats)

    def close(self) -> None:
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def advance(self, batch: SimBatch, now: float) -> None:
        self.timeline.advance(batch, now)

    def lookup(self, request: web.Request, dialect: str) -> tuple[SimBatch, web.Response | None]:
        """The batch a request names, advanced to now, or the answer refusing the request."""
        if not self.sim._authorized(request):
            return None, self.sim._unauthorized()  # type: ignore[return-value]
        batch = self.batches.get(request.match_info["id"])
        now = time.monotonic()
        if batch is None or batch.dialect != dialect or not self.visible(batch, now):
            self.sim.stats["batch_not_found"] += 1
            return None, error(404, "Batch not found", "not_found")  # type: ignore[return-value]
        self.advance(batch, now)
        return batch, None

    def visible(self, batch: SimBatch, now: float) -> bool:
        return self.formats[batch.dialect].visible(batch, now)

    def cancel(self, request: web.Request, dialect: str) -> tuple[SimBatch, web.Response | None]:
        """The batch a cancel names, its cancel begun (answered in the dialect's shape by the
        caller), or the answer refusing it."""
        batch, problem = self.lookup(request, dialect)
        if problem:
            return batch, problem
        if batch.terminal:
            return batch, error(409, f"batch {batch.id} is already {batch.status}", "conflict")
        if batch.cancel_at is None:
            batch.cancel_at = time.monotonic()
            self.sim.stats["batch_cancels"] += 1
        self.advance(batch, time.monotonic())
        return batch, None

    def newest_first(self, dialect: str) -> list[SimBatch]:
        return sorted(
            (b for b in self.batches.values() if b.dialect == dialect),
            key=lambda b: b.seq,
            reverse=True,
        )

    def new_batch(
        self,
        dialect: str,
        model: str,
        endpoint: str,
        provider: str,
        rows: list[BatchRow],
        metadata: dict | None = None,
        input_file_id: str | None = None,
        invalid: tuple[str, int | None] | None = None,
    ) -> SimBatch:
        self.seq += 1
        rng = self.rng("batch", self.seq)
        prefix = self.formats[dialect].id_prefix
        batch = SimBatch(
            id=f"{prefix}{rng.getrandbits(96):024x}",
            dialect=dialect,
            model=model,
            endpoint=endpoint,
            provider=provider,
            rows=rows,
            created=time.monotonic(),
            created_at=int(time.time()),
            seq=self.seq,
            metadata=metadata,
            input_file_id=input_file_id,
        )
        batch.times["validating"] = batch.created_at
        if model:
            self.sim.models_seen.setdefault(model.removesuffix(":batch"), None)
        if invalid is not None:
            batch.invalid, batch.invalid_line = invalid
        else:
            batch.invalid, batch.invalid_line = self._bad_line(rows)
        self._draw_faults(batch, rng)
        self.batches[batch.id] = batch
        self.sim.stats["batches"] += 1
        self.write_log(
            {
                "event": "create",
                "batch_id": batch.id,
                "dialect": dialect,
                "model": model,
                "at": time.time(),
                "rows": [
                    {"custom_id": row.custom_id, "body_sha256": body_digest(row.body)}
                    for row in rows
                ],
            }
        )
        return batch

    def _draw_faults(self, batch: SimBatch, rng: random.Random) -> None:
        """The batch faults this batch meets: failing validation, expiring, rows that fail."""
        faults, rows = self.config.batch_faults, batch.rows
        if batch.invalid is None and rng.random() < faults.get("batch_failed", 0.0):
            line = rng.randrange(len(rows))
            batch.invalid = f"Request {rows[line].custom_id}: invalid request body"
            batch.invalid_line = line + 1
        if rng.random() < faults.get("expire", 0.0):
            batch.expire_share = rng.uniform(0.2, 0.8)
        row_error = faults.get("row_error", 0.0)
        for row in rows:
            if row_error and rng.random() < row_error:
                row.error = {
                    "type": "server_error",
                    "message": "Upstream provider error",
                    "param": None,
                    "error_type": "provider_unavailable",
                }

    def _bad_line(self, rows: list[BatchRow]) -> tuple[str | None, int | None]:
        """One line the provider refuses after the 202 fails the whole batch."""
        for line, row in enumerate(rows, 1):
            if row.body.get("stream"):
                return f"Request {row.custom_id}: stream is not supported in batch requests", line
            problem = self.sim._parse({**row.body, "model": row.body.get("model") or "m"})[1]
            if problem:
                return f"Request {row.custom_id}: {problem}", line
        return None, None

    # -- faults, randomness, the log -----------------------------------------------------------

    def rng(self, *parts: object) -> random.Random:
        return batch_rng(self.config.seed, *parts)

    def create_fault(self) -> str | None:
        self._requests += 1
        rng = self.rng("create", self._requests)
        draw, cumulative = rng.random(), 0.0
        for name in ("create_lost", "create_5xx", "create_refused"):
            cumulative += self.config.batch_faults.get(name, 0.0)
            if draw < cumulative:
                self.sim.stats[f"batch_{name}"] += 1
                return name
        return None

    def request_fault(self, name: str) -> bool:
        rate = self.config.batch_faults.get(name, 0.0)
        if rate <= 0:
            return False
        self._requests += 1
        hit = self.rng(name, self._requests).random() < rate
        if hit:
            self.sim.stats[f"batch_{name}"] += 1
        return hit

    def write_log(self, record: dict) -> None:
        self.log.append(record)
        if self._log_file is not None:
            self._log_file.write(orjson.dumps(record) + b"\n")
            self._log_file.flush()

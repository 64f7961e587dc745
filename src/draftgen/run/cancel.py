"""``draftgen cancel RUN_DIR``: cancel a run's batches in flight where the API allows it, and say
what is still billed.

A cancel is asked once per batch (repeating it is safe); the batch may still end completed,
failed or expired, and on OpenRouter a cancelled batch returns no rows although the rows that
had finished are charged (BATCH_REFERENCE.md §1). The next ``run --batch`` stores whatever the
batches returned and sends the rest again.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import orjson

from draftgen.generate.batch.dialects import BatchApiError, BatchHttp, get_dialect
from draftgen.generate.batch.errors import BatchRunError
from draftgen.generate.batch.generate import BATCH_META
from draftgen.generate.batch.submit import BatchTarget, reconcile
from draftgen.store.batch_ledger import Ledger
from draftgen.store.database import CompletionWriter, Store


async def cancel_batches(run_dir: Path, api_key_env: str | None = None) -> list[str]:
    """Cancel every live batch of ``run_dir``; one line per batch saying what became of it."""
    store = Store(run_dir, create=False)
    try:
        recorded = store.meta(BATCH_META)
        if recorded is None:
            raise BatchRunError(f"{run_dir} has no batches: it was not run with --batch")
        meta = orjson.loads(recorded)
        writer = CompletionWriter(store.path)
        try:
            ledger = Ledger(store, writer)
            live = ledger.intents(live_only=True)
            if not live:
                return [f"no batches in flight in {run_dir}: nothing to cancel"]
            if meta.get("simulated"):
                return [
                    f"the {len(live)} batches in flight were sent to the built-in simulator, "
                    "which stopped with the run that started it: nothing runs or is billed, and "
                    "the next run --batch sends their rows again"
                ]
            variable = api_key_env or meta.get("api_key_env") or "OPENROUTER_API_KEY"
            api_key = os.environ.get(variable)
            if not api_key:
                state = "is empty" if variable in os.environ else "is not set"
                raise BatchRunError(
                    f"environment variable {variable} {state}; export the key the run used "
                    "in it, or name another one with --api-key-env"
                )
            dialect = get_dialect(meta["dialect"])
            async with BatchHttp(meta["url"], api_key) as http:
                target = BatchTarget(
                    dialect, http, meta["url"], meta["model"], None, meta.get("grace", 120.0)
                )
                return [await _cancel_one(target, ledger, intent) for intent in live]
        finally:
            await asyncio.to_thread(writer.close)
    finally:
        store.close()


async def _cancel_one(target: BatchTarget, ledger: Ledger, intent) -> str:
    if intent.state == "submitting":
        try:
            outcome = await reconcile(target, ledger, intent)
        except BatchApiError as exc:
            return f"intent {intent.nonce}: could not list the batches ({exc}); try again"
        if outcome == "absent":
            return (
                f"intent {intent.nonce}: its create never made a batch; nothing runs or is "
                "billed, and the next run sends its rows again"
            )
        if outcome == "unknown":
            return (
                f"intent {intent.nonce}: its create got no answer and no batch of its shape is "
                "listed yet; run draftgen cancel again in a minute"
            )
        intent = ledger.intent(intent.nonce)
    batch_id = intent.batch_id
    try:
        status, info, message = await target.dialect.cancel(target.http, batch_id)
    except BatchApiError as exc:
        return f"batch {batch_id}: the cancel failed ({exc}); try again"
    if status == 200 and info is not None:
        await ledger.note(intent.nonce, cancel_requested_at=time.time())
        await ledger.record_status(intent.nonce, info.status, info.counts(), info.cost)
        finished = info.completed or 0
        if not target.dialect.cancelled_rows_return:
            billed = (
                f"{finished} of {intent.rows} rows had finished: they are billed, and a "
                "cancelled OpenRouter batch returns no rows"
            )
        else:
            billed = (
                f"{finished} of {intent.rows} rows had finished: they are billed and come back "
                "in its output file, which the next run stores"
            )
        return (
            f"batch {batch_id}: {info.status} (it may still end completed if the provider "
            f"finishes first); {billed}"
        )
    if status == 409:
        return f"batch {batch_id}: already final ({message}); the next run stores its results"
    if status == 403:
        return (
            f"batch {batch_id}: cancel refused (HTTP 403: {message}); only its organization can "
            "cancel it, so it runs to the end and is billed"
        )
    if status == 404:
        return (
            f"batch {batch_id}: the API cannot cancel it (HTTP 404: {message}); it runs to the "
            "end and is billed, and the next run stores its results"
        )
    return f"batch {batch_id}: the cancel answered HTTP {status} ({message}); try again"

"""Submitting a batch so that no row is ever paid twice, and finding out what a lost create did.

There is no idempotency key and (on OpenRouter) no metadata: before every create an intent is
committed (a nonce, the rows, a hash of the bodies) and every ``custom_id`` is ``<nonce>-<row>``.
The batch id is recorded the moment it returns. An intent left without one (a timeout, a 5xx, a
``kill -9`` between create and record) is reconciled against the API's listing, and its rows are
sent again only once the batch is proven absent: OpenRouter's create takes no idempotency key, so a
blind retry could pay for a batch twice.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import time
from dataclasses import dataclass

from draftgen.generate.batch import steps
from draftgen.generate.batch.dialects import (
    CHAT_ENDPOINT,
    BatchApiError,
    BatchHttp,
    BatchInfo,
    CreateRefused,
    CreateUnknown,
    Dialect,
)
from draftgen.store.batch_ledger import Intent, Ledger, PlannedRow

_log = logging.getLogger("draftgen.batch")
CLOCK_SKEW = 60.0  # seconds the API's clock may be behind ours when listing "created after"


@dataclass
class BatchTarget:
    """Where batches go and what they are made of: the same for every batch of a run."""

    dialect: Dialect
    http: BatchHttp
    url: str  # the batch API root, as stored and shown
    model: str  # the model named in the create (or in each line: openai-files)
    provider: dict | None  # OpenRouter's batch-level routing (only, allow_fallbacks)
    grace: float  # seconds a created batch may stay unseen before it is proven absent


def new_nonce() -> str:
    """``dg`` + 10 hex digits: with ``-NNNNN`` a custom_id of 18 characters (the limit is 64)."""
    return "dg" + secrets.token_hex(5)


def custom_id(nonce: str, index: int) -> str:
    return f"{nonce}-{index:05d}"


def nonce_of(custom: str) -> str:
    return custom.rpartition("-")[0]


def body_hash(rows: list[tuple[str, PlannedRow]]) -> str:
    digest = hashlib.sha256()
    for cid, row in rows:
        digest.update(cid.encode() + b"\0" + row.body + b"\n")
    return digest.hexdigest()


async def submit(
    target: BatchTarget, ledger: Ledger, rows: list[PlannedRow], worst_cost: float | None
) -> Intent:
    """Commit an intent for ``rows``, create its batch, record the batch id.

    Returns the intent: ``submitted`` with its batch id, or still ``submitting`` when the create
    got no clear answer (reconciled later). A refusal settles the intent (its rows are free
    again) and raises ``CreateRefused``.
    """
    intent, named = _new_intent(target, rows, worst_cost)
    await ledger.add_intent(intent, named)
    files = target.dialect.name == "openai-files"
    steps.reached("before_upload" if files else "before_create")
    info = await _create_batch(target, ledger, intent, named)
    if info is None:
        return ledger.intent(intent.nonce)
    steps.reached("after_create")
    await ledger.record_batch(intent.nonce, info.id, info.status)
    steps.reached("after_record")
    return ledger.intent(intent.nonce)


def _new_intent(
    target: BatchTarget, rows: list[PlannedRow], worst_cost: float | None
) -> tuple[Intent, list[tuple[str, PlannedRow]]]:
    """A new nonce's intent for ``rows``, and the rows each named by its custom_id."""
    nonce = new_nonce()
    named = [(custom_id(nonce, index), row) for index, row in enumerate(rows)]
    intent = Intent(
        nonce=nonce,
        dialect=target.dialect.name,
        url=target.url,
        model=target.model,
        endpoint=CHAT_ENDPOINT,
        rows=len(rows),
        body_hash=body_hash(named),
        created_at=time.time(),
        worst_cost=worst_cost,
    )
    return intent, named


async def _create_batch(
    target: BatchTarget, ledger: Ledger, intent: Intent, named: list[tuple[str, PlannedRow]]
) -> BatchInfo | None:
    """Upload (openai-files) and create the intent's batch: its info, or None when the create
    got no clear answer (noted on the intent). A refusal, or an upload that failed, settles the
    intent before the error goes on."""
    nonce = intent.nonce
    files = target.dialect.name == "openai-files"

    async def uploaded(file_id: str) -> None:
        await ledger.record_file(nonce, file_id)
        intent.input_file_id = file_id
        steps.reached("after_upload")
        steps.reached("before_create")

    try:
        return await target.dialect.submit(
            target.http,
            nonce,
            target.model,
            [(cid, row.body) for cid, row in named],
            target.provider,
            uploaded,
        )
    except CreateRefused as exc:
        await ledger.settle_unsent(nonce, "refused", str(exc))
        raise
    except CreateUnknown as exc:
        _log.warning(
            "batch %s: %s; it is reconciled against the API's listing before any of its %d "
            "rows is sent again",
            nonce,
            exc,
            len(named),
        )
        await ledger.note(nonce, create_ended=time.time(), create_error=str(exc))
        return None
    except BatchApiError as exc:
        if files and intent.input_file_id is None:
            # The upload failed, so no create was sent: nothing can exist.
            await ledger.settle_unsent(nonce, "absent", f"upload failed: {exc}")
        raise


def _same_model(a: str | None, b: str | None) -> bool:
    if a is None or b is None:
        return True  # not reported: no evidence against
    return a.removesuffix(":batch") == b.removesuffix(":batch")


def matches(intent: Intent, info: BatchInfo) -> bool:
    """Whether ``info`` could be the batch ``intent``'s create made: model, endpoint, size."""
    return (
        _same_model(intent.model, info.model)
        and (info.endpoint is None or info.endpoint == intent.endpoint)
        and (info.total is None or info.total == intent.rows)
    )


def deadline(intent: Intent, grace: float) -> float:
    """When an unseen batch of ``intent`` counts as never made: ``grace`` seconds after the
    intent, or after its create attempt ended if that is known and later."""
    ended = (intent.detail or {}).get("create_ended")
    start = max(intent.created_at, ended) if isinstance(ended, (int, float)) else intent.created_at
    return start + grace


async def reconcile(target: BatchTarget, ledger: Ledger, intent: Intent) -> str:
    """Settle an intent whose create got no answer: ``found`` (its batch id is recorded now),
    ``absent`` (proven never made: its rows are free) or ``unknown`` (ask again later)."""
    files = target.dialect.name == "openai-files"
    if files and intent.input_file_id is None:
        # The file id is recorded before any create is sent: without one, none was.
        await ledger.settle_unsent(intent.nonce, "absent", "no create was sent (no upload)")
        return "absent"
    listed = await target.dialect.list_since(target.http, intent.created_at - CLOCK_SKEW)
    bound = ledger.bound_batch_ids()
    if files:
        for info in listed:
            if info.id in bound:
                continue
            if info.nonce == intent.nonce or (
                intent.input_file_id and info.input_file_id == intent.input_file_id
            ):
                await ledger.record_batch(intent.nonce, info.id, info.status)
                _log.info("batch %s of intent %s found by its metadata", info.id, intent.nonce)
                return "found"
        if _absent_or_unknown(intent, target.grace):
            return await _settle_absent(ledger, intent)
        return "unknown"
    return await _reconcile_by_shape(target, ledger, intent, listed, bound)


async def _reconcile_by_shape(
    target: BatchTarget,
    ledger: Ledger,
    intent: Intent,
    listed: list[BatchInfo],
    bound: set[str],
) -> str:
    """OpenRouter keeps no metadata: a batch is ours when it has our shape (model, endpoint,
    request count) and either our nonce shows in its results or no other intent could own it."""
    candidates = [b for b in listed if b.id not in bound and matches(intent, b)]
    ours = {i.nonce: i for i in ledger.intents(live_only=True) if i.state == "submitting"}
    undecided = []
    for info in candidates:
        nonces = await _nonces_in(target, info)
        owner = next((n for n in nonces if n in ours), None)
        if owner is not None:
            await ledger.record_batch(owner, info.id, info.status)
            _log.info("batch %s belongs to intent %s (its custom_ids say so)", info.id, owner)
            ours.pop(owner)
        elif not nonces:
            undecided.append(info)
        # else: another client's batch of the same shape (the listing is workspace-wide)
    if intent.nonce not in ours:
        return "found"
    rivals = [i for i in ours.values() if matches(i, _shape(intent))]
    failed = [b for b in undecided if b.status == "failed"]
    if failed or (len(undecided) == 1 and len(rivals) == 1):
        # One batch, one intent of its shape: it is this one's. (A failed batch billed nothing
        # and holds no rows: whichever intent of its shape takes it, those rows go back.)
        info = (failed or undecided)[0]
        await ledger.record_batch(intent.nonce, info.id, info.status)
        _log.info("batch %s of intent %s found in the listing", info.id, intent.nonce)
        return "found"
    if not undecided and _absent_or_unknown(intent, target.grace):
        return await _settle_absent(ledger, intent)
    return "unknown"


def _shape(intent: Intent) -> BatchInfo:
    return BatchInfo("", "", model=intent.model, endpoint=intent.endpoint, total=intent.rows)


async def _nonces_in(target: BatchTarget, info: BatchInfo) -> set[str]:
    """The nonces of the custom_ids a batch's results show (none while nothing is readable)."""
    try:
        page = await target.dialect.results(target.http, info, None)
    except BatchApiError:
        return set()
    return {nonce_of(row.custom_id) for row in page.rows}


def _absent_or_unknown(intent: Intent, grace: float) -> bool:
    return time.time() >= deadline(intent, grace)


async def _settle_absent(ledger: Ledger, intent: Intent) -> str:
    await ledger.settle_unsent(
        intent.nonce, "absent", "no batch of this shape appeared in the listing"
    )
    _log.info(
        "intent %s: no batch appeared within the grace period; its %d rows are sent again",
        intent.nonce,
        intent.rows,
    )
    return "absent"

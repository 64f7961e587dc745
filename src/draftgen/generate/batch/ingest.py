"""Reading a finished batch's results into the store, idempotently, a few rows at a time.

Each row becomes a completion stored exactly as a live one (the request blob the row was planned
with, usage, cost, provider, finish reason), so reconstruction, verification and export do not
know it came from a batch. Rows and the page cursor commit together; a page read again after a
crash stores nothing twice (a completion's key and a row's custom_id are unique).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import orjson

from draftgen.backends.base import ApiError, parse_completion
from draftgen.generate.batch import steps
from draftgen.generate.batch.dialects import BatchInfo, ResultPage, ResultRow, RowError
from draftgen.generate.batch.submit import BatchTarget
from draftgen.records import Completion
from draftgen.store.batch_ledger import (
    RESULTS_READ,
    Intent,
    Ledger,
    RowRecord,
    cursor_statement,
    row_outcome_statement,
)
from draftgen.store.database import INSERT_FAILURE, completion_statements

_log = logging.getLogger("draftgen.batch")
CHUNK_ROWS = 64  # rows committed together: a page of 1,000 is ten transactions or so
# What happened to the rows a final batch did not answer, by its status.
UNANSWERED = {
    "expired": ("expired", "batch_expired", "the batch expired before this row ran"),
    "cancelled": ("cancelled", "batch_cancelled", "the batch was cancelled before this row ran"),
    "failed": ("batch_failed", "batch_failed", "the batch failed"),
}


@dataclass
class Unanswered:
    """A row of the batch that did not come back with a completion."""

    key: str
    source_id: str
    turn: int
    outcome: str  # ledger outcome: failed, rejected, expired, cancelled, missing, batch_failed
    error: dict
    retryable: bool


@dataclass
class IngestReport:
    stored: int = 0
    unanswered: list[Unanswered] = field(default_factory=list)
    foreign: int = 0  # rows whose custom_id is not one of this batch's (never expected)
    sentence: str | None = None  # why the whole batch failed


@dataclass
class _Ingestion:
    """What one ``ingest`` reads and fills: the batch's rows by custom_id, those already settled
    (``done``), each key's earlier attempt errors, and the report."""

    target: BatchTarget
    ledger: Ledger
    intent: Intent
    rows: dict[str, RowRecord]
    done: set[str]
    earlier: dict[str, list[dict]]
    report: IngestReport
    on_stored: Callable[[str, Completion], None] | None


async def ingest(
    target: BatchTarget,
    ledger: Ledger,
    intent: Intent,
    info: BatchInfo,
    on_stored: Callable[[str, Completion], None] | None = None,
) -> IngestReport:
    """Store every result of final batch ``info`` (from the intent's cursor on), then settle the
    rows it did not answer and mark the intent ingested."""
    rows = ledger.rows_of(intent.nonce)
    earlier = ledger.earlier_errors(sorted({r.key for r in rows.values()}))
    report = IngestReport()
    done = {cid for cid, r in rows.items() if r.outcome is not None}
    state = _Ingestion(target, ledger, intent, rows, done, earlier, report, on_stored)
    if info.status == "failed":
        reason = info.error or "the API gave no reason"
        report.sentence = (
            f"batch {info.id} failed: {reason}; its {len(rows)} rows go back to pending"
        )
        _log.warning(report.sentence)
    elif intent.results_cursor != RESULTS_READ:  # else every page is stored already
        await _store_pages(state, info)
    if report.foreign:
        _log.warning(
            "batch %s returned %d rows whose custom_id is not one of intent %s's; they were "
            "left out",
            info.id,
            report.foreign,
            intent.nonce,
        )
    steps.reached("before_finish")
    await _settle_unanswered(state, info)
    return report


async def _store_pages(state: _Ingestion, info: BatchInfo) -> None:
    """Read the batch's result pages from the intent's cursor on, storing each page in chunks of
    ``CHUNK_ROWS`` rows, the page's last chunk with the cursor of the next page."""
    cursor = state.intent.results_cursor or None
    while True:
        page = await state.target.dialect.results(state.target.http, info, cursor)
        rows = page.rows
        # An empty page is one empty chunk: its cursor is committed all the same.
        chunks = [rows[i : i + CHUNK_ROWS] for i in range(0, len(rows), CHUNK_ROWS)] or [[]]
        for number, chunk in enumerate(chunks):
            last = number == len(chunks) - 1
            await _store_chunk(state, chunk, page, last)
            steps.reached("after_page" if last else "mid_page")
        if page.next_cursor is None:
            break
        cursor = page.next_cursor


async def _store_chunk(
    state: _Ingestion, chunk: list[ResultRow], page: ResultPage, last: bool
) -> None:
    """Commit one chunk of ``page``'s rows in one transaction (with the next page's cursor when
    it is the page's ``last``), then count what it stored and hand each one to ``on_stored``."""
    statements: list = []
    stored: list[tuple[str, Completion]] = []
    for result in chunk:
        record = state.rows.get(result.custom_id)
        if record is None:
            state.report.foreign += 1
            continue
        if result.custom_id in state.done:
            continue  # stored before a crash: this page is being read again
        state.done.add(result.custom_id)
        statements += _row_statements(
            state.target, state.intent, record, result, state.earlier, state.report, stored
        )
    if last:
        statements.append(cursor_statement(state.intent.nonce, page.next_cursor))
    if statements:
        await state.ledger.writer.write(statements)
    for key, completion in stored:
        state.report.stored += 1
        if state.on_stored is not None:
            state.on_stored(key, completion)


async def _settle_unanswered(state: _Ingestion, info: BatchInfo) -> None:
    """Give every row the batch did not answer its outcome (by the batch's status), record the
    batch's final status and mark the intent ingested, in one transaction."""
    outcome, kind, message = UNANSWERED.get(
        info.status, ("missing", "batch_row_missing", "the batch returned no result for this row")
    )
    if info.status == "failed":
        message = f"the batch failed: {info.error or 'no reason given'}"
    error = _error(state.target, kind, message, None)
    for cid, record in state.rows.items():
        if cid not in state.done:
            state.report.unanswered.append(
                Unanswered(record.key, record.source_id, record.turn, outcome, error, True)
            )
    nonce = state.intent.nonce
    await state.ledger.writer.write(
        [
            (
                "UPDATE batch_rows SET outcome = ?, error = ? WHERE nonce = ? AND outcome IS NULL",
                (outcome, orjson.dumps(error).decode(), nonce),
            ),
            state.ledger.status_statement(nonce, info.status, info.counts(), info.cost),
            (
                "UPDATE batch_intents SET state = 'ingested', error = ? WHERE nonce = ?",
                (state.report.sentence, nonce),
            ),
        ]
    )


def _row_statements(
    target: BatchTarget,
    intent: Intent,
    record: RowRecord,
    result: ResultRow,
    earlier: dict[str, list[dict]],
    report: IngestReport,
    stored: list[tuple[str, Completion]],
) -> list:
    problem: RowError | None = result.error
    completion = None
    if result.body is not None:
        try:
            completion = parse_completion(orjson.dumps(result.body))
        except ApiError as exc:
            problem = RowError(exc.kind, exc.message, exc.retryable and not exc.fatal, exc.status)
    if completion is not None:
        completion.endpoint = target.url
        errors = earlier.get(record.key, [])
        statements = completion_statements(
            record.key,
            record.source_id,
            record.turn,
            record.request,
            completion,
            len(errors) + 1,
            errors,
            time.time() - intent.created_at,  # submitted to stored: a batch row's latency
        )
        stored.append((record.key, completion))
        return statements + [row_outcome_statement(record.custom_id, "done", None)]
    assert problem is not None
    error = _error(target, problem.kind, problem.message, problem.status)
    outcome = "failed" if problem.retryable else "rejected"
    # OpenAI's error file names the rows a batch did not run: as if they had not come back.
    outcome = {"batch_expired": "expired", "batch_cancelled": "cancelled"}.get(
        problem.kind, outcome
    )
    report.unanswered.append(
        Unanswered(record.key, record.source_id, record.turn, outcome, error, problem.retryable)
    )
    statements = [row_outcome_statement(record.custom_id, outcome, error)]
    if not problem.retryable:
        # As the live client does with a 400: this prompt will not work, recorded as failed
        # with the row, so that no crash can leave one without the other.
        errors = [*earlier.get(record.key, []), error]
        failure = (record.key, record.source_id, record.turn, problem.kind, len(errors))
        statements.append((INSERT_FAILURE, (*failure, orjson.dumps(errors).decode(), time.time())))
    return statements


def _error(target: BatchTarget, kind: str, message: str, status: int | None) -> dict:
    """An attempt error as the live client records one (kind, message, status, at, endpoint)."""
    return {
        "kind": kind,
        "message": message,
        "status": status,
        "at": time.time(),
        "endpoint": target.url,
    }

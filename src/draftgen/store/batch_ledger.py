"""The batch tables of a run directory: intents (one per create, committed before it is sent)
and the rows each holds.

Reads go through the store's connection; writes through the run's ``CompletionWriter``, so a
write is durable once awaited and a result row and its completion commit together.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import orjson

from draftgen.store.batch_timing import IN_FLIGHT, batch_timing
from draftgen.store.database import CompletionWriter, Store

# An intent's states: its batch may exist (submitting: create sent or about to be; submitted:
# its id is known), or it is settled (ingested: results stored; absent: proven never made;
# refused: the API said no).
LIVE_STATES = ("submitting", "submitted")
# Row outcomes that send the row again (each counts against the retry budget), and those of a
# row that was never sent (these do not count).
RETRIED_OUTCOMES = ("failed", "expired", "cancelled", "missing", "batch_failed")
UNSENT_OUTCOMES = ("absent", "refused")


@dataclass
class Intent:
    nonce: str
    dialect: str
    url: str
    model: str
    endpoint: str
    rows: int
    body_hash: str
    created_at: float
    state: str = "submitting"
    worst_cost: float | None = None
    batch_id: str | None = None
    input_file_id: str | None = None
    status: str | None = None
    status_at: float | None = None
    request_counts: dict | None = None
    cost: float | None = None
    error: str | None = None
    results_cursor: str | None = None
    detail: dict | None = None

    @property
    def live(self) -> bool:
        return self.state in LIVE_STATES


@dataclass
class PlannedRow:
    """One request of a batch: the turn it answers and what is stored with its completion."""

    key: str
    source_id: str
    turn: int
    request: bytes  # {"messages", "tools", "rendering"}, as a live completion stores it
    body: bytes  # the endpoint body, as the dialect sends it
    prompt_tokens: int | None = None


@dataclass
class RowRecord:
    custom_id: str
    nonce: str
    key: str
    source_id: str
    turn: int
    request: bytes
    outcome: str | None
    error: dict | None


INTENT_COLUMNS = (
    "nonce, dialect, url, model, endpoint, rows, body_hash, created_at, state, worst_cost,"
    " batch_id, input_file_id, status, status_at, request_counts, cost, error, results_cursor,"
    " detail"
)


class Ledger:
    def __init__(self, store: Store, writer: CompletionWriter) -> None:
        self.db = store.db
        self.writer = writer

    # -- reads ----------------------------------------------------------------------------------

    def intents(self, live_only: bool = False) -> list[Intent]:
        sql = f"SELECT {INTENT_COLUMNS} FROM batch_intents"
        if live_only:
            sql += " WHERE state IN ('submitting', 'submitted')"
        return [_intent(row) for row in self.db.execute(sql + " ORDER BY created_at, nonce")]

    def intent(self, nonce: str) -> Intent:
        row = self.db.execute(
            f"SELECT {INTENT_COLUMNS} FROM batch_intents WHERE nonce = ?", (nonce,)
        ).fetchone()
        return _intent(row)

    def live_keys(self) -> set[str]:
        """Keys in a batch that may still answer them: never sent again meanwhile."""
        return {
            key
            for (key,) in self.db.execute(
                "SELECT r.key FROM batch_rows r JOIN batch_intents i ON i.nonce = r.nonce"
                " WHERE r.outcome IS NULL AND i.state IN ('submitting', 'submitted')"
            )
        }

    def bound_batch_ids(self) -> set[str]:
        return {
            batch_id
            for (batch_id,) in self.db.execute(
                "SELECT batch_id FROM batch_intents WHERE batch_id IS NOT NULL"
            )
        }

    def rows_of(self, nonce: str) -> dict[str, RowRecord]:
        cursor = self.db.execute(
            "SELECT custom_id, nonce, key, source_id, turn, request, outcome, error"
            " FROM batch_rows WHERE nonce = ?",
            (nonce,),
        )
        return {
            row[0]: RowRecord(*row[:7], orjson.loads(row[7]) if row[7] else None) for row in cursor
        }

    def earlier_errors(self, keys: list[str]) -> dict[str, list[dict]]:
        """Per key, the error of each earlier submission that did not answer it."""
        found: dict[str, list[dict]] = {}
        for index in range(0, len(keys), 500):
            part = keys[index : index + 500]
            marks = ",".join("?" * len(part))
            for key, error in self.db.execute(
                f"SELECT key, error FROM batch_rows WHERE key IN ({marks}) AND outcome IN"
                f" ({','.join(repr(o) for o in RETRIED_OUTCOMES)}) ORDER BY rowid",
                part,
            ):
                found.setdefault(key, []).append(orjson.loads(error) if error else {})
        return found

    def figures(self) -> dict:
        """Intents by state, batches by status, rows in flight (not those of a batch that ended
        before a run stored its results): what ``status`` shows."""
        by_state = dict(self.db.execute("SELECT state, count(*) FROM batch_intents GROUP BY 1"))
        rows = self.db.execute(
            "SELECT count(*) FROM batch_rows r JOIN batch_intents i ON i.nonce = r.nonce"
            f" WHERE r.outcome IS NULL AND {IN_FLIGHT}"
        ).fetchone()[0]
        return {
            "by_state": by_state,
            "rows_in_flight": rows,
            "timing": batch_timing(self.db, time.time()),
        }

    # -- writes ---------------------------------------------------------------------------------

    async def add_intent(self, intent: Intent, rows: list[tuple[str, PlannedRow]]) -> None:
        """The intent and its rows, durable before the create is sent."""
        statements = [
            (
                "INSERT INTO batch_intents (nonce, dialect, url, model, endpoint, rows,"
                " body_hash, created_at, state, worst_cost) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    intent.nonce,
                    intent.dialect,
                    intent.url,
                    intent.model,
                    intent.endpoint,
                    intent.rows,
                    intent.body_hash,
                    intent.created_at,
                    intent.state,
                    intent.worst_cost,
                ),
            )
        ]
        statements += [
            (
                "INSERT INTO batch_rows (custom_id, nonce, key, source_id, turn, request,"
                " prompt_tokens) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (cid, intent.nonce, r.key, r.source_id, r.turn, r.request, r.prompt_tokens),
            )
            for cid, r in rows
        ]
        await self.writer.write(statements)

    async def record_file(self, nonce: str, file_id: str) -> None:
        await self.writer.write(
            [("UPDATE batch_intents SET input_file_id = ? WHERE nonce = ?", (file_id, nonce))]
        )

    async def note(self, nonce: str, **detail: object) -> None:
        """Facts about an intent kept for reconciliation (e.g. when its create attempt ended)."""
        current = self.intent(nonce).detail or {}
        await self.writer.write(
            [
                (
                    "UPDATE batch_intents SET detail = ? WHERE nonce = ?",
                    (orjson.dumps({**current, **detail}).decode(), nonce),
                )
            ]
        )

    async def record_batch(self, nonce: str, batch_id: str, status: str | None) -> None:
        """The batch the create made: from now on the intent's rows are that batch's."""
        await self.writer.write(
            [
                (
                    "UPDATE batch_intents SET batch_id = ?, state = 'submitted', status = ?,"
                    " status_at = ? WHERE nonce = ?",
                    (batch_id, status, time.time(), nonce),
                )
            ]
        )

    def status_statement(self, nonce: str, status: str, counts: dict, cost: float | None):
        return (
            "UPDATE batch_intents SET status = ?, status_at = ?, request_counts = ?,"
            " cost = coalesce(?, cost) WHERE nonce = ?",
            (status, time.time(), orjson.dumps(counts).decode(), cost, nonce),
        )

    async def record_status(
        self, nonce: str, status: str, counts: dict, cost: float | None
    ) -> None:
        await self.writer.write([self.status_statement(nonce, status, counts, cost)])

    async def settle_unsent(self, nonce: str, state: str, error: str) -> None:
        """An intent whose batch was never made (``absent``, ``refused``): its rows are free."""
        outcome = "absent" if state == "absent" else "refused"
        await self.writer.write(
            [
                (
                    "UPDATE batch_intents SET state = ?, error = ? WHERE nonce = ?",
                    (state, error, nonce),
                ),
                (
                    "UPDATE batch_rows SET outcome = ? WHERE nonce = ? AND outcome IS NULL",
                    (outcome, nonce),
                ),
            ]
        )


def row_outcome_statement(custom_id: str, outcome: str, error: dict | None):
    return (
        "UPDATE batch_rows SET outcome = ?, error = ? WHERE custom_id = ?",
        (outcome, orjson.dumps(error).decode() if error else None, custom_id),
    )


RESULTS_READ = "\u0000end"  # results_cursor once the last page is stored


def cursor_statement(nonce: str, cursor: str | None):
    """Where reading resumes: the next page's cursor, or ``RESULTS_READ`` after the last."""
    return (
        "UPDATE batch_intents SET results_cursor = ? WHERE nonce = ?",
        (cursor if cursor is not None else RESULTS_READ, nonce),
    )


def _intent(row: tuple) -> Intent:
    values = dict(zip([c.strip() for c in INTENT_COLUMNS.split(",")], row, strict=True))
    values["request_counts"] = (
        orjson.loads(values["request_counts"]) if values["request_counts"] else None
    )
    values["detail"] = orjson.loads(values["detail"]) if values["detail"] else None
    return Intent(**values)

"""How long a run's batches take and what they cost: the age of those in flight, how long this
run's finished ones took, when the live round should end (a band: typically, and at the latest by
the completion window), the worst case of what is in flight, what finished batches billed beyond
the rows they returned, and each batch as a round of the report's chart. One place read by
progress, status, ``--max-cost`` and the report.
"""

from __future__ import annotations

import sqlite3
import statistics
import time

from draftgen.redact import usd
from draftgen.store.schema import StorePart

# Both batch dialects create batches with completion_window "24h" (the only window OpenRouter's
# and OpenAI's Batch APIs accept): a batch
# not finished by then expires, and its unfinished rows are sent again in the next round.
WINDOW_SECONDS = 24 * 3600

# A batch's final statuses. An intent whose batch reached one has ended, whether or not a run has
# stored its results yet (``draftgen cancel`` and a poll record the status first): it is not in
# flight, and what the API reports it cost is charged.
FINAL_STATUSES = ("completed", "failed", "expired", "cancelled")
_FINAL = "(" + ", ".join(f"'{status}'" for status in FINAL_STATUSES) + ")"
# SQL conditions on batch_intents: the intents whose batch may still run, and those that ended.
IN_FLIGHT = f"(state IN ('submitting', 'submitted') AND coalesce(status, '') NOT IN {_FINAL})"
ENDED = f"(state = 'ingested' OR (state IN ('submitting', 'submitted') AND status IN {_FINAL}))"


class Batches(StorePart):
    """``Store.batches``: the figures of a run's batches (``run --batch``), as status shows them."""

    def batch_figures(self) -> dict:
        """Batches of ``run --batch`` (empty for a live run): intents by state, final batches by
        status, the ones in flight, and what the API charged (``usage.cost``) against the cost
        of the rows that came back. A batch that reached a final status (recorded by ``draftgen
        cancel`` or a poll) is final before a run stores its results."""
        one = lambda sql: self.db.execute(sql).fetchone()  # noqa: E731
        if not one("SELECT count(*) FROM batch_intents")[0]:
            return {}
        in_flight = [
            {
                "nonce": nonce,
                "batch_id": batch_id,
                "state": state,
                "status": status,
                "rows": rows,
                "submitted_at": created_at,
                "status_at": status_at,
            }
            for nonce, batch_id, state, status, rows, created_at, status_at in self.db.execute(
                "SELECT nonce, batch_id, state, status, rows, created_at, status_at"
                f" FROM batch_intents WHERE {IN_FLIGHT} ORDER BY created_at, nonce"
            )
        ]
        charged, known = one(
            f"SELECT coalesce(sum(cost), 0), count(cost) FROM batch_intents WHERE {ENDED}"
        )
        rows_cost = one(
            "SELECT coalesce(sum(c.cost), 0) FROM batch_rows r JOIN completions c ON c.key = r.key"
            " WHERE r.outcome = 'done'"
        )[0]
        return {
            "by_state": dict(
                self.db.execute("SELECT state, count(*) FROM batch_intents GROUP BY 1")
            ),
            "final": dict(
                self.db.execute(
                    f"SELECT status, count(*) FROM batch_intents WHERE {ENDED}"
                    " GROUP BY 1 ORDER BY 2 DESC"
                )
            ),
            "in_flight": in_flight,
            "rows_in_flight": sum(b["rows"] for b in in_flight),
            "rows_sent": one("SELECT count(*) FROM batch_rows")[0],
            "rows_answered": one("SELECT count(*) FROM batch_rows WHERE outcome = 'done'")[0],
            "rows_sent_again": one(
                "SELECT count(*) FROM batch_rows WHERE outcome IN"
                " ('failed', 'expired', 'cancelled', 'missing', 'batch_failed')"
            )[0],
            "charged": round(charged, 9) if known else None,  # None: the API reports none
            "rows_cost": round(rows_cost, 9),
            "timing": batch_timing(self.db, time.time()),
        }


def batch_timing(db: sqlite3.Connection, now: float) -> dict:
    """The timing figures of the batches in ``db`` (a run store's connection) at ``now``."""
    live = db.execute(
        f"SELECT created_at, worst_cost FROM batch_intents WHERE {IN_FLIGHT}"
    ).fetchall()
    took = [
        seconds
        for (seconds,) in db.execute(
            f"SELECT status_at - created_at FROM batch_intents WHERE {ENDED}"
            " AND status = 'completed' AND status_at IS NOT NULL AND status_at >= created_at"
        )
    ]
    typical = statistics.median(took) if took else None
    timing: dict = {
        "window_seconds": WINDOW_SECONDS,
        "finished_batches": len(took),
        "typical_seconds": typical,
        "oldest_age_seconds": now - min(created for created, _ in live) if live else None,
        # None: a batch in flight was sent unpriced (no --max-tokens or no listed price).
        "worst_cost_in_flight": None
        if any(worst is None for _, worst in live)
        else round(sum(worst for _, worst in live), 9),
        "eta_seconds": None,
        "billed_without_rows": round(billed_without_rows(db), 9),
    }
    if live:
        # The round ends with its newest batch: typically after this run's median duration,
        # and at the latest when its window closes.
        newest = max(created for created, _ in live)
        timing["eta_seconds"] = [
            max(0.0, newest + typical - now) if typical is not None else None,
            max(0.0, newest + WINDOW_SECONDS - now),
        ]
    return timing


def duration_text(seconds: float | None) -> str:
    """``1h02m``, ``24h``, ``14m``, ``40s``; ``?`` when unknown."""
    if seconds is None:
        return "?"
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m" if minutes else f"{hours}h"
    return f"{minutes}m" if minutes else f"{secs}s"


def timing_text(timing: dict) -> str:
    """One line of the figures: what status, the progress line and the report show."""
    if not timing:
        return ""
    parts = []
    if timing["oldest_age_seconds"] is not None:
        parts.append(f"oldest batch in flight {duration_text(timing['oldest_age_seconds'])}")
    if timing["typical_seconds"] is not None:
        parts.append(
            f"finished batches took {duration_text(timing['typical_seconds'])} "
            f"(median of {timing['finished_batches']})"
        )
    eta = timing["eta_seconds"]
    if eta is not None:
        window = duration_text(timing["window_seconds"])
        typical = f"about {duration_text(eta[0])}, " if eta[0] is not None else ""
        parts.append(
            f"this round ends in {typical}at the latest {duration_text(eta[1])} "
            f"(the {window} window)"
        )
        worst = timing["worst_cost_in_flight"]
        parts.append(
            f"worst case in flight {usd(worst)}"
            if worst is not None
            else "worst case in flight unknown (a batch in flight was sent without --max-tokens "
            "or a listed batch price)"
        )
    return "; ".join(parts)


def billed_without_rows(db: sqlite3.Connection) -> float:
    """What ended batches charged (``usage.cost``) beyond the cost of their rows that are
    stored: a cancelled batch bills its finished rows and returns none, and one whose results no
    run has stored yet is charged all the same. The run's cost counts it."""
    return db.execute(
        "SELECT coalesce(sum(max(0, i.cost - coalesce((SELECT sum(c.cost) FROM batch_rows r"
        " JOIN completions c ON c.key = r.key WHERE r.nonce = i.nonce AND r.outcome = 'done'),"
        f" 0))), 0) FROM batch_intents i WHERE {ENDED} AND i.cost IS NOT NULL"
    ).fetchone()[0]


def batch_rounds(db: sqlite3.Connection, now: float) -> list[dict]:
    """Every batch the run sent, in the order sent, as the report draws it: its round, when it
    was sent and how long it took (until ``now`` for one in flight), its rows and how many came
    back, its status and what the API charged (None: not reported)."""
    cursor = db.execute(
        "SELECT i.nonce, i.batch_id, i.state, i.status, i.rows, i.created_at, i.status_at,"
        " i.cost, (SELECT count(*) FROM batch_rows r WHERE r.nonce = i.nonce"
        f" AND r.outcome = 'done'), {IN_FLIGHT} FROM batch_intents i"
        " ORDER BY i.created_at, i.nonce"
    )
    rounds: list[dict] = []
    number, first_end = 0, None
    for nonce, batch_id, state, status, rows, created, status_at, cost, answered, live in cursor:
        ended = now if live or status_at is None else max(status_at, created)
        # A round is the batches sent before the first of them ended: the next round's rows
        # are the turns its answers made possible (and the rows a failed batch left).
        if first_end is None or created >= first_end:
            number, first_end = number + 1, ended
        else:
            first_end = min(first_end, ended)
        rounds.append(
            {
                "round": number,
                "batch": batch_id or f"intent {nonce}",
                "status": status or ("not yet seen" if live else state),
                "in_flight": bool(live),
                "sent_at": round(created, 3),
                "seconds": round(ended - created, 3),
                "rows": rows,
                "answered": answered,
                "charged": round(cost, 9) if cost is not None else None,
            }
        )
    return rounds

"""How long a run's batches take: the age of those in flight, how long this run's finished ones
took, when the live round should end (a band: typically, and at the latest by the completion
window), and the worst case of what is in flight. One place read by progress, status and the
report.
"""

from __future__ import annotations

import sqlite3
import statistics

# Both batch dialects create batches with completion_window "24h" (BATCH_REFERENCE.md): a batch
# not finished by then expires, and its unfinished rows are sent again in the next round.
WINDOW_SECONDS = 24 * 3600


def batch_timing(db: sqlite3.Connection, now: float) -> dict:
    """The timing figures of the batches in ``db`` (a run store's connection) at ``now``."""
    live = db.execute(
        "SELECT created_at, coalesce(worst_cost, 0) FROM batch_intents"
        " WHERE state IN ('submitting', 'submitted')"
    ).fetchall()
    took = [
        seconds
        for (seconds,) in db.execute(
            "SELECT status_at - created_at FROM batch_intents WHERE state = 'ingested'"
            " AND status = 'completed' AND status_at IS NOT NULL AND status_at >= created_at"
        )
    ]
    typical = statistics.median(took) if took else None
    timing: dict = {
        "window_seconds": WINDOW_SECONDS,
        "finished_batches": len(took),
        "typical_seconds": typical,
        "oldest_age_seconds": now - min(created for created, _ in live) if live else None,
        "worst_cost_in_flight": sum(worst for _, worst in live),
        "eta_seconds": None,
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
        parts.append(f"worst case in flight ${timing['worst_cost_in_flight']:.4f}")
    return "; ".join(parts)

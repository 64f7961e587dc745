"""Answers refused for their usage (a false cost, a count out of range): billed, so kept apart from
the completions (written by the run's ``CompletionWriter``), never exported, counted as spent.
"""

from __future__ import annotations

import sqlite3
import time

_COLUMNS = (
    "key",  # the turn's key; NULL for a calibration question
    "source_id",
    "turn",
    "generation_id",
    "provider",
    "reason",  # the refusal's sentence: which usage field held what
    "usage",  # the usage object as sent (JSON)
    "answer",  # the body as received, or a stream's folded answer (JSON)
    "prompt_tokens",  # the counts where they were counts
    "completion_tokens",
    "cost",  # the billed estimate counted as spent (``CostCounter``)
    "created_at",
)


def refused_statements(row: dict) -> list[tuple[str, tuple]]:
    """The statement that keeps one refused answer (``_COLUMNS`` of ``row``; ``created_at``
    now where missing)."""
    values = {"created_at": time.time(), **row}
    marks = ", ".join("?" * len(_COLUMNS))
    return [
        (
            f"INSERT OR IGNORE INTO refused_answers ({', '.join(_COLUMNS)}) VALUES ({marks})",
            tuple(values.get(name) for name in _COLUMNS),
        )
    ]


def refused_figures(db: sqlite3.Connection) -> tuple[int, float]:
    """(answers kept, what they are counted as spent) of a store."""
    count, cost = db.execute(
        "SELECT count(*), coalesce(sum(max(cost, 0)), 0) FROM refused_answers"
    ).fetchone()
    return count, cost


def refused_by_provider(db: sqlite3.Connection) -> dict[str, tuple[int, float]]:
    """provider ('' where none was named) -> (answers refused, what they are counted as)."""
    return {
        provider: (count, cost)
        for provider, count, cost in db.execute(
            "SELECT coalesce(provider, ''), count(*), coalesce(sum(max(cost, 0)), 0)"
            " FROM refused_answers GROUP BY 1"
        )
    }

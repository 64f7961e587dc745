"""The calibration table of a run directory: what each provider was asked before the run bought
from it, and what its answer proved (``draftgen.generate.calibrate`` asks; this keeps).

Rows are written through the run's ``CompletionWriter`` (durable once awaited) and read through
the store's connection. A question is asked of a provider once per run directory.
"""

from __future__ import annotations

import sqlite3
import time

from draftgen.store.schema import StorePart

# The questions (``question`` column) and their verdicts.
RENDERER = "renderer"  # which renderer the provider renders prompts with (a prompt count)
TOOL_ARGUMENTS = "tool_arguments"  # whether something rewrites tool-call arguments on top
# renderer
RENDERS_AS_DRAFTGEN = "renders_as_draftgen"
RENDERS_OTHERWISE = "renders_otherwise"
# tool_arguments
ENGINE_PARSER_ONLY = "engine_parser_only"
REWRITES_ARGUMENTS = "rewrites_arguments"
# either: no answer, or an answer that cannot decide
UNSETTLED = "unsettled"

_COLUMNS = (
    "provider",
    "question",
    "verdict",
    "at",
    "route",
    "expected",
    "answered",
    "matched",
    "cost",
    "prompt_tokens",
    "completion_tokens",
    "detail",
    "generation_id",  # the API's id of the answer: a paid answer, accounted for like any other
    "errors",  # the failed attempts sent again (JSON), counted with the run's retries
)


class Calibrations(StorePart):
    """``Store.calibrations``: what calibration asked each provider, and what it proved."""

    def read(self) -> dict[str, dict[str, dict]]:
        """provider -> question -> the row (``read_calibrations``)."""
        return read_calibrations(self.db)


def calibration_statements(row: dict) -> list[tuple[str, tuple]]:
    """The statement that records one answered question (``_COLUMNS`` of ``row``; ``at`` now
    where missing). A question answered again replaces the earlier row."""
    values = {"at": time.time(), **row}
    marks = ", ".join("?" * len(_COLUMNS))
    return [
        (
            f"INSERT OR REPLACE INTO provider_calibrations ({', '.join(_COLUMNS)})"
            f" VALUES ({marks})",
            tuple(values.get(name) for name in _COLUMNS),
        )
    ]


def read_calibrations(db: sqlite3.Connection) -> dict[str, dict[str, dict]]:
    """provider -> question -> the row (every column but the two keys), in the order asked."""
    found: dict[str, dict[str, dict]] = {}
    cursor = db.execute(
        f"SELECT {', '.join(_COLUMNS)} FROM provider_calibrations ORDER BY at, provider, question"
    )
    for values in cursor:
        row = dict(zip(_COLUMNS, values, strict=True))
        provider, question = row.pop("provider"), row.pop("question")
        found.setdefault(provider, {})[question] = row
    return found


def calibration_cost(calibrations: dict[str, dict[str, dict]]) -> float:
    """What the questions of ``read_calibrations`` cost (a negative cost counts 0)."""
    return sum(
        max(row.get("cost") or 0.0, 0.0)
        for questions in calibrations.values()
        for row in questions.values()
    )


def providers_with(calibrations: dict[str, dict[str, dict]], question: str, verdict: str) -> set:
    """The providers whose answer to ``question`` proved ``verdict``."""
    return {
        provider
        for provider, questions in calibrations.items()
        if questions.get(question, {}).get("verdict") == verdict
    }

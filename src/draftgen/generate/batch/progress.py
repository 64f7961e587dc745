"""Live progress of a batch run: batches by status, rows done, rows in flight, cost so far.

The same display as a live run (a rich table on a terminal, a log line every few seconds
otherwise), with the figures a person leaving a batch run wants to see.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field

from rich.table import Table

from draftgen.generate.progress import ProgressDisplay, RunProgress, _clock
from draftgen.redact import usd


@dataclass
class BatchProgress(RunProgress):
    round: int = 0
    batches: collections.Counter = field(default_factory=collections.Counter)  # live, by status
    batches_submitted: int = 0  # by this process
    rows_submitted: int = 0
    rows_in_flight: int = 0
    rows_resent: int = 0  # rows sent again after a batch failed, expired or was cancelled
    # Batch ages, typical duration, the round's ETA band, the worst case in flight (one line,
    # store.batch_timing's wording, as status shows it).
    timing: str = ""
    # What final batches billed beyond the rows they returned (a cancelled batch's): the cost
    # shown is the rows' and this, what the API charged, as status shows it.
    billed_without_rows: float = 0.0

    def requests_in_flight(self) -> int:
        return self.rows_in_flight

    def state(self) -> str:
        if self.stopped == "interrupted":
            live = sum(self.batches.values())
            return (
                f"stopping: no new batches; {live} batches keep running at the provider and "
                "the same command picks them up"
            )
        if self.stopped:
            return f"stopping: {self.stopped}"
        if self.batches:
            return f"round {self.round}: waiting for batches"
        return "done" if self.total_rows and self.rows_done >= self.total_rows else "submitting"

    def batches_text(self) -> str:
        return ", ".join(f"{n} {status}" for status, n in sorted(self.batches.items())) or "none"

    def line(self) -> str:
        return (
            f"round {self.round} | rows {self.rows_done}/{self.total_rows} | batches "
            f"{self.batches_text()} | rows in flight {self.rows_in_flight} | stored "
            f"{self.turns_done}, from store {self.turns_reused}, failed {self.turns_failed}, "
            f"resent {self.rows_resent}, rejected {self.rejected} | cost {usd(self.charged())} | "
            f"elapsed {_clock(self.elapsed())}"
            + (f" | {self.timing}" if self.timing else "")
            + (f" | {self.state()}" if self.stopped else "")
        )

    def charged(self) -> float:
        return self.cost + self.billed_without_rows

    def fields(self) -> dict:
        return {
            **super().fields(),
            "cost": round(self.charged(), 9),
            "round": self.round,
            "batches": dict(self.batches),
            "batches_submitted": self.batches_submitted,
            "rows_submitted": self.rows_submitted,
            "rows_in_flight": self.rows_in_flight,
            "rows_resent": self.rows_resent,
            "timing": self.timing,
        }


class BatchDisplay(ProgressDisplay):
    def _table(self) -> Table:
        p = self.progress
        table = Table(title="draftgen run --batch", show_header=False)
        table.add_row("state", p.state())
        table.add_row("rows", f"{p.rows_done}/{p.total_rows} ({p.rejected} rejected)")
        table.add_row("round", f"{p.round} (a conversation advances one turn per round)")
        table.add_row("batches in flight", p.batches_text())
        table.add_row("rows in flight", str(p.rows_in_flight))
        table.add_row("submitted", f"{p.batches_submitted} batches, {p.rows_submitted} rows")
        table.add_row("stored", f"{p.turns_done} turns (from the store: {p.turns_reused})")
        failed = ", ".join(f"{k} {v}" for k, v in p.failures.most_common()) or "none"
        table.add_row("failed turns", failed)
        table.add_row("rows sent again", str(p.rows_resent))
        table.add_row("tokens", f"prompt {p.prompt_tokens}, completion {p.completion_tokens}")
        table.add_row("cost so far", usd(p.charged()))
        if p.timing:
            table.add_row("timing", p.timing)
        table.add_row("elapsed", _clock(p.elapsed()))
        return table

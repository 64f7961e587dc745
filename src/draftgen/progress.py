"""Live progress of a run: a rich display on a terminal, otherwise a plain line now and then."""

from __future__ import annotations

import collections
import logging
import sys
import time
from dataclasses import dataclass, field

from rich.console import Console
from rich.live import Live
from rich.table import Table

_log = logging.getLogger("draftgen.progress")


@dataclass
class RunProgress:
    total_rows: int = 0
    rows_done: int = 0
    turns_done: int = 0
    turns_reused: int = 0
    turns_failed: int = 0
    rejected: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    errors: collections.Counter = field(default_factory=collections.Counter)
    started: float = field(default_factory=time.monotonic)
    stopped: str | None = None  # why the run stopped early, if it did

    def record_completion(
        self, prompt_tokens: int | None, completion_tokens: int | None, cost: float
    ) -> None:
        self.turns_done += 1
        self.prompt_tokens += prompt_tokens or 0
        self.completion_tokens += completion_tokens or 0
        self.cost += cost

    def eta_seconds(self) -> float | None:
        elapsed = time.monotonic() - self.started
        fresh = self.rows_done
        if not fresh or not self.total_rows:
            return None
        return elapsed / fresh * max(0, self.total_rows - self.rows_done)

    def line(self) -> str:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        eta = self.eta_seconds()
        errors = ", ".join(f"{k} {v}" for k, v in self.errors.most_common()) or "none"
        return (
            f"rows {self.rows_done}/{self.total_rows} | generated {self.turns_done} "
            f"({self.turns_done / elapsed:.1f}/s), reused {self.turns_reused}, "
            f"failed {self.turns_failed}, rejected {self.rejected} | tokens "
            f"{self.prompt_tokens}+{self.completion_tokens} | cost ${self.cost:.4f} | "
            f"errors: {errors} | ETA {_clock(eta)}"
        )


class ProgressDisplay:
    """Shows a ``RunProgress``; call ``refresh`` often, it throttles itself."""

    def __init__(self, progress: RunProgress, *, interval: float = 10.0, stream=None) -> None:
        self.progress = progress
        self.stream = stream or sys.stderr
        self.interval = interval
        self._last = 0.0
        self._live: Live | None = None
        if self.stream.isatty():
            self._live = Live(
                self._table(), console=Console(file=self.stream), refresh_per_second=4
            )

    def __enter__(self) -> ProgressDisplay:
        if self._live:
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live:
            self._live.update(self._table())
            self._live.__exit__(None, None, None)
        else:
            self._log_line()

    def refresh(self) -> None:
        now = time.monotonic()
        if self._live:
            if now - self._last >= 0.25:
                self._live.update(self._table())
                self._last = now
        elif now - self._last >= self.interval:
            self._log_line()
            self._last = now

    def _log_line(self) -> None:
        """The plain line off a terminal (CI, nohup), through logging: --log-json makes it JSON
        with the counts as fields."""
        p = self.progress
        fields = {
            "rows_done": p.rows_done,
            "total_rows": p.total_rows,
            "turns_done": p.turns_done,
            "turns_reused": p.turns_reused,
            "turns_failed": p.turns_failed,
            "rejected": p.rejected,
            "prompt_tokens": p.prompt_tokens,
            "completion_tokens": p.completion_tokens,
            "cost": p.cost,
            "eta_seconds": p.eta_seconds(),
        }
        _log.info(p.line(), extra=fields)

    def _table(self) -> Table:
        p = self.progress
        elapsed = max(time.monotonic() - p.started, 1e-9)
        table = Table(title="draftgen run", show_header=False)
        table.add_row("rows", f"{p.rows_done}/{p.total_rows}")
        table.add_row("generated", f"{p.turns_done} ({p.turns_done / elapsed:.1f}/s)")
        table.add_row("reused from store", str(p.turns_reused))
        table.add_row("failed / rejected", f"{p.turns_failed} / {p.rejected}")
        table.add_row("tokens", f"prompt {p.prompt_tokens}, completion {p.completion_tokens}")
        table.add_row("cost so far", f"${p.cost:.4f}")
        table.add_row("errors", ", ".join(f"{k} {v}" for k, v in p.errors.most_common()) or "none")
        table.add_row("ETA", _clock(p.eta_seconds()))
        return table


def _clock(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"

"""How a run ended, as the library tells every caller: a ``RunSummary`` whose ``outcome`` says
complete, stopped or interrupted, or ``NothingStored`` when every turn failed.

The CLI decides nothing of its own: it maps ``outcome`` (and the signal) to its exit code and
prints the summary; ``Run.execute()`` gives a Python caller the same summary or the same error.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from draftgen.generate.errors import RunError
from draftgen.generate.progress import RunProgress

COMPLETE = "complete"  # every planned turn was worked (failed turns may remain: counts say)
STOPPED = "stopped"  # stopped early on purpose (--max-cost); the same command resumes
INTERRUPTED = "interrupted"  # a signal (Ctrl-C, SIGTERM, SIGHUP); the same command resumes


@dataclass
class RunSummary:
    """What a run did: its progress, the store's counts, and why it ended early (if it did)."""

    progress: RunProgress
    counts: dict = field(default_factory=dict)
    stopped: str | None = None  # why the run ended early: "interrupted" or a budget sentence
    signal: int | None = None  # the signal that interrupted it (None: not one, or not known)

    @property
    def outcome(self) -> str:
        """``COMPLETE``, ``STOPPED`` (``stopped`` says why) or ``INTERRUPTED``."""
        if self.stopped == INTERRUPTED:
            return INTERRUPTED
        return STOPPED if self.stopped else COMPLETE


class NothingStored(RunError):
    """A run that worked its turns and stored no completion, every turn having failed: never a
    success. ``summary``: the run's summary, its counts naming the failures."""

    def __init__(self, summary: RunSummary) -> None:
        super().__init__(nothing_stored(summary.counts))
        self.summary = summary


def nothing_stored(counts: dict) -> str:
    """Why a run that ended with no completion stored but final failures is not a success ("" if
    it stored something or had nothing to fail)."""
    failures = counts.get("failures") or {}
    if counts.get("completions") or not failures:
        return ""
    reasons = ", ".join(f"{reason} {count}" for reason, count in failures.items())
    return (
        f"no completion was stored: all {sum(failures.values())} turns failed ({reasons}); "
        "fix what the reasons say, and the same command retries them"
    )


def finished(summary: RunSummary) -> RunSummary:
    """``summary`` of a run that ended as a caller may take it; ``NothingStored`` for a complete
    run that stored nothing but failures (an interrupted or stopped run is not judged: it is
    resumed)."""
    if summary.outcome == COMPLETE and nothing_stored(summary.counts):
        raise NothingStored(summary)
    return summary

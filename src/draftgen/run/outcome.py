"""How a run ended, as the library tells every caller: a ``RunSummary`` whose ``outcome`` says
complete, stopped or interrupted, or ``NothingStored`` when every turn failed.

The CLI decides nothing of its own: it maps ``outcome`` (and the signal) to its exit code and
prints the summary; ``Run.execute()`` gives a Python caller the same summary or the same error.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from draftgen.generate.errors import RunError
from draftgen.generate.progress import RunProgress

COMPLETE = "complete"  # every planned turn was worked and none is left failed
# Every planned turn was worked, and some failed for good (their reasons in ``counts``): less was
# stored than planned; the same command retries them.
TURNS_FAILED = "turns_failed"
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
        """``COMPLETE``, ``TURNS_FAILED`` (the counts' ``failures`` say which), ``STOPPED``
        (``stopped`` says why) or ``INTERRUPTED``."""
        if self.stopped == INTERRUPTED:
            return INTERRUPTED
        if self.stopped:
            return STOPPED
        return TURNS_FAILED if self.counts.get("failures") else COMPLETE

    @property
    def failed_turns(self) -> str:
        """The sentence of a ``TURNS_FAILED`` run ("" for another outcome)."""
        if self.outcome != TURNS_FAILED:
            return ""
        return (
            f"{failed_reasons(self.counts)}; the completions are stored, and the same command "
            "retries the failed turns"
        )


class NothingStored(RunError):
    """A run that worked its turns and stored no completion, every turn having failed: never a
    success. ``summary``: the run's summary, its counts naming the failures."""

    def __init__(self, summary: RunSummary) -> None:
        super().__init__(nothing_stored(summary.counts))
        self.summary = summary


def nothing_stored(counts: dict) -> str:
    """Why a run that ended with no completion stored but final failures is not a success ("" if
    it stored something or had nothing to fail)."""
    if counts.get("completions") or not counts.get("failures"):
        return ""
    return (
        f"no completion was stored: all {failed_reasons(counts)}; "
        "fix what the reasons say, and the same command retries them"
    )


def failed_reasons(counts: dict) -> str:
    """ "N turns failed (reason n, ...)" of a run's counts."""
    failures = counts.get("failures") or {}
    reasons = ", ".join(f"{reason} {count}" for reason, count in failures.items())
    return f"{sum(failures.values())} turns failed ({reasons})"


def finished(summary: RunSummary) -> RunSummary:
    """``summary`` of a run that ended as a caller may take it; ``NothingStored`` for a complete
    run that stored nothing but failures (an interrupted or stopped run is not judged: it is
    resumed)."""
    if summary.outcome == TURNS_FAILED and nothing_stored(summary.counts):
        raise NothingStored(summary)
    return summary

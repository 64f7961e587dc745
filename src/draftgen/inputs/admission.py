"""Row admission: which input rows a run works, and why each other row is rejected, said once for
the planner (``count_plan``, which alone lists the rejected rows) and both engines.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from draftgen.inputs.ingest import Conversation, Rejection
from draftgen.inputs.plan import NOTHING_TO_ANSWER, PlanCount, TurnPlan, plan_turns
from draftgen.inputs.shard import Shard


@dataclass(frozen=True, slots=True)
class Admitted:
    """What admission made of one input row."""

    plans: list[TurnPlan]  # the row's turns to answer; [] for a rejected row
    rejection: Rejection | None  # why the row cannot be used, or None
    ours: bool  # the row is this run's shard's (every row is, without --shard)


class Admission:
    """The rows of one reading of the input, admitted in order: ``admit`` is the one rule.

    Ids are checked against every row read before, whichever shard it is in, so each shard
    rejects the same rows; ``close`` drops the ids seen.
    """

    def __init__(self) -> None:
        self._seen = SourceIds()

    def admit(self, rows: list[Conversation | Rejection], shard: Shard | None) -> list[Admitted]:
        """Each row's turns, or why it is rejected (unreadable, nothing to answer, an id another
        conversation used), and whether it is ``shard``'s; the ids checked in one go."""
        planned = [(row, plan_turns(row)) for row in rows if isinstance(row, Conversation)]
        problems = iter(zip(planned, self._seen.duplicate_problems(planned), strict=True))
        admitted: list[Admitted] = []
        for row in rows:
            if isinstance(row, Conversation):
                (_, plans), problem = next(problems)
                problem = problem or (None if plans else NOTHING_TO_ANSWER)
                if not problem:
                    ours = shard is None or shard.holds_key(plans[0].key)
                    admitted.append(Admitted(plans, None, ours))
                    continue
                row = Rejection(row.input, row.line, problem)
            # A rejected row has no key: its file name and line place it in a shard.
            ours = shard is None or shard.holds_line(row.input, row.line)
            admitted.append(Admitted([], row, ours))
        return admitted

    def each(
        self, rows: Iterable[Conversation | Rejection], shard: Shard | None
    ) -> Iterator[Admitted]:
        """``admit`` of every row of ``rows``, read ``ROWS_PER_STATEMENT`` at a time (their ids
        are checked in one statement); a row that cannot be read raises after the rows before it."""
        for part in in_lists(rows, ROWS_PER_STATEMENT):
            yield from self.admit(part, shard)

    def close(self) -> None:
        self._seen.close()


def count_plan(
    items: Iterable[Conversation | Rejection],
    completions_per_turn: int = 1,
    shard: Shard | None = None,
    rejected: Path | None = None,
) -> PlanCount:
    """Count rows, rejections, turns and requests as the run plans them (``Admission``), and
    list this shard's rejected rows in ``rejected`` (``RUN_DIR/rejected.jsonl``): the one place
    the file is written, since every run plans before its engine sends anything."""
    count = PlanCount(completions_per_turn=completions_per_turn)
    admission = Admission()
    # Truncated, not appended to: every reading of the input finds every rejected row again, so
    # a resume lists each one once, as the first run did (appending would list it once a run).
    listing = open(rejected, "wb") if rejected is not None else None  # noqa: SIM115
    try:
        for row in admission.each(items, shard):
            count.rows += 1
            if row.rejection is None:
                count.answerable += 1
                if row.ours:
                    count.shard_rows += 1
                    count.turns += len(row.plans)
            elif row.ours:
                count.rejected += 1
                count.first_rejected = count.first_rejected or row.rejection
                if listing is not None:
                    listing.write(row.rejection.as_json() + b"\n")
    finally:
        admission.close()
        if listing is not None:
            listing.close()
    return count


def in_lists(items: Iterable, size: int) -> Iterator[list]:
    """``items`` in lists of ``size`` (the last may be shorter); an error reading an item comes
    after the list of the items before it."""
    chunk: list = []
    try:
        for item in items:
            chunk.append(item)
            if len(chunk) == size:
                yield chunk
                chunk = []
    except Exception:
        if chunk:
            yield chunk
        raise
    if chunk:
        yield chunk


class SourceIds:
    """The ids the rows used so far, with their conversation's fingerprint and where they were read.

    Held in a private temporary SQLite file (the page cache bounds its memory), so memory stays
    flat however many rows the input has. Rows are best checked many at a time
    (``duplicate_problems``): two statements for all of them, where one a row would hand the
    interpreter lock to another thread (the renderer) and wait to get it back, every row.
    """

    def __init__(self) -> None:
        # "": a private temporary file, deleted on close.
        self._db = sqlite3.connect("", isolation_level=None)
        self._db.execute("PRAGMA journal_mode=OFF")
        self._db.execute("PRAGMA synchronous=OFF")
        self._db.execute(
            "CREATE TABLE seen (id TEXT PRIMARY KEY, fingerprint TEXT NOT NULL, "
            "input TEXT NOT NULL, line INTEGER NOT NULL) WITHOUT ROWID"
        )
        self._db.execute("BEGIN")  # one transaction for the run: nothing here outlives it

    def duplicate_problem(self, conversation: Conversation, plans: list[TurnPlan]) -> str | None:
        """Why this row's id cannot be used (another conversation has it), or None."""
        fingerprint = plans[-1].key if plans else ""
        row = (conversation.source_id, fingerprint, conversation.input, conversation.line)
        if self._db.execute(INSERT_SEEN_ID, row).rowcount == 1:
            return None
        previous_fingerprint, previous_input, previous_line = self._db.execute(
            "SELECT fingerprint, input, line FROM seen WHERE id = ?", (conversation.source_id,)
        ).fetchone()
        if previous_fingerprint == fingerprint:
            return None  # an exact duplicate: its turns are shared through their keys
        return _reused(conversation.source_id, previous_input, previous_line)

    def duplicate_problems(
        self, rows: list[tuple[Conversation, list[TurnPlan]]]
    ) -> list[str | None]:
        """``duplicate_problem`` of each row, in order, as if they were checked one by one."""
        first: dict[str, tuple[str, str, int]] = {}  # id -> its first row's fingerprint, place
        ids = list(dict.fromkeys(conversation.source_id for conversation, _ in rows))
        for start in range(0, len(ids), ROWS_PER_STATEMENT):
            part = ids[start : start + ROWS_PER_STATEMENT]
            found = self._db.execute(
                "SELECT id, fingerprint, input, line FROM seen WHERE id IN "
                f"({', '.join('?' * len(part))})",
                part,
            )
            first.update((row[0], row[1:]) for row in found)
        problems: list[str | None] = []
        new: list[tuple[str, str, str, int]] = []
        for conversation, plans in rows:
            fingerprint = plans[-1].key if plans else ""
            previous = first.get(conversation.source_id)
            if previous is None:
                first[conversation.source_id] = (fingerprint, conversation.input, conversation.line)
                new.append((conversation.source_id, *first[conversation.source_id]))
                problems.append(None)
            else:
                same = previous[0] == fingerprint  # an exact duplicate shares its turns' keys
                problems.append(None if same else _reused(conversation.source_id, *previous[1:]))
        for start in range(0, len(new), ROWS_PER_STATEMENT):
            part = new[start : start + ROWS_PER_STATEMENT]
            self._db.execute(
                "INSERT INTO seen (id, fingerprint, input, line) VALUES "
                + ", ".join(["(?, ?, ?, ?)"] * len(part)),
                [value for row in part for value in row],
            )
        return problems

    def close(self) -> None:
        self._db.close()


def _reused(source_id: str, previous_input: str, previous_line: int) -> str:
    return (
        f"id {source_id!r} is already used by line {previous_line} of {previous_input} for a "
        "different conversation; give each row a unique id"
    )


INSERT_SEEN_ID = (
    "INSERT INTO seen (id, fingerprint, input, line) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING"
)
# Rows bound in one statement: 4 values each, within the 999 SQLite took before 3.32.
ROWS_PER_STATEMENT = 200

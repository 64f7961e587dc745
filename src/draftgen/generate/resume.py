"""What a run has already: the index of stored turns a resume skips, and the source ids of the
rows read so far. Shared by the live generation step (``engine``) and the batch one.
"""

from __future__ import annotations

import sqlite3

from draftgen.inputs.ingest import Conversation
from draftgen.inputs.plan import TurnPlan
from draftgen.reconstruct.text import COMPLETE_FINISH_REASONS
from draftgen.store.database import Store, StoreError


class StoredTurns:
    """The turns the store holds, and whether each is complete, in ~90 bytes a turn.

    Keys are kept as the 128-bit ints their hex digits spell, not with their answers: a turn's
    content is read from the store only when a later turn of its conversation needs it as
    history, so a resume over a big store does not load every answer first.
    """

    def __init__(self, store: Store) -> None:
        self._store = store
        self._complete: set[int | str] = set()
        self._incomplete: set[int | str] = set()
        self._this_run: set[int | str] = set()  # generated now, not found from an earlier run
        for key, finish in store.completions.stored_finishes():
            self._insert(_compact_key(key), finish in COMPLETE_FINISH_REASONS)

    def __contains__(self, key: str) -> bool:
        compact = _compact_key(key)
        return compact in self._complete or compact in self._incomplete

    def complete(self, key: str) -> bool:
        """Whether ``key`` is stored with an answer that ended as a whole turn."""
        return _compact_key(key) in self._complete

    def add(self, key: str, complete: bool) -> None:
        """Record a turn this run has just stored."""
        compact = _compact_key(key)
        self._insert(compact, complete)
        self._this_run.add(compact)

    def holds_chain(self, plans: list[TurnPlan]) -> bool:
        """Whether every turn is stored and all but the last complete (nothing left to do)."""
        last = len(plans) - 1
        for index, plan in enumerate(plans):
            compact = _compact_key(plan.key)
            if compact not in self._complete and (index < last or compact not in self._incomplete):
                return False
        return True

    def from_earlier_run(self, key: str) -> bool:
        """Whether stored ``key`` was there before this run (a resume), not made by it."""
        return _compact_key(key) not in self._this_run

    def _insert(self, compact: int | str, complete: bool) -> None:
        (self._complete if complete else self._incomplete).add(compact)

    def content(self, key: str) -> str:
        """The stored answer's content (committed: the writer is awaited before ``add``)."""
        answer = self._store.completions.answer(key)
        if answer is None:
            raise StoreError(f"completion {key} is indexed as stored but missing from the store")
        return answer[0]


HEX_DIGITS = "0123456789abcdef"


def _compact_key(key: str) -> int | str:
    # Turn keys are 32 lowercase hex digits (plan.py): the int they spell is exact and small.
    if len(key) == 32 and not key.strip(HEX_DIGITS):
        return int(key, 16)
    return key


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

"""What a run has already: the index of stored turns a resume skips. Shared by the live
generation step (``engine``) and the batch one.
"""

from __future__ import annotations

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

"""A live run's producer: the input read, each row admitted (``inputs.admission``) and its chains
queued unless the store holds them whole, then one end mark per worker.
"""

from __future__ import annotations

import asyncio
from typing import Any

from draftgen.generate.progress import ProgressDisplay, RunProgress
from draftgen.generate.resume import StoredTurns
from draftgen.inputs.admission import ROWS_PER_STATEMENT, Admission, in_lists
from draftgen.inputs.ingest import Conversation, Rejection
from draftgen.inputs.mix import Suite, read_suite
from draftgen.inputs.plan import TurnPlan, sample_chains


class RowFeed:
    """Fills ``queue`` with the turns of each row this run works, counting the others in
    ``progress``: a rejected row (listed by the planner), another shard's, one stored whole."""

    def __init__(
        self,
        options: Any,
        suite: Suite,
        queue: asyncio.Queue,
        progress: RunProgress,
        display: ProgressDisplay,
        stored: StoredTurns,
    ) -> None:
        self.options = options
        self.suite = suite
        self.queue = queue
        self.progress = progress
        self.display = display
        self.stored = stored
        self.admission = Admission()

    async def produce(self) -> None:
        """Queue each row's turns that need requests, then one end mark per worker."""
        # Rows are admitted a list at a time: their ids are checked in one statement.
        for items in in_lists(read_suite(self.suite), ROWS_PER_STATEMENT):
            for plans in self.admit_rows(items):
                if plans is None:
                    continue
                chains = sample_chains(plans, self.options.samples)
                if all(self.stored.holds_chain(chain) for chain in chains):
                    await self.count_stored_row(chains)
                    continue
                await self.queue.put(plans)
                self.display.refresh()
        for _ in range(self.options.concurrency):
            await self.queue.put(None)

    def admit(self, item: Conversation | Rejection) -> list[TurnPlan] | None:
        """The row's turns if this run works them; None for a rejected row (counted) or another
        shard's row."""
        return self.admit_rows([item])[0]

    def admit_rows(self, items: list[Conversation | Rejection]) -> list[list[TurnPlan] | None]:
        """``admit`` of each row in turn, their ids checked in one go."""
        admitted: list[list[TurnPlan] | None] = []
        for row in self.admission.admit(items, self.options.shard):
            if not row.ours:
                self.progress.total_rows -= 1  # another shard's row
                admitted.append(None)
            elif row.rejection is not None:
                self.progress.rejected += 1
                self.progress.rows_done += 1
                admitted.append(None)
            else:
                admitted.append(row.plans)
        return admitted

    async def count_stored_row(self, chains: list[list[TurnPlan]]) -> None:
        """Count a row the store holds whole, as a worker would, without the queue's round trip
        (a resume reaches its first missing turn sooner)."""
        self.progress.count_stored_turns(
            self.stored.from_earlier_run(plan.key) for chain in chains for plan in chain
        )
        self.progress.rows_done += 1
        if self.progress.rows_done % 512 == 0:
            await asyncio.sleep(0)  # let signals, workers and the display in
            self.display.refresh()

    def close(self) -> None:
        self.admission.close()

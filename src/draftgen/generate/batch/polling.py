"""A batch run's live batches looked at, with backoff, until one ends: its results stored, its
unanswered rows sent again in a later round or given up, a lost create settled.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time

from draftgen.generate.batch import steps
from draftgen.generate.batch.dialects import BatchApiError
from draftgen.generate.batch.ingest import ingest
from draftgen.generate.batch.state import BatchPart, BatchRunState
from draftgen.generate.batch.submit import reconcile
from draftgen.reconstruct.text import COMPLETE_FINISH_REASONS
from draftgen.records import Completion
from draftgen.store.batch_ledger import Intent
from draftgen.store.batch_timing import batch_rounds, timing_text

_log = logging.getLogger("draftgen.batch")
LOOKUPS_AT_ONCE = 8


class BatchPoller(BatchPart):
    """Polls a batch run's live batches over its shared state and stores what they return;
    ``began`` (epoch seconds) tells a cancel made during this run from an earlier one."""

    def __init__(
        self,
        state: BatchRunState,
        poll_max: float,
        grace: float,
        simulated: bool,
        began: float,
    ) -> None:
        super().__init__(state)
        self.poll_max = poll_max  # seconds between polls at most, after backoff
        self.grace = grace
        self.simulated = simulated
        self.began = began
        self.unseen: set[str] = set()  # intents whose recorded batch was warned about (404)

    def refresh_live(self) -> list[Intent]:
        """The live intents, with their counts, timing and round put in the progress."""
        live = self.ledger.intents(live_only=True)
        self.progress.batches = collections.Counter(
            (i.status or "not yet seen") if i.state == "submitted" else "unconfirmed" for i in live
        )
        figures = self.ledger.figures()
        self.progress.rows_in_flight = figures["rows_in_flight"]
        self.progress.timing = timing_text(figures["timing"])
        self.progress.billed_without_rows = figures["timing"]["billed_without_rows"]
        # The round as the report counts it (a pass that sends nothing new starts none).
        sent = batch_rounds(self.ledger.db, time.time())
        self.progress.round = sent[-1]["round"] if sent else 0
        return live

    async def poll_until_change(self) -> None:
        """Poll the live batches, backing off, until one ends (its results are then stored) or
        a lost create is settled; Ctrl-C ends the wait at once."""
        delay = self.poll
        while not self.stop.is_set():
            changed = await self.sweep()
            self.display.refresh()
            if changed:
                return
            await self.sleep(delay)
            delay = min(delay * 1.6, self.poll_max)

    async def reconcile_open(self) -> None:
        """Before the first round: the intents an earlier process left open, settled (a lost
        create looked for; a batch the built-in simulator held went with it)."""
        for intent in self.ledger.intents(live_only=True):
            if self.simulated and intent.url != self.target.url:
                # The built-in simulator lives as long as its run: its batches went with it.
                await self.ledger.settle_unsent(
                    intent.nonce,
                    "absent",
                    "the built-in simulator that held this batch stopped with its run",
                )
                continue
            if intent.state == "submitting":
                try:
                    await self._settle(intent)
                except BatchApiError as exc:
                    if exc.fatal:
                        raise
                    _log.warning("%s; the lost create is looked for again at the next poll", exc)
        self.refresh_live()

    async def _settle(self, intent: Intent) -> bool:
        outcome = await reconcile(self.target, self.ledger, intent)
        return outcome != "unknown"

    async def sweep(self) -> bool:
        """Look at every live batch once; store the results of those that ended. Whether
        anything changed (a batch ended, a lost create was settled)."""
        gate = asyncio.Semaphore(LOOKUPS_AT_ONCE)

        async def look(intent: Intent) -> bool:
            async with gate:
                if self.stop.is_set():
                    return False
                try:
                    return await look_once(intent)
                except BatchApiError as exc:
                    if exc.fatal:
                        raise
                    _log.warning("%s; trying again at the next poll", exc)
                    return False

        async def look_once(intent: Intent) -> bool:
            if intent.state == "submitting":
                return await self._settle(intent)
            info = await self.dialect.get(self.target.http, intent.batch_id)
            if info is None:  # not visible yet (seconds after the create), or gone
                if time.time() > intent.created_at + self.grace and intent.nonce not in self.unseen:
                    self.unseen.add(intent.nonce)
                    _log.warning(
                        "batch %s is not found (HTTP 404) %.0f s after its create; its rows "
                        "stay reserved while the API may still answer for it",
                        intent.batch_id,
                        time.time() - intent.created_at,
                    )
                return False
            if info.status != intent.status or info.counts() != intent.request_counts:
                await self.ledger.record_status(intent.nonce, info.status, info.counts(), info.cost)
            if not info.final:
                return False
            await self._ingest(intent, info)
            return True

        results = await asyncio.gather(
            *(look(i) for i in self.ledger.intents(live_only=True)), return_exceptions=True
        )
        self.refresh_live()
        for result in results:  # every lookup has ended: none writes after an error stops us
            if isinstance(result, BaseException):
                raise result
        return any(results)

    async def _ingest(self, intent: Intent, info) -> None:
        def stored(key: str, completion: Completion) -> None:
            complete = completion.finish_reason in COMPLETE_FINISH_REASONS
            self.stored.add(key, complete)
            self.progress.record_completion(
                completion.prompt_tokens, completion.completion_tokens, completion.cost
            )

        report = await ingest(self.target, self.ledger, intent, info, stored)
        cancelled_here = self._cancelled_during_this_run(intent)
        for row in report.unanswered:
            if not row.retryable:
                self.given_up.add(row.key)
                self.writer.failure_reasons[row.error["kind"]] += 1
                self.progress.turns_failed += 1
                continue
            self.tries[row.key] += 1
            reason = None
            if cancelled_here and row.outcome == "cancelled":
                reason = "batch_cancelled"  # draftgen cancel, while this run was polling
            elif self.tries[row.key] > self.options.batch_retries:
                reason = f"gave_up_after_{self.options.batch_retries + 1}_batches"
            if reason is not None and row.key not in self.stored:
                errors = self.ledger.earlier_errors([row.key]).get(row.key, [])
                await self.writer.add_failure(
                    row.key, row.source_id, row.turn, reason, len(errors), errors
                )
                self.given_up.add(row.key)
                self.progress.turns_failed += 1
        if cancelled_here:
            self.request_stop(
                f"batch {info.id} was cancelled (draftgen cancel) while this run was polling; "
                "no new batches are sent, and the same command resumes"
            )
        steps.reached("after_ingest")

    def _cancelled_during_this_run(self, intent: Intent) -> bool:
        detail = self.ledger.intent(intent.nonce).detail or {}
        asked = detail.get("cancel_requested_at")
        return isinstance(asked, (int, float)) and asked >= self.began

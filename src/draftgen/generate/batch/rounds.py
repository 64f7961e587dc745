"""One round of a batch run: every turn ready now (not stored, not in a live batch, its earlier
turns answered) rendered once, priced at its worst case and sent in batches within ``--batch-size``,
the API's byte limit and ``--max-cost``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator

import orjson

from draftgen.generate.batch.dialects import CreateRefused
from draftgen.generate.batch.errors import BatchRunError
from draftgen.generate.batch.money import BatchBudget, BatchPrices, find_batch_prices, row_worst
from draftgen.generate.batch.state import BatchPart, BatchRunState
from draftgen.generate.batch.submit import submit
from draftgen.generate.contract import GenerationContext
from draftgen.inputs.plan import TurnPlan, build_messages
from draftgen.store.batch_ledger import PlannedRow
from draftgen.store.batch_timing import batch_rounds
from draftgen.store.database import Store
from draftgen.tokens.rendering import ChatRenderer, request_variables

_log = logging.getLogger("draftgen.batch")


class RoundSender(BatchPart):
    """Sends a batch run's rounds (``submit_round``) over its shared state, with the batch prices
    found once (``find_prices``) and, under ``--max-cost``, the budget they are counted in."""

    def __init__(
        self,
        state: BatchRunState,
        ctx: GenerationContext,
        store: Store,
        url: str,
        api_key: str | None,
        size: int,
    ) -> None:
        super().__init__(state)
        self.store = store
        self.url = url
        self.api_key = api_key
        self.size = size  # rows in one batch at most
        self.model = state.target.model
        self.backend = ctx.backend
        self.settings = ctx.settings
        self.renderer = ChatRenderer(ctx.tokenizer, ctx.profile)
        self.variables = request_variables(ctx.settings, ctx.profile)
        self.failed_written: set[str] = set()
        self.prices: BatchPrices | None = None  # listed batch prices, with --max-tokens
        self.budget: BatchBudget | None = None
        self.budget_blocked = False  # this round left rows unsent for --max-cost

    async def find_prices(self) -> None:
        """The batch prices every batch's worst case is counted at (progress, status and the
        report show it in flight), and ``--max-cost`` with them. Without a listed price or
        ``--max-tokens`` the worst case is unknown, which only ``--max-cost`` refuses."""
        max_tokens = self.options.max_tokens
        if max_tokens is None:  # check_batch_options refused it with --max-cost
            return
        prices, note = await find_batch_prices(self.url, self.model, self.api_key)
        if prices is None:
            if self.options.max_cost is not None:
                raise BatchRunError(
                    f"--max-cost with --batch needs the batch price and {note}; drop --max-cost "
                    "or use an API whose GET /models lists prices"
                )
            _log.info("no batch prices (%s): the worst case in flight is unknown", note)
            return
        _log.info("batch prices: %s", note)
        self.prices = prices
        if self.options.max_cost is not None:
            self.budget = BatchBudget(self.options.max_cost, prices, max_tokens, self.store.db)

    async def submit_round(self, chains_of: Callable[[], Iterator[list[list[TurnPlan]]]]) -> None:
        """Send every turn that is ready now, in batches of at most ``--batch-size`` rows."""
        self.progress.rejected = 0
        self.budget_blocked = False
        live = self.ledger.live_keys()
        queued: set[str] = set()
        pending: list[tuple[TurnPlan, list[str]]] = []
        rows_done = rows_seen = 0
        for chains in chains_of():
            rows_seen += 1
            finished = True
            for chain in chains:
                state, ready = await self._next_turn(chain, live, queued)
                if state == "ready":
                    queued.add(ready[0].key)
                    pending.append(ready)
                if state != "done":
                    finished = False
            rows_done += finished
            if len(pending) >= self.size:
                await self._send(pending)
                pending = []
            if self.stop.is_set():
                return
            if rows_done % 512 == 0:
                await asyncio.sleep(0)  # signals and the display
        if pending and not self.stop.is_set():
            await self._send(pending)
        self.progress.rows_done = rows_done + self.progress.rejected
        self.progress.total_rows = rows_seen + self.progress.rejected
        self.display.refresh()

    async def _next_turn(
        self, chain: list[TurnPlan], live: set[str], queued: set[str]
    ) -> tuple[str, tuple[TurnPlan, list[str]] | None]:
        """Where a chain stands: ``done`` (all stored, or failed), ``waiting`` (a turn is in a
        batch), or ``ready`` with the turn to send and the answers before it."""
        answers: list[str] = []
        last = len(chain) - 1
        for index, plan in enumerate(chain):
            if plan.key in self.stored:
                if index == last:
                    continue
                if not self.stored.complete(plan.key):
                    await self._fail_rest(chain[index + 1 :], "earlier_turn_incomplete")
                    return "done", None
                answers.append(self.stored.content(plan.key))
                continue
            if plan.key in self.given_up:
                await self._fail_rest(chain[index + 1 :], "earlier_turn_failed")
                return "done", None
            if plan.key in live or plan.key in queued:
                return "waiting", None
            return "ready", (plan, answers)
        return "done", None

    async def _fail_rest(self, plans: list[TurnPlan], reason: str) -> None:
        for plan in plans:
            if plan.key not in self.stored and plan.key not in self.failed_written:
                self.failed_written.add(plan.key)
                self.given_up.add(plan.key)
                await self.writer.add_failure(plan.key, plan.source_id, plan.turn, reason, 0, [])
                self.progress.turns_failed += 1

    def _build_rows(self, pending: list[tuple[TurnPlan, list[str]]]) -> list[PlannedRow]:
        """Render each prompt once, as a live run does, and build its body (in a thread)."""
        rows = []
        for plan, answers in pending:
            messages = build_messages(plan, answers)
            rendering = self.renderer.render(messages, plan.tools, self.variables)
            body = self.backend.request_body(
                self.settings.for_sample(plan.sample),
                messages,
                plan.tools,
                False,
                self.options.logprobs,
            )
            body = self.dialect.row_body(body)
            if self.dialect.name == "openai-files":
                body["model"] = self.model
            request = {"messages": messages, "tools": plan.tools}
            request["rendering"] = rendering.as_dict()  # what reconstruction reads, as live
            prompt_tokens = None
            if self.prices is not None and not rendering.error:
                prompt_tokens = len(self.renderer.prompt_ids(rendering))
            rows.append(
                PlannedRow(
                    key=plan.key,
                    source_id=plan.source_id,
                    turn=plan.turn,
                    request=orjson.dumps(request),
                    body=orjson.dumps(body),
                    prompt_tokens=prompt_tokens,
                )
            )
        return rows

    async def _send(self, pending: list[tuple[TurnPlan, list[str]]]) -> None:
        rows = await asyncio.to_thread(self._build_rows, pending)
        for part in _by_bytes(rows, self.dialect.max_bytes):
            if self.stop.is_set():
                return
            if self.budget is None:
                worst = self._worst(part)
            else:
                part, worst = self._fit(part)
                if not part:
                    return
            try:
                intent = await submit(self.target, self.ledger, part, worst)
            except CreateRefused as exc:
                if exc.status == 429:
                    wait = exc.retry_after if exc.retry_after is not None else self.poll
                    _log.warning("%s; waiting %.1f s, then the next round sends them", exc, wait)
                    await self.sleep(wait)
                    return
                raise BatchRunError(
                    f"{exc}; nothing of that batch was made or billed, its rows are free again, "
                    "and what is stored is kept"
                ) from None
            self.progress.batches_submitted += 1
            self.progress.rows_submitted += len(part)
            self.progress.rows_resent += sum(1 for row in part if self.tries[row.key])
            self.progress.batches[intent.status or intent.state] += 1
            self.progress.rows_in_flight += len(part)
            # The batch just sent starts its round on the display, as the report draws it (it
            # said "round 0" while round 1 validated, until the next poll's refresh).
            self.progress.round = batch_rounds(self.ledger.db, time.time())[-1]["round"]
            self.display.refresh()

    def _worst(self, rows: list[PlannedRow]) -> float | None:
        """The most ``rows`` can cost at the listed batch prices; None when unpriced (no
        listed price or no ``--max-tokens``), or a row's prompt could not be rendered."""
        if self.prices is None or any(row.prompt_tokens is None for row in rows):
            return None
        max_tokens = self.options.max_tokens
        return sum(row_worst(self.prices, max_tokens, row.prompt_tokens) for row in rows)

    def _fit(self, rows: list[PlannedRow]) -> tuple[list[PlannedRow], float]:
        """The rows that fit in ``--max-cost`` at their worst case, and that worst case."""
        assert self.budget is not None
        room = self.budget.room()
        total = 0.0
        for index, row in enumerate(rows):
            worst = self.budget.worst(row.prompt_tokens or 0)
            if total + worst > room:
                self.budget_blocked = True
                return rows[:index], total
            total += worst
        return rows, total


def _by_bytes(rows: list[PlannedRow], limit: int) -> Iterator[list[PlannedRow]]:
    """``rows`` in consecutive parts whose bodies stay under ``limit`` bytes each."""
    part: list[PlannedRow] = []
    size = 0
    for row in rows:
        grown = size + len(row.body) + 64  # the custom_id and the envelope
        if part and grown > limit:
            yield part
            part, size = [], 0
            grown = len(row.body) + 64
        part.append(row)
        size = grown
    if part:
        yield part

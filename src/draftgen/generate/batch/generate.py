"""``draftgen run --batch``: the run's generation step, through a batch API.

The run plans, stores, reconstructs and verifies exactly as a live run; only this step differs.
It works in rounds: plan from the inputs as a live run does, send every turn that is ready (not
stored, not in a live batch, its earlier turns answered) in batches, poll them with backoff and
store their results; the next round sends what those answers made ready (a conversation advances
one turn per round) and, under a new nonce, the rows whose batch failed, expired or was cancelled,
up to ``--batch-retries`` times.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import threading
import time
from collections.abc import Iterator

import orjson

from draftgen.backends import Backend
from draftgen.generate.batch import steps
from draftgen.generate.batch.dialects import (
    DIALECTS,
    BatchApiError,
    BatchHttp,
    CreateRefused,
    get_dialect,
)
from draftgen.generate.batch.errors import BatchRunError
from draftgen.generate.batch.ingest import ingest
from draftgen.generate.batch.money import BatchBudget, BatchPrices, find_batch_prices, row_worst
from draftgen.generate.batch.progress import BatchDisplay, BatchProgress
from draftgen.generate.batch.submit import BatchTarget, reconcile, submit
from draftgen.generate.contract import Destination, GenerationContext
from draftgen.generate.endpoints import EndpointSpec, endpoint_label, endpoint_specs
from draftgen.generate.resume import SourceIds, StoredTurns
from draftgen.generate.signals import SignalStop
from draftgen.inputs.ingest import Rejection
from draftgen.inputs.mix import read_suite
from draftgen.inputs.plan import (
    NOTHING_TO_ANSWER,
    TurnPlan,
    build_messages,
    plan_turns,
    sample_chains,
)
from draftgen.reconstruct.text import COMPLETE_FINISH_REASONS
from draftgen.records import Completion, GenerationSettings
from draftgen.store.batch_ledger import Intent, Ledger, PlannedRow
from draftgen.store.batch_timing import batch_rounds, timing_text
from draftgen.store.database import REJECTED_NAME, SampleTally, Store
from draftgen.tokens.rendering import ChatRenderer, request_variables

_log = logging.getLogger("draftgen.batch")
BATCH_META = "batch"  # store meta: JSON {dialect, url, model, api_key_env} for status and cancel
POLL_MAX = 60.0  # seconds between polls at most, after backoff
SIMULATED_POLL = (0.2, 1.0)  # first and longest poll against the built-in simulator
SIMULATED_GRACE = 5.0  # its batches show within a second, so absence is proven sooner
LOOKUPS_AT_ONCE = 8
# Batch routing takes only these of [openrouter.provider] (BATCH_REFERENCE.md §1).
BATCH_PROVIDER_FIELDS = ("only", "allow_fallbacks")


class Batch:
    """Batches as a run's engine (``contract.Engine``): the counterpart of ``engine.Live``."""

    async def generate(
        self,
        ctx: GenerationContext,
        store: Store,
        destination: Destination,
        started: threading.Event | None = None,
    ) -> BatchProgress:
        return await BatchRun(ctx, store, destination, started).run()


def batch_url(options, base_url: str | list[EndpointSpec]) -> str:
    """Where batches go: ``--batch-url``, else the run's one endpoint, whichever way it was
    given (one ``--base-url``, one ``[[backend.endpoints]]``, the built-in simulator). With
    openai-files, a root ending in ``/api/v1`` (OpenRouter's layout, which the simulator
    follows) is taken as the ``/v1`` beside it, where OpenAI-style file batches are served."""
    if options.batch_url:
        return options.batch_url.rstrip("/")
    urls = [spec.url for spec in endpoint_specs(base_url)]
    if len(urls) != 1:
        raise BatchRunError(several_endpoints(len(urls)))
    url = urls[0].rstrip("/")
    if options.batch_dialect == "openai-files" and url.endswith("/api/v1"):
        url = url.removesuffix("/api/v1") + "/v1"
    return url


def several_endpoints(count: int) -> str:
    return (
        f"--batch sends every batch to one API, and {count} endpoints are given; name it with "
        "--batch-url (batch_url in draftgen.toml), or give one endpoint"
    )


def check_batch_options(options, settings: GenerationSettings, backend: Backend) -> None:
    """Refuse what batch mode cannot do, before anything is sent (``backend``: the run's)."""
    if not backend.batch_api:
        raise BatchRunError(
            f"--batch speaks OpenAI-compatible batch APIs (OpenRouter, openai-files); --backend "
            f"{options.backend} servers have none, so drop one of the two"
        )
    if options.max_cost is not None and options.max_tokens is None:
        raise BatchRunError(
            "--max-cost with --batch needs --max-tokens: a batch is paid before its answers are "
            "seen, so each row is counted at its prompt plus max_tokens before it is sent"
        )
    extra = sorted(set(settings.provider or {}) - set(BATCH_PROVIDER_FIELDS))
    dialect = DIALECTS.get(options.batch_dialect)
    if extra and dialect is not None and dialect.routes_provider:
        raise BatchRunError(
            f"batch routing takes only {' and '.join(BATCH_PROVIDER_FIELDS)}, not "
            f"{', '.join('provider.' + name for name in extra)}; drop them from "
            "[openrouter.provider] for --batch"
        )
    if options.batch_size is not None and options.batch_size < 1:
        raise BatchRunError(f"--batch-size {options.batch_size} must be 1 or more")
    if options.batch_retries < 0:
        raise BatchRunError(f"--batch-retries {options.batch_retries} must be 0 or more")
    given = options.endpoints or (endpoint_specs(options.base_url) if options.base_url else [])
    if not options.batch_url and len(given) > 1:
        raise BatchRunError(several_endpoints(len(given)))


class BatchRun:
    """One batch generation over a run directory's store, in rounds (the module's docstring);
    ``ctx`` is the run's context, its batch options checked by the run."""

    def __init__(
        self,
        ctx: GenerationContext,
        store: Store,
        destination: Destination,
        started: threading.Event | None,
    ) -> None:
        options = ctx.options
        self.options = options
        self.suite = ctx.suite
        self.store = store
        self.settings = settings = ctx.settings
        self.api_key = destination.api_key
        self.started = started
        self.simulated = destination.simulated
        self.url = batch_url(options, destination.base_url)
        self.backend = ctx.backend
        self.dialect = get_dialect(options.batch_dialect)
        limit = options.batch_size or self.dialect.max_rows
        self.size = min(limit, self.dialect.max_rows)
        self.poll, self.poll_max = (
            SIMULATED_POLL if self.simulated else (max(0.05, options.batch_poll), POLL_MAX)
        )
        self.grace = (
            min(options.batch_grace, SIMULATED_GRACE) if self.simulated else (options.batch_grace)
        )
        self.model = options.batch_model or settings.model
        self.progress = BatchProgress(total_rows=ctx.total_rows)
        # The run's writer, as the live engine's: the store's file checked after every commit,
        # a write the disk refuses held, then kept in a side file and the run stopped (an
        # intent kept there is one a crash left: the next run imports it and reconciles).
        self.writer = store.open_writer()
        self.ledger = Ledger(store, self.writer)
        self.stored = StoredTurns(store)
        self.tries: collections.Counter = collections.Counter()  # retried sends, this process
        self.given_up: set[str] = set()  # failed for good in this process
        self.failed_written: set[str] = set()
        self.unseen: set[str] = set()  # intents whose recorded batch was warned about (404)
        self.stop = asyncio.Event()
        self.prices: BatchPrices | None = None  # listed batch prices, with --max-tokens
        self.budget: BatchBudget | None = None
        self.budget_blocked = False
        self.began = time.time()
        self.first_round = True
        self.renderer = ChatRenderer(ctx.tokenizer, ctx.profile)
        self.variables = request_variables(settings, ctx.profile)
        self.progress.watch(failures=self.writer.failure_reasons, tally=SampleTally(store.path))

    # -- the run ---------------------------------------------------------------------------------

    async def run(self) -> BatchProgress:
        provider = None
        if self.settings.provider and self.dialect.routes_provider:
            provider = dict(self.settings.provider)
        http = BatchHttp(self.url, self.api_key)
        self.target = BatchTarget(
            self.dialect, http, endpoint_label(self.url), self.model, provider, self.grace
        )
        self.store.settings.set_meta(
            BATCH_META,
            orjson.dumps(
                {
                    "dialect": self.dialect.name,
                    "url": self.target.url,
                    "model": self.model,
                    "api_key_env": self.options.api_key_env,
                    "simulated": self.simulated,
                    "grace": self.grace,
                }
            ).decode(),
        )
        if self.started is not None:
            self.started.set()
        self.main = asyncio.current_task()
        display = BatchDisplay(self.progress, interval=self.options.progress_interval)
        self.display = display
        signals = SignalStop(self, asyncio.get_running_loop())
        try:
            async with http:
                await self._prices()
                with display:
                    signals.install()
                    try:
                        await self._work()
                    except asyncio.CancelledError:
                        if not self.stop.is_set():
                            raise
                    finally:
                        signals.remove()
        except BatchApiError as exc:
            raise BatchRunError(
                f"stopped: {exc}; everything stored so far is in {self.options.out}, batches "
                "already sent keep running, and the same command picks them up"
            ) from None
        finally:
            await asyncio.to_thread(self.writer.close)
        self._farewell()
        return self.progress

    async def _work(self) -> None:
        await self._reconcile_open()
        if self.options.batch_detach:
            await self._sweep()
            await self._submit_round()
            self._refresh_live()
            return
        while not self.stop.is_set():
            await self._submit_round()
            live = self._refresh_live()
            if not live:
                if self.budget_blocked and self.budget is not None:
                    self._request_stop(self.budget.sentence())
                return
            await self._poll_until_change()

    def on_first_signal(self) -> str:
        """Ctrl-C (or SIGTERM, SIGHUP): send no new batches; the call in flight finishes."""
        self._request_stop("interrupted")
        return (
            "draftgen: stopping: no new batches; the call in flight finishes and is "
            "recorded (Ctrl-C again to abandon it)"
        )

    def on_second_signal(self) -> str:
        if self.main is not None:
            self.main.cancel()
        return "draftgen: abandoning the batch call in flight"

    def _request_stop(self, reason: str) -> None:
        if not self.stop.is_set():
            self.progress.stopped = reason
            self.stop.set()

    def _farewell(self) -> None:
        live = self.ledger.intents(live_only=True)
        if not live:
            return
        rows = sum(i.rows for i in live)
        if self.options.batch_detach and not self.progress.stopped:
            _log.info(
                "detached: %d batches (%d rows) are running at the provider; run the same "
                "command again to collect their results (draftgen status %s shows them)",
                len(live),
                rows,
                self.options.out,
            )
        else:
            _log.warning(
                "%d batches (%d rows) keep running at the provider and are billed as they "
                "finish; the same command picks them up, draftgen cancel %s cancels them",
                len(live),
                rows,
                self.options.out,
            )

    async def _prices(self) -> None:
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

    # -- planning and sending ---------------------------------------------------------------------

    def _chains(self) -> Iterator[list[list[TurnPlan]]]:
        """Each usable row's sample chains, rejecting as a live run does (first round only)."""
        options = self.options
        write = self.first_round
        rejected = open(options.out / REJECTED_NAME, "wb") if write else None  # noqa: SIM115
        seen_ids = SourceIds()

        def reject(rejection: Rejection) -> None:
            shard = options.shard
            if shard is not None and not shard.holds_line(rejection.input, rejection.line):
                return
            if rejected is not None:
                rejected.write(rejection.as_json() + b"\n")
            self.progress.rejected += 1

        try:
            for item in read_suite(self.suite):
                if isinstance(item, Rejection):
                    reject(item)
                    continue
                plans = plan_turns(item)
                problem = seen_ids.duplicate_problem(item, plans) or (
                    None if plans else NOTHING_TO_ANSWER
                )
                if problem:
                    reject(Rejection(item.input, item.line, problem))
                    continue
                if options.shard is not None and not options.shard.holds_key(plans[0].key):
                    continue
                yield sample_chains(plans, options.samples)
        finally:
            seen_ids.close()
            if rejected is not None:
                rejected.close()
            self.first_round = False

    async def _submit_round(self) -> None:
        """Send every turn that is ready now, in batches of at most ``--batch-size`` rows."""
        self.progress.rejected = 0
        self.budget_blocked = False
        live = self.ledger.live_keys()
        queued: set[str] = set()
        pending: list[tuple[TurnPlan, list[str]]] = []
        rows_done = rows_seen = 0
        for chains in self._chains():
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
                    await self._sleep(wait)
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

    # -- polling and results ----------------------------------------------------------------------

    def _refresh_live(self) -> list[Intent]:
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

    async def _poll_until_change(self) -> None:
        """Poll the live batches, backing off, until one ends (its results are then stored) or
        a lost create is settled; Ctrl-C ends the wait at once."""
        delay = self.poll
        while not self.stop.is_set():
            changed = await self._sweep()
            self.display.refresh()
            if changed:
                return
            await self._sleep(delay)
            delay = min(delay * 1.6, self.poll_max)

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stop.wait(), timeout=seconds)

    async def _reconcile_open(self) -> None:
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
        self._refresh_live()

    async def _settle(self, intent: Intent) -> bool:
        outcome = await reconcile(self.target, self.ledger, intent)
        return outcome != "unknown"

    async def _sweep(self) -> bool:
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
        self._refresh_live()
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
            self._request_stop(
                f"batch {info.id} was cancelled (draftgen cancel) while this run was polling; "
                "no new batches are sent, and the same command resumes"
            )
        steps.reached("after_ingest")

    def _cancelled_during_this_run(self, intent: Intent) -> bool:
        detail = self.ledger.intent(intent.nonce).detail or {}
        asked = detail.get("cancel_requested_at")
        return isinstance(asked, (int, float)) and asked >= self.began


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

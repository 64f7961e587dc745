"""The live generation step: every missing turn requested through the HTTP client and stored.

Conversations are worked as chains (turn k+1 needs turn k's regenerated answer); identical turns
in flight at once are requested once; a resume skips every chain the store already holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace

import orjson

from draftgen.backends.proof import Offer, offer_fields
from draftgen.collector import collecting_less
from draftgen.generate.budget import (
    BudgetReached,
    CostCounter,
    Prices,
    SpendGuard,
    answer_bytes,
    find_prices,
    tally,
)
from draftgen.generate.calibrate import (
    QUESTION_ATTEMPTS,
    Answer,
    Calibrator,
    left_out,
    renderer_question,
)
from draftgen.generate.client import (
    ChatClient,
    FatalApiError,
    GenerationFailed,
    RetryPolicy,
    RunStopped,
)
from draftgen.generate.contract import Destination, GenerationContext
from draftgen.generate.endpoints import endpoint_specs
from draftgen.generate.errors import RunError
from draftgen.generate.judge import judge
from draftgen.generate.native_turn import NativeTurns, TokenPrompt
from draftgen.generate.progress import ProgressDisplay, RunProgress
from draftgen.generate.proof import (
    OFFER_META,
    PROOF_QUESTION,
    ask_endpoint,
    asks_question,
    describe,
    listed_logprobs,
    offer_record,
    openrouter_offer,
    recorded_offer,
    server_of,
)
from draftgen.generate.refusals import RefusedAnswers
from draftgen.generate.resume import ROWS_PER_STATEMENT, SourceIds, StoredTurns
from draftgen.generate.serial import SerialExecutor
from draftgen.generate.signals import SignalStop
from draftgen.inputs.ingest import Conversation, Rejection
from draftgen.inputs.mix import read_suite
from draftgen.inputs.plan import (
    NOTHING_TO_ANSWER,
    TurnPlan,
    build_messages,
    plan_turns,
    sample_chains,
    sample_of,
)
from draftgen.reconstruct.text import COMPLETE_FINISH_REASONS
from draftgen.records import (
    PROOF_IDS,
    PROOF_LOGPROBS,
    PROOF_TEXT,
    Completion,
    GenerationSettings,
    Rendering,
)
from draftgen.store.calibration import RENDERER, TOOL_ARGUMENTS, calibration_statements
from draftgen.store.database import (
    REJECTED_NAME,
    UNKNOWN_PROVIDER,
    SampleTally,
    Store,
    StoreError,
    StoreHalted,
    completion_statements,
    exclusion_statements,
    replacement_statements,
)
from draftgen.store.refused import refused_figures
from draftgen.tokens.rendering import ChatRenderer, request_variables, template_renderer

_log = logging.getLogger("draftgen.generate")
JUDGE_EVERY = 1.0  # seconds between judgements of the providers' figures (read every few)


@dataclass
class Rebuys:
    """What buying an excluded provider's spoiled samples again came to."""

    wanted: int = 0  # spoiled samples not bought again before
    bought: int = 0
    failed: int = 0  # the request failed: the spoiled completion stays, a resume tries again
    over_budget: int = 0  # left, since buying them would pass the re-buy budget
    cost: float = 0.0


class LiveGeneration:
    """One live generation over a run directory's store: ``await LiveGeneration(...).run()``.

    A producer reads the rows and queues the chains that need requests; ``concurrency`` workers
    take a chain each and work its turns in order. The client's limiter, not the worker count,
    bounds the requests in flight. ``ctx`` holds the run's options, settings, backend,
    tokenizer and profile, resolved once by the run.
    """

    # rejected.jsonl, opened at the first rejected row: buying again rejects none.
    rejected = None

    def __init__(
        self,
        ctx: GenerationContext,
        store: Store,
        destination: Destination,
        started: threading.Event | None = None,
    ) -> None:
        """``started`` is set as the first request is sent."""
        options = ctx.options
        self.options = options
        self.suite = ctx.suite
        self.store = store
        self.settings = ctx.settings
        self.started = started
        self.progress = RunProgress(total_rows=ctx.total_rows)
        self.stored = StoredTurns(store)
        self.inflight: dict[str, asyncio.Future] = {}
        self.writer = store.open_writer()  # checks the store's file after every commit
        self.halted: StoreHalted | None = None  # the store took no more: the run's error
        self.queue: asyncio.Queue = asyncio.Queue(maxsize=max(16, options.concurrency))
        self.backend = ctx.backend
        self.stream = options.stream and self.backend.can_stream
        self.base_url, self.api_key = destination.base_url, destination.api_key
        self.servers = destination.servers
        # What proof the endpoint offers beyond text (``generate.proof``): found by the first
        # step of the work (``find_offer``); None for a backend whose ids are the server's.
        self.offer: Offer | None = None
        # What earlier runs spent is counted by ``start_budget``, once the prices are known.
        self.budget = SpendGuard(options.max_cost) if options.max_cost is not None else None
        self.costs: CostCounter | None = None
        self.refused = RefusedAnswers(self.writer, self.budget, self.listed_prices)
        self.client = self._client()
        self.stop = asyncio.Event()
        self.progress.watch(
            errors=self.client.stats.errors,
            retried=self.client.stats.retried,
            failures=self.writer.failure_reasons,
            in_flight=lambda: self.client.limiter.in_flight,
            tally=SampleTally(store.path),
        )
        self.renderer = ChatRenderer(ctx.tokenizer, ctx.profile)
        self.variables = request_variables(self.settings, ctx.profile)
        self.native = (
            NativeTurns(ctx.tokenizer, ctx.profile) if self.backend.needs_prompt_ids else None
        )
        # One thread renders prompts off the event loop, first come first served: requests leave in
        # the order they were built, so a run is repeatable (rendering holds the GIL anyway).
        self.render_pool = SerialExecutor("draftgen-render")
        self.rejected_path = options.out / REJECTED_NAME
        self.seen_ids = SourceIds()
        self.display = ProgressDisplay(self.progress, interval=options.progress_interval)
        self.workers: list[asyncio.Task] = []
        self.producer: asyncio.Task | None = None
        # Providers caught serving something else are left out of every request from then on
        # (the backend's ``route_around``); --keep-providers, or a backend that routes to no
        # providers, never leaves one out. A resume goes on leaving out what the store records.
        self.route_around = None if options.keep_providers else self.backend.route_around
        self.excluded: list[str] = (
            list(store.providers.excluded_providers()) if self.route_around else []
        )
        self.rebuys = Rebuys()
        self._rebuy_reserved = 0.0  # expected cost of the re-buys queued and not yet answered
        self.calibrator = self._calibrator(ctx)
        self.routes: dict[str, str | None] = {}  # provider -> the route calibration asked it by
        self.tool_calibration: asyncio.Task | None = None
        self.asking = asyncio.Lock()  # calibration's later questions, one asker at a time

    def _client(self) -> ChatClient:
        """The run's HTTP client: its retries, timeouts, limits and budget from the options; the
        endpoints' events reported to the writer."""
        options = self.options
        return ChatClient(
            self.base_url,
            self.api_key,
            concurrency=options.concurrency,
            retry=RetryPolicy(
                max_attempts=options.max_attempts, base_delay=options.retry_base_delay
            ),
            idle_timeout=options.idle_timeout,
            attempt_timeout=options.attempt_timeout,
            max_response_bytes=options.response_byte_cap(),
            max_retries=options.max_retries,
            budget=self.budget,
            backend=self.backend,
            endpoint_concurrency=options.endpoint_concurrency,
            health=options.endpoint_health,
            on_endpoint_event=self.writer.note_endpoint_event,
        )

    # -- the run ---------------------------------------------------------------------------------

    async def run(self) -> RunProgress:
        """Work every row, then close what the engine opened."""
        await self._run(self.produce(), calibrate=True)
        self._settle_stop()
        return self.progress

    async def rebuy(self, spoiled: list[dict], allowance: float) -> Rebuys:
        """Buy each of ``spoiled`` (``Store.providers.spoiled_completions``) again, from providers
        other than the excluded ones, as long as what they cost stays within ``allowance`` dollars;
        each answer replaces its spoiled completion (kept aside, never lost) in one commit."""
        self.rebuys.wanted = len(spoiled)
        self.progress.total_rows = len(spoiled)
        await self._run(self.produce_rebuys(spoiled, allowance))
        self._settle_stop()
        return self.rebuys

    def _settle_stop(self) -> None:
        """A stop at ``--max-cost`` says what was spent once the answers in flight are counted
        and stored, not as it was when the first attempt was refused."""
        if self.budget is not None and self.budget.reached and self.progress.stopped:
            if self.progress.stopped.startswith("reached --max-cost"):
                self.progress.stopped = self.budget.sentence()

    async def _run(self, producer, calibrate: bool = False) -> None:
        try:
            await self.start_budget()
            # Thousands of requests in flight keep ~100,000 objects alive at once.
            with collecting_less():
                async with self.client:
                    await self.find_offer()
                    if calibrate:
                        await self.calibrate()
                    with self.display:
                        await self._work(producer)
        finally:
            producer.close()  # never started if the budget or the client stopped the run first
            await self.close()

    async def start_budget(self) -> None:
        """Find the prices ``--max-cost`` counts by when a reported cost is not believed, and
        count what the run directory holds by the same rule (a stored negative cost adds its
        tokens' price, never takes money off)."""
        if self.budget is None:
            return
        self.costs = CostCounter(await self.listed_prices())
        self.refused.costs = self.costs
        stored = tally(self.costs, self.store.tallies.spend_rows())
        refused = refused_figures(self.store.db)
        self.budget.begin(self.costs.prices, self.options.max_tokens, stored, refused)

    async def close(self) -> None:
        """Close what the engine opened; the writer last, since closing waits for its commits."""
        if self.rejected is not None:
            self.rejected.close()
        self.seen_ids.close()
        self.render_pool.shutdown()
        await asyncio.to_thread(self.writer.close)

    async def _work(self, producer) -> None:
        """The workers and ``producer`` until every row is worked or the run stops; an API or
        store error that ends the run becomes a RunError that says how to resume."""
        signals = SignalStop(self, asyncio.get_running_loop())
        # The producer first: it fills the queue before the workers start, so each of them takes
        # its first row at once instead of every one of them waiting on the queue.
        self.producer = asyncio.create_task(producer)
        self.producer.add_done_callback(self._on_producer_done)
        self.workers = [asyncio.create_task(self.worker()) for _ in range(self.options.concurrency)]
        judging = (
            asyncio.create_task(self.judge_providers())
            if self.route_around or self.calibrator
            else None
        )
        signals.install()
        try:
            await asyncio.gather(*self.workers)
            if (error := self._producer_error()) is not None:
                raise error
            if self.tool_calibration is not None:
                await self.tool_calibration
            # Every provider that served is asked before its samples are judged, also one the
            # judge's tick did not see (a short run).
            await self.ask_unasked(self.store.providers.provider_figures())
        except asyncio.CancelledError:
            if (error := self._producer_error()) is not None:
                raise error from None
            if not self.stop.is_set():
                raise
        except FatalApiError as exc:
            # The answers in flight are paid for: they reach the store before the run stops.
            self.request_stop(str(exc))
            await asyncio.wait(self.workers, timeout=self.options.shutdown_grace)
            raise RunError(
                f"stopped: {exc}; everything generated so far is stored in {self.options.out} "
                "and the same command resumes",
                reason=f"stopped: {exc}",
            ) from None
        except StoreHalted as exc:  # its sentence says where the rows are and what to do
            raise RunError(str(exc)) from None
        except StoreError as exc:
            raise RunError(
                f"{exc}; what was committed before is safe: fix the cause (disk space, "
                "permissions) and rerun the same command to resume"
            ) from None
        finally:
            signals.remove()
            await self.questions_settled()
            tasks = (self.producer, *self.workers, *((judging,) if judging else ()))
            if self.tool_calibration is not None:
                tasks += (self.tool_calibration,)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        if self.halted is not None:
            raise RunError(str(self.halted)) from None

    def halt(self, error: StoreHalted) -> None:
        """The store takes no more (its file is gone, the disk refused a write too long): send
        nothing new and give the requests in flight, already paid for, ``shutdown_grace``
        seconds to reach the writer, which keeps them where ``error`` says; then stop with it."""
        if self.halted is None:
            self.halted = error
            self.request_stop(str(error))
            asyncio.get_running_loop().call_later(self.options.shutdown_grace, self.abandon)

    def request_stop(self, reason: str) -> None:
        """Send nothing new and let workers finish their turn in hand; the first reason stays."""
        if not self.stop.is_set():
            self.progress.stopped = reason
            self.client.stop(reason)
            self.stop.set()

    def abandon(self) -> None:
        """Cancel the workers, and with them the requests they wait on."""
        for task in self.workers:
            task.cancel()

    def on_first_signal(self) -> str:
        """Ctrl-C (or SIGTERM, SIGHUP): send nothing new and give the requests in flight
        ``shutdown_grace`` seconds, then abandon them."""
        self.request_stop("interrupted")
        if self.producer is not None:
            self.producer.cancel()
        grace = self.options.shutdown_grace
        asyncio.get_running_loop().call_later(grace, self.abandon)
        in_flight = self.client.limiter.in_flight
        if not in_flight:
            return "draftgen: stopping; no request is in flight, so there is nothing to wait for"
        requests = "1 request" if in_flight == 1 else f"{in_flight} requests"
        return (
            f"draftgen: stopping; waiting up to {grace:.0f} s for {requests} in flight "
            "(Ctrl-C again to abandon them)"
        )

    def on_second_signal(self) -> str:
        self.abandon()
        return "draftgen: abandoning the requests in flight"

    def _on_producer_done(self, task: asyncio.Task) -> None:
        if not task.cancelled() and task.exception() is not None:
            self.abandon()  # an unreadable input: the workers would wait forever

    def _producer_error(self) -> BaseException | None:
        """What the producer raised (an unreadable input), to be the run's error."""
        producer = self.producer
        if producer is not None and producer.done() and not producer.cancelled():
            return producer.exception()
        return None

    # -- the providers ---------------------------------------------------------------------------

    async def judge_providers(self) -> None:
        """Judge the providers' figures as the tally last read them (``generate.judge``), every
        ``JUDGE_EVERY`` seconds, and leave out each one caught; a provider first seen serving
        without having been calibrated is asked the calibration questions then."""
        tally = self.progress.tally
        while tally is not None:
            await asyncio.sleep(JUDGE_EVERY)
            for exclusion in (
                judge(tally.providers, set(self.excluded)) if self.route_around else ()
            ):
                await self.exclude(exclusion.provider, exclusion.evidence)
            await self.ask_unasked(tally.providers)

    async def ask_unasked(self, providers) -> None:
        """The renderer question to each of ``providers`` (names) seen serving without having
        answered it: one the listing did not name, or a resume's new one."""
        if self.calibrator is None or self.calibrator.question is None:
            return
        # One asker at a time: the judge's tick and the run's end must not both ask a provider
        # they each found unasked (it would be bought twice).
        async with self.asking:
            new = [
                name
                for name in providers
                if name != UNKNOWN_PROVIDER
                and name not in self.excluded
                and self.calibrator.needs(name, RENDERER)
            ]
            if new:
                await self.ask_renderers([(name, name) for name in new])

    async def questions_settled(self) -> None:
        """Wait (up to ``shutdown_grace``) for a calibration question in flight: it is paid for,
        so it is stored before the task asking it is cancelled."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.options.shutdown_grace), self.asking:
                pass

    async def exclude(self, provider: str, evidence: str) -> None:
        """Send nothing more to ``provider``, say so once with the evidence, and record it so a
        resume goes on without it."""
        self.excluded.append(provider)
        _log.warning(
            "leaving provider %s out of the rest of the run (provider.ignore): %s; "
            "--keep-providers keeps every provider",
            provider,
            evidence,
        )
        await self.writer.write(exclusion_statements(provider, evidence))

    # -- calibration -----------------------------------------------------------------------------

    def _calibrator(self, ctx: GenerationContext) -> Calibrator | None:
        """The run's calibration (``generate.calibrate``), None where it is off or moot (a server
        that returns the generated ids, a backend that cannot route to one provider)."""
        backend = self.backend
        if self.options.no_calibrate or backend.id_source != "text" or backend.pin_provider is None:
            return None
        question = renderer_question(
            self.renderer,
            template_renderer(ctx.tokenizer, ctx.profile),
            ctx.profile,
            self.variables,
        )
        return Calibrator(
            send=self.send_question,
            request_body=self.request_body,
            settings=self.settings,
            pin=backend.pin_provider,
            question=question,
            tools=bool(ctx.profile.tool_call_writer) and ctx.profile.segmented is None,
            profile=ctx.profile,
            asked=self.store.calibrations.read(),
        )

    async def send_proof_question(self, body: bytes) -> Completion:
        """The proof question, counted under ``--max-cost`` and kept with calibration's answers
        (question ``proof``): it is paid for like them, and a resume counts it."""
        completion, errors = await self.send_question(body)
        answer = Answer(
            provider=completion.provider or "",
            question=PROOF_QUESTION,
            verdict="answered",
            route=None,
            cost=max(completion.cost, 0.0),
            prompt_tokens=completion.prompt_tokens,
            completion_tokens=completion.completion_tokens,
            generation_id=completion.generation_id,
            errors=errors,
        )
        await self.writer.write(calibration_statements(answer.row()))
        return completion

    async def send_question(self, body: bytes) -> tuple[Completion, list[dict]]:
        """One calibration question, counted under ``--max-cost`` like any answer; its failed
        attempts are returned to be stored with it (the run's one count of retries)."""
        self.sending()
        completion, errors = await self.client.complete(
            body, False, self.refused.of(None, "calibration", 0), QUESTION_ATTEMPTS
        )
        self.count_cost(completion, body)
        return completion, [error.as_dict() for error in errors]

    async def calibrate(self) -> None:
        """Ask every provider the run may be routed to the renderer question it has not answered
        yet, then leave out those proven to render otherwise."""
        calibrator = self.calibrator
        if calibrator is None or calibrator.question is None:
            return
        first = endpoint_specs(self.base_url)[0].url
        routes = await calibrator.list_routes(first, self.api_key, self._may_route_to)
        if not routes and not calibrator.asked:
            routes = [(None, None)]  # no listing: whoever serves the endpoint answers
        await self.ask_renderers(
            [
                (route, name)
                for route, name in routes
                if name is None or (name not in self.excluded and calibrator.needs(name, RENDERER))
            ]
        )

    def _may_route_to(self, endpoint) -> bool:
        tag = endpoint.tag or ""
        names = {endpoint.provider or "", tag, tag.partition("/")[0]}
        routes_to = self.backend.routes_to
        return routes_to is None or routes_to(self.settings.provider, names)

    async def ask_renderers(self, routes: list[tuple[str | None, str | None]]) -> None:
        """The renderer question to each of ``routes`` at once, kept; then the exclusions."""
        calibrator = self.calibrator
        if calibrator is None or not routes:
            return
        try:
            answers = await asyncio.gather(
                *(calibrator.ask_renderer(route, name) for route, name in routes)
            )
        except (RunStopped, BudgetReached) as exc:
            self.request_stop(str(exc))
            return
        statements = []
        for (route, _), answer in zip(routes, answers, strict=True):
            if answer is None:
                continue
            self.routes.setdefault(answer.provider, route)
            statements += calibration_statements(answer.row())
            _log.info(
                "calibration: %s %s (%s)",
                answer.provider or "the endpoint",
                answer.verdict,
                answer.detail,
                extra={"calibration": answer.row()},
            )
        await self.writer.write(statements)
        if self.route_around is None:
            return  # --keep-providers: what calibration proved still counts, nothing is left out
        for provider, evidence in left_out(calibrator.asked).items():
            if provider not in self.excluded:
                await self.exclude(provider, evidence)

    def start_tool_calibration(self) -> None:
        """Ask the tool question of every calibrated provider, once, beside the run (the first
        turn that declares tools starts it)."""
        if self.calibrator is None or not self.calibrator.tools or self.tool_calibration:
            return
        self.tool_calibration = asyncio.create_task(self.ask_tool_questions())

    async def ask_tool_questions(self) -> None:
        calibrator = self.calibrator
        assert calibrator is not None
        routes = [
            (route, name)
            for name, route in (self.routes or {None: None}).items()
            if name not in self.excluded and calibrator.needs(name or "", TOOL_ARGUMENTS)
        ]
        try:
            answers = await asyncio.gather(
                *(calibrator.ask_tools(route, name) for route, name in routes)
            )
        except (RunStopped, BudgetReached):
            return
        statements = []
        for answer in answers:
            if answer is not None:
                statements += calibration_statements(answer.row())
                _log.info(
                    "calibration: %s tool arguments %s (%s)",
                    answer.provider or "the endpoint",
                    answer.verdict,
                    answer.detail,
                    extra={"calibration": answer.row()},
                )
        await self.writer.write(statements)

    def sample_settings(self, sample: int) -> GenerationSettings:
        """The settings sent for sample ``sample`` of a prompt, routed around the providers left
        out."""
        settings = self.settings.for_sample(sample)
        if self.excluded and self.route_around is not None:
            settings = replace(
                settings, provider=self.route_around(settings.provider, self.excluded)
            )
        return settings

    # -- the producer ----------------------------------------------------------------------------

    async def produce(self) -> None:
        """Queue each row's turns that need requests, then one end mark per worker."""
        # Rows are admitted a list at a time: their ids are checked in one statement.
        for items in _in_lists(read_suite(self.suite), ROWS_PER_STATEMENT):
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

    async def produce_rebuys(self, spoiled: list[dict], allowance: float) -> None:
        """Queue each spoiled completion to be bought again while what the re-buys cost, spent
        and expected (a re-buy is expected to cost what the spoiled answer did), stays within
        ``allowance``; then one end mark per worker."""
        for row in spoiled:
            expected = max(row["cost"] or 0.0, 0.0)
            if self.rebuys.cost + self._rebuy_reserved + expected > allowance:
                self.rebuys.over_budget += 1
                self.progress.rows_done += 1
                continue
            self._rebuy_reserved += expected
            await self.queue.put(row)
            self.display.refresh()
        for _ in range(self.options.concurrency):
            await self.queue.put(None)

    def admit(self, item: Conversation | Rejection) -> list[TurnPlan] | None:
        """The row's turns if this run works them; None for a rejected row (listed) or another
        shard's row."""
        return self.admit_rows([item])[0]

    def admit_rows(self, items: list[Conversation | Rejection]) -> list[list[TurnPlan] | None]:
        """``admit`` of each row in turn, their ids checked in one go."""
        planned = [(item, plan_turns(item)) for item in items if isinstance(item, Conversation)]
        # Checked on every row, whichever shard it is in, so each shard rejects the same.
        problems = iter(zip(planned, self.seen_ids.duplicate_problems(planned), strict=True))
        admitted: list[list[TurnPlan] | None] = []
        for item in items:
            if isinstance(item, Rejection):
                self.reject(item)
                admitted.append(None)
                continue
            (_, plans), problem = next(problems)
            problem = problem or (None if plans else NOTHING_TO_ANSWER)
            if problem:
                self.reject(Rejection(item.input, item.line, problem))
                admitted.append(None)
            elif self.options.shard is not None and not self.options.shard.holds_key(plans[0].key):
                self.progress.total_rows -= 1  # another shard's row
                admitted.append(None)
            else:
                admitted.append(plans)
        return admitted

    def reject(self, rejection: Rejection) -> None:
        """List a rejected row in ``rejected.jsonl`` if it is this shard's, and count it."""
        shard = self.options.shard
        if shard is not None and not shard.holds_line(rejection.input, rejection.line):
            self.progress.total_rows -= 1
            return
        if self.rejected is None:
            self.rejected = open(self.rejected_path, "wb")  # noqa: SIM115 (closed by close())
        self.rejected.write(rejection.as_json() + b"\n")
        self.progress.rejected += 1
        self.progress.rows_done += 1

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

    # -- the workers -----------------------------------------------------------------------------

    async def worker(self) -> None:
        """Work queued rows until the end mark or a stop."""
        while (plans := await self.next_chain()) is not None:
            if isinstance(plans, dict):
                await self.rebuy_one(plans)
            else:
                await self.work_chain(plans)
            if not self.stop.is_set():
                self.progress.row_worked()
            self.display.refresh()

    async def next_chain(self) -> list[TurnPlan] | dict | None:
        """The next queued row's turns (or spoiled completion to buy again); None at the end
        mark or once the run stops."""
        if self.stop.is_set():
            return None
        try:
            return self.queue.get_nowait()  # the common case: no tasks to race against the stop
        except asyncio.QueueEmpty:
            pass
        getter = asyncio.ensure_future(self.queue.get())
        stopped = asyncio.ensure_future(self.stop.wait())
        await asyncio.wait((getter, stopped), return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        if getter.done():
            return getter.result()
        getter.cancel()
        return None

    async def work_chain(self, plans: list[TurnPlan]) -> None:
        """A row's turns, once per completion asked for each."""
        if self.options.samples == 1:
            await self.work_sample(plans)
            return
        # The client's limiter bounds requests in flight, so a row's samples run side by side.
        await asyncio.gather(
            *(self.work_sample(c) for c in sample_chains(plans, self.options.samples))
        )

    async def work_sample(self, plans: list[TurnPlan]) -> None:
        """One sample's turns in order, each asked with the answers before it as history; a
        failed or unfinished turn fails the turns after it."""
        answers: list[str] = []
        for index, plan in enumerate(plans):
            if self.stop.is_set():
                return
            try:
                content, complete = await self.answer(plan, answers, history=index + 1 < len(plans))
            except RunStopped:
                return
            except BudgetReached as exc:
                self.request_stop(str(exc))
                return
            except StoreHalted as exc:
                self.halt(exc)
                return
            except GenerationFailed:
                await self.fail_rest(plans[index + 1 :], "earlier_turn_failed")
                return
            if not complete and index + 1 < len(plans):
                await self.fail_rest(plans[index + 1 :], "earlier_turn_incomplete")
                return
            answers.append(content)

    async def fail_rest(self, plans: list[TurnPlan], reason: str) -> None:
        """Record the turns a chain cannot reach as failed (a resume asks them again)."""
        for plan in plans:
            if plan.key not in self.stored:
                await self.fail(plan, reason)

    async def fail(
        self, plan: TurnPlan, reason: str, attempts: int = 0, errors: list[dict] | None = None
    ) -> None:
        """Store a turn's failure (a resume asks it again) and count it."""
        await self.writer.add_failure(
            plan.key, plan.source_id, plan.turn, reason, attempts, errors or []
        )
        self.progress.turns_failed += 1

    # -- one turn --------------------------------------------------------------------------------

    async def answer(self, plan: TurnPlan, answers: list[str], history: bool) -> tuple[str, bool]:
        """The turn's content (read from the store only if ``history``) and whether the answer
        is a whole turn, generated unless stored or in flight."""
        if plan.key in self.stored:
            self.progress.count_stored_turn(self.stored.from_earlier_run(plan.key))
            return self.stored.content(plan.key) if history else "", self.stored.complete(plan.key)
        if plan.key in self.inflight:
            self.progress.turns_duplicate += 1
            return await asyncio.shield(self.inflight[plan.key])
        future = asyncio.get_running_loop().create_future()
        future.add_done_callback(lambda f: f.cancelled() or f.exception())
        self.inflight[plan.key] = future
        try:
            content, finish = await self.generate_turn(plan, answers)
        except BaseException as exc:
            if not future.done():
                future.set_exception(exc) if isinstance(exc, Exception) else future.cancel()
            raise
        finally:
            self.inflight.pop(plan.key, None)
        result = content, finish in COMPLETE_FINISH_REASONS
        self.stored.add(plan.key, result[1])
        future.set_result(result)
        return result

    async def generate_turn(self, plan: TurnPlan, answers: list[str]) -> tuple[str, str | None]:
        """Request one turn and store its completion (or its failure); (content, finish)."""
        messages = build_messages(plan, answers)
        if plan.tools:
            self.start_tool_calibration()
        rendering, prompt = await self.render(plan, messages)
        body = orjson.dumps(
            self.request_body(
                self.sample_settings(plan.sample),
                messages,
                plan.tools,
                self.stream,
                self.options.logprobs,
                **({"prompt": prompt} if prompt else {}),
            )
        )
        request = orjson.dumps(
            {"messages": messages, "tools": plan.tools, "rendering": rendering.as_dict()}
        )
        self.sending()
        began = time.monotonic()
        keep = self.refused.of(plan.key, plan.source_id, plan.turn)
        try:
            completion, errors = await self.client.complete(body, self.stream, keep)
        except GenerationFailed as exc:
            await self.fail(plan, exc.reason, len(exc.errors), [e.as_dict() for e in exc.errors])
            raise
        self.count_cost(completion, request)
        if self.native is not None:
            completion = await asyncio.to_thread(self.native.read, completion, prompt)
        await self.writer.add_completion(
            plan.key,
            plan.source_id,
            plan.turn,
            request,
            completion,
            len(errors) + 1,
            [e.as_dict() for e in errors],
            time.monotonic() - began,
        )
        self.progress.record_completion(
            completion.prompt_tokens, completion.completion_tokens, completion.cost
        )
        return completion.content or "", completion.finish_reason

    async def rebuy_one(self, spoiled: dict) -> None:
        """Buy a spoiled completion's turn again with the request it was asked with (the same
        messages and tools, the excluded providers left out) and store the answer in its place."""
        expected = max(spoiled["cost"] or 0.0, 0.0)
        try:
            await self.buy_again(spoiled)
        except RunStopped:
            pass
        except BudgetReached as exc:
            self.request_stop(str(exc))
        except StoreHalted as exc:
            self.halt(exc)
        except GenerationFailed as exc:
            self.rebuys.failed += 1
            _log.info("buying %s again failed (%s); it stays as it was", spoiled["key"], exc)
        finally:
            self._rebuy_reserved -= expected

    async def buy_again(self, spoiled: dict) -> None:
        request = spoiled["request"]
        asked = orjson.loads(request)
        body = orjson.dumps(
            self.request_body(
                self.sample_settings(sample_of(spoiled["source_id"])),
                asked["messages"],
                asked.get("tools"),
                self.stream,
                self.options.logprobs,
            )
        )
        self.sending()
        began = time.monotonic()
        keep = self.refused.of(spoiled["key"], spoiled["source_id"], spoiled["turn"])
        completion, errors = await self.client.complete(body, self.stream, keep)
        self.count_cost(completion, request)
        self.rebuys.cost += max(completion.cost, 0.0)
        await self.writer.write(
            replacement_statements(spoiled)
            + completion_statements(
                spoiled["key"],
                spoiled["source_id"],
                spoiled["turn"],
                request,
                completion,
                len(errors) + 1,
                [e.as_dict() for e in errors],
                time.monotonic() - began,
            )
        )
        self.rebuys.bought += 1
        self.progress.record_completion(
            completion.prompt_tokens, completion.completion_tokens, completion.cost
        )

    def request_body(self, *args, **kwargs) -> dict:
        """The backend's request body with the fields the endpoint's offer calls for
        (``backends.proof.offer_fields``): ids or logprobs asked for, the thinking switch as an
        engine reads it. The template variables sent are those the prompt is rendered with."""
        return offer_fields(self.backend.request_body(*args, **kwargs), self.offer, self.variables)

    async def find_offer(self) -> None:
        """What proof the endpoint offers (``generate.proof``), from the store if an earlier run
        found out for the same servers, else asked; kept and said in one INFO line."""
        if self.backend.id_source != PROOF_TEXT or self.offer is not None:
            return
        stored = recorded_offer(self.store.settings.meta(OFFER_META), self.servers)
        if stored is not None:
            self.offer = stored
            _log.info(describe(stored, recorded=True), extra={"offer": stored.as_dict()})
        else:
            self.offer = await self._ask_offer()
            _log.info(describe(self.offer), extra={"offer": self.offer.as_dict()})
            if self.asked_endpoint:
                # What a paid question found is kept; a listing is read again for free.
                statement = "INSERT OR REPLACE INTO meta (name, value) VALUES (?, ?)"
                await self.writer.write(
                    [(statement, (OFFER_META, offer_record(self.offer, self.servers)))]
                )
        if self.offer.proof == PROOF_IDS:
            self.calibrator = None  # the server's ids are the proof: no count is asked to settle

    @property
    def asked_endpoint(self) -> bool:
        """Whether the proof question is asked of the endpoint (a self-hosted one, calibration
        on)."""
        return asks_question(self.servers) and not self.options.no_calibrate

    async def _ask_offer(self) -> Offer:
        if self.asked_endpoint:
            return await ask_endpoint(
                self.send_proof_question, self.backend.request_body, self.settings, self.servers
            )
        if asks_question(self.servers):
            # --no-calibrate: no question before the run; what the listing named still counts.
            proof = PROOF_LOGPROBS if self.options.logprobs else PROOF_TEXT
            return Offer(server_of(self.servers), proof, "not asked (--no-calibrate)")
        first = endpoint_specs(self.base_url)[0].url
        listed = await listed_logprobs(first, self.settings.model, self.api_key, self._may_route_to)
        server = server_of(self.servers or ("openrouter",))
        return openrouter_offer(server, self.options.logprobs, listed)

    def sending(self) -> None:
        """Set ``started`` as the first request is sent; the others need not take its lock."""
        if self.started is not None:
            started, self.started = self.started, None
            started.set()

    async def listed_prices(self) -> Prices:
        """The model's prices as the listing of the run's (first) endpoint gives them."""
        first = endpoint_specs(self.base_url)[0].url  # a fleet serves one model at one price
        return await find_prices(first, self.settings.model, self.api_key)

    def count_cost(self, completion: Completion, request: bytes) -> None:
        """Count what the completion costs by ``CostCounter`` beyond the ``usage.cost`` the client
        recorded; called before any await, so no attempt is admitted on the lower figure."""
        if self.budget is None or self.costs is None:
            return
        counted = self.costs.count(
            completion.cost,
            completion.prompt_tokens,
            completion.completion_tokens,
            len(request),
            answer_bytes(completion),
        )
        self.budget.add(counted - completion.cost)

    async def render(
        self, plan: TurnPlan, messages: list[dict]
    ) -> tuple[Rendering, TokenPrompt | None]:
        """The prompt as the server will render it, and for a server that generates from ids
        the ids it is sent (None otherwise); a prompt that cannot be rendered fails the turn.

        The prompt is rendered once, here, and stored with the completion: reconstruction and
        export read this record, never a new rendering.
        """
        rendering = await self.render_pool.run(
            self.renderer.render, messages, plan.tools, self.variables
        )
        if self.native is None:
            return rendering, None
        if rendering.error:
            reason = f"prompt_render_failed: {rendering.error}"
            await self.fail(plan, reason)
            raise GenerationFailed(reason, [])
        prompt = await self.render_pool.run(self.native.prompt, rendering)
        return rendering, prompt


class Live:
    """Live requests as a run's engine (``contract.Engine``)."""

    async def generate(
        self,
        ctx: GenerationContext,
        store: Store,
        destination: Destination,
        started: threading.Event | None = None,
    ) -> RunProgress:
        return await LiveGeneration(ctx, store, destination, started).run()

    async def rebuy(
        self,
        ctx: GenerationContext,
        store: Store,
        destination: Destination,
        spoiled: list[dict],
        allowance: float,
        started: threading.Event | None = None,
    ) -> tuple[Rebuys, RunProgress]:
        """Buy ``spoiled`` again within ``allowance`` dollars (``LiveGeneration.rebuy``)."""
        generation = LiveGeneration(ctx, store, destination, started)
        return await generation.rebuy(spoiled, allowance), generation.progress


def _in_lists(items: Iterator, size: int) -> Iterator[list]:
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

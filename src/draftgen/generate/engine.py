"""The live generation step: every missing turn requested through the HTTP client and stored.

Conversations are worked as chains (turn k+1 needs turn k's regenerated answer); identical turns
in flight at once are requested once; a resume skips every chain the store already holds.
``LiveGeneration`` holds the parts that do each job (``generate.live``) and runs them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from dataclasses import replace

from draftgen.collector import collecting_less
from draftgen.generate.budget import BudgetReached
from draftgen.generate.calibrate import Calibrator, left_out, renderer_question
from draftgen.generate.client import FatalApiError, RunStopped
from draftgen.generate.contract import Destination, GenerationContext, Rebuys
from draftgen.generate.endpoints import endpoint_specs
from draftgen.generate.errors import RunError
from draftgen.generate.judge import judge
from draftgen.generate.live.chains import ChainWorkers
from draftgen.generate.live.rebuys import Rebuying
from draftgen.generate.live.requests import Requests
from draftgen.generate.live.rows import RowFeed
from draftgen.generate.live.stopping import Stopping
from draftgen.generate.progress import ProgressDisplay, RunProgress
from draftgen.generate.resume import StoredTurns
from draftgen.generate.signals import SignalStop
from draftgen.records import PROOF_IDS, GenerationSettings
from draftgen.store.calibration import RENDERER, TOOL_ARGUMENTS, calibration_statements
from draftgen.store.database import (
    UNKNOWN_PROVIDER,
    SampleTally,
    Store,
    StoreError,
    StoreHalted,
    exclusion_statements,
)
from draftgen.tokens.rendering import template_renderer

_log = logging.getLogger("draftgen.generate")
JUDGE_EVERY = 1.0  # seconds between judgements of the providers' figures (read every few)


class LiveGeneration:
    """One live generation over a run directory's store: ``await LiveGeneration(...).run()``.

    A producer (``rows``) reads the rows and queues the chains that need requests;
    ``concurrency`` workers (``chains``) take a chain each and work its turns in order. The
    client's limiter (``requests.client``), not the worker count, bounds the requests in
    flight. ``ctx`` holds the run's options, settings, backend, tokenizer and profile, resolved
    once by the run. What the parts share is held here: the store and its writer, the queue,
    the progress and its display, the index of stored turns, the stop.
    """

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
        self.store = store
        self.settings = ctx.settings
        self.backend = ctx.backend
        self.progress = RunProgress(total_rows=ctx.total_rows)
        self.stored = StoredTurns(store)
        self.writer = store.open_writer()  # checks the store's file after every commit
        self.queue: asyncio.Queue = asyncio.Queue(maxsize=max(16, options.concurrency))
        self.requests = Requests(ctx, store, self.writer, destination, started)
        self.client = self.requests.client
        self.stopping = Stopping(options, self.progress, self.client)
        self.stop = self.stopping.stop
        self.progress.watch(
            errors=self.client.stats.errors,
            retried=self.client.stats.retried,
            failures=self.writer.failure_reasons,
            in_flight=lambda: self.client.limiter.in_flight,
            tally=SampleTally(store.path),
        )
        self.display = ProgressDisplay(self.progress, interval=options.progress_interval)
        self.rows = RowFeed(
            options, ctx.suite, self.queue, self.progress, self.display, self.stored
        )
        # Providers caught serving something else are left out of every request from then on
        # (the backend's ``route_around``); --keep-providers, or a backend that routes to no
        # providers, never leaves one out. A resume goes on leaving out what the store records.
        self.route_around = None if options.keep_providers else self.backend.route_around
        self.excluded: list[str] = list(store.excluded_providers()) if self.route_around else []
        self.calibrator = self._calibrator(ctx)
        self.routes: dict[str, str | None] = {}  # provider -> the route calibration asked it by
        self.tool_calibration: asyncio.Task | None = None
        self.asking = asyncio.Lock()  # calibration's later questions, one asker at a time
        shared = (options, self.queue, self.stopping, self.progress, self.display)
        self.rebuying = Rebuying(*shared, self.writer, self.requests, self.sample_settings)
        self.chains = ChainWorkers(
            *shared,
            self.stored,
            self.writer,
            self.requests,
            self.sample_settings,
            self.start_tool_calibration,
            self.rebuying.rebuy_one,
        )

    # -- the run ---------------------------------------------------------------------------------

    async def run(self) -> RunProgress:
        """Work every row, then close what the engine opened."""
        await self._run(self.rows.produce(), calibrate=True)
        self._settle_stop()
        return self.progress

    async def rebuy(self, spoiled: list[dict], allowance: float) -> Rebuys:
        """Buy each of ``spoiled`` (``Store.spoiled_completions``) again, from providers other
        than the excluded ones, as long as what they cost stays within ``allowance`` dollars;
        each answer replaces its spoiled completion (kept aside, never lost) in one commit."""
        self.rebuying.rebuys.wanted = len(spoiled)
        self.progress.total_rows = len(spoiled)
        await self._run(self.rebuying.produce_rebuys(spoiled, allowance))
        self._settle_stop()
        return self.rebuying.rebuys

    def _settle_stop(self) -> None:
        """A stop at ``--max-cost`` says what was spent once the answers in flight are counted
        and stored, not as it was when the first attempt was refused."""
        budget = self.requests.budget
        if budget is not None and budget.reached and self.progress.stopped:
            if self.progress.stopped.startswith("reached --max-cost"):
                self.progress.stopped = budget.sentence()

    async def _run(self, producer, calibrate: bool = False) -> None:
        try:
            await self.requests.start_budget()
            # Thousands of requests in flight keep ~100,000 objects alive at once.
            with collecting_less():
                async with self.client:
                    offer = await self.requests.find_offer()
                    if offer is not None and offer.proof == PROOF_IDS:
                        self.calibrator = None  # the server's ids are the proof: no count asked
                    if calibrate:
                        await self.calibrate()
                    with self.display:
                        await self._work(producer)
        finally:
            producer.close()  # never started if the budget or the client stopped the run first
            await self.close()

    async def close(self) -> None:
        """Close what the engine opened; the writer last, since closing waits for its commits."""
        self.rows.close()
        self.requests.close()
        await asyncio.to_thread(self.writer.close)

    async def _work(self, producer) -> None:
        """The workers and ``producer`` until every row is worked or the run stops; an API or
        store error that ends the run becomes a RunError that says how to resume."""
        stopping = self.stopping
        signals = SignalStop(stopping, asyncio.get_running_loop())
        # The producer first: it fills the queue before the workers start, so each of them takes
        # its first row at once instead of every one of them waiting on the queue.
        stopping.producer = asyncio.create_task(producer)
        stopping.producer.add_done_callback(stopping.on_producer_done)
        stopping.workers = [
            asyncio.create_task(self.chains.worker()) for _ in range(self.options.concurrency)
        ]
        judging = (
            asyncio.create_task(self.judge_providers())
            if self.route_around or self.calibrator
            else None
        )
        signals.install()
        try:
            await asyncio.gather(*stopping.workers)
            if (error := stopping.producer_error()) is not None:
                raise error
            if self.tool_calibration is not None:
                await self.tool_calibration
            # Every provider that served is asked before its samples are judged, also one the
            # judge's tick did not see (a short run).
            await self.ask_unasked(self.store.provider_figures())
        except asyncio.CancelledError:
            if (error := stopping.producer_error()) is not None:
                raise error from None
            if not self.stop.is_set():
                raise
        except FatalApiError as exc:
            # The answers in flight are paid for: they reach the store before the run stops.
            stopping.request_stop(str(exc))
            await asyncio.wait(stopping.workers, timeout=self.options.shutdown_grace)
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
            tasks = (stopping.producer, *stopping.workers, *((judging,) if judging else ()))
            if self.tool_calibration is not None:
                tasks += (self.tool_calibration,)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        if stopping.halted is not None:
            raise RunError(str(stopping.halted)) from None

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
            self.requests.renderer,
            template_renderer(ctx.tokenizer, ctx.profile),
            ctx.profile,
            self.requests.variables,
        )
        return Calibrator(
            send=self.requests.send_question,
            request_body=self.requests.request_body,
            settings=self.settings,
            pin=backend.pin_provider,
            question=question,
            tools=bool(ctx.profile.tool_call_writer) and ctx.profile.segmented is None,
            profile=ctx.profile,
            asked=self.store.calibrations(),
        )

    async def calibrate(self) -> None:
        """Ask every provider the run may be routed to the renderer question it has not answered
        yet, then leave out those proven to render otherwise."""
        calibrator = self.calibrator
        if calibrator is None or calibrator.question is None:
            return
        first = endpoint_specs(self.requests.base_url)[0].url
        routes = await calibrator.list_routes(
            first, self.requests.api_key, self.requests.may_route_to
        )
        if not routes and not calibrator.asked:
            routes = [(None, None)]  # no listing: whoever serves the endpoint answers
        await self.ask_renderers(
            [
                (route, name)
                for route, name in routes
                if name is None or (name not in self.excluded and calibrator.needs(name, RENDERER))
            ]
        )

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
            self.stopping.request_stop(str(exc))
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


class Live:
    """Live requests as a run's engine (``contract.Engine``)."""

    rebuy_not_offered = None  # the excluded providers are routed around, request by request

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

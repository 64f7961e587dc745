"""The live generation step: every missing turn requested through the HTTP client and stored.

Conversations are worked as chains (turn k+1 needs turn k's regenerated answer); identical turns
in flight at once are requested once; a resume skips every chain the store already holds.
``LiveGeneration`` holds the parts that do each job (``generate.live``) and runs them.
"""

from __future__ import annotations

import asyncio
import threading

from draftgen.collector import collecting_less
from draftgen.generate.client import FatalApiError
from draftgen.generate.contract import Destination, GenerationContext, Rebuys
from draftgen.generate.errors import RunError
from draftgen.generate.live.chains import ChainWorkers
from draftgen.generate.live.providers import Providers
from draftgen.generate.live.rebuys import Rebuying
from draftgen.generate.live.requests import Requests
from draftgen.generate.live.rows import RowFeed
from draftgen.generate.live.stopping import Stopping
from draftgen.generate.progress import ProgressDisplay, RunProgress
from draftgen.generate.resume import StoredTurns
from draftgen.generate.signals import SignalStop
from draftgen.records import PROOF_IDS
from draftgen.store.database import SampleTally, Store, StoreError, StoreHalted


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
        self.providers = Providers(
            ctx, store, self.writer, self.progress, self.requests, self.stopping
        )
        providers = self.providers
        shared = (options, self.queue, self.stopping, self.progress, self.display)
        self.rebuying = Rebuying(*shared, self.writer, self.requests, providers.sample_settings)
        self.chains = ChainWorkers(
            *shared,
            self.stored,
            self.writer,
            self.requests,
            providers.sample_settings,
            providers.start_tool_calibration,
            self.rebuying.rebuy_one,
        )

    # -- the run ---------------------------------------------------------------------------------

    async def run(self) -> RunProgress:
        """Work every row, then close what the engine opened."""
        await self._run(self.rows.produce(), calibrate=True)
        self._settle_stop()
        return self.progress

    async def rebuy(self, spoiled: list[dict], allowance: float) -> Rebuys:
        """Buy each of ``spoiled`` (``providers.spoiled_completions``) again, from providers other
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
                        self.providers.calibrator = None  # the server's ids are the proof
                    self.providers.calibrate(ask=calibrate)  # beside the work, not before it
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
        providers = self.providers
        judging = (
            asyncio.create_task(providers.judge_providers())
            if providers.route_around or providers.calibrator
            else None
        )
        signals.install()
        try:
            await asyncio.gather(*stopping.workers)
            if (error := stopping.producer_error()) is not None:
                raise error
            # Every provider that served is asked before its samples are judged after the
            # requests, also one the judge's tick did not see (a short run).
            await providers.calibration_done(self.store.providers.provider_figures)
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
            await providers.questions_settled()
            tasks = (stopping.producer, *stopping.workers, *((judging,) if judging else ()))
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        if stopping.halted is not None:
            raise RunError(str(stopping.halted)) from None


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

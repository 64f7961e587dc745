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
import logging
import threading
import time
from collections.abc import Iterator

import orjson

from draftgen.backends import Backend
from draftgen.generate.batch.dialects import (
    DIALECTS,
    BatchApiError,
    BatchHttp,
    get_dialect,
)
from draftgen.generate.batch.errors import BatchRunError
from draftgen.generate.batch.polling import BatchPoller
from draftgen.generate.batch.progress import BatchDisplay, BatchProgress
from draftgen.generate.batch.rounds import RoundSender
from draftgen.generate.batch.state import BatchRunState
from draftgen.generate.batch.submit import BatchTarget
from draftgen.generate.contract import Destination, GenerationContext, RebuyNotOffered, Rebuys
from draftgen.generate.endpoints import EndpointSpec, endpoint_label, endpoint_specs
from draftgen.generate.resume import StoredTurns
from draftgen.generate.signals import SignalStop
from draftgen.inputs.admission import Admission
from draftgen.inputs.mix import read_suite
from draftgen.inputs.plan import (
    TurnPlan,
    sample_chains,
)
from draftgen.records import GenerationSettings
from draftgen.store.batch_ledger import Ledger
from draftgen.store.database import SampleTally, Store

_log = logging.getLogger("draftgen.batch")
BATCH_META = "batch"  # store meta: JSON {dialect, url, model, api_key_env} for status and cancel
POLL_MAX = 60.0  # seconds between polls at most, after backoff
SIMULATED_POLL = (0.2, 1.0)  # first and longest poll against the built-in simulator
SIMULATED_GRACE = 5.0  # its batches show within a second, so absence is proven sooner
# Batch routing takes only these of [openrouter.provider] (the create body's ``provider`` in
# OpenRouter's Batch API reference).
BATCH_PROVIDER_FIELDS = ("only", "allow_fallbacks")


class Batch:
    """Batches as a run's engine (``contract.Engine``): the counterpart of ``engine.Live``."""

    rebuy_not_offered = (
        "batch mode buys no spoiled sample again: its requests carry no routing of their own"
    )

    async def generate(
        self,
        ctx: GenerationContext,
        store: Store,
        destination: Destination,
        started: threading.Event | None = None,
    ) -> BatchProgress:
        return await BatchRun(ctx, store, destination, started).run()

    async def rebuy(
        self,
        ctx: GenerationContext,
        store: Store,
        destination: Destination,
        spoiled: list[dict],
        allowance: float,
        started: threading.Event | None = None,
    ) -> tuple[Rebuys, BatchProgress]:
        raise RebuyNotOffered(self.rebuy_not_offered)


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
    ``ctx`` is the run's context, its batch options checked by the run. Its parts share one
    ``BatchRunState``: ``sender`` sends each round, ``poller`` collects what the batches return;
    the run admits the input rows (``_chains``), drives the rounds, and answers signals."""

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
        self.dialect = get_dialect(options.batch_dialect)
        limit = options.batch_size or self.dialect.max_rows
        size = min(limit, self.dialect.max_rows)
        poll, poll_max = (
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
        provider = None
        if settings.provider and self.dialect.routes_provider:
            provider = dict(settings.provider)
        self.http = BatchHttp(self.url, self.api_key)
        self.target = BatchTarget(
            self.dialect, self.http, endpoint_label(self.url), self.model, provider, self.grace
        )
        self.state = BatchRunState(
            options=options,
            dialect=self.dialect,
            target=self.target,
            writer=self.writer,
            ledger=self.ledger,
            stored=StoredTurns(store),
            progress=self.progress,
            display=BatchDisplay(self.progress, interval=options.progress_interval),
            poll=poll,
        )
        self.stop = self.state.stop  # what the signal handler sets (signals.Interruptible)
        self.sender = RoundSender(self.state, ctx, store, self.url, self.api_key, size)
        self.poller = BatchPoller(self.state, poll_max, self.grace, self.simulated, time.time())
        self.progress.watch(failures=self.writer.failure_reasons, tally=SampleTally(store.path))

    # -- the run ---------------------------------------------------------------------------------

    async def run(self) -> BatchProgress:
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
        display = self.state.display
        signals = SignalStop(self, asyncio.get_running_loop())
        try:
            async with self.http:
                await self.sender.find_prices()
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
        sender, poller = self.sender, self.poller
        await poller.reconcile_open()
        if self.options.batch_detach:
            await poller.sweep()
            await sender.submit_round(self._chains)
            poller.refresh_live()
            return
        while not self.stop.is_set():
            await sender.submit_round(self._chains)
            live = poller.refresh_live()
            if not live:
                if sender.budget_blocked and sender.budget is not None:
                    self._request_stop(sender.budget.sentence())
                return
            await poller.poll_until_change()

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
        self.state.request_stop(reason)

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

    # -- planning and sending ---------------------------------------------------------------------

    def _chains(self) -> Iterator[list[list[TurnPlan]]]:
        """Each usable row's sample chains, admitted as a live run admits them
        (``inputs.admission``); the rejected rows are counted, the planner lists them."""
        admission = Admission()
        try:
            for row in admission.each(read_suite(self.suite), self.options.shard):
                if not row.ours:
                    continue  # another shard's row
                if row.rejection is not None:
                    self.progress.rejected += 1
                else:
                    yield sample_chains(row.plans, self.options.samples)
        finally:
            admission.close()

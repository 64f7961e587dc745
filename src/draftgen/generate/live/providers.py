"""Which providers a live run's requests go to: calibration (the questions beside the work,
``generate.calibration_task``) and judging (``generate.judge``), those caught left out.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from draftgen.generate.calibrate import Calibrator, renderer_question
from draftgen.generate.calibration_task import CalibrationTasks, Route
from draftgen.generate.contract import GenerationContext
from draftgen.generate.endpoints import endpoint_specs
from draftgen.generate.judge import judge
from draftgen.generate.live.requests import Requests
from draftgen.generate.live.stopping import Stopping
from draftgen.generate.progress import RunProgress
from draftgen.records import GenerationSettings
from draftgen.store.database import Store, exclusion_statements
from draftgen.tokens.rendering import template_renderer

if TYPE_CHECKING:
    from draftgen.store.writer import CompletionWriter

_log = logging.getLogger("draftgen.generate")
JUDGE_EVERY = 1.0  # seconds between judgements of the providers' figures (read every few)


class Providers:
    """The run's providers: ``excluded`` (left out, through the backend's ``route_around``),
    ``calibrator`` (None where calibration is off or moot) and what it asked, the judge's tick
    (``judge_providers``), and the settings each sample is sent with (``sample_settings``)."""

    def __init__(
        self,
        ctx: GenerationContext,
        store: Store,
        writer: CompletionWriter,
        progress: RunProgress,
        requests: Requests,
        stopping: Stopping,
    ) -> None:
        options = ctx.options
        self.options = options
        self.settings = ctx.settings
        self.backend = ctx.backend
        self.store = store
        self.writer = writer
        self.progress = progress
        self.requests = requests
        self.stopping = stopping
        # Providers caught serving something else are left out of every request from then on
        # (the backend's ``route_around``); --keep-providers, or a backend that routes to no
        # providers, never leaves one out. A resume goes on leaving out what the store records.
        self.route_around = None if options.keep_providers else self.backend.route_around
        self.excluded: list[str] = (
            list(store.providers.excluded_providers()) if self.route_around else []
        )
        self.calibrator = self._calibrator(ctx)
        # Its questions as tasks beside the work (``generate.calibration_task``), made by
        # ``calibrate`` once the offer is known (a server whose ids are the proof needs none).
        self.calibration: CalibrationTasks | None = None

    async def judge_providers(self) -> None:
        """Judge the providers' figures as the tally last read them (``generate.judge``), every
        ``JUDGE_EVERY`` seconds, and leave out each one caught; a provider first seen serving
        without having been calibrated is asked the calibration questions then, beside the
        work, and its samples wait to be judged until its answer is stored."""
        tally = self.progress.tally
        while tally is not None:
            await asyncio.sleep(JUDGE_EVERY)
            figures = tally.providers
            if self.calibration is not None:
                self.calibration.seen(figures)
                waiting = self.calibration.waiting(figures)
                figures = {name: row for name, row in figures.items() if name not in waiting}
            for exclusion in judge(figures, set(self.excluded)) if self.route_around else ():
                if exclusion.provider not in self.excluded:  # calibration may have meanwhile
                    await self.exclude(exclusion.provider, exclusion.evidence)

    async def calibration_done(self, figures: Callable[[], Mapping[str, dict]]) -> None:
        """The requests are done: every question out answered, and every provider that sold a
        completion asked (``CalibrationTasks.finish``), before its samples are judged."""
        if self.calibration is not None:
            await self.calibration.finish(figures)

    async def questions_settled(self) -> None:
        """Give a calibration question in flight ``shutdown_grace`` seconds: it is paid for, so
        it is stored before its task is cancelled."""
        if self.calibration is not None:
            await self.calibration.settle(self.options.shutdown_grace)

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
            asked=self.store.calibrations.read(),
        )

    def calibrate(self, ask: bool = True) -> None:
        """Make the run's calibration (once the offer is known) and, with ``ask``, ask every
        provider the run may be routed to the renderer question it has not answered yet, beside
        the work (its first request waits for none); those proven to render otherwise are left
        out as their answers come. Without ``ask`` (buying again) only a provider first seen
        serving is asked."""
        if self.calibrator is None or self.calibration is not None:
            return
        self.calibration = CalibrationTasks(
            self.calibrator,
            self.listed_routes,
            self.writer.write,
            self.exclude if self.route_around is not None else None,
            self.excluded,
            self.stopping.request_stop,
            self.stopping.stop,
        )
        if ask:
            self.calibration.start()

    async def listed_routes(self) -> list[Route]:
        """(route, provider) of every provider the run may be routed to (calibration's)."""
        assert self.calibrator is not None
        first = endpoint_specs(self.requests.base_url)[0].url
        return await self.calibrator.list_routes(
            first, self.requests.api_key, self.requests.may_route_to
        )

    def start_tool_calibration(self) -> None:
        """Ask the tool question of every calibrated provider, once, beside the run (the first
        turn that declares tools starts it)."""
        if self.calibration is not None:
            self.calibration.start_tools()

    def sample_settings(self, sample: int) -> GenerationSettings:
        """The settings sent for sample ``sample`` of a prompt, routed around the providers left
        out."""
        settings = self.settings.for_sample(sample)
        if self.excluded and self.route_around is not None:
            settings = replace(
                settings, provider=self.route_around(settings.provider, self.excluded)
            )
        return settings

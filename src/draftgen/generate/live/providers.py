"""Which providers a live run's requests go to: calibration (the questions before and beside the
work, ``generate.calibrate``) and judging (``generate.judge``), those caught left out.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import replace
from typing import TYPE_CHECKING

from draftgen.generate.budget import BudgetReached
from draftgen.generate.calibrate import Calibrator, left_out, renderer_question
from draftgen.generate.client import RunStopped
from draftgen.generate.contract import GenerationContext
from draftgen.generate.endpoints import endpoint_specs
from draftgen.generate.judge import judge
from draftgen.generate.live.requests import Requests
from draftgen.generate.live.stopping import Stopping
from draftgen.generate.progress import RunProgress
from draftgen.records import GenerationSettings
from draftgen.store.calibration import RENDERER, TOOL_ARGUMENTS, calibration_statements
from draftgen.store.database import UNKNOWN_PROVIDER, Store, exclusion_statements
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
        self.excluded: list[str] = list(store.excluded_providers()) if self.route_around else []
        self.calibrator = self._calibrator(ctx)
        self.routes: dict[str, str | None] = {}  # provider -> the route calibration asked it by
        self.tool_calibration: asyncio.Task | None = None
        self.asking = asyncio.Lock()  # calibration's later questions, one asker at a time

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

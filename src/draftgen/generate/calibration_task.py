"""Calibration beside the work: each question a task of its own that no request of the work waits
for, each answer kept as it comes, and a provider whose question is out not judged until it is.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping

from draftgen.generate.budget import BudgetReached
from draftgen.generate.calibrate import Answer, Calibrator, left_out
from draftgen.generate.client import RunStopped
from draftgen.store.calibration import RENDERER, TOOL_ARGUMENTS, calibration_statements
from draftgen.store.database import UNKNOWN_PROVIDER

_log = logging.getLogger("draftgen.generate")

# (route, provider name) to ask; (None, None): the endpoint itself, unrouted (no listing).
Route = tuple[str | None, str | None]
# The key under which the unrouted question is out: whichever provider serves it answers.
ENDPOINT = ""


class CalibrationTasks:
    """The calibration of one live run as tasks beside its work.

    A live run starts its questions (``generate.calibrate``) as it sends its first request: the
    listing of the providers it may be routed to, then the renderer question to each, side by
    side with the work. A question is a request like any other (one attempt, bounded by the idle
    timeout, the attempt's deadline and the byte cap; counted under ``--max-cost``), and its
    answer is committed before anything reads it. Meanwhile the provider's samples are bought
    and stored; the judge (``generate.judge``) leaves them aside until the answer is stored, or
    the question has ended without one (today's doubt stays), and the run's end waits for every
    question out, so the verdicts after the requests (``reconstruct.background``, ``run.rebuy``)
    see every answer.

    ``list_routes`` gives the (route, provider) pairs the run may be routed to ([] without a
    listing); ``write`` commits statements through the run's writer; ``exclude`` leaves a
    provider out with its evidence (None: ``--keep-providers``, or a backend that routes to no
    providers); ``excluded`` is the run's list of providers left out, read as it grows;
    ``stop`` stops the run with a reason (the budget reached while a question waited), and
    ``stopping`` is set once the run stops (Ctrl-C, a fatal answer): the end's wait ends then.
    """

    def __init__(
        self,
        calibrator: Calibrator,
        list_routes: Callable[[], Awaitable[list[Route]]],
        write: Callable[[list], Awaitable[None]],
        exclude: Callable[[str, str], Awaitable[None]] | None,
        excluded: list[str],
        stop: Callable[[str], None],
        stopping: asyncio.Event,
    ) -> None:
        self.calibrator = calibrator
        self._list_routes = list_routes
        self._write = write
        self._exclude = exclude
        self._excluded = excluded
        self._stop = stop
        self._stopping = stopping
        self.routes: dict[str, str | None] = {}  # provider -> the route its question took
        self.listing: asyncio.Task | None = None
        self.out: dict[str, asyncio.Task] = {}  # provider (ENDPOINT: unrouted) -> its question
        self.tools: asyncio.Task | None = None
        self._asked: set[str] = set()  # providers asked the renderer question in this run
        self._tasks: set[asyncio.Task] = set()

    # -- starting --------------------------------------------------------------------------------

    def start(self) -> None:
        """List the providers and ask each the renderer question it has not answered, beside
        the work: this returns at once."""
        if self.calibrator.question is not None and self.listing is None:
            self.listing = self._spawn(self._ask_listed())

    def seen(self, figures: Mapping[str, dict]) -> None:
        """Ask the renderer question of each provider of ``figures`` (``store.providers``)
        that sold a completion without having answered it (one the listing did not name, a
        resume's new one), beside the work. A provider that only answered a question, refused,
        sold nothing to judge. Not while the listing or the unrouted question is out: either may
        name it yet."""
        if self.calibrator.question is None or self._naming():
            return
        for name, row in figures.items():
            if (
                row.get("completions")
                and name != UNKNOWN_PROVIDER
                and name not in self._excluded
                and self.calibrator.needs(name, RENDERER)
            ):
                self._ask_renderer(name, name)

    def start_tools(self) -> None:
        """The tool question to every calibrated provider, once, beside the run (the first turn
        that declares tools starts it)."""
        if self.calibrator.tools and self.tools is None:
            self.tools = self._spawn(self._ask_tools())

    # -- what waits for the answers --------------------------------------------------------------

    def waiting(self, providers: Iterable[str]) -> set[str]:
        """Those of ``providers`` whose samples wait to be judged: a question to them is out, or
        the listing or the unrouted question is, which may yet answer for any of them."""
        if self._naming():
            return set(providers)
        return {name for name in providers if name in self.out}

    async def finish(self, figures: Callable[[], Mapping[str, dict]]) -> None:
        """The run's requests are done: wait for every question out, then ask each provider of
        ``figures()`` that sold a completion without having answered (the judge's tick may not
        have seen it: a short run), and wait for those. A question's own bounds bound the wait,
        and a stop of the run ends it (``settle`` then gives the questions their grace); an error
        of the store in a question's task is raised here, as the work's would be."""
        await self._settled()
        self.seen(figures())
        await self._settled()

    async def settle(self, grace: float) -> None:
        """The run stops: give the questions in flight, paid for, ``grace`` seconds to be
        stored, then cancel what is left."""
        pending = [task for task in self._tasks if not task.done()]
        if pending:
            await asyncio.wait(pending, timeout=grace)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    # -- the tasks -------------------------------------------------------------------------------

    def _spawn(self, coroutine) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        return task

    def _naming(self) -> bool:
        """Whether the listing or the unrouted question is still out."""
        return (self.listing is not None and not self.listing.done()) or ENDPOINT in self.out

    async def _settled(self) -> None:
        """Wait until no task is out (a task may start others) or the run stops; raise the
        first error of a task that ended."""
        stopping = asyncio.ensure_future(self._stopping.wait())
        try:
            while (pending := [task for task in self._tasks if not task.done()]) and not (
                stopping.done()
            ):
                await asyncio.wait([*pending, stopping], return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
        for task in self._tasks:
            if not task.done():
                continue
            if not task.cancelled() and task.exception() is not None:
                raise task.exception()

    async def _ask_listed(self) -> None:
        routes = await self._list_routes()
        if not routes and not self.calibrator.asked:
            routes = [(None, None)]  # no listing: whoever serves the endpoint answers
        for route, name in routes:
            if name is None or (
                name not in self._excluded and self.calibrator.needs(name, RENDERER)
            ):
                self._ask_renderer(route, name)

    def _ask_renderer(self, route: str | None, name: str | None) -> None:
        key = name if name is not None else ENDPOINT
        if key in self._asked:
            return  # once a run, whatever the answer said its provider was
        self._asked.add(key)
        task = self._spawn(self._renderer(route, name))
        self.out[key] = task
        task.add_done_callback(lambda _: self.out.pop(key, None))

    async def _renderer(self, route: str | None, name: str | None) -> None:
        """One renderer question: its answer committed, then the providers it proves render
        otherwise left out; only then is its provider judged."""
        try:
            answer = await self.calibrator.ask_renderer(route, name)
        except (RunStopped, BudgetReached) as exc:
            self._stop(str(exc))
            return
        if answer is None:
            return
        self.routes.setdefault(answer.provider, route)
        await self._keep(answer, "")
        if self._exclude is None:
            return  # --keep-providers: what calibration proved still counts, nothing is left out
        for provider, evidence in left_out(self.calibrator.asked).items():
            if provider not in self._excluded:
                await self._exclude(provider, evidence)

    async def _ask_tools(self) -> None:
        # Asked of the providers the renderer questions reached, so those are waited for.
        while pending := [
            task for task in (self.listing, *self.out.values()) if task and not task.done()
        ]:
            await asyncio.wait(pending)
        calibrator = self.calibrator
        routes = [
            (route, name)
            for name, route in (self.routes or {None: None}).items()
            if name not in self._excluded and calibrator.needs(name or "", TOOL_ARGUMENTS)
        ]
        await asyncio.gather(*(self._tool(route, name) for route, name in routes))

    async def _tool(self, route: str | None, name: str | None) -> None:
        try:
            answer = await self.calibrator.ask_tools(route, name)
        except (RunStopped, BudgetReached):
            return
        if answer is not None:
            await self._keep(answer, "tool arguments ")

    async def _keep(self, answer: Answer, what: str) -> None:
        """Commit ``answer``, then say it."""
        await self._write(calibration_statements(answer.row()))
        _log.info(
            "calibration: %s %s%s (%s)",
            answer.provider or "the endpoint",
            what,
            answer.verdict,
            answer.detail,
            extra={"calibration": answer.row()},
        )

"""A live run's workers: each takes a queued row and works its turns in order (turn k+1 is asked
with turn k's answer), identical turns in flight asked once, each answer or failure stored.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import orjson

from draftgen.generate.budget import BudgetReached
from draftgen.generate.client import GenerationFailed, RunStopped
from draftgen.generate.live.requests import Requests
from draftgen.generate.live.stopping import Stopping
from draftgen.generate.native_turn import TokenPrompt
from draftgen.generate.progress import ProgressDisplay, RunProgress
from draftgen.generate.resume import StoredTurns
from draftgen.inputs.plan import TurnPlan, build_messages, sample_chains
from draftgen.reconstruct.text import COMPLETE_FINISH_REASONS
from draftgen.records import GenerationSettings, Rendering
from draftgen.store.database import StoreHalted

if TYPE_CHECKING:
    from draftgen.store.writer import CompletionWriter


class ChainWorkers:
    """``options.concurrency`` of ``worker`` run at once, each taking the next queued row (or
    spoiled completion, handed to ``rebuy_one``) until the end mark or a stop. The settings of
    each sample come from ``sample_settings``; a turn that declares tools calls
    ``start_tool_calibration``."""

    def __init__(
        self,
        options: Any,
        queue: asyncio.Queue,
        stopping: Stopping,
        progress: RunProgress,
        display: ProgressDisplay,
        stored: StoredTurns,
        writer: CompletionWriter,
        requests: Requests,
        sample_settings: Callable[[int], GenerationSettings],
        start_tool_calibration: Callable[[], None],
        rebuy_one: Callable[[dict], Awaitable[None]],
    ) -> None:
        self.options = options
        self.queue = queue
        self.stopping = stopping
        self.stop = stopping.stop
        self.progress = progress
        self.display = display
        self.stored = stored
        self.writer = writer
        self.requests = requests
        self.sample_settings = sample_settings
        self.start_tool_calibration = start_tool_calibration
        self.rebuy_one = rebuy_one
        self.inflight: dict[str, asyncio.Future] = {}

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
                self.stopping.request_stop(str(exc))
                return
            except StoreHalted as exc:
                self.stopping.halt(exc)
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
        requests = self.requests
        messages = build_messages(plan, answers)
        if plan.tools:
            self.start_tool_calibration()
        rendering, prompt = await self.render(plan, messages)
        body = orjson.dumps(
            requests.request_body(
                self.sample_settings(plan.sample),
                messages,
                plan.tools,
                requests.stream,
                self.options.logprobs,
                **({"prompt": prompt} if prompt else {}),
            )
        )
        request = orjson.dumps(
            {"messages": messages, "tools": plan.tools, "rendering": rendering.as_dict()}
        )
        requests.sending()
        began = time.monotonic()
        keep = requests.refused.of(plan.key, plan.source_id, plan.turn)
        try:
            completion, errors = await requests.client.complete(body, requests.stream, keep)
        except GenerationFailed as exc:
            await self.fail(plan, exc.reason, len(exc.errors), [e.as_dict() for e in exc.errors])
            raise
        requests.count_cost(completion, request)
        if requests.native is not None:
            completion = await asyncio.to_thread(requests.native.read, completion, prompt)
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

    async def render(
        self, plan: TurnPlan, messages: list[dict]
    ) -> tuple[Rendering, TokenPrompt | None]:
        """The prompt as the server will render it, and for a server that generates from ids
        the ids it is sent (None otherwise); a prompt that cannot be rendered fails the turn.

        The prompt is rendered once, here, and stored with the completion: reconstruction and
        export read this record, never a new rendering.
        """
        requests = self.requests
        rendering = await requests.render_pool.run(
            requests.renderer.render, messages, plan.tools, requests.variables
        )
        if requests.native is None:
            return rendering, None
        if rendering.error:
            reason = f"prompt_render_failed: {rendering.error}"
            await self.fail(plan, reason)
            raise GenerationFailed(reason, [])
        prompt = await requests.render_pool.run(requests.native.prompt, rendering)
        return rendering, prompt

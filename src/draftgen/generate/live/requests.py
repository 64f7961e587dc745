"""How a live run's request is made and paid for: the HTTP client, the endpoint's offer of proof,
the prompt's renderer, the request body, and what each answer or question costs under --max-cost.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from draftgen.backends.proof import Offer, offer_fields
from draftgen.generate.budget import (
    CostCounter,
    Prices,
    SpendGuard,
    answer_bytes,
    find_prices,
    tally,
)
from draftgen.generate.calibrate import QUESTION_ATTEMPTS, Answer
from draftgen.generate.client import ChatClient, RetryPolicy
from draftgen.generate.contract import Destination, GenerationContext
from draftgen.generate.endpoints import endpoint_specs
from draftgen.generate.native_turn import NativeTurns
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
from draftgen.generate.serial import SerialExecutor
from draftgen.records import PROOF_LOGPROBS, PROOF_TEXT, Completion
from draftgen.store.calibration import calibration_statements
from draftgen.store.database import Store
from draftgen.store.refused import refused_figures
from draftgen.tokens.rendering import ChatRenderer, request_variables

if TYPE_CHECKING:
    from draftgen.store.writer import CompletionWriter

_log = logging.getLogger("draftgen.generate")


class Requests:
    """What every request of the run is made with: ``client`` (its retries, limits, budget),
    ``offer`` (found by ``find_offer``), ``renderer``/``variables``/``native`` (the prompt as
    the server renders it, on ``render_pool``), ``budget`` and ``costs`` (--max-cost), and
    ``refused`` (answers refused for their usage, kept apart)."""

    def __init__(
        self,
        ctx: GenerationContext,
        store: Store,
        writer: CompletionWriter,
        destination: Destination,
        started: threading.Event | None,
    ) -> None:
        options = ctx.options
        self.options = options
        self.settings = ctx.settings
        self.store = store
        self.writer = writer
        self.started = started
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
        self.refused = RefusedAnswers(writer, self.budget, self.listed_prices)
        self.client = self._client()
        self.renderer = ChatRenderer(ctx.tokenizer, ctx.profile)
        self.variables = request_variables(self.settings, ctx.profile)
        self.native = (
            NativeTurns(ctx.tokenizer, ctx.profile) if self.backend.needs_prompt_ids else None
        )
        # One thread renders prompts off the event loop, first come first served: requests leave in
        # the order they were built, so a run is repeatable (rendering holds the GIL anyway).
        self.render_pool = SerialExecutor("draftgen-render")

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
            max_answer_bytes=options.max_answer_bytes,
            max_retries=options.max_retries,
            budget=self.budget,
            backend=self.backend,
            endpoint_concurrency=options.endpoint_concurrency,
            health=options.endpoint_health,
            on_endpoint_event=self.writer.note_endpoint_event,
        )

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

    def close(self) -> None:
        self.render_pool.shutdown()

    def request_body(self, *args, **kwargs) -> dict:
        """The backend's request body with the fields the endpoint's offer calls for
        (``backends.proof.offer_fields``): ids or logprobs asked for, the thinking switch as an
        engine reads it. The template variables sent are those the prompt is rendered with."""
        return offer_fields(self.backend.request_body(*args, **kwargs), self.offer, self.variables)

    async def find_offer(self) -> Offer | None:
        """What proof the endpoint offers (``generate.proof``), from the store if an earlier run
        found out for the same servers, else asked; kept and said in one INFO line. None for a
        backend whose ids are the server's."""
        if self.backend.id_source != PROOF_TEXT or self.offer is not None:
            return self.offer
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
        return self.offer

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
        listed = await listed_logprobs(first, self.settings.model, self.api_key, self.may_route_to)
        server = server_of(self.servers or ("openrouter",))
        return openrouter_offer(server, self.options.logprobs, listed)

    def may_route_to(self, endpoint) -> bool:
        """Whether the run's provider settings let a request reach the listed ``endpoint``."""
        tag = endpoint.tag or ""
        names = {endpoint.provider or "", tag, tag.partition("/")[0]}
        routes_to = self.backend.routes_to
        return routes_to is None or routes_to(self.settings.provider, names)

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

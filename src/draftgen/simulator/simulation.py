"""The simulator's state behind one server: tokenizer tables, counters and ground truth, and the
seeded decisions of every attempt (fault, quirks, provider, the completion, the tool call).

The routes are mixed in (``chat``, ``listing``) or mounted (``batch``, ``sglang_generate``,
``hostile``); ``app`` puts them on one aiohttp application.
"""

from __future__ import annotations

import collections
import hashlib
import json
import random

import orjson
from aiohttp import web

from draftgen.profiles import ModelProfile
from draftgen.simulator import wire
from draftgen.simulator.batch import BatchSimulator
from draftgen.simulator.chat import ChatRoute
from draftgen.simulator.config import (
    FATAL_FAULTS,
    INEXACT_QUIRKS,
    TOOL_CALL_QUIRKS,
    SimConfig,
    format_retry_after,
)
from draftgen.simulator.exchange import ChatRequest, RenderedPrompt, Served
from draftgen.simulator.exchange import seeded_rng as _rng
from draftgen.simulator.hostile import HostileAnswers
from draftgen.simulator.listing import ListingRoutes
from draftgen.simulator.model import (
    DISABLED,
    ModelOutput,
    Plan,
    TokenTable,
    generate,
    is_canonical,
    prompt_layout,
    token_table,
)
from draftgen.simulator.sglang_generate import GenerateRoute
from draftgen.tokens.rendering import ChatRenderer, template_renderer, tokenizer_profile
from draftgen.tokens.tokenizer import load_tokenizer

API_PREFIX = "/api/v1"
PROMPT_CACHE_SIZE = 2048
# Share of answers with whitespace at their edges, as models write them.
NATURAL_EDGE_WHITESPACE = 0.15


class Simulator(ChatRoute, ListingRoutes):
    """The state behind one server: tokenizer tables, counters, ground truth."""

    def __init__(self, config: SimConfig) -> None:
        config.validate()
        self.config = config
        self.tokenizer = load_tokenizer(config.tokenizer)
        self.profile: ModelProfile = tokenizer_profile(config.tokenizer, config.profile)
        self.table: TokenTable = token_table(config.tokenizer, self.profile)
        # A server renders as draftgen does (both follow vLLM): the model's own template,
        # arguments parsed, the template variables the request sets, the server's clock.
        self.renderer = ChatRenderer(self.tokenizer, self.profile)
        # The template_renderer quirk's provider renders the published template instead.
        self.template_renderer = (
            template_renderer(self.tokenizer, self.profile)
            if config.quirks.get("template_renderer", 0) > 0
            else None
        )
        self.truth: dict[str, dict] = {}
        self.stats: collections.Counter = collections.Counter()
        self.attempts: collections.Counter = collections.Counter()
        self.models_seen: dict[str, None] = {config.model: None}
        self._prompts: collections.OrderedDict[bytes, RenderedPrompt] = collections.OrderedDict()
        self._valid_requests = 0
        self._truth_file = open(config.truth_path, "ab") if config.truth_path else None  # noqa: SIM115
        self._retry_after = format_retry_after(config.retry_after)
        self._prices = (config.prompt_price, config.completion_price)
        # The provider-bound quirks configured (wire.BOUND_QUIRKS), in their routing order.
        self._bound = [q for q in wire.BOUND_QUIRKS if config.quirks.get(q, 0) > 0]
        self.providers: tuple[str, ...] = wire.PROVIDERS
        if "template_revision" in self._bound:
            self.providers += (wire.REVISION_PROVIDER,)
        self.batch = BatchSimulator(self)  # the batch APIs, both dialects
        self.hostile = HostileAnswers(self)  # SimConfig.hostile: answers no provider means

    def close(self) -> None:
        if self._truth_file is not None:
            self._truth_file.close()
            self._truth_file = None
        self.batch.close()

    # -- prompt ---------------------------------------------------------------------------

    def render(
        self,
        messages: list,
        tools: list | None,
        template_kwargs: dict | None = None,
        renderer: ChatRenderer | None = None,
    ) -> RenderedPrompt:
        renderer = renderer or self.renderer
        key = hashlib.blake2b(
            orjson.dumps(
                [messages, tools, template_kwargs, renderer is self.renderer],
                option=orjson.OPT_SORT_KEYS,
            ),
            digest_size=16,
        ).digest()
        cached = self._prompts.get(key)
        if cached is not None:
            self._prompts.move_to_end(key)
            return cached
        rendering = renderer.render(messages, tools, template_kwargs)
        if rendering.error:
            raise ValueError(rendering.error)
        text = rendering.text
        prompt = RenderedPrompt(
            text=text,
            ids=renderer.prompt_ids(rendering),
            sha256=hashlib.sha256(text.encode("utf-8")).hexdigest(),
            layout=prompt_layout(text, self.profile),
        )
        self._prompts[key] = prompt
        if len(self._prompts) > PROMPT_CACHE_SIZE:
            self._prompts.popitem(last=False)
        return prompt

    # -- decisions ------------------------------------------------------------------------

    def choose_fault(self, req: ChatRequest) -> str | None:
        cfg = self.config
        rng = _rng(cfg.seed, req.prompt.sha256, req.attempt, "fault")
        draw = rng.random()
        cumulative = 0.0
        for name, rate in cfg.faults.items():
            if rate <= 0:
                continue
            if name in FATAL_FAULTS and cfg.fatal_after is not None:
                if req.number <= cfg.fatal_after:
                    continue
            cumulative += rate
            if draw < cumulative:
                return name
        return None

    def choose_provider(self, req: ChatRequest) -> str | None:
        """Who serves this attempt: the request's routing preferences first.

        A configured provider-bound quirk (``wire.BOUND_QUIRKS``: stripping, re-serialising
        tool arguments, another template) is a property of one provider, as in real deployments:
        attempts that drew the quirk go there and the others elsewhere, so the quirk's rate holds
        and that provider always shows it. Routing preferences win over this.
        """
        prefs = req.provider_prefs
        allowed = list(self.providers)

        def names(value: object) -> set[str]:
            return {str(v).lower() for v in value} if isinstance(value, list) else set()

        if prefs.get("only"):
            only = names(prefs["only"])
            allowed = [p for p in allowed if wire.routing_names(p) & only]
        ignore = names(prefs.get("ignore"))
        allowed = [p for p in allowed if not wire.routing_names(p) & ignore]
        order = [str(o).lower() for o in prefs.get("order") or [] if isinstance(o, str)]
        for wanted in order:
            for p in allowed:
                if wanted in wire.routing_names(p):
                    return p
        if order and prefs.get("allow_fallbacks") is False:
            return None
        if not allowed:
            return None
        preferred = allowed
        for quirk in self._bound:
            if quirk == "template_renderer" and self.template_renderer is None:
                continue
            bound, drawn = wire.BOUND_QUIRKS[quirk], quirk in req.quirks
            preferred = [p for p in preferred if (p == bound) == drawn] or preferred
        rng = _rng(self.config.seed, req.prompt.sha256, req.attempt, "provider")
        return rng.choice(preferred)

    def draw_quirks(self, req: ChatRequest) -> set[str]:
        cfg = self.config
        rng = _rng(cfg.seed, req.prompt.sha256, req.attempt, "quirks")
        drawn = {name for name, rate in cfg.quirks.items() if rate > 0 and rng.random() < rate}
        if req.prompt.layout == DISABLED:
            drawn -= {
                "no_split",
                "empty_reasoning",
                "reasoning_content_field",
                "unclosed_reasoning",
            }
        if self.profile.segmented is not None:
            drawn.discard("unclosed_reasoning")  # its segments say nothing of where a turn ends
        if "unclosed_reasoning" in drawn:
            drawn.discard("no_split")  # vLLM's parser splits it: all reasoning, no content
        if not self.profile.tool_call_tokens:
            drawn.discard("tool_call_text")
        if {"strip_whitespace", "no_split", "leak_eot"} <= drawn:
            drawn.discard("leak_eot")  # content would start with reasoning and end with eot
        return drawn

    def model_output(self, req: ChatRequest, max_tokens: int | None) -> tuple[ModelOutput, set]:
        """The completion the model produces for this attempt, and the provider quirks to apply."""
        cfg = self.config
        drawn = req.quirks
        layout = req.prompt.layout
        rng = _rng(cfg.seed, req.prompt.sha256, req.attempt, "plan")
        plan = Plan(
            total_tokens=rng.randint(cfg.min_tokens, cfg.max_tokens),
            reasoning_share=rng.uniform(0.3, 0.7),
            drift="drift" in drawn,
            resplit="resplit" in drawn,
            empty_reasoning="empty_reasoning" in drawn,
            unclosed_reasoning="unclosed_reasoning" in drawn,
            tool_call_text="tool_call_text" in drawn,
            tool_call=req.tool_call,
            # Real answers sometimes start or end with whitespace ("\n\n" after </think>, a
            # newline after a code block); a provider that does not strip shows it.
            pad_content="strip_whitespace" in drawn
            or _rng(cfg.seed, req.prompt.sha256, req.attempt, "edges").random()
            < NATURAL_EDGE_WHITESPACE,
        )
        gen_rng = _rng(cfg.seed, req.prompt.sha256, req.attempt, "text")
        output = generate(self.table, layout, plan, gen_rng, max_tokens)
        provider_quirks = drawn & {
            "strip_whitespace",
            "leak_eot",
            "no_split",
            "reasoning_content_field",
            *TOOL_CALL_QUIRKS,
        }
        for quirk in {"strip_whitespace", "reserialize_arguments"}.intersection(self._bound):
            # Its provider always shows it, the others never do.
            provider_quirks.discard(quirk)
            if req.provider == wire.BOUND_QUIRKS[quirk]:
                provider_quirks.add(quirk)
        return output, provider_quirks

    def serve_with(self, req: ChatRequest, provider: str) -> None:
        """Hand ``req`` to ``provider``: one rendering the prompt otherwise serves its own."""
        req.provider = provider
        for quirk, prompt in (
            ("template_renderer", req.template_prompt),
            ("template_revision", req.revision_prompt),
        ):
            if provider == wire.BOUND_QUIRKS[quirk] and prompt and prompt.ids != req.prompt.ids:
                self.stats[quirk] += 1
                req.prompt, req.prompt_quirk = prompt, quirk

    def success(self, req: ChatRequest, head: dict, generation_id: str) -> Served:
        output, provider_quirks = self.model_output(req, req.max_tokens)
        if output.finish_reason != "stop":
            provider_quirks.discard("leak_eot")
        rng = _rng(self.config.seed, req.prompt.sha256, req.attempt, "deliver")
        delivery = self._deliver(output, provider_quirks, rng, req)
        ids = output.ids
        usage = wire.usage(
            len(req.prompt.ids), len(ids), output.reasoning_token_count, self._prices
        )
        return Served(generation_id, head, output, delivery, usage)

    def partial(self, req: ChatRequest, head: dict, generation_id: str) -> Served:
        """What was generated before an upstream failure cut the completion short."""
        output, provider_quirks = self.model_output(req, req.max_tokens)
        rng = _rng(self.config.seed, req.prompt.sha256, req.attempt, "partial")
        cut = rng.randint(0, max(0, len(output.ids) - 1))
        short, _ = self.model_output(req, cut if cut > 0 else 1)
        if cut == 0:
            short.sections = []
        provider_quirks.discard("leak_eot")
        delivery = self._deliver(short, provider_quirks, rng, req)
        return Served(generation_id, head, short, delivery)

    def _deliver(
        self, output: ModelOutput, quirks: set[str], rng: random.Random, req: ChatRequest
    ) -> wire.Delivery:
        quirks = set(quirks)
        if req.tool_call is None:
            quirks -= set(TOOL_CALL_QUIRKS)
        if not self.profile.tool_call_ids_in_markup:
            quirks.discard("rename_tool_call_id")  # invisible in the ids: not worth a quirk
        delivery = wire.deliver(output, quirks, rng, req.exclude_reasoning, req.tool_call)
        if self.config.dialect == "sglang" and delivery.reasoning is not None:
            delivery.reasoning_key = "reasoning_content"  # SGLang's name for it
        return delivery

    def tool_call_for(
        self, tools: list | None, prompt: RenderedPrompt, attempt: int, forced: bool = False
    ) -> dict | None:
        """The call the model makes when the request offered ``tools`` (or None); ``forced``: a
        ``tool_choice`` that requires one, answered with the values the prompt asks for
        (calibration's question: non-ASCII and ``<&>`` in every value)."""
        if not tools or not self.profile.tool_call_format:
            return None
        rng = _rng(self.config.seed, prompt.sha256, attempt, "tool_call")
        if rng.random() >= self.config.tool_call_rate and not forced:
            return None
        tool = tools[0] if isinstance(tools[0], dict) else {}
        function = tool.get("function") if isinstance(tool.get("function"), dict) else tool
        name = function.get("name") if isinstance(function.get("name"), str) else "tool"
        parameters = function.get("parameters")
        properties = parameters.get("properties") if isinstance(parameters, dict) else None
        keys = list(properties) if isinstance(properties, dict) and properties else ["query"]
        values = ("Paris", "café ☕", "2026-03-15", "42")
        arguments = {key: rng.choice(values) for key in keys[:3]}
        if forced:
            arguments = {key: f"Zürich <{key} & Söhne>" for key in keys[:3]}
        compact = rng.random() < self.config.compact_tool_arguments
        separators = (",", ":") if compact else (", ", ": ")
        written = json.dumps(arguments, ensure_ascii=False, separators=separators)
        return {
            "id": f"functions.{name}:0",
            "name": name,
            "arguments": written,
            # What the engine's tool parser hands the provider (vLLM's, per family).
            "returned": self.profile.engine_arguments(written),
        }

    def record(self, served: Served, req: ChatRequest, extra: dict | None = None) -> dict:
        """Ground truth of a delivered (billed) completion (``extra``: fields a batch row adds,
        its custom_id and batch)."""
        output = served.output
        delivery = served.delivery
        assert output is not None and delivery is not None and served.usage is not None
        quirks = list(output.quirks) + [q for q in delivery.applied if q not in output.quirks]
        if req.prompt_quirk is not None:
            quirks.append(req.prompt_quirk)  # not the prompt the client renders
        exact = is_canonical(self.table, output) and not (set(quirks) & INEXACT_QUIRKS)
        record = {
            "generation_id": served.generation_id,
            "prompt_text": req.prompt.text,
            "prompt_sha256": req.prompt.sha256,
            "prompt_ids": req.prompt.ids,
            "completion_ids": output.ids,
            "reasoning": output.reasoning,
            "content": output.content,
            "finish_reason": output.finish_reason,
            "quirks": quirks,
            "text_exact": exact,
            "stream": req.stream,
            "model": req.model,
            "provider": req.provider,
            "attempt": req.attempt,
            "layout": output.layout,
            "dialect": self.config.dialect,
            "tool_calls": delivery.tool_calls,
            "prompt_tokens": served.usage["prompt_tokens"],
            "completion_tokens": served.usage["completion_tokens"],
            "reasoning_tokens": served.usage["completion_tokens_details"]["reasoning_tokens"],
            "cost": served.usage["cost"],
            "delivered": {
                "reasoning": delivery.reasoning_text,
                "reasoning_field": delivery.reasoning_key,
                "content": delivery.content_text,
            },
            **(extra or {}),
        }
        self.truth[served.generation_id] = record
        self.stats["completions"] += 1
        for q in quirks:
            self.stats[q] += 1
        if self._truth_file is not None:
            self._truth_file.write(orjson.dumps(record) + b"\n")
            self._truth_file.flush()
        return record

    # -- HTTP -----------------------------------------------------------------------------

    def app(self) -> web.Application:
        app = web.Application(client_max_size=256 * 1024 * 1024)
        app.router.add_post(API_PREFIX + "/chat/completions", self.handle_chat)
        app.router.add_get(API_PREFIX + "/models", self.handle_models)
        app.router.add_get(API_PREFIX + "/generation", self.handle_generation)
        app.router.add_get(API_PREFIX + "/key", self.handle_key)
        app.router.add_get(
            API_PREFIX + "/models/{author}/{slug}/endpoints", self.handle_model_endpoints
        )
        # SGLang serves /generate at its root; under the API prefix too, so one base URL works.
        generate = GenerateRoute(self).handle
        app.router.add_post("/generate", generate)
        app.router.add_post(API_PREFIX + "/generate", generate)
        self.batch.register(app)
        self.hostile.register(app)
        return app

    def _authorized(self, request: web.Request) -> bool:
        if self.config.dialect != "openrouter":
            return True  # self-hosted servers run without --api-key as often as with
        header = request.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        return scheme.lower() == "bearer" and bool(token.strip())

    @staticmethod
    def _json(status: int, body: bytes, headers: dict | None = None) -> web.Response:
        return web.Response(
            status=status, body=body, content_type="application/json", headers=headers
        )

    def _unauthorized(self) -> web.Response:
        self.stats["unauthorized"] += 1
        return self._json(401, wire.error_body(401, "No auth credentials found", "authentication"))

    def _bad_request(self, message: str) -> web.Response:
        self.stats["bad_request"] += 1
        return self._json(400, wire.error_body(400, message, "invalid_request"))

    def _down(self, requests: int) -> bool:
        """Whether the ``fail_after`` outage has begun (``requests`` chat requests so far)."""
        down = self.config.fail_after is not None and requests > self.config.fail_after
        if down:
            self.stats["outage"] += 1
        return down

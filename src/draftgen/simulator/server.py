"""An OpenRouter-compatible HTTP server that answers with simulated completions and faults.

Every served completion keeps its ground truth (the exact ids the "model" generated) in memory and,
optionally, in a JSON-lines file flushed per record, so tests can check a client's reconstruction.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
import json
import random
import signal
import sys
import threading
import time
from typing import Any

import orjson
from aiohttp import web

from draftgen.profiles import ModelProfile
from draftgen.simulator import wire
from draftgen.simulator.batch import BatchSimulator
from draftgen.simulator.config import (
    DELIVERING_FAULTS,
    FATAL_FAULTS,
    INEXACT_QUIRKS,
    TOOL_CALL_QUIRKS,
    SimConfig,
    format_retry_after,
)
from draftgen.simulator.exchange import (
    ChatRequest,
    RenderedPrompt,
    RequestProblem,
    Served,
)
from draftgen.simulator.exchange import close_connection as _close
from draftgen.simulator.exchange import seeded_rng as _rng
from draftgen.simulator.hostile import HostileAnswers
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
SIMULATOR_KEY_LABEL = "draftgen simulator (synthetic data)"
PROMPT_CACHE_SIZE = 2048


# Share of answers with whitespace at their edges, as models write them.
NATURAL_EDGE_WHITESPACE = 0.15
# The default system prompt the template_revision provider's revision puts first.
REVISION_SYSTEM_PROMPT = "You are a helpful assistant."


class Simulator:
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
            drawn -= {"no_split", "empty_reasoning", "reasoning_content_field"}
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
            empty_reasoning="empty_reasoning" in drawn,
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

    async def handle_models(self, request: web.Request) -> web.Response:
        if self._down(self.stats["requests"]):
            return self._json(500, wire.error_body(500, "simulated outage", "server_error"))
        now = int(time.time())
        data = [
            {
                "id": model,
                "canonical_slug": model,
                "name": model,
                "created": now,
                "context_length": 262144,
                "architecture": {
                    "modality": "text->text",
                    "input_modalities": ["text"],
                    "output_modalities": ["text"],
                    "tokenizer": "Other",
                },
                "pricing": {
                    "prompt": wire_price(self.config.prompt_price),
                    "completion": wire_price(self.config.completion_price),
                    "request": "0",
                    "image": "0",
                },
                "top_provider": {"context_length": 262144, "is_moderated": False},
                "supported_parameters": [
                    "max_tokens",
                    "temperature",
                    "seed",
                    "reasoning",
                    "include_reasoning",
                    "tools",
                    "stop",
                ],
            }
            for model in self.models_seen
        ]
        # Models with a batch endpoint have a ``:batch`` variant with its own (lower) price.
        batch_models = self.config.batch_models
        for entry in list(data):
            if batch_models is None or entry["id"] in batch_models:
                prices = self.batch.prices
                pricing = {**entry["pricing"], "prompt": wire_price(prices[0])}
                pricing["completion"] = wire_price(prices[1])
                batch_id = entry["id"] + ":batch"
                data.append({**entry, "id": batch_id, "canonical_slug": batch_id})
                data[-1]["pricing"] = pricing
        return self._json(200, orjson.dumps({"data": data}))

    async def handle_model_endpoints(self, request: web.Request) -> web.Response:
        """OpenRouter's ``GET /models/{author}/{slug}/endpoints``: the simulator serves whatever
        model it is asked for, so every model has one endpoint per simulated provider."""
        if not self._authorized(request):
            return self._unauthorized()
        if self._down(self.stats["requests"]):
            return self._json(500, wire.error_body(500, "simulated outage", "server_error"))
        model = f"{request.match_info['author']}/{request.match_info['slug']}"
        self.models_seen.setdefault(model.removesuffix(":batch"), None)
        body = {
            "data": {
                "id": model,
                "name": model,
                "created": 1767225600,
                "description": "A model served by the draftgen simulator (synthetic data).",
                "architecture": {
                    "modality": "text->text",
                    "input_modalities": ["text"],
                    "output_modalities": ["text"],
                    "tokenizer": "Other",
                    "instruct_type": None,
                },
                "endpoints": [self._endpoint(model, p) for p in self.providers],
            }
        }
        return self._json(200, orjson.dumps(body))

    def _endpoint(self, model: str, provider: str) -> dict:
        """One provider's entry of the endpoints listing, as OpenRouter shapes it."""
        tag, quantization = wire.ENDPOINT_FACTS.get(provider, (provider.lower(), "unknown"))
        latency = self.config.latency + (
            self.config.slow_provider if provider == wire.SLOW_PROVIDER else 0.0
        )
        parameters = ["max_tokens", "temperature", "top_p", "seed", "reasoning", "tools", "stop"]
        if provider in wire.LOGPROB_PROVIDERS:
            parameters.append("logprobs")
        return {
            "name": f"{provider} | {model}",
            "model_name": model,
            "provider_name": provider,
            "tag": tag,
            "context_length": 262144,
            "pricing": {
                "prompt": wire_price(self.config.prompt_price),
                "completion": wire_price(self.config.completion_price),
                "request": "0",
                "image": "0",
            },
            "quantization": quantization,
            "max_completion_tokens": 65536,
            "max_prompt_tokens": None,
            "supported_parameters": parameters,
            "status": 0,
            "uptime_last_30m": 100.0,
            "supports_implicit_caching": False,
            # Seconds to the first token; the simulator's own pace is its configured delay.
            "latency_last_30m": {"p50": latency, "p75": latency, "p90": latency, "p99": latency},
        }

    async def handle_key(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return self._unauthorized()
        usage = sum(r["cost"] for r in self.truth.values())
        body = {
            "data": {
                "label": SIMULATOR_KEY_LABEL,  # how the probe tells the simulator's data apart
                "limit": None,
                "usage": usage,
                "limit_remaining": None,
                "is_free_tier": False,
            }
        }
        return self._json(200, orjson.dumps(body))

    async def handle_generation(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return self._unauthorized()
        record = self.truth.get(request.query.get("id", ""))
        if record is None:
            return self._json(404, wire.error_body(404, "Generation not found", "not_found"))
        body = {
            "data": {
                "id": record["generation_id"],
                "model": record["model"],
                "provider_name": record["provider"],
                "streamed": record["stream"],
                "tokens_prompt": record["prompt_tokens"],
                "tokens_completion": record["completion_tokens"],
                "native_tokens_prompt": record["prompt_tokens"],
                "native_tokens_completion": record["completion_tokens"],
                "native_tokens_reasoning": record["reasoning_tokens"],
                "finish_reason": record["finish_reason"],
                "native_finish_reason": record["finish_reason"],
                "total_cost": record["cost"],
            }
        }
        return self._json(200, orjson.dumps(body))

    def _parse(self, body: Any) -> tuple[dict, str | None]:
        if not isinstance(body, dict):
            return {}, "request body must be a JSON object"
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return {}, "messages must be a non-empty array"
        if not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages):
            return {}, "every message must be an object with a role"
        tools = body.get("tools")
        if tools is not None and not isinstance(tools, list):
            return {}, "tools must be an array"
        max_tokens = body.get("max_tokens", body.get("max_completion_tokens"))
        if max_tokens is not None and (
            isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1
        ):
            return {}, "max_tokens must be a positive integer"
        model = body.get("model")
        if not isinstance(model, str) or not model:
            return {}, "model is required"
        problem = _sampling_problem(body)
        if problem:
            return {}, problem
        return body, None

    async def handle_chat(self, request: web.Request) -> web.StreamResponse:
        self.stats["requests"] += 1
        if self._down(self.stats["requests"]):
            return self._json(500, wire.error_body(500, "simulated outage", "server_error"))
        if not self._authorized(request):
            return self._unauthorized()
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError as exc:
            return self._bad_request(f"request body is not valid JSON: {exc}")
        try:
            req = self.chat_request(body)
        except RequestProblem as exc:
            return self._bad_request(str(exc))
        if self.config.latency:
            await asyncio.sleep(self.config.latency)

        hostile = self.hostile.choose(req)
        fault = self.choose_fault(req) if hostile is None else None
        if fault is not None:
            self.stats[fault] += 1
            self.stats["faults"] += 1
        req.quirks = self.draw_quirks(req)
        provider = self.choose_provider(req)
        if provider is None:
            self.stats["no_provider"] += 1
            return self._json(
                404,
                wire.error_body(
                    404, "No endpoints found matching your provider preferences", "no_endpoints"
                ),
            )
        self.serve_with(req, provider)
        if provider == wire.SLOW_PROVIDER and self.config.slow_provider:
            await asyncio.sleep(self.config.slow_provider)
        # OpenRouter's shape ("gen-<epoch>-<20 characters>"), drawn like the answer is: the same
        # prompt and attempt give the same id, so two runs of one suite (or its shards) compare
        # byte for byte.
        id_rng = _rng(self.config.seed, req.prompt.sha256, req.attempt, "generation_id")
        generation_id = f"gen-{1767225600 + id_rng.randrange(10**8)}-{id_rng.getrandbits(80):020x}"
        head = {
            "id": generation_id,
            "provider": provider,
            "model": req.model,
            "created": int(time.time()),
        }
        if self.config.dialect != "openrouter":  # a self-hosted server names no provider
            del head["provider"]
        status = self._status_fault(fault)
        if status is not None:
            return status
        if hostile is not None:
            return await self.hostile.answer(request, req, hostile, head, generation_id)
        if req.stream:
            return await self._stream(request, req, fault, head, generation_id)
        return await self._plain(request, req, fault, head, generation_id)

    def chat_request(self, body: Any) -> ChatRequest:
        """A valid chat request from its body, rendered, numbered and counted as an attempt of
        its prompt (live requests and batch rows alike); ``RequestProblem`` says what is wrong."""
        body, problem = self._parse(body)
        if problem:
            raise RequestProblem(problem)
        reasoning_opts = body.get("reasoning") if isinstance(body.get("reasoning"), dict) else {}
        # A provider maps the reasoning settings onto the family's template variables (one
        # with the ignore_thinking_switch quirk renders the template's default instead).
        template_kwargs = self.profile.template_variables(reasoning_opts)
        if template_kwargs and self._ignores_switch(body["messages"]):
            self.stats["ignore_thinking_switch"] += 1
            template_kwargs = {}
        if self.profile.prompt_renderer == "harmony":
            # vLLM's harmony path reads the effort from the request, never chat_template_kwargs.
            if self.config.dialect != "openrouter" and body.get("reasoning_effort") is not None:
                template_kwargs["reasoning_effort"] = body["reasoning_effort"]
        elif isinstance(body.get("chat_template_kwargs"), dict):
            template_kwargs.update(body["chat_template_kwargs"])
        try:
            prompt = self.render(body["messages"], body.get("tools"), template_kwargs or None)
        except Exception as exc:  # template errors come in many types
            raise RequestProblem(f"cannot render the chat template: {exc}") from None
        self._valid_requests += 1
        req = ChatRequest(
            model=body["model"],
            prompt=prompt,
            stream=bool(body.get("stream")),
            max_tokens=body.get("max_tokens", body.get("max_completion_tokens")),
            exclude_reasoning=reasoning_opts.get("exclude") is True,
            provider_prefs=body.get("provider") if isinstance(body.get("provider"), dict) else {},
            attempt=self.attempts[prompt.sha256],
            number=self._valid_requests,
        )
        if self.template_renderer is not None:
            with contextlib.suppress(Exception):  # a prompt the template refuses: harmony's
                req.template_prompt = self.render(
                    body["messages"],
                    body.get("tools"),
                    template_kwargs or None,
                    self.template_renderer,
                )
        if "template_revision" in self._bound:
            revised = self._revised_messages(body["messages"])
            if revised is not None:
                with contextlib.suppress(Exception):
                    req.revision_prompt = self.render(
                        revised, body.get("tools"), template_kwargs or None
                    )
        forced = body.get("tool_choice") not in (None, "auto", "none")
        req.tool_call = self.tool_call_for(body.get("tools"), prompt, req.attempt, forced)
        req.want_logprobs = body.get("logprobs") is True
        dialect = self.config.dialect
        if dialect == "vllm":
            req.want_prompt_ids = req.want_completion_ids = body.get("return_token_ids") is True
        elif dialect == "sglang" and not req.stream:  # SGLang returns ids only unstreamed
            req.want_prompt_ids = body.get("return_prompt_token_ids") is True
            req.want_completion_ids = body.get("return_meta_info") is True
        self.attempts[prompt.sha256] += 1
        self.models_seen.setdefault(req.model, None)
        return req

    @staticmethod
    def _revised_messages(messages: list) -> list | None:
        """The messages as the other template revision sees them: a default system prompt
        first when the request has none (None: it has one, so both revisions agree)."""
        if messages[0].get("role") in ("system", "developer"):
            return None
        return [{"role": "system", "content": REVISION_SYSTEM_PROMPT}, *messages]

    def _ignores_switch(self, messages: list) -> bool:
        rate = self.config.quirks.get("ignore_thinking_switch", 0)
        if rate <= 0:
            return False
        digest = hashlib.blake2b(orjson.dumps(messages), digest_size=8).hexdigest()
        return _rng(self.config.seed, digest, "ignore_thinking_switch").random() < rate

    def _status_fault(self, fault: str | None) -> web.Response | None:
        """Faults answered with an HTTP error status, before any generation."""
        retry = {"Retry-After": self._retry_after}
        if fault == "rate_limit":
            return self._json(
                429,
                wire.error_body(429, "Rate limit exceeded, please retry", "rate_limit_exceeded"),
                retry,
            )
        if fault == "rate_limit_no_header":
            return self._json(
                429, wire.error_body(429, "Rate limit exceeded", "rate_limit_exceeded")
            )
        if fault == "overloaded":
            return self._json(
                503,
                wire.error_body(503, "Provider is overloaded, try again", "provider_overloaded"),
                retry,
            )
        if fault == "bad_gateway":
            return self._json(
                502, wire.error_body(502, "Provider returned error", "provider_unavailable")
            )
        if fault == "server_error":
            return self._json(500, wire.error_body(500, "Internal Server Error", "server_error"))
        if fault == "budget_in_flight":
            return self._json(
                402,
                wire.error_body(
                    402,
                    "Too much spend in flight for this key; wait for running requests to finish",
                    "payment_required",
                    reason="in_flight_budget_exhausted",
                ),
                retry,
            )
        if fault == "payment":
            return self._json(
                402,
                wire.error_body(
                    402,
                    "Insufficient credits. Add more using https://openrouter.ai/settings/credits",
                    "payment_required",
                ),
            )
        if fault == "auth":
            return self._json(401, wire.error_body(401, "User not found.", "authentication"))
        return None

    # -- non-streaming --------------------------------------------------------------------

    async def _plain(
        self, request: web.Request, req: ChatRequest, fault: str | None, head: dict, gid: str
    ) -> web.StreamResponse:
        headers = {"X-Generation-Id": gid}
        rng = _rng(self.config.seed, req.prompt.sha256, req.attempt, "wire")
        if fault == "error_200":
            body = orjson.dumps(
                {"error": wire.error_object(502, "Provider returned error", "provider_unavailable")}
            )
            return self._json(200, body, headers)
        if fault in ("finish_error", "midstream_error"):
            served = self.partial(req, head, gid)
            error = wire.error_object(
                502, "Upstream error: connection reset", "provider_unavailable"
            )
            body = wire.completion_body(head, served.delivery, "error", None, error=error)
            return self._json(200, orjson.dumps(body), headers)
        if fault == "empty":
            usage = wire.usage(len(req.prompt.ids), 0, 0, (0.0, 0.0))
            body = wire.completion_body(head, None, None, usage, content_null=rng.random() < 0.5)
            return self._json(200, orjson.dumps(body), headers)
        if fault == "stall":
            resp = web.StreamResponse(status=200, headers=headers)
            resp.content_type = "application/json"
            await resp.prepare(request)
            await self._stall(request)
            _close(request)
            return resp

        served = self.success(req, head, gid)
        completion = wire.completion_body(
            head, served.delivery, served.output.finish_reason, served.usage
        )
        if fault == "huge_body":
            completion["choices"][0]["message"]["reasoning_details"] = [_huge_detail()]
        self._add_ids(completion, req, served)
        body = orjson.dumps(completion)
        if fault == "malformed_json":
            return self._json(200, body[: max(1, len(body) // 2)], headers)
        if fault == "drop":
            resp = web.StreamResponse(status=200, headers=headers)
            resp.content_type = "application/json"
            resp.content_length = len(body)
            await resp.prepare(request)
            await resp.write(body[: rng.randint(1, len(body) - 1)])
            _close(request)
            return resp
        self.record(served, req)
        return web.Response(status=200, body=body, content_type="application/json", headers=headers)

    def _logprobs(self, req: ChatRequest, served: Served) -> list | None:
        """Content logprobs, if asked for and this provider returns them (others send null)."""
        if not req.want_logprobs or (
            self.config.dialect == "openrouter" and req.provider not in wire.LOGPROB_PROVIDERS
        ):
            return None
        return wire.logprobs_content(served.output, served.delivery, self.table.token_bytes)

    def _add_ids(self, body: dict, req: ChatRequest, served: Served) -> None:
        """The exact ids (and logprobs) as the dialect returns them, when the request asked."""
        choice = body["choices"][0]
        entries = self._logprobs(req, served)
        if entries is not None:
            choice["logprobs"] = {"content": entries, "refusal": None}
        ids = served.output.ids
        if self.config.dialect == "vllm" and req.want_completion_ids:
            body["prompt_token_ids"] = req.prompt.ids
            choice["token_ids"] = ids
        elif self.config.dialect == "sglang":
            if req.want_prompt_ids:
                choice["prompt_token_ids"] = req.prompt.ids
            if req.want_completion_ids:
                choice["meta_info"] = {
                    "id": served.generation_id,
                    "prompt_tokens": len(req.prompt.ids),
                    "completion_tokens": len(ids),
                    "output_ids": ids,
                    "finish_reason": {"type": served.output.finish_reason},
                }

    # -- streaming ------------------------------------------------------------------------

    async def _stream(
        self, request: web.Request, req: ChatRequest, fault: str | None, head: dict, gid: str
    ) -> web.StreamResponse:
        rng = _rng(self.config.seed, req.prompt.sha256, req.attempt, "wire")
        chunk_tokens = self.config.chunk_tokens
        events: list[bytes] = [wire.KEEPALIVE]
        end = "done"  # or "close": cut the connection after the events
        served: Served | None = None
        upstream_error = wire.error_object(
            502, "Upstream error: connection reset", "provider_unavailable"
        )

        if fault == "error_200":
            events.append(wire.sse({**head, "error": upstream_error}))
        elif fault in ("finish_error", "midstream_error"):
            partial = self.partial(req, head, gid)
            chunks = wire.delta_chunks(head, partial.delivery, chunk_tokens)
            if fault == "midstream_error":
                if rng.random() < 0.34:
                    chunks, events = [], []  # the error is the only event
                error_chunk = wire.finish_chunk(head, "error")
                error_chunk["error"] = upstream_error
                error_chunk["choices"][0]["delta"] = {"content": ""}
            else:
                error_chunk = wire.finish_chunk(head, "error", error=upstream_error)
            events += [wire.sse(c) for c in chunks]
            events.append(wire.sse(error_chunk))
        elif fault == "empty":
            usage = wire.usage(len(req.prompt.ids), 0, 0, (0.0, 0.0))
            events.append(wire.sse(wire.finish_chunk(head, None)))
            events.append(wire.sse(wire.usage_chunk(head, usage)))
            events.append(wire.DONE)
        else:
            served = self.success(req, head, gid)
            deltas = wire.delta_chunks(head, served.delivery, chunk_tokens)
            finish = wire.finish_chunk(head, served.output.finish_reason)
            if req.want_completion_ids:
                wire.attach_stream_ids([*deltas, finish], req.prompt.ids, served.output.ids)
            entries = self._logprobs(req, served)
            if entries is not None:
                wire.attach_stream_logprobs([*deltas, finish], entries)
            chunks = [wire.sse(c) for c in deltas]
            if fault == "huge_body":
                chunk = wire.finish_chunk(head, None)
                chunk["choices"][0]["delta"] = {"reasoning_details": [_huge_detail()]}
                chunks.insert(len(chunks) // 2, wire.sse(chunk))
            for c in chunks:
                if rng.random() < 0.03:
                    events.append(wire.KEEPALIVE)
                events.append(c)
            events.append(wire.sse(finish))
            events.append(wire.sse(wire.usage_chunk(head, served.usage)))
            events.append(wire.DONE)
            if fault == "drop":
                cut = rng.randint(1, len(events) - 2)
                tail = events[cut]
                events = events[:cut] + [tail[: rng.randint(0, len(tail) - 1)]]
                end = "close"
            elif fault == "malformed_json":
                data_events = [i for i, e in enumerate(events[:-2]) if e.startswith(b"data: {")]
                cut = rng.choice(data_events)
                broken = events[cut][: max(8, len(events[cut]) // 2)].rstrip(b"\n")
                events = events[:cut] + [broken + b"\n\n"]
            elif fault == "stall":
                events = events[: rng.randint(1, max(1, len(events) // 2))]
                end = "stall"

        resp = web.StreamResponse(
            status=200,
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-cache",
                "X-Generation-Id": gid,
            },
        )
        await resp.prepare(request)
        if served is not None and (fault is None or fault in DELIVERING_FAULTS):
            self.record(served, req)
        try:
            await self._send(resp, events, rng)
        except ConnectionError:
            return resp
        if end == "stall":
            await self._stall(request)
            _close(request)
        elif end == "close":
            _close(request)
        return resp

    async def _send(
        self, resp: web.StreamResponse, events: list[bytes], rng: random.Random
    ) -> None:
        pace = self.config.tokens_per_second
        if pace > 0:
            await _send_paced(resp, events, self.config.chunk_tokens / pace)
            return
        delay = self.config.chunk_delay
        if delay > 0:
            for i, event in enumerate(events):
                if i:
                    await asyncio.sleep(delay)
                await resp.write(event)
            return
        # No pacing asked: write the stream in random slices, so a client's SSE framing meets
        # lines (and UTF-8 characters) split across reads, as TCP may deliver them.
        blob = b"".join(events)
        pos = 0
        while pos < len(blob):
            size = rng.randint(1, 24) if rng.random() < 0.2 else rng.randint(256, 8192)
            await resp.write(blob[pos : pos + size])
            pos += size

    async def _stall(self, request: web.Request) -> None:
        deadline = time.monotonic() + self.config.stall_seconds
        while time.monotonic() < deadline:
            transport = request.transport
            if transport is None or transport.is_closing():
                return
            await asyncio.sleep(min(0.05, max(0.0, deadline - time.monotonic())))


async def _send_paced(resp: web.StreamResponse, events: list[bytes], interval: float) -> None:
    """Each data event ``interval`` after the one before, from now; what is due goes in one write.

    Deadlines, not sleeps between events: a server behind on its writes (thousands of streams)
    sends what is due at once, as a provider's generation runs on whether or not it is read.
    """
    loop = asyncio.get_running_loop()
    start = loop.time()
    due, sent = 0, 0
    for i, event in enumerate(events):
        if event.startswith(b"data: "):
            due += 1
        if due > 1 and loop.time() < start + (due - 1) * interval:
            await resp.write(b"".join(events[sent:i]))
            sent = i
            await asyncio.sleep(start + (due - 1) * interval - loop.time())
    await resp.write(b"".join(events[sent:]))


def _sampling_problem(body: dict) -> str | None:
    """Why the sampling, reasoning or routing fields are malformed, as OpenRouter refuses them."""
    from draftgen.backends.openrouter import provider_problem, reasoning_problem

    def number(name: str) -> object:
        value = body.get(name)
        return None if isinstance(value, bool) else value

    temperature, top_p, seed = number("temperature"), number("top_p"), body.get("seed")
    if "temperature" in body and not (
        isinstance(temperature, (int, float)) and 0 <= temperature <= 2
    ):
        return "temperature must be a number from 0 to 2"
    if "top_p" in body and not (isinstance(top_p, (int, float)) and 0 < top_p <= 1):
        return "top_p must be a number above 0 and at most 1"
    if "seed" in body and (isinstance(seed, bool) or not isinstance(seed, int)):
        return "seed must be an integer"
    if "reasoning" in body and (problem := reasoning_problem(body["reasoning"])):
        return problem
    if "provider" in body and (problem := provider_problem(body["provider"])):
        return problem
    return None


def wire_price(value: float) -> str:
    return f"{value:.12f}".rstrip("0").rstrip(".") or "0"


class SimServer:
    """A running simulator: ``base_url`` to call, ``truth`` and ``stats`` to inspect."""

    def __init__(self, simulator: Simulator, runner: web.AppRunner, base_url: str) -> None:
        self._simulator = simulator
        self._runner = runner
        self.base_url = base_url
        self.truth = simulator.truth
        self.stats = simulator.stats
        self.config = simulator.config
        self.profile = simulator.profile
        self.tokenizer = simulator.tokenizer
        self.batches = simulator.batch  # the batch APIs' state, log and ground truth

    async def close(self) -> None:
        await self._runner.cleanup()
        self._simulator.close()


async def start_simulator(config: SimConfig, host: str = "127.0.0.1", port: int = 0) -> SimServer:
    simulator = Simulator(config)
    runner = web.AppRunner(
        simulator.app(), access_log=None, handle_signals=False, shutdown_timeout=0.5
    )
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=4096, reuse_address=True)
    await site.start()
    sockets = runner.addresses
    bound_port = sockets[0][1] if sockets else port
    return SimServer(simulator, runner, f"http://{host}:{bound_port}{API_PREFIX}")


def serve_forever(config: SimConfig, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Run the simulator until SIGINT/SIGTERM, printing its base URL first (for scripts)."""

    async def main() -> None:
        server = await start_simulator(config, host, port)
        print(f"draftgen simulator listening on {server.base_url}", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, stop.set)
            except (NotImplementedError, RuntimeError):
                pass
        try:
            await stop.wait()
        finally:
            await server.close()

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.stderr.write("draftgen simulator stopped\n")


class SimulatorThread:
    """The simulator on its own event loop in a background thread, for synchronous tests.

    Use it as a context manager: ``with SimulatorThread(config) as sim:`` then point the client
    at ``sim.base_url`` and read ``sim.truth`` afterwards.
    """

    def __init__(self, config: SimConfig, host: str = "127.0.0.1", port: int = 0) -> None:
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._server: SimServer | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._run, args=(config, host, port), name="draftgen-simulator", daemon=True
        )
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise self._error

    def _run(self, config: SimConfig, host: str, port: int) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._server = self._loop.run_until_complete(start_simulator(config, host, port))
        except BaseException as exc:  # handed to the constructing thread
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(self._server.close())
        self._loop.close()

    @property
    def server(self) -> SimServer:
        assert self._server is not None
        return self._server

    @property
    def base_url(self) -> str:
        return self.server.base_url

    @property
    def truth(self) -> dict[str, dict]:
        return self.server.truth

    @property
    def stats(self) -> collections.Counter:
        return self.server.stats

    def stop(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)

    def __enter__(self) -> SimulatorThread:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _huge_detail() -> dict:
    """An encrypted reasoning item of about 4 MB, as OpenRouter may attach to long reasoning."""
    return {"type": "reasoning.encrypted", "data": "QUJD" * 1_000_000, "format": "unknown"}

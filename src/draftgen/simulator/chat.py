"""The simulator's chat route, ``POST /chat/completions``: the request read and rendered, the
attempt's fault, provider and quirks decided, and the answer written as one JSON body or an SSE
stream, each fault in its shape.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import random
import time
from typing import Any

import orjson
from aiohttp import web

from draftgen.simulator import wire
from draftgen.simulator.config import DELIVERING_FAULTS
from draftgen.simulator.exchange import ChatRequest, RequestProblem, Served
from draftgen.simulator.exchange import close_connection as _close
from draftgen.simulator.exchange import seeded_rng as _rng

# The default system prompt the template_revision provider's revision puts first.
REVISION_SYSTEM_PROMPT = "You are a helpful assistant."


class ChatRoute:
    """The chat route of ``Simulator``, mixed into it: the batch, ``/generate`` and hostile routes
    reach its parsing, status faults, ids and pacing through the simulator (``exchange.Host``)."""

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
        if self.config.dialect != "openrouter" and (problem := _arguments_problem(messages)):
            return {}, problem
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
        template_kwargs = self._template_kwargs(body, reasoning_opts)
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
        self._other_prompts(req, body, template_kwargs)
        forced = body.get("tool_choice") not in (None, "auto", "none")
        req.tool_call = self.tool_call_for(body.get("tools"), prompt, req.attempt, forced)
        req.want_logprobs = body.get("logprobs") is True
        dialect = self.config.dialect
        if dialect == "vllm":
            req.want_prompt_ids = req.want_completion_ids = body.get("return_token_ids") is True
            req.want_token_id_logprobs = body.get("return_tokens_as_token_ids") is True
            options = body.get("stream_options")
            asked = isinstance(options, dict) and options.get("include_usage") is True
            req.want_stream_usage = asked  # vLLM streams usage only when asked
        elif dialect == "sglang" and not req.stream:  # SGLang returns ids only unstreamed
            req.want_prompt_ids = body.get("return_prompt_token_ids") is True
            req.want_completion_ids = body.get("return_meta_info") is True
        self.attempts[prompt.sha256] += 1
        self.models_seen.setdefault(req.model, None)
        return req

    def _template_kwargs(self, body: dict, reasoning_opts: dict) -> dict:
        """The template variables the request sets, as the provider renders the prompt."""
        # A provider maps the reasoning settings onto the family's template variables (one
        # with the ignore_thinking_switch quirk renders the template's default instead); a
        # self-hosted engine ignores OpenRouter's ``reasoning`` and reads chat_template_kwargs.
        template_kwargs = (
            self.profile.template_variables(reasoning_opts)
            if self.config.dialect == "openrouter"
            else {}
        )
        if template_kwargs and self._ignores_switch(body["messages"]):
            self.stats["ignore_thinking_switch"] += 1
            template_kwargs = {}
        if self.profile.prompt_renderer == "harmony":
            # vLLM's harmony path reads the effort from the request, never chat_template_kwargs.
            if self.config.dialect != "openrouter" and body.get("reasoning_effort") is not None:
                template_kwargs["reasoning_effort"] = body["reasoning_effort"]
        elif isinstance(body.get("chat_template_kwargs"), dict):
            template_kwargs.update(body["chat_template_kwargs"])
        return template_kwargs

    def _other_prompts(self, req: ChatRequest, body: dict, template_kwargs: dict) -> None:
        """The prompt as the template_renderer and template_revision providers render it, where
        those quirks are on (``serve_with`` hands it to the provider that serves the attempt)."""
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
            body = wire.completion_body(
                head, served.delivery, "error", None, error=_upstream_error()
            )
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
        if req.want_token_id_logprobs:
            return wire.token_id_logprobs(served.output, self.table.token_bytes)
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
        events, end, served = self._stream_events(req, fault, head, gid, rng)
        resp = web.StreamResponse(
            status=200,
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-cache",
                "X-Generation-Id": gid,
            },
        )
        return await self._stream_out(request, resp, req, served, fault, events, rng, end)

    async def _stream_out(
        self,
        request: web.Request,
        resp: web.StreamResponse,
        req: ChatRequest,
        served: Served | None,
        fault: str | None,
        events: list[bytes],
        rng: random.Random,
        end: str | None,
    ) -> web.StreamResponse:
        """Open ``resp``, record what it delivers (billed) in the truth, send ``events`` and end
        as ``end`` says ("stall": silence then a cut; "close": a cut; None: a clean end). The
        chat route's streams and SGLang's /generate streams alike."""
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

    def _stream_events(
        self, req: ChatRequest, fault: str | None, head: dict, gid: str, rng: random.Random
    ) -> tuple[list[bytes], str, Served | None]:
        """The stream's events, how it ends ("done"; "close": cut the connection after the
        events; "stall"), and the completion served (None: the fault served none)."""
        events: list[bytes] = [wire.KEEPALIVE]
        if fault == "error_200":
            events.append(wire.sse({**head, "error": _upstream_error()}))
            return events, "done", None
        if fault in ("finish_error", "midstream_error"):
            return self._failed_stream(req, fault, head, gid, rng, events), "done", None
        if fault == "empty":
            usage = wire.usage(len(req.prompt.ids), 0, 0, (0.0, 0.0))
            events.append(wire.sse(wire.finish_chunk(head, None)))
            events.append(wire.sse(wire.usage_chunk(head, usage)))
            events.append(wire.DONE)
            return events, "done", None
        served = self.success(req, head, gid)
        events += self._served_events(req, fault, head, served, rng)
        events, end = _broken_stream(events, fault, rng)
        return events, end, served

    def _failed_stream(
        self,
        req: ChatRequest,
        fault: str,
        head: dict,
        gid: str,
        rng: random.Random,
        events: list[bytes],
    ) -> list[bytes]:
        """What an upstream failure streams: the part generated before it, then the error."""
        upstream_error = _upstream_error()
        partial = self.partial(req, head, gid)
        chunks = wire.delta_chunks(head, partial.delivery, self.config.chunk_tokens)
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
        return events

    def _served_events(
        self, req: ChatRequest, fault: str | None, head: dict, served: Served, rng: random.Random
    ) -> list[bytes]:
        """The events of a served completion, keep-alives among them, up to ``[DONE]``."""
        deltas = wire.delta_chunks(head, served.delivery, self.config.chunk_tokens)
        finish = wire.finish_chunk(head, served.output.finish_reason)
        if req.want_completion_ids:
            wire.attach_stream_ids([*deltas, finish], req.prompt.ids, served.output.ids)
        entries = self._logprobs(req, served)
        if entries is not None and req.want_token_id_logprobs:
            wire.attach_stream_token_logprobs([*deltas, finish], entries)
        elif entries is not None:
            wire.attach_stream_logprobs([*deltas, finish], entries)
        chunks = [wire.sse(c) for c in deltas]
        if fault == "huge_body":
            chunk = wire.finish_chunk(head, None)
            chunk["choices"][0]["delta"] = {"reasoning_details": [_huge_detail()]}
            chunks.insert(len(chunks) // 2, wire.sse(chunk))
        events: list[bytes] = []
        for c in chunks:
            if rng.random() < 0.03:
                events.append(wire.KEEPALIVE)
            events.append(c)
        events.append(wire.sse(finish))
        if req.want_stream_usage:
            events.append(wire.sse(wire.usage_chunk(head, served.usage)))
        events.append(wire.DONE)
        return events

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


def _arguments_problem(messages: list) -> str | None:
    """Why a self-hosted engine refuses the request's tool-call history: vLLM's request schema
    takes ``arguments`` as a string and answers an object with HTTP 400."""
    for index, message in enumerate(messages):
        calls = message.get("tool_calls")
        for number, call in enumerate(calls if isinstance(calls, list) else ()):
            function = call.get("function") if isinstance(call, dict) else None
            arguments = function.get("arguments") if isinstance(function, dict) else None
            if arguments is not None and not isinstance(arguments, str):
                return (
                    f"messages.{index}.tool_calls.{number}.function.arguments: "
                    "Input should be a valid string"
                )
    return None


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


def _broken_stream(
    events: list[bytes], fault: str | None, rng: random.Random
) -> tuple[list[bytes], str]:
    """A served stream as a wire fault breaks it (cut, malformed or stalled), and how it ends."""
    if fault == "drop":
        cut = rng.randint(1, len(events) - 2)
        tail = events[cut]
        return events[:cut] + [tail[: rng.randint(0, len(tail) - 1)]], "close"
    if fault == "malformed_json":
        data_events = [i for i, e in enumerate(events[:-2]) if e.startswith(b"data: {")]
        cut = rng.choice(data_events)
        broken = events[cut][: max(8, len(events[cut]) // 2)].rstrip(b"\n")
        return events[:cut] + [broken + b"\n\n"], "done"
    if fault == "stall":
        return events[: rng.randint(1, max(1, len(events) // 2))], "stall"
    return events, "done"


def _upstream_error() -> dict:
    return wire.error_object(502, "Upstream error: connection reset", "provider_unavailable")


def _huge_detail() -> dict:
    """An encrypted reasoning item of about 4 MB, as OpenRouter may attach to long reasoning."""
    return {"type": "reasoning.encrypted", "data": "QUJD" * 1_000_000, "format": "unknown"}

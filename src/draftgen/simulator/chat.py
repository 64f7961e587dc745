"""The simulator's chat route, ``POST /chat/completions``: the attempt's fault, provider and quirks
decided, and the answer written as one JSON body (here) or an SSE stream (``chat_stream``), each
fault in its shape; the request is read by ``chat_request``.
"""

from __future__ import annotations

import asyncio
import time

import orjson
from aiohttp import web

from draftgen.simulator import wire
from draftgen.simulator.chat_request import ChatRequestReader
from draftgen.simulator.chat_stream import ChatStreamWriter
from draftgen.simulator.exchange import ChatRequest, RequestProblem, Served
from draftgen.simulator.exchange import close_connection as _close
from draftgen.simulator.exchange import seeded_rng as _rng


class ChatRoute(ChatRequestReader, ChatStreamWriter):
    """The chat route of ``Simulator``, mixed into it with the request's reading and the stream's
    writing: the batch, ``/generate`` and hostile routes reach its parsing, status faults, ids and
    pacing through the simulator (``exchange.Host``)."""

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
                head, served.delivery, "error", None, error=wire.upstream_error()
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
            completion["choices"][0]["message"]["reasoning_details"] = [
                wire.huge_reasoning_detail()
            ]
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

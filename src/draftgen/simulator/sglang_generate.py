"""The simulator's SGLang native ``/generate``: prompt ids in, ``output_ids`` and ``meta_info`` out,
with the chat routes' faults in SGLang's shapes (the wire facts are in backends/sglang_generate.py).

As on the real server the stop token stays in ``output_ids`` (``finish_reason.matched``) and is
trimmed from ``text`` only. No reasoning or tool-call parser runs here, so only the model's own
quirks (drift, empty reasoning, raw tool-call markup) apply, never a provider's.
"""

from __future__ import annotations

import asyncio
import hashlib
import secrets

import orjson
from aiohttp import web

from draftgen.simulator import wire
from draftgen.simulator.exchange import ChatRequest, Host, RenderedPrompt
from draftgen.simulator.exchange import close_connection as _close
from draftgen.simulator.exchange import seeded_rng as _rng
from draftgen.simulator.model import ModelOutput, prompt_layout
from draftgen.tokens.tokenizer import decode, encode

# What a server without a provider's parser can still show: the model's own doing.
MODEL_QUIRKS = frozenset(
    {"drift", "resplit", "empty_reasoning", "unclosed_reasoning", "tool_call_text"}
)
# SGLang's SamplingParams default when the request leaves max_new_tokens out (null: no limit).
DEFAULT_MAX_NEW_TOKENS = 128
ABORT_MESSAGE = "Abort in waiting queue: the scheduler was restarted"


class GenerateRoute:
    """``POST /generate`` of one simulator (answered only by the sglang dialect)."""

    def __init__(self, sim: Host) -> None:
        self.sim = sim

    async def handle(self, request: web.Request) -> web.StreamResponse:

        sim = self.sim
        sim.stats["requests"] += 1
        if sim.config.dialect != "sglang":
            return web.json_response({"detail": "Not Found"}, status=404)
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError as exc:
            return self._bad_request(f"request body is not valid JSON: {exc}")
        parsed = self._parse(body)
        if isinstance(parsed, str):
            return self._bad_request(parsed)
        prompt, max_new_tokens, skip_special = parsed
        sim._valid_requests += 1
        req = ChatRequest(
            model=sim.config.model,
            prompt=prompt,
            stream=bool(body.get("stream")),
            max_tokens=max_new_tokens,
            exclude_reasoning=False,
            provider_prefs={},
            attempt=sim.attempts[prompt.sha256],
            number=sim._valid_requests,
        )
        sim.attempts[prompt.sha256] += 1
        if sim.config.latency:
            await asyncio.sleep(sim.config.latency)
        fault = sim.choose_fault(req)
        if fault is not None:
            sim.stats[fault] += 1
            sim.stats["faults"] += 1
        req.quirks = sim.draw_quirks(req) & MODEL_QUIRKS
        status = sim._status_fault(fault)
        if status is not None:
            return status
        rid = secrets.token_hex(16)  # SGLang's request ids are uuid4 hex
        if req.stream:
            return await self._stream(request, req, fault, rid, skip_special)
        return await self._plain(request, req, fault, rid, skip_special)

    # -- request --------------------------------------------------------------------------

    def _parse(self, body: object) -> tuple[RenderedPrompt, int | None, bool] | str:
        """(prompt, max_new_tokens, skip_special_tokens), or what is wrong with the body."""

        sim = self.sim
        if not isinstance(body, dict):
            return "request body must be a JSON object"
        ids = body.get("input_ids")
        if ids is None and isinstance(body.get("text"), str):
            ids = encode(sim.tokenizer, body["text"])
        vocab = len(sim.table.token_bytes)
        if not isinstance(ids, list) or not ids:
            return "input_ids must be a non-empty array of token ids (or give text)"
        if not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < vocab for i in ids):
            return f"input_ids must be token ids in 0..{vocab - 1}"
        sampling = body.get("sampling_params", {})
        if not isinstance(sampling, dict):
            return "sampling_params must be an object"
        max_new = sampling.get("max_new_tokens", DEFAULT_MAX_NEW_TOKENS)
        if max_new is not None and (
            isinstance(max_new, bool) or not isinstance(max_new, int) or max_new < 1
        ):
            return "max_new_tokens must be a positive integer or null"
        skip = sampling.get("skip_special_tokens", True)
        if not isinstance(skip, bool):
            return "skip_special_tokens must be true or false"
        # SGLang's SamplingParams.verify messages, so a client's bad value shows as it would.
        temperature, top_p = sampling.get("temperature", 1.0), sampling.get("top_p", 1.0)
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
            return f"temperature must be a number, got {temperature!r}"
        if temperature < 0:
            return f"temperature must be non-negative, got {temperature}."
        if isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not 0 < top_p <= 1:
            return f"top_p must be in (0, 1], got {top_p}."
        seed = sampling.get("sampling_seed")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            return f"sampling_seed must be an integer, got {seed!r}"
        stops = sampling.get("stop_token_ids")
        if stops is not None and not (
            isinstance(stops, list) and all(isinstance(i, int) for i in stops)
        ):
            return "stop_token_ids must be an array of token ids"
        text = decode(sim.tokenizer, ids)
        prompt = RenderedPrompt(
            text=text,
            ids=list(ids),
            sha256=hashlib.sha256(text.encode("utf-8")).hexdigest(),
            layout=prompt_layout(text, sim.profile),
        )
        return prompt, max_new, skip

    def _bad_request(self, message: str) -> web.Response:
        self.sim.stats["bad_request"] += 1
        return web.json_response({"error": {"message": message}}, status=400)

    # -- bodies ---------------------------------------------------------------------------

    def _finish(self, output: ModelOutput, req: ChatRequest) -> dict:
        if output.finish_reason == "length":
            return {"type": "length", "length": req.max_tokens}
        return {"type": "stop", "matched": output.ids[-1]}  # the end-of-turn id

    def _event(
        self, req: ChatRequest, rid: str, ids: list[int], text: str, total: int, finish: dict | None
    ) -> dict:
        meta = {
            "id": rid,
            "finish_reason": finish,
            "prompt_tokens": len(req.prompt.ids),
            "completion_tokens": total,
            "cached_tokens": 0,
            "e2e_latency": 0.0,
        }
        return {"text": text, "output_ids": ids, "meta_info": meta}

    def _texts(self, ids: list[int], finish: dict | None, skip_special: bool) -> list[str]:
        """The text each id adds to ``text``: special tokens skipped if asked, the stop trimmed."""
        table = self.sim.table
        pieces = table.texts(ids) if ids else []
        if finish is not None and finish.get("matched") is not None and pieces:
            pieces[-1] = ""
        return [
            "" if skip_special and table.special[i] else piece
            for i, piece in zip(ids, pieces, strict=True)
        ]

    def _abort(self, message: str) -> dict:
        return {"type": "abort", "message": message, "status_code": 500}

    # -- non-streaming --------------------------------------------------------------------

    async def _plain(
        self, request: web.Request, req: ChatRequest, fault: str | None, rid: str, skip: bool
    ) -> web.StreamResponse:
        sim = self.sim

        rng = _rng(sim.config.seed, req.prompt.sha256, req.attempt, "wire")
        if fault == "error_200":
            event = self._event(req, rid, [], "", 0, self._abort(ABORT_MESSAGE))
            return web.json_response(event)
        if fault in ("finish_error", "midstream_error"):
            served = sim.partial(req, {}, rid)
            ids = served.output.ids
            text = "".join(self._texts(ids, None, skip))
            return web.json_response(
                self._event(req, rid, ids, text, len(ids), self._abort(ABORT_MESSAGE))
            )
        if fault == "empty":
            return web.json_response(self._event(req, rid, [], "", 0, None))
        if fault == "stall":
            resp = web.StreamResponse(status=200)
            resp.content_type = "application/json"
            await resp.prepare(request)
            await sim._stall(request)
            _close(request)
            return resp
        served = sim.success(req, {}, rid)
        ids = served.output.ids
        finish = self._finish(served.output, req)
        text = "".join(self._texts(ids, finish, skip))
        body = orjson.dumps(self._event(req, rid, ids, text, len(ids), finish))
        if fault == "malformed_json":
            return web.Response(
                status=200, body=body[: max(1, len(body) // 2)], content_type="application/json"
            )
        if fault == "drop":
            resp = web.StreamResponse(status=200)
            resp.content_type = "application/json"
            resp.content_length = len(body)
            await resp.prepare(request)
            await resp.write(body[: rng.randint(1, len(body) - 1)])
            _close(request)
            return resp
        sim.record(served, req)
        return web.Response(status=200, body=body, content_type="application/json")

    # -- streaming ------------------------------------------------------------------------

    def _chunks(
        self,
        req: ChatRequest,
        rid: str,
        ids: list[int],
        finish: dict | None,
        skip: bool,
        incremental: bool,
    ) -> list[bytes]:
        """One event per ``chunk_tokens`` ids, the last one carrying the finish reason."""
        step = self.sim.config.chunk_tokens
        texts = self._texts(ids, finish, skip)
        events: list[bytes] = []
        start = 0
        for end in [*range(step, len(ids), step), len(ids)]:
            last = end == len(ids)
            if incremental:
                piece_ids, text = ids[start:end], "".join(texts[start:end])
            else:
                piece_ids, text = ids[:end], "".join(texts[:end])
            event = self._event(req, rid, piece_ids, text, end, finish if last else None)
            events.append(wire.sse(event))
            start = end
        return events

    async def _stream(
        self, request: web.Request, req: ChatRequest, fault: str | None, rid: str, skip: bool
    ) -> web.StreamResponse:

        sim = self.sim
        rng = _rng(sim.config.seed, req.prompt.sha256, req.attempt, "wire")
        # Servers started with --incremental-streaming-output send deltas, others all ids so
        # far; the simulator stands in for both kinds.
        incremental = rng.random() < 0.5
        events: list[bytes] = []
        end = "done"
        served = None
        if fault == "error_200":
            events.append(wire.sse({"error": {"message": ABORT_MESSAGE}}))
        elif fault in ("finish_error", "midstream_error"):
            partial = sim.partial(req, {}, rid)
            events += self._chunks(
                req, rid, partial.output.ids, self._abort(ABORT_MESSAGE), skip, incremental
            )
        elif fault == "empty":
            events.append(wire.sse(self._event(req, rid, [], "", 0, None)))
        else:
            served = sim.success(req, {}, rid)
            finish = self._finish(served.output, req)
            events += self._chunks(req, rid, served.output.ids, finish, skip, incremental)
        events.append(wire.DONE)
        if fault == "drop":
            cut = rng.randint(0, len(events) - 2)
            events = events[:cut] + [events[cut][: rng.randint(0, len(events[cut]) - 1)]]
            end = "close"
        elif fault == "malformed_json":
            cut = rng.randrange(len(events) - 1)
            events = events[:cut] + [events[cut][: max(8, len(events[cut]) // 2)] + b"\n\n"]
        elif fault == "stall":
            events = events[: rng.randint(0, max(0, len(events) // 2))]
            end = "stall"
        resp = web.StreamResponse(
            status=200, headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        return await sim._stream_out(request, resp, req, served, fault, events, rng, end)

"""Hostile answers: what a broken or malicious server sends that no provider means to.

Bodies and events far past any cap, streams that never end, keep-alives forever, a trickle of a
few bytes a second, token counts and costs no provider bills, redirects off loopback, a whole
answer whose connection is then held open.
``SimConfig.hostile`` names the kinds (``config.HOSTILE``) and ``hostile_share`` the share of chat
requests answered with one, drawn per prompt and attempt as faults are. What is sent unbounded is
written as it goes, never held: the simulator stays small whatever it sends.
"""

from __future__ import annotations

import asyncio
import random

import orjson
from aiohttp import web

from draftgen.simulator import wire
from draftgen.simulator.exchange import ChatRequest, Host, Served, close_connection, seeded_rng

PIECE = 64 * 1024  # what an oversized or endless answer writes at a time
TICK = 0.25  # seconds between the writes of a slow-loris answer
# Where a redirect points: plain http to an address that is never routed (RFC 5737's
# TEST-NET-2), or this server under another host name, whose ``ELSEWHERE`` route answers (and
# counts, ``redirect_followed``) whatever follows the redirect.
UNROUTED = "http://198.51.100.7"
ELSEWHERE = "/elsewhere"
REDIRECTS = (301, 302, 307, 308)
# (usage field, value) of a bad-usage answer; a dot reaches into completion_tokens_details.
BAD_USAGE = (
    ("completion_tokens", 2**63),
    ("completion_tokens", -1),
    ("prompt_tokens", -5000),
    ("completion_tokens_details.reasoning_tokens", 2**63),
)
BAD_COST = ("missing", "string", "negative", "tiny")
_MARK = "\x00hostile content\x00"


class HostileAnswers:
    """The hostile answers of one simulator: the draw per request, and each kind's answer."""

    def __init__(self, host: Host) -> None:
        self.host = host

    def register(self, app: web.Application) -> None:
        app.router.add_route("*", ELSEWHERE + "/{tail:.*}", self.handle_elsewhere)

    def choose(self, req: ChatRequest) -> str | None:
        """The hostile answer this attempt gets (None: an ordinary one)."""
        config = self.host.config
        if not config.hostile or config.hostile_share <= 0:
            return None
        rng = seeded_rng(config.seed, req.prompt.sha256, req.attempt, "hostile")
        if rng.random() >= config.hostile_share:
            return None
        return rng.choice(config.hostile)

    async def answer(
        self, request: web.Request, req: ChatRequest, kind: str, head: dict, gid: str
    ) -> web.StreamResponse:
        stats = self.host.stats
        stats["hostile"] += 1
        stats[kind] += 1
        rng = seeded_rng(self.host.config.seed, req.prompt.sha256, req.attempt, "hostile answer")
        if kind == "redirect":
            return _redirect(request, rng)
        if kind == "keepalive":
            return await self._keepalive(request, req, gid)
        if kind in ("oversized", "endless"):
            return await self._flood(request, req, head, gid, rng, endless=kind == "endless")
        served = self.host.success(req, head, gid)
        if kind == "slowloris":
            return await self._trickle(request, req, served)
        if kind == "held":
            return await self._held(request, req, served, rng)
        usage, detail = _bad_numbers(kind, served.usage, rng)
        self.host.record(served, req, {"hostile": kind, "hostile_detail": detail})
        blob = self._answer_bytes(req, served, usage)
        response = _response(req, gid)
        await response.prepare(request)
        try:
            await self.host._send(response, [blob], rng)
        except ConnectionError:
            pass
        return response

    async def handle_elsewhere(self, request: web.Request) -> web.Response:
        """Another host's answer, for a client that followed a redirect here."""
        self.host.stats["redirect_followed"] += 1
        body = {
            "id": "gen-elsewhere",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": "an answer from another host"},
                }
            ],
            "usage": {"prompt_tokens": 1, "completion_tokens": 5, "cost": 0.0},
        }
        return web.json_response(body)

    # -- the kinds ----------------------------------------------------------------------------

    async def _flood(
        self,
        request: web.Request,
        req: ChatRequest,
        head: dict,
        gid: str,
        rng: random.Random,
        endless: bool,
    ) -> web.StreamResponse:
        """An answer whose content grows to ``hostile_bytes`` in one body or one event; endless,
        a stream of small deltas (or a body) that never ends."""
        response = _response(req, gid)
        usage = wire.usage(len(req.prompt.ids), 1, 0, (0.0, 0.0))
        if req.stream:
            chunk = wire.finish_chunk(head, None)
            chunk["choices"][0]["delta"] = {"content": _MARK}
            opening, closing = _split(b"data: " + orjson.dumps(chunk) + b"\n\n")
            finish = wire.finish_chunk(head, "stop")
            closing += wire.sse(finish) + wire.sse(wire.usage_chunk(head, usage)) + wire.DONE
            if endless:
                opening = wire.sse({**chunk, "choices": [_delta(chunk, "")]})
                more = {**chunk, "choices": [_delta(chunk, "and more ")]}
                fill = wire.sse(more) * (PIECE // len(wire.sse(more)))
                return await _write_forever(request, response, opening, fill)
        else:
            message = {"role": "assistant", "content": _MARK}
            body = {**head, "object": "chat.completion", "usage": usage}
            body["choices"] = [{"index": 0, "finish_reason": "stop", "message": message}]
            opening, closing = _split(orjson.dumps(body))
            if endless:
                return await _write_forever(request, response, opening, b"x" * PIECE)
            if rng.random() < 0.5:  # refused on its Content-Length, or only once read
                response.content_length = self.host.config.hostile_bytes
        fill = max(0, self.host.config.hostile_bytes - len(opening) - len(closing))
        await response.prepare(request)
        try:
            await response.write(opening)
            while fill > 0:
                if _gone(request):
                    return response
                piece = min(fill, PIECE)
                await response.write(b"x" * piece)
                fill -= piece
            await response.write(closing)
        except ConnectionError:
            pass
        return response

    async def _keepalive(
        self, request: web.Request, req: ChatRequest, gid: str
    ) -> web.StreamResponse:
        """Keep-alive comments (unstreamed: blank lines, which JSON allows before a value) every
        ``keepalive_seconds``, and never anything else."""
        response = _response(req, gid)
        await response.prepare(request)
        beat = wire.KEEPALIVE if req.stream else b"\n"
        try:
            while not _gone(request):
                await response.write(beat)
                await asyncio.sleep(self.host.config.keepalive_seconds)
        except ConnectionError:
            pass
        return response

    async def _trickle(
        self, request: web.Request, req: ChatRequest, served: Served
    ) -> web.StreamResponse:
        """A good answer at ``trickle_rate`` bytes a second; billed (recorded) only if the client
        waits for its last bytes."""
        blob = self._answer_bytes(req, served, served.usage)
        response = _response(req, served.generation_id)
        if not req.stream:
            response.content_length = len(blob)
        await response.prepare(request)
        rate, due, sent = self.host.config.trickle_rate, 0.0, 0
        try:
            while sent < len(blob):
                if _gone(request):
                    return response
                due += rate * TICK
                size = int(due)
                if size:
                    due -= size
                    if sent + size >= len(blob):  # the last bytes: billed as they go out
                        self.host.record(served, req, {"hostile": "slowloris"})
                    await response.write(blob[sent : sent + size])
                    sent += size
                if sent < len(blob):
                    await asyncio.sleep(TICK)
        except ConnectionError:
            pass
        return response

    async def _held(
        self, request: web.Request, req: ChatRequest, served: Served, rng: random.Random
    ) -> web.StreamResponse:
        """A whole answer, finish reason and usage included (billed: recorded as it goes out),
        then silence with the connection open: a stream without ``data: [DONE]``, a body without
        Content-Length (chunked, its last chunk never sent). After ``stall_seconds`` the
        connection is cut, never ended: a client that waits for the end gets none."""
        blob = self._answer_bytes(req, served, served.usage)
        if req.stream:
            blob = blob.removesuffix(wire.DONE)
        self.host.record(served, req, {"hostile": "held"})
        response = _response(req, served.generation_id)
        await response.prepare(request)
        try:
            await self.host._send(response, [blob], rng)
            await self.host._stall(request)
        except ConnectionError:
            pass
        close_connection(request)
        return response

    def _answer_bytes(self, req: ChatRequest, served: Served, usage: dict | None) -> bytes:
        """The bytes of a good answer to ``req`` (a body, or a stream's events) with ``usage``."""
        assert served.output is not None and served.delivery is not None
        if not req.stream:
            body = wire.completion_body(
                served.head, served.delivery, served.output.finish_reason, usage
            )
            self.host._add_ids(body, req, served)
            return orjson.dumps(body)
        head = served.head
        deltas = wire.delta_chunks(head, served.delivery, self.host.config.chunk_tokens)
        finish = wire.finish_chunk(head, served.output.finish_reason)
        if req.want_completion_ids:
            wire.attach_stream_ids([*deltas, finish], req.prompt.ids, served.output.ids)
        events = [wire.sse(chunk) for chunk in [*deltas, finish]]
        events.append(wire.sse(wire.usage_chunk(head, usage or {})))
        return b"".join([*events, wire.DONE])


def _bad_numbers(kind: str, usage: dict | None, rng: random.Random) -> tuple[dict, str]:
    """A copy of ``usage`` with the bad number of a bad-usage or bad-cost answer, and which."""
    bad = orjson.loads(orjson.dumps(usage or {}))
    if kind == "bad-usage":
        field, value = rng.choice(BAD_USAGE)
        where, _, name = field.rpartition(".")
        (bad[where] if where else bad)[name] = value
        return bad, f"{field}={value}"
    variant = rng.choice(BAD_COST)
    cost = bad.pop("cost", 0.0)
    bad.pop("cost_details", None)
    if variant == "string":
        bad["cost"] = str(cost)
    elif variant == "negative":
        bad["cost"] = -1000.0
    elif variant == "tiny":
        bad["cost"] = 1e-9
    return bad, f"cost {variant}"


def _redirect(request: web.Request, rng: random.Random) -> web.Response:
    status = rng.choice(REDIRECTS)
    if rng.random() < 0.5:
        location = UNROUTED + request.path
    else:
        location = f"http://localhost:{request.url.port}{ELSEWHERE}{request.path}"
    return web.Response(status=status, headers={"Location": location})


def _response(req: ChatRequest, gid: str) -> web.StreamResponse:
    kind = "text/event-stream" if req.stream else "application/json"
    return web.StreamResponse(status=200, headers={"Content-Type": kind, "X-Generation-Id": gid})


async def _write_forever(
    request: web.Request, response: web.StreamResponse, opening: bytes, fill: bytes
) -> web.StreamResponse:
    """``opening``, then ``fill`` again and again until the client leaves."""
    await response.prepare(request)
    try:
        await response.write(opening)
        while not _gone(request):
            await response.write(fill)
    except ConnectionError:
        pass
    return response


def _gone(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


def _split(raw: bytes) -> tuple[bytes, bytes]:
    """``raw`` before and after the content placeholder, whose quotes stay on either side."""
    mark = orjson.dumps(_MARK)[1:-1]
    before, found, after = raw.partition(mark)
    assert found, "the placeholder is in the answer"
    return before, after


def _delta(chunk: dict, content: str) -> dict:
    return {**chunk["choices"][0], "delta": {"content": content}}

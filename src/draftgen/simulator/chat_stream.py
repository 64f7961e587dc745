"""How the simulator writes a streamed chat answer: its SSE events, each fault in its shape, paced
or cut as the configuration says (the chat route's streams and SGLang's ``/generate`` alike).
"""

from __future__ import annotations

import asyncio
import random
import time

from aiohttp import web

from draftgen.simulator import wire
from draftgen.simulator.config import DELIVERING_FAULTS
from draftgen.simulator.exchange import ChatRequest, Served
from draftgen.simulator.exchange import close_connection as _close
from draftgen.simulator.exchange import seeded_rng as _rng


class ChatStreamWriter:
    """Mixed into ``Simulator`` through ``chat.ChatRoute``: a stream's events and their sending."""

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
            events.append(wire.sse({**head, "error": wire.upstream_error()}))
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
        upstream_error = wire.upstream_error()
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
            chunk["choices"][0]["delta"] = {"reasoning_details": [wire.huge_reasoning_detail()]}
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

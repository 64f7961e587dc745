"""A recording proxy in front of vLLM: the engine's own ids for every answer, by response id.

``text`` mode shows what a text-only provider sends (no ids, logprobs or sign of vLLM); usage as is.
"""

from __future__ import annotations

import asyncio
import json
import threading
import zlib
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

TEXT, PASSTHROUGH = "text", "passthrough"
_SESSION = web.AppKey("session", aiohttp.ClientSession)
# What a response carries only because it is vLLM (or because the proxy asked for ids).
_VLLM_TOP_FIELDS = (
    "prompt_token_ids",
    "prompt_logprobs",
    "prompt_text",
    "kv_transfer_params",
    "ec_transfer_params",
    "system_fingerprint",
    "service_tier",
    "metrics",
)
_VLLM_CHOICE_FIELDS = ("token_ids", "stop_reason", "routed_experts")


@dataclass
class EngineAnswer:
    """One answer as the engine produced it: the truth an exported row is compared with."""

    response_id: str
    request: dict[str, Any]  # the body the client sent, before the proxy changed anything
    prompt_ids: list[int] = field(default_factory=list)
    completion_ids: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    stream: bool = False
    mode: str = TEXT

    def as_dict(self) -> dict[str, Any]:
        return {
            "response_id": self.response_id,
            "request": self.request,
            "prompt_ids": self.prompt_ids,
            "completion_ids": self.completion_ids,
            "finish_reason": self.finish_reason,
            "stream": self.stream,
            "mode": self.mode,
        }


class Recorder:
    """The answers of every proxy in front of one engine, by response id (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._answers: dict[str, EngineAnswer] = {}

    def add(self, answer: EngineAnswer) -> None:
        with self._lock:
            self._answers[answer.response_id] = answer
            self._lock.notify_all()

    def get(self, response_id: str, wait: float = 10.0) -> EngineAnswer | None:
        """The engine's answer ``response_id``; a stream is recorded once the proxy has sent its
        last event, which its reader may have before then: waited for up to ``wait`` seconds."""
        with self._lock:
            self._lock.wait_for(lambda: response_id in self._answers, timeout=wait)
            return self._answers.get(response_id)

    def all(self) -> list[EngineAnswer]:
        with self._lock:
            return list(self._answers.values())


def proxy_app(upstream: str, mode: str, recorder: Recorder) -> web.Application:
    """An aiohttp app forwarding to ``upstream`` (the engine's root, ``http://host:port``)."""
    if mode not in (TEXT, PASSTHROUGH):
        raise ValueError(f"proxy mode must be {TEXT!r} or {PASSTHROUGH!r}, not {mode!r}")
    app = web.Application(client_max_size=64 * 1024 * 1024)

    async def start_session(app: web.Application) -> None:
        app[_SESSION] = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None))

    async def close_session(app: web.Application) -> None:
        await app[_SESSION].close()

    app.on_startup.append(start_session)
    app.on_cleanup.append(close_session)

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        asked_ids = bool(body.get("return_token_ids")) and mode == PASSTHROUGH
        sent = {**body, "return_token_ids": True, "seed": prompt_seed(body)}
        if mode == TEXT:
            _as_openrouter_sends(sent)
        session: aiohttp.ClientSession = request.app[_SESSION]
        async with session.post(upstream + request.path, json=sent, headers=_auth(request)) as up:
            if up.status != 200 or not body.get("stream"):
                return await _whole(request, up, body, mode, asked_ids, recorder)
            return await _streamed(request, up, body, mode, asked_ids, recorder)

    async def models(request: web.Request) -> web.Response:
        session: aiohttp.ClientSession = request.app[_SESSION]
        async with session.get(upstream + request.path, headers=_auth(request)) as up:
            payload = await up.read()
            if up.status != 200 or mode == PASSTHROUGH:
                return web.Response(body=payload, status=up.status, content_type="application/json")
            listing = json.loads(payload)
            for model in listing.get("data", []):
                # A text-only provider's listing: not vLLM's (owned_by, its path, its limits).
                model["owned_by"] = "draftgen-proxy"
                for name in ("root", "parent", "permission", "max_model_len"):
                    model.pop(name, None)
            return web.json_response(listing)

    async def other(request: web.Request) -> web.StreamResponse:
        if mode == TEXT:  # vLLM's own routes (/tokenize, /version, render) are not a provider's
            return web.json_response(
                {"error": {"code": 404, "message": f"no route {request.path}"}}, status=404
            )
        session: aiohttp.ClientSession = request.app[_SESSION]
        data = await request.read()
        async with session.request(
            request.method, upstream + request.path_qs, data=data, headers=_auth(request)
        ) as up:
            payload = await up.read()
            return web.Response(
                body=payload, status=up.status, content_type=up.content_type or "application/json"
            )

    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/v1/models", models)
    app.router.add_route("*", "/{tail:.*}", other)
    return app


def _as_openrouter_sends(body: dict) -> None:
    """OpenRouter turns its ``reasoning`` field into the provider's own switch; for a vLLM
    provider of a Qwen3 model that is the template's ``enable_thinking``."""
    reasoning = body.pop("reasoning", None)
    if isinstance(reasoning, dict) and (
        reasoning.get("effort") == "none" or reasoning.get("enabled") is False
    ):
        kwargs = dict(body.get("chat_template_kwargs") or {})
        kwargs.setdefault("enable_thinking", False)
        body["chat_template_kwargs"] = kwargs


def prompt_seed(body: dict) -> int:
    """The seed the engine is sent: the client's, mixed with the conversation's. The tiny model's
    next token depends on the last token alone, so one seed for every request (draftgen's
    ``--seed``) would draw the same answer for every prompt; this keeps each prompt's answer
    reproducible and different from the others'."""
    key = json.dumps(
        [body.get("seed"), body.get("messages"), body.get("chat_template_kwargs")],
        sort_keys=True,
        ensure_ascii=False,
    )
    return zlib.crc32(key.encode()) & 0x7FFFFFFF


def _auth(request: web.Request) -> dict[str, str]:
    value = request.headers.get("Authorization")
    return {"Authorization": value} if value else {}


async def _whole(request, up, body, mode, asked_ids, recorder) -> web.Response:
    payload = await up.read()
    if up.status != 200:
        return web.Response(body=payload, status=up.status, content_type="application/json")
    answer = json.loads(payload)
    choice = (answer.get("choices") or [{}])[0]
    recorder.add(
        EngineAnswer(
            response_id=answer.get("id", ""),
            request=body,
            prompt_ids=list(answer.get("prompt_token_ids") or []),
            completion_ids=list(choice.get("token_ids") or []),
            finish_reason=choice.get("finish_reason"),
            stream=False,
            mode=mode,
        )
    )
    _strip(answer, mode, asked_ids, body)
    return web.json_response(answer)


async def _streamed(request, up, body, mode, asked_ids, recorder) -> web.StreamResponse:
    out = web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream"})
    await out.prepare(request)
    answer = EngineAnswer(response_id="", request=body, stream=True, mode=mode)
    buffer = b""
    try:
        async for piece in up.content.iter_any():
            buffer += piece
            while b"\n\n" in buffer:
                event, buffer = buffer.split(b"\n\n", 1)
                forwarded = _stream_event(event, answer, mode, asked_ids, body)
                if forwarded is not None:
                    await out.write(forwarded + b"\n\n")
        await out.write_eof()
    except ConnectionResetError:
        pass  # the client stops reading at [DONE] and may close first; the answer is whole
    finally:
        if answer.response_id:
            recorder.add(answer)
    return out


def _stream_event(event: bytes, answer: EngineAnswer, mode, asked_ids, body) -> bytes | None:
    """The event as the client gets it (None: dropped), the engine's ids taken into ``answer``."""
    line = event.strip()
    if not line.startswith(b"data:"):
        return event
    data = line[5:].strip()
    if data == b"[DONE]":
        return event
    chunk = json.loads(data)
    answer.response_id = answer.response_id or chunk.get("id", "")
    if chunk.get("prompt_token_ids"):
        answer.prompt_ids = list(chunk["prompt_token_ids"])
    for choice in chunk.get("choices") or []:
        answer.completion_ids += list(choice.get("token_ids") or [])
        answer.finish_reason = choice.get("finish_reason") or answer.finish_reason
    if mode == TEXT and _only_ids(chunk):
        return None  # sent only because ids were asked for (a token without text)
    _strip(chunk, mode, asked_ids, body)
    return b"data: " + json.dumps(chunk, ensure_ascii=False).encode()


def _only_ids(chunk: dict) -> bool:
    if chunk.get("usage") or not chunk.get("choices"):
        return False
    for choice in chunk["choices"]:
        delta = choice.get("delta") or {}
        if choice.get("finish_reason") or delta.get("role"):
            return False
        if any(delta.get(name) for name in ("content", "reasoning", "tool_calls")):
            return False
    return True


def _strip(answer: dict, mode: str, asked_ids: bool, body: dict) -> None:
    """Remove what the client would not get: in text mode all of vLLM's own fields and logprobs;
    in passthrough mode only the ids the proxy asked for and the client did not."""
    if mode == PASSTHROUGH:
        if not asked_ids:
            answer.pop("prompt_token_ids", None)
            for choice in answer.get("choices") or []:
                choice.pop("token_ids", None)
        return
    for name in _VLLM_TOP_FIELDS:
        answer.pop(name, None)
    for choice in answer.get("choices") or []:
        for name in _VLLM_CHOICE_FIELDS:
            choice.pop(name, None)
        choice["logprobs"] = None


class ProxyThread:
    """``proxy_app`` served on loopback from a thread of its own (its own event loop)."""

    def __init__(self, upstream: str, mode: str, recorder: Recorder, port: int) -> None:
        self.port = port
        self.base_url = f"http://127.0.0.1:{port}/v1"
        self._app = proxy_app(upstream, mode, recorder)
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, name=f"proxy-{mode}", daemon=True)
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError(f"the {mode} proxy did not start on port {port}")

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._runner = web.AppRunner(self._app, access_log=None)
        self._loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", self.port)
        self._loop.run_until_complete(site.start())
        self._ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(self._runner.cleanup())
        self._loop.close()

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)

"""What every route of the simulator shares: a request as it was read, its rendered prompt, the
seeded randomness that makes a run repeatable, cutting a connection short, and ``Host``: what the
batch and ``/generate`` routes use of the simulator they are mounted on.

``Host`` is why those routes need not import ``simulation`` (which mounts them): the simulator
depends on its routes, never the reverse.
"""

from __future__ import annotations

import collections
import hashlib
import random
from dataclasses import dataclass, field
from typing import Any, Protocol

from aiohttp import web

from draftgen.profiles import ModelProfile
from draftgen.simulator import wire
from draftgen.simulator.config import SimConfig
from draftgen.simulator.model import ModelOutput, TokenTable


class RequestProblem(ValueError):
    """A chat request body the provider refuses (HTTP 400); the message says why."""


@dataclass
class RenderedPrompt:
    text: str
    ids: list[int]
    sha256: str
    layout: str


@dataclass
class ChatRequest:
    model: str
    prompt: RenderedPrompt
    stream: bool
    max_tokens: int | None
    exclude_reasoning: bool
    provider_prefs: dict
    attempt: int
    number: int  # 1-based count of valid chat requests, for fatal_after
    quirks: set[str] = field(default_factory=set)  # drawn for this attempt
    provider: str = ""
    tool_call: dict | None = None  # the call the model makes ({"id", "name", "arguments"})
    # Ids the client asked for (vLLM return_token_ids; SGLang return_prompt_token_ids and
    # return_meta_info); honoured only by the dialect that knows the flag.
    want_prompt_ids: bool = False
    want_completion_ids: bool = False
    want_logprobs: bool = False
    # vLLM's ``return_tokens_as_token_ids``: every generated token's logprob spelled
    # ``token_id:N`` (the vllm dialect only).
    want_token_id_logprobs: bool = False
    # Whether a stream ends with its usage chunk: always on OpenRouter, on vLLM only with
    # ``stream_options.include_usage``.
    want_stream_usage: bool = True
    # The prompt as the published chat template renders it, where the engine renders otherwise
    # and the template_renderer quirk is on (None: the same, or not asked).
    template_prompt: RenderedPrompt | None = None
    # The prompt as another template revision renders it (quirk template_revision; None: the
    # same, or not asked), and the quirk whose prompt the serving provider used, if any.
    revision_prompt: RenderedPrompt | None = None
    prompt_quirk: str | None = None


def seeded_rng(*parts: object) -> random.Random:
    """A random source drawn from ``parts``: the same prompt and attempt, the same draw."""
    digest = hashlib.blake2b(repr(parts).encode("utf-8"), digest_size=8).digest()
    return random.Random(int.from_bytes(digest, "big"))


def close_connection(request: web.Request) -> None:
    """Cut the connection without finishing the body (buffered bytes are flushed first)."""
    transport = request.transport
    if transport is not None:
        transport.close()


@dataclass
class Served:
    """One response in preparation: its ids, head fields and (for successes) ground truth."""

    generation_id: str
    head: dict
    output: ModelOutput | None = None
    delivery: wire.Delivery | None = None
    usage: dict | None = None


class Host(Protocol):
    """What a route mounted on the simulator (``Simulator.app``) uses of it: its settings,
    model and counters, its decisions (faults, quirks), and its ground-truth record."""

    config: SimConfig
    tokenizer: Any
    profile: ModelProfile
    table: TokenTable
    stats: collections.Counter
    attempts: collections.Counter
    models_seen: dict[str, None]
    providers: tuple[str, ...]
    _valid_requests: int

    def chat_request(self, body: Any) -> ChatRequest: ...

    def choose_fault(self, req: ChatRequest) -> str | None: ...

    def draw_quirks(self, req: ChatRequest) -> set[str]: ...

    def serve_with(self, req: ChatRequest, provider: str) -> None: ...

    def success(self, req: ChatRequest, head: dict, generation_id: str) -> Served: ...

    def partial(self, req: ChatRequest, head: dict, generation_id: str) -> Served: ...

    def record(self, served: Served, req: ChatRequest, extra: dict | None = None) -> dict: ...

    def _parse(self, body: Any) -> tuple[dict, str | None]: ...

    def _authorized(self, request: web.Request) -> bool: ...

    def _unauthorized(self) -> web.Response: ...

    def _status_fault(self, fault: str | None) -> web.Response | None: ...

    def _add_ids(self, body: dict, req: ChatRequest, served: Served) -> None: ...

    async def _send(
        self, resp: web.StreamResponse, events: list[bytes], rng: random.Random
    ) -> None: ...

    async def _stall(self, request: web.Request) -> None: ...

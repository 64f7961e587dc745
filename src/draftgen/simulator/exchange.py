"""What every route of the simulator shares: a request as it was read, its rendered prompt, the
seeded randomness that makes a run repeatable, and cutting a connection short."""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field

from aiohttp import web


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
    # The prompt as the published chat template renders it, where the engine renders otherwise
    # and the template_renderer quirk is on (None: the same, or not asked).
    template_prompt: RenderedPrompt | None = None


def seeded_rng(*parts: object) -> random.Random:
    """A random source drawn from ``parts``: the same prompt and attempt, the same draw."""
    digest = hashlib.blake2b(repr(parts).encode("utf-8"), digest_size=8).digest()
    return random.Random(int.from_bytes(digest, "big"))


def close_connection(request: web.Request) -> None:
    """Cut the connection without finishing the body (buffered bytes are flushed first)."""
    transport = request.transport
    if transport is not None:
        transport.close()

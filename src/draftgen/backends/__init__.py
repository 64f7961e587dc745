"""Backends: the wire formats draftgen speaks, one module each, chosen by ``--backend``.

A backend builds the request body and turns response bytes (or SSE lines) into a ``Completion``;
``get_backend(name)`` is the registry. Adding one is adding a module and an entry in ``BACKENDS``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from draftgen.errors import DraftgenError
from draftgen.records import Completion


class Accumulator(Protocol):
    done: bool

    def feed_bytes(self, data: bytes) -> None: ...

    def feed_line(self, line: bytes) -> None: ...

    def finish(self) -> Completion: ...


@dataclass(frozen=True)
class Backend:
    name: str
    # What the ids of this backend's completions are: "server" (exact, from the server) or "text".
    id_source: str
    # Whether this backend can stream and still return what it promises (SGLang: ids only
    # without streaming); a run asked to stream falls back to whole responses if not.
    can_stream: bool
    # (settings, messages, tools, stream, logprobs[, prompt=]) -> body
    request_body: Callable[..., dict]
    parse_completion: Callable[[bytes], Completion]
    stream_accumulator: Callable[[], Accumulator]
    path: str = "/chat/completions"
    # Self-hosted servers are often run without a key.
    needs_api_key: bool = True
    # Whether request_body takes the rendered prompt (``prompt=TokenPrompt``, keyword) instead
    # of the server rendering ``messages``; the pipeline then also fills in the completion's
    # prompt ids and reasoning split (``draftgen.generate.native_turn``), keeping tokenizers out
    # of here.
    needs_prompt_ids: bool = False
    # The server family that speaks this format: the simulator dialect that answers it.
    server: str = ""

    @property
    def dialect(self) -> str:
        return self.server or self.name


class UnknownBackendError(DraftgenError, ValueError):
    pass


def _openrouter() -> Backend:
    from draftgen.backends import openrouter

    return Backend(
        name="openrouter",
        id_source="text",
        can_stream=True,
        request_body=openrouter.request_body,
        parse_completion=openrouter.parse_completion,
        stream_accumulator=openrouter.StreamAccumulator,
    )


def _vllm() -> Backend:
    from draftgen.backends import vllm

    return vllm.BACKEND


def _sglang() -> Backend:
    from draftgen.backends import sglang

    return sglang.BACKEND


def _sglang_generate() -> Backend:
    from draftgen.backends import sglang_generate

    return sglang_generate.BACKEND


BACKENDS: dict[str, Callable[[], Backend]] = {
    "openrouter": _openrouter,
    "vllm": _vllm,
    "sglang": _sglang,
    "sglang-generate": _sglang_generate,
}
BACKEND_NAMES: tuple[str, ...] = tuple(BACKENDS)


def get_backend(name: str) -> Backend:
    try:
        factory = BACKENDS[name]
    except KeyError:
        raise UnknownBackendError(
            f"unknown backend {name!r}: use one of {', '.join(BACKEND_NAMES)}"
        ) from None
    return factory()

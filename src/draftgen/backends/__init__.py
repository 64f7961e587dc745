"""Backends: the wire formats draftgen speaks, one module each, chosen by ``--backend``.

A backend checks a run's settings and says which request fields it sends (``settings``), builds
the request body and turns response bytes (or SSE lines) into a ``Completion``; it may own a table
of draftgen.toml (``config_table``). The OpenAI-compatible code they share is ``base``;
``get_backend(name)`` is the registry. Adding one is adding a module and an entry in ``BACKENDS``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from draftgen.errors import DraftgenError
from draftgen.records import Completion


class SettingsError(DraftgenError, ValueError):
    """Run settings a backend cannot send; the message says what to drop or use instead."""


class RunSettings(Protocol):
    """What a backend's ``settings`` hook reads of a run's options (``RunOptions`` has them)."""

    reasoning_effort: str | None
    reasoning_max_tokens: int | None
    provider: dict | None
    chat_template_kwargs: dict | None


@dataclass(frozen=True)
class ConfigTable:
    """A table of draftgen.toml that belongs to a backend (``[openrouter]``).

    The config loader checks the table's shape and keys; ``read`` turns the table into run
    options by name, raising ``SettingsError`` (a sentence naming the key) if a value is wrong.
    """

    name: str
    keys: tuple[str, ...]
    shape: str  # what the table must be, as the message says it: "[openrouter.provider]"
    read: Callable[[dict], dict]
    options: tuple[str, ...]  # the run options ``read`` sets (None when a file has no table)


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
    # (options: RunSettings) -> the request fields of ``GenerationSettings`` this backend sends
    # (reasoning, provider, chat_template_kwargs), checked: SettingsError says what to drop.
    settings: Callable[[RunSettings], dict]
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
    # Its own table of draftgen.toml, if it has one.
    config_table: ConfigTable | None = None
    # Whether the API behind it has batch endpoints (``run --batch``).
    batch_api: bool = False

    @property
    def dialect(self) -> str:
        return self.server or self.name


class UnknownBackendError(DraftgenError, ValueError):
    pass


def _openrouter() -> Backend:
    from draftgen.backends import openrouter

    return openrouter.BACKEND


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


def config_tables() -> dict[str, ConfigTable]:
    """The draftgen.toml tables the backends own, by name, in registry order."""
    tables = (get_backend(name).config_table for name in BACKEND_NAMES)
    return {table.name: table for table in tables if table is not None}

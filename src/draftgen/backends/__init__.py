"""Backends: the wire formats draftgen speaks, one module each, chosen by ``--backend``.

A backend checks a run's settings and says which request fields it sends (``settings``), builds
the request body and turns response bytes (or SSE lines) into a ``Completion``; it may own a table
of draftgen.toml (``config_table``). The OpenAI-compatible code they share is ``base``.

The registry is ``BACKENDS`` (``get_backend(name)``, ``BACKEND_NAMES``): each module's ``BACKEND``
declares everything about its backend in one place, and the layers above read it by key, never
the reverse (this package imports nothing above it):

- the server family it speaks to (``server``): the simulator dialect that answers it
  (``draftgen.simulator.config.DIALECTS`` is ``server_families()``);
- the checks the probe runs before the first request (``probe``: a key of
  ``draftgen.run.probe.PROBE_CHECKS``);
- the batch dialects its API offers (``batch_dialects``: keys of
  ``draftgen.generate.batch.dialects.DIALECTS``);
- its line of ``--backend`` help (``help``).

Adding a backend is adding a module and an entry in ``BACKENDS``; a test checks that every key it
names is one the layers above know.
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
    # What the ids of this backend's completions are: "ids" (exact, from the server) or "text"
    # (rebuilt; the default backend takes the server's ids or logprobs where the probe finds
    # them offered: ``draftgen.generate.proof``).
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
    # Whether request_body takes the rendered prompt (``prompt=base.TokenPrompt``, keyword)
    # instead of the server rendering ``messages``; the pipeline then also fills in the
    # completion's prompt ids and reasoning split (``draftgen.generate.native_turn``), keeping
    # tokenizers out of here.
    needs_prompt_ids: bool = False
    # The server family that speaks this format: the simulator dialect that answers it.
    server: str = ""
    # What the probe asks before the first request (``draftgen.run.probe.PROBE_CHECKS``):
    # "openrouter" (the key, then the model's endpoints), "listed-models" (the server answers
    # only the model names it lists) or "reachable" (its listing answers and takes the key).
    probe: str = "reachable"
    # Its own table of draftgen.toml, if it has one.
    config_table: ConfigTable | None = None
    # The batch APIs behind it (``run --batch --batch-dialect``); none: no batch mode.
    batch_dialects: tuple[str, ...] = ()
    # What ``--backend NAME`` means, for the help: a phrase.
    help: str = ""
    # (the run's routing preferences, providers to leave out) -> the preferences sent instead:
    # how a run stops sending to a provider it caught serving something else. None: the API
    # behind it routes to no providers (a self-hosted server), so none is ever left out.
    route_around: Callable[[dict | None, list[str]], dict] | None = None
    # (the run's routing preferences, a provider's route) -> preferences that send to it alone
    # with no fallback, and (preferences, a provider's names) -> whether they may send to it:
    # how calibration asks each provider its questions. None: one server, asked unrouted.
    pin_provider: Callable[[dict | None, str], dict] | None = None
    routes_to: Callable[[dict | None, set[str]], bool] | None = None

    @property
    def dialect(self) -> str:
        return self.server or self.name

    @property
    def batch_api(self) -> bool:
        """Whether the API behind it has batch endpoints (``run --batch``)."""
        return bool(self.batch_dialects)


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


def all_backends() -> tuple[Backend, ...]:
    """Every backend, in registry order."""
    return tuple(get_backend(name) for name in BACKEND_NAMES)


def config_tables() -> dict[str, ConfigTable]:
    """The draftgen.toml tables the backends own, by name, in registry order."""
    tables = (backend.config_table for backend in all_backends())
    return {table.name: table for table in tables if table is not None}


def server_families() -> tuple[str, ...]:
    """The server families the backends speak to, in registry order: the simulator's dialects."""
    return tuple(dict.fromkeys(backend.dialect for backend in all_backends()))


def probe_of(server: str) -> str:
    """The probe checks of the backends speaking to ``server`` ("reachable" for a family no
    backend names); the backends of one family agree on them (a test checks)."""
    for backend in all_backends():
        if backend.dialect == server:
            return backend.probe
    return "reachable"


def backend_help() -> str:
    """``--backend``'s help: what each name means, from each backend's own phrase."""
    return "wire format: " + "; ".join(f"{b.name}: {b.help}" for b in all_backends())

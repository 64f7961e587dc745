"""draftgen.toml: every run setting as a key of a file, read and checked by its declaration.

The keys are the settings of ``draftgen.options`` (``--max-tokens`` is ``max_tokens``), so a new
setting is a new key with the same type, choices and checks; only the tables (``[[datasets]]``,
``[backend]``, ``[batch]``, ``[chat_template_kwargs]``) are described here. A command's own
settings sit in its table (``[estimate]``); a backend's own table (``[openrouter]``) is the
backend's to read (``draftgen.backends.ConfigTable``).
"""

from __future__ import annotations

import argparse
import difflib
import sys
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from draftgen.errors import DraftgenError
from draftgen.options import (
    META_KEYS,
    DatasetSpec,
    EndpointSpec,
    EstimateOptions,
    OptionError,
    RunOptions,
    Setting,
    SettingsError,
    config_tables,
    every_setting,
    kind_of,
    simulator_settings,
    toml_value,
)

CONFIG_NAME = "draftgen.toml"
DATASET_KEYS: dict[str, tuple[type | tuple[type, ...], str]] = {
    "path": (str, "a file path"),
    "name": (str, "a name (the rows' ids become NAME/ID)"),
    "limit": (int, "a positive integer"),
    "shuffle": (bool, "true or false"),
    "seed": (int, "an integer"),
    "weight": ((int, float), "a number above 0"),
    "format": (str, "an input format name"),
}


class ConfigError(DraftgenError, ValueError):
    """A config file that cannot be used; the message names the file, the key and the fix."""


def top_level(settings: Iterable[Setting] | None = None) -> dict[str, Setting]:
    """The settings that are top-level keys of the file, by key."""
    settings = every_setting() if settings is None else settings
    return {s.key: s for s in settings if s.toml and s.table is None and s.key not in META_KEYS}


def table_keys(name: str, settings: Iterable[Setting] | None = None) -> dict[str, Setting]:
    """The settings of a command's table (``[estimate]``), by key."""
    settings = every_setting() if settings is None else settings
    return {s.key: s for s in settings if s.toml and s.table == name}


def command_tables(settings: Iterable[Setting] | None = None) -> set[str]:
    settings = every_setting() if settings is None else settings
    return {s.table for s in settings if s.toml and s.table}


def find_config(args: argparse.Namespace) -> Path | None:
    """``--config FILE``, else ``./draftgen.toml`` if there is one (unless ``--no-config``)."""
    given = getattr(args, "config", None)
    if given is not None:
        path = Path(given)
        if not path.is_file():
            raise ConfigError(f"--config {path} does not exist; run draftgen init to write one")
        return path
    if getattr(args, "no_config", False):
        return None
    local = Path(CONFIG_NAME)
    return local if local.is_file() else None


def resolve(
    args: argparse.Namespace, command: str = "run"
) -> tuple[argparse.Namespace, Path | None]:
    """Defaults, then the config file, then the flags given: the namespace ``command`` runs with.

    Everything in the file is checked, whichever command reads it; keys the command has no
    setting for (another command's table) are then left out. Returns the namespace and the file
    read (None if none).
    """
    path = find_config(args)
    values: dict[str, Any] = {
        s.key: s.default
        for s in every_setting()
        if command in s.commands and s.key not in META_KEYS
    }
    if path is not None:
        from_file = load_config(path)
        if "input" in vars(args):
            from_file.pop("datasets", None)  # --input replaces the file's datasets too
        if "base_url" in vars(args):
            from_file.pop("endpoints", None)  # and --base-url the file's endpoints
        for key, value in from_file.items():
            table, _, own = key.rpartition(".")
            if table in ("", command) and own in values:
                values[own] = value
    values.update(
        {k: v for k, v in vars(args).items() if k not in ("config", "no_config", "command")}
    )
    return argparse.Namespace(**values), path


def resolved(args: argparse.Namespace, command: str) -> argparse.Namespace:
    """``args`` with the config file and the defaults under them; required settings checked."""
    merged, path = resolve(args, command)
    if path is not None:
        print(f"draftgen: settings from {path}", file=sys.stderr)
    where = f"in {path}" if path is not None else "in draftgen.toml (draftgen init writes one)"
    for declared in every_setting():
        if command in declared.required and getattr(merged, declared.key) is None:
            dest = declared.key
            raise ConfigError(f"no --{dest} given: pass it, or set {dest} = ... {where}")
    if not merged.input and not merged.datasets:
        raise ConfigError(
            f"no prompts given: pass --input FILE, or set input = [...] or [[datasets]] {where}"
        )
    return merged


def options_from(args: argparse.Namespace, command: str) -> RunOptions:
    """The options ``command`` (run, estimate) runs with, from its resolved namespace, checked
    as the library checks them (``RunOptions.check``)."""
    cls = EstimateOptions if command == "estimate" else RunOptions
    options = cls.from_keys(vars(args))
    try:
        options.check(command)
    except OptionError as exc:
        raise ConfigError(str(exc)) from None
    return options


def load_config(path: Path) -> dict[str, Any]:
    """The file's settings, converted and checked as their flags are; ConfigError if any is
    wrong.

    Top-level keys come back by name, ``[[datasets]]`` as ``datasets`` (DatasetSpec list), a
    backend's table as the options it sets (``[openrouter.provider]`` as ``provider``),
    ``[[backend.endpoints]]`` as ``endpoints`` (EndpointSpec list) and a command table's keys
    as ``TABLE.KEY``.
    """
    try:
        with open(path, "rb") as handle:
            document = tomllib.load(handle)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML ({exc}); fix the syntax there") from None
    base = path.parent
    keys = top_level()
    old_keys = {s.old_key: s.key for s in keys.values() if s.old_key}
    owned = config_tables()
    values: dict[str, Any] = {}
    for key, value in document.items():
        if key == "datasets" or key in owned or key == SIMULATOR_TABLE:
            continue
        if key == "simulate" and isinstance(value, dict):
            raise ConfigError(MISNAMED_SIMULATOR_TABLE.format(path=path))
        if key in command_tables():
            values.update(_command_table(path, key, value))
            continue
        if key == "backend" and isinstance(value, dict):
            values.update(_backend_table(path, value, keys["backend"], base))
            continue
        if key == "batch" and isinstance(value, dict):
            values.update(_batch_table(path, value, keys, base))
            continue
        if key == "chat_template_kwargs":
            if not isinstance(value, dict):
                raise ConfigError(
                    f"{path}: chat_template_kwargs must be a table of template variables, e.g. "
                    f"chat_template_kwargs = {{ enable_thinking = false }}, not {kind_of(value)}"
                )
            values[key] = dict(value)
            continue
        key = old_keys.get(key, key)
        declared = keys.get(key)
        if declared is None:
            raise ConfigError(_unknown(path, key, [*keys, "datasets", *owned]))
        values[key] = _convert(path, key, declared, value, base)
    if "datasets" in document:
        if "input" in document:
            raise ConfigError(
                f"{path}: input and [[datasets]] both list the prompts; keep one of them"
            )
        values["datasets"] = _datasets(path, document["datasets"], base)
    for name, table in owned.items():
        if name in document:
            values.update(_owned_table(path, table, document[name]))
    if "endpoints" in values and "base_url" in values:
        raise ConfigError(
            f"{path}: base_url and [[backend.endpoints]] both name endpoints; keep one of them"
        )
    return values


# draftgen simulate's table: its keys are the simulator's own settings (SimConfig's fields).
SIMULATOR_TABLE = "simulator"
# What the table was called in places (docs and docstrings said [simulate]): refused by name, so
# a file written after them never loses its settings unseen. ``simulate = true`` is the run's.
MISNAMED_SIMULATOR_TABLE = (
    "{path}: [simulate] is no table of draftgen.toml: the simulator's settings go in a "
    "[simulator] table (simulate = true is the run's switch); rename the table"
)


def load_simulator_table(path: Path) -> dict[str, Any]:
    """``[simulator]`` of the file: the settings ``draftgen simulate`` takes, by field name,
    converted as the run's keys are (their declarations are ``SimConfig``'s)."""
    try:
        with open(path, "rb") as handle:
            document = tomllib.load(handle)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML ({exc}); fix the syntax there") from None
    if isinstance(document.get("simulate"), dict):
        raise ConfigError(MISNAMED_SIMULATOR_TABLE.format(path=path))
    section = document.get(SIMULATOR_TABLE, {})
    if not isinstance(section, dict):
        raise ConfigError(
            f"{path}: simulator must be a table ([simulator]), not {kind_of(section)}"
        )
    declared = {s.key: s for s in simulator_settings()}
    values = {}
    for key, value in section.items():
        if key not in declared:
            raise ConfigError(
                _unknown(path, f"simulator.{key}", [f"simulator.{k}" for k in declared])
            )
        values[key] = _convert(path, f"simulator.{key}", declared[key], value, path.parent)
    return values


def _command_table(path: Path, name: str, section: object) -> dict[str, Any]:
    if not isinstance(section, dict):
        raise ConfigError(f"{path}: {name} must be a table ([{name}]), not {kind_of(section)}")
    own = table_keys(name)
    out = {}
    for key, value in section.items():
        declared = own.get(key)
        if declared is None:
            raise ConfigError(_unknown(path, f"{name}.{key}", [f"{name}.{k}" for k in own]))
        out[f"{name}.{key}"] = _convert(path, f"{name}.{key}", declared, value, path.parent)
    return out


def _convert(path: Path, key: str, declared: Setting, value: Any, base: Path) -> Any:
    """A key's value as its setting's (``toml_value``: the flag's conversion and checks), a
    relative path placed beside the file, wherever draftgen is started."""
    try:
        converted = toml_value(declared, key, value)
    except OptionError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    if declared.kind is not Path:
        return converted
    if declared.many:
        return [_beside(base, item) for item in converted]
    return _beside(base, converted)


def _beside(base: Path, converted: Any) -> Any:
    if converted is None or Path(str(converted)).is_absolute():
        return converted
    joined = base / str(converted)
    return joined if isinstance(converted, Path) else str(joined)


def _datasets(path: Path, value: object, base: Path) -> list[DatasetSpec]:
    if not isinstance(value, list) or not value:
        raise ConfigError(f"{path}: datasets must be [[datasets]] tables, each with a path")
    specs = []
    for index, table in enumerate(value):
        where = f"datasets[{index}]"
        if not isinstance(table, dict):
            raise ConfigError(f"{path}: {where} must be a [[datasets]] table")
        fields: dict[str, Any] = {}
        for key, item in table.items():
            if key not in DATASET_KEYS:
                raise ConfigError(_unknown(path, f"{where}.{key}", list(DATASET_KEYS)))
            types, expected = DATASET_KEYS[key]
            if not isinstance(item, types) or (isinstance(item, bool) and types is not bool):
                raise ConfigError(f"{path}: {where}.{key} must be {expected}, not {kind_of(item)}")
            fields[key] = item
        if "path" not in fields:
            raise ConfigError(f'{path}: {where} has no path; add path = "prompts.jsonl"')
        if not Path(fields["path"]).is_absolute():
            fields["path"] = str(base / fields["path"])
        if "weight" in fields:
            fields["weight"] = float(fields["weight"])
        specs.append(DatasetSpec(**fields))
    return specs


def _backend_table(path: Path, table: dict, backend: Setting, base: Path) -> dict[str, Any]:
    """``[backend]`` as a table: ``name`` (what a plain ``backend`` key holds) and
    ``[[backend.endpoints]]``."""
    values: dict[str, Any] = {}
    for key, value in table.items():
        if key == "name":
            values["backend"] = _convert(path, "backend.name", backend, value, base)
        elif key != "endpoints":
            raise ConfigError(
                _unknown(path, f"backend.{key}", ["backend.name", "backend.endpoints"])
            )
    listed = table.get("endpoints")
    if listed is None:
        return values
    if not isinstance(listed, list) or not listed:
        raise ConfigError(
            f"{path}: backend.endpoints must be [[backend.endpoints]] tables, each with a url"
        )
    specs = []
    for index, entry in enumerate(listed):
        where = f"backend.endpoints[{index}]"
        if not isinstance(entry, dict):
            raise ConfigError(f"{path}: {where} must be a [[backend.endpoints]] table")
        for key in entry:
            if key not in ("url", "concurrency"):
                raise ConfigError(_unknown(path, f"{where}.{key}", ["url", "concurrency"]))
        url = entry.get("url")
        if not isinstance(url, str) or not url:
            raise ConfigError(f'{path}: {where} has no url; add url = "http://host:30000/v1"')
        concurrency = entry.get("concurrency")
        if concurrency is not None and (
            not isinstance(concurrency, int) or isinstance(concurrency, bool) or concurrency < 1
        ):
            raise ConfigError(f"{path}: {where}.concurrency must be a positive integer")
        specs.append(EndpointSpec(url, concurrency))
    values["endpoints"] = specs
    return values


def _batch_table(
    path: Path, table: dict, settings: dict[str, Setting], base: Path
) -> dict[str, Any]:
    """``[batch]``: the batch group's settings without their prefix (``enabled`` is
    ``--batch``), the same as the top-level keys ``batch``, ``batch_dialect``, ..."""
    keys = {
        ("enabled" if key == "batch" else key.removeprefix("batch_")): key
        for key, declared in settings.items()
        if declared.group == "batch"
    }
    values: dict[str, Any] = {}
    for key, value in table.items():
        dest = keys.get(key)
        if dest is None:
            raise ConfigError(_unknown(path, f"batch.{key}", [f"batch.{k}" for k in keys]))
        values[dest] = _convert(path, f"batch.{key}", settings[dest], value, base)
    return values


def _owned_table(path: Path, table: Any, value: object) -> dict[str, Any]:
    """A backend's table (``[openrouter]``): its shape and keys checked here, its values by the
    backend."""
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: {table.name} must be a table ({table.shape})")
    for key in value:
        if key not in table.keys:
            known = [f"{table.name}.{name}" for name in table.keys]
            raise ConfigError(_unknown(path, f"{table.name}.{key}", known))
    try:
        return table.read(value)
    except SettingsError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def _unknown(path: Path, key: str, known: list[str]) -> str:
    head, dot, leaf = key.rpartition(".")
    leaves = [name.rpartition(".")[2] for name in known]
    close = difflib.get_close_matches(leaf.replace("-", "_"), leaves, n=1)
    hint = f"did you mean {head}{dot}{close[0]}?" if close else "see docs/config.md for the keys"
    return f"{path}: unknown key {key}; {hint}"


EXAMPLE = """\
# draftgen.toml: settings for `draftgen run` and `draftgen estimate` (see docs/config.md).
# Every `run` flag is a key (--max-tokens is max_tokens); a flag given on the command line
# overrides the key. Relative paths are relative to this file. `draftgen run` reads
# ./draftgen.toml by itself; --config FILE names another, --no-config skips it.

model = "moonshotai/kimi-k2.5"  # the model id sent to the API
# The target's tokenizer: local dir, hub id or fixture:NAME. The fixture (draftgen[test]) works
# offline, for trying this file with --simulate; for real data use the model's own, e.g.
# "moonshotai/Kimi-K2.5" (a hub id) or the directory of a downloaded copy.
tokenizer = "fixture:kimi-k2.5"
out = "runs/kimi-k2.5"  # the run directory; the same command resumes into it

# Where requests go, one of two: an endpoint (or [[backend.endpoints]] below), e.g. OpenRouter ...
# base_url = "https://openrouter.ai/api/v1"
# api_key_env = "OPENROUTER_API_KEY"  # the environment variable holding the key
# backend = "openrouter"  # openrouter | vllm | sglang (servers that return token ids)
# ... or the built-in simulator on loopback, whose answers are synthetic: a safe way to try this
# file (draftgen run --simulate says the same).
# simulate = true

# Sampling: all of these are sent with every request and recorded; a resume must match them.
# max_tokens = 32768  # reasoning + answer
# temperature = 1.0
# top_p = 0.95
# seed = 0  # sample k of a turn is sent seed + k
# reasoning_effort = "high"  # none | minimal | low | medium | high | xhigh | max, or instead:
# reasoning_max_tokens = 16000
# Template variables for vLLM/SGLang (sent as chat_template_kwargs and used to render each prompt
# here too; through OpenRouter, reasoning_effort sets the family's own switch instead):
# chat_template_kwargs = { enable_thinking = false }
# completions_per_turn = 1  # completions of each turn, each its own sample (not rows: limit)

# The prompts: a list of files read one after another ...
# input = ["prompts.jsonl"]
# ... or the [[datasets]] tables below. limit is the rows of all of them together, shared
# by weight (a dataset with fewer rows leaves its share to the others).
# limit = 10000

# How the run goes.
# concurrency = 64  # requests in flight
# stream = true
# idle_timeout = 300.0  # seconds a response may send nothing (keep-alive comments are nothing)
# attempt_timeout = 3600.0  # seconds one attempt may take in all; 0: no limit
# max_response_bytes = 50331648  # per response; unset: 16 MiB + 1 KiB per max_tokens token
# max_answer_bytes = 4194304  # the text of one answer; a longer one is kept apart, refused
# max_attempts = 8  # attempts per request
# retry_base_delay = 0.5  # first backoff, doubling per attempt
# max_retries = 20000  # retries across the whole run
# max_cost = 50.0  # USD: stop sending before spend would pass it
# shutdown_grace = 30.0  # seconds in-flight responses get after Ctrl-C
# logprobs = false
# allow_insecure_http = false
# profile = "kimi-k2"  # force a model profile instead of detecting it
{extra}
[[datasets]]
name = "chat"  # the rows' ids become chat/ID, so datasets never collide
path = "prompts.jsonl"
# limit = 5000  # rows of this file at most
# shuffle = true  # a seeded random choice and order of rows (JSONL files)
# seed = 0
# weight = 1.0  # share of the top-level limit

# [[datasets]]
# name = "code"
# path = "code.jsonl"
# weight = 2.0

# OpenRouter provider routing, sent as the request's `provider` object.
# [openrouter.provider]
# order = ["siliconflow", "chutes"]  # tried in turn
# allow_fallbacks = false
# only = ["siliconflow", "chutes"]
# ignore = ["atlas-cloud"]
# require_parameters = true
# quantizations = ["fp8", "bf16"]  # int4 int8 fp4 fp6 fp8 fp16 bf16 fp32 unknown
# sort = "throughput"  # price | throughput | latency
# data_collection = "deny"  # allow | deny
# enforce_distillable_text = true  # only models whose authors allow distillation
# zdr = true

# Several servers instead of one base_url, routed least-outstanding-first with health checks.
# The backend key then moves into the table (TOML allows one of the two forms):
# [backend]
# name = "sglang"
# [[backend.endpoints]]
# url = "http://10.0.0.1:30000/v1"
# concurrency = 256  # in flight on this server at most (default: --endpoint-concurrency)
# [[backend.endpoints]]
# url = "http://10.0.0.2:30000/v1"

# Batch mode (docs/batch.md): the same run through a batch API at the batch price. The keys
# are the --batch-* flags (the top-level batch_* keys above say the same).
# [batch]
# enabled = true  # --batch
# dialect = "openrouter"  # openrouter | openai-files
# url = "https://openrouter.ai/api/v1"  # the batch API's root (default: base_url)
# size = 5000  # rows per batch
# detach = false  # submit and exit; the same command collects
# retries = 3  # sends again of a row whose batch failed, expired or was cancelled

# `draftgen estimate` only.
[estimate]
# pilot = 0  # prompts sent first to measure output length and speed
# price_in = 0.6  # USD per million prompt tokens, when GET /models is unreachable
# price_out = 2.5  # USD per million completion tokens
# tokens_per_second = 30.0  # one request's output speed when no pilot measured it
"""


def example_text(settings: Iterable[Setting] | None = None) -> str:
    """The commented example ``draftgen init`` writes, with a line for every top-level key.

    Settings declared after this text was written get a commented line of their own, so the
    example never lacks a key.
    """
    extra = []
    for key, declared in top_level(settings).items():
        if f"# {key} = " in EXAMPLE or f"\n{key} = " in EXAMPLE:
            continue
        default = declared.default
        value = _toml_value(default) if default is not None else '"..."'
        note = declared.help_text().replace("\n", " ")
        extra.append(f"# {key} = {value}  # {note}" if note else f"# {key} = {value}")
    return EXAMPLE.replace("{extra}", "\n".join(extra) + ("\n" if extra else ""))


def write_example(path: Path, force: bool = False) -> Path:
    """Write the example config at ``path``; refuse to replace a file unless ``force``."""
    if path.exists() and not force:
        raise ConfigError(f"{path} already exists; edit it, or pass --force to replace it")
    path.write_text(example_text(), encoding="utf-8")
    return path


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'

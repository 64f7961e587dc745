"""Every setting of a run, declared once: type, default, choices, help, group, flag, TOML key and
the commands that take it. The CLI's parsers, draftgen.toml, docs/cli.md and the checks are made
from these declarations; ``RunOptions.check`` runs the CLI's checks for a Python caller too.

A setting is a field of ``RunOptions`` (or ``EstimateOptions``) declared with ``setting(...)``;
adding one is adding a field here and using it where it acts. Options of a command that are not
run settings (``--config``, ``--ray``, ``estimate --json``) are declared in ``COMMAND_SETTINGS``.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

# Re-exported: every name importable from draftgen.options as before the split.
from draftgen.declaration import SETTING, Setting, setting, settings_of, toml_value  # noqa: F401
from draftgen.options.checks import (  # noqa: F401
    DOLLARS,
    KEYS_GO_IN_THE_ENVIRONMENT,
    NON_NEGATIVE,
    POSITIVE,
    SHARE,
    TEMPERATURE,
    UNIT,
    Check,
    OptionError,
    _env_name,
    _json_object,
    _proofs,
    _shard,
    checked_text,
    kind_of,
    secret_problem,
)
from draftgen.options.registries import (  # noqa: F401
    backend_names,
    batch_dialects,
    config_tables,
    export_formats,
    input_formats,
    profile_names,
    reasoning_efforts,
    simulator_dialects,
    simulator_hostile_kinds,
    simulator_settings,
    vocab_trainers,
)

if TYPE_CHECKING:
    from draftgen.generate.endpoints import EndpointSpec, HealthPolicy
    from draftgen.inputs.mix import DatasetSpec, Suite
    from draftgen.inputs.shard import Shard


# The values some settings hold, for callers that build them (the config reader), loaded on first
# use: reading a run directory needs none of the run's engine.
_VALUES = {
    "DatasetSpec": "draftgen.inputs.mix",
    "EndpointSpec": "draftgen.generate.endpoints",
    "HealthPolicy": "draftgen.generate.endpoints",
    "Shard": "draftgen.inputs.shard",
    "SettingsError": "draftgen.backends",
}


def __getattr__(name: str) -> Any:
    module = _VALUES.get(name)
    if module is None:
        raise AttributeError(f"module 'draftgen.options' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


# The groups of ``--help``, in its order: (name, title).
GROUPS = {
    "input": "input: the prompts, their tokenizer and the settings file",
    "endpoint": "endpoint: where the requests go and how they are sent",
    "sampling": "sampling: what each request asks of the model (a resume must ask the same)",
    "limits": "limits: concurrency, timeouts, retries and the budget",
    "batch": "batch: generate through a batch API (docs/batch.md)",
    "sharding": "sharding: part of the rows, or all of them as Ray tasks (docs/merge.md)",
    "output": "output: where the results go",
    "estimate": "estimate: how output and prices are estimated",
    "providers": "providers: how the providers are probed and shown",
}
RUN_COMMANDS = ("run", "estimate")  # the commands that take the run settings
# The run settings ``providers --probe`` also takes: what its runs send, and where.
PROBE_COMMANDS = (*RUN_COMMANDS, "providers")
OPENROUTER_URL = "https://openrouter.ai/api/v1"
NO_ENDPOINT = (
    f"no endpoint given: pass --base-url {OPENROUTER_URL} (the key in the environment variable "
    "OPENROUTER_API_KEY, or another named by --api-key-env) to generate with OpenRouter, or "
    "--simulate to try draftgen on the built-in simulator's synthetic data"
)
SIMULATE_AND_ENDPOINT = (
    "--simulate answers with the built-in simulator's synthetic data and --base-url (or "
    "[[backend.endpoints]]) names a real endpoint; drop one of them"
)


# -- the declaration (draftgen.declaration: the simulator's settings are declared with it too) --


def named_settings_only(cls: type) -> type:
    """``cls`` (a dataclass of settings) whose constructor answers a keyword that is no setting
    with the CLI's kind of sentence, naming the setting it was likely meant to be, instead of
    Python's bare TypeError."""
    made = cls.__init__

    @functools.wraps(made)
    def __init__(self, *args: Any, **given: Any) -> None:
        names = [f.name for f in dataclasses.fields(cls)]
        for name in given:
            if name not in names:
                close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
                hint = f"did you mean {close[0]!r}?" if close else "see docs/cli.md for them"
                raise OptionError(f"{cls.__name__} has no setting {name!r}: {hint}")
        required = [
            f.name
            for f in dataclasses.fields(cls)
            if f.init
            and f.default is dataclasses.MISSING
            and f.default_factory is dataclasses.MISSING
        ]
        missing = [name for name in required[len(args) :] if name not in given]
        if missing:
            raise OptionError(
                f"{cls.__name__} needs {', '.join(missing)}: give "
                f"{' and '.join(f'{name}=...' for name in missing)}"
            )
        made(self, *args, **given)

    cls.__init__ = __init__
    return cls


# -- the run's settings -------------------------------------------------------------------------

_BATCH = {"group": "batch"}


@named_settings_only
@dataclass
class RunOptions:
    """A run: every field is a setting (``--flag``, a draftgen.toml key); see docs/cli.md."""

    inputs: list[str] = setting(
        commands=PROBE_COMMANDS,
        key="input",
        flag="--input",
        kind=Path,
        many=True,
        metavar="FILE",
        group="input",
        help="prompts: JSONL, a JSON array, Parquet or a datasets.save_to_disk directory (see "
        "--input-format) of OpenAI 'messages', ShareGPT 'conversations' or glaive rows; "
        "repeatable (required unless draftgen.toml has input or [[datasets]])",
    )
    model: str = setting(
        group="endpoint",
        required=RUN_COMMANDS,
        help="model id sent to the API (required, here or in the config)",
    )
    tokenizer: str = setting(
        commands=PROBE_COMMANDS,
        group="input",
        metavar="DIR_OR_ID",
        required=RUN_COMMANDS,
        help="the target's tokenizer: local directory, hub id, or fixture:NAME (required)",
    )
    out: Path | None = setting(
        None,
        kind=Path,
        short="-o",
        metavar="RUN_DIR",
        group="output",
        required=("run",),
        help="run directory; the same command resumes into it (required)",
    )
    # None: the endpoints of ``endpoints``; a list: several, routed least-outstanding-first.
    base_url: str | list[str] | None = setting(
        None,
        commands=PROBE_COMMANDS,
        repeatable=True,
        metavar="URL",
        group="endpoint",
        help=f"OpenAI-compatible API root, e.g. {OPENROUTER_URL}; repeat it for several "
        "endpoints, routed least-outstanding-first with health checks (required unless "
        "draftgen.toml lists [[backend.endpoints]], or --simulate)",
    )
    # The built-in simulator answers on loopback: chosen here, never fallen into for want of a
    # base URL, since its answers look real (provider names, ids) and are not.
    simulate: bool = setting(
        False,
        commands=PROBE_COMMANDS,
        kind=bool,
        group="endpoint",
        help="answer with the built-in simulator on loopback: synthetic data, to try draftgen "
        "without an account or endpoint (not with --base-url)",
    )
    # Several endpoints ([[backend.endpoints]]: url, optional concurrency); not with base_url.
    endpoints: list[EndpointSpec] | None = setting(
        None, kind=object, flag=None, toml=False, group="endpoint", help="[[backend.endpoints]]"
    )
    endpoint_concurrency: int | None = setting(
        None,
        kind=int,
        check=POSITIVE,
        metavar="N",
        group="endpoint",
        help="requests in flight per endpoint (default: any endpoint may take all of "
        "--concurrency, which stays the run's total)",
    )
    endpoint_health: HealthPolicy | None = setting(
        None, kind=object, flag=None, toml=False, group="endpoint", help="ejection and probing"
    )
    api_key_env: str = setting(
        "OPENROUTER_API_KEY",
        commands=PROBE_COMMANDS,
        parse=_env_name,
        metavar="VAR",
        group="endpoint",
        help="the NAME of the environment variable holding the API key, never the key itself: "
        "keys are not taken on the command line (default {default})",
    )
    backend: str = setting(
        "openrouter",
        choices=backend_names,
        group="endpoint",
        help="wire format: openrouter (text; ids rebuilt and verified) or a vllm / sglang server "
        "that returns the generated ids themselves; sglang-generate sends draftgen's prompt ids "
        "to SGLang's native /generate (--base-url is the server root) (default {default})",
    )
    stream: bool = setting(
        True, kind=bool, negatable=True, group="endpoint", help="stream responses (default) or not"
    )
    logprobs: bool = setting(
        False,
        kind=bool,
        group="endpoint",
        help="ask for logprobs: where a provider returns token bytes, the content's ids are "
        "taken from them (id_source logprobs) and the text path is checked against them",
    )
    allow_insecure_http: bool = setting(
        False,
        commands=PROBE_COMMANDS,
        kind=bool,
        group="endpoint",
        help="allow plain http to a non-loopback host",
    )
    # OpenRouter provider routing ([openrouter.provider], the backend's own table).
    provider: dict | None = setting(
        None, kind=object, flag=None, toml=False, group="endpoint", help="[openrouter.provider]"
    )
    max_tokens: int | None = setting(
        None,
        commands=PROBE_COMMANDS,
        kind=int,
        check=POSITIVE,
        metavar="N",
        group="sampling",
        help="max_tokens per request, reasoning + answer (default: none sent, so the "
        "provider's or server's own limit applies)",
    )
    profile: str | None = setting(
        None,
        commands=PROBE_COMMANDS,
        choices=profile_names,
        metavar="NAME",
        group="input",
        help="force a model profile instead of detecting it from the tokenizer: {choices} "
        "(generic: the layout derived from the chat template; default: detected, and generic "
        "for a tokenizer no profile claims)",
    )
    # Completions per turn, each stored as its own sample (``samples`` in the store).
    samples: int = setting(
        1,
        kind=int,
        check=POSITIVE,
        key="completions_per_turn",
        metavar="N",
        group="sampling",
        renamed=("--samples", "completions of each turn; --limit caps the rows"),
        old_key="samples",
        help="completions generated for each assistant turn, each stored as its own sample; "
        "not a row count (--limit caps rows) (default {default})",
    )
    temperature: float | None = setting(
        None,
        commands=PROBE_COMMANDS,
        kind=float,
        check=TEMPERATURE,
        metavar="T",
        group="sampling",
        help="0..2 (default: none sent, the provider's own)",
    )
    top_p: float | None = setting(
        None,
        commands=PROBE_COMMANDS,
        kind=float,
        check=UNIT,
        metavar="P",
        group="sampling",
        help="nucleus sampling, 0 < P <= 1 (default: none sent, the provider's own)",
    )
    seed: int | None = setting(
        None,
        commands=PROBE_COMMANDS,
        kind=int,
        metavar="N",
        group="sampling",
        help="sampling seed; completion k of a turn is sent N + k (default: none sent)",
    )
    reasoning_effort: str | None = setting(
        None,
        commands=PROBE_COMMANDS,
        choices=reasoning_efforts,
        group="sampling",
        help="OpenRouter reasoning.effort, not with --reasoning-max-tokens (default: none "
        "sent, the model's own)",
    )
    reasoning_max_tokens: int | None = setting(
        None,
        commands=PROBE_COMMANDS,
        kind=int,
        check=POSITIVE,
        metavar="N",
        group="sampling",
        help="OpenRouter reasoning.max_tokens, not with --reasoning-effort (default: none sent)",
    )
    # Sent to vLLM/SGLang and used to render every prompt locally; a table in draftgen.toml.
    chat_template_kwargs: dict | None = setting(
        None,
        kind=dict,
        parse=_json_object,
        metavar="JSON",
        group="sampling",
        help="template variables as a JSON object, e.g. '{\"enable_thinking\": false}': sent "
        "to vLLM/SGLang as chat_template_kwargs and used to render the prompt locally; in "
        "draftgen.toml the [chat_template_kwargs] table (default: none, the template's own)",
    )
    # Several datasets mixed into one run (draftgen.inputs.mix); None: ``inputs`` read in turn.
    datasets: list[DatasetSpec] | None = setting(
        None, kind=object, flag=None, toml=False, group="input", help="[[datasets]]"
    )
    limit: int | None = setting(
        None,
        commands=PROBE_COMMANDS,
        kind=int,
        check=POSITIVE,
        metavar="N",
        group="input",
        help="rows taken from all inputs together; datasets share it by weight (default: all rows)",
    )
    # ingest.INPUT_FORMATS; also the format of [[datasets]] that name none. None: "auto".
    input_format: str | None = setting(
        "auto",
        commands=PROBE_COMMANDS,
        choices=input_formats,
        group="input",
        help="how to read --input (and [[datasets]] without a format): auto picks by name "
        "(.jsonl, .json array, .parquet, a datasets.save_to_disk directory); hf reads files "
        "with datasets.load_dataset; glaive reads glaive function-calling rows (default auto)",
    )
    concurrency: int = setting(
        64,
        commands=PROBE_COMMANDS,
        kind=int,
        check=POSITIVE,
        metavar="N",
        group="limits",
        help="requests in flight (default {default})",
    )
    idle_timeout: float = setting(
        300.0,
        kind=float,
        metavar="SECONDS",
        group="limits",
        help="give up on a response that sends nothing for this long; a stream's comments "
        "count as nothing (default {default})",
    )
    # Seconds one attempt may take in all (0: no limit): what ends a trickle that never falls
    # idle. Generous, since an attempt cut short is still billed: a 32k-token answer at ~10
    # tokens a second takes 55 minutes.
    attempt_timeout: float = setting(
        3600.0,
        kind=float,
        metavar="SECONDS",
        group="limits",
        help="give up on an attempt not finished after this long, however steadily it sends; 0: "
        "no limit (default {default})",
    )
    # None: client.default_response_bytes of max_tokens (16 MiB + 1 KiB per token; 64 MiB
    # without max_tokens).
    max_response_bytes: int | None = setting(
        None,
        kind=int,
        check=POSITIVE,
        metavar="N",
        group="limits",
        help="give up on a response (body or stream) larger than this, and retry it "
        "(default: 16 MiB plus 1 KiB per token of --max-tokens, or 64 MiB without it)",
    )
    # generate.client.ANSWER_BYTES: reconstruction's time and memory grow with a text it cannot
    # cut, so an answer's text is bounded whatever --max-tokens says.
    max_answer_bytes: int = setting(
        4 * 2**20,
        kind=int,
        check=POSITIVE,
        metavar="N",
        group="limits",
        help="refuse an answer whose text (content, reasoning, tool calls) passes this many bytes: "
        "a stream is no longer read, the answer is kept apart as billed and bought once more "
        "(default 4194304: 4 MiB)",
    )
    max_attempts: int = setting(
        8,
        kind=int,
        check=POSITIVE,
        metavar="N",
        group="limits",
        help="attempts per request before it is recorded as failed (default {default})",
    )
    retry_base_delay: float = setting(
        0.5,
        kind=float,
        metavar="SECONDS",
        group="limits",
        help="first backoff delay; doubles per attempt, with jitter (default {default})",
    )
    max_retries: int | None = setting(
        20_000,
        kind=int,
        metavar="N",
        group="limits",
        help="retries allowed across the whole run before it stops (default {default})",
    )
    max_cost: float | None = setting(
        None,
        commands=PROBE_COMMANDS,
        kind=float,
        check=DOLLARS,
        metavar="USD",
        group="limits",
        help="stop sending once spend plus the in-flight estimate would pass this many dollars "
        "(usage.cost, or the tokens at the listed prices where it is missing or implausible; "
        "default: no limit)",
    )
    keep_providers: bool = setting(
        False,
        kind=bool,
        group="limits",
        help="never leave a provider out: by default a live OpenRouter run stops sending to a "
        "provider whose samples fail proof while the others' pass (provider.ignore; see "
        "docs/providers.md) and buys its spoiled samples again elsewhere",
    )
    no_calibrate: bool = setting(
        False,
        kind=bool,
        group="limits",
        help="ask the providers no calibration questions: by default a live OpenRouter run "
        "first sends each provider it may route to a prompt of a few tokens (max_tokens 1) "
        "whose prompt count says which renderer it uses, and with tools one forced call, so "
        "a provider rendering otherwise is left out before it is paid for and one proven is "
        "trusted where a count cannot tell (docs/providers.md#calibration)",
    )
    rebuy_budget: float = setting(
        0.5,
        kind=float,
        check=SHARE,
        metavar="SHARE",
        group="limits",
        help="what buying an excluded provider's spoiled samples again may cost, as a share of "
        "what the run's first purchases cost; each is bought again once, and --max-cost still "
        "holds (default {default}; 0: never)",
    )
    shutdown_grace: float = setting(
        30.0,
        kind=float,
        metavar="SECONDS",
        group="limits",
        help="after Ctrl-C, how long in-flight responses may still arrive (default {default})",
    )
    progress_interval: float = setting(
        10.0, kind=float, flag=None, toml=False, group="output", help="seconds between progress"
    )
    shard: Shard | None = setting(
        None,
        kind=object,
        parse=_shard,
        metavar="I/N",
        group="sharding",
        help="run only shard I of N (0 <= I < N), a fixed subset by prompt key, into its own "
        "--out; draftgen merge combines the shards (default: every row)",
    )
    # Batch mode (draftgen.generate.batch, [batch] in draftgen.toml): the same plan and store,
    # generated through a batch API at the batch price instead of live requests.
    batch: bool = setting(
        False,
        kind=bool,
        **_BATCH,
        help="generate through a batch API (about half the price; answers in minutes to hours) "
        "instead of live requests: the same plan, store, verification and exports; a "
        "conversation advances one turn per batch round (see docs/batch.md)",
    )
    batch_dialect: str = setting(
        "openrouter",
        choices=batch_dialects,
        **_BATCH,
        help="openrouter: requests inline in POST /batches; openai-files: a JSONL upload to "
        "/files, then /batches (OpenAI, Kimi, DeepInfra, Groq) (default {default})",
    )
    batch_url: str | None = setting(
        None,
        metavar="URL",
        **_BATCH,
        help=f"the batch API's root, e.g. {OPENROUTER_URL} (or /api/beta) or "
        "https://api.moonshot.ai/v1 (default: --base-url)",
    )
    batch_model: str | None = setting(
        None,
        metavar="SLUG",
        **_BATCH,
        help="the model named in each batch, e.g. MODEL:batch where the API wants the catalog "
        "variant (default: --model)",
    )
    batch_size: int | None = setting(
        None,
        kind=int,
        check=POSITIVE,
        metavar="N",
        **_BATCH,
        help="rows per batch at most (default: the dialect's limit, 5000 for openrouter, 50000 "
        "for openai-files)",
    )
    batch_detach: bool = setting(
        False,
        kind=bool,
        **_BATCH,
        help="submit the batches that are ready and exit; the same command stores their "
        "results and sends the next round",
    )
    batch_poll: float = setting(
        5.0,
        kind=float,
        metavar="SECONDS",
        **_BATCH,
        help="first wait between polls of the batches in flight, growing to 60 (default {default})",
    )
    batch_retries: int = setting(
        3,
        kind=int,
        check=NON_NEGATIVE,
        metavar="N",
        **_BATCH,
        help="times a row is sent again after its batch failed, expired or was cancelled "
        "(default {default})",
    )
    batch_grace: float = setting(
        120.0,
        kind=float,
        metavar="SECONDS",
        **_BATCH,
        help="how long a batch whose create got no answer may stay unseen in the API's listing "
        "before its rows count as never sent and are sent again (default {default})",
    )

    def __post_init__(self) -> None:
        # ``inputs`` takes one path or a list of them; ``out`` a string or a Path.
        if isinstance(self.inputs, (str, Path)):
            self.inputs = [str(self.inputs)]
        elif self.inputs is not None:
            self.inputs = [str(path) for path in self.inputs]
        if self.out is not None and not isinstance(self.out, Path):
            self.out = Path(self.out)

    @classmethod
    def from_keys(cls, values: Mapping[str, Any], **given: Any):
        """These options from settings by key (``input``, ``completions_per_turn``: the parsed
        flags and draftgen.toml), the fields left out at their defaults."""
        fields = {s.name: values[s.key] for s in settings_of(cls) if s.key in values}
        fields["inputs"] = fields.get("inputs") or []
        return cls(**{**fields, **given})

    def check(self, command: str | None = None) -> None:
        """Every setting's value as the CLI checks its flag, and what ``command`` ("run")
        cannot go without; OptionError with the CLI's sentence."""
        key_variable = self.api_key_env if isinstance(self.api_key_env, str) else ""
        key = os.environ.get(key_variable) if key_variable else None
        for declared in settings_of(type(self)):
            value = getattr(self, declared.name)
            # First, so that no later sentence can name the value.
            secret = secret_problem(declared.named, value, key_variable, key)
            if secret:
                raise OptionError(secret)
            if command in declared.required and value is None:
                needed = f"RunOptions.{declared.name} is needed"
                raise OptionError(f"no {declared.spelled} given: {needed}")
            problem = declared.problem(value)
            if problem:
                raise OptionError(problem)
        named = bool(self.base_url or self.endpoints)
        if self.simulate and named:
            raise OptionError(SIMULATE_AND_ENDPOINT)
        if command == "run" and not named and not self.simulate:
            raise OptionError(NO_ENDPOINT)

    def suite(self) -> Suite:
        """The prompts this run reads: ``datasets`` if given, else the ``inputs`` files."""
        from draftgen.inputs.mix import Suite

        given = None if self.input_format in (None, "auto") else self.input_format
        if self.datasets:
            specs = (
                dataclasses.replace(spec, format=given) if spec.format is None and given else spec
                for spec in self.datasets
            )
            return Suite(tuple(specs), self.limit)
        return Suite.from_inputs(self.inputs, self.limit, format=given)

    def response_byte_cap(self) -> int:
        """Bytes one response may send: ``max_response_bytes``, else derived from max_tokens."""
        from draftgen.generate.client import default_response_bytes

        return self.max_response_bytes or default_response_bytes(self.max_tokens)


_ESTIMATE = {"group": "estimate", "table": "estimate", "commands": ("estimate",)}


@named_settings_only
@dataclass
class EstimateOptions(RunOptions):
    """A run's options and how ``estimate`` measures and prices it; ``out`` is not used (a pilot
    runs in a scratch directory of its own)."""

    pilot: int = setting(
        0,
        kind=int,
        metavar="N",
        **_ESTIMATE,
        help="send N prompts to the endpoint first and measure output length and speed "
        "(default 0: assume max_tokens)",
    )
    price_in: float | None = setting(
        None,
        kind=float,
        metavar="USD",
        **_ESTIMATE,
        help="USD per million prompt tokens (default: from the endpoint's model listing)",
    )
    price_out: float | None = setting(
        None,
        kind=float,
        metavar="USD",
        **_ESTIMATE,
        help="USD per million completion tokens (default: from the endpoint's model listing)",
    )
    tokens_per_second: float = setting(
        30.0,
        kind=float,
        metavar="N",
        **_ESTIMATE,
        help="output speed of one request when no pilot measured it (default {default})",
    )


_PROVIDERS = {"group": "providers", "toml": False, "commands": ("providers",)}
# ``draftgen providers``' own options (docs/providers.md); keys apart from run's and estimate's.
_PROVIDERS_SETTINGS = (
    Setting(
        name="probe",
        kind=int,
        check=POSITIVE,
        metavar="N",
        **_PROVIDERS,
        help="probe every provider: a run per provider (provider.only, no fallbacks) answering "
        "each turn of the probe set N times (the built-in set of chat, multi-turn and tool-call "
        "prompts, or --input's first --limit rows, 8 by default), then rank them by dollars per "
        "verified sample (needs --tokenizer; default: only list the providers)",
    ),
    Setting(
        name="probe_out",
        flag="--out",
        short="-o",
        kind=Path,
        metavar="DIR",
        **_PROVIDERS,
        help="keep the probes' runs in DIR/PROVIDER (the same command resumes them; default: a "
        "temporary directory, deleted after)",
    ),
    Setting(
        name="providers_json",
        flag="--json",
        kind=bool,
        **_PROVIDERS,
        help="print the providers (or the probe's figures) as JSON",
    ),
)

# Options of the commands that are not a run's settings: what the command itself does with them.
COMMAND_SETTINGS: tuple[Setting, ...] = (
    Setting(
        name="proofs",
        flag="--proof",
        metavar="PROOFS",
        group="output",
        toml=False,  # export reads no draftgen.toml
        commands=("export",),
        parse=_proofs,
        help="write only the samples proven by these, comma-separated: ids (the server's own "
        "ids), logprobs (ids named by the logprobs), text (the text re-encoded and consistent "
        "with the counts; a re-split that keeps the count cannot be seen, status estimates "
        "how many); default: every proof",
    ),
    Setting(
        name="config",
        kind=Path,
        metavar="FILE",
        group="input",
        toml=False,
        commands=PROBE_COMMANDS,
        help="read settings from this TOML file (default: ./draftgen.toml if it exists); "
        "flags given here override it",
    ),
    Setting(
        name="no_config",
        kind=bool,
        group="input",
        toml=False,
        commands=PROBE_COMMANDS,
        help="do not read ./draftgen.toml even if it exists",
    ),
    Setting(
        name="ray",
        kind=int,
        check=POSITIVE,
        metavar="N",
        group="sharding",
        help="run N shards as Ray tasks into RUN_DIR/shards/I, then merge them into RUN_DIR "
        "(needs pip install 'draftgen[ray]'; default: no Ray; estimate ignores it)",
    ),
    Setting(
        name="ray_address",
        metavar="ADDRESS",
        group="sharding",
        help="Ray cluster to join, e.g. auto or ray://head:10001 (default: a local Ray on "
        "this machine)",
    ),
    Setting(
        name="json",
        kind=bool,
        **_ESTIMATE,
        help="print the estimate as JSON",
    ),
    *_PROVIDERS_SETTINGS,
)
META_KEYS = frozenset({"config", "no_config"})  # options about finding the file: no key in it


def command_settings(
    command: str, options: type = EstimateOptions, extra: Sequence[Setting] = COMMAND_SETTINGS
) -> list[Setting]:
    """The settings ``command`` takes, in --help's order: grouped, declaration order within."""
    declared = [*settings_of(options), *extra]
    taken = [s for s in declared if command in s.commands and (s.flag or s.toml)]
    return sorted(taken, key=lambda s: list(GROUPS).index(s.group))


def every_setting(
    options: type = EstimateOptions, extra: Sequence[Setting] = COMMAND_SETTINGS
) -> Iterator[Setting]:
    """Every setting any command takes, each once."""
    seen = set()
    for declared in [*settings_of(options), *extra]:
        if declared.key not in seen:
            seen.add(declared.key)
            yield declared


def setting_named(key: str) -> Setting:
    """The setting whose key (dest) is ``key``."""
    return next(s for s in every_setting() if s.key == key)


def export_format_help() -> tuple[str, str]:
    """(the default export format, the help that lists them all)."""
    from draftgen.outputs.export import DEFAULT_FORMAT, formats_help

    return DEFAULT_FORMAT, formats_help()


def renamed_flags(settings: Sequence[Setting] | None = None) -> dict[str, str]:
    """Old flag -> what the error says it became: "--completions-per-turn (completions ...)"."""
    settings = every_setting() if settings is None else settings
    return {s.renamed[0]: f"{s.flag} ({s.renamed[1]})" for s in settings if s.renamed}

"""The ``draftgen`` command: parses flags, calls the library, prints errors as one sentence."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import difflib
import functools
import json
import os
import re
import sys
from pathlib import Path

from draftgen import __version__
from draftgen.redact import NUMBER, described, printable, redact

EXIT_ERROR = 2  # the run cannot go on as asked: the message says why
EXIT_STOPPED = 3  # stopped early on purpose (--max-cost); the same command resumes
EXIT_INTERRUPTED = 130
EXIT_INTERNAL = 1  # a bug in draftgen: one line, the traceback with --log-level debug
EXIT_BROKEN_PIPE = 141  # the reader of stdout went away (status --json | head): 128 + SIGPIPE
# Flags that were renamed: the old spelling is refused with the new one named.
RENAMED_FLAGS = {
    "--samples": "--completions-per-turn (completions of each turn; --limit caps the rows)",
}
# Unknown flags that look like an attempt to pass a key on the command line.
_KEY_FLAG = re.compile(r"(?i)key|token|secret|passw|auth|bearer")
KEYS_GO_IN_THE_ENVIRONMENT = (
    "API keys are never taken on the command line, where other users can read them in the "
    "process list: export the key in an environment variable and name that variable with "
    "--api-key-env (default OPENROUTER_API_KEY)"
)


class DraftgenParser(argparse.ArgumentParser):
    """argparse with no abbreviated flags and errors of one line on stderr (exit 2).

    Nothing the user typed is echoed unredacted: a key pasted after a mistyped flag is masked,
    and an unknown flag is named without its value.
    """

    def __init__(self, *args, **kwargs) -> None:
        # ``--api-key`` must not silently mean ``--api-key-env``: no flag may be abbreviated.
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        message = _ARGPARSE_VALUE.sub(
            lambda m: m.group("what") + described(_unquoted(m.group("value"))), message
        )
        _say_error(f"{self.prog}: {printable(redact(message))} (see {self.prog} --help)")
        self.exit(EXIT_ERROR)

    def parse_args(self, args=None, namespace=None):
        namespace, extras = self.parse_known_args(args, namespace)
        if extras:
            command = _subparsers(self).get(getattr(namespace, "command", None) or "")
            (command or self).error(unknown_arguments(extras, command or self))
        return namespace


# The value argparse quotes in its own errors (a type converter's ValueError, a wrong choice).
_ARGPARSE_VALUE = re.compile(
    r"(?P<what>invalid (?:\w+ value|choice): )(?P<value>'(?:[^'\\]|\\.)*'|\"[^\"]*\")"
)


def _unquoted(text: str) -> str:
    import ast

    try:
        return str(ast.literal_eval(text))
    except (ValueError, SyntaxError):
        return text[1:-1]


def unknown_arguments(extras: list[str], parser: argparse.ArgumentParser) -> str:
    """What was wrong with ``extras`` (arguments no option took), never repeating a value."""
    flags = [arg.split("=", 1)[0] for arg in extras if arg.startswith("-") and len(arg) > 1]
    values = [arg for arg in extras if not (arg.startswith("-") and len(arg) > 1)]
    if flags:
        flag = flags[0]
        if flag in RENAMED_FLAGS:
            return f"{flag} was renamed {RENAMED_FLAGS[flag]}"
        close = closest_option(flag, parser)
        more = f" (and {len(flags) - 1} more)" if len(flags) > 1 else ""
        if _KEY_FLAG.search(flag):
            if close is None or "key" in close:
                return (
                    f"unknown option {flag} (its value is not shown); {KEYS_GO_IN_THE_ENVIRONMENT}"
                )
            return f"unknown option {flag} (its value is not shown){more}; did you mean {close}?"
        hint = f"; did you mean {close}?" if close else ""
        return f"unknown option {flag}{more}{hint}"
    shown = ", ".join(described(value) for value in values[:3])
    return f"unexpected argument{'s' if len(values) > 1 else ''} {shown}"


# Flags of other tools that people type for draftgen's (vLLM's benchmarks, OpenAI's API, datasets
# scripts): suggested when the command has the option they stand for.
OTHER_TOOLS_FLAGS = {
    "--num-prompts": "--limit",
    "--num-samples": "--limit",
    "--max-samples": "--limit",
    "--n": "--completions-per-turn",
    "--output": "--out",
    "--output-dir": "--out",
    "--api-base": "--base-url",
    "--format-input": "--input-format",
}


def closest_option(flag: str, parser: argparse.ArgumentParser) -> str | None:
    """The option of ``parser`` that ``flag`` most likely meant: the same name with ``_`` for
    ``-`` or another case, the option another tool calls so, or one spelled nearly the same."""
    known = [s for a in parser._actions for s in a.option_strings if s.startswith("--")]
    normal = "--" + flag.lstrip("-").replace("_", "-").lower()
    if normal in known:
        return normal
    if OTHER_TOOLS_FLAGS.get(normal) in known:
        return OTHER_TOOLS_FLAGS[normal]
    close = difflib.get_close_matches(normal, known, n=1, cutoff=0.75)
    return close[0] if close else None


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


RUN_DIR_HELP = "a run directory (the --out of draftgen run)"
# The commands whose options take their defaults and choices from the run engine and the
# simulator: importing those (an HTTP client and server, ~0.2 s) would double the time of a small
# export, so ``main`` adds these options only when one of these commands may be the one to run.
ENGINE_COMMANDS = ("run", "simulate", "estimate")


def build_parser(engine_options: bool = True) -> argparse.ArgumentParser:
    """The parser of every command; without ``engine_options``, the ``ENGINE_COMMANDS`` have
    their name and help (all ``draftgen --help`` lists) but no options."""
    parser = DraftgenParser(
        prog="draftgen",
        description="Regenerate prompt datasets with a target model and export exact token ids.",
    )
    parser.add_argument("--version", action="version", version=f"draftgen {__version__}")
    _add_logging(parser)
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="generate, store, reconstruct and verify (resumable)")
    _add_merge(commands)
    _add_cancel(commands)
    _add_export(commands)
    _add_vocab(commands)
    _add_report(commands)
    _add_status(commands)
    simulate = commands.add_parser("simulate", help="serve an OpenRouter-compatible simulator")
    _add_init(commands)
    estimate = commands.add_parser(
        "estimate",
        help="prompt tokens, cost and time of a run before spending (same flags as run)",
    )
    if engine_options:
        _add_run(run)
        _add_simulate(simulate)
        _add_estimate(estimate, run)
        from draftgen.cli.config import defer_defaults

        # Last, after every run option exists: a config file fills what the flags leave unset.
        defer_defaults(run)
        defer_defaults(estimate)
    return parser


# -- shared options ------------------------------------------------------------------------------


@functools.cache
def _run_defaults() -> dict[str, object]:
    """``RunOptions``' defaults by field: the flags take theirs from the library they call."""
    from draftgen.run.pipeline import RunOptions

    fields = dataclasses.fields(RunOptions)
    return {f.name: f.default for f in fields if f.default is not dataclasses.MISSING}


def _default(field: str) -> object:
    return _run_defaults()[field]


def _shown(field: str) -> str:
    """A run default as ``--help`` says it: 300.0 as 300, 0.5 as 0.5."""
    value = _default(field)
    return f"{value:g}" if isinstance(value, (int, float)) else str(value)


def _profile_names() -> list[str]:
    from draftgen.profiles import PROFILES

    return sorted(PROFILES)


def _add_profile(parser: argparse.ArgumentParser, what: str, when_not_given: str) -> None:
    """``--profile NAME``, its choices listed in the help: ``what`` it forces, and the default."""
    parser.add_argument(
        "--profile",
        choices=_profile_names(),
        metavar="NAME",
        help=f"{what}: " + ", ".join(_profile_names()) + f" (default: {when_not_given})",
    )


def _add_run_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR", help=RUN_DIR_HELP)


def _add_out(parser: argparse.ArgumentParser, metavar: str, help: str) -> None:
    """``-o/--out``: what a command writes (required)."""
    parser.add_argument("-o", "--out", required=True, type=Path, metavar=metavar, help=help)


def _add_include_unverified(parser: argparse.ArgumentParser, help: str) -> None:
    parser.add_argument("--include-unverified", action="store_true", help=help)


# -- run -----------------------------------------------------------------------------------------


def _add_run(run: argparse.ArgumentParser) -> None:
    _add_run_target(run)
    _add_run_requests(run)
    _add_run_settings(run)
    _add_shards(run)
    _add_batch(run)


def _add_run_target(run: argparse.ArgumentParser) -> None:
    """What `run` reads, which model and endpoints it asks, and where it stores the answers."""
    run.add_argument(
        "--input",
        action="append",
        metavar="FILE",
        help="prompts: JSONL, a JSON array, Parquet or a datasets.save_to_disk directory (see "
        "--input-format) of OpenAI 'messages', ShareGPT 'conversations' or glaive rows; "
        "repeatable (required unless draftgen.toml has input or [[datasets]])",
    )
    run.add_argument("--model", help="model id sent to the API (required, here or in the config)")
    run.add_argument(
        "--tokenizer",
        metavar="DIR_OR_ID",
        help="the target's tokenizer: local directory, hub id, or fixture:NAME (required)",
    )
    run.add_argument(
        "--base-url",
        action=_AppendUrl,
        metavar="URL",
        help="OpenAI-compatible API root, e.g. https://openrouter.ai/api/v1; repeat it for "
        "several endpoints, routed least-outstanding-first with health checks "
        "(default: the built-in simulator on loopback, synthetic data)",
    )
    run.add_argument(
        "--endpoint-concurrency",
        type=_positive_int,
        metavar="N",
        help="requests in flight per endpoint (default: any endpoint may take all of "
        "--concurrency, which stays the run's total)",
    )
    run.add_argument(
        "--api-key-env",
        default=_default("api_key_env"),
        type=_env_name,
        metavar="VAR",
        help="the NAME of the environment variable holding the API key, never the key itself: "
        f"keys are not taken on the command line (default {_shown('api_key_env')})",
    )
    run.add_argument(
        "-o",
        "--out",
        type=Path,
        metavar="RUN_DIR",
        help="run directory; the same command resumes into it (required)",
    )


def _add_run_requests(run: argparse.ArgumentParser) -> None:
    """How `run` sends its requests: concurrency, limits, retries, the backend, the budget."""
    from draftgen.backends import BACKEND_NAMES

    run.add_argument(
        "--concurrency",
        type=_positive_int,
        default=_default("concurrency"),
        metavar="N",
        help=f"requests in flight (default {_shown('concurrency')})",
    )
    run.add_argument(
        "--stream",
        action=argparse.BooleanOptionalAction,
        default=_default("stream"),
        help="stream responses (default) or not",
    )
    run.add_argument(
        "--max-tokens",
        type=_positive_int,
        metavar="N",
        help="max_tokens per request, reasoning + answer (default: none sent, so the "
        "provider's or server's own limit applies)",
    )
    _add_profile(
        run, "force a model profile instead of detecting it from the tokenizer", "detected"
    )
    run.add_argument(
        "--idle-timeout",
        type=float,
        default=_default("idle_timeout"),
        metavar="SECONDS",
        help="give up on a response that sends nothing for this long; a stream's comments "
        f"count as nothing (default {_shown('idle_timeout')})",
    )
    run.add_argument(
        "--attempt-timeout",
        type=float,
        default=_default("attempt_timeout"),
        metavar="SECONDS",
        help="give up on an attempt not finished after this long, however steadily it sends; 0: "
        f"no limit (default {_shown('attempt_timeout')})",
    )
    run.add_argument(
        "--max-response-bytes",
        type=_positive_int,
        metavar="N",
        help="give up on a response (body or stream) larger than this, and retry it "
        "(default: 16 MiB plus 1 KiB per token of --max-tokens, or 64 MiB without it)",
    )
    run.add_argument(
        "--max-attempts",
        type=_positive_int,
        default=_default("max_attempts"),
        metavar="N",
        help="attempts per request before it is recorded as failed "
        f"(default {_shown('max_attempts')})",
    )
    run.add_argument(
        "--retry-base-delay",
        type=float,
        default=_default("retry_base_delay"),
        metavar="SECONDS",
        help="first backoff delay; doubles per attempt, with jitter "
        f"(default {_shown('retry_base_delay')})",
    )
    run.add_argument(
        "--allow-insecure-http", action="store_true", help="allow plain http to a non-loopback host"
    )
    run.add_argument(
        "--backend",
        choices=BACKEND_NAMES,
        default=_default("backend"),
        help="wire format: openrouter (text; ids rebuilt and verified) or a vllm / sglang server "
        "that returns the generated ids themselves; sglang-generate sends draftgen's prompt ids "
        "to SGLang's native /generate (--base-url is the server root) "
        f"(default {_shown('backend')})",
    )
    run.add_argument(
        "--logprobs",
        action="store_true",
        help="ask for logprobs: where a provider returns token bytes, the content's ids are "
        "taken from them (id_source logprobs) and the text path is checked against them",
    )
    run.add_argument(
        "--max-cost",
        type=float,
        metavar="USD",
        help="stop sending once spend plus the in-flight estimate would pass this many dollars "
        "(usage.cost, or the tokens at the listed prices where it is missing or implausible; "
        "default: no limit)",
    )
    run.add_argument(
        "--max-retries",
        type=int,
        default=_default("max_retries"),
        metavar="N",
        help="retries allowed across the whole run before it stops "
        f"(default {_shown('max_retries')})",
    )
    run.add_argument(
        "--shutdown-grace",
        type=float,
        default=_default("shutdown_grace"),
        metavar="SECONDS",
        help="after Ctrl-C, how long in-flight responses may still arrive "
        f"(default {_shown('shutdown_grace')})",
    )


# -- reading a run directory ---------------------------------------------------------------------


def _add_export(commands) -> None:
    from draftgen.outputs.export import FORMATS

    export = commands.add_parser("export", help="write training files from a run")
    _add_run_dir(export)
    export.add_argument(
        "--format",
        default="specforge",
        choices=FORMATS,
        help="specforge: pre-tokenized JSONL (default); specforge-text: conversations JSONL; "
        "parquet: one Parquet file; hf: a datasets.save_to_disk directory",
    )
    _add_out(
        export,
        "PATH",
        "the file to write (a directory for --format hf); an earlier export of this run there "
        "is replaced, anything else only with --force",
    )
    _add_include_unverified(export, "also write unverified and truncated samples (verified: false)")
    export.add_argument(
        "--force",
        action="store_true",
        help="replace an existing --out file even if it is not an earlier export of this run",
    )


def _add_vocab(commands) -> None:
    vocab = commands.add_parser(
        "vocab", help="draft vocabulary (d2t, t2d) from generated tokens, as SpecForge builds it"
    )
    _add_run_dir(vocab)
    vocab.add_argument(
        "--size",
        type=_positive_int,
        default=32000,
        metavar="N",
        help="draft vocabulary size (default 32000)",
    )
    _add_out(vocab, "DIR", "directory for vocab.json, vocab_mapping.npz and vocab_mapping.pt")
    vocab.add_argument(
        "--vocab-size",
        type=_positive_int,
        metavar="N",
        help="target vocabulary size (the model config's vocab_size; default: the size of the "
        "tokenizer the run recorded)",
    )
    _add_include_unverified(vocab, "also count unverified and truncated samples")


def _add_report(commands) -> None:
    report = commands.add_parser(
        "report", help="write RUN_DIR/report.html (pictures) and RUN_DIR/report.json"
    )
    _add_run_dir(report)


def _add_status(commands) -> None:
    status = commands.add_parser("status", help="counts by outcome and reason")
    _add_run_dir(status)
    status.add_argument("--json", action="store_true", help="print the counts as JSON")


# -- simulate ------------------------------------------------------------------------------------


def _add_simulate(simulate: argparse.ArgumentParser) -> None:
    from draftgen.simulator.config import DIALECTS

    simulate.add_argument(
        "--tokenizer",
        required=True,
        metavar="DIR_OR_ID",
        help="the simulated model's tokenizer: local directory, hub id or fixture:NAME (required)",
    )
    _add_profile(simulate, "force the simulated model's profile", "detected from the tokenizer")
    simulate.add_argument(
        "--dialect",
        choices=DIALECTS,
        default="openrouter",
        help="answer as OpenRouter (text only) or as a vllm / sglang server with token ids "
        "(default openrouter)",
    )
    simulate.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)"
    )
    simulate.add_argument(
        "--port",
        type=int,
        default=8000,
        help="port to listen on; 0 picks a free one (default 8000)",
    )
    simulate.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the simulated answers, faults and quirks (default 0)",
    )
    _add_simulated_faults(simulate)
    _add_simulated_lengths(simulate)
    simulate.add_argument(
        "--truth",
        type=Path,
        metavar="FILE",
        help="append the ground truth of every served completion here (JSONL)",
    )
    _add_simulated_batches(simulate)


def _add_simulated_faults(simulate: argparse.ArgumentParser) -> None:
    """`simulate`'s faults and quirks, and when they start."""
    simulate.add_argument(
        "--fault",
        action="append",
        default=[],
        metavar="NAME=RATE",
        help="inject a fault at a rate, e.g. rate_limit=0.1; repeatable",
    )
    simulate.add_argument(
        "--quirk",
        action="append",
        default=[],
        metavar="NAME=RATE",
        help="apply a provider quirk at a rate, e.g. drift=0.05; repeatable",
    )
    simulate.add_argument(
        "--retry-after",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="Retry-After sent with rate-limit and overload faults (default 0: none)",
    )


def _add_simulated_lengths(simulate: argparse.ArgumentParser) -> None:
    """`simulate`'s completion lengths, pace, and the faults that come after N requests."""
    simulate.add_argument(
        "--min-tokens",
        type=int,
        default=20,
        metavar="N",
        help="shortest simulated completion, in tokens (default 20)",
    )
    simulate.add_argument(
        "--max-tokens",
        type=int,
        default=200,
        metavar="N",
        help="longest simulated completion, in tokens; a request's max_tokens cuts it shorter "
        "(default 200)",
    )
    simulate.add_argument(
        "--latency",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="wait before answering each request (default 0)",
    )
    simulate.add_argument(
        "--chunk-delay",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="wait between streamed chunks (default 0)",
    )
    simulate.add_argument(
        "--fatal-after",
        type=int,
        metavar="N",
        help="the auth and payment faults start only after N requests (default: from the first)",
    )
    simulate.add_argument(
        "--fail-after",
        type=int,
        metavar="N",
        help="an outage: every chat request after the N-th (and GET /models) answers HTTP 500 "
        "(default: no outage)",
    )
    simulate.add_argument(
        "--stall-seconds",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="how long the stall fault sends nothing (default 30)",
    )


# Options of `estimate` that are `run`'s own option objects: one definition, one config key.
ESTIMATE_SHARED = (
    "input",
    "model",
    "tokenizer",
    "base_url",
    "api_key_env",
    "concurrency",
    "stream",
    "max_tokens",
    "profile",
    "idle_timeout",
    "attempt_timeout",
    "max_response_bytes",
    "max_attempts",
    "retry_base_delay",
    "allow_insecure_http",
    "backend",
    "limit",
    "completions_per_turn",
    "temperature",
    "top_p",
    "seed",
    "reasoning_effort",
    "reasoning_max_tokens",
    "chat_template_kwargs",
    "input_format",
    "config",
    "no_config",
)


def _add_run_settings(run: argparse.ArgumentParser) -> None:
    """`run`'s config file, mix and sampling options (docs/config.md lists their keys)."""
    from draftgen.backends.openrouter import REASONING_EFFORTS

    run.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="read settings from this TOML file (default: ./draftgen.toml if it exists); "
        "flags given here override it",
    )
    run.add_argument(
        "--no-config", action="store_true", help="do not read ./draftgen.toml even if it exists"
    )
    run.add_argument(
        "--limit",
        type=_positive_int,
        metavar="N",
        help="rows taken from all inputs together; datasets share it by weight (default: all rows)",
    )
    run.add_argument(
        "--completions-per-turn",
        type=_positive_int,
        default=_default("samples"),
        metavar="N",
        help="completions generated for each assistant turn, each stored as its own sample; "
        f"not a row count (--limit caps rows) (default {_shown('samples')})",
    )
    run.add_argument(
        "--temperature",
        type=_temperature,
        metavar="T",
        help="0..2 (default: none sent, the provider's own)",
    )
    run.add_argument(
        "--top-p",
        type=_unit_float,
        metavar="P",
        help="nucleus sampling, 0 < P <= 1 (default: none sent, the provider's own)",
    )
    run.add_argument(
        "--seed",
        type=int,
        metavar="N",
        help="sampling seed; completion k of a turn is sent N + k (default: none sent)",
    )
    run.add_argument(
        "--reasoning-effort",
        choices=REASONING_EFFORTS,
        help="OpenRouter reasoning.effort, not with --reasoning-max-tokens (default: none "
        "sent, the model's own)",
    )
    run.add_argument(
        "--reasoning-max-tokens",
        type=_positive_int,
        metavar="N",
        help="OpenRouter reasoning.max_tokens, not with --reasoning-effort (default: none sent)",
    )
    run.add_argument(
        "--chat-template-kwargs",
        type=_json_object,
        metavar="JSON",
        help="template variables as a JSON object, e.g. '{\"enable_thinking\": false}': sent "
        "to vLLM/SGLang as chat_template_kwargs and used to render the prompt locally; in "
        "draftgen.toml the [chat_template_kwargs] table (default: none, the template's own)",
    )
    from draftgen.inputs.ingest import INPUT_FORMATS

    run.add_argument(
        "--input-format",
        choices=INPUT_FORMATS,
        default="auto",
        help="how to read --input (and [[datasets]] without a format): auto picks by name "
        "(.jsonl, .json array, .parquet, a datasets.save_to_disk directory); hf reads files "
        "with datasets.load_dataset; glaive reads glaive function-calling rows (default auto)",
    )


def _add_shards(run: argparse.ArgumentParser) -> None:
    """`run`'s shard and Ray options; `merge` combines the shards (docs/merge.md)."""
    run.add_argument(
        "--shard",
        type=_shard,
        metavar="I/N",
        help="run only shard I of N (0 <= I < N), a fixed subset by prompt key, into its own "
        "--out; draftgen merge combines the shards (default: every row)",
    )
    run.add_argument(
        "--ray",
        type=_positive_int,
        metavar="N",
        help="run N shards as Ray tasks into RUN_DIR/shards/I, then merge them into RUN_DIR "
        "(needs pip install 'draftgen[ray]'; default: no Ray)",
    )
    run.add_argument(
        "--ray-address",
        metavar="ADDRESS",
        help="Ray cluster to join, e.g. auto or ray://head:10001 (default: a local Ray on "
        "this machine)",
    )


def _add_merge(commands) -> None:
    merge = commands.add_parser(
        "merge", help="combine run directories (shards) into a new one, deduplicated by key"
    )
    merge.add_argument(
        "run_dirs",
        nargs="+",
        type=Path,
        metavar="RUN_DIR",
        help="run directories to combine (the shards of one run)",
    )
    _add_out(merge, "RUN_DIR", "new run directory")


def _add_batch(run: argparse.ArgumentParser) -> None:
    """`run`'s batch mode (docs/batch.md); [batch] in draftgen.toml."""
    from draftgen.generate.batch.dialects import DIALECT_NAMES

    run.add_argument(
        "--batch",
        action="store_true",
        help="generate through a batch API (about half the price; answers in minutes to hours) "
        "instead of live requests: the same plan, store, verification and exports; a "
        "conversation advances one turn per batch round (see docs/batch.md)",
    )
    run.add_argument(
        "--batch-dialect",
        choices=DIALECT_NAMES,
        default=_default("batch_dialect"),
        help="openrouter: requests inline in POST /batches; openai-files: a JSONL upload to "
        "/files, then /batches (OpenAI, Kimi, DeepInfra, Groq) "
        f"(default {_shown('batch_dialect')})",
    )
    run.add_argument(
        "--batch-url",
        metavar="URL",
        help="the batch API's root, e.g. https://openrouter.ai/api/v1 (or /api/beta) or "
        "https://api.moonshot.ai/v1 (default: --base-url)",
    )
    run.add_argument(
        "--batch-model",
        metavar="SLUG",
        help="the model named in each batch, e.g. MODEL:batch where the API wants the catalog "
        "variant (default: --model)",
    )
    run.add_argument(
        "--batch-size",
        type=_positive_int,
        metavar="N",
        help="rows per batch at most (default: the dialect's limit, 5000 for openrouter, 50000 "
        "for openai-files)",
    )
    run.add_argument(
        "--batch-detach",
        action="store_true",
        help="submit the batches that are ready and exit; the same command stores their "
        "results and sends the next round",
    )
    run.add_argument(
        "--batch-poll",
        type=float,
        default=_default("batch_poll"),
        metavar="SECONDS",
        help="first wait between polls of the batches in flight, growing to 60 "
        f"(default {_shown('batch_poll')})",
    )
    run.add_argument(
        "--batch-retries",
        type=_non_negative_int,
        default=_default("batch_retries"),
        metavar="N",
        help="times a row is sent again after its batch failed, expired or was cancelled "
        f"(default {_shown('batch_retries')})",
    )
    run.add_argument(
        "--batch-grace",
        type=float,
        default=_default("batch_grace"),
        metavar="SECONDS",
        help="how long a batch whose create got no answer may stay unseen in the API's listing "
        f"before its rows count as never sent and are sent again (default {_shown('batch_grace')})",
    )


def _add_cancel(commands) -> None:
    cancel = commands.add_parser(
        "cancel", help="cancel a run's batches in flight (run --batch), where the API allows it"
    )
    _add_run_dir(cancel)
    cancel.add_argument(
        "--api-key-env",
        type=_env_name,
        metavar="VAR",
        help="the NAME of the environment variable holding the API key (default: the one the "
        "run used)",
    )


def _add_simulated_batches(simulate: argparse.ArgumentParser) -> None:
    """`simulate`'s batch APIs: faults, timeline, log."""
    simulate.add_argument(
        "--batch-fault",
        action="append",
        default=[],
        metavar="NAME=RATE",
        help="inject a batch fault at a rate, e.g. expire=0.1; repeatable",
    )
    simulate.add_argument(
        "--batch-seconds",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="how long a batch's rows take once validated, spread evenly (default 1)",
    )
    simulate.add_argument(
        "--batch-visible-after",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="OpenRouter batches answer 404 (and are not listed) this long after their 202 "
        "(default 1)",
    )
    simulate.add_argument(
        "--batch-log",
        type=Path,
        metavar="FILE",
        help="append one JSON line per batch created (its custom_ids and body hashes) and per "
        "batch ended (status, rows delivered, cost)",
    )


def _add_estimate(estimate: argparse.ArgumentParser, run: argparse.ArgumentParser) -> None:
    from draftgen.cli.config import share_arguments

    share_arguments(run, estimate, ESTIMATE_SHARED)
    estimate.add_argument(
        "--pilot",
        type=int,
        default=0,
        metavar="N",
        help="send N prompts to the endpoint first and measure output length and speed "
        "(default 0: assume max_tokens)",
    )
    estimate.add_argument(
        "--price-in",
        type=float,
        metavar="USD",
        help="USD per million prompt tokens (default: from the endpoint's model listing)",
    )
    estimate.add_argument(
        "--price-out",
        type=float,
        metavar="USD",
        help="USD per million completion tokens (default: from the endpoint's model listing)",
    )
    estimate.add_argument(
        "--tokens-per-second",
        type=float,
        default=30.0,
        metavar="N",
        help="output speed of one request when no pilot measured it (default 30)",
    )
    estimate.add_argument("--json", action="store_true", help="print the estimate as JSON")


def _add_logging(parser: argparse.ArgumentParser) -> None:
    """Global options: given before the command (draftgen --log-json run ...)."""
    from draftgen.logs import LEVELS

    parser.add_argument(
        "--log-level",
        choices=LEVELS,
        default="info",
        help="least severe log records written to stderr (default info; debug adds one line "
        "per request attempt)",
    )
    parser.add_argument(
        "--log-json",
        action="store_true",
        help="write every line on stderr as JSON (ts, level, logger, message, fields): log "
        "records, errors and notices alike; a run's live display gives way to its progress "
        "records",
    )


def _add_init(commands) -> None:
    init = commands.add_parser("init", help="write a commented draftgen.toml here")
    init.add_argument("--force", action="store_true", help="overwrite an existing draftgen.toml")


def _subcommand(name: str) -> argparse.ArgumentParser:
    """The subparser of ``name``, as ``main`` builds it (configs are checked against it)."""
    command = _subparsers(build_parser()).get(name)
    if command is None:
        raise LookupError(name)
    return command


def _resolved(args: argparse.Namespace, command: str) -> argparse.Namespace:
    """``args`` with the config file and the defaults under them; required options checked."""
    from draftgen.cli.config import ConfigError, resolve

    run_parser = _subcommand("run")
    merged, path = resolve(args, run_parser, {"estimate": _subcommand("estimate")}, command)
    if path is not None:
        print(f"draftgen: settings from {path}", file=sys.stderr)
    where = f"in {path}" if path is not None else "in draftgen.toml (draftgen init writes one)"
    needed = ("model", "tokenizer") + (("out",) if command == "run" else ())
    for dest in needed:
        if getattr(merged, dest) is None:
            raise ConfigError(f"no --{dest} given: pass it, or set {dest} = ... {where}")
    if not merged.input and not merged.datasets:
        raise ConfigError(
            f"no prompts given: pass --input FILE, or set input = [...] or [[datasets]] {where}"
        )
    return merged


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--log-json" not in argv:
        return _main(argv)
    # Every line on stderr is JSON, from the first (a flag argparse refuses) to the last.
    from draftgen.logs import JsonLineStream

    stream, saved = JsonLineStream(sys.stderr), sys.stderr
    sys.stderr = stream
    try:
        return _main(argv)
    finally:
        stream.finish()
        sys.stderr = saved


def _say_error(text: str) -> None:
    """An error for the user on stderr (a JSON record of level error under --log-json)."""
    stream = sys.stderr
    level = getattr(stream, "level", None)
    if level is not None:
        stream.level = "error"
    try:
        print(text, file=stream)
    finally:
        if level is not None:
            stream.level = level


def _main(argv: list[str]) -> int:
    # Unless an argument names an engine command, the command run is none of them.
    engine = any(arg in ENGINE_COMMANDS for arg in argv)
    args = build_parser(engine_options=engine).parse_args(argv)
    from draftgen.logs import configure

    configure(args.log_level, args.log_json)
    try:
        return COMMANDS[args.command](args)
    except KeyboardInterrupt:
        _say_error("draftgen: interrupted; everything stored so far is kept")
        return 130
    except BrokenPipeError:
        # The reader of stdout stopped (``status --json | head``): nothing is wrong, say nothing.
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except OSError as exc:  # a path the user gave that cannot be read or written
        where = f": {exc.filename}" if exc.filename else ""
        _say_error(f"draftgen: {shown(f'{exc.strerror or exc}{where}')}")
        return EXIT_ERROR
    except Exception as exc:
        if _is_user_error(exc):
            _say_error(f"draftgen: {shown(str(exc))}")
            return EXIT_ERROR
        if args.log_level == "debug":
            raise
        # A bug, not a usage error: one line, and where to get the whole story.
        _say_error(
            f"draftgen: internal error: {exc.__class__.__name__}: "
            f"{shown(str(exc).splitlines()[0] if str(exc) else '')} (rerun with "
            "draftgen --log-level debug ... for the traceback, and please report it)"
        )
        return EXIT_INTERNAL


def shown(text: str) -> str:
    """A message that may quote a server or a file, as it may be printed: keys masked, control
    characters (ANSI escapes among them) written as escapes."""
    return printable(redact(text), newlines=True)


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's last flush cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def _is_user_error(exc: Exception) -> bool:
    """Errors the user can act on: every one derives from ``DraftgenError``."""
    from draftgen.errors import DraftgenError

    return isinstance(exc, DraftgenError)


def cmd_run(args: argparse.Namespace) -> int:
    from draftgen.api import Run
    from draftgen.run.pipeline import RunOptions

    args = _resolved(args, "run")
    options = _options(RunOptions, args)
    if args.ray is not None:
        from draftgen.run.ray_runner import run_on_ray

        summary = run_on_ray(options, args.ray, address=args.ray_address)
    else:
        summary = Run(options).execute()
    print(format_status(summary.counts, args.out))
    if summary.stopped == "interrupted":
        print(
            "draftgen: interrupted; everything stored is kept and the same command resumes",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    if summary.stopped:
        print(f"draftgen: stopped: {shown(summary.stopped)}", file=sys.stderr)
        return EXIT_STOPPED
    return 0


def _options(cls: type, args: argparse.Namespace, **given: object):
    """``cls`` (RunOptions or a subclass) from the resolved flags named like its fields."""
    import dataclasses

    values = {
        f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if hasattr(args, f.name)
    }
    values["inputs"] = args.input or []
    if hasattr(args, "completions_per_turn"):
        values["samples"] = args.completions_per_turn  # RunOptions' name for it
    return cls(**{**values, **given})


def cmd_merge(args: argparse.Namespace) -> int:
    from draftgen.run.pipeline import open_existing
    from draftgen.store.merge import merge_runs

    summary = merge_runs(args.run_dirs, args.out)
    print(
        f"merged {summary.runs} runs into {summary.out} in {summary.seconds:.2f} s: "
        f"{summary.completions} completions, {summary.failures} failures, {summary.rejected} "
        f"rejected rows; {summary.shared_keys} keys were in more than one run (kept once); "
        f"shard {summary.shard}"
    )
    with open_existing(args.out) as store:
        print(format_status(store.counts(), args.out))
    return 0


def cmd_init(args: argparse.Namespace) -> int:
    from draftgen.cli.config import CONFIG_NAME, write_example

    path = write_example(Path(CONFIG_NAME), _subcommand("run"), force=args.force)
    print(f"wrote {path}; edit it, then: draftgen estimate, draftgen run")
    return 0


def cmd_estimate(args: argparse.Namespace) -> int:
    import orjson

    from draftgen.run.estimate import EstimateOptions, estimate, format_estimate

    args = _resolved(args, "estimate")
    # The pilot and the price listing go to the first endpoint of a fleet.
    first = args.base_url or [e.url for e in args.endpoints or []] or None
    options = _options(EstimateOptions, args, base_url=first, endpoints=None)
    result = asyncio.run(estimate(options))
    if args.json:
        print(orjson.dumps(result.as_dict(), option=orjson.OPT_INDENT_2).decode())
    else:
        print(format_estimate(result))
    return 0


def _say_snapshot(snapshot, run_dir: Path) -> None:
    """What a read of a run directory left out (a run is active) or did first (reconstructed)."""
    if snapshot.active_run is not None:
        print(
            f"draftgen: a run is active in {run_dir} (draftgen {snapshot.active_run}): this is a "
            f"snapshot of the samples reconstructed so far; {snapshot.left_out} "
            "completions stored but not yet reconstructed are left out, so run it again "
            "once the run has finished",
            file=sys.stderr,
        )
    elif snapshot.reconstructed:
        print(
            f"reconstructed {snapshot.reconstructed} samples the run had not reached (it was "
            "interrupted)"
        )


def cmd_export(args: argparse.Namespace) -> int:
    from draftgen.api import RunDir

    written, snapshot = RunDir.open(args.run_dir).export(
        args.format, args.out, args.include_unverified, args.force
    )
    _say_snapshot(snapshot, args.run_dir)
    print(f"wrote {written} rows to {args.out}")
    return 0


def cmd_vocab(args: argparse.Namespace) -> int:
    from draftgen.api import RunDir

    run_dir = RunDir.open(args.run_dir)
    mapping, paths, size, snapshot = run_dir.vocab(
        args.size, args.out, args.vocab_size, args.include_unverified
    )
    _say_snapshot(snapshot, args.run_dir)
    if args.vocab_size is None:
        print(
            f"target vocabulary: {size} ids (the tokenizer {run_dir.tokenizer}); pass "
            "--vocab-size if the model's config.json says otherwise"
        )
    print(
        f"draft vocabulary of {len(mapping.used_ids)} ids covers {mapping.coverage:.2%} of "
        f"{mapping.supervised_tokens} generated tokens in {mapping.samples} samples"
    )
    print("wrote " + ", ".join(str(path) for path in paths))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from draftgen.api import RunDir

    json_path, html_path = RunDir.open(args.run_dir).report()
    print(f"wrote {html_path} and {json_path}")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    import orjson

    from draftgen.api import RunDir

    runs = RunDir.runs_under(args.run_dir)
    if runs:  # a folder of runs: one line each
        listed = {str(run.path): run.status() for run in runs}
        if args.json:
            print(orjson.dumps({"runs": listed}, option=orjson.OPT_INDENT_2).decode())
        else:
            print(format_run_list(listed, args.run_dir))
        return 0
    counts = RunDir.open(args.run_dir).status()
    if args.json:
        print(orjson.dumps(counts, option=orjson.OPT_INDENT_2).decode())
    else:
        print(format_status(counts, args.run_dir))
    return 0


def format_run_list(listed: dict[str, dict], folder: Path) -> str:
    """The runs of a folder, a line each: samples, verified, failures, cost, and whether one is
    active."""
    lines = [f"{folder} holds {len(listed)} draftgen run{'s' if len(listed) != 1 else ''}:"]
    width = max(len(path) for path in listed)
    for path, counts in listed.items():
        failures = sum((counts.get("failures") or {}).values())
        share = f" ({counts['verified'] / counts['samples']:.1%})" if counts["samples"] else ""
        active = "  (active)" if counts.get("active_run") else ""
        lines.append(
            f"  {path:<{width}}  {counts['completions']} completions, {counts['samples']} "
            f"samples, verified {counts['verified']}{share}, {failures} failures, "
            f"${counts['cost']:.4f}{active}"
        )
    lines.append("draftgen status RUN_DIR shows one of them in full")
    return "\n".join(lines)


def cmd_cancel(args: argparse.Namespace) -> int:
    from draftgen.run.cancel import cancel_batches

    for line in asyncio.run(cancel_batches(args.run_dir, args.api_key_env)):
        print(shown(line))
    return 0


def cmd_simulate(args: argparse.Namespace) -> int:
    from draftgen.simulator import serve_forever

    serve_forever(simulator_config(args), host=args.host, port=args.port)
    return 0


def simulator_config(args: argparse.Namespace):
    """The ``SimConfig`` that ``draftgen simulate`` serves with these flags."""
    from draftgen.simulator import SimConfig

    return SimConfig(
        tokenizer=args.tokenizer,
        profile=args.profile,
        seed=args.seed,
        faults=_rates(args.fault, "--fault"),
        quirks=_rates(args.quirk, "--quirk"),
        retry_after=args.retry_after,
        min_tokens=args.min_tokens,
        max_tokens=args.max_tokens,
        latency=args.latency,
        chunk_delay=args.chunk_delay,
        truth_path=args.truth,
        fatal_after=args.fatal_after,
        stall_seconds=args.stall_seconds,
        dialect=args.dialect,
        fail_after=args.fail_after,
        batch_faults=_rates(args.batch_fault, "--batch-fault"),
        batch_seconds=args.batch_seconds,
        batch_visible_after=args.batch_visible_after,
        batch_log_path=args.batch_log,
    )


def format_status(counts: dict, run_dir: Path) -> str:
    from draftgen.store.database import REJECTED_NAME

    retried = counts.get("retried_errors") or {}
    kinds = ", ".join(f"{printable(kind)} {count}" for kind, count in retried.items())
    share = f" ({counts['verified'] / counts['samples']:.1%})" if counts["samples"] else ""
    lines = [
        f"run {run_dir}",
        f"  rows rejected       {counts.get('rejected', 0)}"
        + (f"  (reasons in {run_dir / REJECTED_NAME})" if counts.get("rejected") else ""),
        f"  completions stored  {counts['completions']}  (cost ${counts['cost']:.4f}, "
        f"tokens {counts['prompt_tokens']} prompt + {counts['completion_tokens']} completion, "
        f"{counts['retried_attempts']} retried attempts)",
        f"  retried errors      {sum(retried.values())}" + (f"  ({kinds})" if kinds else ""),
        f"  samples             {counts['samples']}  verified {counts['verified']}{share}, "
        f"truncated {counts['truncated']}, not yet reconstructed {counts['unreconstructed']}",
    ]
    for title, table in (
        ("verification", counts["reasons"]),
        ("finish reasons", counts["finish_reasons"]),
        ("final failures", counts["failures"]),
    ):
        lines.append(f"  {title}:" + ("" if table else " none"))
        # Finish reasons and failure reasons are the servers' words: printed defused.
        lines.extend(f"    {printable(name):<28} {count}" for name, count in table.items())
    rejected = counts.get("rejected_reasons") or {}
    lines.append("  rejected rows:" + ("" if rejected else " none"))
    lines.extend(f"    {count:>6}  {printable(kind)}" for kind, count in rejected.items())
    if counts.get("active_run"):
        lines.insert(
            1,
            f"  run active          draftgen {counts['active_run']} is working on this directory: "
            "these counts are a snapshot",
        )
    lines.extend(format_exactness(counts.get("exactness") or {}))
    lines.extend(format_endpoints(counts.get("endpoints") or {}))
    lines.extend(format_batches(counts.get("batches") or {}))
    return "\n".join(lines)


def format_batches(batches: dict) -> list[str]:
    """Batches of run --batch: those in flight, the final ones, and what the API charged."""
    if not batches:
        return []  # a live run
    final = ", ".join(f"{count} {printable(status)}" for status, count in batches["final"].items())
    lines = [
        f"  batches:  {len(batches['in_flight'])} in flight ({batches['rows_in_flight']} rows), "
        f"{sum(batches['final'].values())} final" + (f" ({final})" if final else ""),
        f"    rows sent {batches['rows_sent']}, answered {batches['rows_answered']}, sent again "
        f"after a failed, expired or cancelled batch {batches['rows_sent_again']}",
    ]
    charged = batches.get("charged")
    if charged is not None:
        lines.append(
            f"    charged by the API ${charged:.4f} (batch usage.cost); rows stored "
            f"${batches['rows_cost']:.4f}"
            + (
                f"; ${charged - batches['rows_cost']:.4f} billed for rows that never came back"
                if charged - batches["rows_cost"] > 1e-9
                else ""
            )
        )
    else:
        lines.append("    charged: the API reports no batch cost (openai-files): see the tokens")
    for batch in batches["in_flight"]:
        name = batch["batch_id"] or f"intent {batch['nonce']} (create unconfirmed)"
        status = batch["status"] or ("not yet seen" if batch["batch_id"] else "reconciling")
        lines.append(f"    {printable(name)}: {printable(status)}, {batch['rows']} rows")
    if batches["in_flight"]:
        lines.append(
            "    the same run command (or run --batch-detach) stores their results; draftgen "
            "cancel RUN_DIR cancels them"
        )
    return lines


def format_endpoints(endpoints: dict) -> list[str]:
    """Per endpoint: attempts, completions, failed attempts by kind, ejections, latency, tokens."""
    if not endpoints:
        return []  # a store from before endpoints were recorded
    lines = ["  endpoints:"]
    for url, row in endpoints.items():
        kinds = ", ".join(
            f"{printable(kind)} {count}" for kind, count in row["error_kinds"].items()
        )
        latency = row["latency_mean"]
        state = []
        if row["ejections"]:
            state.append(f"ejected {row['ejections']}x, readmitted {row['readmissions']}x")
        if row["removed"]:
            state.append("removed (misconfigured)")
        lines.append(f"    {printable(url)}" + (f"  [{'; '.join(state)}]" if state else ""))
        errors = f"errors {row['errors']}" + (f" ({kinds})" if kinds else "")
        seconds = f"{latency:.3f} s" if latency is not None else "-"
        lines.append(
            f"      requests {row['requests']}  completions {row['completions']}  {errors}  "
            f"latency {seconds}  tokens {row['prompt_tokens']} prompt + "
            f"{row['completion_tokens']} completion"
        )
    return lines


def format_exactness(exactness: dict) -> list[str]:
    """Where the ids came from, how many are proven, and how far the text path can be trusted."""
    sources = exactness.get("id_sources") or {}
    lines = ["  exactness:" + ("" if sources else " none")]
    for source, row in sources.items():
        share = row["verified"] / row["samples"] if row["samples"] else 0.0
        lines.append(
            f"    ids from {source:<19} {row['samples']}  verified {row['verified']} ({share:.1%})"
        )
    checks = exactness.get("text_checks") or {}
    if checks:
        agreement = exactness.get("text_agreement") or 0.0
        lines.append(
            f"    text path agrees with server ids in {agreement:.1%} of "
            f"{sum(checks.values())} samples:"
        )
        lines.extend(f"      {name:<26} {count}" for name, count in checks.items())
    return lines


def _rates(pairs: list[str], flag: str) -> dict[str, float]:
    from draftgen.simulator.config import SimConfigError

    rates = {}
    for pair in pairs:
        name, _, rate = pair.partition("=")
        try:
            rates[name] = float(rate)
        except ValueError:
            raise SimConfigError(f"{flag} {pair!r} is not NAME=RATE, e.g. drift=0.05") from None
    return rates


def _temperature(text: str) -> float:
    value = _float(text)
    if not 0 <= value <= 2:
        raise argparse.ArgumentTypeError(f"{text} is not within 0..2 (OpenRouter's range)")
    return value


def _unit_float(text: str) -> float:
    value = _float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{text} is not within 0 < P <= 1")
    return value


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{described(text)} is not a number") from None


class _AppendUrl(argparse.Action):
    """``--base-url`` given again adds an endpoint. Not argparse's "append": a config file's
    ``base_url = "..."`` stays one string, as before several endpoints existed."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        given = getattr(namespace, self.dest, None)
        urls = list(given) if isinstance(given, list) else []
        setattr(namespace, self.dest, [*urls, values])


def _shard(text: str):
    from draftgen.inputs.shard import ShardError, parse_shard

    try:
        return parse_shard(text)
    except ShardError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _json_object(text: str) -> dict:
    """``--chat-template-kwargs``: a JSON object of template variables."""
    try:
        value = json.loads(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            "is not valid JSON; give an object such as '{\"enable_thinking\": false}'"
        ) from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object of template variables")
    return value


def _number(text: str) -> str:
    """A flag's value in its error: a number as written, anything else ``described``."""
    return text if NUMBER.fullmatch(text) else described(text)


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{_number(text)} is not a whole number of 0 or more")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{_number(text)} is not a positive integer")
    return value


def _env_name(text: str) -> str:
    """``--api-key-env``: a variable's name. A key given here instead is refused unshown."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", text):
        raise argparse.ArgumentTypeError(
            "this takes the name of an environment variable (like OPENROUTER_API_KEY), and what "
            f"was given is not one (not shown: it may be a key); {KEYS_GO_IN_THE_ENVIRONMENT}"
        )
    return text


COMMANDS = {"run": cmd_run, "export": cmd_export, "status": cmd_status, "simulate": cmd_simulate}
COMMANDS.update(vocab=cmd_vocab, report=cmd_report)
COMMANDS.update(init=cmd_init, estimate=cmd_estimate)
COMMANDS.update(merge=cmd_merge)
COMMANDS.update(cancel=cmd_cancel)

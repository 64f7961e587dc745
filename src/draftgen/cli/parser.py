"""The ``draftgen`` parser: ``run`` and ``estimate`` options made from the declarations in
``draftgen.options``, the other commands' own, and errors of one line that never echo a key."""

from __future__ import annotations

import argparse
import difflib
import functools
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from draftgen import __version__
from draftgen.options import (
    COMMAND_SETTINGS,
    GROUPS,
    KEYS_GO_IN_THE_ENVIRONMENT,
    POSITIVE,
    EstimateOptions,
    OptionError,
    Setting,
    checked_text,
    command_settings,
    export_format_help,
    export_formats,
    profile_names,
    renamed_flags,
    setting_named,
    simulator_settings,
    vocab_trainers,
)
from draftgen.redact import described, printable, redact

EXIT_ERROR = 2  # the run cannot go on as asked: the message says why
# Unknown flags that look like an attempt to pass a key on the command line.
_KEY_FLAG = re.compile(r"(?i)key|token|secret|passw|auth|bearer")


def say_error(text: str) -> None:
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
        offered = _ARGPARSE_CHOICES.search(message)
        choices = [_unquoted(c) for c in _QUOTED.findall(offered.group(1))] if offered else []
        message = _ARGPARSE_VALUE.sub(
            lambda m: m.group("what") + described(_unquoted(m.group("value")), choices), message
        )
        say_error(f"{self.prog}: {printable(redact(message))} (see {self.prog} --help)")
        self.exit(EXIT_ERROR)

    def parse_args(self, args=None, namespace=None):
        namespace, extras = self.parse_known_args(args, namespace)
        if extras:
            command = subparsers(self).get(getattr(namespace, "command", None) or "")
            (command or self).error(unknown_arguments(extras, command or self))
        return namespace


# The value argparse quotes in its own errors (a type converter's ValueError, a wrong choice).
_ARGPARSE_VALUE = re.compile(
    r"(?P<what>invalid (?:\w+ value|choice): )(?P<value>'(?:[^'\\]|\\.)*'|\"[^\"]*\")"
)


# The choices argparse lists after a wrong one ("(choose from 'a', 'b')"), each quoted.
_ARGPARSE_CHOICES = re.compile(r"\(choose from (.*)\)")
_QUOTED = re.compile(r"'(?:[^'\\]|\\.)*'|\"[^\"]*\"")


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
    if len(flags) == 1:
        flag = flags[0]
        renamed = renamed_flags()
        if flag in renamed:
            return f"{flag} was renamed {renamed[flag]}"
        close = closest_option(flag, parser)
        if _KEY_FLAG.search(flag):
            if close is None or "key" in close:
                return (
                    f"unknown option {flag} (its value is not shown); {KEYS_GO_IN_THE_ENVIRONMENT}"
                )
            return f"unknown option {flag} (its value is not shown); did you mean {close}?"
        hint = f"; did you mean {close}?" if close else ""
        return f"unknown option {flag}{hint}"
    if flags:
        # Every one named, with its own hint: fixing one at a time takes as many tries.
        named = [_unknown_flag(flag, parser) for flag in flags[:MAX_NAMED]]
        if len(flags) > MAX_NAMED:
            named.append(f"{len(flags) - MAX_NAMED} more")
        keys = any(_KEY_FLAG.search(flag) for flag in flags)
        return f"unknown options {', '.join(named)}" + (
            f"; {KEYS_GO_IN_THE_ENVIRONMENT}" if keys else ""
        )
    shown = ", ".join(described(value) for value in values[:3])
    return f"unexpected argument{'s' if len(values) > 1 else ''} {shown}"


MAX_NAMED = 5  # unknown flags named one by one in a message; the rest are counted


def _unknown_flag(flag: str, parser: argparse.ArgumentParser) -> str:
    """One unknown flag as a list of them names it: with what it was renamed or most likely
    meant, its value never shown."""
    renamed = renamed_flags()
    if flag in renamed:
        return f"{flag} (renamed {renamed[flag]})"
    close = closest_option(flag, parser)
    return f"{flag} (did you mean {close}?)" if close else flag


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


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


RUN_DIR_HELP = "a run directory (the --out of draftgen run)"
# The commands whose options take their choices from the run engine and the simulator:
# importing those (an HTTP client and server, ~0.2 s) would double the time of a small export,
# so ``main`` adds these options only when one of these commands may be the one to run.
ENGINE_COMMANDS = ("run", "simulate", "estimate", "providers")
ESTIMATE_HELP = (
    "Counts a run's prompt tokens and prices and times it before it spends anything. It takes "
    "every run flag: those that shape the requests, the endpoint and the prices are used, and "
    "a --max-cost below the estimate is noted; the ones about the run directory and how the run "
    "proceeds (--out, --batch-detach, --ray, --shard, ...) are ignored."
)


def build_parser(
    engine_options: bool = True,
    options: type = EstimateOptions,
    extra: Sequence[Setting] = COMMAND_SETTINGS,
) -> argparse.ArgumentParser:
    """The parser of every command; without ``engine_options``, the ``ENGINE_COMMANDS`` have
    their name and help (all ``draftgen --help`` lists) but no options. ``run`` and ``estimate``
    take the settings ``options`` (a RunOptions class) and ``extra`` declare."""
    parser = DraftgenParser(
        prog="draftgen",
        description="Regenerate prompt datasets with a target model and export exact token ids.",
    )
    _add_global(parser)
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="generate, store, reconstruct and verify (resumable)")
    _add_merge(commands)
    _add_cancel(commands)
    _add_export(commands)
    _add_vocab(commands)
    _add_report(commands)
    _add_status(commands)
    _add_show(commands)
    simulate = commands.add_parser("simulate", help="serve an OpenRouter-compatible simulator")
    _add_init(commands)
    estimate = commands.add_parser(
        "estimate",
        help="prompt tokens, cost and time of a run before spending (same flags as run)",
        description=ESTIMATE_HELP,
    )
    providers = _add_providers(commands)
    if engine_options:
        add_settings(run, command_settings("run", options, extra))
        add_settings(estimate, command_settings("estimate", options, extra))
        add_settings(providers, command_settings("providers", options, extra))
        _add_simulate(simulate)
    for command in subparsers(parser).values():
        _add_global(command, after_command=True)
    return parser


# -- options made from the declarations ----------------------------------------------------------


def add_settings(parser: argparse.ArgumentParser, settings: Sequence[Setting]) -> None:
    """An option for every declared setting with a flag, in ``GROUPS``' groups.

    Defaults stay out of ``parse_args`` (given flags can be told apart from defaults): each
    action keeps its setting's default as ``draftgen_default``, and the config resolver lays
    defaults, then the file, then the flags given over one another.
    """
    groups: dict[str, argparse._ArgumentGroup] = {}
    for declared in settings:
        if not declared.flag:
            continue
        if declared.group not in groups:
            groups[declared.group] = parser.add_argument_group(GROUPS[declared.group])
        action = _add_setting(groups[declared.group], declared)
        action.draftgen_default = action.default
        action.draftgen_setting = declared
        action.default = argparse.SUPPRESS


def _add_setting(group: argparse._ArgumentGroup, declared: Setting) -> argparse.Action:
    flags = [declared.short, declared.flag] if declared.short else [declared.flag]
    common = {"dest": declared.key, "help": declared.help_text(), "default": declared.default}
    if declared.kind is bool:
        if declared.negatable:
            return group.add_argument(*flags, action=argparse.BooleanOptionalAction, **common)
        return group.add_argument(*flags, action="store_true", **common)
    if declared.many:
        common["action"] = "append"
    elif declared.repeatable:
        common["action"] = _AppendUrl
    if declared.choices is not None:
        common["choices"] = declared.choices()
    if declared.metavar is not None:
        common["metavar"] = declared.metavar
    return group.add_argument(*flags, type=converter(declared), **common)


@functools.cache  # one converter per setting: the same function for every parser
def converter(declared: Setting):
    """The argparse ``type`` of a setting: argparse's own for a plain number or path (its
    messages), else the setting's parse and check with their sentences."""
    if declared.parse is None and declared.check is None:
        plain = declared.kind in (int, float) or (declared.kind is Path and not declared.many)
        return declared.kind if plain else None

    def convert(text: str):
        try:
            return declared.from_text(text)
        except OptionError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return convert


class _AppendUrl(argparse.Action):
    """``--base-url`` given again adds an endpoint. Not argparse's "append": a config file's
    ``base_url = "..."`` stays one string, as before several endpoints existed."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        given = getattr(namespace, self.dest, None)
        urls = list(given) if isinstance(given, list) else []
        setattr(namespace, self.dest, [*urls, values])


def _positive_int(text: str) -> int:
    try:
        return int(checked_text(text, int, POSITIVE))
    except OptionError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


# -- the other commands' options -----------------------------------------------------------------


def _add_profile(parser: argparse.ArgumentParser, what: str, when_not_given: str) -> None:
    """``--profile NAME``, its choices listed in the help: ``what`` it forces, and the default."""
    parser.add_argument(
        "--profile",
        choices=profile_names(),
        metavar="NAME",
        help=f"{what}: " + ", ".join(profile_names()) + f" (default: {when_not_given})",
    )


def _add_run_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR", help=RUN_DIR_HELP)


def _add_out(parser: argparse.ArgumentParser, metavar: str, help: str) -> None:
    """``-o/--out``: what a command writes (required)."""
    parser.add_argument("-o", "--out", required=True, type=Path, metavar=metavar, help=help)


def _add_include_unverified(parser: argparse.ArgumentParser, help: str) -> None:
    parser.add_argument("--include-unverified", action="store_true", help=help)


def _add_export(commands) -> None:
    export = commands.add_parser("export", help="write training files from a run")
    _add_run_dir(export)
    default, formats_help = export_format_help()
    export.add_argument("--format", default=default, choices=export_formats(), help=formats_help)
    _add_out(
        export,
        "PATH",
        "the file to write (a directory for --format hf and speculators); an earlier export of "
        "this run there is replaced, anything else only with --force",
    )
    _add_include_unverified(export, "also write unverified and truncated samples (verified: false)")
    add_settings(export, command_settings("export"))
    export.add_argument(
        "--force",
        action="store_true",
        help="replace an existing --out file even if it is not an earlier export of this run "
        "(and a speculators directory holding hidden_states/)",
    )
    export.add_argument(
        "--max-length",
        type=_positive_int,
        metavar="N",
        help="the length your trainer cuts rows at: the export says how many rows are longer "
        "(it always counts those longer than 2048, 4096 and 8192 ids); no row is changed",
    )
    export.add_argument(
        "--draft-vocab-size",
        type=_positive_int,
        default=32000,
        metavar="N",
        help="--format speculators: draft vocabulary size of d2t.npy / t2d.npy (default 32000)",
    )
    export.add_argument(
        "--vocab-size",
        type=_positive_int,
        metavar="N",
        help="--format speculators: target vocabulary size, the length of t2d.npy (the model "
        "config's vocab_size; default: the size of the tokenizer the run recorded)",
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
    _add_out(
        vocab,
        "DIR",
        "directory for vocab.json, vocab_mapping.npz and the trainers' files: "
        "vocab_mapping.pt (SpecForge), d2t.npy and t2d.npy (speculators)",
    )
    vocab.add_argument(
        "--for",
        dest="trainers",
        action="append",
        choices=vocab_trainers(),
        metavar="TRAINER",
        help="write this trainer's vocabulary files only: specforge (vocab_mapping.pt) or "
        "speculators (d2t.npy, t2d.npy); repeat it for both (the default)",
    )
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


def _add_show(commands) -> None:
    show = commands.add_parser(
        "show", help="one sample: its verdict and its tokens, prompt and answer, boundaries marked"
    )
    _add_run_dir(show)
    show.add_argument(
        "sample_id",
        metavar="ID",
        help="the sample's id as exports write it (SOURCE_ID:TURN) or key",
    )
    show.add_argument("--json", action="store_true", help="print the sample as JSON")


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


def _add_cancel(commands) -> None:
    cancel = commands.add_parser(
        "cancel", help="cancel a run's batches in flight (run --batch), where the API allows it"
    )
    _add_run_dir(cancel)
    cancel.add_argument(
        "--api-key-env",
        type=converter(setting_named("api_key_env")),
        metavar="VAR",
        help="the NAME of the environment variable holding the API key (default: the one the "
        "run used)",
    )


def _add_simulate(simulate: argparse.ArgumentParser) -> None:
    """Where the simulator listens, then every setting the simulator declares
    (``draftgen.simulator.config.SimConfig``): its flags are made from those declarations."""
    simulate.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)"
    )
    simulate.add_argument(
        "--port",
        type=int,
        default=8000,
        help="port to listen on; 0 picks a free one (default 8000)",
    )
    _add_config_flags(simulate)
    for declared in simulator_settings():
        extra: dict = {"metavar": declared.metavar}
        if declared.shape != "one":
            extra["action"] = "append"
        else:
            extra["type"] = declared.kind if declared.kind is not str else None
        if declared.choices:
            extra["choices"] = declared.choices()
            extra["metavar"] = declared.metavar or None
        if declared.name == "profile":
            extra["choices"] = profile_names()
        shown = _shown_default(declared.default)
        simulate.add_argument(
            declared.flag,
            dest=declared.name,
            default=None,  # not given: draftgen.toml's [simulator] key, else the declared default
            help=declared.help + (f" (default {shown})" if shown else ""),
            **extra,
        )


def _shown_default(default: object) -> str:
    """A simulator setting's default as --help says it ("" when there is none to show)."""
    if default is None or default in ({}, (), ""):
        return ""
    if isinstance(default, float):
        return f"{default:g}"
    return str(default)


def _add_config_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="read the [simulator] table of this draftgen.toml (default: ./draftgen.toml if "
        "there is one); flags win over it",
    )
    parser.add_argument(
        "--no-config", action="store_true", help="read no draftgen.toml, even ./draftgen.toml"
    )


GLOBAL_OPTIONS = "global options (also accepted before the command)"


def _add_global(parser: argparse.ArgumentParser, after_command: bool = False) -> None:
    """The global options, declared once: given before the command (draftgen --log-json run
    ...) or after it (draftgen run ... --log-json), to the same effect. A command's copy has no
    default, so it never undoes one given before the command."""
    from draftgen.logs import LEVELS

    group = parser.add_argument_group(GLOBAL_OPTIONS) if after_command else parser
    group.add_argument("--version", action="version", version=f"draftgen {__version__}")
    group.add_argument(
        "--log-level",
        choices=LEVELS,
        default=argparse.SUPPRESS if after_command else "info",
        help="least severe log records written to stderr (default info; debug adds one line "
        "per request attempt)",
    )
    group.add_argument(
        "--log-json",
        action="store_true",
        default=argparse.SUPPRESS if after_command else False,
        help="write every line on stderr as JSON (ts, level, logger, message, fields): log "
        "records, errors and notices alike; a run's live display gives way to its progress "
        "records",
    )


def global_dests() -> frozenset[str]:
    """The global options' names in a namespace: every command takes them besides its own."""
    parser = argparse.ArgumentParser(add_help=False)
    _add_global(parser)
    return frozenset(action.dest for action in parser._actions)


PROVIDERS_HELP = (
    "Lists the providers OpenRouter routes MODEL to (GET /models/AUTHOR/SLUG/endpoints): name, "
    "tag, price, quantization, context and status. With --probe N, sends each of them the probe "
    "set through a run of its own and ranks them by dollars per verified sample, then prints "
    "the [openrouter.provider] block to use. --tokenizer and the prompt and sampling flags are "
    "for --probe (and --simulate); see docs/providers.md."
)


def _add_providers(commands) -> argparse.ArgumentParser:
    providers = commands.add_parser(
        "providers",
        help="a model's providers and prices; --probe N judges them (docs/providers.md)",
        description=PROVIDERS_HELP,
    )
    providers.add_argument(
        "model", metavar="MODEL", help="the model's OpenRouter id, e.g. moonshotai/kimi-k2.5"
    )
    return providers


def _add_init(commands) -> None:
    init = commands.add_parser("init", help="write a commented draftgen.toml here")
    init.add_argument("--force", action="store_true", help="overwrite an existing draftgen.toml")


def subcommand(name: str) -> argparse.ArgumentParser:
    """The subparser of ``name``, as ``main`` builds it."""
    command = subparsers(build_parser()).get(name)
    if command is None:
        raise LookupError(name)
    return command

"""The ``draftgen`` command: parses flags, calls the library, prints errors as one sentence."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from draftgen.cli.parser import (
    ENGINE_COMMANDS,
    EXIT_ERROR,
    build_parser,
    converter,
    subcommand,
    subparsers,
)
from draftgen.cli.parser import say_error as _say_error
from draftgen.options import setting_named
from draftgen.redact import printable, redact
from draftgen.signals import SignalHandlers, SignalInterrupt

if TYPE_CHECKING:
    from draftgen.api import RunSummary

EXIT_STOPPED = 3  # stopped early on purpose (--max-cost); the same command resumes
EXIT_TURNS_FAILED = 4  # every turn worked, some failed for good; the same command retries them
EXIT_INTERNAL = 1  # a bug in draftgen: one line, the traceback with --log-level debug
EXIT_BROKEN_PIPE = 141  # the reader of stdout went away (status --json | head): 128 + SIGPIPE
# The parser is made from the declarations in draftgen.options (draftgen.cli.parser).
_subcommand, _subparsers = subcommand, subparsers
_env_name = converter(setting_named("api_key_env"))  # --api-key-env's check, as parsed
__all__ = ["EXIT_ERROR", "build_parser", "main"]


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


def _main(argv: list[str]) -> int:
    # Unless an argument names an engine command, the command run is none of them.
    engine = any(arg in ENGINE_COMMANDS for arg in argv)
    args = build_parser(engine_options=engine).parse_args(argv)
    from draftgen.logs import configure

    configure(args.log_level, args.log_json)
    try:
        return COMMANDS[args.command](args)
    except KeyboardInterrupt as exc:
        _say_error("draftgen: interrupted; everything stored so far is kept")
        # SIGTERM or SIGHUP raised as Ctrl-C (SignalInterrupt) exits as that signal would.
        return 128 + getattr(exc, "signum", signal.SIGINT)
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
    from draftgen.api import NothingStored, Run, RunOptions
    from draftgen.cli.present import format_status

    args = _resolved(args, "run")
    run = Run(_options(RunOptions, args))
    try:
        summary = run.execute() if args.ray is None else run.on_ray(args.ray, args.ray_address)
    except NothingStored as exc:  # the counts first, then the sentence, as for any run
        print(format_status(exc.summary.counts, args.out))
        raise
    print(format_status(summary.counts, args.out))
    return run_exit_code(summary)


def run_exit_code(summary: RunSummary) -> int:
    """The exit code of a run the library returned (``RunSummary.outcome``), its word said."""
    if summary.outcome == "interrupted":
        print(
            "draftgen: interrupted; everything stored is kept and the same command resumes",
            file=sys.stderr,
        )
        # 128 + the signal, as a shell reports a process it ended (not known: Ctrl-C's).
        return 128 + (summary.signal or signal.SIGINT)
    if summary.outcome == "stopped":
        print(f"draftgen: stopped: {shown(summary.stopped)}", file=sys.stderr)
        return EXIT_STOPPED
    if summary.outcome == "turns_failed":
        print(f"draftgen: {shown(summary.failed_turns)}", file=sys.stderr)
        return EXIT_TURNS_FAILED
    return 0


def _resolved(args: argparse.Namespace, command: str) -> argparse.Namespace:
    """``args`` with draftgen.toml and the defaults under them; required settings checked."""
    from draftgen.cli.config import resolved

    return resolved(args, command)


def _options(cls: type, args: argparse.Namespace):
    """``cls`` (RunOptions or EstimateOptions) from the resolved flags, checked as the library
    checks them."""
    from draftgen.cli.config import options_from
    from draftgen.options import EstimateOptions

    return options_from(args, "estimate" if issubclass(cls, EstimateOptions) else "run")


def cmd_merge(args: argparse.Namespace) -> int:
    from draftgen.api import RunDir, merge_runs
    from draftgen.cli.present import format_merge, format_status

    summary = merge_runs(args.run_dirs, args.out)
    print(format_merge(summary))
    print(format_status(RunDir.open(args.out).status(), args.out))
    return 0


def cmd_init(args: argparse.Namespace) -> int:
    from draftgen.cli.config import CONFIG_NAME, write_example

    path = write_example(Path(CONFIG_NAME), force=args.force)
    print(f"wrote {path}; edit it, then: draftgen estimate, draftgen run")
    return 0


def cmd_estimate(args: argparse.Namespace) -> int:
    from draftgen.api import EstimateOptions, Run
    from draftgen.cli.present import as_json, format_estimate

    args = _resolved(args, "estimate")
    result = Run(_options(EstimateOptions, args)).estimate()
    print(as_json(result.as_dict()) if args.json else format_estimate(result))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from draftgen.api import ExportOptions, RunDir
    from draftgen.cli.present import export_warnings, format_export, say_snapshot

    options = ExportOptions(
        include_unverified=args.include_unverified,
        proofs=getattr(args, "proofs", None),  # declared in draftgen.options: absent if not given
        force=args.force,
        max_length=args.max_length,
        draft_vocab_size=args.draft_vocab_size,
        target_vocab_size=args.vocab_size,
    )
    with ExportSignals() as signals:
        run_dir = RunDir.open(args.run_dir)
        summary, snapshot = run_dir.write_export(args.format, args.out, options)
        signals.complete = True
        say_snapshot(snapshot, args.run_dir)
        for warning in export_warnings(summary, args.max_length):
            print(f"draftgen: {warning}", file=sys.stderr)
        tokenizer = run_dir.tokenizer if summary.target_from_tokenizer else None
        print(format_export(summary, args.out, tokenizer))
    if signals.late is not None:
        _say_error(
            f"draftgen: {signal.Signals(signals.late).name} came once the export was complete: "
            f"{shown(str(args.out))} is kept, and the command ends as it would have"
        )
    return 0


class ExportSignals:
    """Ctrl-C, SIGTERM and SIGHUP around ``draftgen export``: until the library's export has
    returned they interrupt it (``SignalInterrupt``, a ``KeyboardInterrupt`` whose cleanup the
    library does; it holds them itself while it puts the file in place; exit 128 + the signal);
    once it has, the export is complete, so a signal is only noted (``late``) and the command
    prints what it wrote and exits 0."""

    def __init__(self) -> None:
        self.complete = False
        self.late: int | None = None
        self._handlers = SignalHandlers(self._on_signal)

    def __enter__(self) -> ExportSignals:
        self._handlers.install()
        return self

    def __exit__(self, *exc: object) -> None:
        self._handlers.restore()

    def _on_signal(self, signum: int, frame: object) -> None:
        if self.complete:
            self.late = signum
            return
        raise SignalInterrupt(signum)


def cmd_vocab(args: argparse.Namespace) -> int:
    from draftgen.api import RunDir
    from draftgen.cli.present import format_vocab, say_snapshot

    run_dir = RunDir.open(args.run_dir)
    mapping, paths, size, snapshot = run_dir.vocab(
        args.size, args.out, args.vocab_size, args.include_unverified, args.trainers
    )
    say_snapshot(snapshot, args.run_dir)
    sized = args.vocab_size is not None
    print(format_vocab(mapping, paths, size, None if sized else run_dir.tokenizer, sized))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from draftgen.api import RunDir

    json_path, html_path = RunDir.open(args.run_dir).report()
    print(f"wrote {html_path} and {json_path}")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from draftgen.api import status
    from draftgen.cli.present import as_json, format_run_list, format_status

    data = status(args.run_dir)
    if args.json:
        print(as_json(data))
    elif "runs" in data:  # a folder of runs: one line each
        print(format_run_list(data["runs"], args.run_dir))
    else:
        print(format_status(data, args.run_dir))
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from draftgen.api import RunDir
    from draftgen.cli.present import as_json, format_sample

    sample = RunDir.open(args.run_dir).sample(args.sample_id)
    print(as_json(sample) if args.json else format_sample(sample))
    return 0


def cmd_providers(args: argparse.Namespace) -> int:
    from draftgen.api import probe_providers, providers
    from draftgen.cli.config import options_from, resolve
    from draftgen.cli.present import as_json, format_probe, format_providers

    merged, path = resolve(args, "providers")
    if path is not None:
        print(f"draftgen: settings from {path}", file=sys.stderr)
    options = options_from(merged, "providers")
    if merged.probe is None:
        listed = providers(
            options.model,
            options.base_url,
            options.api_key_env,
            simulate=options.simulate,
            tokenizer=options.tokenizer,
            allow_insecure_http=options.allow_insecure_http,
        )
        rows = [endpoint.as_dict() for endpoint in listed]
        print(as_json(rows) if merged.providers_json else format_providers(rows, options.model))
        return 0
    report = probe_providers(options, merged.probe, merged.probe_out)
    print(as_json(report.as_dict()) if merged.providers_json else format_probe(report.as_dict()))
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    from draftgen.api import RunDir

    for line in RunDir.open(args.run_dir).cancel(args.api_key_env):
        print(shown(line))
    return 0


def cmd_simulate(args: argparse.Namespace) -> int:
    from draftgen.api import simulate

    simulate(simulator_config(args), host=args.host, port=args.port)
    return 0


def simulator_config(args: argparse.Namespace):
    """The ``SimConfig`` that ``draftgen simulate`` serves: each setting from its flag, else
    draftgen.toml's ``[simulator]`` key, else the simulator's declared default."""
    from draftgen.api import SimConfig
    from draftgen.cli.config import find_config, load_simulator_table
    from draftgen.options import simulator_settings, toml_value

    path = find_config(args)
    values = load_simulator_table(path) if path is not None else {}
    for declared in simulator_settings():
        given = getattr(args, declared.name, None)
        if given is None:
            continue
        # argparse converted a plain flag (its type); a repeatable one's values are gathered
        # as a draftgen.toml list is.
        repeated = declared.shape != "one"
        values[declared.name] = toml_value(declared, declared.flag, given) if repeated else given
    return SimConfig(**values)


COMMANDS = {"run": cmd_run, "export": cmd_export, "status": cmd_status, "simulate": cmd_simulate}
COMMANDS.update(vocab=cmd_vocab, report=cmd_report)
COMMANDS.update(init=cmd_init, estimate=cmd_estimate)
COMMANDS.update(merge=cmd_merge)
COMMANDS.update(cancel=cmd_cancel, show=cmd_show)
COMMANDS.update(providers=cmd_providers)

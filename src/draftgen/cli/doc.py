"""The CLI reference (docs/cli.md): the parser's own help text, and a table of the settings'
flags and draftgen.toml keys, both made from the declarations in ``draftgen.options``.

``python -m draftgen.cli.doc > docs/cli.md`` regenerates it; tests/cli/test_clidoc.py fails when the
checked-in file differs, so the reference never drifts from the flags.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable
from contextlib import contextmanager

from draftgen.options import Setting, every_setting

# argparse wraps help to the terminal's width ($COLUMNS); a fixed width keeps the file stable.
HELP_COLUMNS = 100


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The parser's commands by name, in the order ``--help`` lists them."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


@contextmanager
def _fixed_width():
    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(HELP_COLUMNS)
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = saved


def settings_table(settings: Iterable[Setting] | None = None) -> list[str]:
    """Every setting of run and estimate: its flag, its draftgen.toml key and its default."""
    lines = [
        "## Settings and their draftgen.toml keys",
        "",
        "| flag | key in draftgen.toml | commands | default |",
        "|---|---|---|---|",
    ]
    for declared in every_setting() if settings is None else settings:
        if not declared.flag or not declared.toml:
            continue
        key = f"[{declared.table}] {declared.key}" if declared.table else declared.key
        default = "" if declared.default is None else f"`{_toml(declared.default)}`"
        commands = ", ".join(declared.commands)
        lines.append(f"| `{declared.flag}` | `{key}` | {commands} | {default} |")
    return [*lines, ""]


def _toml(value: object) -> str:
    """A default as draftgen.toml spells it: true, 0.5, "auto"."""
    if isinstance(value, bool):
        return str(value).lower()
    return f'"{value}"' if isinstance(value, str) else str(value)


def render(
    parser: argparse.ArgumentParser | None = None, settings: Iterable[Setting] | None = None
) -> str:
    """docs/cli.md: the top-level help, then each command's help under its own heading, then
    the settings' keys."""
    if parser is None:
        from draftgen.cli.parser import build_parser

        parser = build_parser()
    parts = [
        "# CLI reference",
        "",
        "Generated from the parser by `python -m draftgen.cli.doc > docs/cli.md`; do not edit by "
        "hand (tests/cli/test_clidoc.py checks it is current). Each command has a guide: "
        "`docs/<command>.md`.",
        "",
        "Global options (`--log-level`, `--log-json`) go before or after the command, to the "
        "same effect: `draftgen --log-json run ...` or `draftgen run ... --log-json`.",
        "",
    ]
    with _fixed_width():
        parts += ["## `draftgen`", "", "```text", parser.format_help().rstrip(), "```", ""]
        for name, command in subcommands(parser).items():
            parts += [f"## `draftgen {name}`", "", f"Guide: [{name}.md]({name}.md)", ""]
            parts += ["```text", command.format_help().rstrip(), "```", ""]
    parts += settings_table(settings)
    return "\n".join(parts)


if __name__ == "__main__":
    sys.stdout.write(render())

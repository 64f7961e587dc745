"""The CLI reference (docs/cli.md), rendered from the parser's own help text.

``python -m draftgen.cli.doc > docs/cli.md`` regenerates it; tests/cli/test_clidoc.py fails when the
checked-in file differs, so the reference never drifts from the flags.
"""

from __future__ import annotations

import argparse
import os
import sys
from contextlib import contextmanager

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


def render(parser: argparse.ArgumentParser | None = None) -> str:
    """docs/cli.md: the top-level help, then each command's help under its own heading."""
    if parser is None:
        from draftgen.cli.main import build_parser

        parser = build_parser()
    parts = [
        "# CLI reference",
        "",
        "Generated from the parser by `python -m draftgen.cli.doc > docs/cli.md`; do not edit by "
        "hand (tests/cli/test_clidoc.py checks it is current). Each command has a guide: "
        "`docs/<command>.md`.",
        "",
        "Global options (`--log-level`, `--log-json`) go before the command: "
        "`draftgen --log-json run ...`.",
        "",
    ]
    with _fixed_width():
        parts += ["## `draftgen`", "", "```text", parser.format_help().rstrip(), "```", ""]
        for name, command in subcommands(parser).items():
            parts += [f"## `draftgen {name}`", "", f"Guide: [{name}.md]({name}.md)", ""]
            parts += ["```text", command.format_help().rstrip(), "```", ""]
    return "\n".join(parts)


if __name__ == "__main__":
    sys.stdout.write(render())

"""The docs follow the parser: docs/cli.md is current, every command has a page, and the recipe's
commands and config are accepted by the real parser and config loader."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from draftgen.cli import doc as clidoc
from draftgen.cli import main as cli
from draftgen.cli.config import load_config

DOCS = Path(__file__).resolve().parents[2] / "docs"
RECIPE = DOCS / "recipes" / "kimi-k2.5-openrouter.md"
K3_RECIPE = DOCS / "recipes" / "kimi-k3-openrouter.md"
SHELL_OPERATORS = ("|", "&", ";", ">", "<", "2>", "&>")


def test_cli_reference_is_current():
    regenerate = "run: .venv/bin/python -m draftgen.cli.doc > docs/cli.md"
    assert (DOCS / "cli.md").read_text(encoding="utf-8") == clidoc.render(), regenerate


def test_the_reference_does_not_depend_on_the_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "40")
    narrow = clidoc.render()
    monkeypatch.setenv("COLUMNS", "250")
    assert clidoc.render() == narrow
    assert "## `draftgen run`" in narrow and "--input-format" in narrow


def test_every_command_has_a_guide_page():
    names = list(clidoc.subcommands(cli.build_parser()))
    assert {"run", "estimate", "export", "vocab", "report", "status", "init"} <= set(names)
    missing = [name for name in names if not (DOCS / f"{name}.md").is_file()]
    assert missing == [], f"write docs/<command>.md for: {', '.join(missing)}"


def recipe_commands(text: str) -> list[list[str]]:
    """Every ``draftgen ...`` line of the page's bash blocks, as argv, shell redirections cut."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if not words or words[0] != "draftgen":
                continue
            argv = []
            for word in words[1:]:
                if word.startswith(SHELL_OPERATORS):
                    break
                argv.append(word)
            commands.append(argv)
    return commands


def test_recipe_commands_parse_with_the_real_parser():
    commands = recipe_commands(RECIPE.read_text(encoding="utf-8"))
    parser = cli.build_parser()
    seen = []
    for argv in commands:
        try:
            args = parser.parse_args(argv)
        except SystemExit:
            pytest.fail(f"the recipe's `draftgen {' '.join(argv)}` does not parse")
        seen.append(args.command)
    # The workflow the recipe promises, in its order.
    order = ["estimate", "run", "status", "report", "export", "vocab"]
    assert [c for c in dict.fromkeys(seen) if c in order] == order
    assert ["--log-json", "run"] == commands[seen.index("run")][:2]


def test_recipe_config_is_accepted_by_the_loader(tmp_path):
    text = RECIPE.read_text(encoding="utf-8")
    (toml,) = re.findall(r"```toml\n(.*?)```", text, re.S)
    path = tmp_path / "draftgen.toml"
    path.write_text(toml, encoding="utf-8")
    values = load_config(path)
    assert values["concurrency"] == 2000 and values["reasoning_effort"] == "high"
    assert values["model"] == "moonshotai/kimi-k2.5" and values["limit"] == 40000
    assert [d.name for d in values["datasets"]] == ["chat", "code", "tools", "math"]
    assert values["provider"]["enforce_distillable_text"] is True
    assert values["estimate.pilot"] == 50


def test_k3_recipe_commands_parse_and_its_config_loads(tmp_path):
    text = K3_RECIPE.read_text(encoding="utf-8")
    parser = cli.build_parser()
    seen = []
    for argv in recipe_commands(text):
        try:
            args = parser.parse_args(argv)
        except SystemExit:
            pytest.fail(f"the K3 recipe's `draftgen {' '.join(argv)}` does not parse")
        seen.append((args.command, argv))
    order = ["run", "status", "estimate", "report", "export", "vocab"]
    assert [c for c in dict.fromkeys(c for c, _ in seen) if c in order] == order
    dry_run = next(argv for command, argv in seen if command == "run")
    assert dry_run[dry_run.index("--tokenizer") + 1] == "fixture:kimi-k3"
    server = [argv for command, argv in seen if command == "run" and "--backend" in argv]
    assert server and server[0][server[0].index("--backend") + 1] == "vllm"
    (toml,) = re.findall(r"```toml\n(.*?)```", text, re.S)
    path = tmp_path / "draftgen.toml"
    path.write_text(toml, encoding="utf-8")
    values = load_config(path)
    assert values["model"] == "moonshotai/kimi-k3" and values["tokenizer"] == "moonshotai/Kimi-K3"
    assert values["reasoning_effort"] == "high" and values["max_tokens"] == 65536
    assert [d.name for d in values["datasets"]] == ["chat", "code", "tools"]
    assert values["provider"]["require_parameters"] is True

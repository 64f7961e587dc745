"""One declaration per setting: the parser, draftgen.toml, docs/cli.md and the checks of the CLI
and of the library all come from it, and agree; adding a setting is adding one field."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import pytest

from draftgen import DraftgenError, Run, RunOptions
from draftgen.cli import doc as clidoc
from draftgen.cli import main as cli
from draftgen.cli.config import ConfigError, example_text, load_config, top_level
from draftgen.cli.parser import build_parser, global_dests, subparsers
from draftgen.options import (
    COMMAND_SETTINGS,
    NO_ENDPOINT,
    SIMULATE_AND_ENDPOINT,
    EstimateOptions,
    OptionError,
    every_setting,
    setting,
    settings_of,
)

DOCS = Path(__file__).resolve().parent.parent / "docs"


def options_by_dest(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    own = {"help", *global_dests()}  # options every command takes
    return {a.dest: a for a in parser._actions if a.option_strings and a.dest not in own}


@pytest.mark.parametrize("command", ["run", "estimate"])
def test_the_parser_is_the_declarations(command):
    parser = subparsers(build_parser())[command]
    actions = options_by_dest(parser)
    declared = {s.key: s for s in every_setting() if command in s.commands and s.flag}
    assert set(actions) == set(declared)
    for key, item in declared.items():
        action = actions[key]
        assert item.flag in action.option_strings
        assert action.draftgen_default == item.default
        assert action.help == item.help_text()
        if item.choices is not None:
            assert list(action.choices) == list(item.choices())


def test_estimate_takes_every_run_flag():
    run, estimate = (options_by_dest(subparsers(build_parser())[c]) for c in ("run", "estimate"))
    assert set(run) <= set(estimate)
    assert set(estimate) - set(run) == {
        "pilot",
        "price_in",
        "price_out",
        "tokens_per_second",
        "json",
    }


def test_help_is_grouped():
    text = subparsers(build_parser())["run"].format_help()
    titles = ["input:", "endpoint:", "sampling:", "limits:", "batch:", "sharding:", "output:"]
    positions = [text.index("\n" + title) for title in titles]
    assert positions == sorted(positions)


def test_every_toml_key_is_a_declaration_and_the_doc_lists_them():
    keys = top_level()
    flagged = {s.key for s in every_setting() if s.toml and s.table is None and s.flag}
    assert flagged - {"config", "no_config"} <= set(keys)
    reference = (DOCS / "cli.md").read_text(encoding="utf-8")
    for item in every_setting():
        if item.flag and item.toml:
            key = f"[{item.table}] {item.key}" if item.table else item.key
            assert f"| `{item.flag}` | `{key}` |" in reference


# The values the CLI refuses, and its sentence for each (tests/cli pins the CLI's side).
REFUSED = [
    ("temperature", 5.0, "5.0 is not within 0..2 (OpenRouter's range)"),
    ("max_tokens", -1, "-1 is not a positive integer"),
    ("concurrency", 0, "0 is not a positive integer"),
    ("top_p", 0.0, "0.0 is not within 0 < P <= 1"),
    ("batch_retries", -2, "-2 is not a whole number of 0 or more"),
]


@pytest.mark.parametrize("name, value, sentence", REFUSED)
def test_the_library_refuses_what_the_cli_refuses_in_the_same_words(
    tmp_path, capsys, name, value, sentence
):
    (item,) = [s for s in settings_of(RunOptions) if s.name == name]
    with pytest.raises(OptionError) as caught:
        Run(RunOptions("p.jsonl", "m", "t", tmp_path / "out", **{name: value}))
    assert isinstance(caught.value, DraftgenError)
    assert str(caught.value) == f"{item.flag} {sentence}"
    with pytest.raises(SystemExit):
        cli.main(["run", item.flag, str(value)])
    assert f"argument {item.flag}: {sentence}" in capsys.readouterr().err
    config = tmp_path / "draftgen.toml"
    config.write_text(f"{item.key} = {value}\n")
    with pytest.raises(ConfigError) as refused:
        load_config(config)
    assert str(refused.value) == f"{config}: {item.key} = {value} is refused: {sentence}"


def test_the_library_refuses_a_wrong_choice_and_a_wrong_type(tmp_path):
    with pytest.raises(OptionError, match="--reasoning-effort must be one of none, .*not 'hgih'"):
        Run(RunOptions("p.jsonl", "m", "t", tmp_path, reasoning_effort="hgih"))
    with pytest.raises(OptionError, match="--concurrency must be an integer, not a string '8'"):
        Run(RunOptions("p.jsonl", "m", "t", tmp_path, concurrency="8"))


def test_inputs_take_a_path_or_a_list(tmp_path):
    assert RunOptions(tmp_path / "a.jsonl", "m", "t").inputs == [str(tmp_path / "a.jsonl")]
    assert RunOptions(["a", Path("b")], "m", "t").inputs == ["a", "b"]


def test_the_simulator_is_chosen_not_fallen_into(tmp_path, capsys):
    options = RunOptions("p.jsonl", "m", "t", tmp_path / "out")
    with pytest.raises(OptionError) as caught:
        options.check("run")
    assert str(caught.value) == NO_ENDPOINT
    assert "--base-url https://openrouter.ai/api/v1" in NO_ENDPOINT and "--simulate" in NO_ENDPOINT
    both = RunOptions("p.jsonl", "m", "t", tmp_path, simulate=True, base_url="http://a/v1")
    with pytest.raises(OptionError, match="drop one of them"):
        Run(both)
    RunOptions("p.jsonl", "m", "t", tmp_path, simulate=True).check("run")
    (tmp_path / "p.jsonl").write_text('{"messages": [{"role": "user", "content": "hi"}]}\n')
    argv = ["run", "--no-config", "--input", str(tmp_path / "p.jsonl"), "--model", "m"]
    argv += ["--tokenizer", "fixture:kimi-k2.5", "--out", str(tmp_path / "out")]
    assert cli.main(argv) == cli.EXIT_ERROR
    assert capsys.readouterr().err == f"draftgen: {NO_ENDPOINT}\n"
    assert not (tmp_path / "out").exists()  # refused before anything is written
    assert cli.main([*argv, "--simulate", "--base-url", "http://a/v1"]) == cli.EXIT_ERROR
    assert capsys.readouterr().err == f"draftgen: {SIMULATE_AND_ENDPOINT}\n"


def test_adding_a_setting_is_one_declaration(tmp_path):
    @dataclass
    class Extended(EstimateOptions):
        warp_factor: int = setting(
            3, kind=int, metavar="N", group="limits", help="how fast (default {default})"
        )

    parser = build_parser(options=Extended, extra=COMMAND_SETTINGS)
    run = subparsers(parser)["run"]
    args = parser.parse_args(["run", "--warp-factor", "7"])
    assert args.warp_factor == 7
    assert "--warp-factor N" in run.format_help() and "how fast (default 3)" in run.format_help()
    assert "| `--warp-factor` | `warp_factor` | run, estimate | `3` |" in clidoc.render(
        parser, every_setting(Extended)
    )
    assert "# warp_factor = 3  # how fast (default 3)" in example_text(every_setting(Extended))
    assert Extended.from_keys({"input": ["a"], "model": "m", "tokenizer": "t", "warp_factor": 9})
    assert "warp_factor" in top_level(every_setting(Extended))


def test_python_callers_get_sentences_for_unknown_and_missing_settings():
    from draftgen.options import EstimateOptions

    with pytest.raises(
        DraftgenError, match=r"RunOptions has no setting 'input': did you mean 'inputs'\?"
    ):
        RunOptions(input="x.jsonl", model="m", tokenizer="t", out="o")
    with pytest.raises(DraftgenError, match=r"EstimateOptions has no setting 'pilot_rowz'"):
        EstimateOptions(inputs="x.jsonl", model="m", tokenizer="t", pilot_rowz=3)
    with pytest.raises(DraftgenError, match=r"RunOptions needs tokenizer: give tokenizer=\.\.\."):
        RunOptions(inputs="x.jsonl", model="m")

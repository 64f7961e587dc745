"""``draftgen simulate``'s settings are declared once, by the simulator (SimConfig's fields):
its flags, its ``[simulator]`` table of draftgen.toml and docs/cli.md are made from them."""

from __future__ import annotations

import dataclasses

import pytest

from draftgen.cli import main as cli
from draftgen.cli.config import ConfigError
from draftgen.cli.main import simulator_config
from draftgen.simulator.config import SIM_FLAG, SimConfig, SimConfigError, simulator_flags


def parse(*argv: str):
    return cli.build_parser().parse_args(["simulate", *argv])


def test_every_declared_setting_is_a_flag_of_simulate():
    simulate = cli._subparsers(cli.build_parser())["simulate"]
    flags = {option for action in simulate._actions for option in action.option_strings}
    declared = [f for f in dataclasses.fields(SimConfig) if SIM_FLAG in f.metadata]
    assert len(declared) == len(simulator_flags()) >= 25
    for name, flag, _ in simulator_flags():
        assert flag.flag in flags, name
    # The CLI declares only where the simulator listens, and which file it reads.
    own = flags - {flag.flag for _, flag, _ in simulator_flags()}
    assert own == {
        "-h",
        "--help",
        "--host",
        "--port",
        "--config",
        "--no-config",
        "--version",
        "--log-level",
        "--log-json",
    }


def test_flags_make_the_config_and_the_defaults_are_the_simulators(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = simulator_config(parse("--tokenizer", "fixture:qwen3", "--no-config"))
    assert config == SimConfig(tokenizer="fixture:qwen3")
    config = simulator_config(
        parse(
            "--tokenizer",
            "fixture:qwen3",
            "--fault",
            "rate_limit=0.1",
            "--fault",
            "drop=0.2",
            "--hostile",
            "endless,oversized",
            "--hostile",
            "redirect",
            "--seed",
            "7",
            "--truth",
            "t.jsonl",
            "--latency",
            "0.5",
        )
    )
    assert config.faults == {"rate_limit": 0.1, "drop": 0.2}
    assert config.hostile == ("endless", "oversized", "redirect")
    assert (config.seed, config.latency, str(config.truth_path)) == (7, 0.5, "t.jsonl")


def test_the_simulator_table_of_draftgen_toml_is_read_and_flags_win(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "draftgen.toml").write_text(
        'model = "moonshotai/kimi-k2.5"\n'
        "[simulator]\n"
        'tokenizer = "fixture:kimi-k2.5"\n'
        "seed = 3\n"
        "max_tokens = 50\n"
        'hostile = ["endless"]\n'
        "quirks = { drift = 0.05 }\n",
        encoding="utf-8",
    )
    config = simulator_config(parse("--seed", "9"))
    assert config.tokenizer == "fixture:kimi-k2.5"
    assert (config.seed, config.max_tokens) == (9, 50)
    assert config.hostile == ("endless",) and config.quirks == {"drift": 0.05}
    assert simulator_config(parse("--no-config", "--tokenizer", "x")).seed == 0


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ("sed = 3", "simulator.sed"),
        ('seed = "three"', "simulator.seed: --seed takes a number, not 'three'"),
        ('quirks = ["drift"]', "--quirk 'drift' is not NAME=RATE"),
    ],
)
def test_a_wrong_key_of_the_simulator_table_is_named(tmp_path, monkeypatch, table, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "draftgen.toml").write_text(f"[simulator]\n{table}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=message.replace("'", ".").replace("[", ".")):
        simulator_config(parse("--tokenizer", "fixture:qwen3"))


def test_a_bad_rate_flag_says_what_it_takes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SimConfigError, match="--fault 'drop' is not NAME=RATE, e.g. drift=0.05"):
        simulator_config(parse("--tokenizer", "fixture:qwen3", "--fault", "drop"))
    with pytest.raises(SimConfigError, match="the simulator needs a tokenizer: give --tokenizer"):
        simulator_config(parse("--no-config")).validate()

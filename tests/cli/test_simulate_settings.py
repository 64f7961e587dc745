"""``draftgen simulate``'s settings are declared once, by the simulator (SimConfig's fields, with
the run's ``Setting``): its flags, its ``[simulator]`` table of draftgen.toml (converted as the
run's keys are) and docs/cli.md are made from them."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from draftgen.cli import main as cli
from draftgen.cli.config import ConfigError, load_config
from draftgen.cli.main import simulator_config
from draftgen.declaration import SETTING, OptionError, Setting
from draftgen.options import simulator_settings
from draftgen.simulator.config import SimConfig, SimConfigError


def parse(*argv: str):
    return cli.build_parser().parse_args(["simulate", *argv])


def test_every_declared_setting_is_a_flag_of_simulate():
    simulate = cli._subparsers(cli.build_parser())["simulate"]
    flags = {option for action in simulate._actions for option in action.option_strings}
    declared = [f for f in dataclasses.fields(SimConfig) if SETTING in f.metadata]
    assert len(declared) == len(simulator_settings()) >= 25
    # The run's schema: one type of declaration for every setting draftgen takes.
    assert all(isinstance(s, Setting) for s in simulator_settings())
    for setting in simulator_settings():
        assert setting.flag in flags, setting.name
        assert (setting.table, setting.key, setting.commands) == (
            "simulator",
            setting.name,
            ("simulate",),
        )
    # The CLI declares only where the simulator listens, and which file it reads.
    own = flags - {setting.flag for setting in simulator_settings()}
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
        ('seed = "three"', "simulator.seed must be an integer, not a string 'three'"),
        ('quirks = ["drift"]', "simulator.quirks 'drift' is not NAME=RATE"),
    ],
)
def test_a_wrong_key_of_the_simulator_table_is_named(tmp_path, monkeypatch, table, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "draftgen.toml").write_text(f"[simulator]\n{table}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=message.replace("'", ".").replace("[", ".")):
        simulator_config(parse("--tokenizer", "fixture:qwen3"))


def test_a_bad_rate_flag_says_what_it_takes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(OptionError, match="--fault 'drop' is not NAME=RATE, e.g. drift=0.05"):
        simulator_config(parse("--tokenizer", "fixture:qwen3", "--fault", "drop"))
    with pytest.raises(SimConfigError, match="the simulator needs a tokenizer: give --tokenizer"):
        simulator_config(parse("--no-config")).validate()


MISNAMED = (
    "[simulate] is no table of draftgen.toml: the simulator's settings go in a [simulator] table "
    "(simulate = true is the run's switch); rename the table"
)


def test_a_simulate_table_is_refused_naming_the_simulator_table(tmp_path, monkeypatch):
    # Docs once called it [simulate]: a file written after them must not lose its settings.
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "draftgen.toml"
    config.write_text('model = "m"\n[simulate]\nseed = 3\n', encoding="utf-8")
    with pytest.raises(ConfigError) as refused:
        simulator_config(parse("--tokenizer", "fixture:qwen3"))
    assert str(refused.value) == f"draftgen.toml: {MISNAMED}"  # ./draftgen.toml, as found
    with pytest.raises(ConfigError) as refused:
        load_config(config)  # what draftgen run and estimate read
    assert str(refused.value) == f"{config}: {MISNAMED}"
    # The run's own switch is still a key.
    config.write_text('model = "m"\nsimulate = true\n[simulator]\nseed = 3\n', encoding="utf-8")
    assert load_config(config)["simulate"] is True
    assert simulator_config(parse("--tokenizer", "fixture:qwen3")).seed == 3


def test_the_simulator_table_is_converted_as_the_runs_keys_are(tmp_path, monkeypatch):
    # One conversion: a wrong value is named as a run key's is, and a relative path in the file
    # is beside the file, wherever draftgen simulate is started.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "conf").mkdir()
    config = tmp_path / "conf" / "draftgen.toml"
    config.write_text('max_tokens = "many"\n', encoding="utf-8")
    with pytest.raises(ConfigError) as run_key:
        load_config(config)
    config.write_text('[simulator]\nmax_tokens = "many"\n', encoding="utf-8")
    with pytest.raises(ConfigError) as simulator_key:
        simulator_config(parse("--config", str(config)))
    assert str(run_key.value) == f"{config}: max_tokens must be an integer, not a string 'many'"
    assert str(simulator_key.value) == str(run_key.value).replace(": max", ": simulator.max")
    config.write_text(
        '[simulator]\ntruth_path = "t.jsonl"\nbatch_log_path = "/abs/b.jsonl"\n'
        'dialect = "vllm"\nfaults = { drop = 0.5 }\n',
        encoding="utf-8",
    )
    made = simulator_config(parse("--config", str(config), "--tokenizer", "fixture:qwen3"))
    assert made.truth_path == tmp_path / "conf" / "t.jsonl"
    assert made.batch_log_path == Path("/abs/b.jsonl")
    assert (made.dialect, made.faults) == ("vllm", {"drop": 0.5})
    config.write_text('[simulator]\ndialect = "tgi"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match="simulator.dialect must be one of openrouter, "):
        simulator_config(parse("--config", str(config)))


def test_docs_config_lists_every_key_of_the_simulator_table(tmp_path):
    root = Path(__file__).resolve().parents[2]
    section = (root / "docs" / "config.md").read_text(encoding="utf-8").split("## `[simulator]`")[1]
    listed = re.findall(r"^\| `(\w+)` \| `(--[\w-]+)` \|", section, re.M)
    assert listed == [(s.key, s.flag) for s in simulator_settings()]
    # Its example is a table the simulator reads.
    example = section.split("```toml\n")[1].split("```")[0]
    (tmp_path / "draftgen.toml").write_text(example, encoding="utf-8")
    made = simulator_config(parse("--config", str(tmp_path / "draftgen.toml")))
    assert (made.tokenizer, made.seed, made.hostile) == (
        "fixture:kimi-k2.5",
        3,
        ("endless", "oversized"),
    )
    assert made.truth_path == tmp_path / "truth.jsonl"

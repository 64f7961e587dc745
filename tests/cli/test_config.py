"""draftgen.toml: init, keys from the run flags, flags over the file, refusals; sampling."""

from __future__ import annotations

import json
import re
import sqlite3
import tomllib
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from draftgen.backends import get_backend
from draftgen.cli import main as cli
from draftgen.cli.config import ConfigError, example_text, load_config, resolve
from draftgen.cli.parser import global_dests
from draftgen.generate.endpoints import EndpointSpec
from draftgen.records import GenerationSettings
from draftgen.simulator import SimConfig, SimulatorThread
from draftgen.store.database import Store, StoreError

TOKENIZER = "fixture:kimi-k2.5"


def run_parser():
    return cli._subcommand("run")


def options_of(parser) -> dict:
    """The parser's options by dest, those about finding the config file and the global ones
    (given on the command line only) left out."""
    meta = {"help", "config", "no_config", *global_dests()}
    return {a.dest: a for a in parser._actions if a.option_strings and a.dest not in meta}


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def prompts(path: Path, count: int, prefix: str = "r") -> Path:
    rows = [
        {"id": f"{prefix}{i}", "messages": [{"role": "user", "content": f"Question {i}"}]}
        for i in range(count)
    ]
    return write(path, "".join(json.dumps(row) + "\n" for row in rows))


def merged(tmp_path: Path, text: str, *argv: str):
    config = write(tmp_path / "draftgen.toml", text)
    args = cli.build_parser().parse_args(["run", "--config", str(config), *argv])
    return resolve(args)[0]


def refusal(tmp_path: Path, text: str) -> str:
    config = write(tmp_path / "draftgen.toml", text)
    with pytest.raises(ConfigError) as caught:
        load_config(config)
    return str(caught.value)


def test_init_writes_an_example_that_runs_against_the_simulator(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["init"]) == 0
    text = (tmp_path / "draftgen.toml").read_text()
    assert cli.main(["init"]) == cli.EXIT_ERROR
    assert "draftgen.toml already exists; edit it, or pass --force" in capsys.readouterr().err
    assert cli.main(["init", "--force"]) == 0
    assert (tmp_path / "draftgen.toml").read_text() == text
    prompts(tmp_path / "prompts.jsonl", 5)
    # The example's tokenizer works offline (issue #35: it named a hub id, so a run right after
    # init failed without network). It names no endpoint: the simulator is chosen by a flag.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert 'tokenizer = "fixture:kimi-k2.5"' in text.splitlines()
    assert cli.main(["run", "--concurrency", "4", "--simulate"]) == 0
    db = sqlite3.connect(tmp_path / "runs" / "kimi-k2.5" / "draftgen.sqlite")
    ids = sorted(row[0] for row in db.execute("SELECT source_id FROM completions"))
    assert ids == [f"chat/r{i}" for i in range(5)]
    settings = json.loads(db.execute("SELECT value FROM meta WHERE name='settings'").fetchone()[0])
    assert settings["model"] == "moonshotai/kimi-k2.5" and settings["provider"] is None


def test_the_example_has_every_run_key_and_each_value_is_accepted(tmp_path):
    parser = run_parser()
    text = example_text()
    top = text.split("\n[[datasets]]")[0]
    keys = {}
    for line in top.splitlines():
        match = re.match(r"^#? ?(\w+) = (.*?)(  # .*)?$", line)
        if match:
            keys[match.group(1)] = match.group(2)
    assert set(options_of(parser)) <= set(keys)
    # Every commented value, uncommented, passes the checks (exclusive reasoning keys aside).
    keys.pop("reasoning_max_tokens")
    body = "\n".join(f"{k} = {v}" for k, v in keys.items() if v != '"..."')
    values = load_config(write(tmp_path / "all.toml", body))
    assert values["concurrency"] == 64 and values["stream"] is True
    assert values["chat_template_kwargs"] == {"enable_thinking": False}
    assert values["input"] == [str(tmp_path / "prompts.jsonl")]
    tables = tomllib.loads(text.replace("\n# [openrouter.provider]", "\n[openrouter.provider]"))
    assert tables["datasets"][0] == {"name": "chat", "path": "prompts.jsonl"}


def test_the_examples_run_defaults_are_the_librarys(tmp_path):
    """EXAMPLE is written out by hand: each default it shows is RunOptions' own (the flags take
    theirs from there), so the three never drift apart."""
    import dataclasses

    from draftgen.run.pipeline import RunOptions

    library = {f.name: f.default for f in dataclasses.fields(RunOptions)}
    library["completions_per_turn"] = library.pop("samples")
    shown = {}
    for line in example_text().split("\n[[datasets]]")[0].splitlines():
        match = re.match(r"^# (\w+) = (.*?)(  # .*)?$", line)
        if match and match.group(1) in library:
            shown[match.group(1)] = tomllib.loads(f"v = {match.group(2)}")["v"]
    defaults = {
        "api_key_env": "OPENROUTER_API_KEY",
        "backend": "openrouter",
        "completions_per_turn": 1,
        "concurrency": 64,
        "stream": True,
        "idle_timeout": 300.0,
        "max_attempts": 8,
        "retry_base_delay": 0.5,
        "max_retries": 20000,
        "shutdown_grace": 30.0,
        "logprobs": False,
        "allow_insecure_http": False,
    }
    assert {key: shown[key] for key in defaults} == defaults
    assert {key: library[key] for key in defaults} == defaults
    actions = options_of(run_parser())
    assert {key: actions[key].draftgen_default for key in defaults} == defaults


def test_flags_override_the_file_and_defaults_fill_the_rest(tmp_path):
    args = merged(
        tmp_path,
        'model = "m"\nconcurrency = 4\nmax_tokens = 100\ninput = ["a.jsonl"]\n',
        "--max-tokens",
        "50",
        "--no-stream",
    )
    assert (args.model, args.concurrency, args.max_tokens, args.stream) == ("m", 4, 50, False)
    assert args.idle_timeout == 300.0 and args.completions_per_turn == 1
    assert args.temperature is None
    assert args.input == [str(tmp_path / "a.jsonl")]  # relative to the file, not the cwd
    over = merged(tmp_path, 'input = ["a.jsonl"]\n', "--input", "b.jsonl")
    assert over.input == ["b.jsonl"]  # a list flag replaces the file's list


def test_run_reads_the_local_file_unless_told_not_to(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "draftgen.toml", "concurrency = 0\n")
    assert cli.main(["run", "--model", "m"]) == cli.EXIT_ERROR
    err = capsys.readouterr().err
    assert "draftgen.toml: concurrency = 0 is refused: 0 is not a positive integer" in err
    assert cli.main(["run", "--no-config", "--model", "m", "--tokenizer", "t"]) == cli.EXIT_ERROR
    assert "no --out given: pass it, or set out = ... in draftgen.toml" in capsys.readouterr().err


@pytest.mark.parametrize(
    "text, message",
    [
        ("max-tokens = 5\n", "unknown key max-tokens; did you mean max_tokens?"),
        ("concurrency = '64'\n", "concurrency must be an integer, not a string '64'"),
        ("stream = 1\n", "stream must be true or false, not an integer"),
        ("backend = 'openai'\n", "backend must be one of openrouter, vllm, sglang"),
        ("input = 'a.jsonl'\n", 'input must be a list, e.g. input = ["prompts.jsonl"]'),
        ("temperature = 3\n", "temperature = 3 is refused: 3 is not within 0..2"),
        ("[[datasets]]\nlimit = 3\n", 'datasets[0] has no path; add path = "prompts.jsonl"'),
        ("[backend]\nflavor = 'x'\n", "unknown key backend.flavor"),
        ("[[backend.endpoints]]\nconcurrency = 2\n", "backend.endpoints[0] has no url; add url"),
        (
            "[[backend.endpoints]]\nurl = 'http://a/v1'\nconcurrency = 0\n",
            "backend.endpoints[0].concurrency must be a positive integer",
        ),
        (
            "base_url = 'http://a/v1'\n[[backend.endpoints]]\nurl = 'http://b/v1'\n",
            "base_url and [[backend.endpoints]] both name endpoints; keep one of them",
        ),
        ("[[datasets]]\npath = 'a'\nshufle = true\n", "unknown key datasets[0].shufle; did you"),
        ("[[datasets]]\npath = 'a'\nweight = true\n", "datasets[0].weight must be a number"),
        ("input = ['a']\n[[datasets]]\npath = 'b'\n", "input and [[datasets]] both list"),
        ("[openrouter.provider]\nsort = 'fast'\n", "openrouter.provider.sort must be a one of"),
        ("[openrouter.provider]\norder = 'x'\n", "provider.order must be a list of provider"),
        ("[openrouter]\nreasoning = {}\n", "unknown key openrouter.reasoning"),
        ("[estimate]\npilot = 'x'\n", "estimate.pilot must be an integer, not a string"),
        ("[estimate]\nmodel = 'x'\n", "unknown key estimate.model"),
        ("model = \n", "is not valid TOML (Invalid value (at line 1, column 9))"),
        ("chat_template_kwargs = 'x'\n", "chat_template_kwargs must be a table of template"),
    ],
)
def test_bad_keys_are_refused_naming_the_file_and_the_key(tmp_path, text, message):
    sentence = refusal(tmp_path, text)
    assert sentence.startswith(str(tmp_path / "draftgen.toml"))
    assert message in sentence


def test_datasets_and_provider_and_estimate_tables_are_read(tmp_path):
    text = (
        "limit = 10\n"
        "[[datasets]]\npath = 'a.jsonl'\nname = 'a'\nshuffle = true\nseed = 7\nweight = 2\n"
        "[[datasets]]\npath = '/abs/b.jsonl'\nlimit = 3\n"
        "[openrouter.provider]\norder = ['siliconflow']\nallow_fallbacks = false\n"
        "quantizations = ['fp8']\n"
        "[estimate]\npilot = 4\n"
    )
    args = merged(tmp_path, text)
    first, second = args.datasets
    assert (first.path, first.name, first.shuffle, first.seed, first.weight) == (
        str(tmp_path / "a.jsonl"),
        "a",
        True,
        7,
        2.0,
    )
    assert (second.path, second.limit, second.weight) == ("/abs/b.jsonl", 3, 1.0)
    assert args.provider == {
        "order": ["siliconflow"],
        "allow_fallbacks": False,
        "quantizations": ["fp8"],
    }
    assert args.limit == 10 and not hasattr(args, "pilot")  # estimate's keys stay estimate's
    config = tmp_path / "draftgen.toml"
    estimate_args = cli.build_parser().parse_args(["estimate", "--config", str(config)])
    resolved = resolve(estimate_args, "estimate")
    assert resolved[0].pilot == 4 and resolved[0].limit == 10


def test_sampling_settings_reach_the_request_body_and_the_store(tmp_path, monkeypatch, capsys):
    settings = GenerationSettings(
        model="m",
        max_tokens=64,
        temperature=0.6,
        top_p=0.9,
        seed=5,
        reasoning={"effort": "high"},
        provider={"only": ["chutes"]},
    )
    messages = [{"role": "user", "content": "hi"}]
    body = get_backend("openrouter").request_body(settings.for_sample(2), messages, None, True)
    assert body == {
        "model": "m",
        "messages": messages,
        "stream": True,
        "stream_options": {"include_usage": True},  # vLLM streams usage only when asked
        "max_tokens": 64,
        "temperature": 0.6,
        "top_p": 0.9,
        "seed": 7,
        "reasoning": {"effort": "high"},
        "provider": {"only": ["chutes"]},
    }
    plain = get_backend("vllm").request_body(
        GenerationSettings(model="m", temperature=0.2), messages, None, False
    )
    assert plain["temperature"] == 0.2 and "seed" not in plain and plain["return_token_ids"]
    # A store made before these settings existed resumes with them unset.
    store = Store(tmp_path / "old")
    store.db.execute(
        "INSERT INTO meta (name, value) VALUES ('settings', ?)",
        (json.dumps({"model": "m", "max_tokens": None}),),
    )
    store.settings.check_settings(GenerationSettings(model="m").as_dict())
    store.db.execute(  # something generated under those settings
        "INSERT INTO failures (key, source_id, turn, reason, attempts, created_at)"
        " VALUES ('k', 's', 0, 'server_error', 1, 0)"
    )
    with pytest.raises(StoreError, match=r"provider not set \(now \{'only': \['chutes'\]\}\)"):
        store.settings.check_settings(
            GenerationSettings(model="m", provider={"only": ["chutes"]}).as_dict()
        )
    store.close()


def test_run_refuses_exclusive_or_misplaced_reasoning(tmp_path, monkeypatch, capsys):
    prompts(tmp_path / "p.jsonl", 1)
    base = ["run", "--no-config", "--model", "m", "--tokenizer", TOKENIZER, "--input"]
    base += [str(tmp_path / "p.jsonl"), "--out", str(tmp_path / "out"), "--simulate"]
    assert cli.main([*base, "--reasoning-effort", "low", "--reasoning-max-tokens", "9"]) == 2
    assert "--reasoning-effort and --reasoning-max-tokens exclude each other" in (
        capsys.readouterr().err
    )
    assert cli.main([*base, "--reasoning-effort", "low", "--backend", "vllm"]) == 2
    assert "--backend vllm does not take them" in capsys.readouterr().err


def test_samples_are_separate_stored_samples_and_resume(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    prompts(tmp_path / "p.jsonl", 3)
    base = ["run", "--model", "m", "--tokenizer", TOKENIZER, "--input", "p.jsonl"]
    base += ["--out", "out", "--seed", "11", "--simulate"]
    assert cli.main([*base]) == 0
    db = sqlite3.connect(tmp_path / "out" / "draftgen.sqlite")
    first = dict(db.execute("SELECT key, source_id FROM completions"))
    assert sorted(first.values()) == ["r0", "r1", "r2"]
    assert cli.main([*base, "--completions-per-turn", "3"]) == 0
    rows = db.execute("SELECT key, source_id, request FROM completions").fetchall()
    assert sorted(r[1] for r in rows) == sorted(
        f"r{i}{suffix}" for i in range(3) for suffix in ("", "#1", "#2")
    )
    assert {k: s for k, s, _ in rows if "#" not in s} == first  # sample 0 kept its keys
    assert cli.main([*base, "--temperature", "0.5"]) == 2
    assert "temperature not set (now 0.5)" in capsys.readouterr().err


def test_the_simulator_refuses_malformed_settings_like_openrouter():
    with SimulatorThread(SimConfig(tokenizer=TOKENIZER)) as sim:

        def post(extra: dict) -> tuple[int, str]:
            body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **extra}
            request = urllib.request.Request(
                sim.base_url + "/chat/completions",
                data=json.dumps(body).encode(),
                headers={"Authorization": "Bearer k", "Content-Type": "application/json"},
            )
            try:
                with urllib.request.urlopen(request, timeout=30) as response:
                    return response.status, ""
            except urllib.error.HTTPError as exc:
                return exc.code, json.loads(exc.read())["error"]["message"]

        assert post({"reasoning": {"effort": "high", "max_tokens": 5}}) == (
            400,
            "reasoning takes effort or max_tokens, not both",
        )
        assert post({"provider": {"sort": "fast"}})[0] == 400
        assert post({"provider": {"orderr": ["x"]}}) == (
            400,
            "provider.orderr is not a routing field; use one of order, only, ignore, "
            "allow_fallbacks, require_parameters, zdr, enforce_distillable_text, "
            "data_collection, quantizations, sort, max_price",
        )
        assert post({"temperature": 2.5}) == (400, "temperature must be a number from 0 to 2")
        assert post({"seed": "1"}) == (400, "seed must be an integer")
        assert (
            post({"temperature": 0.3, "top_p": 1, "seed": 2, "provider": {"zdr": True}})[0] == 200
        )


def test_backend_endpoints_table_lists_the_fleet_and_a_flag_replaces_it(tmp_path):
    text = (
        "[backend]\nname = 'sglang'\n"
        "[[backend.endpoints]]\nurl = 'http://a:30000/v1'\nconcurrency = 3\n"
        "[[backend.endpoints]]\nurl = 'http://b:30000/v1'\n"
    )
    args = merged(tmp_path, text)
    assert args.backend == "sglang"
    assert args.endpoints == [
        EndpointSpec("http://a:30000/v1", 3),
        EndpointSpec("http://b:30000/v1"),
    ]
    flagged = merged(tmp_path, text, "--base-url", "http://c/v1")
    assert flagged.endpoints is None and flagged.base_url == ["http://c/v1"]


def test_a_run_over_the_config_files_endpoints_uses_each_of_them(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENROUTER_API_KEY", "simulator")
    prompts(tmp_path / "p.jsonl", 12)
    with (
        SimulatorThread(SimConfig(tokenizer=TOKENIZER, latency=0.01)) as one,
        SimulatorThread(SimConfig(tokenizer=TOKENIZER, latency=0.01)) as two,
    ):
        write(
            tmp_path / "draftgen.toml",
            f"model = 'm'\ntokenizer = '{TOKENIZER}'\ninput = ['p.jsonl']\nout = 'out'\n"
            "concurrency = 4\n"
            f"[[backend.endpoints]]\nurl = '{one.base_url}'\nconcurrency = 2\n"
            f"[[backend.endpoints]]\nurl = '{two.base_url}'\nconcurrency = 2\n",
        )
        assert cli.main(["run"]) == 0, capsys.readouterr().err
    db = sqlite3.connect(tmp_path / "out" / "draftgen.sqlite")
    served = dict(db.execute("SELECT endpoint, count(*) FROM completions GROUP BY endpoint"))
    assert set(served) == {one.base_url, two.base_url} and sum(served.values()) == 12
    assert "the built-in simulator answers" not in capsys.readouterr().err

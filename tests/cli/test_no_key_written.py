"""No value that could be a key is ever written: a setting shaped like a key, holding the run's
own key or a URL carrying credentials is refused in one sentence naming the setting, never the
value, by the CLI (flag or draftgen.toml) and by a Python caller alike; nothing is written."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import draftgen

from draftgen.api import Run
from draftgen.options import DatasetSpec, EndpointSpec, OptionError, RunOptions
from draftgen.redact import key_shaped, url_credentials

KEY = "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"
# A key of no known shape: only its being the run's key variable's value gives it away.
PLAIN_KEY = "correct-horse-battery-staple"
SHAPED = (
    "holds a value shaped like an API key (not shown), and draftgen writes no key into a run; "
    "check what was given there, and keep the key in the environment variable --api-key-env names"
)
ITSELF = (
    "holds the API key itself (the value of DRAFTGEN_TEST_KEY, not shown), and draftgen writes "
    "no key into a run; check what was given there"
)
IN_URL = (
    "is a URL carrying credentials ({}, not shown), and draftgen writes no key into a run; give "
    "the URL without them and the key in the environment variable --api-key-env names"
)
MODEL = "--model (model in draftgen.toml)"


def run_argv(tmp_path: Path, *extra: str, tokenizer: str | None = "fixture:qwen3") -> list[str]:
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"messages": [{"role": "user", "content": "hi"}]}\n')
    argv = ["run", "--input", str(prompts), "--no-calibrate", "--out", str(tmp_path / "run")]
    argv += ["--tokenizer", tokenizer] if tokenizer else []
    return [*argv, "--api-key-env", "DRAFTGEN_TEST_KEY", *extra]


def hits(root: Path, secret: str) -> list[str]:
    """The files under ``root`` whose bytes hold ``secret``."""
    found = root.rglob("*") if root.exists() else ()
    return [str(p) for p in found if p.is_file() and secret.encode() in p.read_bytes()]


@pytest.mark.parametrize(
    "given, secret, env, said",
    [
        (["--model", KEY], KEY, {}, f"{MODEL} {SHAPED}"),
        (["--model", PLAIN_KEY], PLAIN_KEY, {"DRAFTGEN_TEST_KEY": PLAIN_KEY}, f"{MODEL} {ITSELF}"),
        (
            ["--model", "m", "--batch-model", KEY],
            KEY,
            {},
            f"--batch-model (batch_model in draftgen.toml) {SHAPED}",
        ),
    ],
)
def test_a_key_given_as_a_flag_is_refused_and_written_nowhere(tmp_path, given, secret, env, said):
    result = draftgen(*run_argv(tmp_path, "--no-config", *given), env_extra=env)
    assert (result.returncode, result.stderr) == (2, f"draftgen: {said}\n")
    assert secret not in result.stdout
    assert hits(tmp_path / "run", secret) == []


@pytest.mark.parametrize(
    "line, said",
    [
        (f'model = "{KEY}"', f"{MODEL} {SHAPED}"),
        (
            f'model = "m"\ntokenizer = "moonshotai/{KEY}"',
            f"--tokenizer (tokenizer in draftgen.toml) {SHAPED}",
        ),
        (
            f'model = "m"\n[openrouter.provider]\norder = ["{KEY}"]',
            f"RunOptions.provider ([openrouter.provider] in draftgen.toml) {SHAPED}",
        ),
        (
            f'model = "m"\n[[backend.endpoints]]\nurl = "http://127.0.0.1:9/v1?key={KEY}"',
            "RunOptions.endpoints ([[backend.endpoints]] in draftgen.toml) "
            + IN_URL.format("the key= query parameter"),
        ),
    ],
)
def test_a_key_in_draftgen_toml_is_refused_and_written_nowhere(tmp_path, line, said):
    config = tmp_path / "draftgen.toml"
    config.write_text(line + "\n")
    argv = run_argv(tmp_path, tokenizer=None if "tokenizer" in line else "fixture:qwen3")
    result = draftgen(*argv, "--config", str(config))
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == f"draftgen: {said}"
    assert KEY not in result.stdout + result.stderr
    assert hits(tmp_path / "run", KEY) == []


@pytest.mark.parametrize(
    "url, carried",
    [
        (f"http://user:{KEY}@127.0.0.1:9/v1", "a user name or password before its host"),
        (f"http://{KEY}@127.0.0.1:9/v1", "a user name or password before its host"),
        ("http://127.0.0.1:9/v1?api_key=hunter2", "the api_key= query parameter"),
        ("http://127.0.0.1:9/v1?a=1&Token=hunter2", "the token= query parameter"),
    ],
)
def test_credentials_in_a_url_are_refused_in_one_sentence(tmp_path, url, carried):
    result = draftgen(*run_argv(tmp_path, "--no-config", "--model", "m", "--base-url", url))
    said = "--base-url (base_url in draftgen.toml) " + IN_URL.format(carried)
    assert (result.returncode, result.stderr) == (2, f"draftgen: {said}\n")
    assert "hunter2" not in result.stderr and KEY not in result.stderr
    assert not (tmp_path / "run").exists()


def options(**given) -> RunOptions:
    fields = {"inputs": ["p.jsonl"], "model": "m", "tokenizer": "fixture:qwen3", "simulate": True}
    return RunOptions(**{**fields, "api_key_env": "DRAFTGEN_TEST_KEY", **given})


@pytest.mark.parametrize(
    "given, named",
    [
        ({"model": KEY}, MODEL),
        ({"out": f"/tmp/{KEY}/run"}, "--out (out in draftgen.toml)"),
        ({"inputs": ["a.jsonl", f"{KEY}.jsonl"]}, "--input (input in draftgen.toml)"),
        (
            {"datasets": [DatasetSpec(path="a.jsonl", name=KEY)]},
            "RunOptions.datasets ([[datasets]] in draftgen.toml)",
        ),
        (
            {"chat_template_kwargs": {"x": f"Bearer {KEY[:12]}"}},
            "--chat-template-kwargs (chat_template_kwargs in draftgen.toml)",
        ),
    ],
)
def test_a_python_caller_is_refused_alike(given, named):
    with pytest.raises(OptionError) as refused:
        Run(options(**given))
    assert str(refused.value) == f"{named} {SHAPED}"


def test_a_python_caller_giving_the_run_key_itself_is_refused(monkeypatch):
    monkeypatch.setenv("DRAFTGEN_TEST_KEY", PLAIN_KEY)
    for given in ({"model": PLAIN_KEY}, {"base_url": f"http://127.0.0.1:9/{PLAIN_KEY}/v1"}):
        with pytest.raises(OptionError) as refused:
            Run(options(simulate=False, **given))
        assert PLAIN_KEY not in str(refused.value)
        assert str(refused.value).endswith(ITSELF)
    endpoints = [EndpointSpec("http://127.0.0.1:9/v1"), EndpointSpec("http://u:pw@[::1]:9/v1")]
    with pytest.raises(OptionError) as refused:
        Run(options(simulate=False, endpoints=endpoints))
    assert str(
        refused.value
    ) == "RunOptions.endpoints ([[backend.endpoints]] in draftgen.toml) " + (
        IN_URL.format("a user name or password before its host")
    )


def test_a_short_key_is_refused_only_as_the_whole_value(monkeypatch):
    monkeypatch.setenv("DRAFTGEN_TEST_KEY", "m")  # found inside "models/m.jsonl" it would be noise
    Run(options(inputs=["models/m.jsonl"], model="mm"))
    with pytest.raises(OptionError) as refused:
        Run(options(model="m"))
    assert str(refused.value) == f"{MODEL} {ITSELF}"


@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_model_is_refused_before_any_turn(tmp_path, value):
    result = draftgen(*run_argv(tmp_path, "--no-config", "--model", value))
    said = f"{MODEL} is empty; give its value, a run cannot go without it"
    assert (result.returncode, result.stderr) == (2, f"draftgen: {said}\n")
    assert not (tmp_path / "run").exists()
    with pytest.raises(OptionError) as refused:
        Run(options(model=value))
    assert str(refused.value) == said


@pytest.mark.parametrize(
    "text",
    [
        "moonshotai/kimi-k2.5",
        "Qwen/Qwen3-235B-A22B-Thinking-2507-FP8",
        "/tmp/pytest-of-root/pytest-12/test_something_with_a_long_name0/run",
        "https://openrouter.ai/api/v1",
        "http://10.0.0.1:30000/v1?timeout=5",
    ],
)
def test_names_paths_and_urls_are_taken(text):
    assert (key_shaped(text), url_credentials(text)) == (False, None)
    Run(options(model=text, out=text))

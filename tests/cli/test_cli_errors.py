"""Trust at the edges: no abbreviated flags, no secret echoed, one sentence and exit 2 for any bad
argument (a property test over every command), never a traceback."""

from __future__ import annotations

import argparse
import io
import string
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
from conftest import draftgen
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from draftgen.cli import main as cli
from draftgen.redact import redact
from draftgen.store.database import Store

KEY = "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"
TOKENIZER = "fixture:kimi-k2.5"


# -- item 1: no abbreviations, no key echoed ------------------------------------------------------


def test_api_key_is_not_an_abbreviation_and_the_key_is_never_echoed(tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"messages": [{"role": "user", "content": "hi"}]}\n')
    argv = ["run", "--input", str(prompts), "--model", "m", "--tokenizer", TOKENIZER]
    for flag in (["--api-key", KEY], [f"--api-key={KEY}"], ["--api-key-e", KEY]):
        result = draftgen(*argv, "--out", str(tmp_path / "run"), *flag, "--no-config")
        assert result.returncode == 2, result.stderr
        assert KEY not in result.stderr + result.stdout
        assert "Traceback" not in result.stderr and len(result.stderr.splitlines()) == 1
        assert f"unknown option {flag[0].split('=')[0]}" in result.stderr
        assert "--api-key-env" in result.stderr  # how keys are passed instead
    assert not (tmp_path / "run").exists()  # nothing started


def test_every_parser_refuses_abbreviations():
    parser = cli.build_parser()
    parsers = [parser, *cli._subparsers(parser).values()]
    assert all(p.allow_abbrev is False for p in parsers)
    with pytest.raises(SystemExit) as stopped:
        parser.parse_args(["status", "run", "--js"])
    assert stopped.value.code == 2


def test_a_key_given_as_the_variable_name_is_refused_unshown(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit):
        cli.main(["run", "--api-key-env", KEY])
    err = capsys.readouterr().err
    assert KEY not in err and "name of an environment variable" in err
    # The same mistake in draftgen.toml: the key is masked in the one-line message.
    (tmp_path / "draftgen.toml").write_text(f'api_key_env = "{KEY}"\n')
    assert cli.main(["run"]) == 2
    err = capsys.readouterr().err
    assert KEY not in err and "***" in err and "api_key_env" in err


def test_a_misspelled_flag_is_named_with_the_one_it_resembles(capsys):
    with pytest.raises(SystemExit):
        cli.main(["run", "--concurency", "8"])
    assert capsys.readouterr().err == (
        "draftgen run: unknown option --concurency; did you mean --concurrency? "
        "(see draftgen run --help)\n"
    )


def test_a_mistyped_choice_names_the_choice_it_resembles(capsys):
    with pytest.raises(SystemExit):
        cli.main(["export", "runs/x", "--format", "speculator", "--out", "x"])
    err = capsys.readouterr().err
    assert "invalid choice: 'speculator' (did you mean 'speculators'?)" in err
    # A value near no choice may be a key: still not shown.
    with pytest.raises(SystemExit):
        cli.main(["export", "runs/x", "--format", KEY, "--out", "x"])
    err = capsys.readouterr().err
    assert KEY not in err and "did you mean" not in err


def test_negative_money_is_refused_with_a_sentence(capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(["run", "--max-cost", "-1"])
    assert exited.value.code == 2
    assert capsys.readouterr().err == (
        "draftgen run: argument --max-cost: -1 is not an amount of dollars of 0 or more "
        "(see draftgen run --help)\n"
    )


@pytest.mark.parametrize(
    "text",
    [
        KEY,
        "sk-ant-api03-AbCdEfGh12345678",
        "Authorization: Bearer abc.def.ghi",
        "hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345",
        "kdh3J2DgHqmOdDiPUXnj7XkXSQd9UEbIPEtykHPL",  # 40 random base62 characters
        "AKIAIOSFODNN7EXAMPLE",
    ],
)
def test_redact_masks_what_looks_like_a_key(text):
    masked = redact(f"value {text} here")
    assert masked.startswith("value ") and masked.endswith(" here") and "***" in masked
    assert text.split()[-1] not in masked


@pytest.mark.parametrize(
    "text",
    [
        "0123456789abcdef0123456789abcdef",  # a turn key
        "HuggingFaceH4_ultrachat_200k_train_sft_00000.parquet",
        "moonshotai/Kimi-K2-Instruct-0905",
        "Qwen3-235B-A22B-Thinking-2507-FP8-Dynamic",
        "https://openrouter.ai/api/v1",
        "/tmp/pytest-of-root/pytest-12/test_something_with_a_long_name0/run",
        "environment variable OPENROUTER_API_KEY is not set",
    ],
)
def test_redact_keeps_names_paths_and_hashes(text):
    assert redact(text) == text


# -- item 4: one sentence, never a traceback ------------------------------------------------------


@pytest.fixture(scope="module")
def places(tmp_path_factory):
    """An empty run directory, an input file, a plain file, a directory."""
    root = tmp_path_factory.mktemp("places")
    Store(root / "run").close()
    (root / "p.jsonl").write_text('{"messages": [{"role": "user", "content": "hi"}]}\n')
    (root / "afile").write_text("x")
    (root / "adir").mkdir()
    return root


def call(argv: list[str]) -> tuple[int, str, str]:
    """``cli.main`` in this process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = cli.main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 2
    return code, out.getvalue(), err.getvalue()


def base_argv(command: str, root: Path) -> list[str]:
    """A command line each command accepts, from which one fault is then made."""
    run = ["--input", str(root / "p.jsonl"), "--model", "m", "--tokenizer", TOKENIZER]
    return {
        "run": ["run", "--no-config", *run, "--out", str(root / "out")],
        "estimate": ["estimate", "--no-config", *run],
        "export": ["export", str(root / "run"), "--out", str(root / "e.jsonl")],
        "vocab": ["vocab", str(root / "run"), "--out", str(root / "vocab")],
        "report": ["report", str(root / "run")],
        "status": ["status", str(root / "run")],
        "merge": ["merge", str(root / "run"), "--out", str(root / "merged")],
        "simulate": ["simulate", "--tokenizer", TOKENIZER, "--port", "0"],
        "init": ["init"],
    }[command]


def typed_options(command: str) -> list[argparse.Action]:
    """The options of ``command`` whose value can be wrong: numbers and choices."""
    parser = cli._subparsers(cli.build_parser())[command]
    return [
        action
        for action in parser._actions
        if action.option_strings
        and action.nargs != 0
        and (action.choices is not None or action.type not in (None, str, Path, cli._env_name))
    ]


COMMANDS = ("run", "estimate", "export", "vocab", "report", "status", "merge", "simulate", "init")
WORDS = st.text(string.ascii_letters, min_size=1, max_size=12).filter(
    lambda w: w.lower() not in ("nan", "inf", "infinity")
)


@st.composite
def bad_command_lines(draw, root: Path) -> tuple[list[str], str | None]:
    """A command line with one thing wrong, and the secret it carries (if any)."""
    command = draw(st.sampled_from(COMMANDS))
    argv = base_argv(command, root)
    secret = draw(st.sampled_from([None, KEY]))
    faults = ["unknown_flag", "stray_argument"]
    if typed_options(command):
        faults.append("bad_value")
    if command in ("run", "estimate", "simulate"):
        faults += ["bad_tokenizer", "missing_required"]
    if command in ("export", "vocab", "report", "status", "merge"):
        faults += ["missing_run_dir", "file_as_run_dir"]
    if command == "export":
        faults.append("directory_as_out")
    if command == "run":
        faults.append("file_as_out")
    fault = draw(st.sampled_from(faults))
    if fault == "unknown_flag":
        name = "--" + draw(WORDS).lower() + "-x"
        argv += [name, secret or draw(WORDS)]
    elif fault == "stray_argument":
        argv += [secret or ("stray" + draw(WORDS))]
    elif fault == "bad_value":
        action = draw(st.sampled_from(typed_options(command)))
        argv += [action.option_strings[-1], "X" + draw(WORDS)]
    elif fault == "bad_tokenizer":
        name = draw(st.sampled_from(["fixture:", "/no/such/dir/"])) + draw(WORDS)
        argv[argv.index("--tokenizer") + 1] = name
    elif fault == "missing_required":
        flag = (
            "--tokenizer"
            if command == "simulate"
            else draw(st.sampled_from(["--model", "--input"]))
        )
        index = argv.index(flag)
        del argv[index : index + 2]
    elif fault in ("missing_run_dir", "file_as_run_dir"):
        argv[1] = str(root / ("afile" if fault == "file_as_run_dir" else "nowhere"))
    elif fault == "directory_as_out":
        argv[argv.index("--out") + 1] = str(root / "adir")
    elif fault == "file_as_out":
        argv[argv.index("--out") + 1] = str(root / "afile")
    return argv, secret


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_any_bad_argument_gives_one_line_on_stderr_and_exit_2(data, places, monkeypatch):
    monkeypatch.chdir(places / "adir")  # no draftgen.toml here
    argv, secret = data.draw(bad_command_lines(places))
    code, out, err = call(argv)
    assert code == 2, (argv, err)
    assert len(err.splitlines()) == 1 and err.endswith("\n"), (argv, err)
    assert "Traceback" not in err and err.startswith("draftgen"), (argv, err)
    if secret is not None:
        assert secret not in err + out, (argv, err)


def test_the_cases_the_issue_found(places, monkeypatch, capsys):
    monkeypatch.chdir(places / "adir")
    cases = {
        ("run", "--tokenizer", "fixture:kimi"): "unknown tokenizer fixture 'kimi'",
        ("export", "--format", "parquet"): "is a directory and --format parquet writes one file",
        ("run", "--out"): "is a file, not a run directory",
        ("run", "--tokenizer", "/models/no/such/Kimi"): "is not a directory",
    }
    run = ["run", "--no-config", "--simulate", "--input", str(places / "p.jsonl"), "--model", "m"]
    argvs = [
        [*run, "--tokenizer", "fixture:kimi", "--out", str(places / "o")],
        ["export", str(places / "run"), "--format", "parquet", "--out", str(places / "adir")],
        [*run, "--tokenizer", TOKENIZER, "--out", str(places / "afile")],
        [*run, "--tokenizer", "/models/no/such/Kimi", "--out", str(places / "o")],
    ]
    for argv, expected in zip(argvs, cases.values(), strict=True):
        code, _, err = call(argv)
        assert code == 2 and len(err.splitlines()) == 1 and expected in err, (argv, err)
        assert "Repo id" not in err and "Errno" not in err


def test_status_into_a_closed_pipe_exits_quietly(places):
    process = subprocess.Popen(
        [sys.executable, "-m", "draftgen.cli", "status", str(places / "run"), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    process.stdout.close()  # the reader is gone before anything is written (| head, at once)
    _, err = process.communicate(timeout=120)
    assert process.returncode == cli.EXIT_BROKEN_PIPE and err == b""


def test_an_unexpected_error_is_one_line_unless_debugging(monkeypatch, capsys):
    def broken(args):
        raise KeyError("no such thing")

    monkeypatch.setitem(cli.COMMANDS, "init", broken)
    assert cli.main(["init"]) == cli.EXIT_INTERNAL
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "internal error: KeyError" in err
    assert "--log-level debug" in err
    with pytest.raises(KeyError):
        cli.main(["--log-level", "debug", "init"])

"""Trust at the edges, part two: a hub id with no network fails at once in one sentence, export
never replaces a file that is not its own, inputs and flags get the fix named, status lists a
folder of runs, --log-json is JSON from the first line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import draftgen
from sample_runs import make_run

from draftgen.cli import main as cli
from draftgen.redact import usd

HUB_ID = "moonshotai/Kimi-K2.5"
KEY = "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"
OPAQUE = "kdh3J2DgHqmOdDiPUXnj7XkXSQd9UEbIPEtykHPL"  # 40 random base62 characters
NO_HUB = "http://127.0.0.1:9"  # the discard port: nothing listens, the connection fails at once


def offline_estimate(tmp_path: Path, tokenizer: str, **env: str) -> subprocess.CompletedProcess:
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"messages": [{"role": "user", "content": "hi"}]}\n')
    environment = {**os.environ}
    environment.pop("HF_HUB_OFFLINE", None)
    environment.pop("TRANSFORMERS_OFFLINE", None)
    environment.update(
        HF_ENDPOINT=NO_HUB,
        HF_HOME=str(tmp_path / "hf"),
        HF_HUB_CACHE=str(tmp_path / "hf" / "hub"),
        **env,
    )
    argv = ["estimate", "--no-config", "--input", str(prompts), "--model", "m"]
    return subprocess.run(
        [sys.executable, "-m", "draftgen.cli", *argv, "--tokenizer", tokenizer],
        capture_output=True,
        text=True,
        env=environment,
        cwd=tmp_path,
        timeout=60,
    )


# -- 1. a hub id without network ------------------------------------------------------------------


def test_an_unreachable_hub_fails_at_once_in_one_line(tmp_path):
    # Against the same command that never tries the network (HF_HUB_OFFLINE), not a number of
    # seconds: a loaded machine took 18 s for what takes 3 s. huggingface_hub's own retries
    # took 48 s, over 10x.
    (tmp_path / "offline").mkdir()
    started = time.monotonic()
    offline_estimate(tmp_path / "offline", HUB_ID, HF_HUB_OFFLINE="1")
    offline = time.monotonic() - started
    started = time.monotonic()
    result = offline_estimate(tmp_path, HUB_ID)
    assert time.monotonic() - started < 3 * offline
    assert result.returncode == 2
    assert result.stderr == (
        f"draftgen: cannot load tokenizer '{HUB_ID}': the hub ({NO_HUB}) cannot be reached from "
        "this machine and it is not in the local Hugging Face cache; pass a local directory (a "
        "downloaded model folder) with --tokenizer\n"
    )


def test_hf_hub_offline_is_one_line_too(tmp_path):
    result = offline_estimate(tmp_path, HUB_ID, HF_HUB_OFFLINE="1")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"draftgen: cannot load tokenizer '{HUB_ID}': HF_HUB_OFFLINE is set and it is not in the "
        "local Hugging Face cache; pass a local directory (a downloaded model folder) with "
        "--tokenizer"
    ]


@pytest.mark.parametrize("value", [KEY, OPAQUE, f"moonshotai/{KEY}"])
def test_a_key_given_as_the_tokenizer_is_never_shown_nor_sent(tmp_path, value):
    result = offline_estimate(tmp_path, value)
    assert result.returncode == 2
    assert value not in result.stdout + result.stderr
    # Refused with every other setting that holds a key, before a tokenizer is looked for.
    assert result.stderr == (
        "draftgen: --tokenizer (tokenizer in draftgen.toml) holds a value shaped like an API key "
        "(not shown), and draftgen writes no key into a run; check what was given there, and "
        "keep the key in the environment variable --api-key-env names\n"
    )


def test_a_long_value_that_is_no_hub_id_is_never_shown_nor_sent(tmp_path):
    value = "abcdefghijklmnopqrstuvwxyzabcdefghijklmn"  # not key-shaped, yet no ORG/NAME
    result = offline_estimate(tmp_path, value)
    assert result.returncode == 2
    assert value not in result.stdout + result.stderr
    assert result.stderr == (
        f"draftgen: the tokenizer given is a {len(value)}-character value that is no directory, "
        "hub id or fixture and may be a key (not shown, not sent to the hub); pass a local "
        "directory (a downloaded model folder), a hub id (ORG/NAME) or fixture:NAME\n"
    )


def test_a_cached_hub_id_loads_without_the_hub(tmp_path):
    from draftgen_testing.fixtures import build_fixture

    # The cache as huggingface_hub lays it out: a snapshot, and refs/main naming it.
    repo = tmp_path / "hf" / "hub" / "models--example--qwen3"
    snapshot = repo / "snapshots" / ("0" * 40)
    shutil.copytree(build_fixture("qwen3"), snapshot)
    (snapshot / "config.json").write_text('{"model_type": "qwen2"}')  # AutoTokenizer reads it
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0" * 40)
    result = offline_estimate(tmp_path, "example/qwen3")
    assert result.returncode == 0, result.stderr
    assert "  prompt tokens      9\n" in result.stdout


def test_third_party_loggers_go_through_the_redacting_handler(capsys):
    import logging

    from draftgen import logs

    try:
        logs.configure("info")
        hub = logging.getLogger("huggingface_hub.utils._http")
        logging.getLogger("huggingface_hub").addHandler(logging.StreamHandler())  # as on import
        logs.adopt_third_party()
        hub.warning("Retrying in 1s [Retry 1/5].")
        hub.error(f"requesting HEAD {NO_HUB}/{KEY}/resolve/main/config.json")
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1 and err[0].endswith(
            f"ERROR huggingface_hub.utils._http: requesting HEAD {NO_HUB}/***/resolve/main/"
            "config.json"
        )
    finally:
        logs.configure("info")


# -- 3. export --out ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return make_run(tmp_path_factory.mktemp("edges"), rows=12)


def test_export_refuses_to_replace_a_file_that_is_not_its_own(run_dir, tmp_path):
    other = tmp_path / "notes.jsonl"
    other.write_text("my notes\n")
    result = draftgen("export", str(run_dir), "--out", str(other))
    assert result.returncode == 2
    assert result.stderr == (
        f"draftgen: --out {other} exists and is not an earlier export of this run: choose a new "
        "--out, or pass --force to replace it\n"
    )
    assert other.read_text() == "my notes\n"
    for fmt in ("parquet", "specforge-text"):
        result = draftgen("export", str(run_dir), "--format", fmt, "--out", str(other))
        assert result.returncode == 2 and "is not an earlier export" in result.stderr, fmt
    result = draftgen("export", str(run_dir), "--out", str(other), "--force")
    assert result.returncode == 0, result.stderr
    assert json.loads(other.read_text().splitlines()[0])["input_ids"]


def test_export_replaces_its_own_earlier_export(run_dir, tmp_path):
    for fmt, name in (("specforge", "t.jsonl"), ("specforge-text", "c.jsonl"), ("parquet", "t.pq")):
        out = tmp_path / name
        first = draftgen("export", str(run_dir), "--format", fmt, "--out", str(out))
        assert first.returncode == 0, first.stderr
        # With the unverified samples, and back: each time the file is this run's export.
        for extra in (["--include-unverified"], []):
            again = draftgen("export", str(run_dir), "--format", fmt, "--out", str(out), *extra)
            assert again.returncode == 0, (fmt, again.stderr)
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")  # nothing in it to lose
    assert draftgen("export", str(run_dir), "--out", str(empty)).returncode == 0


def test_an_export_path_error_names_the_path_given(run_dir):
    result = draftgen("export", str(run_dir), "--out", "/proc/x.jsonl")
    assert result.returncode == 2
    assert (
        result.stderr == "draftgen: cannot write --out /proc/x.jsonl (No such file or directory)\n"
    )
    assert ".partial" not in result.stderr


# -- 3. inputs and flags --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, extra", [("rows.jsonl", []), ("rows.txt", ["--input-format", "jsonl"])]
)
def test_a_json_array_read_as_json_lines_says_so_once(tmp_path, name, extra):
    rows = tmp_path / name
    rows.write_text(
        '  \n[\n  {"messages": [{"role": "user", "content": "a"}]},\n'
        '  {"messages": [{"role": "user", "content": "b"}]}\n]\n'
    )
    argv = ["estimate", "--no-config", "--input", str(rows), *extra]
    result = draftgen(*argv, "--model", "m", "--tokenizer", "fixture:kimi-k2.5")
    assert result.returncode == 2
    assert result.stderr == (
        f"draftgen: {rows} holds a JSON array, not JSON lines: pass --input-format json\n"
    )


@pytest.mark.parametrize(
    "flag, message",
    [
        (
            "--max-token",
            "unknown option --max-token (its value is not shown); did you mean --max-tokens?",
        ),
        (
            "--max_tokens",
            "unknown option --max_tokens (its value is not shown); did you mean --max-tokens?",
        ),
        ("--num-prompts", "unknown option --num-prompts; did you mean --limit?"),
        ("--Concurrency", "unknown option --Concurrency; did you mean --concurrency?"),
        ("--temprature", "unknown option --temprature; did you mean --temperature?"),
    ],
)
def test_a_near_miss_of_a_flag_names_the_flag(flag, message):
    result = draftgen("run", flag, "5")
    assert result.returncode == 2
    assert result.stderr == f"draftgen run: {message} (see draftgen run --help)\n"


def test_every_unknown_flag_is_named_with_its_own_hint():
    # Before: "unknown option --bogus-a (and 2 more)", one fix per try.
    result = draftgen("estimate", "--bogus-a", "--max_tokens", "5", "--api-keyy", KEY)
    assert result.returncode == 2 and KEY not in result.stderr
    assert result.stderr.startswith(
        "draftgen estimate: unknown options --bogus-a, --max_tokens (did you mean --max-tokens?), "
        "--api-keyy (did you mean --api-key-env?); API keys are never taken on the command line"
    )


def test_a_key_flag_still_says_where_keys_go():
    result = draftgen("run", "--api-key", KEY)
    assert result.returncode == 2 and KEY not in result.stderr
    assert "unknown option --api-key (its value is not shown); API keys are never" in result.stderr


# -- 3. status of a folder of runs ----------------------------------------------------------------


def test_status_of_a_folder_of_runs_lists_them(run_dir, tmp_path):
    folder = tmp_path / "runs"
    folder.mkdir()
    for name in ("b", "a"):
        shutil.copytree(run_dir, folder / name, ignore=shutil.ignore_patterns("*.lock"))
    (folder / "notes").mkdir()  # not a run: not listed
    status = json.loads(draftgen("status", str(run_dir), "--json").stdout)
    result = draftgen("status", str(folder))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    failures = sum(status["failures"].values())
    share = f"{status['verified'] / status['samples']:.1%}"
    assert lines[0] == f"{folder} holds 2 draftgen runs:"
    for line, name in zip(lines[1:3], ("a", "b"), strict=True):
        assert line.split() == [
            str(folder / name),
            str(status["completions"]),
            "completions,",
            str(status["samples"]),
            "samples,",
            "verified",
            str(status["verified"]),
            f"({share}),",
            str(failures),
            "failures,",
            usd(status["cost"]),  # money as every command prints it
        ]
    assert lines[3] == "draftgen status RUN_DIR shows one of them in full"
    listed = json.loads(draftgen("status", str(folder), "--json").stdout)["runs"]
    assert list(listed) == [str(folder / "a"), str(folder / "b")]
    assert listed[str(folder / "a")]["samples"] == status["samples"]
    empty = draftgen("status", str(folder / "notes"))
    assert empty.returncode == 2 and "holds no draftgen run" in empty.stderr


# -- 3. --log-json --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--log-json", "run", "--max-token", "5"],
            "draftgen run: unknown option --max-token (its value is not shown); did you mean "
            "--max-tokens? (see draftgen run --help)",
        ),
        (
            ["--log-json", "status", "/nonexistent/run"],
            "draftgen: /nonexistent/run holds no draftgen run (draftgen.sqlite is missing)",
        ),
        # A global flag after the command means the same.
        (
            ["run", "--max-token", "5", "--log-json"],
            "draftgen run: unknown option --max-token (its value is not shown); did you mean "
            "--max-tokens? (see draftgen run --help)",
        ),
        (
            ["status", "/nonexistent/run", "--log-json"],
            "draftgen: /nonexistent/run holds no draftgen run (draftgen.sqlite is missing)",
        ),
    ],
)
def test_log_json_makes_every_stderr_line_json_from_the_first(argv, message):
    result = draftgen(*argv, subprocess_only=True)
    assert result.returncode == 2
    lines = [json.loads(line) for line in result.stderr.splitlines()]
    assert len(lines) == 1
    assert {k: lines[0][k] for k in ("level", "logger", "message")} == {
        "level": "error",
        "logger": "draftgen.cli",
        "message": message,
    }
    assert lines[0]["ts"].endswith("+00:00")


@pytest.mark.parametrize(
    "argv, level, json_lines",
    [
        (["status", "r"], "info", False),
        (["--log-level", "debug", "--log-json", "status", "r"], "debug", True),
        (["status", "r", "--log-level", "debug", "--log-json"], "debug", True),
        (["export", "--log-json", "r", "--out", "o", "--log-level=warning"], "warning", True),
        # Given on both sides, the one after the command is the last word.
        (
            ["--log-level", "debug", "--log-json", "status", "r", "--log-level", "error"],
            "error",
            True,
        ),
    ],
)
def test_global_flags_mean_the_same_before_and_after_the_command(argv, level, json_lines):
    args = cli.build_parser().parse_args(argv)
    assert (args.log_level, args.log_json) == (level, json_lines)


def test_log_json_keeps_records_and_wraps_printed_lines(run_dir, tmp_path):
    out = tmp_path / "t.jsonl"
    result = draftgen("--log-json", "export", str(run_dir), "--out", str(out), subprocess_only=True)
    assert result.returncode == 0, result.stderr
    assert all(json.loads(line) for line in result.stderr.splitlines())

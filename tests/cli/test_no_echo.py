"""What the command prints of what it did not write itself: a value that could be a key is
named by its length, never shown; a server's finish reason or error is printed defused (its
control characters and ANSI escapes written as escapes)."""

from __future__ import annotations

import asyncio

import pytest
from conftest import draftgen

from draftgen.generate.progress import RunProgress
from draftgen.records import Completion
from draftgen.redact import described, printable
from draftgen.store.database import CompletionWriter, Store

STRAY = "somekeylikestring123456"  # no sk- prefix, not random enough for redact: still masked
HIDDEN = "a 23-character string (not shown: it may be a key)"
TOKENIZER = "fixture:qwen3"


def run_argv(tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"messages": [{"role": "user", "content": "hi"}]}\n')
    argv = ["run", "--input", str(prompts), "--model", "m", "--tokenizer", TOKENIZER]
    return [*argv, "--out", str(tmp_path / "run")]


def test_a_stray_positional_argument_is_named_by_its_length(tmp_path):
    result = draftgen(*run_argv(tmp_path), STRAY, "--no-config")
    assert result.returncode == 2
    assert STRAY not in result.stdout + result.stderr
    assert result.stderr == (
        f"draftgen run: unexpected argument {HIDDEN} (see draftgen run --help)\n"
    )


@pytest.mark.parametrize(
    "flag, said",
    [
        ("--concurrency", f"argument --concurrency: {HIDDEN} is not a positive integer"),
        ("--max-cost", f"argument --max-cost: {HIDDEN} is not a number"),
        ("--input-format", f"argument --input-format: invalid choice: {HIDDEN} (choose from"),
    ],
)
def test_a_key_given_to_a_typed_flag_is_not_echoed(tmp_path, flag, said):
    result = draftgen(*run_argv(tmp_path), flag, STRAY, "--no-config")
    assert result.returncode == 2
    assert STRAY not in result.stdout + result.stderr
    assert said in result.stderr


@pytest.mark.parametrize(
    "line, said",
    [
        (f'max_cost = "{STRAY}"', f"max_cost must be a number, not {HIDDEN}"),
        (f'concurrency = "{STRAY}"', f"concurrency must be an integer, not {HIDDEN}"),
        (
            f'input_format = "{STRAY}"',
            f"input_format must be one of auto, jsonl, json, parquet, hf, glaive, not {HIDDEN}",
        ),
        ("concurrency = 0", "concurrency = 0 is refused: 0 is not a positive integer"),
        ("max_cost = true", "max_cost must be a number, not a boolean True"),
    ],
)
def test_a_mistyped_toml_value_is_not_echoed(tmp_path, line, said):
    config = tmp_path / "draftgen.toml"
    config.write_text(line + "\n")
    result = draftgen(*run_argv(tmp_path), "--config", str(config))
    assert result.returncode == 2
    assert STRAY not in result.stdout + result.stderr
    assert result.stderr == f"draftgen: {config}: {said}\n"


def test_described_shows_only_what_cannot_be_a_key(tmp_path):
    assert described("12.5") == "'12.5'"
    assert described("extra") == "'extra'"
    assert described("two words here") == "'two words here'"
    assert described(str(tmp_path)) == repr(str(tmp_path))
    assert described("x" * 40) == "a 40-character string (not shown: it may be a key)"
    assert described(7) == "7"


HOSTILE = "stop\x1b[2J\x1b]0;owned\x07\r\n\u202eevil"
DEFUSED = "stop\\x1b[2J\\x1b]0;owned\\x07\\x0d\\x0a\\u202eevil"


def test_printable_writes_every_control_character_as_its_escape():
    assert printable(HOSTILE) == DEFUSED
    assert printable("line one\nline two", newlines=True) == "line one\nline two"
    assert printable("café 日本 🎉\ttab") == "café 日本 🎉\\x09tab"


def test_status_prints_a_servers_finish_reason_and_failure_reason_defused(tmp_path):
    store = Store(tmp_path / "run")
    writer = CompletionWriter(store.path)
    completion = Completion("g", "Evil\x1b[31m", "m", "", "a", None, HOSTILE, HOSTILE, {})
    asyncio.run(writer.add_completion("k1", "r1", 0, b'{"messages": []}', completion, 1, [], 0))
    asyncio.run(writer.add_failure("k2", "r2", 0, "http_400: " + HOSTILE, 1, []))
    writer.close()
    store.close()
    result = draftgen("status", str(tmp_path / "run"))
    assert result.returncode == 0, result.stderr
    assert (
        "\x1b" not in result.stdout and "\r" not in result.stdout and "\u202e" not in result.stdout
    )
    assert f"    {DEFUSED:<28} 1" in result.stdout.splitlines()
    assert f"    http_400: {DEFUSED} 1" in result.stdout.splitlines()


def test_progress_prints_failure_kinds_defused():
    progress = RunProgress(total_rows=1)
    progress.failures["server said " + HOSTILE] += 1
    assert "\x1b" not in progress.line()
    assert f"failed turns: server said {DEFUSED} 1" in progress.line()

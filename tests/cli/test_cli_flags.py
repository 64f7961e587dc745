"""Flags people guess right (help, defaults, choices, -o, --completions-per-turn), a run that says
what it plans before it starts, and rejected rows counted everywhere a run is summed up."""

from __future__ import annotations

import argparse
import json
import sqlite3
import subprocess
import sys

import pytest
from conftest import draftgen, write_prompts

from draftgen.cli import main as cli
from draftgen.cli.config import load_config
from draftgen.profiles import PROFILE_NAMES, PROFILES
from draftgen.store.database import RunLock

TOKENIZER = "fixture:kimi-k2.5"


def commands() -> dict[str, argparse.ArgumentParser]:
    return cli._subparsers(cli.build_parser())


def test_every_flag_and_positional_has_help_and_every_default_is_shown():
    missing, no_default = [], []
    for name, parser in commands().items():
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            label = f"{name} {'/'.join(action.option_strings) or action.metavar}"
            if not action.help:
                missing.append(label)
            default = getattr(action, "draftgen_default", action.default)
            if default not in (None, False, [], argparse.SUPPRESS) and "default" not in (
                action.help or ""
            ):
                no_default.append(label)
    assert missing == [] and no_default == []
    run = commands()["run"].format_help()
    assert "--max-tokens N" in run and "(default: none sent" in run


def test_profile_lists_and_checks_its_choices(capsys):
    help_text = " ".join(commands()["run"].format_help().split())
    assert all(name in help_text for name in PROFILES)
    with pytest.raises(SystemExit):
        cli.main(["run", "--profile", "kimi"])
    err = capsys.readouterr().err
    assert "argument --profile: invalid choice: 'kimi'" in err and "kimi-k2" in err


def test_choices_are_the_registries():
    """A backend, dialect, export format or profile added to its registry is a choice at once."""
    from draftgen.backends import BACKEND_NAMES
    from draftgen.generate.batch.dialects import DIALECT_NAMES
    from draftgen.outputs.export import FORMATS
    from draftgen.simulator.config import DIALECTS

    def choices(command: str, dest: str) -> list:
        (action,) = [a for a in commands()[command]._actions if a.dest == dest]
        return list(action.choices)

    assert choices("run", "backend") == list(BACKEND_NAMES)
    assert choices("estimate", "backend") == list(BACKEND_NAMES)
    assert choices("run", "batch_dialect") == list(DIALECT_NAMES)
    assert choices("simulate", "dialect") == list(DIALECTS)
    assert choices("export", "format") == list(FORMATS)
    assert choices("run", "profile") == choices("simulate", "profile") == list(PROFILE_NAMES)


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "-o", "runs/x"],
        ["export", "runs/x", "-o", "x.jsonl"],
        ["vocab", "runs/x", "-o", "vocab"],
        ["merge", "a", "b", "-o", "merged"],
    ],
)
def test_o_is_short_for_out(argv):
    assert str(cli.build_parser().parse_args(argv).out).endswith(argv[-1])


def test_samples_was_renamed_and_the_old_spelling_says_so(tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:
        cli.main(["run", "--samples", "3"])
    assert stopped.value.code == 2
    assert capsys.readouterr().err == (
        "draftgen run: --samples was renamed --completions-per-turn (completions of each turn; "
        "--limit caps the rows) (see draftgen run --help)\n"
    )
    for text in ("completions_per_turn = 3\n", "samples = 3\n"):  # the old key still works
        (tmp_path / "draftgen.toml").write_text(text)
        assert load_config(tmp_path / "draftgen.toml") == {"completions_per_turn": 3}


def test_run_says_what_it_plans_before_it_starts(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_prompts(tmp_path / "p.jsonl", 10)  # 10 rows, 3 invalid, one of them two turns
    argv = ["run", "--no-config", "--input", "p.jsonl", "--model", "m", "--tokenizer", TOKENIZER]
    result = draftgen(*argv, "--out", "run", "--completions-per-turn", "2")
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    planned = next(i for i, line in enumerate(lines) if "planned" in line)
    first_progress = next(i for i, line in enumerate(lines) if "draftgen.progress" in line)
    assert planned < first_progress
    assert lines[planned].endswith(
        "planned 24 requests: 12 turns of 10 rows x 2 completions per turn; 3 rows rejected "
        "(reasons in run/rejected.jsonl); identical turns are sent once, "
        "and turns already stored not again"
    )
    # A resume says what is stored already and what is left.
    stored = json.loads(draftgen("status", "run", "--json").stdout)["completions"]
    result = draftgen(*argv, "--out", "run", "--completions-per-turn", "2")
    assert result.returncode == 0, result.stderr
    (plan,) = [line for line in result.stderr.splitlines() if "planned" in line]
    assert 0 < stored <= 24
    assert (
        f"draftgen.run: planned 24 requests, {stored} already stored, at most {24 - stored} to "
        "send: 12 turns of 10 rows x 2 completions per turn;" in plan
    )
    from draftgen.inputs.plan import PlanCount
    from draftgen.run.pipeline import _plan_fields

    fields = _plan_fields(PlanCount(turns=12, completions_per_turn=2), stored)
    assert (fields["planned_requests"], fields["already_stored"], fields["to_send"]) == (
        24,
        stored,
        24 - stored,
    )


def test_nothing_to_plan_exits_2_in_one_sentence(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = ["run", "--no-config", "--model", "m", "--tokenizer", TOKENIZER, "--out", "run"]
    (tmp_path / "empty.jsonl").write_text("")
    result = draftgen(*argv, "--input", "empty.jsonl")
    assert result.returncode == 2
    assert result.stderr == "draftgen: nothing to generate: the input holds no rows (empty.jsonl)\n"
    (tmp_path / "bad.jsonl").write_text('{"broken\n{"messages": [{"role": "wizard"}]}\n')
    result = draftgen(*argv, "--input", "bad.jsonl")
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1
    assert result.stderr.startswith(
        "draftgen: nothing to generate: all 2 rows of the input were rejected (the first, line 1 "
        "of bad.jsonl: line is not valid JSON"
    )
    assert result.stderr.endswith("every row's reason is in run/rejected.jsonl\n")
    assert len((tmp_path / "run" / "rejected.jsonl").read_text().splitlines()) == 2


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A run over rows with three invalid ones; its directory and the run's own stdout."""
    tmp = tmp_path_factory.mktemp("summary")
    prompts = write_prompts(tmp / "p.jsonl", 12)
    argv = ["run", "--no-config", "--input", str(prompts), "--model", "m"]
    result = draftgen(*argv, "--tokenizer", TOKENIZER, "--out", str(tmp / "run"))
    assert result.returncode == 0, result.stderr
    return tmp / "run", result.stdout


def test_rejected_rows_are_in_the_summary_and_in_status(finished):
    out, summary = finished
    assert f"  rows rejected       3  (reasons in {out / 'rejected.jsonl'})" in summary
    assert "  rejected rows:\n         1  line is not valid JSON\n" in summary
    status = draftgen("status", str(out))
    assert status.stdout == summary  # the run's last words are what status says
    counts = json.loads(draftgen("status", str(out), "--json").stdout)
    assert counts["rejected"] == 3 and counts["active_run"] is None
    assert counts["rejected_reasons"] == {
        "line is not valid JSON": 1,
        "messages[i] has unknown role 'wizard'": 1,
        "messages[i].content is int, not a string": 1,
    }


def test_a_run_in_progress_is_named_by_status_and_export(finished, tmp_path):
    out, _ = finished
    db = sqlite3.connect(out / "draftgen.sqlite")
    total = db.execute("SELECT count(*) FROM samples WHERE verified = 1").fetchone()[0]
    with db:  # as if the run had stored two completions it has not reconstructed yet
        db.execute(
            "DELETE FROM samples WHERE key IN (SELECT key FROM samples WHERE verified = 1 LIMIT 2)"
        )
    running = RunLock(out)
    running.acquire()  # a run holds the lock (this process's pid; the commands run in others)
    try:
        status = draftgen("status", str(out), subprocess_only=True)
        assert f"  run active          draftgen pid {_pid()} is working on this directory" in (
            status.stdout
        )
        status_json = draftgen("status", str(out), "--json", subprocess_only=True)
        assert json.loads(status_json.stdout)["active_run"] == (f"pid {_pid()}")
        export = draftgen(
            "export", str(out), "--out", str(tmp_path / "a.jsonl"), subprocess_only=True
        )
        assert export.returncode == 0, export.stderr
        assert "interrupted" not in export.stdout + export.stderr
        assert export.stderr == (
            f"draftgen: a run is active in {out} (draftgen pid {_pid()}): this is a snapshot of "
            "the samples reconstructed so far; 2 completions stored but not yet reconstructed "
            "are left out, so run it again once the run has finished\n"
        )
        assert export.stdout == f"wrote {total - 2} rows to {tmp_path / 'a.jsonl'}\n"
    finally:
        running.release()
    # Once no run is active, export finishes what the run left (it was interrupted).
    export = draftgen("export", str(out), "--out", str(tmp_path / "b.jsonl"))
    assert export.stdout.splitlines() == [
        "reconstructed 2 samples the run had not reached (it was interrupted)",
        f"wrote {total} rows to {tmp_path / 'b.jsonl'}",
    ]


def test_reading_a_run_loads_neither_the_run_engine_nor_the_simulator(finished, tmp_path):
    """export and status parse and run without importing the engine (its HTTP client, endpoints)
    or the simulator: the imports would take longer than a small export."""
    out, _ = finished
    heavy = ("aiohttp", "draftgen.run.pipeline", "draftgen.simulator")
    code = (
        "import sys\n"
        "from draftgen.cli.main import main\n"
        f"main(['export', {str(out)!r}, '--out', {str(tmp_path / 'a.jsonl')!r}])\n"
        f"main(['status', {str(out)!r}])\n"
        f"print([name for name in {heavy!r} if name in sys.modules])\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "[]"
    # draftgen --help lists the engine's commands without building their options.
    light, full = cli.build_parser(engine_options=False), cli.build_parser()
    assert light.format_help() == full.format_help()


def _pid() -> int:
    import os

    return os.getpid()

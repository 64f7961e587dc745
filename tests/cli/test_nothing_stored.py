"""A run that stored nothing but failures never exits 0 (issue #27), and the library decides it
(issue #35): ``Run.execute()`` raises ``NothingStored`` with the sentence the CLI prints last."""

from __future__ import annotations

import pytest
from conftest import SimProcess, draftgen, run_args, write_prompts

from draftgen.api import NothingStored, Run, RunOptions
from draftgen.errors import DraftgenError
from draftgen.run.outcome import RunSummary, finished, nothing_stored


@pytest.fixture
def failing_server(tmp_path, monkeypatch):
    monkeypatch.setenv("DRAFTGEN_TEST_KEY", "sk-test")
    sim = SimProcess(tmp_path, "fixture:kimi-k2.5", faults=[("server_error", 1.0)])
    yield sim
    sim.stop()


def test_a_run_whose_every_request_failed_exits_2(tmp_path, failing_server):
    prompts = write_prompts(tmp_path / "p.jsonl", 4, invalid=False)
    args = run_args(failing_server, [prompts], tmp_path / "run", "fixture:kimi-k2.5")
    args[args.index("--max-attempts") + 1] = "1"
    result = draftgen(*args)
    assert result.returncode == 2, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "draftgen: no completion was stored: all 5 turns failed (gave_up_after_1_attempts 4, "
    )
    assert "the same command retries them" in last


def test_the_library_raises_what_the_cli_exits_2_for(tmp_path, failing_server):
    prompts = write_prompts(tmp_path / "p.jsonl", 4, invalid=False)
    options = RunOptions(
        inputs=[str(prompts)],
        model="test/model",
        tokenizer="fixture:kimi-k2.5",
        base_url=failing_server.base_url,
        api_key_env="DRAFTGEN_TEST_KEY",
        out=tmp_path / "run",
        max_attempts=1,
        retry_base_delay=0.01,
        no_calibrate=True,
    )
    with pytest.raises(NothingStored) as raised:
        Run(options).execute()
    error = raised.value
    assert isinstance(error, DraftgenError)
    assert error.summary.counts["completions"] == 0
    failures = error.summary.counts["failures"]
    assert sum(failures.values()) == 5
    assert str(error) == nothing_stored(error.summary.counts)
    assert str(error).startswith(
        "no completion was stored: all 5 turns failed (gave_up_after_1_attempts 4, "
    )
    # The same directory through the CLI: the same sentence, exit 2.
    args = run_args(failing_server, [prompts], tmp_path / "run", "fixture:kimi-k2.5")
    args[args.index("--max-attempts") + 1] = "1"
    result = draftgen(*args)
    assert result.returncode == 2, result.stderr
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .startswith("draftgen: no completion was stored: all 5 turns failed (")
    )


def test_what_counts_as_nothing_stored():
    assert nothing_stored({"completions": 0, "failures": {}}) == ""  # nothing was asked
    assert nothing_stored({"completions": 3, "failures": {"server_error": 2}}) == ""
    said = nothing_stored({"completions": 0, "failures": {"server_error": 2, "rejected": 1}})
    assert said == (
        "no completion was stored: all 3 turns failed (server_error 2, rejected 1); fix what "
        "the reasons say, and the same command retries them"
    )


def test_only_a_complete_run_is_judged_by_what_it_stored():
    failed = {"completions": 0, "failures": {"server_error": 2}}
    for stopped, outcome in (("interrupted", "interrupted"), ("reached --max-cost", "stopped")):
        summary = RunSummary(progress=None, counts=failed, stopped=stopped)
        assert summary.outcome == outcome
        assert finished(summary) is summary  # resumed, not failed
    with pytest.raises(NothingStored):
        finished(RunSummary(progress=None, counts=failed))
    assert finished(RunSummary(progress=None, counts={"completions": 1})).outcome == "complete"


def test_a_control_character_in_a_reason_is_escaped_by_the_cli(tmp_path, monkeypatch, capsys):
    from draftgen.cli import main as cli

    summary = RunSummary(progress=None, counts={"completions": 0, "failures": {"\x1b[31mx": 1}})

    def execute(self):
        return finished(summary)

    monkeypatch.setattr(Run, "execute", execute)
    monkeypatch.setattr("draftgen.cli.present.format_status", lambda counts, out: "status")
    monkeypatch.setenv("DRAFTGEN_TEST_KEY", "sk-test")
    code = cli.main(
        ["--log-level", "warning", "run", "--no-config", "--simulate", "--input", "p.jsonl"]
        + ["--model", "test/model", "--tokenizer", "fixture:kimi-k2.5"]
        + ["--out", str(tmp_path / "run")]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert "\x1b" not in err and "all 1 turns failed (\\x1b[31mx 1)" in err


def test_a_run_without_a_directory_is_refused_by_the_library_too(tmp_path):
    prompts = write_prompts(tmp_path / "p.jsonl", 2, invalid=False)
    options = RunOptions(
        inputs=[str(prompts)], model="test/model", tokenizer="fixture:kimi-k2.5", simulate=True
    )
    # Before: AttributeError ('NoneType' object has no attribute 'parents'), an internal error.
    with pytest.raises(DraftgenError) as raised:
        Run(options).execute()
    assert str(raised.value) == (
        "no run directory given: pass out= (--out, or out = ... in draftgen.toml)"
    )


def test_a_run_that_stored_less_than_planned_because_turns_failed_exits_4(tmp_path, monkeypatch):
    """Issue #41: an endpoint that died after 10 answers left 190 turns failed, and exit 0."""
    monkeypatch.setenv("DRAFTGEN_TEST_KEY", "sk-test")
    sim = SimProcess(tmp_path, "fixture:kimi-k2.5", extra=["--fail-after", "3"])
    try:
        prompts = write_prompts(tmp_path / "p.jsonl", 8, invalid=False)
        args = run_args(sim, [prompts], tmp_path / "run", "fixture:kimi-k2.5", "--concurrency", "1")
        args[args.index("--max-attempts") + 1] = "2"
        result = draftgen(*args)
    finally:
        sim.stop()
    assert result.returncode == 4, result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "draftgen: 5 turns failed (gave_up_after_2_attempts 4, earlier_turn_failed 1); the "
        "completions are stored, and the same command retries the failed turns"
    )


def test_the_outcome_of_a_run_with_failed_turns():
    summary = RunSummary(progress=None, counts={"completions": 3, "failures": {"rejected": 2}})
    assert summary.outcome == "turns_failed"
    assert finished(summary) is summary  # something was stored: a summary, not an error
    assert summary.failed_turns == (
        "2 turns failed (rejected 2); the completions are stored, and the same command retries "
        "the failed turns"
    )
    assert RunSummary(progress=None, counts={"completions": 3, "failures": {}}).outcome == (
        "complete"
    )

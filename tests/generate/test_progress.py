"""Progress that tells the truth: an ETA from the recent rate of new work only, turns counted once
each (generated, from the store, duplicates, failed), live errors equal to the final summary's,
and a stop that says so."""

from __future__ import annotations

import asyncio
import io
import json

import pytest
from conftest import write_prompts
from rich.console import Console

from draftgen.generate.progress import ProgressDisplay, RunProgress
from draftgen.inputs.ingest import read_conversations
from draftgen.inputs.plan import plan_turns
from draftgen.run.pipeline import RunOptions, run
from draftgen.simulator import SimConfig, SimulatorThread

TOKENIZER = "fixture:kimi-k2.5"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_resume_counts_only_new_work_in_the_eta():
    clock = Clock()
    progress = RunProgress(total_rows=100, clock=clock)
    progress.rows_done = 80  # found stored at once by the producer: no work, no rate
    for _ in range(10):
        clock.now += 1.0  # then one row of new work a second
        progress.row_worked()
    # 10 rows left at 1 row/s; counting the stored rows as progress said about 1 s.
    assert round(progress.eta_seconds()) == 10


def test_the_first_eta_waits_for_a_rate_and_ignores_the_first_latency():
    clock = Clock()
    progress = RunProgress(total_rows=142, clock=clock)
    clock.now = 20.0  # the first answers take a whole latency to come back
    progress.row_worked()
    assert progress.eta_seconds() is None  # one row is no rate
    for _ in range(21):
        clock.now += 0.1  # then answers arrive 10 a second
        progress.row_worked()
    # 120 rows left at 10/s is 12 s (elapsed / rows done said 0:01:49).
    assert progress.eta_seconds() == pytest.approx(12.0)
    for _ in range(60):
        clock.now += 1.0  # it slows to 1/s: the last minute's rate counts, not the start
        progress.row_worked()
    assert progress.eta_seconds() == pytest.approx(60.0, rel=0.05)


def test_after_ctrl_c_the_display_says_it_is_stopping():
    progress = RunProgress(total_rows=10, rows_done=4, turns_done=6)
    progress.watch(in_flight=lambda: 3)
    progress.stopped = "interrupted"
    assert progress.eta_seconds() is None
    assert progress.line().endswith(
        "| stopping: no new requests; 3 in flight are still stored as they arrive"
    )
    assert "in flight 3" in progress.line()


def test_the_plain_line_carries_every_figure(capsys):
    from draftgen import logs

    logs.configure("info", json=True)
    progress = RunProgress(total_rows=10, rows_done=4, turns_done=4, cost=0.5)
    progress.retried.update(rate_limited=2)
    progress.failures.update(gave_up_after_2_attempts=1)

    class Tally:
        samples, verified = 4, 3
        providers = {"Alpha": {"samples": 4, "verified": 3, "cost": 0.0003}}

        def start(self): ...

        def stop(self): ...

    progress.watch(in_flight=lambda: 7, tally=Tally())
    with ProgressDisplay(progress, interval=3600, stream=io.StringIO()):
        pass
    record = json.loads(capsys.readouterr().err.splitlines()[-1])
    assert record["in_flight"] == 7 and record["verified_share"] == 0.75
    assert record["retried_errors"] == {"rate_limited": 2}
    assert record["failed_turns"] == {"gave_up_after_2_attempts": 1}
    assert "| verified 3/4 (75.0%) |" in record["message"]
    assert "elapsed 0:00:00" in record["message"]
    assert (record["verified"], record["samples_reconstructed"]) == (3, 4)
    assert "retried: rate_limited 2; failed turns: gave_up_after_2_attempts 1" in record["message"]
    # The headline: what the store paid over the samples it verified.
    assert "| $/verified $0.0001000 |" in record["message"]
    assert record["cost_per_verified"] == pytest.approx(0.0001)


def test_the_display_shows_a_line_per_provider_from_the_store():
    class Tally:
        samples, verified = 0, 0
        providers: dict = {}

    progress = RunProgress(total_rows=10)
    progress.watch(tally=Tally())
    display = ProgressDisplay(progress, stream=io.StringIO())
    assert "$/verified -" in progress.line() and progress.fields()["cost_per_verified"] is None
    Tally.samples, Tally.verified = 30, 25
    Tally.providers = {
        "Alpha": {"samples": 20, "verified": 19, "cost": 0.0019, "cost_per_verified": 0.0001},
        "[red]Beta": {"samples": 10, "verified": 6, "cost": 0.003, "cost_per_verified": 0.0005},
        "Gamma": {"samples": 0, "verified": 0, "cost": 0.0, "cost_per_verified": None},
    }
    console = Console(file=io.StringIO(), width=100)
    console.print(display._table())
    shown = console.file.getvalue()
    assert "$ per verified sample" in shown and "$0.0001960" in shown  # 0.0049 over 25
    rows = [line.split("│")[1:5] for line in shown.splitlines() if line.count("│") == 5]
    assert "┃ provider " in shown and " $ per verified ┃" in shown
    assert [[cell.strip() for cell in row] for row in rows] == [
        ["Alpha", "20", "95.0%", "$0.0001000"],
        ["[red]Beta", "10", "60.0%", "$0.0005000"],  # a server's name, never rich markup
        ["Gamma", "0", "-", "-"],
    ]


def test_turns_add_up_and_live_errors_equal_the_final_summary(tmp_path, monkeypatch):
    monkeypatch.setenv("DRAFTGEN_TEST_KEY", "sk-test")
    prompts = write_prompts(tmp_path / "p.jsonl", 40)  # duplicates of one prompt among them
    turns = sum(
        len(plan_turns(row))
        for row in read_conversations([str(prompts)])
        if hasattr(row, "messages")
    )
    config = SimConfig(
        tokenizer=TOKENIZER,
        seed=3,
        max_tokens=40,
        faults={"rate_limit": 0.2, "server_error": 0.2},
    )
    with SimulatorThread(config) as sim:
        options = RunOptions(
            inputs=[str(prompts)],
            model="m",
            tokenizer=TOKENIZER,
            out=tmp_path / "run",
            base_url=sim.base_url,
            api_key_env="DRAFTGEN_TEST_KEY",
            concurrency=4,
            retry_base_delay=0.001,
            max_attempts=2,
            progress_interval=3600,
        )
        first = asyncio.run(run(options))
        again = asyncio.run(run(options)).progress
    fresh = first.progress
    # A fresh run reuses nothing: duplicates are counted as such, and every turn once.
    assert fresh.turns_reused == 0 and fresh.turns_duplicate > 0
    assert fresh.turns_done + fresh.turns_duplicate + fresh.turns_failed == turns
    # Live figures are the summary's: retried attempts by kind, failed turns by reason.
    assert sum(fresh.retried.values()) > 0 and sum(fresh.failures.values()) > 0
    assert first.counts["retried_errors"] == dict(fresh.retried)
    # One count of retries: status's retried attempts are the failed attempts sent again.
    assert first.counts["retried_attempts"] == sum(fresh.retried.values())
    assert first.counts["failures"] == dict(fresh.failures)
    # A resume finds the stored turns (from an earlier run, so not duplicates) and retries
    # only the failed ones.
    assert again.turns_reused > 0 and again.turns_duplicate == 0
    assert again.turns_done + again.turns_failed == fresh.turns_failed


def test_the_verified_count_follows_the_reconstruction_to_the_last_line(capsys):
    from draftgen import logs

    logs.configure("info", json=True)

    class Tally:  # nothing reconstructed while the run worked, all of it as it stopped
        samples, verified = 0, 0
        providers: dict = {}

        def start(self): ...

        def stop(self):
            Tally.samples, Tally.verified = 25, 23

    progress = RunProgress(total_rows=27, rows_done=27, turns_done=25)
    progress.watch(tally=Tally())
    assert "| verified - (none reconstructed yet) |" in progress.line()
    with ProgressDisplay(progress, interval=3600, stream=io.StringIO()):
        pass
    record = json.loads(capsys.readouterr().err.splitlines()[-1])
    # The last line is written after the tally's last count: what the summary will say.
    assert "| verified 23/25 (92.0%) |" in record["message"]
    assert (record["verified"], record["samples_reconstructed"]) == (23, 25)


def test_a_runs_last_progress_line_agrees_with_its_summary(tmp_path, monkeypatch, capsys):
    """The engine writes its last line as the requests end; reconstruction held back until then
    (as a long run's is, behind its last answers) makes every sample after it: the line written
    once reconstruction is done is the summary's."""
    from draftgen import logs
    from draftgen.reconstruct import background

    monkeypatch.setenv("DRAFTGEN_TEST_KEY", "sk-test")
    monkeypatch.setenv(background.WHERE_ENV, "thread")
    follow = background._follow_run

    def behind(run_dir, spec, profile, chars, started, done, stop):
        done.wait()  # nothing is reconstructed while the requests go on
        return follow(run_dir, spec, profile, chars, started, done, stop)

    monkeypatch.setattr(background, "_follow_run", behind)
    logs.configure("info", json=True)
    prompts = write_prompts(tmp_path / "p.jsonl", 12, invalid=False)
    with SimulatorThread(SimConfig(tokenizer=TOKENIZER, seed=1, max_tokens=30)) as sim:
        options = RunOptions(
            inputs=[str(prompts)],
            model="m",
            tokenizer=TOKENIZER,
            out=tmp_path / "run",
            base_url=sim.base_url,
            api_key_env="DRAFTGEN_TEST_KEY",
            concurrency=4,
            no_calibrate=True,
            progress_interval=3600,
        )
        summary = asyncio.run(run(options))
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line]
    progress = [line for line in lines if line["logger"] == "draftgen.progress"]
    assert progress[-2]["samples_reconstructed"] == 0  # the engine's last line
    last = progress[-1]
    counts = summary.counts
    assert counts["samples"] > 0
    assert (last["verified"], last["samples_reconstructed"]) == (
        counts["verified"],
        counts["samples"],
    )

"""``draftgen run --batch`` end to end against the simulator: the same export as a live run at
half the price, rounds for multi-turn rows, failed batches, detach, status, cancel, Ctrl-C,
--max-cost and the estimate."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from batch_runs import (
    TOKENIZER,
    batch_args,
    batch_sim,
    check_never_twice,
    read_log,
    store_rows,
)
from conftest import (
    SECRET,
    SimProcess,
    assert_worked,
    check_against_truth,
    draftgen,
    export_all,
    run_args,
)

from draftgen.cli import main as cli
from draftgen.cli.present import format_estimate
from draftgen.run.estimate import EstimateOptions, estimate
from draftgen.simulator import SimConfig, start_simulator

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "prompts.jsonl"


def exported(path: Path) -> dict[str, dict]:
    return {row["id"]: row for row in map(json.loads, path.read_text().splitlines())}


def cost(out: Path) -> float:
    return store_rows(out, "SELECT sum(cost) FROM completions")[0][0]


@pytest.mark.slow
def test_examples_through_batch_export_exactly_what_a_live_run_exports_at_half_the_price(
    tmp_path,
):
    live_sim = SimProcess(tmp_path, TOKENIZER, quirks=[("drift", 0.05), ("leak_eot", 0.05)])
    sim = batch_sim(tmp_path)
    try:
        live_out, batch_out = tmp_path / "live", tmp_path / "batch"
        result = draftgen(*run_args(live_sim, [EXAMPLES], live_out, TOKENIZER))
        assert result.returncode == 0, result.stderr
        result = draftgen(*batch_args(sim, [EXAMPLES], batch_out))
        assert result.returncode == 0, result.stderr
        assert "batches:  0 in flight (0 rows), " in result.stdout
        live = exported(export_all(live_out, tmp_path / "live.jsonl"))
        batch = exported(export_all(batch_out, tmp_path / "batch.jsonl"))
        assert live.keys() == batch.keys() and len(live) == 25
        for key, row in live.items():
            other = batch[key]
            assert other["generation_id"].startswith("gen-batch-")
            # The same ids, mask and verdict: only the generation id and the provider differ
            # (one provider serves a whole batch).
            same = {k: v for k, v in row.items() if k not in ("generation_id", "provider")}
            assert same == {
                k: v for k, v in other.items() if k not in ("generation_id", "provider")
            }
        check_against_truth(batch_out, sim, tmp_path / "batch.jsonl")
        assert cost(batch_out) == pytest.approx(cost(live_out) / 2, rel=1e-6)
        # Multi-turn rows advance one turn per round: turn k+1 went in a later batch than k.
        rows = store_rows(
            batch_out,
            "SELECT r.source_id, r.turn, i.created_at FROM batch_rows r JOIN batch_intents i"
            " ON i.nonce = r.nonce WHERE r.outcome = 'done' ORDER BY r.source_id, r.turn",
        )
        sent_at: dict[str, list] = {}
        for source, turn, created in rows:
            sent_at.setdefault(source, []).append((turn, created))
        chains = [turns for turns in sent_at.values() if len(turns) > 1]
        assert chains, "the examples hold multi-turn rows"
        for turns in chains:
            assert [t for t, _ in turns] == sorted(t for t, _ in turns)
            assert all(a[1] < b[1] for a, b in zip(turns, turns[1:], strict=False))
        check_never_twice(read_log(sim))
        assert SECRET not in result.stdout + result.stderr
        for path in batch_out.rglob("*"):
            if path.is_file():
                assert SECRET.encode() not in path.read_bytes(), path
    finally:
        live_sim.stop()
        sim.stop()


@pytest.mark.slow
def test_a_failing_batch_says_why_in_one_sentence_and_its_rows_give_up_after_the_budget(
    tmp_path,
):
    sim = batch_sim(tmp_path, faults=[("batch_failed", 1.0)])
    try:
        inputs = tmp_path / "p.jsonl"
        inputs.write_text(
            json.dumps({"id": "a", "messages": [{"role": "user", "content": "Hi"}]})
            + "\n"
            + json.dumps(
                {
                    "id": "b",
                    "messages": [
                        {"role": "user", "content": "One"},
                        {"role": "assistant", "content": "x"},
                        {"role": "user", "content": "Two"},
                    ],
                }
            )
            + "\n"
        )
        out = tmp_path / "run"
        result = draftgen(*batch_args(sim, [inputs], out, "--batch-retries", "1"))
        # Nothing was stored: never a success (exit 2), and the last line says why.
        assert result.returncode == 2, result.stderr
        assert "no completion was stored: all 3 turns failed" in result.stderr
        sentences = re.findall(r"batch (batch_\w+) failed: (.*)", result.stderr)
        assert len(sentences) == 2  # the first batch and the one retry
        assert all(
            re.fullmatch(
                r"Request dg\w{10}-0000\d: invalid request body; its 2 rows go back "
                r"to pending",
                text,
            )
            for _, text in sentences
        ), sentences
        failures = dict(store_rows(out, "SELECT source_id || ':' || turn, reason FROM failures"))
        assert failures == {
            "a:0": "gave_up_after_2_batches",
            "b:0": "gave_up_after_2_batches",
            "b:1": "earlier_turn_failed",
        }
        assert "gave_up_after_2_batches" in result.stdout  # the summary's final failures
        assert store_rows(out, "SELECT count(*) FROM completions")[0][0] == 0
        stats = check_never_twice(read_log(sim))
        assert stats == {"bodies": 2, "batches": 2, "sent_again": 2}
    finally:
        sim.stop()


@pytest.mark.slow
def test_detach_submits_and_exits_status_shows_the_batch_and_the_same_command_collects(tmp_path):
    sim = batch_sim(tmp_path, seconds=1.5)
    try:
        out = tmp_path / "run"
        args = batch_args(sim, [EXAMPLES], out, "--batch-detach")
        first = draftgen(*args)
        assert first.returncode == 0, first.stderr
        match = re.search(
            r"detached: 1 batches \((\d+) rows\) are running at the provider", first.stderr
        )
        assert match, first.stderr
        status = draftgen("status", str(out))
        assert f"batches:  1 in flight ({match.group(1)} rows)" in status.stdout
        (batch_id,) = [e["batch_id"] for e in read_log(sim) if e["event"] == "create"]
        assert re.search(rf"{batch_id}: \w+, {match.group(1)} rows", status.stdout)
        again = draftgen(*args)
        assert again.returncode == 0, again.stderr
        events = read_log(sim)
        creates = [e for e in events if e["event"] == "create"]
        ends = {e["batch_id"]: e for e in events if e["event"] == "end"}
        stored = store_rows(out, "SELECT count(*) FROM completions")[0][0]
        if len(creates) == 1:  # still running when it looked: nothing new is sent
            assert stored == 0 and batch_id not in ends
        else:  # it had ended: its rows are stored, and only the next round was sent
            assert len(creates) == 2 and ends[batch_id]["at"] < creates[1]["at"]
            assert stored == len(ends[batch_id]["delivered"])
        result = draftgen(*batch_args(sim, [EXAMPLES], out))
        assert result.returncode == 0, result.stderr
        export_all(out, tmp_path / "all.jsonl")
        check_against_truth(out, sim, tmp_path / "all.jsonl")
        check_never_twice(read_log(sim))
    finally:
        sim.stop()


# Long: it waits out a batch's real window in seconds (~12 s); CI runs it with -m long.
@pytest.mark.slow
@pytest.mark.long
def test_cancel_says_what_is_still_billed_and_the_next_run_sends_the_rows_again(tmp_path):
    sim = batch_sim(tmp_path, seconds=2.5)
    try:
        out = tmp_path / "run"
        first = draftgen(*batch_args(sim, [EXAMPLES], out, "--batch-detach"))
        assert first.returncode == 0, first.stderr
        time.sleep(1.0)  # visible, in progress, some rows finished
        cancelled = draftgen("cancel", str(out), env_extra={"DRAFTGEN_TEST_KEY": SECRET})
        assert cancelled.returncode == 0, cancelled.stderr
        (line,) = cancelled.stdout.splitlines()
        match = re.fullmatch(
            r"batch (batch_\w+): (cancelling) \(it may still end completed if the provider "
            r"finishes first\); (\d+) of (\d+) rows had finished: they are billed "
            r"an amount the API does not report yet and draftgen cannot bound \(the run set no "
            r"--max-tokens\); draftgen cancel again once it has ended says what the API charged; "
            r"a cancelled OpenRouter batch returns no rows, so the next run --batch sends all \4 "
            r"again",
            line,
        )
        assert match, line
        again = draftgen("cancel", str(out))
        assert again.returncode == 0, again.stderr
        assert again.stdout.startswith(f"batch {match.group(1)}: ")
        assert "(as the API charged it)" in again.stdout or "cancelling since" in again.stdout
        result = draftgen(*batch_args(sim, [EXAMPLES], out))
        assert result.returncode == 0, result.stderr
        events = read_log(sim)
        ends = {e["batch_id"]: e for e in events if e["event"] == "end"}
        assert ends[match.group(1)]["status"] == "cancelled"
        assert ends[match.group(1)]["delivered"] == []
        stats = check_never_twice(events)
        assert stats["sent_again"] == int(match.group(4))  # every row of it, under a new nonce
        export_all(out, tmp_path / "all.jsonl")
        check_against_truth(out, sim, tmp_path / "all.jsonl")
        assert "cancelled" in draftgen("status", str(out)).stdout
    finally:
        sim.stop()


# Long: it waits out a batch's real window in seconds (~12 s); CI runs it with -m long.
@pytest.mark.slow
@pytest.mark.long
def test_ctrl_c_leaves_the_batches_running_and_the_next_run_collects_them(tmp_path):
    sim = batch_sim(tmp_path, seconds=2.0)
    try:
        out = tmp_path / "run"
        env = {**os.environ, "DRAFTGEN_TEST_KEY": SECRET}
        process = subprocess.Popen(
            [sys.executable, "-m", "draftgen.cli", *batch_args(sim, [EXAMPLES], out)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert process.poll() is None, process.communicate()
            try:
                if store_rows(out, "SELECT count(*) FROM batch_intents WHERE batch_id IS NOT NULL")[
                    0
                ][0]:
                    break
            except Exception:
                pass
            time.sleep(0.1)
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
        assert process.returncode == 130, stderr
        assert "keep running at the provider and are billed as they finish" in stderr
        assert "draftgen cancel" in stderr
        result = draftgen(*batch_args(sim, [EXAMPLES], out))
        assert result.returncode == 0, result.stderr
        assert check_never_twice(read_log(sim))["sent_again"] == 0
        export_all(out, tmp_path / "all.jsonl")
        check_against_truth(out, sim, tmp_path / "all.jsonl")
    finally:
        sim.stop()


@pytest.mark.slow
def test_max_cost_counts_batches_at_their_worst_case_before_sending(tmp_path):
    sim = batch_sim(tmp_path)
    try:
        out = tmp_path / "run"
        refused = draftgen(*batch_args(sim, [EXAMPLES], out, "--max-cost", "1"))
        assert refused.returncode == 2
        assert "--max-cost with --batch needs --max-tokens" in refused.stderr
        limit = 0.0015
        args = batch_args(sim, [EXAMPLES], out, "--max-tokens", "100", "--max-cost", str(limit))
        result = draftgen(*args)
        assert result.returncode == 3, result.stderr
        assert f"reached --max-cost ${limit:.4f}" in result.stderr
        # Each batch went out only if what was spent, the worst case of the batches still
        # running and its own worst case fitted; so what was billed fits too.
        intents = store_rows(out, "SELECT worst_cost FROM batch_intents ORDER BY created_at")
        assert intents and 0 < intents[0][0] <= limit
        billed = sum(e["cost"] for e in read_log(sim) if e["event"] == "end")
        assert 0 < billed <= limit
        assert cost(out) == pytest.approx(billed)
        assert store_rows(out, "SELECT count(*) FROM completions")[0][0] < 25
        more = batch_args(sim, [EXAMPLES], out, "--max-tokens", "100", "--max-cost", "1")
        result = draftgen(*more)
        assert_worked(result, out)
        stored = store_rows(out, "SELECT count(*) FROM completions")[0][0]
        failed = dict(store_rows(out, "SELECT reason, count(*) FROM failures GROUP BY 1"))
        # 100 tokens cut some first turns short: their later turns are not built on them.
        assert stored + sum(failed.values()) == 25 and set(failed) <= {"earlier_turn_incomplete"}
        check_never_twice(read_log(sim))
    finally:
        sim.stop()


@pytest.mark.slow
def test_estimate_prints_the_live_and_the_batch_price_side_by_side(tmp_path):
    sim = batch_sim(tmp_path)
    try:
        estimate = ["estimate", "--no-config", "--input", str(EXAMPLES)]
        estimate += ["--model", "moonshotai/kimi-k2.5", "--tokenizer", TOKENIZER]
        estimate += ["--base-url", sim.base_url, "--api-key-env", "DRAFTGEN_TEST_KEY"]
        estimate += ["--max-tokens", "1000"]
        result = draftgen(*estimate, "--json")
        assert result.returncode == 0, result.stderr
        figures = json.loads(result.stdout)
        assert figures["price_in"] == pytest.approx(0.6e-6)
        assert figures["batch_price_in"] == pytest.approx(0.3e-6)
        assert figures["batch_price_out"] == pytest.approx(1.25e-6)
        assert figures["batch_cost_high"] == pytest.approx(figures["cost_high"] / 2)
        assert figures["batch_rounds"] == 3
        text = draftgen(*estimate).stdout
        assert "  batch price        $0.3 / $1.25 per million (the :batch entry" in text
        assert re.search(
            r"  cost with --batch  \$\d+\.\d\d \.\. \$\d+\.\d\d, in 3 batch rounds", text
        )
    finally:
        sim.stop()


def test_the_batch_table_turns_batch_mode_on_and_runs_on_the_built_in_simulator(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "draftgen.toml").write_text(
        f'input = ["{EXAMPLES}"]\nmodel = "moonshotai/kimi-k2.5"\ntokenizer = "{TOKENIZER}"\n'
        'out = "run"\n\n[batch]\nenabled = true\nsize = 10\nretries = 5\n'
    )
    assert cli.main(["run", "--simulate"]) == 0
    printed = capsys.readouterr().out
    assert "batches:  0 in flight (0 rows)" in printed
    sizes = store_rows(tmp_path / "run", "SELECT rows FROM batch_intents")
    assert sizes and max(n for (n,) in sizes) <= 10
    assert store_rows(tmp_path / "run", "SELECT count(*) FROM completions")[0][0] == 25
    (tmp_path / "bad.toml").write_text("[batch]\nsise = 10\n")
    assert cli.main(["run", "--config", "bad.toml"]) == cli.EXIT_ERROR
    assert "unknown key batch.sise; did you mean batch.size?" in capsys.readouterr().err


def test_batch_mode_refuses_what_it_cannot_do(tmp_path, capsys):
    base = [
        "run",
        "--no-config",
        "--input",
        str(EXAMPLES),
        "--model",
        "m",
        "--tokenizer",
        TOKENIZER,
        "--out",
        str(tmp_path / "run"),
        "--batch",
        "--simulate",
    ]
    assert cli.main([*base, "--backend", "vllm"]) == cli.EXIT_ERROR
    assert "--backend vllm servers have none" in capsys.readouterr().err


def test_the_estimate_says_when_a_model_has_no_batch_endpoint():
    async def main():
        server = await start_simulator(SimConfig(tokenizer=TOKENIZER, batch_models=()))
        try:
            options = EstimateOptions(
                inputs=[str(EXAMPLES)],
                model="moonshotai/kimi-k2.5",
                tokenizer=TOKENIZER,
                base_url=server.base_url,
                max_tokens=100,
            )
            return await estimate(options), server.base_url
        finally:
            await server.close()

    result, url = asyncio.run(main())
    assert result.price_in == pytest.approx(0.6e-6) and result.batch_price_in is None
    assert (
        f"no batch price: moonshotai/kimi-k2.5:batch is not in the listing at {url}/models: no "
        "listed prices (the model may have no batch endpoint)"
    ) in result.notes
    assert "cost with --batch" not in format_estimate(result)

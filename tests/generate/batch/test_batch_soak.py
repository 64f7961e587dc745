"""Soak of run --batch: every batch fault at double the built-in simulator's rates, small batches,
several ``kill -9`` at random moments, then a run to the end.

Afterwards every planned turn is stored or finally failed, every batch the API made belongs to an
intent, every answered row is stored, no request body was sent while an earlier batch could still
answer it (nor answered twice), and the export equals the simulator's ground truth. CI runs the
small size; ``pytest -m soak --long`` runs the long one.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import pytest
from batch_runs import batch_args, batch_sim, check_never_twice, read_log, store_rows
from conftest import SECRET, check_against_truth, draftgen, export_all, write_prompts

from draftgen.inputs.ingest import Conversation, read_conversations
from draftgen.inputs.plan import plan_turns
from draftgen.run.pipeline import EMBEDDED_BATCH_FAULTS

pytestmark = pytest.mark.soak

# The built-in simulator's batch faults (pipeline.EMBEDDED_BATCH_FAULTS) and, for the faults it
# leaves out, a base rate of 0.03; all at double that here.
BASE_RATES = {
    "create_lost": 0.03,
    "create_refused": 0.03,
    "batch_failed": 0.03,
    "results_5xx": 0.03,
    **EMBEDDED_BATCH_FAULTS,
}
FAULTS = [(name, 2 * rate) for name, rate in BASE_RATES.items()]


def planned_keys(path):
    keys = set()
    for item in read_conversations([str(path)]):
        if isinstance(item, Conversation):
            keys.update(plan.key for plan in plan_turns(item))
    return keys


def intents(out) -> int:
    try:
        return store_rows(out, "SELECT count(*) FROM batch_intents")[0][0]
    except Exception:
        return 0


@pytest.mark.parametrize("dialect", ["openrouter", "openai-files"])
def test_batch_soak_with_faults_at_double_rates_and_kills(tmp_path, request, dialect):
    long = request.config.getoption("--long")
    prompts, kills, size = (2000, 6, 100) if long else (200, 3, 10)
    rng = random.Random(4321 + len(dialect))
    sim = batch_sim(tmp_path, faults=FAULTS, seconds=0.5)
    try:
        inputs = write_prompts(tmp_path / "prompts.jsonl", prompts, seed=5)
        out = tmp_path / "run"
        extra = ["--batch-size", str(size), "--batch-dialect", dialect, "--batch-retries", "4"]
        if dialect == "openai-files":
            extra += ["--batch-url", sim.base_url.removesuffix("/api/v1") + "/v1"]
        args = batch_args(sim, [inputs], out, *extra)
        env = {**os.environ, "DRAFTGEN_TEST_KEY": SECRET}
        survived = 0
        for _ in range(kills):
            victim = subprocess.Popen(
                [sys.executable, "-m", "draftgen.cli", *args],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            wanted = intents(out) + rng.randint(1, 3)
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and victim.poll() is None:
                if intents(out) >= wanted:
                    break
                time.sleep(0.05)
            time.sleep(rng.uniform(0.0, 1.5))  # anywhere: a create, a poll, a results page
            if victim.poll() is not None:
                break
            victim.send_signal(signal.SIGKILL)
            victim.wait()
            survived += 1
            check_never_twice(read_log(sim))
        result = draftgen(*args, timeout=1200)
        assert result.returncode == 0, result.stderr
        assert survived >= 1, "no kill landed while the run was working"

        events = read_log(sim)
        stats = check_never_twice(events)
        stored = {key for (key,) in store_rows(out, "SELECT key FROM completions")}
        failed = dict(store_rows(out, "SELECT key, reason FROM failures"))
        assert stored | set(failed) == planned_keys(inputs) and not stored & set(failed)
        made = {e["batch_id"] for e in events if e["event"] == "create"}
        bound = store_rows(out, "SELECT batch_id FROM batch_intents WHERE batch_id IS NOT NULL")
        assert made == {b for (b,) in bound}, "a batch the API made was orphaned"
        delivered = {c for e in events if e["event"] == "end" for c in e["delivered"]}
        answered = store_rows(out, "SELECT custom_id FROM batch_rows WHERE outcome = 'done'")
        assert {c for (c,) in answered} == delivered
        export_all(out, tmp_path / "all.jsonl")
        exact, flagged, rows = check_against_truth(
            out, sim, tmp_path / "all.jsonl", allow_failures=True
        )
        assert exact > len(planned_keys(inputs)) // 2
        ended = [e["status"] for e in events if e["event"] == "end"]
        print(
            f"batch soak ({dialect}): {prompts} prompts, {stats['batches']} batches "
            f"({ended.count('failed')} failed, {ended.count('expired')} expired), "
            f"{stats['sent_again']} bodies sent again after a batch did not answer them, "
            f"{survived} kills, {len(rows)} exported ({exact} exact, {flagged} flagged), "
            f"{len(failed)} failed turns"
        )
    finally:
        sim.stop()

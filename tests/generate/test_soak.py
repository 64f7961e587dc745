"""Soak: every fault at high rates, high concurrency, several kill -9s and restarts.

Afterwards every planned turn has exactly one stored completion or a recorded final failure, no
completion was bought again once stored, and the export equals the simulator's ground truth.
CI runs the small size; ``pytest -m soak --long`` runs the long one.
"""

from __future__ import annotations

import collections
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time

import pytest
from conftest import (
    SECRET,
    SimProcess,
    check_against_truth,
    draftgen,
    export_all,
    run_args,
    write_prompts,
)

from draftgen.inputs.ingest import Conversation, read_conversations
from draftgen.inputs.plan import plan_turns

pytestmark = pytest.mark.soak

FAULTS = [
    ("rate_limit", 0.08),
    ("rate_limit_no_header", 0.04),
    ("overloaded", 0.04),
    ("bad_gateway", 0.03),
    ("server_error", 0.03),
    ("budget_in_flight", 0.04),
    ("error_200", 0.03),
    ("finish_error", 0.03),
    ("midstream_error", 0.04),
    ("drop", 0.04),
    ("stall", 0.02),
    ("empty", 0.03),
    ("malformed_json", 0.03),
    ("huge_body", 0.01),
]
QUIRKS = [
    ("drift", 0.05),
    ("strip_whitespace", 0.04),
    ("leak_eot", 0.05),
    ("no_split", 0.05),
    ("empty_reasoning", 0.05),
    ("tool_call_text", 0.05),
    ("reasoning_content_field", 0.05),
]


def planned_keys(path):
    keys = set()
    for item in read_conversations([str(path)]):
        if isinstance(item, Conversation):
            keys.update(plan.key for plan in plan_turns(item))
    return keys


def stored(db_path):
    db = sqlite3.connect(db_path)
    try:
        return dict(db.execute("SELECT generation_id, key FROM completions"))
    finally:
        db.close()


def stored_or_empty(out):
    try:
        return stored(out / "draftgen.sqlite")
    except sqlite3.Error:
        return {}


def wait_for_progress(db_path, count, process, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        if db_path.exists() and len(stored_or_empty(db_path.parent)) >= count:
            return
        time.sleep(0.05)


@pytest.mark.parametrize("stream", [True, False])
def test_soak_with_kills(tmp_path, request, stream):
    long = request.config.getoption("--long")
    prompts, kills, concurrency = (3000, 6, 256) if long else (300, 3, 64)
    rng = random.Random(1234 + stream)
    tokenizer = "fixture:kimi-k2.5"
    sim = SimProcess(
        tmp_path,
        tokenizer,
        FAULTS,
        QUIRKS,
        extra=[
            "--retry-after",
            "0.05",
            "--stall-seconds",
            "60",
            "--max-tokens",
            "300",
            "--latency",
            "0.5",
        ],
    )
    try:
        inputs = write_prompts(tmp_path / "prompts.jsonl", prompts, seed=3)
        out = tmp_path / "run"
        args = run_args(
            sim,
            [inputs],
            out,
            tokenizer,
            "--concurrency",
            str(concurrency),
            "--idle-timeout",
            "3",
            "--max-attempts",
            "15",
            "--max-retries",
            "1000000",
            "--stream" if stream else "--no-stream",
            # Every purchase here is a first one: buying a provider's spoiled samples again is
            # a second purchase by design, killed and resumed in tests/run/test_rebuy_kill.py.
            "--keep-providers",
        )
        env = {**os.environ, "DRAFTGEN_TEST_KEY": SECRET}
        bought: set[str] = set()
        survived = 0
        for _ in range(kills):
            served_before = len(sim.truth())
            victim = subprocess.Popen(
                [sys.executable, "-m", "draftgen.cli", *args],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            wait_for_progress(out / "draftgen.sqlite", len(stored_or_empty(out)) + 10, victim)
            time.sleep(rng.uniform(0.0, 1.0))  # a random moment while requests are in flight
            if victim.poll() is not None:
                break  # it finished first; the final run below checks the rest
            victim.send_signal(signal.SIGKILL)
            victim.wait()
            survived += 1
            truth = {t["generation_id"]: t for t in sim.truth()}
            assert not bought & {t["prompt_sha256"] for t in sim.truth()[served_before:]}, (
                "a completion stored before a kill was bought again"
            )
            bought |= {truth[g]["prompt_sha256"] for g in stored(out / "draftgen.sqlite")}
        served_before = len(sim.truth())
        result = draftgen(*args, timeout=1200)
        assert result.returncode == 0, result.stderr
        assert not bought & {t["prompt_sha256"] for t in sim.truth()[served_before:]}
        assert survived >= 1, "no kill landed while the run was working"

        db = sqlite3.connect(out / "draftgen.sqlite")
        completed = {k for (k,) in db.execute("SELECT key FROM completions")}
        failed = dict(db.execute("SELECT key, reason FROM failures"))
        assert not completed & set(failed), "a turn is both stored and failed"
        assert completed | set(failed) == planned_keys(inputs)
        assert all(failed.values())
        export_path = tmp_path / "all.jsonl"
        export_all(out, export_path)
        exact, flagged, rows = check_against_truth(out, sim, export_path, allow_failures=True)
        assert exact > prompts // 3
        seen = collections.Counter()
        for (errors,) in db.execute("SELECT errors FROM completions WHERE errors IS NOT NULL"):
            seen.update(e["kind"] for e in json.loads(errors))
        print(
            f"soak: {prompts} prompts, {len(sim.truth())} completions served, {survived} kills, "
            f"{len(rows)} exported ({exact} exact, {flagged} flagged), {len(failed)} failed, "
            f"{sum(seen.values())} faults retried through: {dict(seen.most_common())}"
        )
    finally:
        sim.stop()

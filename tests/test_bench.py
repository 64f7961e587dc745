"""The CI-sized benchmark: draftgen against the openai SDK and the machine's limits, as ratios.

Sizes are reduced (``bench.py --size ci``), so the bounds are those measured at these sizes with
room for a noisy shared machine, not the full-size targets (docs/performance.md has those). A
long test: ``pytest -m long`` runs it, a plain ``pytest`` does not (CI runs both).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [pytest.mark.bench, pytest.mark.slow]


def test_ci_benchmark_ratios(tmp_path):
    figures = tmp_path / "bench.json"
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "bench.py"),
            "--size",
            "ci",
            "--json",
            str(figures),
            "--workdir",
            str(tmp_path / "work"),
        ],
        capture_output=True,
        text=True,
        timeout=1200,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = {result["name"]: result for result in json.loads(figures.read_text())}
    assert set(results) == {"plain", "plain-kimi-k2.5-remote", "stream", "paced-canned"}
    plain, remote, stream = results["plain"], results["plain-kimi-k2.5-remote"], results["stream"]
    paced = results.pop("paced-canned")
    # bench.py already checked that draftgen's exported ids equal the SDK baseline's (the
    # tokenizer's own encode), row by row, for both tokenizers, and that the failing run
    # verified nothing. These are the CI size's figures, not the full size's (18.8x the SDK on
    # the remote-code fixture, 23.6x streaming: docs/performance.md, "Which size gives which
    # figure"): 1,000 answers, where start-up (imports, the tokenizer, the encoder's check)
    # weighs as much as the work. On the fast fixture draftgen then spends the SDK's CPU (13.3 s
    # against 13.6 s): 0.97x at load 14, 1.19-1.45x at load 1-2; the bound says it is not
    # slower beyond start-up. The remote-code fixture's slow encode is where it wins: 2.39x at
    # load 7 (2026-12-08).
    assert plain["speedup_vs_sdk"] >= 0.8, done.stdout
    assert remote["speedup_vs_sdk"] >= 1.5, done.stdout
    for result in (plain, remote):
        assert result["failing_over_verifying"] <= 2.5, done.stdout
    # 1,000 answers (~10 M characters) do not pay for fastokens' load on Kimi's tokenizer.json
    # (draftgen keeps tokenizers' batch call), and do on the tiktoken file.
    assert plain["encoders"]["fast"] == "tokenizers encode_batch_fast", done.stdout
    assert remote["encoders"]["fast"] == "fastokens (tiktoken file, cut as Kimi's)", done.stdout
    # CPU of the whole encode run, start-up included: it passed 2x in an idle CI run, measured
    # 1.99x with another test run on the same cores and 3.0x at load 7 (16x at full size); 1.5x
    # still says the fast encoder does the work.
    assert remote["fast_encoder_speedup"] >= 1.5, done.stdout
    assert stream["speedup_vs_sdk"] >= 4.0, done.stdout
    assert stream["over_limit"] <= 2.5, done.stdout
    # 300 streams of 800 tokens at 80 tokens/s, all at once (bench.py checked every exported id
    # against the tokenizer's own encode). One stream is ~10 s here, so draftgen's fixed costs
    # (start-up, the encoder's check, the last batch, export: ~5-7 s on 2 busy cores) weigh far
    # more than against issue 16's 25 s streams; the bound says they stay that size. It holds
    # on a quiet machine only: 3.83x at load 13 (2026-12-08), where the streams' own work waits.
    assert paced["paced_over_single"] <= 2.5, done.stdout
    # The server kept its pace (no stream came faster than its tokens at the rate asked), and
    # a bare client kept up with all the streams at once: the ratio measures draftgen.
    paced_seconds = paced["tokens"] / paced["tokens_per_second"]
    assert paced["single_stream"] >= 0.95 * paced_seconds, done.stdout
    assert paced["fetch_over_single"] <= 1.5, done.stdout
    assert set(paced["measures"]) == {"fetch", "draftgen"}
    for result in results.values():
        measures = result["measures"]
        expected = {"fetch", "encode_reference", "encode_fast", "draftgen", "sdk"}
        if result["name"] != "stream":
            expected.add("draftgen_failing")
        assert set(measures) == expected
        assert all(
            m["wall"] > 0 and m["cpu"] > 0 and m["peak_rss_mb"] > 0 for m in measures.values()
        )

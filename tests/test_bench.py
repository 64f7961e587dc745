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
    assert set(results) == {"plain", "plain-kimi-k2.5-remote", "stream"}
    plain, remote, stream = results["plain"], results["plain-kimi-k2.5-remote"], results["stream"]
    # bench.py already checked that draftgen's exported ids equal the SDK baseline's (the
    # tokenizer's own encode), row by row, for both tokenizers, and that the failing run
    # verified nothing. At these sizes start-up (imports, the tokenizer, the encoder's check)
    # weighs more than at full size: the bounds say draftgen is clearly ahead, not by how much.
    for result in (plain, remote):
        assert result["speedup_vs_sdk"] >= 1.1, done.stdout
        assert result["failing_over_verifying"] <= 2.5, done.stdout
    # 1,000 answers (~10 M characters) do not pay for fastokens' load on Kimi's tokenizer.json
    # (draftgen keeps tokenizers' batch call), and do on the tiktoken file.
    assert plain["encoders"]["fast"] == "tokenizers encode_batch_fast", done.stdout
    assert remote["encoders"]["fast"] == "fastokens (tiktoken file, cut as Kimi's)", done.stdout
    assert remote["fast_encoder_speedup"] >= 2.0, done.stdout
    assert stream["speedup_vs_sdk"] >= 4.0, done.stdout
    assert stream["over_limit"] <= 2.5, done.stdout
    for result in results.values():
        measures = result["measures"]
        expected = {"fetch", "encode_reference", "encode_fast", "draftgen", "sdk"}
        if result["name"] != "stream":
            expected.add("draftgen_failing")
        assert set(measures) == expected
        assert all(
            m["wall"] > 0 and m["cpu"] > 0 and m["peak_rss_mb"] > 0 for m in measures.values()
        )

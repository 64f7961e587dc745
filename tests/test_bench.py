"""The CI-sized benchmark: draftgen against the openai SDK and the machine's limits, as ratios.

Sizes are reduced (``bench.py --size ci``), so the bounds are those measured at these sizes with
room for a noisy shared machine, not issue 3's full-size targets (docs/performance.md has those).
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
        timeout=600,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = {result["name"]: result for result in json.loads(figures.read_text())}
    plain, stream = results["plain"], results["stream"]
    # bench.py already checked that draftgen's exported ids equal the SDK baseline's, row by row.
    # Measured at these sizes: plain 1.2x the SDK and 1.4x the limit, streams 7.5x the SDK.
    # At this size plain requests are dominated by tokenizer start-up, and the margin is small:
    # the bound only says draftgen is not slower than the SDK beyond noise.
    assert plain["speedup_vs_sdk"] >= 0.8, done.stdout
    assert plain["over_limit"] <= 2.5, done.stdout
    assert stream["speedup_vs_sdk"] >= 4.0, done.stdout
    assert stream["over_limit"] <= 2.5, done.stdout
    for result in results.values():
        measures = result["measures"]
        assert set(measures) == {"fetch", "encode", "draftgen", "sdk"}
        assert all(
            m["wall"] > 0 and m["cpu"] > 0 and m["peak_rss_mb"] > 0 for m in measures.values()
        )

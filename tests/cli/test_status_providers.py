"""``draftgen status`` judges the providers: a line each with its samples, verified share, cost,
dollars per verified sample and why the rest failed, the run's dollars per verified sample beside
its cost, and the same figures in ``status --json`` and ``draftgen.api.status``."""

from __future__ import annotations

import json

from conftest import draftgen
from golden import plain_rows, run_rows
from provider_stores import EXPECTED, served_store

import draftgen as api
from draftgen.cli.present import format_status
from draftgen.simulator.wire import PROVIDERS


def test_status_prints_a_line_per_provider_and_the_headline(tmp_path):
    run_dir = served_store(tmp_path / "run")
    result = draftgen("status", str(run_dir))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    cost = next(i for i, line in enumerate(lines) if line.startswith("  cost "))
    assert lines[cost - 1] == "  completions stored  11  (tokens 33 prompt + 22 completion)"
    assert lines[cost] == "  cost                $0.02"
    # The headline sits under the cost it divides.
    assert lines[cost + 1] == "  $ per verified      $0.005500  (cost over 4 verified samples)"
    start = lines.index("  providers:")
    assert lines[start + 1 : start + 5] == [
        "    Alpha    samples 4  verified 3 (75.0%)  cost $0.006000  $ per verified $0.002000"
        "  failed: prompt_count_mismatch 1",
        "    Beta     samples 3  verified 1 (33.3%)  cost $0.004000  $ per verified $0.004000"
        "  truncated 1  failed: completion_count_mismatch 1",
        "    Gamma    samples 3  verified 0 (0.0%)  cost $0.01  $ per verified -"
        "  failed: prompt_count_mismatch 2, provider_strips_whitespace 1",
        "    unknown  samples 0  verified 0  cost $0.00  $ per verified -",
    ]


def test_status_json_and_the_api_carry_the_figures(tmp_path):
    run_dir = served_store(tmp_path / "run")
    result = draftgen("status", str(run_dir), "--json")
    assert result.returncode == 0, result.stderr
    counts = json.loads(result.stdout)
    assert counts["providers"] == EXPECTED and counts["cost_per_verified"] == 0.0055
    assert api.status(run_dir)["providers"] == EXPECTED


def test_a_provider_failing_many_ways_names_its_top_reasons():
    reasons = {"a": 5, "b": 4, "c": 3, "d": 2, "e": 1}
    row = {**EXPECTED["Gamma"], "samples": 15, "unverified": reasons}
    counts = {
        "completions": 15,
        "cost": 0.012,
        "cost_per_verified": None,
        "prompt_tokens": 1,
        "completion_tokens": 1,
        "retried_attempts": 0,
        "samples": 15,
        "verified": 0,
        "truncated": 0,
        "unreconstructed": 0,
        "reasons": reasons,
        "finish_reasons": {},
        "failures": {},
        "providers": {"\x1b[31mRed": row},
    }
    text = format_status(counts, "run")
    assert "  $ per verified      -  (no sample verified yet)" in text
    assert "    \\x1b[31mRed  samples 15  verified 0 (0.0%)" in text  # a server's name, defused
    assert "failed: a 5, b 4, c 3, 2 more reasons" in text


def test_counts_from_before_the_figures_print_as_before():
    counts = {
        "completions": 0,
        "cost": 0.0,
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "retried_attempts": 0,
        "samples": 0,
        "verified": 0,
        "truncated": 0,
        "unreconstructed": 0,
        "reasons": {},
        "finish_reasons": {},
        "failures": {},
    }
    text = format_status(counts, "run")
    assert "per verified" not in text and "providers:" not in text


def test_a_simulated_run_shows_each_provider(tmp_path, monkeypatch):
    run_rows(tmp_path, monkeypatch, "kimi-k2.5", plain_rows(24), concurrency=2)
    counts = api.status(tmp_path / "run")
    figures = counts["providers"]
    assert set(figures) <= set(PROVIDERS) and len(figures) >= 2
    assert sum(row["completions"] for row in figures.values()) == counts["completions"]
    assert sum(row["verified"] for row in figures.values()) == counts["verified"] > 0
    assert round(sum(row["cost"] for row in figures.values()), 9) == counts["cost"] > 0
    for row in figures.values():
        assert row["cost_per_verified"] == round(row["cost"] / row["verified"], 9)
    assert counts["cost_per_verified"] == round(counts["cost"] / counts["verified"], 9)
    text = format_status(counts, tmp_path / "run")
    for name, row in figures.items():
        assert f"    {name}" in text and f"samples {row['samples']}  verified" in text

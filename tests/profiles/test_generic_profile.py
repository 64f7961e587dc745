"""Every family run through the generic profile (its layout derived from the fixture's chat
template) against the simulator writing the family's own format: what the generic path verifies
is exact, and what it cannot rebuild (tool-call markup) is flagged, never passed."""

from __future__ import annotations

import collections

import pytest
from golden import TOOLS, run_rows

from draftgen.profiles import GENERIC

# fixture -> the family's own profile, which the simulated model writes.
FAMILIES = {
    "kimi-k2.5": "kimi-k2",
    "qwen3": "qwen3",
    "qwen3-thinking-2507": "qwen3",
    "glm-4.6": "glm-4.5",
    "minimax-m2": "minimax-m2",
    "deepseek-v3.1": "deepseek-v3",
    "llama-3.3": "llama-3",
}


def rows(count: int) -> list[dict]:
    made = []
    for i in range(count):
        row = {"id": f"r{i}", "messages": [{"role": "user", "content": f"Question {i} — café"}]}
        if i % 2 == 0:
            row["tools"] = TOOLS
        made.append(row)
    return made


@pytest.mark.slow
@pytest.mark.parametrize("fixture", sorted(FAMILIES))
def test_the_generic_path_verifies_only_exact_samples(tmp_path, monkeypatch, fixture):
    config = {"profile": FAMILIES[fixture], "seed": 3, "max_tokens": 60, "tool_call_rate": 0.8}
    truth, exported = run_rows(tmp_path, monkeypatch, fixture, rows(16), config, profile=GENERIC)
    outcomes = collections.Counter()
    for row in exported:
        record = truth[row["generation_id"]]
        if row["verified"]:
            assert row["input_ids"] == record["prompt_ids"] + record["completion_ids"]
            outcomes["exact"] += 1
        elif record["tool_calls"]:
            assert row["verify_reason"] == "structured_tool_calls", row["verify_reason"]
            outcomes["tool calls"] += 1
        else:
            outcomes[row["verify_reason"]] += 1
    # Every answer without tool calls is proven; the tool-call ones are flagged.
    assert set(outcomes) <= {"exact", "tool calls"}, outcomes
    assert outcomes["exact"] >= 6, outcomes


@pytest.mark.slow
@pytest.mark.parametrize("fixture", ["gemma-3", "phi-4-reasoning", "seed-oss"])
def test_a_model_no_profile_claims_runs_through_the_generic_profile(tmp_path, monkeypatch, fixture):
    from draftgen.api import RunDir, status
    from draftgen.cli.present import format_status

    config = {"seed": 4, "max_tokens": 60, "tool_call_rate": 0.8}
    truth, exported = run_rows(tmp_path, monkeypatch, fixture, rows(12), config)
    exact = 0
    for row in exported:
        record = truth[row["generation_id"]]
        if row["verified"]:
            assert row["input_ids"] == record["prompt_ids"] + record["completion_ids"]
            exact += 1
        else:
            assert record["tool_calls"], row["verify_reason"]
    assert exact >= 6
    counts = status(tmp_path / "run")
    assert any(line.startswith("end of turn") for line in counts["derived_layout"])
    text = format_status(counts, tmp_path / "run")
    assert "generic: layout derived from the chat template" in text
    assert RunDir.open(tmp_path / "run").path == tmp_path / "run"

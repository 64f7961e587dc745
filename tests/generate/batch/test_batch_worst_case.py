"""Every batch is sent with its worst case (issue #27): each row's prompt plus ``max_tokens`` at
the listed ``:batch`` price, whether or not ``--max-cost`` is given, so status, its JSON and the
progress line say what the batches in flight could cost at most."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from batch_runs import TOKENIZER, store_rows
from conftest import draftgen

from draftgen.redact import usd

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "prompts.jsonl"
# The simulator's listing of moonshotai/kimi-k2.5:batch, USD per token (half the live price).
BATCH_PROMPT, BATCH_COMPLETION = 0.3e-6, 1.25e-6


def detached(out: Path, *extra: str):
    args = ["run", "--simulate", "--no-config", "--input", str(EXAMPLES), "--tokenizer"]
    args += [TOKENIZER, "--model", "moonshotai/kimi-k2.5", "--batch", "--batch-detach"]
    result = draftgen(*args, *extra, "-o", str(out))
    assert result.returncode == 0, result.stderr
    return result


def test_a_batch_sent_without_max_cost_carries_its_worst_case_in_status_and_progress(tmp_path):
    out = tmp_path / "run"
    result = detached(out, "--max-tokens", "64")
    ((rows, prompt_tokens),) = store_rows(
        out, "SELECT count(*), sum(prompt_tokens) FROM batch_rows"
    )
    assert rows == 23 and prompt_tokens > 0  # the examples' usable rows, each prompt counted
    worst = prompt_tokens * BATCH_PROMPT + rows * 64 * BATCH_COMPLETION
    assert store_rows(out, "SELECT worst_cost FROM batch_intents") == [(pytest.approx(worst),)]
    figures = json.loads(draftgen("status", str(out), "--json").stdout)
    assert figures["batches"]["timing"]["worst_cost_in_flight"] == pytest.approx(worst)
    shown = f"worst case in flight {usd(worst)}"
    assert any(line.endswith(shown) for line in draftgen("status", str(out)).stdout.splitlines())
    assert shown in result.stderr  # the progress line


def test_without_max_tokens_the_worst_case_is_unknown_and_says_what_prices_it(tmp_path):
    out = tmp_path / "run"
    detached(out)
    assert store_rows(out, "SELECT worst_cost FROM batch_intents") == [(None,)]
    (timing,) = [
        line for line in draftgen("status", str(out)).stdout.splitlines() if "timing:" in line
    ]
    assert timing.endswith(
        "worst case in flight unknown (a batch in flight was sent without --max-tokens or a "
        "listed batch price)"
    )

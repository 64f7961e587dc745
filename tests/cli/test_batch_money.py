"""One set of numbers for a batch run with a cancelled batch (issue #27): the cost the API
charged is the headline of status, its JSON, the report and the batch progress line, and the
retried attempts are one count everywhere."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from conftest import draftgen

from draftgen.records import Completion, TokenSample
from draftgen.store.database import CompletionWriter, Store

NOW = time.time()
ROW_COST = 0.002  # the completed batch's one row, as stored
CANCELLED_COST = 0.0015  # what the cancelled batch billed for rows it never returned


def intent(db, nonce: str, created: float, state: str, status: str | None, cost, rows=1):
    db.execute(
        "INSERT INTO batch_intents (nonce, dialect, url, model, endpoint, rows, body_hash,"
        " created_at, state, batch_id, status, status_at, cost) VALUES"
        " (?, 'openrouter', 'u', 'm', '/v1/chat/completions', ?, 'h', ?, ?, ?, ?, ?, ?)",
        (nonce, rows, created, state, f"batch_{nonce}", status, created + 60, cost),
    )


def batch_row(db, nonce: str, key: str, outcome: str | None) -> None:
    db.execute(
        "INSERT INTO batch_rows (custom_id, nonce, key, source_id, turn, request, outcome)"
        " VALUES (?, ?, ?, ?, 0, x'7b7d', ?)",
        (f"{nonce}-{key}", nonce, key, key, outcome),
    )


@pytest.fixture
def batch_run(tmp_path):
    """A batch run's store: round 1 cancelled (billed, no rows back), round 2 answered the row
    (after one failed attempt), and a third batch in flight."""
    path = tmp_path / "run"
    Store(path).close()
    writer = CompletionWriter(path / "draftgen.sqlite")
    usage = {"prompt_tokens": 3, "completion_tokens": 2, "cost": ROW_COST}
    answer = Completion("g", "P", "m", "", "a", None, "stop", "stop", usage)
    failed = [{"kind": "batch_cancelled", "message": "batch cancelled"}]
    asyncio.run(writer.add_completion("k0", "r0", 0, b"{}", answer, 2, failed, 0))
    writer.close()
    with Store(path, create=False) as store:
        store.samples.add_samples([TokenSample("k0", [1, 2, 3], 1, True, "ok")])
        intent(store.db, "a", NOW - 600, "ingested", "cancelled", CANCELLED_COST)
        batch_row(store.db, "a", "k0", "cancelled")
        intent(store.db, "b", NOW - 500, "ingested", "completed", ROW_COST)
        batch_row(store.db, "b", "k0", "done")
        intent(store.db, "c", NOW - 100, "submitted", "in_progress", None)
        batch_row(store.db, "c", "k1", None)
        store.db.commit()
    return path


def test_the_charged_cost_is_the_headline_of_status_json_and_the_report(batch_run):
    charged = ROW_COST + CANCELLED_COST
    counts = json.loads(draftgen("status", str(batch_run), "--json").stdout)
    assert counts["cost"] == charged and counts["batches"]["charged"] == charged
    assert counts["cost_per_verified"] == charged  # one verified sample
    assert counts["batches"]["timing"]["billed_without_rows"] == CANCELLED_COST
    # One count of retries: failed attempts sent again, by kind.
    assert counts["retried_attempts"] == 1 == sum(counts["retried_errors"].values())
    text = draftgen("status", str(batch_run)).stdout.splitlines()
    assert (
        "  cost                $0.003500  (as the batch API charged it, $0.001500 of it for rows "
        "that never came back)" in text
    )
    assert "  $ per verified      $0.003500  (cost over 1 verified samples)" in text
    assert "  retried attempts    1  (batch_cancelled 1)" in text
    assert not any("retried errors" in line for line in text)
    assert (
        "    charged by the API $0.003500 (batch usage.cost); rows stored $0.002000; $0.001500 "
        "billed for rows that never came back" in text
    )
    # The batch in flight has no worst case (sent unpriced): never "$0.00".
    (timing,) = [line for line in text if line.startswith("    timing: ")]
    assert timing.endswith(
        "worst case in flight unknown (a batch in flight was sent without --max-tokens or a "
        "listed batch price)"
    )
    result = draftgen("report", str(batch_run))
    assert result.returncode == 0, result.stderr
    report = json.loads((batch_run / "report.json").read_text())
    assert report["totals"]["cost"] == charged and report["totals"]["retried_attempts"] == 1
    page = (batch_run / "report.html").read_text()
    tile = '<div class="label">cost (USD)</div><div class="value">$<span class="num" '
    assert tile + 'data-metric="[&quot;totals&quot;,&quot;cost&quot;]">0.003500</span>' in page


def test_the_batch_progress_line_counts_what_was_billed_without_rows():
    from draftgen.generate.batch.progress import BatchProgress

    progress = BatchProgress(total_rows=2, cost=ROW_COST, billed_without_rows=CANCELLED_COST)
    assert "| cost $0.003500 |" in progress.line()
    assert progress.fields()["cost"] == ROW_COST + CANCELLED_COST


def test_an_openrouter_batch_in_flight_is_not_called_openai_files():
    from draftgen.cli.present import format_batches

    batches = {
        "final": {},
        "in_flight": [{"batch_id": "batch_1", "nonce": "n", "status": "validating", "rows": 3}],
        "rows_in_flight": 3,
        "rows_sent": 3,
        "rows_answered": 0,
        "rows_sent_again": 0,
        "charged": None,
        "rows_cost": 0.0,
        "timing": {},
    }
    lines = format_batches(batches)
    assert "    charged: nothing yet (no batch has ended)" in lines
    assert not any("openai-files" in line for line in lines)

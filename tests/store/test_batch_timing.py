"""Batch time (issue #27): ages, this run's typical duration, the round's ETA band and the worst
case in flight, read by progress, status and the report from one place."""

from __future__ import annotations

import time

import pytest

from draftgen.api import timing_text
from draftgen.store.batch_timing import WINDOW_SECONDS, batch_timing, duration_text
from draftgen.store.database import Store

NOW = 1_800_000_000.0


def intent(db, nonce, created, state, status=None, status_at=None, worst=None):
    db.execute(
        "INSERT INTO batch_intents (nonce, dialect, url, model, endpoint, rows, body_hash,"
        " worst_cost, created_at, state, status, status_at) VALUES"
        " (?, 'openrouter', 'u', 'm', '/v1/chat/completions', 5, 'h', ?, ?, ?, ?, ?)",
        (nonce, worst, created, state, status, status_at),
    )


def test_timing_of_finished_and_live_batches(tmp_path):
    with Store(tmp_path / "run") as store:
        intent(store.db, "a", NOW - 7200, "ingested", "completed", NOW - 6600)  # took 10m
        intent(store.db, "b", NOW - 7000, "ingested", "completed", NOW - 5800)  # took 20m
        intent(store.db, "c", NOW - 6000, "ingested", "expired", NOW - 100)  # not a duration
        intent(store.db, "d", NOW - 3900, "submitted", "in_progress", NOW - 10, worst=0.25)
        intent(store.db, "e", NOW - 300, "submitting", worst=0.5)
        timing = batch_timing(store.db, NOW)
        assert timing["finished_batches"] == 2 and timing["typical_seconds"] == 900
        assert timing["oldest_age_seconds"] == 3900
        assert timing["worst_cost_in_flight"] == pytest.approx(0.75)
        # The round ends with its newest batch, created 5 minutes ago.
        assert timing["eta_seconds"] == [600, WINDOW_SECONDS - 300]
        text = timing_text(timing)
        assert text == (
            "oldest batch in flight 1h05m; finished batches took 15m (median of 2); this round "
            "ends in about 10m, at the latest 23h55m (the 24h window); worst case in flight "
            "$0.75"
        )
        assert store.tallies.counts()["batches"]["timing"]["finished_batches"] == 2


def test_without_finished_batches_only_the_window_bounds_the_round(tmp_path):
    with Store(tmp_path / "run") as store:
        intent(store.db, "a", time.time() - 60, "submitted", "validating", worst=0.1)
        timing = batch_timing(store.db, time.time())
        assert timing["typical_seconds"] is None and timing["eta_seconds"][0] is None
        assert "this round ends in at the latest 23h5" in timing_text(timing)


def test_a_live_run_has_no_batch_figures(tmp_path):
    with Store(tmp_path / "run") as store:
        assert store.tallies.counts()["batches"] == {}
        assert timing_text({}) == ""


def test_durations_read_as_a_person_would():
    assert [duration_text(s) for s in (None, 40, 60, 840, 3720, 7200)] == [
        "?",
        "40s",
        "1m",
        "14m",
        "1h02m",
        "2h",
    ]


def test_money_in_status_json_is_rounded_to_a_nanodollar(tmp_path):
    import orjson

    with Store(tmp_path / "run") as store:
        intent(store.db, "a", NOW - 60, "ingested", "completed", NOW - 30)
        store.db.execute("UPDATE batch_intents SET cost = 0.1 + 0.2")
        batches = store.tallies.counts()["batches"]
        assert batches["charged"] == 0.3 and b"0.30000000000000004" not in orjson.dumps(batches)


def test_a_batch_in_flight_without_a_worst_case_is_unknown_not_free(tmp_path):
    with Store(tmp_path / "run") as store:
        intent(store.db, "a", NOW - 60, "submitted", "validating")  # sent without --max-tokens
        timing = batch_timing(store.db, NOW)
        assert timing["worst_cost_in_flight"] is None
        assert timing_text(timing).endswith(
            "worst case in flight unknown (a batch in flight was sent without --max-tokens or a "
            "listed batch price)"
        )


def test_rounds_are_the_batches_sent_before_the_first_of_them_ended(tmp_path):
    from draftgen.store.batch_timing import batch_rounds

    with Store(tmp_path / "run") as store:
        intent(store.db, "a", NOW - 900, "ingested", "completed", NOW - 600)
        intent(store.db, "b", NOW - 899, "ingested", "expired", NOW - 500)  # same round
        intent(store.db, "c", NOW - 600, "ingested", "completed", NOW - 300)  # a's answers
        intent(store.db, "d", NOW - 100, "submitted", "in_progress")
        rounds = batch_rounds(store.db, NOW)
    assert [(r["batch"], r["round"], r["seconds"]) for r in rounds] == [
        ("intent a", 1, 300),
        ("intent b", 1, 399),
        ("intent c", 2, 300),
        ("intent d", 3, 100),  # in flight: how long it has been running
    ]
    assert [r["in_flight"] for r in rounds] == [False, False, False, True]


def test_a_batch_that_ended_before_a_run_stored_it_is_charged_not_in_flight(tmp_path):
    from draftgen.generate.batch.money import BatchBudget, BatchPrices
    from draftgen.store.batch_timing import batch_rounds

    with Store(tmp_path / "run") as store:
        # draftgen cancel recorded the final status and cost; no run has stored its results yet.
        intent(store.db, "a", NOW - 600, "submitted", "cancelled", NOW - 300, worst=0.25)
        intent(store.db, "b", NOW - 60, "submitted", "in_progress", NOW - 10, worst=0.5)
        store.db.execute("UPDATE batch_intents SET cost = 0.0015 WHERE nonce = 'a'")
        batches = store.batches.batch_figures()
        assert [b["nonce"] for b in batches["in_flight"]] == ["b"]
        assert batches["rows_in_flight"] == 5
        assert batches["final"] == {"cancelled": 1}
        assert batches["charged"] == 0.0015
        timing = batch_timing(store.db, NOW)
        assert timing["worst_cost_in_flight"] == 0.5 and timing["oldest_age_seconds"] == 60
        assert timing["billed_without_rows"] == 0.0015
        assert store.tallies.counts()["cost"] == 0.0015
        assert [r["in_flight"] for r in batch_rounds(store.db, NOW)] == [False, True]
        budget = BatchBudget(1.0, BatchPrices(1e-6, 1e-6, "test"), 64, store.db)
        assert budget.committed() == 0.5 and budget.spent() == 0.0015

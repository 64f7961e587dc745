"""Per-provider figures: samples, verified, failures by reason, cost and dollars per verified
sample, as ``status``, ``status --json``, the report and the live display read them."""

from __future__ import annotations

import sqlite3

from provider_stores import EXPECTED, SERVED, served_store

from draftgen.records import TokenSample
from draftgen.store.database import SampleTally, Store


def test_each_provider_is_figured_from_its_completions_and_samples(tmp_path):
    with Store(served_store(tmp_path / "run"), create=False) as store:
        figures = store.providers.provider_figures()
        counts = store.tallies.counts()
    assert figures == EXPECTED
    assert list(figures) == ["Alpha", "Beta", "Gamma", "unknown"]
    assert counts["providers"] == EXPECTED
    # The headline: the run's whole cost over every verified sample.
    assert counts["cost"] == 0.022 and counts["verified"] == 4
    assert counts["cost_per_verified"] == 0.0055


def test_the_headline_is_none_until_a_sample_is_verified(tmp_path):
    served = {key: value for key, value in SERVED.items() if key.startswith(("c", "n"))}
    with Store(served_store(tmp_path / "run", served), create=False) as store:
        counts = store.tallies.counts()
    assert counts["cost_per_verified"] is None
    assert counts["providers"]["Gamma"]["cost_per_verified"] is None


def test_an_empty_store_has_no_providers(tmp_path):
    with Store(tmp_path / "run") as store:
        counts = store.tallies.counts()
    assert counts["providers"] == {} and counts["cost_per_verified"] is None


def test_the_tally_reads_the_figures_on_its_own_connection_and_not_every_count(tmp_path):
    run_dir = served_store(tmp_path / "run")
    tally = SampleTally(run_dir / "draftgen.sqlite", figures_every=3600)
    db = sqlite3.connect(f"file:{run_dir / 'draftgen.sqlite'}?mode=ro", uri=True)
    try:
        tally.count(db)
        assert (tally.samples, tally.verified, tally.providers) == (10, 4, EXPECTED)
        with Store(run_dir, create=False) as store:
            store.samples.add_samples([TokenSample("n1", [1, 2], 1, True, "ok")])
        tally.count(db)  # the samples are counted again, the figures are not due yet
        assert (tally.samples, tally.verified) == (11, 5)
        assert tally.providers["unknown"]["verified"] == 0
        tally.count(db, figures=True)  # as the display closes
        assert tally.providers["unknown"]["verified"] == 1
    finally:
        db.close()


def test_the_tally_thread_reads_the_figures(tmp_path):
    run_dir = served_store(tmp_path / "run")
    tally = SampleTally(run_dir / "draftgen.sqlite", every=3600, figures_every=3600)
    tally.start()
    tally.stop()
    assert tally.providers == EXPECTED

"""The store's table of answers refused for their usage (``draftgen.store.refused``)."""

from __future__ import annotations

from draftgen.store.database import Store
from draftgen.store.refused import refused_by_provider, refused_figures, refused_statements

ROW = {
    "key": "k" * 32,
    "source_id": "r0",
    "turn": 0,
    "generation_id": "gen-1",
    "provider": "Acme",
    "reason": "usage.cost is 'free', not a finite number of dollars from 0 up",
    "usage": '{"cost": "free"}',
    "answer": b"{}",
    "prompt_tokens": 512,
    "completion_tokens": 512,
    "cost": 0.25,
    "created_at": 1.5,
}


def test_a_statement_written_twice_keeps_the_answer_once_and_status_counts_it(tmp_path):
    store = Store(tmp_path / "run")
    # A record replayed over a store that holds the row already (the rebuild's journal).
    for sql, params in refused_statements(ROW) * 2:
        store.db.execute(sql, params)
    store.db.execute(*refused_statements({**ROW, "provider": None, "created_at": 2.5})[0])
    assert refused_figures(store.db) == (2, 0.5)
    assert refused_by_provider(store.db) == {"Acme": (1, 0.25), "": (1, 0.25)}
    counts = store.tallies.counts()
    assert counts["refused_usage"] == {"answers": 2, "cost": 0.5}
    assert counts["cost"] == 0.5
    store.close()


def test_merge_keeps_every_run_s_refused_answers_whichever_run_won_the_key(tmp_path):
    from draftgen.store.merge import merge_runs

    for name, provider, at in (("a", "Acme", 1.5), ("b", "Beta", 2.5)):
        store = Store(tmp_path / name)
        store.settings.set_meta("tokenizer", "t")
        # Both runs asked for the same turn; a refused answer is money spent by each.
        for sql, params in refused_statements({**ROW, "provider": provider, "created_at": at}):
            store.db.execute(sql, params)
        store.close()
    merge_runs([tmp_path / "a", tmp_path / "b"], tmp_path / "merged")
    merged = Store(tmp_path / "merged")
    # Before: 0 answers, $0 (the key was no run's, so neither run's rows were copied).
    assert refused_by_provider(merged.db) == {"Acme": (1, 0.25), "Beta": (1, 0.25)}
    assert merged.tallies.counts()["refused_usage"] == {"answers": 2, "cost": 0.5}
    merged.close()

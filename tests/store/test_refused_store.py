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
    counts = store.counts()
    assert counts["refused_usage"] == {"answers": 2, "cost": 0.5}
    assert counts["cost"] == 0.5
    store.close()

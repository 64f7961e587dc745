"""What a run keeps per row and per stored turn: compact indexes instead of every id and answer.

Duplicate ids are found in a temporary SQLite table, stored turns are an index of key ints whose
content is read only for the history a later turn needs, and a resume with the same tokenizer
takes the profile detected before instead of loading the tokenizer ahead of its first request.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3

import pytest
from conftest import write_prompts

from draftgen.generate.resume import StoredTurns
from draftgen.inputs.admission import ROWS_PER_STATEMENT, SourceIds
from draftgen.inputs.ingest import read_conversations
from draftgen.inputs.plan import plan_turns
from draftgen.reconstruct.text import COMPLETE_FINISH_REASONS
from draftgen.run.pipeline import RunOptions, run
from draftgen.simulator import SimConfig, SimulatorThread
from draftgen.store.database import Store, StoreError

TOKENIZER = "fixture:kimi-k2.5"


def test_a_reused_id_is_rejected_only_for_another_conversation(tmp_path):
    rows = [
        {"id": "a", "messages": [{"role": "user", "content": "one"}]},
        {"id": "b", "messages": [{"role": "user", "content": "two"}]},
        {"id": "a", "messages": [{"role": "user", "content": "one"}]},  # an exact duplicate
        {"id": "a", "messages": [{"role": "user", "content": "three"}]},
        {"id": "b", "messages": [{"role": "user", "content": "two"}]},
    ]
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    seen = SourceIds()
    conversations = list(read_conversations([str(path)]))
    problems = [seen.duplicate_problem(c, plan_turns(c)) for c in conversations]
    seen.close()
    assert problems == [
        None,
        None,
        None,
        f"id 'a' is already used by line 1 of {conversations[0].input} for a different "
        "conversation; give each row a unique id",
        None,
    ]


def test_ids_checked_a_list_at_a_time_give_what_checking_them_one_by_one_gives(tmp_path):
    # Reused ids inside one list, across lists and across the rows a statement binds.
    rows = [
        {"id": f"r{i % 7}", "messages": [{"role": "user", "content": f"q{i % 5}"}]}
        for i in range(ROWS_PER_STATEMENT + 30)
    ]
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    planned = [(c, plan_turns(c)) for c in read_conversations([str(path)])]
    one_by_one, in_lists = SourceIds(), SourceIds()
    expected = [one_by_one.duplicate_problem(c, plans) for c, plans in planned]
    got = in_lists.duplicate_problems(planned[:3]) + in_lists.duplicate_problems(planned[3:])
    one_by_one.close()
    in_lists.close()
    assert got == expected
    assert 0 < expected.count(None) < len(expected)


@pytest.fixture
def finished_run(tmp_path, monkeypatch):
    """A run over single- and two-turn rows against a fault-free simulator, and its options."""
    monkeypatch.setenv("OPENROUTER_API_KEY", "test")
    config = SimConfig(tokenizer=TOKENIZER, seed=5, max_tokens=60)
    sim = SimulatorThread(config).__enter__()
    options = RunOptions(
        inputs=[str(write_prompts(tmp_path / "p.jsonl", 30, invalid=False))],
        model="m",
        tokenizer=TOKENIZER,
        out=tmp_path / "run",
        base_url=sim.base_url,
        concurrency=8,
        max_tokens=60,
        progress_interval=1000,
    )
    asyncio.run(run(options))
    yield options, sim
    sim.__exit__(None, None, None)


def test_stored_turns_index_every_completion_and_read_content_on_demand(finished_run):
    options, _ = finished_run
    with Store(options.out) as store:
        rows = store.db.execute("SELECT key, content, finish_reason FROM completions").fetchall()
        assert len(rows) > 20
        stored = StoredTurns(store)
        for key, content, finish in rows:
            assert key in stored
            assert stored.complete(key) == (finish in COMPLETE_FINISH_REASONS)
            assert stored.content(key) == (content or "")
        missing = "0" * 32
        assert missing not in stored and not stored.complete(missing)
        stored.add("not-a-hex-key", complete=False)
        assert "not-a-hex-key" in stored and not stored.complete("not-a-hex-key")
        with pytest.raises(StoreError, match="not-a-hex-key is indexed as stored but missing"):
            stored.content("not-a-hex-key")


def test_resume_sends_the_stored_answer_as_the_next_turns_history(finished_run):
    options, sim = finished_run
    db = sqlite3.connect(options.out / "draftgen.sqlite")
    first_turns = dict(db.execute("SELECT source_id, content FROM completions WHERE turn = 0"))
    later = db.execute("SELECT key, source_id FROM completions WHERE turn = 1").fetchall()
    assert len(later) >= 3
    with db:
        db.executemany("DELETE FROM completions WHERE key = ?", [(key,) for key, _ in later])
        db.executemany("DELETE FROM samples WHERE key = ?", [(key,) for key, _ in later])
    db.close()
    served = len(sim.truth)
    summary = asyncio.run(run(options))
    # Only the deleted second turns were bought again, each after its stored first turn.
    assert len(sim.truth) - served == len(later)
    assert summary.progress.turns_reused > 0
    db = sqlite3.connect(options.out / "draftgen.sqlite")
    for key, source_id in later:
        (request,) = db.execute("SELECT request FROM completions WHERE key = ?", (key,)).fetchone()
        messages = json.loads(request)["messages"]
        assert messages[-2] == {"role": "assistant", "content": first_turns[source_id]}
    db.close()

"""The store's writer thread under a write that cannot succeed: the write's await fails, the run
stops with one sentence, the rows committed before stay; nothing waits forever."""

from __future__ import annotations

import asyncio
import json
import sqlite3

import pytest

from draftgen.records import Completion
from draftgen.run.pipeline import RunError, RunOptions, run
from draftgen.store import database, writer
from draftgen.store.database import CompletionWriter, Store, StoreError

TOKENIZER = "fixture:kimi-k2.5"
OVERFLOW = "cannot write to the store: Python int too large to convert to SQLite INTEGER"


def answer(prompt_tokens: int) -> Completion:
    return Completion(
        None, None, None, None, "hi", None, "stop", None, usage={"prompt_tokens": prompt_tokens}
    )


def stored_keys(path) -> list[str]:
    db = sqlite3.connect(path)
    return [key for (key,) in db.execute("SELECT key FROM completions ORDER BY rowid")]


def test_a_value_sqlite_cannot_bind_fails_its_own_write_and_the_group_is_kept(tmp_path):
    store = Store(tmp_path)
    writer = CompletionWriter(store.path)
    blocker = sqlite3.connect(store.path, isolation_level=None)

    async def go():
        # The writer takes k0 alone and waits for the lock; k1..k3 queue up as one group.
        blocker.execute("BEGIN IMMEDIATE")
        tokens = {"k0": 5, "k1": 2**63, "k2": 6, "k3": 7}
        writes = [
            asyncio.ensure_future(writer.add_completion(k, "s", 0, b"{}", answer(n), 1, [], 0.0))
            for k, n in tokens.items()
        ]
        await asyncio.sleep(0.2)
        blocker.execute("COMMIT")
        # Before: OverflowError killed the thread and these awaits never ended.
        return await asyncio.wait_for(asyncio.gather(*writes, return_exceptions=True), 10)

    outcomes = asyncio.run(go())
    writer.close()
    assert [None if o is None else (type(o), str(o)) for o in outcomes] == [
        None,
        (StoreError, f"{OVERFLOW} (OverflowError)"),
        None,
        None,
    ]
    assert stored_keys(store.path) == ["k0", "k2", "k3"]
    store.close()


def test_a_run_whose_write_fails_stops_with_the_error_and_keeps_earlier_rows(tmp_path, monkeypatch):
    rows = tmp_path / "rows.jsonl"
    rows.write_text(
        "".join(
            json.dumps({"id": f"r{i}", "messages": [{"role": "user", "content": f"Q {i}"}]}) + "\n"
            for i in range(20)
        )
    )
    statements_of = database.completion_statements
    keys: list[str] = []

    def third_one_overflows(key, source_id, turn, request, completion, *rest):
        # As main stored usage.completion_tokens = 2**63: the bind fails in the writer thread.
        keys.append(key)
        if len(keys) == 3:
            completion.usage = {**completion.usage, "prompt_tokens": 2**63}
        return statements_of(key, source_id, turn, request, completion, *rest)

    monkeypatch.setattr(writer, "completion_statements", third_one_overflows)
    options = RunOptions(
        inputs=[str(rows)],
        model="test/model",
        tokenizer=TOKENIZER,
        out=tmp_path / "run",
        simulate=True,
        concurrency=1,
        retry_base_delay=0.01,
        progress_interval=3600,
    )
    with pytest.raises(RunError) as info:
        asyncio.run(asyncio.wait_for(run(options), 60))  # before: it hung here
    assert str(info.value) == (
        f"{OVERFLOW} (OverflowError); what was committed before is safe: fix the cause (disk "
        "space, permissions) and rerun the same command to resume"
    )
    assert stored_keys(tmp_path / "run" / "draftgen.sqlite") == keys[:2]

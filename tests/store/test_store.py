"""The store: settings guard, the run lock, grouped durable writes, samples round trip."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from draftgen.records import Completion, TokenSample
from draftgen.store.database import CompletionWriter, RunLock, Store, StoreError


def hold_something(store: Store) -> None:
    """A failure stored under the run's settings: what they were used for."""
    store.db.execute(
        "INSERT INTO failures (key, source_id, turn, reason, attempts, created_at)"
        " VALUES ('k', 's', 0, 'server_error', 1, 0)"
    )


def test_settings_mismatch_refuses_with_both_values(tmp_path):
    store = Store(tmp_path / "run")
    store.settings.check_settings({"model": "a", "max_tokens": 100})
    hold_something(store)
    store.settings.check_settings({"model": "a", "max_tokens": 100})
    with pytest.raises(StoreError) as info:
        store.settings.check_settings({"model": "a", "max_tokens": 200})
    assert "max_tokens=100 (now 200)" in str(info.value)
    assert "choose a new --out directory" in str(info.value)


def test_a_store_that_holds_nothing_takes_new_settings(tmp_path):
    # A run that stopped before storing anything (its endpoint could not be reached) bought
    # nothing with its settings; before, its next run was refused "generated with other settings".
    store = Store(tmp_path / "run")
    store.settings.check_settings({"model": "a", "max_tokens": 100})
    store.settings.check_settings({"model": "a", "max_tokens": 200})
    assert orjson.loads(store.settings.meta("settings")) == {"model": "a", "max_tokens": 200}
    hold_something(store)
    with pytest.raises(StoreError, match=r"max_tokens=200 \(now 100\)"):
        store.settings.check_settings({"model": "a", "max_tokens": 100})


def test_run_directory_is_private(tmp_path):
    Store(tmp_path / "run")
    assert oct((tmp_path / "run").stat().st_mode & 0o777) == "0o700"


def test_second_process_cannot_take_the_lock(tmp_path):
    Store(tmp_path)
    lock = RunLock(tmp_path)
    lock.acquire()
    code = (
        "import sys; from draftgen.store.database import RunLock, StoreError\n"
        f"try:\n    RunLock({str(tmp_path)!r}).acquire()\nexcept StoreError as e:\n"
        "    print(e); sys.exit(3)\n"
    )
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert other.returncode == 3
    assert f"in use by draftgen pid {os.getpid()}" in other.stdout
    lock.release()
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_writer_commits_groups_and_failures_clear_on_success(tmp_path):
    store = Store(tmp_path)
    writer = CompletionWriter(store.path)
    completion = Completion(
        "gen-1",
        "Chutes",
        "m",
        "r",
        "a",
        None,
        "stop",
        "stop",
        {"prompt_tokens": 3, "completion_tokens": 4, "cost": 0.5},
    )

    async def main():
        await writer.add_failure("k0", "s", 0, "gave_up", 8, [{"kind": "server_error"}])
        await asyncio.gather(
            *[
                writer.add_completion(
                    f"k{i}", "s", i, b'{"messages": [], "tools": null}', completion, 1, [], 0.1
                )
                for i in range(50)
            ]
        )

    asyncio.run(main())
    writer.close()
    counts = Store(tmp_path).tallies.counts()
    assert counts["completions"] == 50 and counts["failures"] == {}
    assert counts["cost"] == pytest.approx(25.0)
    stored = next(Store(tmp_path).completions.read())
    assert stored.completion.usage["completion_tokens"] == 4 and stored.messages == []


def test_a_write_whose_coroutine_is_cancelled_stands_and_the_writer_goes_on(tmp_path):
    store = Store(tmp_path)
    writer = CompletionWriter(store.path)
    completion = Completion("g", "p", "m", "", "a", None, "stop", "stop", {})

    async def main():
        woken = []
        writes = [
            asyncio.create_task(writer.add_completion(k, k, 0, b"{}", completion, 1, [], 0))
            for k in ("a", "b", "c")
        ]
        for task in writes:
            task.add_done_callback(lambda t: woken.append(writes.index(t)))
        await asyncio.sleep(0)  # each write is queued, its coroutine awaits the commit
        writes[1].cancel()
        # The writes after the cancelled one are not held up, and it is committed all the same.
        await asyncio.wait_for(asyncio.gather(*writes, return_exceptions=True), timeout=10)
        await asyncio.wait_for(writer.add_failure("d", "d", 0, "gave_up", 8, []), timeout=10)
        return woken

    assert asyncio.run(main()) == [1, 0, 2]  # the cancel first, then the group in its order
    writer.close()
    counts = Store(tmp_path).tallies.counts()
    assert (counts["completions"], counts["failures"]) == (3, {"gave_up": 1})


def test_a_text_that_is_the_reasoning_and_the_content_is_stored_as_the_reasoning():
    from draftgen.store.database import SAME_AS, pack_message

    text = "the same words, long enough to be stored once and pointed at from the message"
    completion = Completion(None, None, None, text, text, None, "stop", None)
    completion.raw_message = {"content": text, "reasoning": text, "short": text[:10]}
    assert pack_message(completion) == {
        "content": {SAME_AS: "reasoning"},
        "reasoning": {SAME_AS: "reasoning"},
        "short": text[:10],
    }


def test_samples_round_trip_and_export_filter(tmp_path):
    store = Store(tmp_path)
    writer = CompletionWriter(store.path)
    completion = Completion("g", "p", "m", "", "a", None, "stop", "stop", {})
    for key in ("a", "b"):
        asyncio.run(writer.add_completion(key, key, 0, b'{"messages": []}', completion, 1, [], 0))
    writer.close()
    store.samples.add_samples(
        [
            TokenSample("a", [5, 6, 163586], 1, True, "ok"),
            TokenSample("b", [5, 7], 1, False, "completion_count_mismatch"),
        ]
    )
    assert [r["input_ids"] for r in store.samples.export_rows(False)] == [[5, 6, 163586]]
    assert [r["verified"] for r in store.samples.export_rows(True)] == [True, False]


_texts = st.text(min_size=0, max_size=120)
_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | _texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_texts, inner, max_size=3),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(
    reasoning=st.one_of(st.none(), _texts),
    content=st.one_of(st.none(), _texts),
    extra=st.dictionaries(_texts, _json_values, max_size=4),
)
def test_a_raw_message_comes_back_as_sent_while_its_texts_are_stored_once(
    reasoning, content, extra
):
    from draftgen.store.database import pack_message, unpack_message

    message = {**extra, "content": content, "reasoning": reasoning}
    if reasoning:
        message["reasoning_details"] = [{"type": "reasoning.text", "text": reasoning}]
    completion = Completion(None, None, None, reasoning, content, None, "stop", None)
    completion.raw_message = message
    stored = orjson.dumps(pack_message(completion)).decode()
    assert unpack_message(stored, reasoning, content) == message
    for text in (reasoning, content):
        if text and len(text) >= 64 and text not in orjson.dumps(extra).decode():
            assert orjson.dumps(text).decode() not in stored  # kept in its column only


def _merge_source(run_dir, keys, verified=(), truncated=(), failures=()):
    store = Store(run_dir)
    writer = CompletionWriter(store.path)
    for key in keys:
        completion = Completion(f"g-{key}", "p", "m", "", key, None, "stop", "stop", {})
        asyncio.run(writer.add_completion(key, key, 0, b"{}", completion, 1, [], 0))
    for key in failures:
        asyncio.run(writer.add_failure(key, key, 0, "server_error", 3, []))
    writer.close()
    store.samples.add_samples(
        [TokenSample(k, [1, 2], 1, k in verified, "ok", truncated=k in truncated) for k in keys]
    )
    return store


def test_key_records_are_read_in_batches_from_completions_failures_and_samples(tmp_path):
    store = _merge_source(
        tmp_path, ["a", "b", "c"], verified={"a", "c"}, truncated={"c"}, failures=["d"]
    )
    assert list(store.merge.key_records(batch=3)) == [
        [("a", True, True), ("b", False, True), ("c", False, True)],
        [("d", False, False)],
    ]
    store.db.execute("DROP TABLE samples")
    store.db.execute("DROP TABLE failures")
    assert list(store.merge.key_records()) == [
        [("a", False, True), ("b", False, True), ("c", False, True)]
    ]


def test_rank_keys_keeps_the_best_run_and_the_first_on_a_tie(tmp_path):
    merged = Store.unjournalled(tmp_path / "merged.sqlite")
    assert merged.db.execute("PRAGMA journal_mode").fetchone() == ("off",)
    assert merged.merge.rank_keys(0, [("a", 2), ("b", 3), ("c", 1)]) == 0
    assert merged.merge.rank_keys(1, [("a", 3), ("b", 3), ("d", 1)]) == 2
    assert merged.merge.rank_keys(2, [("c", 2)]) == 1
    choice = merged.db.execute("SELECT key, rank, run FROM temp.merge_choice ORDER BY key")
    assert choice.fetchall() == [("a", 3, 1), ("b", 3, 0), ("c", 2, 2), ("d", 1, 1)]
    merged.close()


def test_copy_rows_takes_the_keys_a_run_won_and_every_row_of_a_table_without_keys(tmp_path):
    source = _merge_source(tmp_path / "source", ["a", "b", "c"])
    source.db.execute("INSERT INTO endpoint_events VALUES ('e', 'down', '', 1.0)")
    source.db.execute("ALTER TABLE completions DROP COLUMN endpoint")
    source.close()
    source = Store.as_found(tmp_path / "source")  # read as found: no column is added back
    assert "endpoint" not in source.tables.columns("completions")
    assert {"completions", "samples", "endpoint_events"} <= set(source.tables.read())
    merged = Store.unjournalled(tmp_path / "merged.sqlite")
    merged.merge.rank_keys(0, [("a", 2), ("c", 2)])
    merged.merge.rank_keys(1, [("b", 2)])
    columns = sorted(source.tables.columns("completions") & merged.tables.columns("completions"))
    merged.merge.copy_rows(source, "completions", columns, 0)
    merged.merge.copy_rows(source, "endpoint_events", ["at", "detail", "endpoint", "event"], 0)
    rows = merged.db.execute("SELECT key, content, endpoint FROM completions ORDER BY key")
    assert rows.fetchall() == [("a", "a", None), ("c", "c", None)]
    assert (merged.tables.row_count("completions"), merged.tables.row_count("endpoint_events")) == (
        2,
        1,
    )
    source.close()
    merged.close()

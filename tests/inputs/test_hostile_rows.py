"""Rows built to break the run: nesting past what serializers take, rows too large to afford,
bytes that are not UTF-8, ids that would collide with a sample's. Each is refused (or kept
apart) alone, with file, line and a sentence; the rows around it go on."""

from __future__ import annotations

import json

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import draftgen.inputs.ingest as ingest
from draftgen.inputs.ingest import Conversation, Rejection, read_conversations
from draftgen.inputs.plan import plan_turns, sample_chains, sample_source_id

USER = [{"role": "user", "content": "hi"}]


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def call(arguments: str) -> dict:
    function = {"name": "f", "arguments": arguments}
    return {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "function": function}]}


def write_rows(path, rows: list[bytes | str]) -> str:
    path.write_bytes(b"".join((r if isinstance(r, bytes) else r.encode()) + b"\n" for r in rows))
    return str(path)


@pytest.mark.parametrize("depth", [252, 300, 1024])
def test_deep_tools_are_refused_alone_and_the_run_goes_on(tmp_path, depth):
    deep = '{"messages": [{"role": "user", "content": "x"}], "tools": [' + nested(depth - 1) + "]}"
    path = write_rows(tmp_path / "deep.jsonl", [json.dumps({"messages": USER}), deep, deep[:0]])
    first, refused = list(read_conversations([path]))
    assert isinstance(first, Conversation)
    assert (refused.input, refused.line) == (path, 2)
    assert refused.reason == (
        f"'tools' nests {depth} levels deep; draftgen takes at most 64: fix or remove the row"
        if depth < 1024
        # Past orjson's own 1024 levels the row is refused by the parser, as before.
        else "line is not valid JSON (depth limit exceeded: line 1 column 1083 (char 1082)); fix "
        "or remove it"
    )


def test_the_depth_limit_is_64_levels_of_any_field():
    ok = {"messages": USER, "meta": json.loads(nested(64))}
    assert isinstance(ingest.parse_record(ok, label="x", input="x", line=1), Conversation)
    with pytest.raises(ingest.RowError, match="^'meta' nests 65 levels deep; draftgen takes"):
        ingest.parse_record({**ok, "meta": [ok["meta"]]}, label="x", input="x", line=1)


def test_deep_messages_and_deep_arguments_text_are_refused(tmp_path):
    deep_message = {"messages": [{**USER[0], "extra": json.loads(nested(300))}]}
    deep_arguments = {"messages": [*USER, call(nested(100)), {"role": "tool", "content": "r"}]}
    beyond_orjson = {"messages": USER, "tools": nested(2000)}  # tools as JSON text
    fine = {"messages": [*USER, call('{"city": [["Paris"]]}'), {"role": "tool", "content": "r"}]}
    rows = [json.dumps(r) for r in (deep_message, deep_arguments, beyond_orjson, fine)]
    items = list(read_conversations([write_rows(tmp_path / "d.jsonl", rows)]))
    assert [getattr(i, "reason", None) for i in items] == [
        "'messages' nests 302 levels deep; draftgen takes at most 64: fix or remove the row",
        "messages[1].tool_calls[0].function.arguments nests 100 levels deep; draftgen takes at "
        "most 64: fix or remove the row",
        "'tools' nests over 1024 levels deep; draftgen takes at most 64: fix or remove the row",
        None,
    ]


def test_a_deep_row_in_parquet_is_refused_by_row_number(tmp_path):
    path = tmp_path / "rows.parquet"
    rows = [{"messages": json.dumps(USER)}, {"messages": json.dumps(USER)}]
    pq.write_table(pa.Table.from_pylist(rows), path)
    # Parquet columns hold the tools as JSON text: that text is held to the limit too.
    table = pa.table(
        {
            "messages": [USER, USER],
            "tools": ["[]", "[" + nested(200) + "]"],
        }
    )
    pq.write_table(table, path)
    first, second = list(read_conversations([str(path)]))
    assert isinstance(first, Conversation)
    assert (second.line, second.reason) == (
        2,
        "'tools' nests 201 levels deep; draftgen takes at most 64: fix or remove the row",
    )


def test_a_row_over_the_size_limit_is_refused_without_being_parsed(tmp_path):
    assert ingest.MAX_ROW_BYTES == 8 << 20
    big = json.dumps({"messages": [{"role": "user", "content": "x" * (9 << 20)}]})
    path = write_rows(tmp_path / "big.jsonl", [big, json.dumps({"messages": USER})])
    refused, kept = list(read_conversations([path]))
    assert refused.reason == "row is 9 MiB, over the 8 MiB limit of one row; split or shorten it"
    assert isinstance(kept, Conversation) and kept.line == 2


def test_a_row_read_whole_over_the_size_limit_is_refused(tmp_path):
    rows = [{"messages": USER}, {"messages": [{"role": "user", "content": "y" * (9 << 20)}]}]
    path = tmp_path / "rows.json"
    path.write_bytes(orjson.dumps(rows))
    first, second = list(read_conversations([str(path)]))
    assert isinstance(first, Conversation)
    assert (second.line, second.reason) == (
        2,
        "row holds 9 MiB of text, over the 8 MiB limit of one row; split or shorten it",
    )


def test_invalid_utf8_names_the_byte_and_its_offset(tmp_path):
    bad = b'{"messages": [{"role": "user", "content": "caf\xe9 ok"}]}'
    path = write_rows(tmp_path / "latin1.jsonl", [json.dumps({"messages": USER}), bad])
    _, refused = list(read_conversations([path]))
    assert isinstance(refused, Rejection) and refused.line == 2
    assert refused.reason == (
        "line 2 is not valid UTF-8 (byte 0xe9 at offset 46); re-encode the file as UTF-8 or "
        "remove the row"
    )
    assert "surrogates" not in refused.reason


def test_a_lone_surrogate_escape_is_still_invalid_json():
    raw = b'{"messages": [{"role": "user", "content": "\\ud800"}]}'
    with pytest.raises(ingest.RowError, match="^line is not valid JSON"):
        ingest.parse_row(raw, label="x", input="x", line=1)


def test_sample_ids_cannot_collide_with_row_ids_that_spell_them():
    rows = [
        Conversation(
            row_id,
            tuple(USER) if row_id == "sample" else ({"role": "user", "content": row_id},),
            None,
            "f",
            1,
        )
        for row_id in ("sample", "sample#1", "sample##1", "a#")
    ]
    ids = [
        f"{plan.source_id}:{plan.turn}"
        for row in rows
        for chain in sample_chains(plan_turns(row), 2)
        for plan in chain
    ]
    assert ids == [
        "sample:0",
        "sample#1:0",
        "sample##1:0",
        "sample##1#1:0",
        "sample####1:0",
        "sample####1#1:0",
        "a##:0",
        "a###1:0",
    ]
    assert len(set(ids)) == len(ids)
    assert sample_source_id("plain-id") == "plain-id"  # ids without '#' are unchanged
    assert sample_source_id("plain-id", 3) == "plain-id#3"


def test_a_run_with_hostile_rows_goes_on_and_exports_unique_ids(tmp_path):
    from conftest import SimProcess, draftgen, read_jsonl, run_args

    deep = {"id": "deep", "messages": USER, "tools": json.loads("[" + nested(299) + "]")}
    rows = [
        json.dumps({"id": "sample", "messages": [{"role": "user", "content": "first"}]}),
        json.dumps(deep),
        json.dumps({"id": "sample#1", "messages": [{"role": "user", "content": "second"}]}),
        b'{"id": "latin", "messages": [{"role": "user", "content": "caf\xe9"}]}',
    ]
    inputs = tmp_path / "p.jsonl"
    write_rows(inputs, rows)
    sim = SimProcess(tmp_path, "fixture:qwen3")
    try:
        out = tmp_path / "run"
        args = run_args(sim, [inputs], out, "fixture:qwen3", "--completions-per-turn", "2")
        result = draftgen(*args)
    finally:
        sim.stop()
    assert result.returncode == 0, result.stderr
    rejected = [json.loads(line) for line in (out / "rejected.jsonl").read_text().splitlines()]
    assert [(r["line"], r["reason"]) for r in rejected] == [
        (2, "'tools' nests 300 levels deep; draftgen takes at most 64: fix or remove the row"),
        (
            4,
            "line 4 is not valid UTF-8 (byte 0xe9 at offset 61); re-encode the file as UTF-8 or "
            "remove the row",
        ),
    ]
    exported = tmp_path / "x.jsonl"
    result = draftgen(
        "export", str(out), "--format", "specforge", "--out", str(exported), "--include-unverified"
    )
    assert result.returncode == 0, result.stderr
    assert sorted(row["id"] for row in read_jsonl(exported)) == [
        "sample##1#1:0",
        "sample##1:0",
        "sample#1:0",
        "sample:0",
    ]

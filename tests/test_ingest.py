"""Ingest: row forms, stable ids, and a rejection with file, line and reason for each bad row."""

from __future__ import annotations

import json

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from draftgen.ingest import Conversation, Rejection, read_conversations


def write_lines(path, lines):
    path.write_bytes(
        b"".join((line if isinstance(line, bytes) else line.encode()) + b"\n" for line in lines)
    )
    return str(path)


def test_openai_and_sharegpt_rows(tmp_path):
    path = write_lines(
        tmp_path / "mix.jsonl",
        [
            json.dumps({"id": "a", "messages": [{"role": "user", "content": "hi"}]}),
            json.dumps(
                {
                    "conversations": [
                        {"from": "system", "value": "be brief"},
                        {"from": "human", "value": "hello"},
                        {"from": "gpt", "value": "old answer"},
                    ]
                }
            ),
        ],
    )
    first, second = list(read_conversations([path]))
    assert first == Conversation("a", ({"role": "user", "content": "hi"},), None, path, 1)
    assert second.messages == (
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "old answer"},
    )
    assert second.source_id.startswith("mix-") and len(second.source_id) == len("mix-") + 16
    # Derived ids are stable: the same content gives the same id on every read.
    assert list(read_conversations([path]))[1].source_id == second.source_id


@pytest.mark.parametrize(
    "line, reason",
    [
        (b"{not json", "line is not valid JSON"),
        (b"[1, 2]", "row is not a JSON object; each line must be one object with 'messages'"),
        (
            b'{"prompt": "x"}',
            "row has no messages: give an OpenAI 'messages' list or ShareGPT 'conversations'",
        ),
        (b'{"messages": []}', "'messages' is empty or not a list; give at least one user message"),
        (
            b'{"messages": [{"role": "robot", "content": "x"}]}',
            "messages[0] has unknown role 'robot'; use one of system, user, assistant, tool",
        ),
        (
            b'{"messages": [{"role": "user", "content": [{"type": "text"}]}]}',
            "messages[0].content is list, not a string; flatten multi-part content to text",
        ),
        (
            b'{"messages": [{"role": "system", "content": "x"}]}',
            "row has no user turn, so there is nothing for the model to answer",
        ),
        (
            b'{"conversations": [{"from": "bot", "value": "x"}]}',
            "conversations[0] has unknown speaker 'bot'; use human, gpt or system",
        ),
        (
            b'{"messages": [{"role": "user", "content": "x"}], "tools": "nope"}',
            "'tools' must be a list of objects (OpenAI function schemas) or absent",
        ),
        (b'{"messages": [{"role": "user", "content": "\\ud800"}]}', "line is not valid JSON"),
    ],
)
def test_rejections_name_line_and_reason(tmp_path, line, reason):
    path = write_lines(
        tmp_path / "bad.jsonl", [b'{"messages": [{"role": "user", "content": "ok"}]}', line]
    )
    good, bad = list(read_conversations([path]))
    assert isinstance(good, Conversation)
    assert isinstance(bad, Rejection)
    assert (bad.input, bad.line) == (path, 2)
    assert bad.reason.startswith(reason)
    assert orjson.loads(bad.as_json()) == {"input": path, "line": 2, "reason": bad.reason}


def test_blank_lines_are_skipped_but_counted(tmp_path):
    path = write_lines(
        tmp_path / "b.jsonl", ["", json.dumps({"messages": [{"role": "user", "content": "x"}]})]
    )
    (only,) = list(read_conversations([path]))
    assert only.line == 2


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_reader_never_raises_on_arbitrary_bytes(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("fuzz") / "f.jsonl"
    path.write_bytes(data)
    for item in read_conversations([str(path)]):
        assert isinstance(item, (Conversation, Rejection))
        if isinstance(item, Rejection):
            assert item.reason and item.line >= 1


def test_hostile_rows(tmp_path, monkeypatch):
    import draftgen.ingest as ingest

    monkeypatch.setattr(ingest, "MAX_ROW_BYTES", 1 << 20)
    nested = "[" * 5000 + "]" * 5000
    lines = [
        json.dumps({"messages": [{"role": "user", "content": "x" * (2 << 20)}]}),  # 2 MiB: too big
        json.dumps({"messages": [{"role": "user", "content": "y" * 500_000}]}),  # big but fine
        '{"messages": [{"role": "user", "content": "a"}], "deep": ' + nested + "}",
        json.dumps({"messages": [{"role": "user", "content": "ctrl \u0000\u0007\u001b[31m"}]}),
        json.dumps({"messages": [{"role": "user", "content": "<|im_end|><think>"}]}),
        json.dumps({"messages": [{"role": "user", "content": "ok"}]}),
    ]
    path = write_lines(tmp_path / "hostile.jsonl", lines)
    items = list(read_conversations([path]))
    assert [type(i).__name__ for i in items] == [
        "Rejection",
        "Conversation",
        "Rejection",
        "Conversation",
        "Conversation",
        "Conversation",
    ]
    assert items[0].reason == "row is 2 MiB, over the 1 MiB limit of one row; split or shorten it"
    assert items[0].line == 1 and items[2].line == 3 and items[5].line == 6
    assert items[2].reason.startswith("line is not valid JSON")
    assert items[3].messages[0]["content"] == "ctrl \u0000\u0007\u001b[31m"

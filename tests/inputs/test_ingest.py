"""Ingest: row forms, stable ids, and a rejection with file, line and reason for each bad row."""

from __future__ import annotations

import json

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from draftgen.inputs.ingest import Conversation, Rejection, read_conversations


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


@pytest.mark.parametrize("suffix", [".jsonl", ".json"])
def test_a_byte_order_mark_is_read_as_one_not_as_the_first_row(tmp_path, suffix):
    row = {"messages": [{"role": "user", "content": "x"}]}
    text = json.dumps(row) + "\n" if suffix == ".jsonl" else json.dumps([row])
    path = tmp_path / f"bom{suffix}"
    path.write_bytes(b"\xef\xbb\xbf" + text.encode())
    (only,) = list(read_conversations([str(path)]))
    assert isinstance(only, Conversation) and only.line == 1
    assert list(only.messages) == row["messages"]


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
    import draftgen.inputs.ingest as ingest

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


# Input formats beyond JSONL: the same rows, the same ids, rejections numbered by row.

GOOD = {"id": "a", "messages": [{"role": "user", "content": "hi"}]}
UNNAMED = {"messages": [{"role": "user", "content": "no id here"}]}
NO_USER = {"messages": [{"role": "system", "content": "x"}]}


def test_json_array_rows_are_numbered_by_position_and_keep_jsonl_ids(tmp_path):
    from draftgen.inputs.ingest import InputError

    path = tmp_path / "rows.json"
    path.write_text(json.dumps([GOOD, "text", NO_USER, UNNAMED], indent=2))
    first, text, no_user, unnamed = list(read_conversations([str(path)]))
    assert first == Conversation("a", ({"role": "user", "content": "hi"},), None, str(path), 1)
    assert (text.line, text.reason) == (2, "row is a string, not an object with 'messages'")
    assert (no_user.line, no_user.reason) == (
        3,
        "row has no user turn, so there is nothing for the model to answer",
    )
    # The id of a row without one is its content's hash: the same as in a JSONL file.
    lines = write_lines(tmp_path / "rows.jsonl", [json.dumps(UNNAMED)])
    (as_line,) = list(read_conversations([lines]))
    assert unnamed.source_id == as_line.source_id
    assert unnamed.line == 4
    # A .json file of one object per line is JSONL, as datasets' json loader reads it.
    jsonl_named_json = write_lines(tmp_path / "lines.json", [json.dumps(GOOD), json.dumps(GOOD)])
    assert [c.line for c in read_conversations([jsonl_named_json])] == [1, 2]
    broken = tmp_path / "broken.json"
    broken.write_text('[\n  {"messages": [}\n]')
    with pytest.raises(InputError) as caught:
        list(read_conversations([str(broken)]))
    assert str(caught.value).startswith(f"{broken} is not valid JSON (line 2, column 17: ")
    assert str(caught.value).endswith("fix it, or give one object per line as JSONL")
    (tmp_path / "object.json").write_text('{"x": 1}')
    with pytest.raises(InputError, match="holds a JSON object, not an array of rows"):
        list(read_conversations([str(tmp_path / "object.json")], format="json"))


def write_parquet(path, rows, row_group_size=None):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=row_group_size)
    return str(path)


def test_parquet_rows_stream_in_batches_with_row_numbers(tmp_path, monkeypatch):
    import pyarrow.parquet as pq

    from draftgen.inputs import ingest

    rows = [
        {"id": f"p{i}", "messages": [{"role": "user", "content": f"q{i}", "name": None}]}
        for i in range(600)
    ]
    rows[450] = {"id": "bad", "messages": [{"role": "robot", "content": "x", "name": None}]}
    rows[7]["messages"].insert(0, {"role": "system", "content": "be brief", "name": "sys"})
    path = write_parquet(tmp_path / "rows.parquet", rows, row_group_size=100)
    batches = []
    real = pq.ParquetFile.iter_batches

    def counted(self, *args, **kwargs):
        for batch in real(self, *args, **kwargs):
            batches.append(batch.num_rows)
            yield batch

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", counted)
    items = list(read_conversations([path]))
    assert len(items) == 600 == ingest.count_rows(path)
    assert max(batches) <= 256 and len(batches) >= 3  # never the whole table at once
    # Arrow gives absent struct fields as None; they are dropped, not sent as "name": null.
    assert items[0].messages == ({"role": "user", "content": "q0"},)
    assert items[7].messages[0] == {"role": "system", "content": "be brief", "name": "sys"}
    bad = items[450]
    assert isinstance(bad, Rejection) and (bad.input, bad.line) == (path, 451)
    assert bad.reason == (
        "messages[0] has unknown role 'robot'; use one of system, user, assistant, tool"
    )
    assert [c.source_id for c in items[:3]] == ["p0", "p1", "p2"]
    (tmp_path / "not.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(ingest.InputError, match="cannot be read as Parquet"):
        list(read_conversations([str(tmp_path / "not.parquet")]))


def test_local_hf_datasets_from_save_to_disk_and_load_dataset(tmp_path):
    import datasets

    from draftgen.inputs import ingest

    rows = [GOOD, NO_USER, {"id": "c", "messages": [{"role": "user", "content": "yo"}]}]
    saved = tmp_path / "saved"
    datasets.Dataset.from_list(rows).save_to_disk(str(saved))
    items = list(read_conversations([str(saved)]))
    assert [type(i).__name__ for i in items] == ["Conversation", "Rejection", "Conversation"]
    assert items[0].messages == ({"role": "user", "content": "hi"},)
    assert (items[1].input, items[1].line) == (str(saved), 2)
    assert items[2].source_id == "c" and items[2].messages == ({"role": "user", "content": "yo"},)
    assert ingest.count_rows(str(saved)) == 3
    # A file read through datasets.load_dataset (streaming: no cache is written).
    lines = write_lines(tmp_path / "rows.jsonl", [json.dumps(GOOD), json.dumps(NO_USER)])
    streamed = list(read_conversations([lines], format="hf"))
    assert [type(i).__name__ for i in streamed] == ["Conversation", "Rejection"]
    assert streamed[1].line == 2
    splits = tmp_path / "splits"
    datasets.DatasetDict(
        train=datasets.Dataset.from_list([GOOD]), test=datasets.Dataset.from_list([GOOD])
    ).save_to_disk(str(splits))
    with pytest.raises(ingest.InputError) as caught:
        list(read_conversations([str(splits)]))
    assert str(caught.value) == (
        f"{splits} holds the splits train, test; give one split's directory, "
        f"e.g. {splits / 'train'}"
    )
    (tmp_path / "plain").mkdir()
    with pytest.raises(ingest.InputError, match="is a directory but not a datasets.save_to_disk"):
        list(read_conversations([str(tmp_path / "plain")]))


GLAIVE_SYSTEM = (
    "SYSTEM: You are a helpful assistant with access to the following functions. Use them if "
    'required -\n{\n    "name": "get_exchange_rate",\n    "description": "Get the rate",\n'
    '    "parameters": {"type": "object", "properties": {"base": {"type": "string"}}}\n}\n\n'
    '{"name": "convert", "parameters": {}}\n'
)
GLAIVE_CHAT = (
    "USER: What is USD to EUR?\n\n\nASSISTANT: <functioncall> "
    '{"name": "get_exchange_rate", "arguments": \'{"base": "USD"}\'} <|endoftext|>\n\n\n'
    'FUNCTION RESPONSE: {"exchange_rate": 0.85}\n\n\n'
    "ASSISTANT: One dollar is 0.85 euro. <|endoftext|>\n\n\nUSER: Thanks!\n"
)


def test_glaive_rows_become_messages_with_tools_and_tool_turns(tmp_path):
    rows = [
        {"system": GLAIVE_SYSTEM, "chat": GLAIVE_CHAT},
        {
            "system": "SYSTEM: You are a helpful assistant, with no access to external functions.",
            "chat": "USER: Hi\n\n\nASSISTANT: Hello! <|endoftext|>\n",
        },
        {"system": GLAIVE_SYSTEM, "chat": "USER: x\n\n\nASSISTANT: <functioncall> nonsense\n"},
        {"system": "SYSTEM: hi", "chat": "hello there"},
    ]
    path = tmp_path / "glaive.json"
    path.write_text(json.dumps(rows))
    tools_row, plain, bad_call, bad_chat = list(read_conversations([str(path)]))
    assert tools_row.messages == (
        {
            "role": "system",
            "content": "You are a helpful assistant with access to the following functions. "
            "Use them if required -",
        },
        {"role": "user", "content": "What is USD to EUR?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_exchange_rate", "arguments": '{"base": "USD"}'},
                }
            ],
        },
        {"role": "tool", "content": '{"exchange_rate": 0.85}', "tool_call_id": "call_1"},
        {"role": "assistant", "content": "One dollar is 0.85 euro."},
        {"role": "user", "content": "Thanks!"},
    )
    assert [t["function"]["name"] for t in tools_row.tools] == ["get_exchange_rate", "convert"]
    assert tools_row.tools[0]["type"] == "function"
    assert tools_row.tools[0]["function"]["parameters"]["properties"] == {
        "base": {"type": "string"}
    }
    assert plain.tools is None and [m["role"] for m in plain.messages] == [
        "system",
        "user",
        "assistant",
    ]
    assert (bad_call.line, bad_call.reason) == (
        3,
        'glaive turn 2 has a <functioncall> that is not {"name": ..., "arguments": ...}; '
        "fix or remove the row",
    )
    assert (bad_chat.line, bad_chat.reason) == (
        4,
        "glaive 'chat' must start with a USER:, ASSISTANT: or FUNCTION RESPONSE: turn, "
        "not 'hello there'",
    )
    # --input-format glaive reads a JSONL file's rows as glaive rows too.
    lines = write_lines(tmp_path / "glaive.jsonl", [json.dumps(rows[1]), json.dumps({"x": 1})])
    ok, missing = list(read_conversations([lines], format="glaive"))
    assert ok.messages == plain.messages
    assert (missing.line, missing.reason) == (
        2,
        "glaive row has no 'chat' transcript text (USER: ... ASSISTANT: ...)",
    )


def test_input_format_flag_and_key_reach_the_reader(tmp_path, monkeypatch, capsys):
    from draftgen.cli import main as cli

    monkeypatch.chdir(tmp_path)
    rows = [{"id": f"p{i}", "messages": [{"role": "user", "content": f"q{i}"}]} for i in range(4)]
    write_parquet(tmp_path / "rows.data", rows)  # a name that says nothing about the format
    argv = ["estimate", "--input", "rows.data", "--model", "m", "--tokenizer", "fixture:kimi-k2.5"]
    argv += ["--max-tokens", "10", "--json"]
    assert cli.main([*argv, "--no-config"]) == 0
    as_lines = json.loads(capsys.readouterr().out)  # read as JSONL: lines of binary, refused
    assert as_lines["rejected"] == as_lines["rows"] > 0
    assert cli.main([*argv, "--no-config", "--input-format", "parquet"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert (printed["rows"], printed["rejected"]) == (4, 0)
    (tmp_path / "draftgen.toml").write_text('input_format = "parquet"\n')
    assert cli.main(argv) == 0
    assert json.loads(capsys.readouterr().out)["rejected"] == 0
    (tmp_path / "draftgen.toml").write_text('input_format = "xml"\n')
    assert cli.main(argv) == cli.EXIT_ERROR
    assert "input_format must be one of auto, jsonl, json, parquet, hf, glaive, not 'xml'" in (
        capsys.readouterr().err
    )


def test_hostile_glaive_rows_are_rejected_not_raised(tmp_path):
    deep = "[" * 100_000
    rows = [
        {"system": "SYSTEM: tools -\n{" + deep, "chat": "USER: hi\n"},
        {"system": "", "chat": "USER: hi\nASSISTANT: <functioncall> " + deep},
        {"system": 5, "chat": "USER: hi\n"},
    ]
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(rows))
    reasons = [item.reason for item in read_conversations([str(path)])]
    assert reasons[0].startswith("glaive 'system' has a function definition that is not JSON")
    assert reasons[1] == "glaive turn 1 has a <functioncall> nested too deeply"
    assert reasons[2] == "glaive 'system' is a number, not a string"

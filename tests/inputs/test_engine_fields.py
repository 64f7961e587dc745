"""Ingest as the engine reads a request: tool-call arguments as text, reasoning fields kept."""

from __future__ import annotations

import copy
import json

import pytest

from draftgen.inputs.ingest import Conversation, Rejection, parse_record, read_conversations
from draftgen.tokens.rendering import render_prompt
from draftgen.tokens.tokenizer import load_tokenizer

ARGUMENTS = {"city": "Zürich", "days": 2}
CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "forecast", "arguments": ARGUMENTS},
}
MESSAGES = [
    {"role": "user", "content": "Weather in Zürich?"},
    {
        "role": "assistant",
        "content": "",
        "reasoning_content": "Need the forecast.",
        "tool_calls": [CALL],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "Sunny."},
]


def conversation(messages) -> Conversation:
    return parse_record({"messages": messages}, label="rows", input="rows.jsonl", line=1)


def test_object_arguments_are_sent_as_json_text_and_the_row_is_not_changed():
    row = copy.deepcopy(MESSAGES)
    call = conversation(row).messages[1]["tool_calls"][0]
    # Python's json.dumps as the row gave the keys, non-ASCII kept: what vLLM parses back into
    # the very object, so the prompt does not depend on the spelling.
    assert call == {
        "id": "call_1",
        "type": "function",
        "function": {"name": "forecast", "arguments": '{"city": "Zürich", "days": 2}'},
    }
    assert row == MESSAGES
    # Text is sent as given, and a flat call's object arguments become text too.
    text = {**CALL, "function": {"name": "forecast", "arguments": '{"city":"Zürich"}'}}
    flat = {"id": "call_2", "name": "forecast", "arguments": {"city": "Oslo"}}
    calls = conversation([MESSAGES[0], {"role": "assistant", "tool_calls": [text, flat]}])
    assert calls.messages[1]["tool_calls"] == [
        text,
        {"id": "call_2", "name": "forecast", "arguments": '{"city": "Oslo"}'},
    ]


def test_reasoning_fields_of_assistant_turns_are_kept():
    both = {"role": "assistant", "content": "A", "reasoning_content": "R1", "reasoning": "R2"}
    user = {"role": "user", "content": "hi", "reasoning_content": "not an assistant's"}
    messages = conversation([user, both, {"role": "user", "content": "and?"}]).messages
    assert messages == (
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "A", "reasoning_content": "R1", "reasoning": "R2"},
        {"role": "user", "content": "and?"},
    )
    # A null field is no reasoning (Parquet columns give every message every field).
    nothing = {"role": "assistant", "content": "A", "reasoning_content": None}
    assert conversation([user, nothing, MESSAGES[0]]).messages[1] == {
        "role": "assistant",
        "content": "A",
    }


@pytest.mark.parametrize(
    "message, reason",
    [
        (
            {
                "role": "assistant",
                "tool_calls": [{**CALL, "function": {"name": "f", "arguments": [1]}}],
            },
            "messages[1].tool_calls[0].function.arguments is a JSON array; give the arguments as "
            "JSON text or as an object",
        ),
        (
            {"role": "assistant", "tool_calls": [{"name": "f", "arguments": 3}]},
            "messages[1].tool_calls[0].arguments is a JSON number; give the arguments as JSON "
            "text or as an object",
        ),
        (
            {"role": "assistant", "tool_calls": ["f()"]},
            "messages[1].tool_calls[0] is a JSON string, not an object with 'function': 'name' "
            "and 'arguments'; fix or remove the row",
        ),
        (
            {"role": "assistant", "content": "A", "reasoning_content": ["R"]},
            "messages[1].reasoning_content is a JSON array, not text; give the reasoning as a "
            "string or leave the field out",
        ),
    ],
)
def test_what_the_engine_cannot_take_is_refused_naming_row_and_field(tmp_path, message, reason):
    row = {"messages": [MESSAGES[0], message, {"role": "user", "content": "next"}]}
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps({"messages": [MESSAGES[0]]}) + "\n" + json.dumps(row) + "\n")
    good, bad = read_conversations([str(path)])
    assert isinstance(good, Conversation) and isinstance(bad, Rejection)
    assert (bad.line, bad.reason) == (2, reason)


QWEN3_PROMPT = (
    "<|im_start|>user\nWeather in Zürich?<|im_end|>\n<|im_start|>assistant\n"
    "<think>\nNeed the forecast.\n</think>\n\n"
    '<tool_call>\n{"name": "forecast", "arguments": {"city": "Zürich", "days": 2}}\n</tool_call>'
    "<|im_end|>\n<|im_start|>user\n<tool_response>\nSunny.\n</tool_response><|im_end|>\n"
    "<|im_start|>assistant\n"
)


def test_qwen3_renders_the_kept_reasoning_after_the_last_user_turn():
    tokenizer = load_tokenizer("fixture:qwen3")
    sent = list(conversation(copy.deepcopy(MESSAGES)).messages)
    assert render_prompt(tokenizer, sent, None) == QWEN3_PROMPT
    # The object the row gave renders as its text does: the engine parses the text back.
    assert render_prompt(tokenizer, copy.deepcopy(MESSAGES), None) == QWEN3_PROMPT
    # Before the last user turn the template drops it, as the engine does.
    later = [*sent, {"role": "assistant", "content": "Sunny."}, {"role": "user", "content": "Ok?"}]
    assert "Need the forecast." not in render_prompt(tokenizer, later, None)


@pytest.mark.parametrize("dialect", ["vllm", "openrouter"])
def test_a_simulated_engine_renders_the_sent_history_as_draftgen_does(
    tmp_path, monkeypatch, dialect
):
    """Rows whose history has object arguments and reasoning: the engine (which refuses an
    object with HTTP 400) answers every turn, and its prompt is draftgen's rendering."""
    import sqlite3

    from golden import run_rows

    tools = [{"type": "function", "function": {"name": "forecast", "parameters": {}}}]
    rows = [
        {"id": f"r{i}", "messages": copy.deepcopy(MESSAGES), "tools": tools}
        | {"messages": [{**MESSAGES[0], "content": f"Weather {i} in Zürich?"}, *MESSAGES[1:]]}
        for i in range(6)
    ]
    config = {"seed": 2, "dialect": dialect}
    backend = {"backend": "vllm"} if dialect == "vllm" else {}
    truth, exported = run_rows(tmp_path, monkeypatch, "qwen3", rows, config, **backend)
    assert len(exported) == 6
    db = sqlite3.connect(tmp_path / "run" / "draftgen.sqlite")
    assert db.execute("SELECT count(*) FROM failures").fetchone() == (0,)
    details = dict(db.execute("SELECT key, detail FROM samples"))
    for row in exported:
        record = truth[row["generation_id"]]
        assert "<think>\nNeed the forecast.\n</think>" in record["prompt_text"]
        assert row["input_ids"] == record["prompt_ids"] + record["completion_ids"]
        assert row["verified"], (row["verify_reason"], details[row["key"]])
        assert "server_prompt_differs_from_local_template" not in details[row["key"]]

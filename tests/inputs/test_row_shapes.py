"""No row stops a run: any JSON value in any field of a row is a conversation or a rejection with
its line and reason, and a conversation plans and renders without raising."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from draftgen.inputs.ingest import (
    Conversation,
    Rejection,
    RowError,
    parse_record,
    parse_row,
    read_conversations,
)
from draftgen.inputs.plan import build_messages, plan_turns, sample_chains

USER = {"role": "user", "content": "hi"}
ROLES = "use one of system, user, assistant, tool"


@pytest.mark.parametrize(
    "role, reason",
    [
        (["user"], f"messages[0] has a role that is a JSON array; {ROLES}"),
        (["system"], f"messages[0] has a role that is a JSON array; {ROLES}"),
        ({"a": 1}, f"messages[0] has a role that is a JSON object; {ROLES}"),
        (7, f"messages[0] has a role that is a JSON number; {ROLES}"),
        (None, f"messages[0] has no role; {ROLES}"),
        ("x" * 100, f"messages[0] has unknown role {'x' * 40!r}; {ROLES}"),
    ],
)
def test_a_role_that_is_not_a_name_rejects_its_row_alone(tmp_path, role, reason):
    path = tmp_path / "p.jsonl"
    rows = [{"messages": [{"role": role, "content": "x"}, USER]}, {"messages": [USER]}]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    rejected, kept = list(read_conversations([str(path)]))
    assert rejected == Rejection(str(path), 1, reason)
    assert isinstance(kept, Conversation) and kept.line == 2


def test_a_run_given_unhashable_roles_rejects_those_rows_and_goes_on(tmp_path):
    from conftest import SimProcess, draftgen, run_args

    shapes = [["user"], ["system"], {"a": 1}]
    rows = [{"messages": [{"role": role, "content": "x"}, USER]} for role in shapes]
    inputs = tmp_path / "p.jsonl"
    inputs.write_text("".join(json.dumps(r) + "\n" for r in [*rows, {"messages": [USER]}]))
    sim = SimProcess(tmp_path, "fixture:qwen3")
    try:
        out = tmp_path / "run"
        result = draftgen(*run_args(sim, [inputs], out, "fixture:qwen3"))
    finally:
        sim.stop()
    assert result.returncode == 0, result.stderr
    rejected = [json.loads(line) for line in (out / "rejected.jsonl").read_text().splitlines()]
    assert [(r["line"], r["reason"]) for r in rejected] == [
        (1, f"messages[0] has a role that is a JSON array; {ROLES}"),
        (2, f"messages[0] has a role that is a JSON array; {ROLES}"),
        (3, f"messages[0] has a role that is a JSON object; {ROLES}"),
    ]


# -- any JSON value in any field ----------------------------------------------------------------

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)  # what JSON lines carry to orjson
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
    | st.sampled_from(["user", "assistant", "system", "tool", "human", "gpt", "function", ""])
)
JSON = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}
TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
# Valid rows of every shape read, and the places in them a hostile value goes.
BASES = {
    "openai": {
        "id": "r",
        "messages": [
            {"role": "system", "content": "s"},
            USER,
            {"role": "assistant", "content": None, "tool_calls": [CALL]},
            {"role": "tool", "content": "r", "tool_call_id": "c1", "name": "f"},
            {"role": "assistant", "content": "a"},
            USER,
        ],
        "tools": [TOOL],
    },
    "sharegpt": {
        "conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "a"}]
    },
    "glaive": {"system": "SYSTEM: t", "chat": "USER: hi ASSISTANT: a"},
}
PLACES = [
    ("openai", ()),
    ("openai", ("id",)),
    ("openai", ("messages",)),
    ("openai", ("tools",)),
    ("openai", ("tools", 0)),
    ("openai", ("tools", 0, "function")),
    *(("openai", ("messages", i)) for i in range(6)),
    *(
        ("openai", ("messages", i, field))
        for i in range(6)
        for field in ("role", "content", "tool_calls", "tool_call_id", "name", "extra")
    ),
    ("openai", ("messages", 2, "tool_calls", 0)),
    ("openai", ("messages", 2, "tool_calls", 0, "function")),
    ("openai", ("messages", 2, "tool_calls", 0, "function", "name")),
    ("openai", ("messages", 2, "tool_calls", 0, "function", "arguments")),
    ("sharegpt", ("conversations",)),
    *(("sharegpt", ("conversations", i, f)) for i in range(2) for f in ("from", "value")),
    ("sharegpt", ("conversations", 1)),
    ("glaive", ("system",)),
    ("glaive", ("chat",)),
]


# What a Parquet or datasets column hands over besides JSON's values.
COLUMN_SCALARS = SCALARS | st.sampled_from(
    [b"\x00\xff", Decimal("1.5"), dt.datetime(2026, 1, 2), dt.date(2026, 1, 2), 2**80, (1, "a")]
)
COLUMN_VALUES = st.recursive(
    COLUMN_SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def placed(base: str, place: tuple, value: object) -> dict:
    row = json.loads(json.dumps(BASES[base]))
    if not place:
        return value
    holder = row
    for step in place[:-1]:
        holder = holder[step]
    holder[place[-1]] = value
    return row


@pytest.fixture(scope="module")
def renderer():
    from draftgen.tokens.rendering import ChatRenderer, resolve_profile
    from draftgen.tokens.tokenizer import load_tokenizer

    tokenizer = load_tokenizer("fixture:qwen3")
    return ChatRenderer(tokenizer, resolve_profile(tokenizer))


@settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(place=st.sampled_from(PLACES), value=JSON, glaive=st.booleans())
def test_any_json_value_in_any_field_is_a_conversation_or_a_rejection(
    renderer, place, value, glaive
):
    base, path = place
    raw = orjson.dumps(placed(base, path, value))
    try:
        conversation = parse_row(raw, label="p.jsonl", input="p.jsonl", line=1, glaive=glaive)
    except RowError as exc:
        assert str(exc)  # the sentence written to rejected.jsonl
        return
    worked(renderer, conversation)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(place=st.sampled_from(PLACES), value=COLUMN_VALUES)
def test_any_column_value_in_any_field_is_a_conversation_or_a_rejection(renderer, place, value):
    base, path = place
    row = placed(base, path, value)
    try:
        conversation = parse_record(row, label="p.parquet", input="p.parquet", line=1)
    except RowError as exc:
        assert str(exc)
        return
    worked(renderer, conversation)


def test_bytes_in_a_parquet_row_reject_that_row_alone(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    function = {"name": "f", "blob": b"\x00\x01"}
    rows = [{"messages": [USER], "tools": [{"type": "function", "function": function}]}]
    rows.append({"messages": [USER], "tools": [{"type": "function", "function": {"name": "f"}}]})
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "p.parquet")
    refused, kept = list(read_conversations([str(tmp_path / "p.parquet")]))
    assert refused == Rejection(
        str(tmp_path / "p.parquet"),
        1,
        "row holds a value JSON cannot hold (Type is not JSON serializable: bytes); make that "
        "column text or numbers, or remove the row",
    )
    assert isinstance(kept, Conversation) and kept.line == 2


def worked(renderer, conversation: Conversation) -> None:
    """What the run does with a conversation before it asks for it: plan, key, render."""
    plans = plan_turns(conversation)
    answers = []
    for plan in sample_chains(plans, 2)[1]:
        messages = build_messages(plan, answers)
        orjson.dumps({"messages": messages, "tools": plan.tools})  # the request's body
        renderer.render(messages, list(plan.tools) if plan.tools else None)
        answers.append("answer")

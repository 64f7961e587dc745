"""The marks a rewrite of tool-call arguments on top of the engine's parser leaves: none for what
the engine's parser itself returns, each for what a gateway (Go's encoding/json, Python's
json.dumps with its defaults) writes."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from draftgen.profiles import get_profile
from draftgen.reconstruct.tool_rewrites import (
    ESCAPED_TEXT,
    NOT_ENGINE_DUMP,
    SORTED_KEYS,
    call_marks,
    rewrite_marks,
)
from draftgen.simulator.wire import go_json

KIMI = get_profile("kimi-k2")
QWEN = get_profile("qwen3.5")
HARMONY = get_profile("gpt-oss")
DECLARED = ["zone", "city", "note"]
ARGS = {"zone": "Mitte", "city": "Zürich", "note": "Café <Müller & Söhne>"}


def test_what_each_engine_returns_shows_no_mark():
    spaced = json.dumps(ARGS, ensure_ascii=False)
    compact = json.dumps(ARGS, ensure_ascii=False, separators=(",", ":"))
    assert rewrite_marks(spaced, DECLARED, QWEN) == []
    assert rewrite_marks(spaced, DECLARED, KIMI) == []
    assert rewrite_marks(compact, DECLARED, KIMI) == []  # Kimi hands back the model's own text
    assert rewrite_marks(json.dumps(ARGS), DECLARED, HARMONY) == []  # harmony escapes non-ASCII


def test_a_go_gateway_is_caught_in_every_family():
    written = go_json(ARGS)
    assert rewrite_marks(written, DECLARED, KIMI) == [ESCAPED_TEXT, SORTED_KEYS]
    assert rewrite_marks(written, DECLARED, QWEN) == [ESCAPED_TEXT, SORTED_KEYS, NOT_ENGINE_DUMP]
    assert rewrite_marks(written, DECLARED, HARMONY) == [
        ESCAPED_TEXT,
        SORTED_KEYS,
        NOT_ENGINE_DUMP,
    ]


def test_compact_spelling_is_a_mark_only_where_the_engine_dumps():
    compact = json.dumps(ARGS, ensure_ascii=False, separators=(",", ":"))
    assert rewrite_marks(compact, DECLARED, QWEN) == [NOT_ENGINE_DUMP]
    # A forced call may bypass the family's parser: its spelling proves nothing.
    assert rewrite_marks(compact, DECLARED, QWEN, forced=True) == []


def test_ascii_escapes_are_a_mark_where_the_engine_keeps_non_ascii():
    escaped = json.dumps({"city": "Zürich"})
    assert rewrite_marks(escaped, ["city"], KIMI) == [ESCAPED_TEXT]
    assert rewrite_marks(escaped, ["city"], HARMONY) == []
    # An escaped backslash before "u" is text, not an escape.
    assert rewrite_marks(json.dumps({"path": "C:\\u00e9"}), ["path"], KIMI) == []


def test_sorted_keys_count_only_against_a_declared_order_that_is_not_sorted():
    ordered = json.dumps({"city": "a", "note": "b"}, ensure_ascii=False)
    assert rewrite_marks(ordered, ["city", "note"], KIMI) == []
    assert rewrite_marks(ordered, ["note", "city"], KIMI) == [SORTED_KEYS]
    assert rewrite_marks(ordered, None, KIMI) == []


def test_calls_are_read_from_the_requests_tools():
    tools = [
        {
            "type": "function",
            "function": {
                "name": "f",
                "parameters": {
                    "type": "object",
                    "properties": {k: {"type": "string"} for k in DECLARED},
                },
            },
        }
    ]
    calls = [{"id": "c", "type": "function", "function": {"name": "f", "arguments": go_json(ARGS)}}]
    assert call_marks(calls, tools, KIMI) == [ESCAPED_TEXT, SORTED_KEYS]
    assert call_marks([{"function": {"name": "f", "arguments": "not json"}}], tools, KIMI) == []


@given(
    st.dictionaries(
        st.text(min_size=1, max_size=8), st.text(max_size=12) | st.integers(), max_size=4
    )
)
def test_the_engines_dump_of_any_object_is_never_caught(arguments):
    """What vLLM's parser writes for any model text, in the model's key order."""
    declared = list(arguments)
    assert rewrite_marks(json.dumps(arguments, ensure_ascii=False), declared, QWEN) == []
    assert rewrite_marks(json.dumps(arguments), declared, HARMONY) == []

"""The OpenRouter wire format: every error shape classified, completions and streams parsed; its
settings check (reasoning, provider routing) and its draftgen.toml table."""

from __future__ import annotations

from types import SimpleNamespace

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from draftgen.backends import BACKEND_NAMES, SettingsError, config_tables, get_backend
from draftgen.backends.base import (
    ApiError,
    StreamAccumulator,
    error_from_status,
    parse_completion,
)


def body(**choice):
    message = choice.pop("message", {"role": "assistant", "content": "hi", "reasoning": "r"})
    return orjson.dumps(
        {
            "id": "gen-1",
            "provider": "Chutes",
            "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop", "message": message, **choice}],
            "usage": {
                "prompt_tokens": 5,
                "completion_tokens": 3,
                "cost": 0.25,
                "completion_tokens_details": {"reasoning_tokens": 1},
            },
        }
    )


def test_parse_completion_fields():
    c = parse_completion(b"\n\n  " + body())  # OpenRouter may prefix keep-alive whitespace
    assert (c.generation_id, c.provider, c.reasoning, c.content, c.finish_reason) == (
        "gen-1",
        "Chutes",
        "r",
        "hi",
        "stop",
    )
    assert (c.prompt_tokens, c.completion_tokens, c.reasoning_tokens, c.cost) == (5, 3, 1, 0.25)


def test_reasoning_content_field_and_reasoning_details():
    c = parse_completion(body(message={"content": "a", "reasoning_content": "old name"}))
    assert c.reasoning == "old name"
    c = parse_completion(
        body(
            message={
                "content": "a",
                "reasoning_details": [
                    {"type": "reasoning.text", "text": "x"},
                    {"type": "reasoning.text", "text": "y"},
                ],
            }
        )
    )
    assert c.reasoning == "xy"


@pytest.mark.parametrize(
    "status, retry_after, payload, kind, retryable, fatal, pushback, wait",
    [
        (
            429,
            "2",
            {"error": {"code": 429, "message": "slow"}},
            "rate_limited",
            True,
            False,
            True,
            2.0,
        ),
        (429, None, {}, "rate_limited", True, False, True, None),
        (503, "1.5", {}, "overloaded", True, False, True, 1.5),
        (502, None, {}, "server_error", True, False, False, None),
        (500, None, b"<html>oops</html>", "server_error", True, False, False, None),
        (
            401,
            None,
            {"error": {"code": 401, "message": "No auth"}},
            "auth",
            False,
            True,
            False,
            None,
        ),
        (
            402,
            None,
            {"error": {"code": 402, "message": "no credits"}},
            "payment",
            False,
            True,
            False,
            None,
        ),
        (
            402,
            "1",
            {
                "error": {
                    "code": 402,
                    "message": "busy",
                    "metadata": {"reason": "in_flight_budget_exhausted"},
                }
            },
            "budget_in_flight",
            True,
            False,
            True,
            1.0,
        ),
        (
            402,
            "1",
            {"error": {"code": 402, "metadata": {"reason": "weight_exceeds_budget"}}},
            "payment",
            False,
            True,
            False,
            None,
        ),
        (
            400,
            None,
            {
                "error": {
                    "code": 400,
                    "message": "too long",
                    "metadata": {"error_type": "context_length_exceeded"},
                }
            },
            "context_length_exceeded",
            False,
            False,
            False,
            None,
        ),
        (
            403,
            None,
            {"error": {"code": 403, "message": "flagged"}},
            "rejected",
            False,
            False,
            False,
            None,
        ),
        (
            404,
            None,
            {"error": {"code": 404, "message": "no such model"}},
            "not_found",
            False,
            True,
            False,
            None,
        ),
    ],
)
def test_http_errors(status, retry_after, payload, kind, retryable, fatal, pushback, wait):
    raw = payload if isinstance(payload, bytes) else orjson.dumps(payload)
    error = error_from_status(status, retry_after, raw)
    assert (error.kind, error.retryable, error.fatal, error.pushback, error.retry_after) == (
        kind,
        retryable,
        fatal,
        pushback,
        wait,
    )


def test_errors_inside_http_200():
    with pytest.raises(ApiError) as info:
        parse_completion(orjson.dumps({"error": {"code": 502, "message": "upstream"}}))
    assert (info.value.kind, info.value.retryable) == ("error_in_body", True)
    with pytest.raises(ApiError) as info:
        parse_completion(body(finish_reason="error", error={"code": 502, "message": "died"}))
    assert (info.value.kind, info.value.message) == ("finish_error", "died")
    with pytest.raises(ApiError) as info:
        parse_completion(body(finish_reason=None, message={"content": ""}))
    assert info.value.kind == "empty_completion"
    with pytest.raises(ApiError) as info:
        parse_completion(b'{"choices": [')
    assert info.value.kind == "malformed_response"
    with pytest.raises(ApiError) as info:
        parse_completion(orjson.dumps({"error": {"code": 401, "message": "bad key"}}))
    assert info.value.fatal


def sse(*events):
    lines = [b": OPENROUTER PROCESSING", b""]
    for event in events:
        lines += [b"data: " + (event if isinstance(event, bytes) else orjson.dumps(event)), b""]
    return lines


def chunk(delta=None, finish=None, **top):
    return {
        "id": "gen-9",
        "provider": "SiliconFlow",
        "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}],
        **top,
    }


def test_stream_accumulates_reasoning_content_and_usage():
    acc = StreamAccumulator()
    for line in sse(
        chunk({"role": "assistant", "reasoning": "th"}),
        chunk({"reasoning": "ink", "reasoning_content": "ink"}),  # a duplicate under the old name
        chunk({"content": "ans"}),
        chunk({"content": "wer"}, finish="stop"),
        {"id": "gen-9", "choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 7}},
        b"[DONE]",
    ):
        acc.feed_line(line)
    c = acc.finish()
    assert (c.reasoning, c.content, c.finish_reason, c.completion_tokens, c.provider) == (
        "think",
        "answer",
        "stop",
        7,
        "SiliconFlow",
    )


def test_stream_mid_error_and_early_end():
    acc = StreamAccumulator()
    acc.feed_line(b"data: " + orjson.dumps(chunk({"content": "par"})))
    with pytest.raises(ApiError) as info:
        acc.feed_line(
            b"data: "
            + orjson.dumps(
                {**chunk(finish="error"), "error": {"code": 502, "message": "provider died"}}
            )
        )
    assert info.value.kind == "midstream_error" and info.value.retryable
    acc = StreamAccumulator()
    acc.feed_line(b"data: " + orjson.dumps(chunk({"content": "par"})))
    with pytest.raises(ApiError) as info:
        acc.finish()
    assert info.value.kind == "connection_dropped"


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_parsers_only_raise_api_errors_on_garbage(data):
    for parse in (parse_completion, lambda d: StreamAccumulator().feed_line(b"data: " + d)):
        try:
            parse(data)
        except ApiError:
            pass


@settings(max_examples=200, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers(-10, 10) | st.text(max_size=5),
        lambda c: (
            st.lists(c, max_size=3)
            | st.dictionaries(
                st.sampled_from(
                    [
                        "choices",
                        "message",
                        "delta",
                        "error",
                        "usage",
                        "content",
                        "reasoning",
                        "finish_reason",
                        "id",
                    ]
                ),
                c,
                max_size=4,
            )
        ),
        max_leaves=12,
    )
)
def test_parsers_only_raise_api_errors_on_odd_json(value):
    raw = orjson.dumps(value)
    for parse in (parse_completion, lambda d: StreamAccumulator().feed_line(b"data: " + d)):
        try:
            parse(raw)
        except ApiError:
            pass


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(1, 50), min_size=1, max_size=40))
def test_stream_bytes_split_anywhere_give_the_same_completion(cuts):
    events = sse(
        chunk({"reasoning": "ré"}),
        chunk({"content": "sum 日本"}, finish="stop"),
        {"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 2}},
        b"[DONE]",
    )
    blob = b"\n".join(events) + b"\n"
    acc, pos = StreamAccumulator(), 0
    for size in cuts:
        acc.feed_bytes(blob[pos : pos + size])
        pos += size
    acc.feed_bytes(blob[pos:])
    c = acc.finish()
    assert (c.reasoning, c.content, c.completion_tokens) == ("ré", "sum 日本", 2)


def test_stream_event_of_several_megabytes():
    big = chunk({"reasoning_details": [{"type": "reasoning.encrypted", "data": "x" * 5_000_000}]})
    acc = StreamAccumulator()
    blob = (
        b"\n".join(
            sse(
                chunk({"content": "a"}, finish="stop"),
                big,
                {"choices": [], "usage": {"completion_tokens": 1}},
                b"[DONE]",
            )
        )
        + b"\n"
    )
    for i in range(0, len(blob), 8192):
        acc.feed_bytes(blob[i : i + 8192])
    assert acc.finish().content == "a"


# -- the backend's own settings check and draftgen.toml table ------------------------------------


def options(**given):
    fields = {
        "reasoning_effort": None,
        "reasoning_max_tokens": None,
        "provider": None,
        "chat_template_kwargs": None,
    }
    return SimpleNamespace(**{**fields, **given})


def test_settings_build_the_reasoning_object_and_pass_provider_routing():
    backend = get_backend("openrouter")
    assert backend.settings(options()) == {"reasoning": None, "provider": None}
    assert backend.settings(options(reasoning_effort="high")) == {
        "reasoning": {"effort": "high"},
        "provider": None,
    }
    routing = {"order": ["chutes"], "allow_fallbacks": False}
    assert backend.settings(options(reasoning_max_tokens=512, provider=routing)) == {
        "reasoning": {"max_tokens": 512},
        "provider": routing,
    }
    # An empty object asks for nothing, and is sent as given.
    assert backend.settings(options(provider={}, chat_template_kwargs={}))["provider"] == {}


def test_settings_refuse_template_variables_and_bad_routing():
    backend = get_backend("openrouter")
    with pytest.raises(SettingsError) as excinfo:
        backend.settings(options(chat_template_kwargs={"enable_thinking": False}))
    assert str(excinfo.value) == (
        "--chat-template-kwargs is for vLLM/SGLang (--backend vllm, sglang or sglang-generate); "
        "through OpenRouter the providers set the template's thinking switch from "
        "--reasoning-effort, so use that instead"
    )
    with pytest.raises(SettingsError) as excinfo:
        backend.settings(options(provider={"sort": "cheapest"}))
    assert str(excinfo.value) == (
        "openrouter.provider.sort must be a one of price, throughput, latency, not 'cheapest'; "
        "fix [openrouter.provider]"
    )
    with pytest.raises(SettingsError) as excinfo:
        backend.settings(options(provider=["chutes"]))
    assert str(excinfo.value) == (
        "openrouter.provider must be an object of routing preferences; fix [openrouter.provider]"
    )


def test_the_openrouter_table_is_the_backends_own():
    table = get_backend("openrouter").config_table
    assert (table.name, table.keys, table.shape, table.options) == (
        "openrouter",
        ("provider",),
        "[openrouter.provider]",
        ("provider",),
    )
    assert config_tables() == {"openrouter": table}  # the only backend with a table
    assert table.read({}) == {"provider": None}
    assert table.read({"provider": {}}) == {"provider": None}  # empty: the same as none
    assert table.read({"provider": {"zdr": True}}) == {"provider": {"zdr": True}}
    with pytest.raises(SettingsError) as excinfo:
        table.read({"provider": {"zdr": "yes"}})
    assert str(excinfo.value) == "openrouter.provider.zdr must be a true or false, not 'yes'"


def test_only_openrouter_has_a_batch_api():
    assert [get_backend(name).batch_api for name in BACKEND_NAMES] == [True, False, False, False]

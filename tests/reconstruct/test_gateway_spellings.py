"""A sample of a provider caught rewriting tool-call arguments, read back through its rewrites: the
spellings the model may have written that the rewrite turns into the served text, and how many of
them have the provider's count (one: proven; more: doubted), on the fixtures' real vocabularies."""

from __future__ import annotations

import json

import pytest

from draftgen.profiles import QWEN3, get_profile
from draftgen.reconstruct.text import reconstruct_sample
from draftgen.reconstruct.tool_rewrites import (
    KEY_ORDER_LIMIT,
    _tails,
    inverse_calls,
    keeps_unsorted_keys,
    key_orders,
    spellings_at_count,
)
from draftgen.records import Completion, StoredCompletion
from draftgen.simulator.wire import go_json
from draftgen.tokens.rendering import render_prompt
from draftgen.tokens.tokenizer import encode, load_tokenizer

QWEN36 = get_profile("qwen3.5")  # the qwen3.6 fixture's profile: XML parameters
MESSAGES = [{"role": "user", "content": "Weather?"}]
FORECAST = {"unit": {"type": "string"}, "city": {"type": "string"}, "date": {"type": "string"}}


def tools(properties: dict) -> list[dict]:
    parameters = {"type": "object", "properties": properties}
    return [{"type": "function", "function": {"name": "forecast", "parameters": parameters}}]


def served(fixture: str, generated: str, arguments: str, properties: dict) -> StoredCompletion:
    """A completion a Go gateway served: ``arguments`` rewritten, the counts of ``generated``
    (what the model wrote)."""
    tokenizer = load_tokenizer(f"fixture:{fixture}")
    prompt_ids = encode(tokenizer, render_prompt(tokenizer, MESSAGES, tools(properties)))
    usage = {
        "prompt_tokens": len(prompt_ids),
        "completion_tokens": len(encode(tokenizer, generated)),
    }
    call = {
        "id": "c0",
        "type": "function",
        "function": {"name": "forecast", "arguments": arguments},
    }
    completion = Completion(
        "g", "SiliconFlow", "m", "Need it.", "", [call], "tool_calls", "tool_calls", usage
    )
    return StoredCompletion("k", "s", 0, MESSAGES, tools(properties), completion)


def qwen3_generated(arguments: str) -> str:
    return (
        '<think>Need it.</think><tool_call>\n{"name": "forecast", "arguments": '
        f"{arguments}}}\n</tool_call><|im_end|>"
    )


def read_back(fixture, profile, stored, reorders=True, escapes=True):
    """(the sample's completion ids, how many spellings share its count)."""
    tokenizer = load_tokenizer(f"fixture:{fixture}")
    sample = reconstruct_sample(stored, tokenizer, profile)
    # Qwen3.6's answer of reasoning and a call, no content, also reads as one whose call ended
    # its reasoning unclosed (one id fewer): that doubt is the close's, not the spelling's.
    assert sample.verified or sample.reason == "reasoning_end_unproven", sample.detail
    ids = sample.input_ids[sample.prompt_len :]
    variants = inverse_calls(stored.completion.tool_calls, reorders, escapes)
    return ids, spellings_at_count(stored, ids, tokenizer, profile, variants)


def test_one_key_served_compact_is_the_only_spelling_at_its_count():
    model = json.dumps({"city": "Paris"})
    generated = qwen3_generated(model)
    stored = served("qwen3", generated, go_json({"city": "Paris"}), {"city": {"type": "string"}})
    ids, sharing = read_back("qwen3", QWEN3, stored)
    # Spaced (the engine's dump) has 24 ids, compact 23: the count picks the model's.
    assert len(ids) == 24
    assert ids == encode(load_tokenizer("fixture:qwen3"), generated)
    assert sharing == 1


def test_three_keys_sorted_by_the_gateway_share_their_count_in_six_orders():
    written = {"unit": "C", "city": "Paris", "date": "2026-03-15"}
    generated = qwen3_generated(json.dumps(written))
    stored = served("qwen3", generated, go_json(written), FORECAST)
    ids, sharing = read_back("qwen3", QWEN3, stored)
    # The count took the sorted order's spaced reading: right length, not the model's ids.
    truth = encode(load_tokenizer("fixture:qwen3"), generated)
    assert len(ids) == len(truth) and ids != truth
    assert sharing == 6
    # A provider seen keeping its keys' order is read back in the served order alone.
    assert read_back("qwen3", QWEN3, stored, reorders=False)[1] == 1


def xml_generated(parameters: list[tuple[str, str]]) -> str:
    body = "".join(f"<parameter={key}>\n{value}\n</parameter>\n" for key, value in parameters)
    return f"Need it.</think><tool_call>\n<function=forecast>\n{body}</function>\n</tool_call>"


def test_xml_parameters_escapes_and_spacing_leave_one_spelling():
    value = "Zürich <Müller & Söhne>"
    generated = xml_generated([("city", value)]) + "<|im_end|>"
    stored = served("qwen3.6", generated, go_json({"city": value}), {"city": {"type": "string"}})
    ids, sharing = read_back("qwen3.6", QWEN36, stored)
    assert ids == encode(load_tokenizer("fixture:qwen3.6"), generated)
    assert sharing == 1


def test_xml_parameters_in_other_orders_share_the_count():
    written = [("unit", "C"), ("city", "Paris"), ("date", "2026-03-15")]
    generated = xml_generated(written) + "<|im_end|>"
    stored = served("qwen3.6", generated, go_json(dict(written)), FORECAST)
    ids, sharing = read_back("qwen3.6", QWEN36, stored)
    assert ids != encode(load_tokenizer("fixture:qwen3.6"), generated)
    assert sharing == 6


def test_inverse_calls_are_the_served_calls_then_each_order_in_each_spelling():
    call = {"id": "c0", "function": {"name": "f", "arguments": '{"b":"<","a":1}'}}
    variants = inverse_calls([call], reorders=True, escapes=True)
    assert variants[0] == [call]
    arguments = [calls[0]["function"]["arguments"] for calls in variants[1:]]
    assert arguments == [
        '{"b": "<", "a": 1}',
        '{"b": "\\u003c", "a": 1}',
        '{"b":"\\u003c","a":1}',
        '{"b": "<", "a": 1}',
        '{"b":"<","a":1}',
        '{"a": 1, "b": "<"}',
        '{"a": 1, "b": "\\u003c"}',
        '{"a":1,"b":"\\u003c"}',
        '{"a": 1, "b": "<"}',
        '{"a":1,"b":"<"}',
    ]
    assert [c[0]["function"]["arguments"] for c in inverse_calls([call], False, False)] == [
        '{"b":"<","a":1}',
        '{"b": "<", "a": 1}',
    ]


def test_key_orders_reach_nested_objects_and_stop_at_the_limit():
    assert list(key_orders({"a": {"x": 1, "y": 2}, "b": [{"p": 1, "q": 2}]})) == [
        {"a": {"x": 1, "y": 2}, "b": [{"p": 1, "q": 2}]},
        {"a": {"x": 1, "y": 2}, "b": [{"q": 2, "p": 1}]},
        {"a": {"y": 2, "x": 1}, "b": [{"p": 1, "q": 2}]},
        {"a": {"y": 2, "x": 1}, "b": [{"q": 2, "p": 1}]},
        {"b": [{"p": 1, "q": 2}], "a": {"x": 1, "y": 2}},
        {"b": [{"p": 1, "q": 2}], "a": {"y": 2, "x": 1}},
        {"b": [{"q": 2, "p": 1}], "a": {"x": 1, "y": 2}},
        {"b": [{"q": 2, "p": 1}], "a": {"y": 2, "x": 1}},
    ]
    five = {"function": {"arguments": json.dumps(dict.fromkeys("abcde", 1))}}
    assert len(inverse_calls([five], True, False)) == 1 + KEY_ORDER_LIMIT
    six = {"function": {"arguments": json.dumps(dict.fromkeys("abcdef", 1))}}
    assert inverse_calls([six], True, False) is None
    # Without key orders to try, six keys are no obstacle: the spellings keep the order given.
    kept = inverse_calls([six], False, False)
    assert [list(json.loads(call["function"]["arguments"])) for (call,) in kept] == [
        list("abcdef")
    ] * 2


@pytest.mark.parametrize(
    "arguments, keeps",
    [
        ('{"unit": "C", "city": "Paris"}', True),
        ('{"city": "Paris", "unit": "C"}', False),
        ('{"city": "Paris"}', False),
        ("not json", False),
    ],
)
def test_a_provider_keeps_unsorted_keys_only_where_one_came_back_unsorted(arguments, keeps):
    assert keeps_unsorted_keys([{"function": {"arguments": arguments}}]) is keeps


@pytest.mark.parametrize("fixture", ["qwen3", "qwen3.6", "kimi-k2.5"])
def test_spellings_are_encoded_from_their_shared_heads_last_special_token(fixture):
    """What follows the shared head is encoded alone: its ids are those of the whole text's."""
    tokenizer = load_tokenizer(f"fixture:{fixture}")
    reasoning = "Let me think about Zürich.\n\nThe weather: <b> & more" * 3
    texts = [
        f"{reasoning}</think>{head}<tool_call>\n{arguments}\n</tool_call><|im_end|>"
        for head in ("", "\n")
        for arguments in ('{"a": 1, "b": "x"}', '{"b":"x","a":1}')
    ]
    head, tails = _tails(tokenizer, texts)
    assert head == len(encode(tokenizer, reasoning + "</think>"))
    assert [encode(tokenizer, text)[head:] for text in texts] == tails

"""Structured tool calls: rebuilt as each family's markup, and the token count decides."""

from __future__ import annotations

import json

import pytest

from draftgen.profiles import (
    DEEPSEEK_V3,
    DEEPSEEK_V32,
    GLM,
    GPT_OSS,
    KIMI_K2,
    MINIMAX_M2,
    QWEN3,
    ModelProfile,
    ToolCallFormatError,
)
from draftgen.reconstruct.text import read_completion, reconstruct_sample
from draftgen.records import Completion, StoredCompletion
from draftgen.tokens.rendering import render_prompt
from draftgen.tokens.tokenizer import encode, load_tokenizer

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
MESSAGES = [{"role": "user", "content": "Weather in Paris?"}]
ARGS = '{"city": "Paris"}'


def call(arguments=ARGS, call_id="functions.get_weather:0", name="get_weather"):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def test_kimi_markup_keeps_the_model_call_id():
    [first, *rest] = KIMI_K2.tool_call_markups([call()], "")
    assert first.text == (
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
        '<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>'
    )
    assert first.notes == ()
    # The compact re-serialisation is the other reading.
    assert [m.notes for m in rest] == [("tool_arguments_reserialised=compact",)]
    assert '{"city":"Paris"}' in rest[0].text


def test_kimi_markup_rebuilds_a_renamed_call_id_from_name_and_index():
    calls = [call(call_id="call_abc"), call(call_id="call_def", name="get_time", arguments="{}")]
    first = KIMI_K2.tool_call_markups(calls, "")[0]
    assert "functions.get_weather:0<|tool_call_argument_begin|>" in first.text
    assert "functions.get_time:1<|tool_call_argument_begin|>{}" in first.text
    assert first.notes == ("tool_call_id_rebuilt",)


def test_deepseek_markup():
    assert DEEPSEEK_V3.tool_call_markups([call()], "x")[0].text == (
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>"
        '{"city": "Paris"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>'
    )


def test_qwen3_markup_leads_with_a_newline_after_content_or_not():
    texts = [m.text for m in QWEN3.tool_call_markups([call()], "Let me check.")]
    body = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    assert texts[0] == "\n" + body
    assert body in texts  # a parser that kept "\n\n" as content: the lead was never generated
    assert QWEN3.tool_call_markups([call()], "")[0].text == body


def test_parsed_object_arguments_are_written_spaced_like_tojson():
    markup = DEEPSEEK_V3.tool_call_markups([call(arguments={"city": "Zürich"})], "")[0]
    assert '<｜tool▁sep｜>{"city": "Zürich"}<｜tool▁call▁end｜>' in markup.text


def test_a_profile_without_a_format_and_a_nameless_call_are_refused():
    plain = ModelProfile("plain", "<think>", "</think>", "<eot>", ())
    with pytest.raises(ToolCallFormatError, match="cannot rebuild structured tool calls"):
        plain.tool_call_markups([call()], "")
    with pytest.raises(ToolCallFormatError, match=r"tool_calls\[0\] has no function name"):
        KIMI_K2.tool_call_markups([{"function": {"arguments": "{}"}}], "")


def test_reading_appends_the_markup_before_the_end_of_turn():
    completion = Completion("g", "p", "m", "R", "", [call()], "tool_calls", "tool_calls")
    reading = read_completion(completion, "<|im_assistant|>assistant<|im_middle|><think>", KIMI_K2)
    assert reading.texts[0] == (
        "R</think><|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
        '<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|>'
        "<|tool_calls_section_end|><|im_end|>"
    )
    assert reading.notes == ["tool_calls_rebuilt"]
    assert reading.notes_of(1) == ["tool_calls_rebuilt", "tool_arguments_reserialised=compact"]


# --- against the fixtures' templates: the count check decides --------------------------------


@pytest.fixture(scope="module")
def kimi():
    return load_tokenizer("fixture:kimi-k2.5")


@pytest.fixture(scope="module")
def deepseek():
    return load_tokenizer("fixture:deepseek-v3-thinking")


def stored_for(
    tokenizer, generated: str, reasoning: str, content: str, calls: list
) -> StoredCompletion:
    """A completion whose counts are those of ``generated``, the text the model really wrote."""
    prompt_ids = encode(tokenizer, render_prompt(tokenizer, MESSAGES, TOOLS))
    usage = {
        "prompt_tokens": len(prompt_ids),
        "completion_tokens": len(encode(tokenizer, generated)),
    }
    completion = Completion(
        "g", "p", "m", reasoning, content, calls, "tool_calls", "tool_calls", usage
    )
    return StoredCompletion("k", "s", 0, MESSAGES, TOOLS, completion)


KIMI_GENERATED = (
    "Need weather.</think>Checking.<|tool_calls_section_begin|><|tool_call_begin|>"
    'functions.get_weather:0<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|>'
    "<|tool_calls_section_end|><|im_end|>"
)


@pytest.mark.parametrize(
    "arguments, call_id, verified, reason",
    [
        (ARGS, "functions.get_weather:0", True, "ok"),  # passed through verbatim: proven
        # Re-serialised compactly, or renamed: the count finds the generated ids, but a count
        # cannot prove key order or a call index, so they are exported only as unverified.
        ('{"city":"Paris"}', "functions.get_weather:0", False, "tool_arguments_reserialised"),
        (ARGS, "call_9f2c", False, "tool_call_id_rebuilt"),
    ],
)
def test_kimi_rebuilt_tool_calls_find_the_generated_ids(kimi, arguments, call_id, verified, reason):
    calls = [call(arguments, call_id)]
    stored = stored_for(kimi, KIMI_GENERATED, "Need weather.", "Checking.", calls)
    sample = reconstruct_sample(stored, kimi, KIMI_K2)
    assert (sample.verified, sample.reason) == (verified, reason)
    assert sample.input_ids[sample.prompt_len :] == encode(kimi, KIMI_GENERATED)


def test_sorted_keys_are_caught_by_the_reading_not_the_count(kimi):
    # The model wrote the keys in another order and the provider sorted them: the count matches
    # (the same tokens), which is why a re-serialised reading is never proven.
    generated = KIMI_GENERATED.replace('{"city": "Paris"}', '{"unit": "C", "city": "Paris"}')
    calls = [call('{"city":"Paris","unit":"C"}')]
    stored = stored_for(kimi, generated, "Need weather.", "Checking.", calls)
    sample = reconstruct_sample(stored, kimi, KIMI_K2)
    assert (sample.verified, sample.reason) == (False, "tool_arguments_reserialised")


def test_arguments_no_reading_reproduces_fail_the_count(kimi):
    # The provider dropped a key: no reading has the generated count.
    generated = KIMI_GENERATED.replace('{"city": "Paris"}', '{"city": "Paris", "unit": "C"}')
    stored = stored_for(kimi, generated, "Need weather.", "Checking.", [call()])
    sample = reconstruct_sample(stored, kimi, KIMI_K2)
    assert (sample.verified, sample.reason) == (False, "tool_calls_inexact")
    assert "no reading of the structured tool_calls as kimi-k2 markup" in sample.detail


def test_deepseek_template_renders_history_calls_exactly_as_the_profile(deepseek):
    # The profile's markup is what the template writes for the same call in history.
    history = [*MESSAGES, {"role": "assistant", "content": "", "tool_calls": [call()]}]
    text = deepseek.apply_chat_template(history, tools=TOOLS, tokenize=False)
    assert DEEPSEEK_V3.tool_call_markups([call()], "")[0].text + "<｜end▁of▁sentence｜>" in text


def test_kimi_template_renders_history_calls_exactly_as_the_profile(kimi):
    history = [*MESSAGES, {"role": "assistant", "content": "", "tool_calls": [call()]}]
    text = kimi.apply_chat_template(history, tools=TOOLS, tokenize=False)
    assert KIMI_K2.tool_call_markups([call()], "")[0].text + "<|im_end|>" in text


def test_json_reserialisation_styles_are_the_json_module_s():
    markups = QWEN3.tool_call_markups([call('{"a":1,  "b":[1,2]}')], "")
    texts = [m.text for m in markups]
    assert any(json.dumps({"a": 1, "b": [1, 2]}) in t for t in texts)
    assert any('{"a":1,"b":[1,2]}' in t for t in texts)


# --- GLM, MiniMax-M2, DeepSeek V3.2 (DSML), gpt-oss (harmony) ---------------------------------

NESTED = '{"city": "Paris", "days": [1, 2], "units": {"temp": "C"}, "n": 3}'


def test_glm_markup_is_one_key_value_pair_per_parameter():
    [first, bare] = GLM.tool_call_markups([call(), call(name="get_time", arguments="{}")], "x")
    assert first.text == (
        "\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
        "</tool_call>\n<tool_call>get_time\n</tool_call>"
    )
    # String values are what the model wrote: no reading is a re-serialisation.
    assert (first.notes, bare.notes) == ((), ())
    assert bare.text == first.text[1:]


def test_xml_markups_write_container_values_as_json_and_say_it_is_a_guess():
    readings = MINIMAX_M2.tool_call_markups([call(arguments=NESTED)], "x")
    assert readings[0].text == (
        '\n<minimax:tool_call>\n<invoke name="get_weather">\n'
        '<parameter name="city">Paris</parameter>\n<parameter name="days">[1, 2]</parameter>\n'
        '<parameter name="units">{"temp": "C"}</parameter>\n<parameter name="n">3</parameter>\n'
        "</invoke>\n</minimax:tool_call>"
    )
    assert [m.notes for m in readings] == [
        ("tool_arguments_reserialised=spaced",),
        ("tool_arguments_reserialised=compact",),
        ("tool_arguments_reserialised=spaced",),
        ("tool_arguments_reserialised=compact",),
    ]
    assert '<parameter name="days">[1,2]</parameter>' in readings[1].text


def test_dsml_markup_types_each_parameter():
    text = DEEPSEEK_V32.tool_call_markups([call(arguments='{"city": "Paris", "n": 3}')], "")[0].text
    assert text == (
        '\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name="get_weather">\n'
        '<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>\n'
        '<｜DSML｜parameter name="n" string="false">3</｜DSML｜parameter>\n'
        "</｜DSML｜invoke>\n</｜DSML｜function_calls>"
    )


def test_harmony_markup_addresses_the_function_with_or_without_a_constraint():
    texts = [m.text for m in GPT_OSS.tool_call_markups([call()], "")]
    assert texts[0] == (
        "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
        '<|message|>{"city": "Paris"}'
    )
    assert (
        "<|start|>assistant<|channel|>commentary to=functions.get_weather"
        '<|message|>{"city": "Paris"}'
    ) in texts


@pytest.mark.parametrize("profile", [GLM, MINIMAX_M2, DEEPSEEK_V32])
def test_xml_markups_need_json_object_arguments(profile):
    with pytest.raises(ToolCallFormatError) as excinfo:
        profile.tool_call_markups([call(arguments="city=Paris")], "")
    assert str(excinfo.value) == (
        "tool_calls[0] arguments are not valid JSON, so no XML parameters can be rebuilt from them"
    )
    with pytest.raises(ToolCallFormatError, match=r"tool_calls\[0\] arguments are not a JSON"):
        profile.tool_call_markups([call(arguments="[1]")], "")


def _sample(fixture, profile, generated, reasoning, content, calls, prompt_tools=TOOLS):
    tokenizer = load_tokenizer(f"fixture:{fixture}")
    prompt_ids = encode(tokenizer, render_prompt(tokenizer, MESSAGES, prompt_tools))
    truth = encode(tokenizer, generated)
    usage = {"prompt_tokens": len(prompt_ids), "completion_tokens": len(truth)}
    completion = Completion(
        "g", "P", "m", reasoning, content, calls, "tool_calls", "tool_calls", usage
    )
    stored = StoredCompletion("k", "s", 0, MESSAGES, prompt_tools, completion)
    return reconstruct_sample(stored, tokenizer, profile), prompt_ids + truth


def test_glm_compact_container_arguments_are_found_and_flagged():
    generated = (
        "\n<think>R</think>\n<tool_call>get_weather\n<arg_key>city</arg_key>\n"
        "<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>\n<arg_value>[1,2]</arg_value>\n"
        "</tool_call><|observation|>"
    )
    calls = [call(arguments='{"city": "Paris", "days": [1, 2]}')]
    sample, truth = _sample("glm-4.6", GLM, generated, "R", "", calls)
    assert sample.input_ids == truth
    assert (sample.verified, sample.reason) == (False, "tool_arguments_reserialised")


def test_harmony_call_without_a_constraint_is_the_count_s_other_reading():
    generated = (
        "<|channel|>analysis<|message|>R<|end|><|start|>assistant<|channel|>commentary "
        'to=functions.get_weather<|message|>{"city": "Paris"}<|call|>'
    )
    sample, truth = _sample("gpt-oss", GPT_OSS, generated, "R", "", [call()])
    assert sample.input_ids == truth
    assert (sample.verified, sample.reason) == (True, "ok"), sample.detail


def test_families_whose_tool_turns_end_elsewhere_have_two_stop_texts():
    assert GLM.stop_texts() == ("<|user|>", "<|observation|>")
    assert GPT_OSS.stop_texts() == ("<|return|>", "<|call|>")
    assert (QWEN3.stop_texts(), MINIMAX_M2.stop_texts()) == (("<|im_end|>",), ("[e~[",))
    assert (GLM.turn_end(True), GLM.turn_end(False)) == ("<|observation|>", "<|user|>")

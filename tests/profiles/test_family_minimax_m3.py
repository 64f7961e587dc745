"""MiniMax-M3 (fixture and profile ``minimax-m3``): namespaced tool-call tags with arguments as
elements named after their keys, ``<mm:think>`` reasoning, the three ``thinking_mode`` values,
the bare ``</mm:think>`` an adaptive turn opens with when the model does not think, and simulated
runs.

What the expected texts rest on is said in ``templates/minimax-m3.jinja``: the tool-call markup,
the think tags, the thinking-mode sentence and the generation prompt's end are the published
template's and parsers'; the system/developer layout and the tools section's wording are taken
from renderers written against it (unconfirmed).
"""

from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest
from golden import (
    CALL,
    SHAPES,
    TOOLS,
    USER,
    Family,
    Shape,
    case,
    family_profile,
    generated_text,
    plain_rows,
    run_rows,
    simulated_run,
    stored_delivery,
)

from draftgen.profiles import MINIMAX_M2, detect_profile, get_profile
from draftgen.profiles.minimax_m3 import MINIMAX_M3, NAMESPACE, write_tool_calls, xml_value
from draftgen.reconstruct.text import reconstruct_sample
from draftgen.records import Completion, StoredCompletion
from draftgen.tokens.rendering import ChatRenderer, render_prompt
from draftgen.tokens.tokenizer import decode, encode, load_tokenizer

NS = NAMESPACE
MARKUP = (
    f'{NS}<tool_call>\n{NS}<invoke name="get_weather">{NS}<city>Paris{NS}</city>{NS}</invoke>\n'
    f"{NS}</tool_call>"
)
FAMILIES = {
    # The template's default (and what providers set for thinking on): the model opens the block.
    "adaptive": Family("minimax-m3", "[e~[", "<mm:think>", "</mm:think>", markup=MARKUP),
    "enabled": Family(
        "minimax-m3",
        "[e~[",
        "",
        "</mm:think>",
        markup=MARKUP,
        variables=(("thinking_mode", "enabled"),),
    ),
    "disabled": Family(
        "minimax-m3",
        "[e~[",
        "",
        "",
        thinks=False,
        markup=MARKUP,
        variables=(("thinking_mode", "disabled"),),
    ),
}
IDENTITY = (
    "Your model version is MiniMax-M3, developed by MiniMax. Knowledge cutoff: January 2026. "
    "Founded in early 2022, MiniMax is a global AI foundation model company committed to "
    "advancing the frontiers of AI towards AGI."
)
INSTRUCTIONS = (
    "\n\n<thinking_instructions>\nYou have a thinking capability that allows you to reason step "
    "by step before responding. When thinking is enabled, wrap your reasoning in "
    "<mm:think></mm:think> tags before your response. When thinking is disabled, begin your "
    "response directly after the </mm:think> prefix. When thinking is adaptive, decide on your "
    "own whether to think for the current turn.\n"
)
MODE_SENTENCES = {
    "enabled": "Current thinking mode: enabled. You MUST think step by step before every "
    "response, including after receiving function/tool results.\n",
    "disabled": "Current thinking mode: disabled. Do not output any thinking process.\n",
    "adaptive": "Current thinking mode: adaptive. You are encouraged to think for complex "
    "decision-making, multi-step reasoning, or when analyzing function/tool results.\n",
}


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("fixture:minimax-m3")


def system_turn(mode: str, developer: str = "You are a helpful assistant.") -> str:
    return (
        f"]~!b[]~b]system\n{IDENTITY}{INSTRUCTIONS}{MODE_SENTENCES[mode]}</thinking_instructions>"
        f"[e~[\n]~b]developer\n{developer}"
    )


# --- the template's text -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("variables", "mode", "prompt_end"),
    [
        ({}, "adaptive", ""),
        ({"thinking_mode": "adaptive"}, "adaptive", ""),
        ({"thinking_mode": "enabled"}, "enabled", "<mm:think>"),
        ({"thinking_mode": "disabled"}, "disabled", "</mm:think>"),
    ],
)
def test_thinking_mode_sets_the_sentence_and_the_generation_prompt(
    tokenizer, variables, mode, prompt_end
):
    text = render_prompt(tokenizer, USER, None, variables)
    assert text == (
        system_turn(mode)
        + "[e~[\n]~b]user\nWhat is the capital of France?[e~[\n]~b]ai\n"
        + prompt_end
    )


def test_a_system_message_is_the_developer_turn_and_tools_follow_it(tokenizer):
    messages = [{"role": "system", "content": "Be brief."}, *USER]
    text = render_prompt(tokenizer, messages, TOOLS)
    tools = (
        "\n\n# Tools\nYou may call one or more tools to assist with the user query.\nHere are the "
        'tools available in JSONSchema format:\n\n<tools>\n<tool>{"name": "get_weather", '
        '"description": "Weather for a city", "parameters": {"type": "object", "properties": '
        '{"city": {"type": "string"}}}}</tool>\n</tools>\n\n'
    )
    assert text.startswith(system_turn("adaptive", "Be brief.") + tools)
    assert f'Example:\n\n{NS}<tool_call>\n{NS}<invoke name="tool-name-1">' in text
    assert text.endswith(
        f"{NS}</tool_call>[e~[\n]~b]user\nWhat is the capital of France?[e~[\n]~b]ai\n"
    )


def test_history_keeps_reasoning_and_marks_turns_without_it(tokenizer):
    messages = [
        *USER,
        {"role": "assistant", "content": "Paris.", "reasoning_content": "old"},
        {"role": "user", "content": "And of Italy?"},
        {"role": "assistant", "content": "Rome."},
        {"role": "user", "content": "Spain?"},
    ]
    text = render_prompt(tokenizer, messages, None)
    assert text.endswith(
        "]~b]ai\n<mm:think>old</mm:think>Paris.[e~[\n]~b]user\nAnd of Italy?[e~[\n"
        "]~b]ai\n</mm:think>Rome.[e~[\n]~b]user\nSpain?[e~[\n]~b]ai\n"
    )


def test_tool_call_history_writes_element_named_arguments(tokenizer):
    arguments = {"city": "Paris", "opts": {"units": "C", "days": [1, 2], "skip": None}, "go": True}
    messages = [
        *USER,
        {
            "role": "assistant",
            "content": "Checking.",
            "reasoning_content": "tool",
            "tool_calls": [
                {
                    "id": "a",
                    "type": "function",
                    "function": {"name": "f", "arguments": json.dumps(arguments)},
                },
                {"id": "b", "type": "function", "function": {"name": "g", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "tool_call_id": "a", "content": "sun"},
        {"role": "tool", "tool_call_id": "b", "content": "ok"},
    ]
    text = render_prompt(tokenizer, messages, TOOLS)
    assert text.endswith(
        f"]~b]ai\n<mm:think>tool</mm:think>Checking.{NS}<tool_call>\n"
        f'{NS}<invoke name="f">{NS}<city>Paris{NS}</city>{NS}<opts>{NS}<units>C{NS}</units>'
        f"{NS}<days>{NS}<item>1{NS}</item>{NS}<item>2{NS}</item>{NS}</days>{NS}</opts>"
        f'{NS}<go>true{NS}</go>{NS}</invoke>\n{NS}<invoke name="g">{NS}</invoke>\n'
        f"{NS}</tool_call>[e~[\n]~b]tool\n<response>sun</response>\n<response>ok</response>"
        "[e~[\n]~b]ai\n"
    )


# --- the profile -----------------------------------------------------------------------------


def test_m3_is_detected_before_m2(tokenizer):
    assert detect_profile(tokenizer.get_vocab()) is MINIMAX_M3
    assert detect_profile(load_tokenizer("fixture:minimax-m2").get_vocab()) is MINIMAX_M2
    assert get_profile("minimax-m3") is MINIMAX_M3


@pytest.mark.parametrize(
    ("reasoning", "variables"),
    [
        (None, {}),
        ({"effort": "none"}, {"thinking_mode": "disabled"}),
        ({"enabled": False}, {"thinking_mode": "disabled"}),
        ({"max_tokens": 0}, {"thinking_mode": "disabled"}),
        ({"effort": "low"}, {"thinking_mode": "adaptive"}),
        ({"effort": "high"}, {"thinking_mode": "adaptive"}),
        ({"enabled": True}, {"thinking_mode": "adaptive"}),
    ],
)
def test_the_thinking_switch_is_a_string_variable(reasoning, variables):
    assert MINIMAX_M3.template_variables(reasoning) == variables


def test_tool_call_markup_and_its_readings():
    parsed = [("f", "a", None), ("g", "b", None)]
    args = [
        '{"q": "x < y", "n": 3, "r": 2.5, "b": false, "z": null, "l": [{"k": "v"}, null]}',
        "{}",
    ]
    markup, notes = write_tool_calls(parsed, args, "", False)
    assert notes == ()
    assert markup == (
        f'{NS}<tool_call>\n{NS}<invoke name="f">{NS}<q>x < y{NS}</q>{NS}<n>3{NS}</n>{NS}<r>2.5'
        f"{NS}</r>{NS}<b>false{NS}</b>{NS}<l>{NS}<item>{NS}<k>v{NS}</k>{NS}</item>{NS}<item>"
        f'{NS}</item>{NS}</l>{NS}</invoke>\n{NS}<invoke name="g">{NS}</invoke>\n{NS}</tool_call>'
    )
    assert (
        xml_value({"a": {"b": [True]}})
        == f"{NS}<a>{NS}<b>{NS}<item>true{NS}</item>{NS}</b>{NS}</a>"
    )
    # Containers are elements, not JSON: every spelling of the arguments is one reading, unnoted.
    calls = [{"id": "a", "function": {"name": "f", "arguments": '{"l":[1,2],"m":{"k":"v"}}'}}]
    readings = MINIMAX_M3.tool_call_markups(calls, "text")
    assert [r.notes for r in readings] == [()]
    assert readings[0].text.startswith(f"{NS}<tool_call>\n")


# --- the golden matrix: text path and server ids -----------------------------------------------


GOLDEN_SHAPES = {**SHAPES}
GOLDEN_SHAPES["special_text_in_user_data"] = Shape(
    [{"role": "user", "content": f"Literal <mm:think> and [e~[ and {NS}<tool_call>"}],
    special_in_prompt="yes",
)


@pytest.mark.parametrize("shape_name", GOLDEN_SHAPES)
@pytest.mark.parametrize("mode", FAMILIES)
def test_golden_shapes_are_exact(tokenizer, mode, shape_name):
    family, shape = FAMILIES[mode], GOLDEN_SHAPES[shape_name]
    if shape.reasoning == "" and not family.thinks:
        pytest.skip("a non-thinking prompt has no reasoning to leave empty")
    profile = family_profile(tokenizer, family)
    stored, prompt_ids, truth = case(tokenizer, family, shape)

    text = reconstruct_sample(stored, tokenizer, profile)
    assert text.input_ids == prompt_ids + truth
    assert (text.verified, text.reason, text.id_source) == (True, "ok", "text"), text.detail
    assert text.truncated == bool(shape.truncate)
    if shape.special_in_prompt:
        assert "special_text_in_prompt=" in text.detail

    exact = replace(stored.completion, prompt_token_ids=prompt_ids, completion_token_ids=truth)
    server = reconstruct_sample(replace(stored, completion=exact), tokenizer, profile)
    assert server.input_ids == prompt_ids + truth
    assert (server.verified, server.reason, server.text_check) == (True, "ok", "agrees")


def test_generated_layouts():
    text, _, _ = generated_text(FAMILIES["adaptive"], SHAPES["tool_call"])
    assert text == "<mm:think>Paris is the capital; answer briefly.</mm:think>Let me check." + (
        MARKUP + "[e~["
    )
    text, _, _ = generated_text(FAMILIES["enabled"], SHAPES["single_turn"])
    assert (
        text
        == "Paris is the capital; answer briefly.</mm:think>The capital of France is Paris.[e~["
    )
    text, reasoning, _ = generated_text(FAMILIES["disabled"], SHAPES["single_turn"])
    assert (text, reasoning) == ("The capital of France is Paris.[e~[", None)


def sample_usage(prompt_ids, truth):
    return {"prompt_tokens": len(prompt_ids), "completion_tokens": len(truth)}


def deliver(
    tokenizer, reasoning, content, truth, variables=None, calls=None, finish="stop", usage=None
):
    """The sample of a text-only delivery after the recorded (adaptive unless told) prompt."""
    renderer = ChatRenderer(tokenizer, MINIMAX_M3)
    rendering = renderer.render(USER, TOOLS if calls else None, variables or {})
    prompt_ids = renderer.prompt_ids(rendering)
    usage = usage or sample_usage(prompt_ids, truth)
    completion = Completion("g", "P", "m", reasoning, content, calls, finish, finish, usage)
    stored = StoredCompletion(
        "k", "s", 0, USER, TOOLS if calls else None, completion, rendering=rendering
    )
    return reconstruct_sample(stored, tokenizer, MINIMAX_M3), prompt_ids


@pytest.mark.parametrize(
    ("reasoning", "content"),
    [
        (None, "Paris."),  # vLLM's and SGLang's parsers drop the bare closer
        ("", "Paris."),
        (None, "</mm:think>Paris."),  # a parser that leaves it in content
    ],
)
def test_an_adaptive_turn_without_thinking_opens_with_a_bare_closer(tokenizer, reasoning, content):
    truth = encode(tokenizer, "</mm:think>Paris.[e~[")
    sample, prompt_ids = deliver(tokenizer, reasoning, content, truth)
    assert sample.input_ids == prompt_ids + truth
    # Proven: the thinking-off prompt differs by its mode sentence, so no doubt remains.
    assert (sample.verified, sample.reason) == (True, "ok"), sample.detail


def test_an_adaptive_turn_with_an_empty_think_block_is_told_from_a_bare_closer(tokenizer):
    truth = encode(tokenizer, "<mm:think></mm:think>Paris.[e~[")
    sample, prompt_ids = deliver(tokenizer, "", "Paris.", truth)
    assert sample.input_ids == prompt_ids + truth and sample.verified, sample.detail


def test_raw_tool_call_text_in_content_is_exact(tokenizer):
    truth = encode(tokenizer, "<mm:think>R</mm:think>ok" + MARKUP + "[e~[")
    sample, prompt_ids = deliver(tokenizer, "R", "ok" + MARKUP, truth)
    assert sample.input_ids == prompt_ids + truth and sample.verified, sample.detail


def test_a_structured_call_is_rebuilt_after_the_content(tokenizer):
    truth = encode(tokenizer, "<mm:think>R</mm:think>" + MARKUP + "[e~[")
    sample, prompt_ids = deliver(tokenizer, "R", "", truth, calls=[CALL], finish="tool_calls")
    assert sample.input_ids == prompt_ids + truth
    assert (sample.verified, sample.reason) == (True, "ok"), sample.detail


def test_a_provider_that_renders_another_mode_is_caught_by_the_prompt_count(tokenizer):
    """MiniMax's API thinks only when asked: a request sent without reasoning settings is
    rendered adaptive here; a server that rendered disabled shows another prompt count."""
    truth = encode(tokenizer, "Paris.[e~[")
    disabled = render_prompt(tokenizer, USER, None, {"thinking_mode": "disabled"})
    sample, prompt_ids = deliver(tokenizer, None, "Paris.", truth)
    assert len(encode(tokenizer, disabled)) != len(prompt_ids)
    # The adaptive prompt's count, as this response reports it, proves it (no mode doubt).
    assert (sample.verified, sample.reason) == (True, "ok"), sample.detail
    usage = {**sample_usage(prompt_ids, truth), "prompt_tokens": len(encode(tokenizer, disabled))}
    other, _ = deliver(tokenizer, None, "Paris.", truth, usage=usage)
    assert (other.verified, other.reason) == (False, "prompt_count_mismatch")


# --- the simulated model and simulated runs ---------------------------------------------------


@pytest.mark.parametrize("mode", FAMILIES)
def test_the_simulated_model_writes_m3s_format(tokenizer, mode):
    from draftgen.simulator import wire
    from draftgen.simulator.model import Plan, generate, is_canonical, prompt_layout, token_table

    variables = dict(FAMILIES[mode].variables)
    table = token_table("fixture:minimax-m3", MINIMAX_M3)
    checked = bare = 0
    for seed in range(16):
        rng = random.Random(seed)
        tools = TOOLS if seed % 2 else None
        call = {"id": "c0", "name": "get_weather", "arguments": '{"city": "Paris"}'}
        plan = Plan(
            total_tokens=40,
            reasoning_share=0.4,
            tool_call=call if tools else None,
            tool_call_text=not tools and seed % 4 == 0,
            empty_reasoning=seed % 3 == 0,
        )
        prompt = render_prompt(tokenizer, USER, tools, variables)
        output = generate(table, prompt_layout(prompt, MINIMAX_M3), plan, rng, None)
        text = decode(tokenizer, output.ids)
        if mode == "adaptive" and plan.empty_reasoning:
            assert text.startswith("</mm:think>"), text  # the model chose not to think
            bare += 1
        if not is_canonical(table, output):
            continue
        checked += 1
        delivery = wire.deliver(output, set(), rng, tool_call=plan.tool_call)
        renderer = ChatRenderer(tokenizer, MINIMAX_M3)
        rendering = renderer.render(USER, tools, variables)
        prompt_ids = renderer.prompt_ids(rendering)
        stored = stored_delivery(output, delivery, prompt_ids, USER, tools, rendering)
        sample = reconstruct_sample(stored, tokenizer, MINIMAX_M3)
        assert sample.input_ids == prompt_ids + output.ids, (seed, output.sections)
        assert sample.reason == "ok", sample.detail
    assert checked >= 10
    assert bare >= 3 or mode != "adaptive"


def test_simulated_vllm_run_exports_ground_truth(tmp_path, monkeypatch):
    import golden

    monkeypatch.setitem(golden.FAMILIES, "minimax-m3", FAMILIES["adaptive"])
    truth, exported, checks = simulated_run(tmp_path, monkeypatch, "minimax-m3", "vllm", {})
    assert len(exported) == len(truth) == 16
    tool_calls = agree = 0
    for row in exported:
        record = truth[row["generation_id"]]
        assert row["input_ids"] == record["prompt_ids"] + record["completion_ids"]
        assert (row["verified"], row["verify_reason"], row["id_source"]) == (True, "ok", "ids")
        tool_calls += record["finish_reason"] == "tool_calls"
        if record["text_exact"]:
            assert checks[row["key"]] == "agrees", record
            agree += 1
    assert tool_calls >= 3 and agree >= 8


def test_simulated_openrouter_run_under_quirks_never_verifies_a_wrong_sample(tmp_path, monkeypatch):
    import golden

    monkeypatch.setitem(golden.FAMILIES, "minimax-m3", FAMILIES["adaptive"])
    quirks = {"leak_eot": 0.4, "no_split": 0.4, "tool_call_text": 0.3, "empty_reasoning": 0.4}
    truth, exported, _ = simulated_run(tmp_path, monkeypatch, "minimax-m3", "openrouter", quirks)
    assert len(exported) == 16
    verified = 0
    for row in exported:
        record = truth[row["generation_id"]]
        assert row["id_source"] == "text"
        if row["verified"]:
            verified += 1
            assert row["input_ids"] == record["prompt_ids"] + record["completion_ids"], record
        else:
            assert not record["text_exact"], (row["verify_reason"], record)
    assert verified >= 12


@pytest.mark.parametrize(("effort", "mode"), [("none", "disabled"), ("high", "adaptive")])
def test_simulated_openrouter_run_sets_thinking_mode_from_the_effort(
    tmp_path, monkeypatch, effort, mode
):
    config = {"seed": 7, "quirks": {"empty_reasoning": 0.4}}
    truth, exported = run_rows(
        tmp_path, monkeypatch, "minimax-m3", plain_rows(8), config, reasoning_effort=effort
    )
    tokenizer = load_tokenizer("fixture:minimax-m3")
    assert len(exported) == 8
    for row in exported:
        record = truth[row["generation_id"]]
        prompt = decode(tokenizer, record["prompt_ids"])
        assert f"Current thinking mode: {mode}." in prompt
        assert prompt.endswith("]~b]ai\n</mm:think>" if mode == "disabled" else "]~b]ai\n")
        if row["verified"]:
            assert row["input_ids"] == record["prompt_ids"] + record["completion_ids"]
    assert sum(row["verified"] for row in exported) >= 6


def test_simulated_run_with_logprobs(tmp_path, monkeypatch):
    config = {"quirks": {"drift": 0.4, "empty_reasoning": 0.3}}
    truth, exported = run_rows(
        tmp_path, monkeypatch, "minimax-m3", plain_rows(12), config, logprobs=True
    )
    by_logprobs = 0
    for row in exported:
        record = truth[row["generation_id"]]
        if row["verified"]:
            assert row["input_ids"] == record["prompt_ids"] + record["completion_ids"], record
            by_logprobs += row["id_source"] == "logprobs"
    assert by_logprobs >= 4

"""GLM-5.x (fixtures ``glm-5.2`` and ``glm-5.3``, profile ``glm-5``): the prompts their published
templates render, the effort line, history reasoning kept, the stop token the model generates
(``<|user|>`` after an answer, ``<|observation|>`` after tool calls) rebuilt into every sample
from the finish reason or taken from the server's ids, and simulated runs.

Expected prompt texts are what zai-org's GLM-5.3 chat_template.jinja (GLM-5.3-Flash revision
a5b45eb4, sha256 0c4099f3382d…) renders for these inputs; GLM-5.2's are from its published effort
line and thinking switch and its measured history rule (reasoning before the last user turn
dropped unless clear_thinking is false).
"""

from __future__ import annotations

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
)

from draftgen.profiles import GLM, detect_profile, get_profile
from draftgen.profiles.glm5 import GLM5
from draftgen.reconstruct.text import reconstruct_sample
from draftgen.records import Completion, StoredCompletion
from draftgen.tokens.rendering import ChatRenderer, render_prompt, resolve_profile
from draftgen.tokens.tokenizer import decode, encode, load_tokenizer

USER_ID, OBSERVATION_ID, ENDOFTEXT_ID = 154827, 154829, 154820
MARKUP = "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>"
FAMILIES = {
    "glm-5.3": Family(
        "glm-5", "<|user|>", "", "</think>", markup=MARKUP, tool_eot="<|observation|>"
    ),
    "glm-5.2": Family(
        "glm-5", "<|user|>", "", "</think>", markup=MARKUP, tool_eot="<|observation|>"
    ),
    # GLM-5.2 with thinking off: the prompt ends "<think></think>" and has no effort line.
    "glm-5.2-off": Family(
        "glm-5",
        "<|user|>",
        "",
        "",
        thinks=False,
        markup=MARKUP,
        tool_eot="<|observation|>",
        variables=(("enable_thinking", False),),
    ),
}
TOOL_PREAMBLE = (
    "<|system|>\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
    '{"name": "get_weather", "description": "Weather for a city", "parameters": {"type": '
    '"object", "properties": {"city": {"type": "string"}}}}\n</tools>\n\nFor each function call, '
    "output the function name and arguments within the following XML format:\n<tool_call>"
    "{function-name}<arg_key>{arg-key-1}</arg_key><arg_value>{arg-value-1}</arg_value>"
    "<arg_key>{arg-key-2}</arg_key><arg_value>{arg-value-2}</arg_value>...</tool_call>"
)
HISTORY = SHAPES["multi_turn"].messages


@pytest.fixture(scope="module")
def tokenizers():
    return {name: load_tokenizer(f"fixture:{name}") for name in ("glm-5.2", "glm-5.3", "glm-4.6")}


def fixture_of(name: str) -> str:
    return name.removesuffix("-off")


# --- the published templates' text ----------------------------------------------------------


@pytest.mark.parametrize(
    ("variables", "line"),
    [
        ({}, "Max"),
        ({"reasoning_effort": "low"}, "Low"),
        ({"reasoning_effort": "high"}, "High"),
        ({"reasoning_effort": "medium"}, "Max"),
        ({"reasoning_effort": "xhigh"}, "Max"),
        ({"reasoning_effort": "max"}, "Max"),
        # 5.3 has no thinking switch: the prompt still opens the think block.
        ({"enable_thinking": False}, "Max"),
    ],
)
def test_glm53_always_opens_with_the_effort_line(tokenizers, variables, line):
    text = render_prompt(tokenizers["glm-5.3"], USER, None, variables)
    assert text == (
        f"[gMASK]<sop><|system|>Reasoning Effort: {line}<|user|>What is the capital of France?"
        "<|assistant|><think>"
    )


@pytest.mark.parametrize(
    ("variables", "expected"),
    [
        ({}, "<|system|>Reasoning Effort: Max<|user|>Q<|assistant|><think>"),
        (
            {"reasoning_effort": "high"},
            "<|system|>Reasoning Effort: High<|user|>Q<|assistant|><think>",
        ),
        # Only "high" is a rung below Max in 5.2's template: "low" renders Max.
        (
            {"reasoning_effort": "low"},
            "<|system|>Reasoning Effort: Max<|user|>Q<|assistant|><think>",
        ),
        ({"enable_thinking": True}, "<|system|>Reasoning Effort: Max<|user|>Q<|assistant|><think>"),
        ({"enable_thinking": False}, "<|user|>Q<|assistant|><think></think>"),
        (
            {"enable_thinking": False, "reasoning_effort": "high"},
            "<|user|>Q<|assistant|><think></think>",
        ),
    ],
)
def test_glm52_effort_line_and_thinking_switch(tokenizers, variables, expected):
    text = render_prompt(tokenizers["glm-5.2"], [{"role": "user", "content": "Q"}], None, variables)
    assert text == "[gMASK]<sop>" + expected


def test_history_reasoning_is_kept_on_every_turn(tokenizers):
    text = render_prompt(tokenizers["glm-5.3"], HISTORY, None)
    assert text == (
        "[gMASK]<sop><|system|>Reasoning Effort: Max<|system|>Be brief.<|user|>What is the capital "
        "of France?<|assistant|><think>old</think>Paris.<|user|>And of Italy?<|assistant|><think>"
    )
    # clear_thinking drops it before the last user turn, as the template's option says.
    cleared = render_prompt(tokenizers["glm-5.3"], HISTORY, None, {"clear_thinking": True})
    assert "<|assistant|><think></think>Paris.<|user|>" in cleared


GLM52_HISTORY_PREFIX = (
    "[gMASK]<sop><|system|>Reasoning Effort: Max<|system|>Be brief.<|user|>What is the capital "
    "of France?<|assistant|>"
)


@pytest.mark.parametrize(
    "variables, turn",
    [
        # GLM-5.2's default drops reasoning before the last user turn (measured on a vLLM server:
        # a user reply collapses the earlier turns to "<think></think>"); 5.3 keeps it.
        ({}, "<think></think>Paris."),
        ({"clear_thinking": True}, "<think></think>Paris."),
        ({"clear_thinking": False}, "<think>old</think>Paris."),
    ],
)
def test_glm52_drops_history_reasoning_unless_clear_thinking_is_false(tokenizers, variables, turn):
    text = render_prompt(tokenizers["glm-5.2"], HISTORY, None, variables)
    assert text == GLM52_HISTORY_PREFIX + turn + "<|user|>And of Italy?<|assistant|><think>"


def test_glm52_keeps_reasoning_after_the_last_user_turn(tokenizers):
    chain = [
        {"role": "user", "content": "Q"},
        {"role": "assistant", "content": "", "reasoning_content": "plan", "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": CALL["id"], "content": "21C"},
    ]
    text = render_prompt(tokenizers["glm-5.2"], chain, None)
    assert "<|user|>Q<|assistant|><think>plan</think><tool_call>" in text


def test_tools_and_tool_call_history_render_on_one_line(tokenizers):
    messages = [
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": "Let me check.",
            "reasoning_content": "use the tool",
            "tool_calls": [
                {
                    "id": "a",
                    "type": "function",
                    "function": {
                        "name": "get_weather",
                        "arguments": '{"city": "Paris", "days": [1, 2]}',
                    },
                },
                {
                    "id": "b",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'},
                },
            ],
        },
        # Results come back out of order: the template puts them in the calls' order by id.
        {"role": "tool", "tool_call_id": "b", "content": "rain"},
        {"role": "tool", "tool_call_id": "a", "content": "sun"},
    ]
    text = render_prompt(tokenizers["glm-5.3"], messages, TOOLS)
    assert text == (
        "[gMASK]<sop><|system|>Reasoning Effort: Max"
        + TOOL_PREAMBLE
        + "<|user|>Weather?<|assistant|><think>use the tool</think>Let me check.<tool_call>"
        "get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value><arg_key>days</arg_key>"
        "<arg_value>[1, 2]</arg_value></tool_call><tool_call>get_weather<arg_key>city</arg_key>"
        "<arg_value>Rome</arg_value></tool_call><|observation|><tool_response>sun"
        "</tool_response><tool_response>rain</tool_response><|assistant|><think>"
    )


def test_a_tool_call_turn_without_content_renders_no_text(tokenizers):
    # Content that is none is empty (the earlier revision of the file printed "None").
    call = {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    messages = [*USER, {"role": "assistant", "content": None, "tool_calls": [call]}]
    text = render_prompt(tokenizers["glm-5.3"], messages, None)
    assert text.endswith("<|assistant|><think></think><tool_call>f</tool_call><|assistant|><think>")


def test_single_turn_with_tools_declares_them_after_the_effort_line(tokenizers):
    text = render_prompt(tokenizers["glm-5.2"], [{"role": "user", "content": "Hi"}], TOOLS)
    assert text == (
        "[gMASK]<sop><|system|>Reasoning Effort: Max"
        + TOOL_PREAMBLE
        + "<|user|>Hi<|assistant|><think>"
    )


# --- the profile: detection, names, template variables -----------------------------------------


@pytest.mark.parametrize("fixture", ["glm-5.2", "glm-5.3"])
def test_glm5_is_told_from_glm45_by_its_ids(tokenizers, fixture):
    vocab = tokenizers[fixture].get_vocab()
    assert detect_profile(vocab) is GLM5
    assert (vocab["<|endoftext|>"], vocab["<|user|>"], vocab["<|observation|>"]) == (
        ENDOFTEXT_ID,
        USER_ID,
        OBSERVATION_ID,
    )
    assert detect_profile(tokenizers["glm-4.6"].get_vocab()) is GLM
    # Without ids the names alone are GLM-4.5's.
    assert detect_profile(set(vocab)) is GLM
    assert all(get_profile(name) is GLM5 for name in ("glm-5", "glm-5.1", "glm-5.2", "glm-5.3"))


@pytest.mark.parametrize(
    ("reasoning", "variables"),
    [
        (None, {}),
        ({"effort": "none"}, {"enable_thinking": False}),
        ({"enabled": False}, {"enable_thinking": False}),
        ({"effort": "minimal"}, {"enable_thinking": True, "reasoning_effort": "low"}),
        ({"effort": "low"}, {"enable_thinking": True, "reasoning_effort": "low"}),
        ({"effort": "medium"}, {"enable_thinking": True, "reasoning_effort": "high"}),
        ({"effort": "high"}, {"enable_thinking": True, "reasoning_effort": "high"}),
        ({"effort": "xhigh"}, {"enable_thinking": True, "reasoning_effort": "max"}),
        ({"effort": "max"}, {"enable_thinking": True, "reasoning_effort": "max"}),
        ({"max_tokens": 2048}, {"enable_thinking": True}),
    ],
)
def test_reasoning_settings_become_the_templates_variables(reasoning, variables):
    assert GLM5.template_variables(reasoning) == variables


# --- the golden matrix: text path and server ids -----------------------------------------------


@pytest.mark.parametrize("shape_name", SHAPES)
@pytest.mark.parametrize("name", FAMILIES)
def test_golden_shapes_are_exact_with_the_stop_token(tokenizers, name, shape_name):
    tokenizer, family, shape = tokenizers[fixture_of(name)], FAMILIES[name], SHAPES[shape_name]
    if shape.reasoning == "" and not family.thinks:
        pytest.skip("a non-thinking prompt has no reasoning to leave empty")
    profile = family_profile(tokenizer, family)
    stored, prompt_ids, truth = case(tokenizer, family, shape)
    if not shape.truncate:
        # The generated stop token is the sample's last id: the next role token.
        assert truth[-1] == (OBSERVATION_ID if shape.tool_call else USER_ID)

    text = reconstruct_sample(stored, tokenizer, profile)
    assert text.input_ids == prompt_ids + truth
    assert (text.verified, text.reason, text.id_source) == (True, "ok", "text"), text.detail
    assert text.truncated == bool(shape.truncate)

    exact = replace(stored.completion, prompt_token_ids=prompt_ids, completion_token_ids=truth)
    server = reconstruct_sample(replace(stored, completion=exact), tokenizer, profile)
    assert server.input_ids == prompt_ids + truth
    assert (server.verified, server.reason, server.text_check) == (True, "ok", "agrees")


def test_generated_text_layout(tokenizers):
    """What the model writes after "<|assistant|><think>": no newline anywhere."""
    family = FAMILIES["glm-5.3"]
    text, reasoning, content = generated_text(family, SHAPES["tool_call"])
    assert text == "Paris is the capital; answer briefly.</think>Let me check." + MARKUP + (
        "<|observation|>"
    )
    assert (reasoning, content) == ("Paris is the capital; answer briefly.", "Let me check.")


def stored_for(
    tokenizer, messages, tools, reasoning, content, truth, finish, calls=None, variables=None
):
    """A stored completion as a text-only provider delivers it, its rendering recorded."""
    renderer = ChatRenderer(tokenizer, GLM5)
    rendering = renderer.render(messages, tools, variables or {})
    prompt_ids = renderer.prompt_ids(rendering)
    usage = {"prompt_tokens": len(prompt_ids), "completion_tokens": len(truth)}
    completion = Completion("g", "P", "m", reasoning, content, calls, finish, finish, usage)
    stored = StoredCompletion("k", "s", 0, messages, tools, completion, rendering=rendering)
    return stored, prompt_ids


def test_the_finish_reason_picks_the_stop_token(tokenizers):
    tokenizer = tokenizers["glm-5.3"]
    answer = encode(tokenizer, "R</think>A<|user|>")
    stored, prompt_ids = stored_for(tokenizer, USER, None, "R", "A", answer, "stop")
    sample = reconstruct_sample(stored, tokenizer, GLM5)
    assert sample.input_ids[-1] == USER_ID and sample.verified, sample.detail

    call = encode(tokenizer, "R</think>" + MARKUP + "<|observation|>")
    stored, prompt_ids = stored_for(tokenizer, USER, TOOLS, "R", "", call, "tool_calls", [CALL])
    sample = reconstruct_sample(stored, tokenizer, GLM5)
    assert sample.input_ids == prompt_ids + call
    assert sample.input_ids[-1] == OBSERVATION_ID and sample.verified, sample.detail


@pytest.mark.parametrize("leak", ["", "<|observation|>"])
def test_raw_tool_call_text_ends_with_the_observation_token(tokenizers, leak):
    # No tools were sent: the model wrote its call as text, and stopped as after any call.
    tokenizer = tokenizers["glm-5.3"]
    truth = encode(tokenizer, "R</think>Checking." + MARKUP + "<|observation|>")
    content = "Checking." + MARKUP + leak
    stored, prompt_ids = stored_for(tokenizer, USER, None, "R", content, truth, "stop")
    sample = reconstruct_sample(stored, tokenizer, GLM5)
    assert sample.input_ids == prompt_ids + truth
    assert (sample.verified, sample.reason) == (True, "ok"), sample.detail
    assert ("leaked_end_of_turn" in sample.detail) == bool(leak)


def test_a_server_that_stopped_on_endoftext_keeps_its_own_stop_token(tokenizers):
    """The text path assumes <|user|>; the server's ids show <|endoftext|> and are the sample."""
    tokenizer = tokenizers["glm-5.3"]
    truth = encode(tokenizer, "R</think>A<|endoftext|>")
    stored, prompt_ids = stored_for(tokenizer, USER, None, "R", "A", truth, "stop")
    text = reconstruct_sample(stored, tokenizer, GLM5)
    # Same count, other last id: the text path cannot see it.
    assert text.input_ids[:-1] == prompt_ids + truth[:-1] and text.input_ids[-1] == USER_ID
    exact = replace(stored.completion, prompt_token_ids=prompt_ids, completion_token_ids=truth)
    server = reconstruct_sample(replace(stored, completion=exact), tokenizer, GLM5)
    assert (server.input_ids[-1], server.verified, server.text_check) == (
        ENDOFTEXT_ID,
        True,
        "ids_differ",
    )


def test_kept_history_reasoning_is_in_the_prompt_ids(tokenizers):
    tokenizer = tokenizers["glm-5.3"]
    stored, prompt_ids, truth = case(tokenizer, FAMILIES["glm-5.3"], SHAPES["multi_turn"])
    kept = encode(tokenizer, "<|assistant|><think>old</think>Paris.<|user|>")
    assert any(prompt_ids[i : i + len(kept)] == kept for i in range(len(prompt_ids)))
    sample = reconstruct_sample(stored, tokenizer, GLM5)
    assert sample.input_ids == prompt_ids + truth and sample.verified


def test_thinking_off_prompt_with_reasoning_returned_is_flagged(tokenizers):
    tokenizer = tokenizers["glm-5.2"]
    family = FAMILIES["glm-5.2-off"]
    stored, prompt_ids, truth = case(tokenizer, family, SHAPES["single_turn"])
    completion = replace(stored.completion, reasoning="unexpected")
    sample = reconstruct_sample(replace(stored, completion=completion), tokenizer, GLM5)
    assert (sample.verified, sample.reason) == (False, "reasoning_in_non_thinking_prompt")


# --- the simulated model and simulated runs ---------------------------------------------------


@pytest.mark.parametrize("name", ["glm-5.3", "glm-5.2", "glm-5.2-off"])
def test_the_simulated_model_writes_glm5s_format(tokenizers, name):
    import random

    from draftgen.simulator import wire
    from draftgen.simulator.model import Plan, generate, is_canonical, prompt_layout, token_table

    tokenizer, family = tokenizers[fixture_of(name)], FAMILIES[name]
    variables = dict(family.variables)
    table = token_table(f"fixture:{fixture_of(name)}", GLM5)
    checked = raw = 0
    for seed in range(16):
        rng = random.Random(seed)
        tools = TOOLS if seed % 2 else None
        call = {"id": "c0", "name": "get_weather", "arguments": '{"city": "Paris"}'}
        plan = Plan(
            total_tokens=40,
            reasoning_share=0.4,
            tool_call=call if tools else None,
            tool_call_text=not tools and seed % 4 == 0,
            empty_reasoning=seed % 5 == 0,
        )
        prompt = render_prompt(tokenizer, USER, tools, variables)
        output = generate(table, prompt_layout(prompt, GLM5), plan, rng, None)
        stop = output.ids[-1]
        assert stop == (OBSERVATION_ID if tools or plan.tool_call_text else USER_ID), seed
        raw += plan.tool_call_text
        if not is_canonical(table, output):
            continue
        checked += 1
        delivery = wire.deliver(output, set(), rng, tool_call=plan.tool_call)
        stored, prompt_ids = stored_for(
            tokenizer,
            USER,
            tools,
            delivery.reasoning_text,
            delivery.content_text,
            output.ids,
            output.finish_reason,
            delivery.tool_calls,
            variables,
        )
        sample = reconstruct_sample(stored, tokenizer, GLM5)
        assert sample.input_ids == prompt_ids + output.ids, (seed, output.sections)
        assert sample.reason == "ok", sample.detail
    assert checked >= 10 and raw >= 2


@pytest.mark.parametrize("fixture", ["glm-5.2", "glm-5.3"])
def test_simulated_vllm_run_exports_the_generated_stop_tokens(tmp_path, monkeypatch, fixture):
    import golden

    monkeypatch.setitem(golden.FAMILIES, fixture, FAMILIES[fixture])
    truth, exported, checks = simulated_run(tmp_path, monkeypatch, fixture, "vllm", {})
    assert len(exported) == len(truth) == 16
    tool_calls = agree = 0
    for row in exported:
        record = truth[row["generation_id"]]
        assert row["input_ids"] == record["prompt_ids"] + record["completion_ids"]
        assert (row["verified"], row["verify_reason"], row["id_source"]) == (True, "ok", "ids")
        tool_turn = record["finish_reason"] == "tool_calls"
        tool_calls += tool_turn
        assert record["completion_ids"][-1] == (OBSERVATION_ID if tool_turn else USER_ID)
        if record["text_exact"]:
            assert checks[row["key"]] == "agrees", record
            agree += 1
    assert tool_calls >= 3 and agree >= 8


@pytest.mark.parametrize("fixture", ["glm-5.2", "glm-5.3"])
def test_simulated_openrouter_run_under_quirks_never_verifies_a_wrong_sample(
    tmp_path, monkeypatch, fixture
):
    import golden

    monkeypatch.setitem(golden.FAMILIES, fixture, FAMILIES[fixture])
    quirks = {"leak_eot": 0.4, "no_split": 0.4, "tool_call_text": 0.3, "empty_reasoning": 0.2}
    truth, exported, _ = simulated_run(tmp_path, monkeypatch, fixture, "openrouter", quirks)
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


def test_simulated_run_with_thinking_off_through_openrouter(tmp_path, monkeypatch):
    """--reasoning-effort none: GLM-5.2's provider renders enable_thinking=false (no effort line,
    "<think></think>"), the model answers at once, and every sample is proven."""
    truth, exported = run_rows(
        tmp_path, monkeypatch, "glm-5.2", plain_rows(8), reasoning_effort="none"
    )
    tokenizer = load_tokenizer("fixture:glm-5.2")
    assert len(exported) == 8
    for row in exported:
        record = truth[row["generation_id"]]
        prompt = decode(tokenizer, record["prompt_ids"])
        assert "Reasoning Effort" not in prompt and prompt.endswith("<think></think>")
        assert record["completion_ids"][-1] == USER_ID
        if row["verified"]:
            assert row["input_ids"] == record["prompt_ids"] + record["completion_ids"]
    assert sum(row["verified"] for row in exported) >= 6


def test_simulated_run_with_an_effort_renders_its_line(tmp_path, monkeypatch):
    truth, exported = run_rows(
        tmp_path, monkeypatch, "glm-5.3", plain_rows(6), reasoning_effort="low"
    )
    tokenizer = load_tokenizer("fixture:glm-5.3")
    for row in exported:
        record = truth[row["generation_id"]]
        assert decode(tokenizer, record["prompt_ids"]).startswith(
            "[gMASK]<sop><|system|>Reasoning Effort: Low<|user|>"
        )
        assert (
            row["verified"] and row["input_ids"] == record["prompt_ids"] + record["completion_ids"]
        )


@pytest.mark.parametrize("fixture", ["glm-5.2", "glm-5.3"])
def test_simulated_run_with_logprobs_rebuilds_the_stop_token_around_the_content(
    tmp_path, monkeypatch, fixture
):
    """Logprob token bytes give the content's ids, even drifted ones; the reasoning, </think> and
    the stop token around them are rebuilt from text, and the count proves the whole."""
    truth, exported = run_rows(
        tmp_path, monkeypatch, fixture, plain_rows(12), {"quirks": {"drift": 0.4}}, logprobs=True
    )
    sources = {row["id_source"] for row in exported}
    assert "logprobs" in sources
    by_logprobs = 0
    for row in exported:
        record = truth[row["generation_id"]]
        if row["verified"]:
            assert row["input_ids"] == record["prompt_ids"] + record["completion_ids"], record
            assert row["input_ids"][-1] == USER_ID
            by_logprobs += row["id_source"] == "logprobs"
    assert by_logprobs >= 4


def test_resolve_profile_of_the_fixture_is_glm5(tokenizers):
    assert resolve_profile(tokenizers["glm-5.3"], None) is GLM5
    assert resolve_profile(tokenizers["glm-5.3"], "glm-5.3") is GLM5


def test_shape_helpers_cover_thinking_off():
    # The off family reuses the golden shapes with the prompt closed: no reasoning delivered.
    text, reasoning, content = generated_text(FAMILIES["glm-5.2-off"], Shape(USER, content="A."))
    assert (text, reasoning, content) == ("A.<|user|>", None, "A.")

"""DeepSeek V4.1: the fixture's encoder renders what the released encoder renders (the system token,
the numeric effort line, mid-conversation system turns, the renamed DSML tags), the server's call of
it is reproduced, the fixture gives V4.1's ids, and reconstruction is exact on the text path, with
server ids, and through simulated runs.

Expectations come from what the published sources state: SGLang's V4.1 encoder tests
(``test_encoding_dsv41`` cases: tool calls with reasoning kept and results sorted by call order; the
release effort budgets low 50, high 75, max 100, default 75), vLLM's V4.1 tokenizer wrapper
(``vllm/tokenizers/deepseek_v41.py``: thinking by default, ``none`` turns it off, request tools on
the first system message or a new empty one) and the encoder copies both servers carry.
"""

from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest
from golden import SHAPES, TOOLS, USER, Family, case, run_rows, text_checks

from draftgen.profiles import UnknownProfileError, detect_profile, get_profile
from draftgen.profiles.deepseek_v4 import DEEPSEEK_V4, DEEPSEEK_V4_1
from draftgen.reconstruct.text import reconstruct_sample
from draftgen.records import Completion, StoredCompletion
from draftgen.tokens.rendering import ChatRenderer, resolve_profile
from draftgen.tokens.tokenizer import decode, encode, load_tokenizer
from draftgen_testing.fixture_code import encoding_dsv41
from draftgen_testing.fixture_code.encoding_dsv41 import (
    encode_messages,
    parse_message_from_completion_text,
)
from draftgen_testing.fixtures import build_fixture

BOS = "<｜begin▁of▁sentence｜>"
EOS = "<｜end▁of▁sentence｜>"
SYSTEM = "<｜System｜>"


def effort_line(budget: int) -> str:
    return (
        f"Reasoning Effort: {budget} (range 1-100, the higher the value, the more thorough the "
        "reasoning)\n\n"
    )


HIGH = SYSTEM + effort_line(75)

TOOLS_HEAD = (
    "## Tools\n\n"
    "You have access to a set of tools to help answer the user's question. You can invoke tools "
    'by writing a "<｜DSML｜ calls>" block like the following:\n\n'
    "<｜DSML｜ calls>\n"
    '<｜DSML｜ invoke name="$TOOL_NAME">\n'
    '<｜DSML｜ parameter name="$PARAMETER_NAME" string="true|false">$PARAMETER_VALUE'
    "</｜DSML｜ parameter>\n"
    "...\n"
    "</｜DSML｜ invoke>\n"
    '<｜DSML｜ invoke name="$TOOL_NAME2">\n'
    "...\n"
    "</｜DSML｜ invoke>\n"
    "</｜DSML｜ calls>\n\n"
    'String parameters should be specified as is and set `string="true"`. For all other types '
    '(numbers, booleans, arrays, objects), pass the value in JSON format and set `string="false"`.'
    "\n\n"
    "If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning "
    "inside <think>...</think> BEFORE any tool calls or final response.\n\n"
    "Otherwise, output directly after </think> with tool calls or final response.\n\n"
    "### Available Tool Schemas\n\n"
)
TOOLS_TAIL = (
    "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke "
    "tool calls.\n"
)
WEATHER_SCHEMA = (
    '{"name": "get_weather", "description": "Weather for a city", "parameters": {"type": '
    '"object", "properties": {"city": {"type": "string"}}}}'
)


def tools_block(*schemas: str) -> str:
    return TOOLS_HEAD + "\n".join(schemas) + TOOLS_TAIL


def dsml(*invokes: str) -> str:
    return "\n\n<｜DSML｜ calls>\n" + "\n".join(invokes) + "\n</｜DSML｜ calls>"


def invoke(name: str, *parameters: tuple[str, str, bool]) -> str:
    lines = "\n".join(
        f'<｜DSML｜ parameter name="{key}" string="{"true" if text else "false"}">{value}'
        "</｜DSML｜ parameter>"
        for key, value, text in parameters
    )
    return f'<｜DSML｜ invoke name="{name}">\n{lines}\n</｜DSML｜ invoke>'


def call(name, arguments, call_id=None):
    made = {"type": "function", "function": {"name": name, "arguments": arguments}}
    return {"id": call_id, **made} if call_id else made


PARIS_CALL = dsml(invoke("get_weather", ("city", "Paris", True)))
HI = [{"role": "user", "content": "Hi"}]


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("fixture:deepseek-v4.1")


@pytest.fixture(scope="module")
def renderer(tokenizer):
    return ChatRenderer(tokenizer, resolve_profile(tokenizer))


# -- the encoder: what the released one renders ----------------------------------------------


LOOKUP_TOOL = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Look up a value",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
        },
    },
}


def test_tool_history_keeps_reasoning_and_sorts_results_by_call_order():
    # SGLang's V4.1 encoder test: arguments as objects, results arriving in the other order.
    messages = [
        {"role": "system", "content": "system", "tools": [LOOKUP_TOOL]},
        {"role": "user", "content": "question"},
        {
            "role": "assistant",
            "reasoning_content": "reason",
            "content": "summary",
            "tool_calls": [
                call("lookup", {"query": "first"}, "a"),
                call("lookup", {"query": "second"}, "b"),
            ],
        },
        {"role": "tool", "tool_call_id": "b", "content": "second result"},
        {"role": "tool", "tool_call_id": "a", "content": "first result"},
    ]
    schema = (
        '{"name": "lookup", "description": "Look up a value", "parameters": {"type": "object", '
        '"properties": {"query": {"type": "string"}, "limit": {"type": "integer"}}}}'
    )
    assert encode_messages(messages, "thinking") == (
        BOS + HIGH + "system\n\n" + tools_block(schema)
        + "<｜User｜>question<｜Assistant｜><think>reason</think>summary"
        + dsml(
            invoke("lookup", ("query", "first", True)),
            invoke("lookup", ("query", "second", True)),
        )
        + EOS
        + "<｜User｜><tool_result>first result</tool_result>\n\n"
        "<tool_result>second result</tool_result><｜Assistant｜><think>"
    )  # fmt: skip


@pytest.mark.parametrize(
    ("effort", "budget"),
    [(None, 75), ("low", 50), ("high", 75), ("max", 100), (1, 1), (37, 37), (100, 100)],
)
def test_the_effort_line_is_the_released_budget(effort, budget):
    text = encode_messages(HI, "thinking", reasoning_effort=effort)
    assert text == BOS + SYSTEM + effort_line(budget) + "<｜User｜>Hi<｜Assistant｜><think>"
    # Chat mode writes no line and no system token (the effort is still checked).
    assert encode_messages(HI, "chat", reasoning_effort=effort) == (
        BOS + "<｜User｜>Hi<｜Assistant｜></think>"
    )


@pytest.mark.parametrize("effort", ["xhigh", "medium", "minimal", 0, 101, True, 75.0])
def test_the_released_encoder_refuses_other_efforts_in_either_mode(effort):
    for mode in ("thinking", "chat"):
        with pytest.raises(ValueError, match="reasoning_effort"):
            encode_messages(HI, mode, reasoning_effort=effort)


SYS = {"role": "system", "content": "Be brief."}


@pytest.mark.parametrize(
    ("messages", "arguments", "expected"),
    [
        ([SYS, *HI], {"thinking_mode": "thinking"},
         BOS + HIGH + "Be brief.<｜User｜>Hi<｜Assistant｜><think>"),
        ([SYS, *HI], {"thinking_mode": "chat"},
         BOS + SYSTEM + "Be brief.<｜User｜>Hi<｜Assistant｜></think>"),
        # A later system message is a system turn that the assistant header follows.
        ([*HI, {"role": "assistant", "content": "Hello."}, SYS], {"thinking_mode": "chat"},
         BOS + "<｜User｜>Hi<｜Assistant｜></think>Hello." + EOS
         + SYSTEM + "Be brief.<｜Assistant｜></think>"),
        # ... and counts as the last user turn: reasoning before it is dropped.
        ([*HI, {"role": "assistant", "content": "Hello.", "reasoning_content": "R"}, SYS],
         {"thinking_mode": "thinking"},
         BOS + HIGH + "<｜User｜>Hi<｜Assistant｜></think>Hello." + EOS
         + SYSTEM + "Be brief.<｜Assistant｜><think>"),
        ([*HI, {"role": "assistant", "content": "Hello.", "reasoning_content": "R"}, SYS],
         {"thinking_mode": "thinking", "drop_thinking": False},
         BOS + HIGH + "<｜User｜>Hi<｜Assistant｜><think>R</think>Hello." + EOS
         + SYSTEM + "Be brief.<｜Assistant｜><think>"),
        # A system turn between two user turns has no header of its own.
        ([*HI, SYS, {"role": "user", "content": "Again"}], {"thinking_mode": "chat"},
         BOS + "<｜User｜>Hi" + SYSTEM + "Be brief.<｜User｜>Again<｜Assistant｜></think>"),
        # The first message hosts the system token whatever its role, in thinking mode.
        ([{"role": "latest_reminder", "content": "2026-09-30, Paris"}, *HI],
         {"thinking_mode": "thinking"},
         BOS + HIGH + "<｜latest_reminder｜>2026-09-30, Paris<｜User｜>Hi<｜Assistant｜><think>"),
        # Context holds index 0: the line and the token are not rendered again.
        (HI, {"thinking_mode": "thinking", "context": [SYS, {"role": "user", "content": "One"},
                                                        {"role": "assistant", "content": "A"}]},
         "<｜User｜>Hi<｜Assistant｜><think>"),
        ([*HI, {"role": "user", "content": "Two"}], {"thinking_mode": "chat"},
         BOS + "<｜User｜>Hi\n\nTwo<｜Assistant｜></think>"),
        ([*HI, {"role": "assistant", "content": "Hi", "wo_eos": True}],
         {"thinking_mode": "chat", "add_default_bos_token": False},
         "<｜User｜>Hi<｜Assistant｜></think>Hi"),
        ([SYS, {"role": "user", "content": "Weather?", "task": "action"}],
         {"thinking_mode": "thinking"},
         BOS + HIGH + "Be brief.<｜User｜>Weather?<｜Assistant｜><think><｜action｜>"),
    ],
)  # fmt: skip
def test_published_behaviours(messages, arguments, expected):
    assert encode_messages(messages, **arguments) == expected


def test_arguments_are_typed_per_value_from_text_or_object():
    arguments = '{"city": "Paris", "days": 3, "hourly": true, "fields": ["t", "wind"], "x": null}'
    history = [
        *HI,
        {"role": "assistant", "content": "", "tool_calls": [call("forecast", arguments)]},
        {"role": "tool", "content": "ok"},
    ]
    written = dsml(
        invoke(
            "forecast",
            ("city", "Paris", True),
            ("days", "3", False),
            ("hourly", "true", False),
            ("fields", '["t", "wind"]', False),
            ("x", "null", False),
        )
    )
    assert "</think>" + written + EOS + "<｜User｜><tool_result>ok" in encode_messages(
        history, "chat"
    )
    # An object is taken as it is (V4 nested it under "arguments"); text that is not JSON raises.
    parsed = [history[0], {**history[1], "tool_calls": [call("forecast", json.loads(arguments))]}]
    assert written in encode_messages([*parsed, history[2]], "chat")
    broken = [history[0], {**history[1], "tool_calls": [call("f", "not json")]}, history[2]]
    with pytest.raises(ValueError):
        encode_messages(broken, "chat")


# -- the server's call: thinking by default, efforts, tools placement -------------------------


@pytest.mark.parametrize(
    ("reasoning", "variables"),
    [
        ({"effort": "none"}, {"thinking": False}),
        ({"enabled": False}, {"thinking": False}),
        ({"effort": "minimal"}, {"thinking": True, "reasoning_effort": "low"}),
        ({"effort": "low"}, {"thinking": True, "reasoning_effort": "low"}),
        ({"effort": "medium"}, {"thinking": True, "reasoning_effort": "high"}),
        ({"effort": "high"}, {"thinking": True, "reasoning_effort": "high"}),
        ({"effort": "xhigh"}, {"thinking": True, "reasoning_effort": "high"}),
        ({"effort": "max"}, {"thinking": True, "reasoning_effort": "max"}),
        ({"max_tokens": 2000}, {"thinking": True}),
        (None, {}),
    ],
)
def test_openrouter_s_reasoning_maps_onto_thinking_and_the_released_efforts(reasoning, variables):
    assert DEEPSEEK_V4_1.template_variables(reasoning) == variables


THINKS = BOS + "<｜System｜>{}<｜User｜>Hi<｜Assistant｜><think>"
CLOSES = BOS + "<｜User｜>Hi<｜Assistant｜></think>"


@pytest.mark.parametrize(
    ("variables", "expected"),
    [
        ({}, THINKS.format(effort_line(75))),  # vLLM's V4.1 wrapper thinks by default
        ({"thinking": True}, THINKS.format(effort_line(75))),
        ({"thinking": False}, CLOSES),
        ({"enable_thinking": False}, CLOSES),
        ({"reasoning_effort": "none"}, CLOSES),
        ({"reasoning_effort": "low"}, THINKS.format(effort_line(50))),
        ({"reasoning_effort": "max"}, THINKS.format(effort_line(100))),
        # Raw values through chat_template_kwargs: names mapped as the profile maps them, ints
        # as they are.
        ({"reasoning_effort": "xhigh"}, THINKS.format(effort_line(75))),
        ({"reasoning_effort": "minimal"}, THINKS.format(effort_line(50))),
        ({"reasoning_effort": 30}, THINKS.format(effort_line(30))),
        ({"thinking": False, "reasoning_effort": "max"}, CLOSES),
    ],
)
def test_the_thinking_switch_and_the_effort_line(renderer, variables, expected):
    assert renderer.render(HI, None, variables).text == expected


def test_an_effort_the_encoder_refuses_is_a_render_error(renderer):
    rendering = renderer.render(HI, None, {"reasoning_effort": 101})
    assert "reasoning_effort must be an int within [1, 100]" in rendering.error


def test_the_prompt_ids_are_v4_1_s(tokenizer, renderer):
    thinking = renderer.prompt_ids(renderer.render(HI, None, {}))
    line = encode(tokenizer, effort_line(75))
    assert thinking == [0, 128799, *line, 128803, 23166, 128804, 128821]
    assert len(line) == 25
    chat = renderer.prompt_ids(renderer.render(HI, None, {"thinking": False}))
    assert chat == [0, 128803, 23166, 128804, 128822]
    # Every budget is one token: a count cannot tell which the server wrote.
    counts = {len(encode(tokenizer, effort_line(n))) for n in (1, 25, 50, 75, 100)}
    assert counts == {25}
    for text, token_id in {
        SYSTEM: 128799,
        "｜DSML｜": 128825,
        "<｜deepseek_image｜>": 129264,
        "<｜latest_reminder｜>": 128828,
    }.items():
        assert encode(tokenizer, text) == [token_id]
        assert decode(tokenizer, [token_id]) == text


def test_tools_join_the_first_system_message_or_a_new_empty_one(renderer):
    alone = renderer.render(HI, TOOLS, {}).text
    assert alone == (
        BOS + HIGH + "\n\n" + tools_block(WEATHER_SCHEMA) + "<｜User｜>Hi<｜Assistant｜><think>"
    )
    chat = renderer.render(HI, TOOLS, {"thinking": False}).text
    assert chat == (
        BOS + SYSTEM + "\n\n" + tools_block(WEATHER_SCHEMA) + "<｜User｜>Hi<｜Assistant｜></think>"
    )
    joined = renderer.render([SYS, *HI], TOOLS, {}).text
    assert joined == (
        BOS + HIGH + "Be brief.\n\n" + tools_block(WEATHER_SCHEMA)
        + "<｜User｜>Hi<｜Assistant｜><think>"
    )  # fmt: skip
    # No system message leads: vLLM's wrapper gives the tools to a later one.
    later = [*HI, {"role": "assistant", "content": "Hello."}, SYS]
    text = renderer.render(later, TOOLS, {"thinking": False}).text
    assert text == (
        BOS + "<｜User｜>Hi<｜Assistant｜></think>Hello." + EOS + SYSTEM + "Be brief.\n\n"
        + tools_block(WEATHER_SCHEMA) + "<｜Assistant｜></think>"
    )  # fmt: skip


HISTORY = [
    {"role": "user", "content": "q1"},
    {"role": "assistant", "content": "a1", "reasoning_content": "r1"},
    {"role": "user", "content": "q2"},
]


@pytest.mark.parametrize(
    ("tools", "expected"),
    [
        (None, "<｜User｜>q1<｜Assistant｜></think>a1" + EOS
         + "<｜User｜>q2<｜Assistant｜><think>"),
        (TOOLS, "<｜User｜>q1<｜Assistant｜><think>r1</think>a1" + EOS
         + "<｜User｜>q2<｜Assistant｜><think>"),
    ],
)  # fmt: skip
def test_history_reasoning_is_kept_only_when_tools_are_declared(renderer, tools, expected):
    text = renderer.render(HISTORY, tools, {}).text
    assert text.endswith(expected)
    assert text.startswith(BOS + HIGH + ("\n\n## Tools" if tools else "<｜User｜>"))


def test_detected_from_its_vocabulary_and_its_encoder(tokenizer):
    directory = build_fixture("deepseek-v4.1")
    assert sorted(p.name for p in (directory / "encoding").iterdir()) == ["encoding.py"]
    config = json.loads((directory / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert "chat_template" not in config
    assert resolve_profile(tokenizer) is DEEPSEEK_V4_1
    vocab = tokenizer.get_vocab()
    assert detect_profile(vocab) is DEEPSEEK_V4_1
    assert detect_profile(vocab, "encoding.py") is DEEPSEEK_V4_1
    assert detect_profile(vocab, "encoding_dsv41.py") is DEEPSEEK_V4_1
    assert get_profile("deepseek-v4.1") is DEEPSEEK_V4_1
    # V4's vocabulary has no <｜System｜>: "encoding.py" beside it is not taken for V4.1's.
    v4 = load_tokenizer("fixture:deepseek-v4").get_vocab()
    with pytest.raises(UnknownProfileError, match="lacks <｜System｜>: pass --profile"):
        detect_profile(v4, "encoding.py")
    assert detect_profile(v4, "encoding_dsv4.py") is DEEPSEEK_V4


# -- DSML tool calls: the writer is the encoder's history shape and its parser's -------------


def test_the_written_calls_are_the_history_turn_and_parse_back():
    calls = [
        call("get_weather", '{"city": "Paris", "days": 3}', "c1"),
        call("search", '{"query": "a \\"quoted\\" <b>", "tags": ["x", "y"]}', "c2"),
    ]
    markup = DEEPSEEK_V4_1.tool_call_markups(calls, "Checking.")[0].text
    assert markup == dsml(
        invoke("get_weather", ("city", "Paris", True), ("days", "3", False)),
        invoke("search", ("query", 'a "quoted" <b>', True), ("tags", '["x", "y"]', False)),
    )
    history = [
        {"role": "user", "content": "q"},
        {
            "role": "assistant",
            "content": "Checking.",
            "reasoning_content": "R",
            "tool_calls": calls,
        },
        {"role": "tool", "tool_call_id": "c1", "content": "18C"},
        {"role": "tool", "tool_call_id": "c2", "content": "hits"},
    ]
    rendered = encode_messages(history, "thinking", drop_thinking=False)
    generated = "R</think>Checking." + markup + EOS
    assert "<｜Assistant｜><think>" + generated + "<｜User｜><tool_result>" in rendered
    message = parse_message_from_completion_text(generated, "thinking")
    assert (message["reasoning_content"], message["content"]) == ("R", "Checking.")
    assert [json.loads(c["function"]["arguments"]) for c in message["tool_calls"]] == [
        json.loads(c["function"]["arguments"]) for c in calls
    ]
    # V4's tags are not V4.1's: the writers differ by the spaced names only.
    v4 = DEEPSEEK_V4.tool_call_markups(calls, "Checking.")[0].text
    assert (
        v4.replace("｜DSML｜tool_calls", "｜DSML｜ calls")
        .replace("｜DSML｜invoke", "｜DSML｜ invoke")
        .replace("｜DSML｜parameter", "｜DSML｜ parameter")
        == markup
    )


@pytest.mark.parametrize(
    "text",
    [
        # V4's tags: no V4.1 block opens, so the DSML token is inside the content.
        "R</think>x\n\n<｜DSML｜tool_calls>\n</｜DSML｜tool_calls>" + EOS,
        "R</think>" + PARIS_CALL.replace("\n<｜DSML｜ invoke", "<｜DSML｜ invoke") + EOS,
        "R</think>" + PARIS_CALL + "\n" + EOS,
        "R</think>A",
    ],
)
def test_the_encoder_s_parser_reads_only_the_exact_shape(text):
    with pytest.raises(ValueError):
        parse_message_from_completion_text(text, "thinking")


def test_the_parser_reads_a_chat_turn_with_a_call():
    message = parse_message_from_completion_text("Sure." + PARIS_CALL + EOS, "chat")
    assert message["content"] == "Sure."
    assert message["tool_calls"] == [
        {"type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    ]
    assert encoding_dsv41.EFFORTS == {"low": 50, "high": 75, "max": 100}


# -- reconstruction: the golden shapes, thinking on and off, text path and server ids ----------

V41_FAMILIES = {
    # No variable: vLLM's wrapper thinks, at high (75).
    "default": Family("deepseek-v4.1", EOS, "", "</think>", markup=PARIS_CALL),
    "low": Family(
        "deepseek-v4.1",
        EOS,
        "",
        "</think>",
        markup=PARIS_CALL,
        variables=(("thinking", True), ("reasoning_effort", "low")),
    ),
    "number": Family(
        "deepseek-v4.1",
        EOS,
        "",
        "</think>",
        markup=PARIS_CALL,
        variables=(("reasoning_effort", 9),),
    ),
    "chat": Family(
        "deepseek-v4.1",
        EOS,
        "",
        "",
        thinks=False,
        markup=PARIS_CALL,
        variables=(("thinking", False),),
    ),
}
BUDGETS = {"default": 75, "low": 50, "number": 9}


@pytest.mark.parametrize("shape_name", SHAPES)
@pytest.mark.parametrize("mode", V41_FAMILIES)
def test_golden_shapes(tokenizer, mode, shape_name):
    family, shape = V41_FAMILIES[mode], SHAPES[shape_name]
    if shape.reasoning == "" and not family.thinks:
        pytest.skip("a non-thinking turn has no reasoning to leave empty")
    stored, prompt_ids, truth = case(tokenizer, family, shape)
    if mode in BUDGETS:
        assert stored.rendering.text.startswith(BOS + SYSTEM + effort_line(BUDGETS[mode]))
    else:
        # Chat mode: the system token only for a leading system message (or the tools' one).
        hosted = shape.tools or shape.messages[0]["role"] == "system"
        assert stored.rendering.text.startswith(BOS + (SYSTEM if hosted else "<｜User｜>"))
        assert "Reasoning Effort" not in stored.rendering.text
    text = reconstruct_sample(stored, tokenizer, DEEPSEEK_V4_1)
    assert text.input_ids == prompt_ids + truth
    assert (text.verified, text.reason, text.id_source) == (True, "ok", "text"), text.detail
    assert text.truncated == bool(shape.truncate)
    if shape.special_in_prompt:
        assert "special_text_in_prompt=" in text.detail
    exact = replace(stored.completion, prompt_token_ids=prompt_ids, completion_token_ids=truth)
    server = reconstruct_sample(replace(stored, completion=exact), tokenizer, DEEPSEEK_V4_1)
    assert server.input_ids == prompt_ids + truth
    assert (server.verified, server.reason, server.id_source) == (True, "ok", "server")
    assert server.text_check == "agrees"


def tool_turn(tokenizer, calls, generated, content, variables=()):
    """A stored tool-call turn whose counts are those of ``generated`` (the model's text)."""
    messages = [{"role": "user", "content": "Weather in Paris and Rome?"}]
    rendering = ChatRenderer(tokenizer, DEEPSEEK_V4_1).render(messages, TOOLS, dict(variables))
    prompt_ids = encode(tokenizer, rendering.text)
    truth = encode(tokenizer, generated)
    usage = {"prompt_tokens": len(prompt_ids), "completion_tokens": len(truth)}
    thinks = rendering.text.endswith("<think>")
    reasoning = generated.partition("</think>")[0] if thinks else None
    completion = Completion(
        "g", "P", "m", reasoning, content, calls, "tool_calls", "tool_calls", usage
    )
    stored = StoredCompletion("k", "s", 0, messages, TOOLS, completion, rendering=rendering)
    return stored, prompt_ids + truth


def test_two_calls_with_typed_values_are_proven_from_text(tokenizer):
    calls = [
        call("get_weather", '{"city": "Paris", "days": 3}', "call_a"),
        call("get_weather", '{"city": "Rome", "hourly": false}', "call_b"),
    ]
    markup = dsml(
        invoke("get_weather", ("city", "Paris", True), ("days", "3", False)),
        invoke("get_weather", ("city", "Rome", True), ("hourly", "false", False)),
    )
    generated = "Two cities.</think>Checking both." + markup + EOS
    for content in ("Checking both.\n\n", "Checking both."):  # a parser that drops the lead
        stored, ids = tool_turn(tokenizer, calls, generated, content)
        sample = reconstruct_sample(stored, tokenizer, DEEPSEEK_V4_1)
        assert sample.input_ids == ids
        assert (sample.verified, sample.reason) == (True, "ok"), sample.detail


def test_a_call_without_content_in_chat_mode(tokenizer):
    calls = [call("get_weather", '{"city": "Paris"}', "call_a")]
    stored, ids = tool_turn(tokenizer, calls, PARIS_CALL + EOS, None, (("thinking", False),))
    assert stored.rendering.text.endswith("<｜Assistant｜></think>")
    sample = reconstruct_sample(stored, tokenizer, DEEPSEEK_V4_1)
    assert sample.input_ids == ids
    assert (sample.verified, sample.reason) == (True, "ok"), sample.detail


def test_v4_s_tags_written_by_a_v4_1_model_fail_the_count(tokenizer):
    # A model that wrote V4's block: the rebuilt V4.1 markup has other tokens and another count.
    calls = [call("get_weather", '{"city": "Paris"}', "call_a")]
    v4 = "R</think>" + DEEPSEEK_V4.tool_call_markups(calls, "")[0].text + EOS
    stored, ids = tool_turn(tokenizer, calls, v4, None)
    sample = reconstruct_sample(stored, tokenizer, DEEPSEEK_V4_1)
    assert sample.input_ids != ids
    assert sample.verified is False


def test_a_container_value_s_spelling_is_not_proven(tokenizer):
    calls = [call("search", '{"tags": ["x", "y"]}', "call_a")]
    generated = "R</think>" + dsml(invoke("search", ("tags", '["x","y"]', False))) + EOS
    stored, ids = tool_turn(tokenizer, calls, generated, None)
    sample = reconstruct_sample(stored, tokenizer, DEEPSEEK_V4_1)
    assert sample.input_ids == ids
    assert (sample.verified, sample.reason) == (False, "tool_arguments_reserialised")


# -- the simulated model and simulated runs ------------------------------------------------------


@pytest.mark.parametrize(
    "variables", [{}, {"thinking": False}, {"reasoning_effort": "max"}, {"reasoning_effort": 5}]
)
def test_the_simulated_model_writes_the_v4_1_layout(tokenizer, variables):
    from draftgen.simulator import wire
    from draftgen.simulator.model import Plan, generate, is_canonical, prompt_layout, token_table

    table = token_table("fixture:deepseek-v4.1", DEEPSEEK_V4_1)
    thinks = variables.get("thinking", True)
    checked = 0
    for seed in range(12):
        rng = random.Random(seed)
        tools = TOOLS if seed % 2 else None
        plan_call = {"id": "call_0", "name": "get_weather", "arguments": '{"city": "Paris"}'}
        plan = Plan(total_tokens=40, reasoning_share=0.4, tool_call=plan_call if tools else None)
        rendering = ChatRenderer(tokenizer, DEEPSEEK_V4_1).render(USER, tools, variables)
        assert rendering.text.startswith(BOS + SYSTEM) is (thinks or bool(tools))
        output = generate(table, prompt_layout(rendering.text, DEEPSEEK_V4_1), plan, rng, None)
        text = "".join(s.text for s in output.sections)
        assert ("</think>" in text) == thinks
        if tools:
            assert text.endswith(PARIS_CALL + EOS)
        if not is_canonical(table, output):
            continue
        checked += 1
        delivery = wire.deliver(output, set(), rng, tool_call=plan.tool_call)
        prompt_ids = encode(tokenizer, rendering.text)
        usage = {"prompt_tokens": len(prompt_ids), "completion_tokens": len(output.ids)}
        completion = Completion(
            "g", "P", "m", delivery.reasoning_text, delivery.content_text, delivery.tool_calls,
            output.finish_reason, output.finish_reason, usage,
        )  # fmt: skip
        stored = StoredCompletion("k", "s", 0, USER, tools, completion, rendering=rendering)
        sample = reconstruct_sample(stored, tokenizer, DEEPSEEK_V4_1)
        assert sample.input_ids == prompt_ids + output.ids, (seed, output.sections)
        assert sample.reason == "ok", sample.detail
    assert checked >= 6


def simulated_run(tmp_path, monkeypatch, backend, effort, quirks=None, faults=None, kwargs=None):
    """(ground truth by generation id, exported rows, text_check by key) of a run of 16 rows:
    half with tools, some with a leading system message the tools join, some with a system
    message later in the conversation, some of two turns."""
    rows = []
    for i in range(16):
        messages = [{"role": "user", "content": f"Question {i} — café"}]
        if i % 4 == 0:
            messages.insert(0, {"role": "system", "content": "Answer briefly."})
        if i % 5 == 1:  # a second turn: history reasoning dropped, or kept with tools
            messages += [
                {"role": "assistant", "content": "Earlier.", "reasoning_content": "Old."},
                {"role": "user", "content": "And then?"},
            ]
        if i % 7 == 3:  # a system turn after the first: the assistant header follows it
            messages += [
                {"role": "assistant", "content": "Noted."},
                {"role": "system", "content": "Now answer in French."},
            ]
        row = {"id": f"r{i}", "messages": messages}
        if i % 2 == 0:
            row["tools"] = TOOLS
        rows.append(row)
    config = {"seed": 11, "max_tokens": 60, "dialect": backend, "tool_call_rate": 0.8}
    config.update(quirks=quirks or {}, faults=faults or {})
    truth, exported = run_rows(
        tmp_path,
        monkeypatch,
        "deepseek-v4.1",
        rows,
        config,
        backend=backend,
        reasoning_effort=effort,
        chat_template_kwargs=kwargs,
    )
    return truth, exported, text_checks(tmp_path)


@pytest.mark.parametrize(
    ("kwargs", "last_id"),
    [(None, 128821), ({"thinking": False}, 128822), ({"reasoning_effort": 90}, 128821)],
)
def test_simulated_vllm_run_exports_ground_truth(tokenizer, tmp_path, monkeypatch, kwargs, last_id):
    # No kwargs: the wrapper's default, thinking at high.
    truth, exported, checks = simulated_run(tmp_path, monkeypatch, "vllm", None, kwargs=kwargs)
    assert len(exported) == len(truth) >= 16
    tool_calls = agree = 0
    budget = (kwargs or {}).get("reasoning_effort", 75)
    for row in exported:
        record = truth[row["generation_id"]]
        assert row["input_ids"] == record["prompt_ids"] + record["completion_ids"]
        assert (row["verified"], row["verify_reason"], row["id_source"]) == (True, "ok", "ids")
        assert record["prompt_ids"][-1] == last_id
        if last_id == 128821:
            assert decode(tokenizer, record["prompt_ids"]).startswith(
                BOS + SYSTEM + effort_line(budget)
            )
        tool_calls += record["finish_reason"] == "tool_calls"
        if record["text_exact"]:
            assert checks[row["key"]] == "agrees", record
            agree += 1
    assert tool_calls >= 3 and agree >= 8


@pytest.mark.parametrize("effort", ["low", "none"])
def test_simulated_text_run_never_verifies_a_wrong_sample(tokenizer, tmp_path, monkeypatch, effort):
    """The OpenRouter dialect with faults and provider quirks, thinking on (at low: budget 50) and
    off: what the text path proves equals what the model generated."""
    quirks = {"leak_eot": 0.3, "no_split": 0.3, "tool_call_text": 0.2, "reserialize_arguments": 0.3}
    faults = {"rate_limit": 0.1, "server_error": 0.1, "midstream_error": 0.1}
    truth, exported, _ = simulated_run(tmp_path, monkeypatch, "openrouter", effort, quirks, faults)
    assert len(exported) >= 16
    verified = quirked = tool_calls = 0
    for row in exported:
        record = truth[row["generation_id"]]
        assert row["id_source"] == "text"
        quirked += bool(record["quirks"])
        tool_calls += record["finish_reason"] == "tool_calls"
        prompt = decode(tokenizer, record["prompt_ids"])
        if effort == "none":
            assert record["reasoning"] is None and "Reasoning Effort" not in prompt
        else:
            assert prompt.startswith(BOS + SYSTEM + effort_line(50))
        if row["verified"]:
            verified += 1
            assert row["input_ids"] == record["prompt_ids"] + record["completion_ids"], record
        else:
            assert not record["text_exact"], (row["verify_reason"], record)
    assert verified >= 10 and quirked >= 3 and tool_calls >= 3

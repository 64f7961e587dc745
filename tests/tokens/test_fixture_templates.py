"""The fixture chat templates render what the publishers' own templates render, behaviour by
behaviour.

Each expected text below is what the published template gives for the same input (DeepSeek-V3.1's
tokenizer_config.json, GLM-4.6's and MiniMax-M2's chat_template.jinja, gpt-oss-120b's, Qwen3-8B's,
Qwen3-4B-Thinking-2507's and Qwen3-4B-Instruct-2507's), rendered through transformers as servers do.
"""

from __future__ import annotations

import pytest
from jinja2 import TemplateError
from transformers.utils.chat_template_utils import _compile_jinja_template

from draftgen.profiles import DEEPSEEK_V3
from draftgen.tokens.rendering import ChatRenderer
from draftgen.tokens.tokenizer import encode, load_tokenizer

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


def call(arguments, name="get_weather", call_id="call_0"):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def tool_turn(arguments, content="", reasoning="need tool"):
    """A user asks, the assistant calls get_weather, the tool answers: a turn in progress."""
    return [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": content,
            "reasoning_content": reasoning,
            "tool_calls": [call(arguments)],
        },
        {"role": "tool", "tool_call_id": "call_0", "content": "18C"},
    ]


HISTORY = [
    {"role": "user", "content": "Q1"},
    {"role": "assistant", "content": "A1", "reasoning_content": "r1"},
    {"role": "user", "content": "Q2"},
]


@pytest.fixture(scope="module")
def tokenizers():
    names = (
        "deepseek-v3.1",
        "glm-4.6",
        "minimax-m2",
        "gpt-oss",
        "qwen3",
        "qwen3-thinking-2507",
        "qwen3-instruct-2507",
    )
    return {name: load_tokenizer(f"fixture:{name}") for name in names}


def render(tokenizer, messages, tools=None, **variables):
    return tokenizer.apply_chat_template(
        messages, tools=tools, add_generation_prompt=True, tokenize=False, **variables
    )


# --- DeepSeek V3.1 ---------------------------------------------------------------------------

DS_BOS = "<｜begin▁of▁sentence｜>"


def test_deepseek_v31_is_non_thinking_unless_thinking_is_true(tokenizers):
    tokenizer = tokenizers["deepseek-v3.1"]
    user = [{"role": "user", "content": "Hi"}]
    off = DS_BOS + "<｜User｜>Hi<｜Assistant｜></think>"
    assert render(tokenizer, user) == off
    assert render(tokenizer, user, thinking=False) == off
    assert render(tokenizer, user, thinking=True) == DS_BOS + "<｜User｜>Hi<｜Assistant｜><think>"
    # Kimi's and Qwen's switch is not DeepSeek's: enable_thinking is not read.
    assert render(tokenizer, user, enable_thinking=True) == off
    assert encode(tokenizer, off)[-2:] == [128804, 128799]


def test_deepseek_v31_declares_no_tools_and_joins_system_messages(tokenizers):
    tokenizer = tokenizers["deepseek-v3.1"]
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather?"},
        {"role": "system", "content": "Late."},
    ]
    expected = DS_BOS + "Be brief.\n\nLate.<｜User｜>Weather?<｜Assistant｜></think>"
    assert render(tokenizer, messages) == expected
    assert render(tokenizer, messages, tools=[WEATHER_TOOL]) == expected


def test_deepseek_v31_history_keeps_what_follows_the_first_think_close(tokenizers):
    messages = [
        {"role": "user", "content": "Q1"},
        {"role": "assistant", "content": "r</think>A1</think>B", "reasoning_content": "r"},
        {"role": "user", "content": "Q2"},
    ]
    assert render(tokenizers["deepseek-v3.1"], messages, thinking=True) == (
        DS_BOS + "<｜User｜>Q1<｜Assistant｜></think>A1</think>B<｜end▁of▁sentence｜>"
        "<｜User｜>Q2<｜Assistant｜><think>"
    )


def test_deepseek_v31_tool_calls_are_text_and_tool_output_continues_the_turn(tokenizers):
    tokenizer = tokenizers["deepseek-v3.1"]
    messages = [
        {"role": "user", "content": "Oslo and Rome?"},
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [
                call('{"city": "Oslo"}'),
                call('{"city":"Rome"}', call_id="call_1"),
            ],
        },
        {"role": "tool", "content": "-2C"},
        {"role": "tool", "content": "20C"},
    ]
    in_progress = (
        DS_BOS + "<｜User｜>Oslo and Rome?<｜Assistant｜></think>Checking."
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>"
        '{"city": "Oslo"}<｜tool▁call▁end｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>'
        '{"city":"Rome"}<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>'
        "<｜tool▁output▁begin｜>-2C<｜tool▁output▁end｜>"
        "<｜tool▁output▁begin｜>20C<｜tool▁output▁end｜>"
    )
    # No generation prompt after tool output, thinking or not.
    assert render(tokenizer, messages, tools=[WEATHER_TOOL]) == in_progress
    assert render(tokenizer, messages, thinking=True) == in_progress
    # The answer after tool output has no header and keeps a "</think>"; the next user turn opens
    # a new assistant turn.
    finished = [
        *messages,
        {"role": "assistant", "content": "Cold</think> and warm."},
        {"role": "user", "content": "Thanks"},
    ]
    assert render(tokenizer, finished) == (
        in_progress + "Cold</think> and warm.<｜end▁of▁sentence｜>"
        "<｜User｜>Thanks<｜Assistant｜></think>"
    )


def test_deepseek_v31_tool_call_turn_needs_its_content(tokenizers):
    tokenizer = tokenizers["deepseek-v3.1"]
    messages = [
        {"role": "user", "content": "W?"},
        {"role": "assistant", "content": "", "tool_calls": [call('{"city": "Paris"}')]},
        {"role": "tool", "content": "18C"},
    ]
    assert render(tokenizer, messages) == (
        DS_BOS + "<｜User｜>W?<｜Assistant｜></think><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>"
        'get_weather<｜tool▁sep｜>{"city": "Paris"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>'
        "<｜end▁of▁sentence｜><｜tool▁output▁begin｜>18C<｜tool▁output▁end｜>"
    )
    # Through the renderer, as vLLM hands it over: the arguments parsed into an object, which
    # V3.1's template refuses to join (vLLM answers such a request with an error).
    messages[1]["content"] = None
    rendering = ChatRenderer(tokenizer, DEEPSEEK_V3).render(messages, None)
    assert rendering.error.startswith(
        "TemplateError: DeepSeek-V3.1's chat template joins tool-call arguments as text"
    )


def test_deepseek_v31_object_arguments_raise(tokenizers):
    with pytest.raises(TemplateError) as excinfo:
        render(tokenizers["deepseek-v3.1"], tool_turn({"city": "Paris"}))
    assert str(excinfo.value) == (
        "DeepSeek-V3.1's chat template joins tool-call arguments as text: give "
        "function.arguments as a JSON string, not an object"
    )


# --- GLM-4.6 ---------------------------------------------------------------------------------


def test_glm_nothink_goes_on_every_user_turn_when_thinking_is_off(tokenizers):
    tokenizer = tokenizers["glm-4.6"]
    messages = [
        {"role": "user", "content": "Q1"},
        {"role": "assistant", "content": "A1"},
        {"role": "user", "content": "Q2 /nothink"},
    ]
    assert render(tokenizer, messages, enable_thinking=False) == (
        "[gMASK]<sop><|user|>\nQ1/nothink<|assistant|>\n<think></think>\nA1"
        "<|user|>\nQ2 /nothink<|assistant|>\n<think></think>"
    )
    plain = (
        "[gMASK]<sop><|user|>\nQ1<|assistant|>\n<think></think>\nA1"
        "<|user|>\nQ2 /nothink<|assistant|>"
    )
    assert render(tokenizer, messages) == plain
    assert render(tokenizer, messages, enable_thinking=True) == plain
    ids = encode(tokenizer, render(tokenizer, messages[:1], enable_thinking=False))
    # "/nothink" is one added token; then <|assistant|> \n <think> </think>.
    assert ids[-5:] == [151674, 151651, 198, 151664, 151665]


def test_glm_history_reasoning_only_after_the_last_user_turn_and_stripped(tokenizers):
    tokenizer = tokenizers["glm-4.6"]
    messages = [
        {"role": "user", "content": "Q1"},
        {"role": "assistant", "content": "\n A1 \n", "reasoning_content": "r1"},
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": "  ",
            "reasoning_content": "\n need tool \n",
            "tool_calls": [call({"city": "Zürich", "days": 2, "opts": {"a": [1, None]}})],
        },
        {"role": "tool", "content": "18C"},
        {"role": "assistant", "content": "<think>\nsplit\n</think>\n\nIt is 18C. "},
    ]
    assert render(tokenizer, messages) == (
        "[gMASK]<sop><|user|>\nQ1<|assistant|>\n<think></think>\nA1"
        "<|user|>\nWeather?<|assistant|>\n<think>need tool</think>"
        "\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Zürich</arg_value>\n"
        "<arg_key>days</arg_key>\n<arg_value>2</arg_value>\n"
        '<arg_key>opts</arg_key>\n<arg_value>{"a": [1, null]}</arg_value>\n</tool_call>'
        "<|observation|>\n<tool_response>\n18C\n</tool_response>"
        "<|assistant|>\n<think>split</think>\nIt is 18C.<|assistant|>"
    )


def test_glm_declares_tools_and_groups_tool_results(tokenizers):
    messages = [*tool_turn({}, reasoning=""), {"role": "tool", "content": "windy"}]
    assert render(tokenizers["glm-4.6"], messages, tools=[WEATHER_TOOL]) == (
        "[gMASK]<sop><|system|>\n# Tools\n\nYou may call one or more functions to assist with the "
        "user query.\n\nYou are provided with function signatures within <tools></tools> XML "
        "tags:\n<tools>\n"
        '{"type": "function", "function": {"name": "get_weather", "description": "Weather for a '
        'city", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, '
        '"required": ["city"]}}}\n'
        "</tools>\n\nFor each function call, output the function name and arguments within the "
        "following XML format:\n<tool_call>{function-name}\n<arg_key>{arg-key-1}</arg_key>\n"
        "<arg_value>{arg-value-1}</arg_value>\n<arg_key>{arg-key-2}</arg_key>\n"
        "<arg_value>{arg-value-2}</arg_value>\n...\n</tool_call>"
        "<|user|>\nWeather in Paris?<|assistant|>\n<think></think>\n<tool_call>get_weather\n"
        "</tool_call><|observation|>\n<tool_response>\n18C\n</tool_response>"
        "\n<tool_response>\nwindy\n</tool_response><|assistant|>"
    )


def test_glm_text_arguments_raise(tokenizers):
    with pytest.raises(TemplateError) as excinfo:
        render(tokenizers["glm-4.6"], tool_turn('{"city": "Paris"}'))
    assert str(excinfo.value) == (
        "GLM-4.6's chat template iterates tool-call arguments as a mapping: parse "
        "function.arguments into an object first (vLLM and SGLang do)"
    )


# --- MiniMax-M2 ------------------------------------------------------------------------------

MINIMAX_TOOLS_SYSTEM = (
    "\n\n# Tools\nYou may call one or more tools to assist with the user query.\n"
    "Here are the tools available in JSONSchema format:\n\n<tools>\n"
    '<tool>{"name": "get_weather", "description": "Weather for a city", "parameters": '
    '{"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}'
    "</tool>\n</tools>\n\nWhen making tool calls, use XML format to invoke tools and pass "
    'parameters:\n\n<minimax:tool_call>\n<invoke name="tool-name-1">\n'
    '<parameter name="param-key-1">param-value-1</parameter>\n'
    '<parameter name="param-key-2">param-value-2</parameter>\n...\n</invoke>\n'
    "</minimax:tool_call>"
)


def test_minimax_drops_reasoning_before_the_last_user_message(tokenizers):
    assert render(tokenizers["minimax-m2"], HISTORY) == (
        "]~!b[]~b]system\nYou are a helpful assistant.[e~[\n]~b]user\nQ1[e~[\n"
        "]~b]ai\nA1[e~[\n]~b]user\nQ2[e~[\n]~b]ai\n<think>\n"
    )


def test_minimax_tool_turn_keeps_reasoning_and_groups_results(tokenizers):
    messages = [
        {"role": "system", "content": "Be brief."},
        *tool_turn({"city": "Zürich", "days": 2, "opts": {"a": None}}),
        {"role": "tool", "content": "windy"},
        {"role": "system", "content": "Ignored."},
    ]
    assert render(tokenizers["minimax-m2"], messages, tools=[WEATHER_TOOL]) == (
        "]~!b[]~b]system\nBe brief."
        + MINIMAX_TOOLS_SYSTEM
        + "[e~[\n]~b]user\nWeather in Paris?[e~[\n"
        "]~b]ai\n<think>\nneed tool\n</think>\n\n\n<minimax:tool_call>\n"
        '<invoke name="get_weather">\n<parameter name="city">Zürich</parameter>\n'
        '<parameter name="days">2</parameter>\n<parameter name="opts">{"a": null}</parameter>\n'
        "</invoke>\n</minimax:tool_call>[e~[\n"
        "]~b]tool\n<response>18C</response>\n<response>windy</response>[e~[\n]~b]ai\n<think>\n"
    )


def test_minimax_text_arguments_raise(tokenizers):
    with pytest.raises(TemplateError) as excinfo:
        render(tokenizers["minimax-m2"], tool_turn('{"city": "Paris"}'))
    assert str(excinfo.value) == (
        "MiniMax-M2's chat template iterates tool-call arguments as a mapping: parse "
        "function.arguments into an object first (vLLM and SGLang do)"
    )


# --- gpt-oss ---------------------------------------------------------------------------------


@pytest.fixture
def clock(tokenizers, monkeypatch):
    """The gpt-oss template's strftime_now, fixed: it is a global of the compiled template."""
    compiled = _compile_jinja_template(tokenizers["gpt-oss"].chat_template)
    formats: list[str] = []

    def strftime_now(fmt):
        formats.append(fmt)
        return "2031-02-03"

    monkeypatch.setitem(compiled.globals, "strftime_now", strftime_now)
    return formats


def harmony_system(effort="medium", tools=False):
    return (
        "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
        "Knowledge cutoff: 2024-06\nCurrent date: 2031-02-03\n\n"
        f"Reasoning: {effort}\n\n# Valid channels: analysis, commentary, final. Channel must be "
        "included for every message."
        + (
            "\nCalls to these tools must go to the commentary channel: 'functions'."
            if tools
            else ""
        )
        + "<|end|>"
    )


def test_gpt_oss_stamps_the_date_and_reasoning_effort(tokenizers, clock):
    tokenizer = tokenizers["gpt-oss"]
    user = [{"role": "user", "content": "Hi"}]
    turn = "<|start|>user<|message|>Hi<|end|><|start|>assistant"
    assert render(tokenizer, user) == harmony_system() + turn
    assert clock == ["%Y-%m-%d"]
    assert render(tokenizer, user, reasoning_effort="high") == harmony_system("high") + turn


def test_gpt_oss_instructions_end_with_a_blank_line_and_history_drops_reasoning(tokenizers, clock):
    messages = [{"role": "system", "content": "Be brief."}, *HISTORY]
    assert render(tokenizers["gpt-oss"], messages, reasoning_effort="low") == (
        harmony_system("low")
        + "<|start|>developer<|message|># Instructions\n\nBe brief.\n\n<|end|>"
        "<|start|>user<|message|>Q1<|end|><|start|>assistant<|channel|>final<|message|>A1<|end|>"
        "<|start|>user<|message|>Q2<|end|><|start|>assistant"
    )


def test_gpt_oss_tool_call_arguments_and_results_go_through_tojson(tokenizers, clock):
    tokenizer = tokenizers["gpt-oss"]
    head = harmony_system(tools=True) + (
        "<|start|>developer<|message|># Tools\n\n## functions\n\nnamespace functions {\n\n"
        "// Weather for a city\ntype get_weather = (_: {\ncity: string,\n}) => any;\n\n"
        "} // namespace functions<|end|><|start|>user<|message|>Weather in Paris?<|end|>"
    )
    as_object = tool_turn({"city": "Zürich"}, reasoning="")
    as_object[1]["thinking"] = "need tool"
    assert render(tokenizer, as_object, tools=[WEATHER_TOOL]) == head + (
        "<|start|>assistant<|channel|>analysis<|message|>need tool<|end|>"
        "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>"
        '{"city": "Zürich"}<|call|><|start|>functions.get_weather to=assistant'
        '<|channel|>commentary<|message|>"18C"<|end|><|start|>assistant'
    )
    # Text that is not parsed is encoded once more.
    as_text = tool_turn('{"city": "Pa', reasoning="")
    assert render(tokenizer, as_text, tools=[WEATHER_TOOL]) == head + (
        "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>"
        '"{\\"city\\": \\"Pa"<|call|><|start|>functions.get_weather to=assistant'
        '<|channel|>commentary<|message|>"18C"<|end|><|start|>assistant'
    )


def test_gpt_oss_writes_one_call_and_analysis_only_without_a_later_answer(tokenizers, clock):
    messages = [
        {"role": "user", "content": "Oslo and Rome?"},
        {
            "role": "assistant",
            "content": "Checking both.",
            "tool_calls": [call({"city": "Oslo"}), call({"city": "Rome"}, call_id="call_1")],
        },
        {"role": "tool", "content": "-2C"},
    ]
    in_progress = harmony_system() + (
        "<|start|>user<|message|>Oslo and Rome?<|end|>"
        "<|start|>assistant<|channel|>analysis<|message|>Checking both.<|end|>"
        "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>"
        '{"city": "Oslo"}<|call|><|start|>functions.get_weather to=assistant'
        '<|channel|>commentary<|message|>"-2C"<|end|>'
    )
    tokenizer = tokenizers["gpt-oss"]
    assert render(tokenizer, messages) == in_progress + "<|start|>assistant"
    answered = [
        *messages,
        {"role": "assistant", "content": "Cold."},
        {"role": "user", "content": "Ok"},
    ]
    assert render(tokenizer, answered) == in_progress.replace(
        "<|start|>assistant<|channel|>analysis<|message|>Checking both.<|end|>", ""
    ) + (
        "<|start|>assistant<|channel|>final<|message|>Cold.<|end|>"
        "<|start|>user<|message|>Ok<|end|><|start|>assistant"
    )


def test_gpt_oss_tools_are_a_typescript_namespace(tokenizers, clock):
    search = {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the web",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "What to look for"},
                    "mode": {"type": "string", "enum": ["fast", "deep"], "default": "fast"},
                    "limit": {"type": "integer", "default": 5},
                    "tags": {"type": "array", "items": {"type": "string"}},
                    "maybe": {"type": "string", "nullable": True},
                    "either": {"type": ["string", "number"]},
                    "one": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
                    "opt": {
                        "type": "object",
                        "properties": {"x": {"type": "integer"}, "y": {"type": "string"}},
                        "required": ["x"],
                    },
                },
                "required": ["query"],
            },
        },
    }
    now = {"type": "function", "function": {"name": "now", "description": "Current time"}}
    text = render(tokenizers["gpt-oss"], [{"role": "user", "content": "Hi"}], tools=[search, now])
    assert text == harmony_system(tools=True) + (
        "<|start|>developer<|message|># Tools\n\n## functions\n\nnamespace functions {\n\n"
        "// Search the web\ntype search = (_: {\n// What to look for\nquery: string,\n"
        'mode?: "fast" | "deep", // default: fast,\nlimit?: number, // default: 5,\n'
        "tags?: string[],\nmaybe?: string | null,\neither?: string | number,\n"
        "one?: string | \nnumber,\nopt?: {\nx: \n                number, y?: \n"
        "                string},\n}) => any;\n\n"
        "// Current time\ntype now = () => any;\n\n} // namespace functions<|end|>"
        "<|start|>user<|message|>Hi<|end|><|start|>assistant"
    )


# --- Qwen3 -----------------------------------------------------------------------------------

QWEN_TOOLS_SYSTEM = (
    "<|im_start|>system\n# Tools\n\nYou may call one or more functions to assist with the user "
    "query.\n\nYou are provided with function signatures within <tools></tools> XML tags:"
    "\n<tools>\n"
    '{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city", '
    '"parameters": {"type": "object", "properties": {"city": {"type": "string"}}, '
    '"required": ["city"]}}}\n'
    "</tools>\n\nFor each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n'
)
QWEN_HISTORY = (
    "<|im_start|>user\nQ1<|im_end|>\n<|im_start|>assistant\nA1<|im_end|>\n"
    "<|im_start|>user\nQ2<|im_end|>\n"
)


def test_qwen3_generation_prompt_follows_enable_thinking(tokenizers):
    tokenizer = tokenizers["qwen3"]
    assert render(tokenizer, HISTORY) == QWEN_HISTORY + "<|im_start|>assistant\n"
    assert (
        render(tokenizer, HISTORY, enable_thinking=True) == QWEN_HISTORY + "<|im_start|>assistant\n"
    )
    # Only exactly false closes the block.
    assert (
        render(tokenizer, HISTORY, enable_thinking=None) == QWEN_HISTORY + "<|im_start|>assistant\n"
    )
    assert render(tokenizer, HISTORY, enable_thinking=False) == (
        QWEN_HISTORY + "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )


@pytest.mark.parametrize(
    ("name", "prompt"),
    [
        # enable_thinking=False closes the block for the hybrid; Thinking-2507 does not read it.
        ("qwen3", "<|im_start|>assistant\n<think>\n\n</think>\n\n"),
        ("qwen3-thinking-2507", "<|im_start|>assistant\n<think>\n"),
    ],
)
def test_qwen3_history_splits_think_and_strips_reasoning(tokenizers, name, prompt):
    messages = [
        {"role": "user", "content": "Q1"},
        {"role": "assistant", "content": "<think>\nold\n</think>\n\nA1"},
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": "\n\nChecking.",
            "reasoning_content": "\n\n need tool \n",
            "tool_calls": [call({"city": "Zürich"}), call('{"city": "Rome"', call_id="c1")],
        },
        {"role": "tool", "content": "18C"},
        {"role": "tool", "content": "20C"},
        {
            "role": "assistant",
            "content": "<think>\nhmm\n</think>\n\nCold.",
            "tool_calls": [call({})],
        },
        {"role": "tool", "content": "noon"},
    ]
    assert render(tokenizers[name], messages, tools=[WEATHER_TOOL], enable_thinking=False) == (
        QWEN_TOOLS_SYSTEM + "<|im_start|>user\nQ1<|im_end|>\n<|im_start|>assistant\nA1<|im_end|>\n"
        "<|im_start|>user\nWeather?<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n need tool \n</think>\n\nChecking.\n"
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Zürich"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}\n</tool_call>'
        "<|im_end|>\n<|im_start|>user\n<tool_response>\n18C\n</tool_response>\n"
        "<tool_response>\n20C\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n<think>\nhmm\n</think>\n\nCold.\n"
        '<tool_call>\n{"name": "get_weather", "arguments": {}}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\n<tool_response>\nnoon\n</tool_response><|im_end|>\n" + prompt
    )


def test_qwen3_after_the_last_query_a_turn_without_reasoning_has_no_block(tokenizers):
    messages = [
        {"role": "user", "content": "W?"},
        {"role": "assistant", "content": "", "reasoning_content": "", "tool_calls": [call({})]},
        {"role": "tool", "content": "x"},
    ]
    assert render(tokenizers["qwen3"], messages) == (
        "<|im_start|>user\nW?<|im_end|>\n<|im_start|>assistant\n"
        '<tool_call>\n{"name": "get_weather", "arguments": {}}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\n<tool_response>\nx\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )


def test_qwen3_thinking_2507_always_opens_the_block(tokenizers):
    tokenizer = tokenizers["qwen3-thinking-2507"]
    for variables in ({}, {"enable_thinking": False}, {"enable_thinking": True}):
        assert render(tokenizer, HISTORY, **variables) == (
            QWEN_HISTORY + "<|im_start|>assistant\n<think>\n"
        )


def test_qwen3_instruct_2507_has_no_reasoning_logic(tokenizers):
    messages = [
        {"role": "user", "content": "W?"},
        {
            "role": "assistant",
            "content": "<think>\nkept\n</think>\n\nChecking.",
            "reasoning_content": "never rendered",
            "tool_calls": [call({"city": "Paris"})],
        },
        {"role": "tool", "content": "18C"},
    ]
    tokenizer = tokenizers["qwen3-instruct-2507"]
    expected = (
        "<|im_start|>user\nW?<|im_end|>\n"
        "<|im_start|>assistant\n<think>\nkept\n</think>\n\nChecking.\n"
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
        "<|im_end|>\n<|im_start|>user\n<tool_response>\n18C\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert render(tokenizer, messages) == expected
    assert render(tokenizer, messages, enable_thinking=False) == expected


@pytest.mark.parametrize("name", ["qwen3", "qwen3-thinking-2507", "qwen3-instruct-2507"])
def test_qwen3_content_that_is_not_text_renders_as_nothing(tokenizers, name):
    parts = [{"type": "text", "text": "a"}]
    messages = [{"role": "user", "content": parts}]
    assert render(tokenizers[name], messages).startswith("<|im_start|>user\n<|im_end|>\n")

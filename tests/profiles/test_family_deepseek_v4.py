"""DeepSeek V4: the fixture's encoder renders what DeepSeek's published encoder renders, the
server's call of it is reproduced, the fixture gives the real ids, and reconstruction is exact (DSML
tool calls included) on the text path, with server ids, and through simulated runs.

The golden cases are DeepSeek's own (``encoding/tests/test_input_N.json`` -> ``test_output_N.txt``
in deepseek-ai/DeepSeek-V4-Flash, N = 1..4; vLLM keeps copies in
``tests/tokenizers_/fixtures/deepseek_v4/``), restated here; case 1 carries its tools on the system
message, where vLLM's copy passes them as request tools. Further expectations are outputs of the
published encoder quoted by osaurus-ai's Swift port (``DeepseekV4ChatEncoderTests.swift``, "rendered
by running that Python file") and vLLM's ``tests/tokenizers_/test_deepseek_v4.py`` (how its V4
tokenizer wrapper calls the encoder).
"""

from __future__ import annotations

import copy
import json
import random
from dataclasses import replace

import pytest
from golden import SHAPES, TOOLS, USER, Family, case, run_rows, text_checks

from draftgen.profiles import detect_profile, get_profile
from draftgen.profiles.deepseek_v4 import DEEPSEEK_V4
from draftgen.reconstruct.text import reconstruct_sample
from draftgen.records import Completion, StoredCompletion
from draftgen.tokens.rendering import ChatRenderer, resolve_profile
from draftgen.tokens.tokenizer import decode, encode, load_tokenizer
from draftgen_testing.fixture_code.encoding_dsv4 import (
    encode_messages,
    parse_message_from_completion_text,
)
from draftgen_testing.fixtures import build_fixture

BOS = "<｜begin▁of▁sentence｜>"
EOS = "<｜end▁of▁sentence｜>"

# The tool declaration as the golden outputs have it, up to the schemas (one JSON line each).
TOOLS_HEAD = (
    "## Tools\n\n"
    "You have access to a set of tools to help answer the user's question. You can invoke tools "
    'by writing a "<｜DSML｜tool_calls>" block like the following:\n\n'
    "<｜DSML｜tool_calls>\n"
    '<｜DSML｜invoke name="$TOOL_NAME">\n'
    '<｜DSML｜parameter name="$PARAMETER_NAME" string="true|false">$PARAMETER_VALUE'
    "</｜DSML｜parameter>\n"
    "...\n"
    "</｜DSML｜invoke>\n"
    '<｜DSML｜invoke name="$TOOL_NAME2">\n'
    "...\n"
    "</｜DSML｜invoke>\n"
    "</｜DSML｜tool_calls>\n\n"
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
MAX_EFFORT = (
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to "
    "resolve the root cause, rigorously stress-testing your logic against all potential paths, "
    "edge cases, and adversarial scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, "
    "considered alternative, and rejected hypothesis to ensure absolutely no assumption is left "
    "unchecked.\n\n"
)


def tools_block(*schemas: str) -> str:
    return TOOLS_HEAD + "\n".join(schemas) + TOOLS_TAIL


def dsml(*invokes: str) -> str:
    return "\n\n<｜DSML｜tool_calls>\n" + "\n".join(invokes) + "\n</｜DSML｜tool_calls>"


def invoke(name: str, *parameters: tuple[str, str, bool]) -> str:
    lines = "\n".join(
        f'<｜DSML｜parameter name="{key}" string="{"true" if text else "false"}">{value}'
        "</｜DSML｜parameter>"
        for key, value, text in parameters
    )
    return f'<｜DSML｜invoke name="{name}">\n{lines}\n</｜DSML｜invoke>'


def function(name, description, properties, required, **extra):
    parameters = {"type": "object", "properties": properties, "required": required, **extra}
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }


def call(name, arguments: str, call_id=None):
    made = {"type": "function", "function": {"name": name, "arguments": arguments}}
    return {"id": call_id, **made} if call_id else made


# -- golden cases ------------------------------------------------------------------------------

# Case 1: tools, a tool call and its result, thinking.
WEATHER_TOOLS = [
    function(
        "get_weather",
        "Get the weather for a specific location",
        {
            "location": {"type": "string", "description": "The city name"},
            "unit": {
                "type": "string",
                "enum": ["celsius", "fahrenheit"],
                "description": "Temperature unit",
            },
        },
        ["location"],
    ),
    function(
        "search",
        "Search the web for information",
        {
            "query": {"type": "string", "description": "Search query"},
            "num_results": {"type": "integer", "description": "Number of results to return"},
        },
        ["query"],
    ),
]
CASE_1 = [
    {"role": "system", "content": "You are a helpful assistant.", "tools": WEATHER_TOOLS},
    {"role": "user", "content": "What's the weather in Beijing?"},
    {
        "role": "assistant",
        "reasoning_content": (
            "The user wants to know the weather in Beijing. I should use the get_weather tool."
        ),
        "tool_calls": [
            call("get_weather", '{"location": "Beijing", "unit": "celsius"}', "call_001")
        ],
    },
    {
        "role": "tool",
        "tool_call_id": "call_001",
        "content": '{"temperature": 22, "condition": "sunny", "humidity": 45}',
    },
    {
        "role": "assistant",
        "reasoning_content": "Got the weather data. Let me format a nice response.",
        "content": (
            "The weather in Beijing is currently sunny with a temperature of 22°C and 45% humidity."
        ),
    },
]
OUTPUT_1 = (
    BOS
    + "You are a helpful assistant.\n\n"
    + tools_block(
        '{"name": "get_weather", "description": "Get the weather for a specific location", '
        '"parameters": {"type": "object", "properties": {"location": {"type": "string", '
        '"description": "The city name"}, "unit": {"type": "string", "enum": ["celsius", '
        '"fahrenheit"], "description": "Temperature unit"}}, "required": ["location"]}}',
        '{"name": "search", "description": "Search the web for information", "parameters": '
        '{"type": "object", "properties": {"query": {"type": "string", "description": '
        '"Search query"}, "num_results": {"type": "integer", "description": "Number of results '
        'to return"}}, "required": ["query"]}}',
    )
    + "<｜User｜>What's the weather in Beijing?<｜Assistant｜><think>The user wants to know the "
    "weather in Beijing. I should use the get_weather tool.</think>"
    + dsml(invoke("get_weather", ("location", "Beijing", True), ("unit", "celsius", True)))
    + EOS
    + '<｜User｜><tool_result>{"temperature": 22, "condition": "sunny", "humidity": 45}'
    "</tool_result><｜Assistant｜><think>Got the weather data. Let me format a nice response."
    "</think>The weather in Beijing is currently sunny with a temperature of 22°C and 45% "
    "humidity." + EOS
)

# Case 2: two turns without tools; the first turn's reasoning is dropped.
CASE_2 = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Hello"},
    {
        "role": "assistant",
        "reasoning_content": "The user said hello, I should greet back.",
        "content": "Hi there! How can I help you?",
    },
    {"role": "user", "content": "What is the capital of France?"},
    {
        "role": "assistant",
        "reasoning_content": "The user asks about the capital of France. It is Paris.",
        "content": "The capital of France is Paris.",
    },
]
OUTPUT_2 = (
    BOS + "You are a helpful assistant.<｜User｜>Hello<｜Assistant｜></think>Hi there! How can I "
    "help you?" + EOS + "<｜User｜>What is the capital of France?<｜Assistant｜><think>The user "
    "asks about the capital of France. It is Paris.</think>The capital of France is Paris." + EOS
)

# Case 3: a latest_reminder, a developer turn carrying the tools, a call without id, its result.
SEARCH_TOOLS = [
    function(
        "search",
        "Web search. Split multiple queries with '||'.",
        {"queries": {"type": "string", "description": "query1||query2"}},
        ["queries"],
        additionalProperties=False,
        **{"$schema": "http://json-schema.org/draft-07/schema#"},
    ),
    function(
        "open",
        "Batch open IDs (format 【{id}†...】) or URLs.",
        {
            "open_list": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "id": {
                            "description": "ID or URL",
                            "anyOf": [{"type": "integer"}, {"type": "string"}],
                            "default": -1,
                        },
                        "cursor": {"type": "integer", "description": "", "default": -1},
                        "loc": {"type": "integer", "description": "Start line", "default": -1},
                        "num_lines": {"type": "integer", "description": "", "default": -1},
                        "view_source": {"type": "boolean", "description": "", "default": False},
                    },
                    "additionalProperties": False,
                },
                "description": "",
            }
        },
        ["open_list"],
        additionalProperties=False,
        **{"$schema": "http://json-schema.org/draft-07/schema#"},
    ),
    function(
        "find",
        "Find exact text pattern in pages.",
        {
            "find_list": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "pattern": {"type": "string", "description": ""},
                        "cursor": {"type": "integer", "description": "", "default": -1},
                    },
                    "required": ["pattern"],
                    "additionalProperties": False,
                },
                "description": "",
            }
        },
        ["find_list"],
        additionalProperties=False,
        **{"$schema": "http://json-schema.org/draft-07/schema#"},
    ),
]
QUESTION_3 = (
    "小柴胡冲剂和布洛芬能一起吃吗？\n\n"
    "CITATION FORMAT: 【{cursor_id}†L{start_line_id}(-L{end_line_id})?】"
)
CASE_3 = [
    {"role": "system", "content": "该助手为DeepSeek，由深度求索公司创造。"},
    {"role": "latest_reminder", "content": "2026-02-21,星期六,广州,App,中文"},
    {"role": "developer", "content": QUESTION_3, "tools": SEARCH_TOOLS},
    {
        "role": "assistant",
        "content": "",
        "reasoning_content": "用户想知道小柴胡冲剂和布洛芬能否一起服用。",
        "tool_calls": [call("search", '{"queries": "小柴胡冲剂 布洛芬 相互作用 一起吃"}')],
    },
    {"role": "tool", "content": "[0]"},
    {
        "role": "assistant",
        "content": "请及时就医。",
        "reasoning_content": "现在开始组织回答。",
        "tool_calls": [],
    },
]
OUTPUT_3 = (
    BOS
    + "该助手为DeepSeek，由深度求索公司创造。<｜latest_reminder｜>2026-02-21,星期六,广州,App,中文"
    + "<｜User｜>"
    + QUESTION_3
    + "\n\n"
    + tools_block(
        '{"name": "search", "description": "Web search. Split multiple queries with \'||\'.", '
        '"parameters": {"type": "object", "properties": {"queries": {"type": "string", '
        '"description": "query1||query2"}}, "required": ["queries"], "additionalProperties": '
        'false, "$schema": "http://json-schema.org/draft-07/schema#"}}',
        '{"name": "open", "description": "Batch open IDs (format 【{id}†...】) or URLs.", '
        '"parameters": {"type": "object", "properties": {"open_list": {"type": "array", "items": '
        '{"type": "object", "properties": {"id": {"description": "ID or URL", "anyOf": [{"type": '
        '"integer"}, {"type": "string"}], "default": -1}, "cursor": {"type": "integer", '
        '"description": "", "default": -1}, "loc": {"type": "integer", "description": "Start '
        'line", "default": -1}, "num_lines": {"type": "integer", "description": "", "default": '
        '-1}, "view_source": {"type": "boolean", "description": "", "default": false}}, '
        '"additionalProperties": false}, "description": ""}}, "required": ["open_list"], '
        '"additionalProperties": false, "$schema": "http://json-schema.org/draft-07/schema#"}}',
        '{"name": "find", "description": "Find exact text pattern in pages.", "parameters": '
        '{"type": "object", "properties": {"find_list": {"type": "array", "items": {"type": '
        '"object", "properties": {"pattern": {"type": "string", "description": ""}, "cursor": '
        '{"type": "integer", "description": "", "default": -1}}, "required": ["pattern"], '
        '"additionalProperties": false}, "description": ""}}, "required": ["find_list"], '
        '"additionalProperties": false, "$schema": "http://json-schema.org/draft-07/schema#"}}',
    )
    + "<｜Assistant｜><think>用户想知道小柴胡冲剂和布洛芬能否一起服用。</think>"
    + dsml(invoke("search", ("queries", "小柴胡冲剂 布洛芬 相互作用 一起吃", True)))
    + EOS
    + "<｜User｜><tool_result>[0]</tool_result><｜Assistant｜><think>现在开始组织回答。</think>"
    + "请及时就医。"
    + EOS
)

# Case 4: chat mode, a masked answer, then a quick-instruction "action" task and its answer.
ANSWER_4 = (
    "关于热海大滚锅是否是世界著名温泉，可以这样总结：它在**中国乃至全球的地热奇观中占有重要地位**，"
    "但“世界著名”的称号更侧重于它作为**独特的地质现象和旅游景点**，而非普遍的温泉疗养体验。\n\n"
    "为了让你快速了解，我整理了一个简要的表格：\n\n"
    "| 维度 | 热海大滚锅的地位与特点 |\n| :--- | :--- |\n"
    "| **地质奇观** | **世界罕见**的高温地热系统，泉眼多、水温高、形态多样。 |\n"
    "| **国内声誉** | **中国三大地热区之一**，**国家5A级旅游景区**，"
    "自古闻名（徐霞客曾游历并记载）。 |\n"
    "| **国际知名度** | 在一些旅游平台被提及为“世界六大温泉”之一，但此说法流传不广，"
    "其国际声誉更多建立在地质独特性上。 |\n"
    "| **核心体验** | **观赏地热奇观**（如97℃沸腾的“大滚锅”）、**体验温泉煮鸡蛋**。 |\n\n"
    "### 💡 游玩攻略与温馨提示\n\n如果你计划前往热海大滚锅，这里有一些实用信息供你参考：\n\n"
    "- **门票与开放时间**：\n"
    "    - **门票**：景区门票约为**50元/人**。"
    "如果选择包含温泉沐浴的套餐，价格会更高，例如约**288元**。\n"
    "    - **开放时间**：景区一般**08:00-18:00**开放，但具体时间可能变动，建议提前核实。\n\n"
    "- **特色体验**：\n"
    "    - **温泉煮鸡蛋**：这几乎是必试项目。可以在景区门口购买用草绳串起的生鸡蛋（约5-8元/串），"
    "然后到“大滚锅”旁的指定区域蒸煮，几分钟便可熟食，趣味十足。\n"
    "    - **金汤足浴**：可以直接用从“大滚锅”流出的温泉水泡脚，缓解旅途疲劳。\n\n"
    "- **注意事项**：\n"
    "    - **安全第一**：“大滚锅”水温极高，务必遵守游览规则，在指定区域内观赏，切勿随意触碰泉水。\n"
    "    - **规划行程**：建议为热海景区预留**3-4小时**的游览时间。"
    "景区内步道不走回头路，出入口有观光车接送。\n\n"
    "希望这些信息能帮助你更好地了解热海大滚锅。"
    "如果你对腾冲的其他景点或者行程规划有更多疑问，我很乐意提供进一步的信息。"
)
CASE_4 = [
    {
        "role": "system",
        "content": "该助手为DeepSeek-V3，由深度求索公司创造。\n今天是2025年10月17日，星期五。",
    },
    {"role": "latest_reminder", "content": "2024-11-15,上海市,App,中文"},
    {"role": "user", "content": "热海大滚锅是世界著名温泉吗"},
    {"role": "assistant", "content": ANSWER_4, "mask": 1},
    {"role": "user", "content": "世界著名温泉有哪些", "task": "action"},
    {"role": "assistant", "content": "Search"},
]
OUTPUT_4 = (
    BOS + "该助手为DeepSeek-V3，由深度求索公司创造。\n今天是2025年10月17日，星期五。"
    "<｜latest_reminder｜>2024-11-15,上海市,App,中文<｜User｜>热海大滚锅是世界著名温泉吗"
    "<｜Assistant｜></think>"
    + ANSWER_4
    + EOS
    + "<｜User｜>世界著名温泉有哪些<｜Assistant｜></think>"
    "<｜action｜>Search" + EOS
)

GOLDEN = {
    1: (CASE_1, "thinking", OUTPUT_1),
    2: (CASE_2, "thinking", OUTPUT_2),
    3: (CASE_3, "thinking", OUTPUT_3),
    4: (CASE_4, "chat", OUTPUT_4),
}


@pytest.mark.parametrize("number", GOLDEN)
def test_the_encoder_renders_deepseek_s_golden_cases(number):
    messages, mode, expected = GOLDEN[number]
    original = copy.deepcopy(messages)
    assert encode_messages(messages, mode) == expected
    assert messages == original


def as_vllm_gets_them(messages):
    """The golden messages as vLLM's copy holds them: tools of the first system message as
    request tools, reasoning under ``reasoning`` (vLLM's name)."""
    tools = None
    sent = []
    for message in copy.deepcopy(messages):
        if message["role"] == "system" and "tools" in message and not sent:
            tools = message.pop("tools")
        if "reasoning_content" in message:
            message["reasoning"] = message.pop("reasoning_content")
        sent.append(message)
    return sent, tools


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("fixture:deepseek-v4")


@pytest.fixture(scope="module")
def renderer(tokenizer):
    return ChatRenderer(tokenizer, resolve_profile(tokenizer))


@pytest.mark.parametrize("number", GOLDEN)
def test_the_server_call_renders_the_golden_cases(renderer, number):
    # vLLM's V4 wrapper: request tools join the leading system message, drop_thinking is always
    # asked for (the encoder keeps history reasoning itself when tools are declared).
    messages, mode, expected = GOLDEN[number]
    sent, tools = as_vllm_gets_them(messages)
    variables = {"thinking": True} if mode == "thinking" else {"thinking": False}
    assert renderer.render(sent, tools, variables).text == expected


def test_v32_s_call_of_the_encoder_would_render_another_history(renderer):
    # V3.2's convention (a new system message first, history reasoning dropped only when the
    # prompt ends with a user turn) gives other texts: V4's profile asks for V4's.
    sent, tools = as_vllm_gets_them(CASE_2)
    assert renderer.encoder.render(sent, None, {"thinking": True}) != OUTPUT_2
    sent, tools = as_vllm_gets_them(CASE_1)
    v32_style = renderer.encoder.render(sent, tools, {"thinking": True})
    assert v32_style.startswith(BOS + "\n\n## Tools") and v32_style != OUTPUT_1


# -- behaviours of the published encoder beyond the golden cases -------------------------------

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
THREE_TURNS = [
    SYSTEM,
    {"role": "user", "content": "One"},
    {"role": "assistant", "content": "First answer.", "reasoning_content": "First reasoning."},
    {"role": "user", "content": "Two"},
    {"role": "assistant", "content": "Second answer.", "reasoning_content": "Second reasoning."},
    {"role": "user", "content": "Three"},
]
HEAD = BOS + "You are a helpful assistant."


@pytest.mark.parametrize(
    ("messages", "arguments", "expected"),
    [
        ([SYSTEM, {"role": "user", "content": "Hello"}], {"thinking_mode": "chat"},
         HEAD + "<｜User｜>Hello<｜Assistant｜></think>"),
        ([SYSTEM, {"role": "user", "content": "Hello"}], {"thinking_mode": "thinking"},
         HEAD + "<｜User｜>Hello<｜Assistant｜><think>"),
        # "max" puts its paragraph before the first message, in thinking mode only.
        ([SYSTEM, {"role": "user", "content": "Hello"}],
         {"thinking_mode": "thinking", "reasoning_effort": "max"},
         BOS + MAX_EFFORT + "You are a helpful assistant.<｜User｜>Hello<｜Assistant｜><think>"),
        ([SYSTEM, {"role": "user", "content": "Hello"}],
         {"thinking_mode": "thinking", "reasoning_effort": "high"},
         HEAD + "<｜User｜>Hello<｜Assistant｜><think>"),
        ([SYSTEM, {"role": "user", "content": "Hello"}],
         {"thinking_mode": "chat", "reasoning_effort": "max"},
         HEAD + "<｜User｜>Hello<｜Assistant｜></think>"),
        (THREE_TURNS, {"thinking_mode": "thinking"},
         HEAD + "<｜User｜>One<｜Assistant｜></think>First answer." + EOS
         + "<｜User｜>Two<｜Assistant｜></think>Second answer." + EOS
         + "<｜User｜>Three<｜Assistant｜><think>"),
        (THREE_TURNS, {"thinking_mode": "thinking", "drop_thinking": False},
         HEAD + "<｜User｜>One<｜Assistant｜><think>First reasoning.</think>First answer." + EOS
         + "<｜User｜>Two<｜Assistant｜><think>Second reasoning.</think>Second answer." + EOS
         + "<｜User｜>Three<｜Assistant｜><think>"),
        (THREE_TURNS, {"thinking_mode": "chat"},
         HEAD + "<｜User｜>One<｜Assistant｜></think>First answer." + EOS
         + "<｜User｜>Two<｜Assistant｜></think>Second answer." + EOS
         + "<｜User｜>Three<｜Assistant｜></think>"),
        ([SYSTEM, {"role": "developer", "content": "Answer in one word."}],
         {"thinking_mode": "thinking"},
         HEAD + "<｜User｜>Answer in one word.<｜Assistant｜><think>"),
        # A developer turn before the last user turn is removed with the history's reasoning.
        ([SYSTEM, {"role": "developer", "content": "Answer in one word."},
          {"role": "assistant", "content": "Yes.", "reasoning_content": "Earlier reasoning."},
          {"role": "user", "content": "Again?"}],
         {"thinking_mode": "thinking"},
         HEAD + "Yes." + EOS + "<｜User｜>Again?<｜Assistant｜><think>"),
        ([SYSTEM, {"role": "latest_reminder", "content": "2026-08-11, London"},
          {"role": "user", "content": "Hello"}],
         {"thinking_mode": "thinking"},
         HEAD + "<｜latest_reminder｜>2026-08-11, London<｜User｜>Hello<｜Assistant｜><think>"),
        ([SYSTEM, {"role": "user", "content": "Weather?", "task": "action"}],
         {"thinking_mode": "chat"},
         HEAD + "<｜User｜>Weather?<｜Assistant｜></think><｜action｜>"),
        ([SYSTEM, {"role": "user", "content": "Weather?", "task": "query"}],
         {"thinking_mode": "chat"},
         HEAD + "<｜User｜>Weather?<｜query｜>"),
        ([SYSTEM, {"role": "user", "content": "Hello"},
          {"role": "assistant", "content": "Hi", "wo_eos": True}],
         {"thinking_mode": "chat", "add_default_bos_token": False},
         "You are a helpful assistant.<｜User｜>Hello<｜Assistant｜></think>Hi"),
        ([SYSTEM, {"role": "user", "content": "One"}, {"role": "user", "content": "Two"}],
         {"thinking_mode": "chat"},
         HEAD + "<｜User｜>One\n\nTwo<｜Assistant｜></think>"),
        ([{"role": "user", "content": "Two"}],
         {"thinking_mode": "chat", "context": [SYSTEM, {"role": "user", "content": "One"}]},
         "<｜User｜>Two<｜Assistant｜></think>"),
    ],
)  # fmt: skip
def test_published_behaviours(messages, arguments, expected):
    assert encode_messages(messages, **arguments) == expected


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"thinking_mode": "auto"}, "thinking_mode"),
        ({"thinking_mode": "thinking", "reasoning_effort": "low"}, "reasoning_effort"),
    ],
)
def test_what_the_encoder_refuses(arguments, message):
    with pytest.raises(ValueError, match=message):
        encode_messages([{"role": "user", "content": "Hi"}], **arguments)


def test_tool_results_join_one_user_turn_in_call_order():
    messages = [
        {"role": "user", "content": "Paris and Rome?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                call("get_weather", '{"city": "Paris"}', "c1"),
                call("get_weather", '{"city": "Rome"}', "c2"),
            ],
        },
        # Results arrive in the other order; a user message after them joins the same turn.
        {"role": "tool", "tool_call_id": "c2", "content": "21C"},
        {"role": "tool", "tool_call_id": "c1", "content": "18C"},
        {"role": "user", "content": "Thanks. Which is warmer?"},
    ]
    text = encode_messages(messages, "chat")
    calls = dsml(
        invoke("get_weather", ("city", "Paris", True)),
        invoke("get_weather", ("city", "Rome", True)),
    )
    assert text == (
        BOS + "<｜User｜>Paris and Rome?<｜Assistant｜></think>" + calls + EOS
        + "<｜User｜><tool_result>18C</tool_result>\n\n<tool_result>21C</tool_result>\n\n"
        "Thanks. Which is warmer?<｜Assistant｜></think>"
    )  # fmt: skip


def test_arguments_are_json_text_and_typed_per_value():
    arguments = '{"city": "Paris", "days": 3, "hourly": true, "fields": ["t", "wind"], "x": null}'
    messages = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "", "tool_calls": [call("forecast", arguments)]},
        {"role": "tool", "content": "ok"},
    ]
    assert dsml(
        invoke(
            "forecast",
            ("city", "Paris", True),
            ("days", "3", False),
            ("hourly", "true", False),
            ("fields", '["t", "wind"]', False),
            ("x", "null", False),
        )
    ) in encode_messages(messages, "chat")
    # Text that is not JSON is kept as one "arguments" value; an object (what a server that
    # parses arguments would hand over) is nested the same way, as the published file does.
    broken = [messages[0], {**messages[1], "tool_calls": [call("f", "not json")]}, messages[2]]
    assert invoke("f", ("arguments", "not json", True)) in encode_messages(broken, "chat")
    parsed = [messages[0], {**messages[1], "tool_calls": [call("f", {"a": 1})]}, messages[2]]
    assert invoke("f", ("arguments", '{"a": 1}', False)) in encode_messages(parsed, "chat")


# -- the server's call: thinking switch, efforts, tools placement, history reasoning -----------

HI = [{"role": "user", "content": "Hi"}]


@pytest.mark.parametrize(
    ("reasoning", "variables"),
    [
        ({"effort": "none"}, {"thinking": False}),
        ({"enabled": False}, {"thinking": False}),
        ({"effort": "minimal"}, {"thinking": True, "reasoning_effort": "high"}),
        ({"effort": "low"}, {"thinking": True, "reasoning_effort": "high"}),
        ({"effort": "medium"}, {"thinking": True, "reasoning_effort": "high"}),
        ({"effort": "high"}, {"thinking": True, "reasoning_effort": "high"}),
        ({"effort": "xhigh"}, {"thinking": True, "reasoning_effort": "max"}),
        ({"effort": "max"}, {"thinking": True, "reasoning_effort": "max"}),
        ({"max_tokens": 2000}, {"thinking": True}),
        (None, {}),
    ],
)
def test_openrouter_s_reasoning_maps_onto_thinking_and_the_encoder_s_efforts(reasoning, variables):
    assert DEEPSEEK_V4.template_variables(reasoning) == variables


OPENS = BOS + "<｜User｜>Hi<｜Assistant｜><think>"
CLOSES = BOS + "<｜User｜>Hi<｜Assistant｜></think>"


@pytest.mark.parametrize(
    ("variables", "expected"),
    [
        ({}, OPENS),  # the wrapper's default: thinking (vllm/tokenizers/deepseek_v4.py)
        ({"thinking": False}, CLOSES),
        ({"thinking": True}, OPENS),
        ({"enable_thinking": True}, OPENS),
        ({"thinking": True, "reasoning_effort": "high"}, OPENS),
        ({"thinking": True, "reasoning_effort": "max"}, OPENS.replace(BOS, BOS + MAX_EFFORT)),
        # Raw values through chat_template_kwargs are mapped as vLLM's wrapper maps them.
        ({"thinking": True, "reasoning_effort": "xhigh"}, OPENS.replace(BOS, BOS + MAX_EFFORT)),
        ({"thinking": True, "reasoning_effort": "medium"}, OPENS),
        ({"thinking": True, "reasoning_effort": "none"}, CLOSES),
        ({"thinking": False, "reasoning_effort": "max"}, CLOSES),
    ],
)
def test_the_thinking_switch_and_the_effort_paragraph(renderer, variables, expected):
    assert renderer.render(HI, None, variables).text == expected


def test_the_prompt_ids_are_v4_s(tokenizer, renderer):
    thinking = renderer.prompt_ids(renderer.render(HI, None, {"thinking": True}))
    assert thinking == [0, 128803, 23166, 128804, 128821]
    chat = renderer.prompt_ids(renderer.render(HI, None, {"thinking": False}))
    assert chat == [0, 128803, 23166, 128804, 128822]
    assert renderer.prompt_ids(renderer.render(HI, None, {})) == thinking  # vLLM's default
    for text, token_id in {
        EOS: 1,
        "｜DSML｜": 128825,
        "<｜latest_reminder｜>": 128828,
        "<｜action｜>": 128829,
        "<｜query｜>": 128830,
    }.items():
        assert encode(tokenizer, text) == [token_id]
    rendering = renderer.render(*as_vllm_gets_them(CASE_1), {"thinking": True})
    ids = renderer.prompt_ids(rendering)
    assert ids[0] == 0 and ids.count(128803) == 2 and ids.count(128804) == 2
    # Every ｜DSML｜ of the declaration and of the call is its one token; two turns end.
    assert ids.count(128825) == rendering.text.count("｜DSML｜") == 17
    assert ids[-1] == 1 and ids.count(1) == 2


def test_tools_join_the_leading_system_message_or_open_the_prompt(renderer):
    schema = (
        '{"name": "get_weather", "description": "Weather for a city", "parameters": {"type": '
        '"object", "properties": {"city": {"type": "string"}}}}'
    )
    alone = renderer.render(HI, TOOLS, {"thinking": True}).text
    assert alone == BOS + "\n\n" + tools_block(schema) + "<｜User｜>Hi<｜Assistant｜><think>"
    system = [{"role": "system", "content": "Be brief."}, *HI]
    joined = renderer.render(system, TOOLS, {"thinking": True}).text
    assert joined == (
        BOS + "Be brief.\n\n" + tools_block(schema) + "<｜User｜>Hi<｜Assistant｜><think>"
    )


HISTORY = [
    {"role": "user", "content": "q1"},
    {"role": "assistant", "content": "a1", "reasoning_content": "r1"},
    {"role": "user", "content": "q2"},
]
TOOL_HISTORY = [
    {"role": "user", "content": "Weather?"},
    {
        "role": "assistant",
        "content": "",
        "reasoning_content": "Need the tool.",
        "tool_calls": [call("get_weather", '{"city": "Paris"}', "c1")],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "18C"},
]
PARIS_CALL = dsml(invoke("get_weather", ("city", "Paris", True)))


@pytest.mark.parametrize(
    ("messages", "tools", "variables", "expected"),
    [
        # No tools: reasoning before the last user turn is dropped.
        (HISTORY, None, {"thinking": True},
         "<｜User｜>q1<｜Assistant｜></think>a1" + EOS + "<｜User｜>q2<｜Assistant｜><think>"),
        # Tools declared: every turn keeps its reasoning and its think block.
        (HISTORY, TOOLS, {"thinking": True},
         "<｜User｜>q1<｜Assistant｜><think>r1</think>a1" + EOS
         + "<｜User｜>q2<｜Assistant｜><think>"),
        (HISTORY, None, {"thinking": False}, "<｜User｜>q1<｜Assistant｜></think>a1" + EOS
         + "<｜User｜>q2<｜Assistant｜></think>"),
        # Tool results are a user turn: without declared tools the calling turn is history.
        (TOOL_HISTORY, None, {"thinking": True},
         "<｜User｜>Weather?<｜Assistant｜></think>" + PARIS_CALL + EOS
         + "<｜User｜><tool_result>18C</tool_result><｜Assistant｜><think>"),
        (TOOL_HISTORY, TOOLS, {"thinking": True},
         "<｜User｜>Weather?<｜Assistant｜><think>Need the tool.</think>" + PARIS_CALL + EOS
         + "<｜User｜><tool_result>18C</tool_result><｜Assistant｜><think>"),
    ],
)  # fmt: skip
def test_history_reasoning_is_kept_only_when_tools_are_declared(
    renderer, messages, tools, variables, expected
):
    text = renderer.render(messages, tools, variables).text
    assert text.endswith(expected)
    assert text.startswith(BOS + ("\n\n## Tools" if tools else "<｜User｜>"))


def test_detected_from_its_encoder_not_its_vocabulary(tokenizer):
    directory = build_fixture("deepseek-v4")
    assert (directory / "encoding" / "encoding_dsv4.py").is_file()
    config = json.loads((directory / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert "chat_template" not in config
    assert resolve_profile(tokenizer) is DEEPSEEK_V4
    assert detect_profile(tokenizer.get_vocab()).name == "deepseek-v3"
    assert detect_profile(tokenizer.get_vocab(), "encoding_dsv4.py") is DEEPSEEK_V4
    assert get_profile("deepseek-v4") is DEEPSEEK_V4


# -- DSML tool calls: the writer is the encoder's history shape and its parser's -------------


def test_the_written_calls_are_the_history_turn_and_parse_back():
    calls = [
        call("get_weather", '{"city": "Paris", "days": 3}', "c1"),
        call("search", '{"query": "a \\"quoted\\" <b>", "tags": ["x", "y"]}', "c2"),
    ]
    markup = DEEPSEEK_V4.tool_call_markups(calls, "Checking.")[0].text
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
    assert [c["function"]["name"] for c in message["tool_calls"]] == ["get_weather", "search"]
    assert [json.loads(c["function"]["arguments"]) for c in message["tool_calls"]] == [
        json.loads(c["function"]["arguments"]) for c in calls
    ]


@pytest.mark.parametrize(
    "text",
    [
        "R</think>x\n<｜DSML｜tool_calls>\n</｜DSML｜tool_calls>" + EOS,  # one newline: content
        "R</think>" + PARIS_CALL.replace("\n<｜DSML｜invoke", "<｜DSML｜invoke") + EOS,
        "R</think>" + PARIS_CALL + "\n" + EOS,
        "R</think>A",
    ],
)
def test_the_published_parser_reads_only_the_exact_shape(text):
    with pytest.raises(ValueError):
        parse_message_from_completion_text(text, "thinking")


# -- reconstruction: the golden shapes, thinking on and off, text path and server ids ----------

V4_FAMILIES = {
    "thinking": Family(
        "deepseek-v4", EOS, "", "</think>", markup=PARIS_CALL, variables=(("thinking", True),)
    ),
    "max": Family(
        "deepseek-v4",
        EOS,
        "",
        "</think>",
        markup=PARIS_CALL,
        variables=(("thinking", True), ("reasoning_effort", "max")),
    ),
    # Thinking off (vLLM's wrapper thinks by default): the prompt ends "</think>".
    "chat": Family(
        "deepseek-v4",
        EOS,
        "",
        "",
        thinks=False,
        markup=PARIS_CALL,
        variables=(("thinking", False),),
    ),
}


@pytest.mark.parametrize("shape_name", SHAPES)
@pytest.mark.parametrize("mode", V4_FAMILIES)
def test_golden_shapes(tokenizer, mode, shape_name):
    family, shape = V4_FAMILIES[mode], SHAPES[shape_name]
    if shape.reasoning == "" and not family.thinks:
        pytest.skip("a non-thinking turn has no reasoning to leave empty")
    stored, prompt_ids, truth = case(tokenizer, family, shape)
    if mode == "max":
        assert stored.rendering.text.startswith(BOS + "Reasoning Effort: Absolute maximum")
    text = reconstruct_sample(stored, tokenizer, DEEPSEEK_V4)
    assert text.input_ids == prompt_ids + truth
    assert (text.verified, text.reason, text.id_source) == (True, "ok", "text"), text.detail
    assert text.truncated == bool(shape.truncate)
    if shape.special_in_prompt:
        assert "special_text_in_prompt=" in text.detail
    exact = replace(stored.completion, prompt_token_ids=prompt_ids, completion_token_ids=truth)
    server = reconstruct_sample(replace(stored, completion=exact), tokenizer, DEEPSEEK_V4)
    assert server.input_ids == prompt_ids + truth
    assert (server.verified, server.reason, server.id_source) == (True, "ok", "server")
    assert server.text_check == "agrees"


def tool_turn(tokenizer, calls, generated, content, variables=(("thinking", True),)):
    """A stored tool-call turn whose counts are those of ``generated`` (the model's text)."""
    messages = [{"role": "user", "content": "Weather in Paris and Rome, and news?"}]
    tools = TOOLS
    rendering = ChatRenderer(tokenizer, DEEPSEEK_V4).render(messages, tools, dict(variables))
    prompt_ids = encode(tokenizer, rendering.text)
    truth = encode(tokenizer, generated)
    usage = {"prompt_tokens": len(prompt_ids), "completion_tokens": len(truth)}
    reasoning = generated.partition("</think>")[0] if dict(variables).get("thinking") else None
    completion = Completion(
        "g", "P", "m", reasoning, content, calls, "tool_calls", "tool_calls", usage
    )
    stored = StoredCompletion("k", "s", 0, messages, tools, completion, rendering=rendering)
    return stored, prompt_ids + truth


def test_two_calls_with_typed_values_are_proven_from_text(tokenizer):
    # vLLM's parser hands back the JSON it builds (", " and ": "), content up to the markup.
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
        sample = reconstruct_sample(stored, tokenizer, DEEPSEEK_V4)
        assert sample.input_ids == ids
        assert (sample.verified, sample.reason) == (True, "ok"), sample.detail


def test_a_call_without_content_in_chat_mode(tokenizer):
    calls = [call("get_weather", '{"city": "Paris"}', "call_a")]
    generated = PARIS_CALL + EOS
    stored, ids = tool_turn(tokenizer, calls, generated, None, variables=(("thinking", False),))
    assert stored.rendering.text.endswith("<｜Assistant｜></think>")
    sample = reconstruct_sample(stored, tokenizer, DEEPSEEK_V4)
    assert sample.input_ids == ids
    assert (sample.verified, sample.reason) == (True, "ok"), sample.detail


def test_a_container_value_s_spelling_is_not_proven(tokenizer):
    # The model wrote the list compactly; the parser's JSON is spaced: the compact reading
    # matches the count, but a count cannot prove a spelling.
    calls = [call("search", '{"tags": ["x", "y"]}', "call_a")]
    generated = "R</think>" + dsml(invoke("search", ("tags", '["x","y"]', False))) + EOS
    stored, ids = tool_turn(tokenizer, calls, generated, None)
    sample = reconstruct_sample(stored, tokenizer, DEEPSEEK_V4)
    assert sample.input_ids == ids
    assert (sample.verified, sample.reason) == (False, "tool_arguments_reserialised")


# -- the simulated model and simulated runs ------------------------------------------------------


@pytest.mark.parametrize(
    "variables",
    [{"thinking": False}, {"thinking": True}, {"thinking": True, "reasoning_effort": "max"}],
)
def test_the_simulated_model_writes_the_v4_layout(tokenizer, variables):
    from draftgen.simulator import wire
    from draftgen.simulator.model import Plan, generate, is_canonical, prompt_layout, token_table

    table = token_table("fixture:deepseek-v4", DEEPSEEK_V4)
    checked = 0
    for seed in range(12):
        rng = random.Random(seed)
        tools = TOOLS if seed % 2 else None
        plan_call = {"id": "call_0", "name": "get_weather", "arguments": '{"city": "Paris"}'}
        plan = Plan(total_tokens=40, reasoning_share=0.4, tool_call=plan_call if tools else None)
        rendering = ChatRenderer(tokenizer, DEEPSEEK_V4).render(USER, tools, variables)
        output = generate(table, prompt_layout(rendering.text, DEEPSEEK_V4), plan, rng, None)
        text = "".join(s.text for s in output.sections)
        assert ("</think>" in text) == variables["thinking"]
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
        sample = reconstruct_sample(stored, tokenizer, DEEPSEEK_V4)
        assert sample.input_ids == prompt_ids + output.ids, (seed, output.sections)
        assert sample.reason == "ok", sample.detail
    assert checked >= 6


def simulated_run(tmp_path, monkeypatch, backend, effort, quirks=None, faults=None, kwargs=None):
    """(ground truth by generation id, exported rows, text_check by key) of a run of 16 rows:
    half with tools, some with a system message the tools join, some of two turns."""
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
        row = {"id": f"r{i}", "messages": messages}
        if i % 2 == 0:
            row["tools"] = TOOLS
        rows.append(row)
    config = {"seed": 7, "max_tokens": 60, "dialect": backend, "tool_call_rate": 0.8}
    config.update(quirks=quirks or {}, faults=faults or {})
    truth, exported = run_rows(
        tmp_path,
        monkeypatch,
        "deepseek-v4",
        rows,
        config,
        backend=backend,
        reasoning_effort=effort,
        chat_template_kwargs=kwargs,
    )
    return truth, exported, text_checks(tmp_path)


@pytest.mark.parametrize("kwargs", [{"thinking": False}, None])
def test_simulated_vllm_run_exports_ground_truth(tmp_path, monkeypatch, kwargs):
    # vLLM takes the switch as chat_template_kwargs; none leaves the wrapper's default (thinking).
    truth, exported, checks = simulated_run(tmp_path, monkeypatch, "vllm", None, kwargs=kwargs)
    assert len(exported) == len(truth) >= 16
    tool_calls = agree = 0
    for row in exported:
        record = truth[row["generation_id"]]
        assert row["input_ids"] == record["prompt_ids"] + record["completion_ids"]
        assert (row["verified"], row["verify_reason"], row["id_source"]) == (True, "ok", "ids")
        # The prompt ends <think> with thinking on (the wrapper's default), </think> without.
        assert record["prompt_ids"][-1] == (128822 if kwargs else 128821)
        tool_calls += record["finish_reason"] == "tool_calls"
        if record["text_exact"]:
            assert checks[row["key"]] == "agrees", record
            agree += 1
    assert tool_calls >= 3 and agree >= 8


@pytest.mark.parametrize("effort", ["max", "none"])
def test_simulated_text_run_never_verifies_a_wrong_sample(tokenizer, tmp_path, monkeypatch, effort):
    """The OpenRouter dialect with faults and provider quirks, thinking on (at max effort: the
    paragraph) and off: what the text path proves equals what the model generated."""
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
        if effort == "none":
            assert record["reasoning"] is None
        else:
            assert decode(tokenizer, record["prompt_ids"]).startswith(BOS + MAX_EFFORT)
        if row["verified"]:
            verified += 1
            assert row["input_ids"] == record["prompt_ids"] + record["completion_ids"], record
        else:
            assert not record["text_exact"], (row["verify_reason"], record)
    assert verified >= 10 and quirked >= 3 and tool_calls >= 3

"""DeepSeek-V3.2's chat encoder (the fixture's encoding/encoding_dsv32.py): exact prompt texts.

The golden case is DeepSeek's own (encoding/test_input.json -> encoding/test_output.txt in the
DeepSeek-V3.2 model repository, commit c69397ec; MIT), restated here.
"""

from __future__ import annotations

import json

import pytest

from draftgen_testing.fixture_code.encoding_dsv32 import encode_messages

BOS = "<｜begin▁of▁sentence｜>"
EOS = "<｜end▁of▁sentence｜>"

# The tool declaration text up to the schemas, as DeepSeek's golden output has it.
TOOLS_HEAD = (
    "## Tools\n\n"
    "You have access to a set of tools you can use to answer the user's question.\n"
    'You can invoke functions by writing a "<｜DSML｜function_calls>" block like the following as '
    "part of your reply to the user:\n"
    "<｜DSML｜function_calls>\n"
    '<｜DSML｜invoke name="$FUNCTION_NAME">\n'
    '<｜DSML｜parameter name="$PARAMETER_NAME" string="true|false">$PARAMETER_VALUE'
    "</｜DSML｜parameter>\n"
    "...\n"
    "</｜DSML｜invoke>\n"
    '<｜DSML｜invoke name="$FUNCTION_NAME2">\n'
    "...\n"
    "</｜DSML｜invoke>\n"
    "</｜DSML｜function_calls>\n\n"
    "String and scalar parameters should be specified as is without any escaping or quotes, while "
    'lists and objects should use JSON format. The "string" attribute should be set to "true" for '
    'string type parameters and "false" for other types (numbers, booleans, arrays, objects).\n\n'
    "If the thinking_mode is enabled, then after function results you should strongly consider "
    "outputting a thinking block. Here is an example:\n\n"
    "<｜DSML｜function_calls>\n...\n</｜DSML｜function_calls>\n\n"
    "<function_results>\n...\n</function_results>\n\n"
    "<think>...thinking about results</think>\n\n"
    "Here are the functions available in JSONSchema format:\n"
    "<functions>\n"
)


def tool(name, description, properties, required):
    parameters = {"type": "object", "properties": properties, "required": required}
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }


def call(call_id, name, arguments):
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


def result(call_id, payload):
    return {"tool_call_id": call_id, "role": "tool", "content": json.dumps(payload)}


def invoke(name, **strings):
    params = "".join(
        f'<｜DSML｜parameter name="{key}" string="true">{value}</｜DSML｜parameter>\n'
        for key, value in strings.items()
    )
    return f'<｜DSML｜invoke name="{name}">\n{params}</｜DSML｜invoke>\n'


def calls_block(*invocations):
    return "\n\n<｜DSML｜function_calls>\n" + "".join(invocations) + "</｜DSML｜function_calls>"


def results_block(*payloads):
    return (
        "\n\n<function_results>\n"
        + "".join(f"<result>{json.dumps(p)}</result>\n" for p in payloads)
        + "</function_results>\n\n"
    )


# --- DeepSeek's golden case -----------------------------------------------------------------

GOLDEN_TOOLS = [
    tool(
        "get_datetime",
        "Get the current date and time",
        {"timezone": {"type": "string", "description": "The timezone, e.g. America/New_York, UTC"}},
        ["timezone"],
    ),
    tool(
        "get_weather",
        "Get the weather for a specific date and location",
        {
            "location": {
                "type": "string",
                "description": "The city name, e.g. New York, San Francisco",
            },
            "date": {"type": "string", "description": "The date in YYYY-MM-DD format"},
        },
        ["location", "date"],
    ),
]
TODAY = {"current_date": "2024-01-15", "current_time": "14:30:00", "timezone": "America/New_York"}


def forecast(city, date, high, low, weather, humidity):
    return {
        "location": city,
        "date": date,
        "temperature_high": high,
        "temperature_low": low,
        "weather": weather,
        "humidity": humidity,
    }


SF_16 = forecast("San Francisco", "2024-01-16", "65", "55", "partly cloudy", "70%")
NY_16 = forecast("New York", "2024-01-16", "28", "15", "sunny", "35%")
SF_17 = forecast("San Francisco", "2024-01-17", "68", "58", "light rain", "85%")
NY_17 = forecast("New York", "2024-01-17", "32", "22", "cloudy", "50%")
ANSWER_16 = (
    "Based on the forecast, here's tomorrow's weather (January 16, 2024):\n\n"
    "**San Francisco**:\n- Weather: Partly cloudy\n- High: 65°F\n- Low: 55°F\n- Humidity: 70%\n\n"
    "**New York**:\n- Weather: Sunny\n- High: 28°F\n- Low: 15°F\n- Humidity: 35%\n\n"
    "San Francisco will be mild and partly cloudy, while New York will be cold but sunny. "
    "If you're in New York, dress warmly!"
)
ANSWER_17 = (
    "Here's the forecast for the day after tomorrow (January 17, 2024):\n\n"
    "**San Francisco**:\n- Weather: Light rain\n- High: 68°F\n- Low: 58°F\n- Humidity: 85%\n\n"
    "**New York**:\n- Weather: Cloudy\n- High: 32°F\n- Low: 22°F\n- Humidity: 50%\n\n"
    "San Francisco will have light rain with temperatures rising slightly, so bring an umbrella. "
    "New York will be a bit warmer but still cold and cloudy, so continue to bundle up."
)
REASONING_3 = (
    "User is now asking about the day after tomorrow, which is 2024-01-17. I can query directly "
    "since I already know today's date."
)
REASONING_4 = "Got the weather data for the day after tomorrow. Let me format this for the user."
REASONING_1 = (
    "Now I know today is 2024-01-15, so tomorrow is 2024-01-16. Let me query the weather for San "
    "Francisco and New York."
)


def golden_messages():
    return [
        {"role": "system", "content": "You are a helpful Assistant.", "tools": GOLDEN_TOOLS},
        {"role": "user", "content": "What's the weather tomorrow in San Francisco and New York?"},
        {
            "role": "assistant",
            "reasoning_content": "User is asking about tomorrow's weather. I need to first get "
            "the current date to calculate tomorrow's date.",
            "tool_calls": [call("c1", "get_datetime", {"timezone": "America/New_York"})],
        },
        result("c1", TODAY),
        {
            "role": "assistant",
            "reasoning_content": REASONING_1,
            "tool_calls": [
                call("c2", "get_weather", {"location": "San Francisco", "date": "2024-01-16"}),
                call("c3", "get_weather", {"location": "New York", "date": "2024-01-16"}),
            ],
        },
        result("c2", SF_16),
        result("c3", NY_16),
        {
            "role": "assistant",
            "reasoning_content": "Retrieved weather data for both cities. Now I'll format a nice "
            "response for the user.",
            "content": ANSWER_16,
        },
        {"role": "user", "content": "Thanks! What about the day after tomorrow?"},
        {
            "role": "assistant",
            "reasoning_content": REASONING_3,
            "tool_calls": [
                call("c4", "get_weather", {"location": "San Francisco", "date": "2024-01-17"}),
                call("c5", "get_weather", {"location": "New York", "date": "2024-01-17"}),
            ],
        },
        result("c4", SF_17),
        result("c5", NY_17),
        {"role": "assistant", "reasoning_content": REASONING_4, "content": ANSWER_17},
    ]


GOLDEN_SCHEMAS = (
    '{"name": "get_datetime", "description": "Get the current date and time", "parameters": '
    '{"type": "object", "properties": {"timezone": {"type": "string", "description": "The '
    'timezone, e.g. America/New_York, UTC"}}, "required": ["timezone"]}}\n'
    '{"name": "get_weather", "description": "Get the weather for a specific date and location", '
    '"parameters": {"type": "object", "properties": {"location": {"type": "string", '
    '"description": "The city name, e.g. New York, San Francisco"}, "date": {"type": "string", '
    '"description": "The date in YYYY-MM-DD format"}}, "required": ["location", "date"]}}\n'
)
GOLDEN_CALL_2 = calls_block(
    invoke("get_weather", location="San Francisco", date="2024-01-16"),
    invoke("get_weather", location="New York", date="2024-01-16"),
)
GOLDEN_OUTPUT = (
    BOS
    + "You are a helpful Assistant.\n\n"
    + TOOLS_HEAD
    + GOLDEN_SCHEMAS
    + "</functions>\n"
    + "<｜User｜>What's the weather tomorrow in San Francisco and New York?<｜Assistant｜></think>"
    + calls_block(invoke("get_datetime", timezone="America/New_York"))
    + EOS
    + results_block(TODAY)
    + "</think>"
    + GOLDEN_CALL_2
    + EOS
    + results_block(SF_16, NY_16)
    + "</think>"
    + ANSWER_16
    + EOS
    + "<｜User｜>Thanks! What about the day after tomorrow?<｜Assistant｜><think>"
    + REASONING_3
    + "</think>"
    + calls_block(
        invoke("get_weather", location="San Francisco", date="2024-01-17"),
        invoke("get_weather", location="New York", date="2024-01-17"),
    )
    + EOS
    + results_block(SF_17, NY_17)
    + "<think>"
    + REASONING_4
    + "</think>"
    + ANSWER_17
    + EOS
)


def test_deepseek_golden_case():
    assert encode_messages(golden_messages(), "thinking") == GOLDEN_OUTPUT


def test_golden_helpers_spell_the_published_markup():
    # Guards the helpers above: one block written out by hand, as the golden file has it.
    assert calls_block(invoke("get_datetime", timezone="America/New_York")) == (
        "\n\n<｜DSML｜function_calls>\n"
        '<｜DSML｜invoke name="get_datetime">\n'
        '<｜DSML｜parameter name="timezone" string="true">America/New_York</｜DSML｜parameter>\n'
        "</｜DSML｜invoke>\n"
        "</｜DSML｜function_calls>"
    )
    assert results_block(TODAY) == (
        "\n\n<function_results>\n"
        '<result>{"current_date": "2024-01-15", "current_time": "14:30:00", "timezone": '
        '"America/New_York"}</result>\n'
        "</function_results>\n\n"
    )


def test_context_renders_only_the_new_messages_and_no_bos():
    # The published test's incremental step: message 4 after messages 0-3. Its last user message
    # is message 1, so this assistant turn keeps its reasoning.
    messages = golden_messages()
    text = encode_messages([messages[4]], "thinking", context=messages[:4])
    assert text == REASONING_1 + "</think>" + GOLDEN_CALL_2 + EOS


# --- chat and thinking, system, history -------------------------------------------------------

HISTORY = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Q1"},
    {"role": "assistant", "content": "A1", "reasoning_content": "r1"},
    {"role": "user", "content": "Q2"},
]


def test_chat_mode_closes_thinking_after_every_user_turn():
    assert encode_messages(HISTORY, "chat") == (
        f"{BOS}Be brief.<｜User｜>Q1<｜Assistant｜></think>A1{EOS}"
        "<｜User｜>Q2<｜Assistant｜></think>"
    )


def test_thinking_mode_opens_thinking_after_the_last_user_turn_only():
    assert encode_messages(HISTORY, "thinking") == (
        f"{BOS}Be brief.<｜User｜>Q1<｜Assistant｜></think>A1{EOS}"
        "<｜User｜>Q2<｜Assistant｜><think>"
    )


def test_history_reasoning_is_never_rendered_drop_thinking_or_not():
    # DeepSeek's README example; drop_thinking=False gives the same text.
    messages = [
        {"role": "user", "content": "hello"},
        {
            "role": "assistant",
            "content": "Hello! I am DeepSeek.",
            "reasoning_content": "thinking...",
        },
        {"role": "user", "content": "1+1=?"},
    ]
    expected = (
        f"{BOS}<｜User｜>hello<｜Assistant｜></think>Hello! I am DeepSeek.{EOS}"
        "<｜User｜>1+1=?<｜Assistant｜><think>"
    )
    assert encode_messages(messages, "thinking", drop_thinking=True) == expected
    assert encode_messages(messages, "thinking", drop_thinking=False) == expected


def test_reasoning_after_the_last_user_turn_is_rendered_in_thinking_mode_only():
    turn = [*HISTORY, {"role": "assistant", "content": "A2", "reasoning_content": "r2"}]
    assert encode_messages(turn, "thinking").endswith(f"<｜Assistant｜><think>r2</think>A2{EOS}")
    assert encode_messages(turn, "chat").endswith(f"<｜Assistant｜></think>A2{EOS}")


def test_a_thinking_turn_after_the_last_user_needs_reasoning_or_tool_calls():
    with pytest.raises(ValueError, match=r"messages\[4\]: in thinking mode an assistant turn"):
        encode_messages([*HISTORY, {"role": "assistant", "content": "A2"}], "thinking")


def test_bos_switch():
    user = [{"role": "user", "content": "Hi"}]
    assert encode_messages(user, "chat") == f"{BOS}<｜User｜>Hi<｜Assistant｜></think>"
    assert encode_messages(user, "chat", add_default_bos_token=False) == (
        "<｜User｜>Hi<｜Assistant｜></think>"
    )


def test_system_content_and_user_content_are_verbatim():
    messages = [
        {"role": "system", "content": "  edges \n"},
        {"role": "user", "content": "\n<｜User｜> 中文 "},
    ]
    assert encode_messages(messages, "chat") == (
        f"{BOS}  edges \n<｜User｜>\n<｜User｜> 中文 <｜Assistant｜></think>"
    )


# --- tools --------------------------------------------------------------------------------------

WEATHER = tool("get_weather", "Weather for a city", {"city": {"type": "string"}}, ["city"])
WEATHER_SCHEMA = (
    '{"name": "get_weather", "description": "Weather for a city", "parameters": {"type": '
    '"object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}'
)


def test_tools_and_response_format_are_declared_after_the_system_prompt():
    schema = {"type": "json_schema", "json_schema": {"name": "r", "schema": {"type": "object"}}}
    messages = [
        {"role": "system", "content": "Sys", "tools": [WEATHER], "response_format": schema},
        {"role": "user", "content": "Hi"},
    ]
    assert encode_messages(messages, "chat") == (
        f"{BOS}Sys\n\n{TOOLS_HEAD}{WEATHER_SCHEMA}\n</functions>\n\n\n## Response Format:\n\n"
        "You MUST strictly adhere to the following schema to reply:\n"
        '{"type": "json_schema", "json_schema": {"name": "r", "schema": {"type": "object"}}}'
        "<｜User｜>Hi<｜Assistant｜></think>"
    )


def test_tools_on_an_empty_system_message_start_with_a_blank_line():
    # What a server that inserts {"role": "system", "tools": ...} renders.
    messages = [{"role": "system", "tools": [WEATHER]}, {"role": "user", "content": "Hi"}]
    assert encode_messages(messages, "thinking") == (
        f"{BOS}\n\n{TOOLS_HEAD}{WEATHER_SCHEMA}\n</functions>\n<｜User｜>Hi<｜Assistant｜><think>"
    )


def test_a_developer_message_is_a_user_turn_carrying_the_declarations():
    messages = [{"role": "developer", "content": "Find it.", "tools": [WEATHER]}]
    assert encode_messages(messages, "thinking") == (
        f"{BOS}<｜User｜>\n\n{TOOLS_HEAD}{WEATHER_SCHEMA}\n</functions>\n\n\n"
        "# The user's message is: Find it.<｜Assistant｜><think>"
    )


def test_developer_turns_before_the_last_user_are_refused_when_dropping_thinking():
    messages = [
        {"role": "developer", "content": "D"},
        {"role": "assistant", "content": "A"},
        {"role": "user", "content": "U"},
    ]
    with pytest.raises(ValueError, match=r"messages\[0\] has role 'developer'"):
        encode_messages(messages, "thinking")
    assert encode_messages(messages, "thinking", drop_thinking=False) == (
        f"{BOS}<｜User｜>\n\n# The user's message is: D<｜Assistant｜></think>A{EOS}"
        "<｜User｜>U<｜Assistant｜><think>"
    )


MIXED_ARGS = {
    "city": 'Paris "Île"\n',
    "days": 3,
    "ratio": 0.5,
    "flag": True,
    "none": None,
    "list": [1, "a"],
    "obj": {"k": "é"},
}


def test_tool_call_parameters_are_typed_strings_raw_others_json():
    messages = [
        {"role": "user", "content": "Go"},
        {"role": "assistant", "content": "Checking.", "tool_calls": [call("x", "f", MIXED_ARGS)]},
    ]
    assert encode_messages(messages, "chat") == (
        f"{BOS}<｜User｜>Go<｜Assistant｜></think>Checking.\n\n<｜DSML｜function_calls>\n"
        '<｜DSML｜invoke name="f">\n'
        '<｜DSML｜parameter name="city" string="true">Paris "Île"\n</｜DSML｜parameter>\n'
        '<｜DSML｜parameter name="days" string="false">3</｜DSML｜parameter>\n'
        '<｜DSML｜parameter name="ratio" string="false">0.5</｜DSML｜parameter>\n'
        '<｜DSML｜parameter name="flag" string="false">true</｜DSML｜parameter>\n'
        '<｜DSML｜parameter name="none" string="false">null</｜DSML｜parameter>\n'
        '<｜DSML｜parameter name="list" string="false">[1, "a"]</｜DSML｜parameter>\n'
        '<｜DSML｜parameter name="obj" string="false">{"k": "é"}</｜DSML｜parameter>\n'
        f"</｜DSML｜invoke>\n</｜DSML｜function_calls>{EOS}"
    )


def test_a_call_without_arguments_keeps_the_empty_line():
    empty = {"type": "function", "function": {"name": "now", "arguments": "{}"}}
    messages = [{"role": "user", "content": "t?"}, {"role": "assistant", "tool_calls": [empty]}]
    assert encode_messages(messages, "chat").endswith(
        f'</think>\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name="now">\n\n'
        f"</｜DSML｜invoke>\n</｜DSML｜function_calls>{EOS}"
    )


def test_arguments_must_be_json_text_as_the_published_encoder_reads_them():
    parsed = {"type": "function", "function": {"name": "f", "arguments": {"city": "Paris"}}}
    messages = [{"role": "user", "content": "Go"}, {"role": "assistant", "tool_calls": [parsed]}]
    with pytest.raises(TypeError, match="tool call arguments must be a JSON text, not dict"):
        encode_messages(messages, "chat")


def tool_turn(*results):
    calls = [call("a", "f", {"q": "1"}), call("b", "f", {"q": "2"})]
    return [
        {"role": "user", "content": "Go"},
        {"role": "assistant", "reasoning_content": "plan", "tool_calls": calls},
        *({"role": "tool", "tool_call_id": i, "content": c} for i, c in results),
    ]


TOOL_TURN_CALLS = (
    '\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name="f">\n'
    '<｜DSML｜parameter name="q" string="true">1</｜DSML｜parameter>\n</｜DSML｜invoke>\n'
    '<｜DSML｜invoke name="f">\n'
    '<｜DSML｜parameter name="q" string="true">2</｜DSML｜parameter>\n</｜DSML｜invoke>\n'
    f"</｜DSML｜function_calls>{EOS}"
)


def test_tool_results_continue_the_turn_and_reopen_thinking():
    messages = tool_turn(("a", "one"), ("b", "two"))
    results = (
        "\n\n<function_results>\n<result>one</result>\n<result>two</result>\n</function_results>"
    )
    assert encode_messages(messages, "thinking") == (
        f"{BOS}<｜User｜>Go<｜Assistant｜><think>plan</think>{TOOL_TURN_CALLS}{results}\n\n<think>"
    )
    assert encode_messages(messages, "chat") == (
        f"{BOS}<｜User｜>Go<｜Assistant｜></think>{TOOL_TURN_CALLS}{results}\n\n</think>"
    )


def test_results_stay_open_until_every_call_is_answered():
    assert encode_messages(tool_turn(("a", "one")), "thinking").endswith(
        f"{TOOL_TURN_CALLS}\n\n<function_results>\n<result>one</result>"
    )


def test_more_results_than_calls_is_an_error():
    expected = r"messages\[4\] is tool result 3 but messages\[1\] made 2 tool call"
    with pytest.raises(ValueError, match=expected):
        encode_messages(tool_turn(("a", "1"), ("b", "2"), ("c", "3")), "chat")


def test_invalid_thinking_mode_and_role():
    user = [{"role": "user", "content": "Hi"}]
    with pytest.raises(ValueError, match="thinking_mode must be 'chat' or 'thinking', not 'on'"):
        encode_messages(user, "on")
    with pytest.raises(ValueError, match=r"messages\[0\] has role 'function'"):
        encode_messages([{"role": "function", "content": "x"}], "chat")

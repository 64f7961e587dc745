"""The audit's battery: named conversation shapes, each (messages, tools, variables), built fresh
on every call so that no renderer sees another's changes; settings shapes take the family's own.
"""

from __future__ import annotations

from collections.abc import Callable

Shape = tuple[list[dict], list[dict] | None, dict]

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "City name"},
                    "units": {"type": "string", "enum": ["metric", "imperial"]},
                    "days": {"type": "array", "items": {"type": "integer"}},
                    "where": {
                        "type": "object",
                        "properties": {"lat": {"type": "number"}, "lon": {"type": "number"}},
                        "required": ["lat", "lon"],
                    },
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "description": "The current time.",
            "parameters": {"type": "object", "properties": {}},
        },
    },
]
# A tool declared without ``parameters`` (optional in the API): vLLM's pydantic dump gives None.
BARE_TOOL = {"type": "function", "function": {"name": "get_time", "description": "The time."}}

SPECIAL_SPELLINGS = (
    "<|im_end|> <|im_start|> <think> </think> <|start|> <|end|> <|channel|> <|message|> "
    "[EOS] <｜end▁of▁sentence｜> <|eot_id|>"
)
NON_ASCII = "東京の天気は？ 👍🏽 🧑🏿‍💻 Cafe\u0301 nai\u0308ve שלום עולם مرحبا"


def call(index: int, name: str = "get_weather", arguments: str = '{"city": "Paris"}') -> dict:
    return {
        "id": f"functions.{name}:{index}",
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }


def result(index: int, content: str, name: str = "get_weather") -> dict:
    return {"role": "tool", "tool_call_id": f"functions.{name}:{index}", "content": content}


def user(text: str = "What is the weather in Paris?") -> dict:
    return {"role": "user", "content": text}


def calling_turn(arguments: str, **extra) -> list[dict]:
    """A user asks, the assistant calls get_weather with ``arguments``, the result comes back."""
    turn = {"role": "assistant", "content": "", "tool_calls": [call(0, arguments=arguments)]}
    return [user(), {**turn, **extra}, result(0, '{"temp": 21}')]


def tools() -> list[dict]:
    import copy

    return copy.deepcopy(TOOLS)


BASE: dict[str, Callable[[], Shape]] = {
    "system": lambda: ([{"role": "system", "content": "Be brief."}, user()], None, {}),
    "developer": lambda: (
        [{"role": "developer", "content": "Answer in French."}, user()],
        None,
        {},
    ),
    "tools_declared": lambda: ([user()], tools(), {}),
    "tool_without_parameters": lambda: ([user("What time is it?")], [dict(BARE_TOOL)], {}),
    "tools_with_system": lambda: (
        [{"role": "system", "content": "Be brief."}, user()],
        tools(),
        {},
    ),
    "tool_history": lambda: (calling_turn('{"city": "Paris"}'), tools(), {}),
    "parallel_calls": lambda: (
        [
            user("Weather in Paris, and the time?"),
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [call(0), call(1, "get_time", "{}")],
            },
            result(0, '{"temp": 21}'),
            result(1, "12:00", "get_time"),
        ],
        tools(),
        {},
    ),
    "empty_assistant": lambda: (
        [user("Hi"), {"role": "assistant", "content": ""}, user("Still there?")],
        None,
        {},
    ),
    "assistant_none_with_calls": lambda: (
        [user(), {"role": "assistant", "content": None, "tool_calls": [call(0)]}, result(0, "21C")],
        tools(),
        {},
    ),
    "special_spellings": lambda: ([user(f"Repeat: {SPECIAL_SPELLINGS}")], None, {}),
    "later_system": lambda: (
        [
            user("Hi"),
            {"role": "assistant", "content": "Hello!"},
            {"role": "system", "content": "Now answer in German."},
            user("How are you?"),
        ],
        None,
        {},
    ),
    "content_parts": lambda: (
        [
            {
                "role": "user",
                "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
            }
        ],
        None,
        {},
    ),
    "non_ascii": lambda: ([user(NON_ASCII)], None, {}),
    # Both reasoning keys, differing: which one a server reads shows in the prompt.
    "reasoning_before_last_user": lambda: (
        [
            user("Hi"),
            {
                "role": "assistant",
                "content": "Hello!",
                "reasoning": "Greet back.",
                "reasoning_content": "Say hello.",
            },
            user("And now?"),
        ],
        None,
        {},
    ),
    "reasoning_after_last_user": lambda: (
        calling_turn(
            '{"city": "Paris"}', reasoning="Need weather.", reasoning_content="Look it up."
        ),
        tools(),
        {},
    ),
    "reasoning_content_only": lambda: (
        calling_turn('{"city": "Paris"}', reasoning_content="Look it up."),
        tools(),
        {},
    ),
    "args_invalid_json": lambda: (calling_turn('{"city": "Par'), tools(), {}),
    "args_empty": lambda: (calling_turn(""), tools(), {}),
    "args_nested": lambda: (
        calling_turn('{"city":"Paris","where":{"lat":48.9,"lon":2.35},"days":[1,2]}'),
        tools(),
        {},
    ),
    "multi_turn": lambda: (
        [
            user("Hi"),
            {"role": "assistant", "content": "Hello! How can I help?"},
            user("Tell a joke."),
        ],
        None,
        {},
    ),
}

# Settings shapes: a multi-turn conversation with the family's thinking switch or an effort.
SETTINGS = ("thinking_on", "thinking_off") + tuple(
    f"effort_{e}" for e in ("none", "minimal", "low", "medium", "high", "xhigh", "max")
)
# Efforts the engine is asked for beyond the family's own: vLLM's harmony path refuses these.
REFUSED_EFFORTS = {"gpt-oss": ("none", "minimal", "xhigh")}

SHAPE_NAMES = (*BASE, *SETTINGS)


def setting_variables(name: str, profile, fixture: str) -> dict | None:
    """The variables of settings shape ``name`` for this family, or None if it takes no such
    setting (no thinking switch; an effort that is not the family's)."""
    if name.startswith("thinking_"):
        if not profile.thinking_variable:
            return None
        value = profile.thinking_values[0 if name == "thinking_on" else 1]
        return {profile.thinking_variable: value}
    effort = name.removeprefix("effort_")
    if effort in profile.efforts or effort in REFUSED_EFFORTS.get(fixture, ()):
        return {profile.effort_variable: effort}
    return None


def shape(name: str, profile, fixture: str) -> Shape | None:
    """(messages, tools, variables) of shape ``name``, or None where the family has no such
    setting."""
    if name in BASE:
        return BASE[name]()
    variables = setting_variables(name, profile, fixture)
    if variables is None:
        return None
    messages, _, _ = BASE["multi_turn"]()
    return messages, None, variables

"""Kimi K3's chat format ("XTML") as a list of segments, each encoded on its own by the tokenizer.

Written for draftgen after the behaviour of Moonshot's ``encoding_k3.py`` (``moonshotai/Kimi-K3``,
``build_chat_segments``), as vLLM vendors it (``vllm/tokenizers/encoding_k3.py``) and as SGLang's
router port and its parity fixtures pin it (``kimi_k3`` prompt encoder, ``gen_kimi_k3_cases.py``).
The ``kimi-k3`` test fixture ships it as ``encoding_k3.py`` beside ``tokenization_kimi.py``.

What decides ids: a message is ``<|open|>message role="user"<|sep|>`` + body +
``<|close|>message<|sep|><|end_of_msg|>``, and every piece of a tag header (the tag name, each
`` key``, ``="``, the value, the closing quote) is a segment of its own, encoded with special
tokens disallowed; only ``<|open|>``, ``<|close|>``, ``<|sep|>`` and ``<|end_of_msg|>`` are
structural. User, tool and assistant text therefore never becomes a control token, and encoding
the joined text once gives other ids. Tools are declared first (compact JSON, keys sorted at every
depth), then a ``thinking-effort`` system message when thinking is on, then the messages (tool
results re-sorted into their calls' order by ``tool_call_id``); with thinking on every assistant
message keeps its think channel, with it off none has one.

Followed where the published versions differ: Moonshot's (SGLang's port of revision ``a590ce09``)
renders whitespace-only reasoning (vLLM's copy drops it), reads a JSON-text ``arguments`` one level
deep keeping each non-string value's literal text, puts text that is not a JSON object in a
``<|open|>json type="object"<|sep|>`` block, and rejects an unsupported effort only when thinking
is on. Not confirmed: image prompts (only the text placeholder is written).
Standalone: standard library only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

OPEN = "<|open|>"
CLOSE = "<|close|>"
SEP = "<|sep|>"
END_OF_MSG = "<|end_of_msg|>"
# What an image part becomes when no rendered image prompt is given (not in the vocabulary).
IMAGE_PLACEHOLDER = "<|kimi_image_placeholder|>"

EFFORTS = ("low", "high", "max")
EFFORT_TEXT = (
    "`thinking_effort` guides on how much to think in your thinking channel (not including the "
    "response channel), supported values include `low`, `medium`, `high`, and `max`.\n"
    "Now the system is invoked with `thinking_effort={effort}`."
)
TOOLS_TEXT = (
    "# Tools\nHere are the available tools, described in JSONSchema.\n\n```json\n{schemas}\n```"
)
NEW_TOOLS_TEXT = (
    "## New Tools Available\n"
    "The system dynamically extends the toolset via lazy-loading.\n"
    "You have access to all existing and extended tools.\n"
    "Here are the specs for the extended tools.\n\n"
    "```json\n{schemas}\n```"
)
TOOL_CHOICE_TEXT = {
    "required": "The system is invoked with `tool_choice=required`.\n"
    "You MUST call tools in the next message.",
    "none": "The system is invoked with `tool_choice=none`.\n"
    "You MUST NOT call any tools in the next message.",
}
RAW_JSON_TEXT = (
    "The system is invoked with `response_format={kind}`.\n"
    "Your response must be raw JSON data without markdown code blocks (```json) or any "
    "additional formatting."
)
SCHEMA_TEXT = "\nThe JSON data must match the following schema:\n```json\n{schema}\n```"


@dataclass(frozen=True)
class EncodeSegment:
    """A piece of the prompt and whether special tokens may be recognised in it."""

    text: str
    allow_special: bool = False


class _Segments:
    """The segments of one conversation, in order; empty texts are left out."""

    def __init__(self) -> None:
        self.items: list[EncodeSegment] = []

    def control(self, text: str) -> None:
        self.items.append(EncodeSegment(text, allow_special=True))

    def text(self, value: Any) -> None:
        text = str(value)
        if text:
            self.items.append(EncodeSegment(text))

    def open(self, tag: str, attributes: list[tuple[str, Any]] = ()) -> None:
        self.control(OPEN)
        self.text(tag)
        for key, value in attributes:
            self.text(f" {key}")
            self.text('="')
            self.text(str(value).replace("&", "&amp;").replace('"', "&quot;"))
            self.text('"')
        self.control(SEP)

    def close(self, tag: str) -> None:
        self.control(CLOSE)
        self.text(tag)
        self.control(SEP)

    def message(self, attributes: list[tuple[str, Any]], write_body) -> None:
        self.open("message", attributes)
        write_body()
        self.close("message")
        self.control(END_OF_MSG)

    def system(self, kind: str, body: str) -> None:
        self.message([("role", "system"), ("type", kind)], lambda: self.text(body.strip()))


def build_chat_segments(
    messages: list[Any],
    tools: list[dict] | None = None,
    *,
    add_generation_prompt: bool = True,
    thinking: bool = True,
    # None: no effort message. The tokenizer's apply_chat_template passes "max" by default.
    thinking_effort: str | None = None,
    tool_choice: Any = None,
    response_format: Any = None,
    **_unused: Any,
) -> list[EncodeSegment]:
    """The segments of a conversation, as K3's tokenizer encodes them (one ``encode`` each)."""
    if not isinstance(messages, list):
        raise ValueError(f"Kimi K3 messages must be a list, got {type(messages).__name__}")
    out = _Segments()
    if tools:
        _declare_tools(out, tools, TOOLS_TEXT)
    if thinking and thinking_effort is not None:
        if thinking_effort not in EFFORTS:
            raise ValueError(
                f"unsupported thinking_effort {thinking_effort!r}: use one of {', '.join(EFFORTS)}"
            )
        out.system("thinking-effort", EFFORT_TEXT.format(effort=thinking_effort))

    last_calls: list | None = None
    tool_index = 0
    for position, message in enumerate(results_in_call_order(messages)):
        if not isinstance(message, dict):
            raise ValueError(
                f"Kimi K3 messages must be dicts, got {type(message).__name__} at index {position}"
            )
        role = message.get("role")
        if role == "system" and message.get("tools"):
            _declare_tools(out, message["tools"], NEW_TOOLS_TEXT)
        elif role in ("user", "system"):
            out.message(_named(role, message), lambda m=message: _content(out, m.get("content")))
        elif role == "tool":
            tool_index += 1
            name = _tool_name(message, last_calls, tool_index)
            attributes = [("role", "tool"), ("tool", name), ("index", tool_index)]
            out.message(attributes, lambda m=message: _content(out, m.get("content")))
        elif role == "assistant":
            last_calls = message.get("tool_calls")
            tool_index = 0
            out.message(
                _named("assistant", message),
                lambda m=message: _assistant_body(out, m, thinking),
            )
        else:
            raise ValueError(f"unknown message role {role!r} at index {position}")

    if tool_choice in TOOL_CHOICE_TEXT:
        out.system("tool-choice", TOOL_CHOICE_TEXT[tool_choice])
    _response_format(out, response_format)
    if add_generation_prompt:
        out.open("message", [("role", "assistant")])
        out.open("think" if thinking else "response")
    return out.items


def results_in_call_order(messages: list[Any]) -> list[Any]:
    """Each run of ``tool`` messages sorted into the order of the calls of the assistant message
    before it, matched by ``tool_call_id`` (or ``id``); a matched result takes its call's name.
    A run with any result that matches no call is left as it came. The input is not changed."""
    ordered: list[Any] = []
    calls: dict[str, tuple[int, Any]] = {}
    i = 0
    while i < len(messages):
        message = messages[i]
        role = message.get("role") if isinstance(message, dict) else None
        if role != "tool":
            if role == "assistant":
                calls = _calls_by_id(message.get("tool_calls"))
            ordered.append(message)
            i += 1
            continue
        run = []
        while i < len(messages) and isinstance(messages[i], dict):
            if messages[i].get("role") != "tool":
                break
            result = messages[i]
            call_id = result.get("tool_call_id", result.get("id"))
            run.append((calls.get(str(call_id)) if call_id is not None else None, len(run), result))
            i += 1
        if any(match is None for match, _, _ in run):
            ordered.extend(result for _, _, result in run)
            continue
        for (_, name), _, result in sorted(run, key=lambda item: (item[0][0], item[1])):
            if name is not None:
                result = {**result, "tool": name}
                if "name" in result:
                    result["name"] = name
            ordered.append(result)
    return ordered


def _calls_by_id(tool_calls: Any) -> dict[str, tuple[int, Any]]:
    """Call id -> (1-based position among all calls, function name); the first of a repeated id."""
    found: dict[str, tuple[int, Any]] = {}
    for position, call in enumerate(tool_calls if isinstance(tool_calls, list) else (), 1):
        if not isinstance(call, dict) or call.get("id") is None:
            continue
        function = call.get("function")
        name = function.get("name") if isinstance(function, dict) else call.get("name")
        found.setdefault(str(call["id"]), (position, name))
    return found


def _named(role: str, message: dict) -> list[tuple[str, Any]]:
    attributes: list[tuple[str, Any]] = [("role", role)]
    if message.get("name"):
        attributes.append(("name", message["name"]))
    return attributes


def _tool_name(message: dict, last_calls: Any, index: int) -> Any:
    """A result's own ``tool`` (or, absent that key, ``name``), else its call's by position."""
    name = message.get("tool", message.get("name"))
    if name is None and isinstance(last_calls, list) and index <= len(last_calls):
        call = last_calls[index - 1]
        name = call.get("function", call)["name"]
    if name is None:
        raise ValueError(
            "Kimi K3 tool messages need a resolvable tool name: carry `tool`/`name`, or match a "
            "preceding assistant tool_call by order."
        )
    return name


def _content(out: _Segments, content: Any) -> None:
    if content is None:
        return
    if isinstance(content, str):
        out.text(content)
        return
    for part in content:
        if part["type"] in ("image", "image_url"):
            out.control(IMAGE_PLACEHOLDER)
        else:
            out.text(part["text"])


def _assistant_body(out: _Segments, message: dict, thinking: bool) -> None:
    """Think channel (thinking on only, written even when empty), response channel, then calls."""
    if thinking:
        reasoning = message.get("reasoning_content") or message.get("reasoning")
        out.open("think")
        if reasoning is not None:
            out.text(reasoning)
        out.close("think")
    out.open("response")
    _content(out, message.get("content"))
    out.close("response")
    calls = message.get("tool_calls")
    if not calls:
        return
    out.open("tools")
    for index, call in enumerate(calls, 1):
        function = call.get("function", call)
        out.open("call", [("tool", function["name"]), ("index", index)])
        arguments, raw = tool_arguments(function.get("arguments"))
        if raw is not None:
            out.open("json", [("type", "object")])
            out.text(raw)
            out.close("json")
        for key, kind, text in arguments:
            out.open("argument", [("key", key), ("type", kind)])
            out.text(text)
            out.close("argument")
        out.close("call")
    out.close("tools")


def tool_arguments(arguments: Any) -> tuple[list[tuple[str, str, str]], str | None]:
    """(key, type, text) per argument, or the raw text when it is not a JSON object.

    A mapping's values are written as ``json.dumps`` writes them (strings as they are); a JSON
    text is read one level deep and each non-string value keeps its literal spelling.
    """
    if arguments is None:
        return [], None
    if isinstance(arguments, dict):
        return [(str(k), value_type(v), value_text(v)) for k, v in arguments.items()], None
    if isinstance(arguments, str):
        if not arguments:
            return [], None
        try:
            return _literal_arguments(arguments), None
        except ValueError:
            return [], arguments
    raise TypeError(
        "Kimi K3 tool call arguments must be a dict or a JSON object string, got "
        f"{type(arguments).__name__}"
    )


def value_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "object" if isinstance(value, dict) else "array"


def value_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


_JSON_SPACE = " \t\n\r"


def _skip_space(text: str, at: int) -> int:
    while at < len(text) and text[at] in _JSON_SPACE:
        at += 1
    return at


def _literal_arguments(text: str) -> list[tuple[str, str, str]]:
    """The top-level members of a JSON object text; duplicates kept, trailing text ignored."""
    decoder = json.JSONDecoder(strict=False)
    at = _skip_space(text, 0)
    if text[at : at + 1] != "{":
        raise ValueError("JSON arguments must be an object")
    at = _skip_space(text, at + 1)
    members: list[tuple[str, str, str]] = []
    if text[at : at + 1] == "}":
        return members
    while True:
        key, at = decoder.raw_decode(text, at)
        if not isinstance(key, str):
            raise ValueError("JSON object key must be a string")
        at = _skip_space(text, at)
        if text[at : at + 1] != ":":
            raise ValueError(f"Expects ':' after {key}")
        start = _skip_space(text, at + 1)
        value, at = decoder.raw_decode(text, start)
        members.append(
            (key, value_type(value), value if isinstance(value, str) else text[start:at])
        )
        at = _skip_space(text, at)
        separator = text[at : at + 1]
        at = _skip_space(text, at + 1)
        if separator == "}":
            return members
        if separator != ",":
            raise ValueError(f"Expect '}}' or ',', got {separator!r}")


def _declare_tools(out: _Segments, tools: Any, wording: str) -> None:
    schemas = json.dumps(deep_sorted(tools), ensure_ascii=False, separators=(",", ":"))
    out.message(
        [("role", "system"), ("type", "tool-declare")],
        lambda: out.text(wording.format(schemas=schemas)),
    )


def deep_sorted(value: Any) -> Any:
    """``value`` with every dict's keys sorted, at any depth (lists keep their order)."""
    if isinstance(value, dict):
        return {key: deep_sorted(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [deep_sorted(item) for item in value]
    return value


def _response_format(out: _Segments, response_format: Any) -> None:
    kind = response_format.get("type") if isinstance(response_format, dict) else response_format
    if kind == "json_object":
        out.system("response-format", RAW_JSON_TEXT.format(kind=kind))
    elif kind == "json_schema":
        schema = json.dumps(
            deep_sorted(_response_schema(response_format)),
            ensure_ascii=False,
            separators=(",", ":"),
        )
        out.system(
            "response-format", RAW_JSON_TEXT.format(kind=kind) + SCHEMA_TEXT.format(schema=schema)
        )


def _response_schema(response_format: Any) -> Any:
    """``json_schema.schema``, else ``json_schema.json_schema``, else ``json_schema`` itself."""
    found = response_format.get("json_schema") if isinstance(response_format, dict) else None
    if isinstance(found, dict):
        return found.get("schema", found.get("json_schema", found))
    return found

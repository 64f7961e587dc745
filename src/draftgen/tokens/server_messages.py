"""What vLLM hands a chat template or encoder: a request's messages and tools as its chat path
validates, parses and prepares them, so that draftgen renders what the server renders.

Each step names the vLLM function it follows (``vllm/entrypoints/openai/chat_completion/
protocol.py``, ``vllm/renderers/chat_utils/parse_chat_message*.py``, ``vllm/renderers/hf.py``,
``online_renderer.py``); tests/audit proves the result equal to a reference written from them.
"""

from __future__ import annotations

import copy
import functools
import json
from typing import Any

# A "string" template is given a message's text parts joined by a newline; an "openai" one
# (it loops over a message's content) is given the parts.
STRING, OPENAI = "string", "openai"


class RequestRefused(ValueError):
    """A request the server answers with an error instead of rendering it."""


def validated_messages(messages: list[dict]) -> list[dict]:
    """``ChatCompletionRequest._normalize_messages_before``: ``reasoning_content`` is taken off
    every message and becomes ``reasoning`` unless that is set. A deep copy: the request the
    caller keeps is not changed."""
    validated = copy.deepcopy(messages)
    for message in validated:
        if not isinstance(message, dict):
            continue
        reasoning_content = message.pop("reasoning_content", None)
        if reasoning_content is not None and message.get("reasoning") is None:
            message["reasoning"] = reasoning_content
    return validated


def template_conversation(
    messages: list[dict], content_format: str, separator: str = "\n"
) -> list[dict]:
    """``parse_chat_messages`` of validated messages: what a template or encoder reads.

    Content becomes the text parts' texts joined by ``separator`` (``STRING``: a newline; vLLM's
    DeepSeek V4.1 wrapper joins by a blank line) or a list of text parts (``OPENAI``); None
    content is no parts. Assistant messages keep their calls and give their
    reasoning as ``reasoning`` and ``reasoning_content``; tool messages keep ``tool_call_id`` and
    text content; ``name`` is kept; a developer message carries ``tools``. Nothing else of a
    message reaches the template. Then ``_postprocess_messages`` parses tool-call arguments.
    """
    conversation = []
    for message in messages:
        role = message.get("role")
        texts = _part_texts(message.get("content"))
        content: Any = (
            [{"type": "text", "text": text} for text in texts]
            if content_format == OPENAI
            else separator.join(texts)
        )
        if role == "tool" and isinstance(content, list):
            content = "\n".join(texts)
        parsed: dict[str, Any] = {"role": role, "content": content}
        if role == "assistant":
            if message.get("tool_calls") is not None:
                parsed["tool_calls"] = copy.deepcopy(list(message["tool_calls"]))
            if message.get("reasoning") is not None:
                parsed["reasoning"] = parsed["reasoning_content"] = message["reasoning"]
        elif role == "tool" and "tool_call_id" in message:
            parsed["tool_call_id"] = message["tool_call_id"]
        if isinstance(message.get("name"), str):
            parsed["name"] = message["name"]
        if role == "developer":
            parsed["tools"] = message.get("tools")
        conversation.append(parsed)
    _parse_tool_arguments(conversation)
    return conversation


def _part_texts(content: Any) -> list[str]:
    """A string is one text part; parts without text (images) give none."""
    if content is None:
        return []
    if isinstance(content, str):
        return [content]
    texts = []
    for part in content if isinstance(content, list) else ():
        text = (
            part if isinstance(part, str) else part.get("text") if isinstance(part, dict) else None
        )
        if text is not None:
            texts.append(text)
    return texts


def _parse_tool_arguments(conversation: list[dict]) -> None:
    """``_postprocess_messages``: an empty list of calls goes; each call's arguments become a
    mapping: a JSON object's text parsed, anything else (empty, not JSON, JSON that is not an
    object) ``{}``. Templates iterate the mapping; encoders are handed its JSON text."""
    for message in conversation:
        calls = message.get("tool_calls")
        if message["role"] != "assistant" or not isinstance(calls, list):
            continue
        if not calls:
            del message["tool_calls"]
            continue
        for call in calls:
            function = call.get("function") if isinstance(call, dict) else None
            if call.get("type", "function") != "function" or not isinstance(function, dict):
                raise RequestRefused("chat completions only support tool_calls of type 'function'")
            arguments = function.get("arguments")
            if isinstance(arguments, str) and arguments:
                try:
                    arguments = json.loads(arguments)
                except ValueError:
                    arguments = None
            function["arguments"] = arguments if isinstance(arguments, dict) else {}


def arguments_as_text(conversation: list[dict]) -> list[dict]:
    """The parsed arguments as JSON text again, for the Python encoders (vLLM's vendored copies
    read a mapping as they read its text; the model repositories' read text)."""
    for message in conversation:
        for call in message.get("tool_calls") or ():
            if isinstance(call["function"].get("arguments"), dict):
                call["function"]["arguments"] = json.dumps(call["function"]["arguments"])
    return conversation


def developer_as_system(conversation: list[dict], template: str) -> list[dict]:
    """``safe_apply_chat_template``: where the template never names the ``developer`` role,
    developer messages become system messages (without ``tools``), and system messages that are
    not one alone at the front are merged into one first system message, their texts joined by
    a blank line (``_convert_developer_to_system``, ``_consolidate_system_messages``)."""
    if not any(m["role"] == "developer" for m in conversation):
        return conversation
    if '"developer"' in template or "'developer'" in template:
        return conversation
    converted = [
        {k: v for k, v in m.items() if k != "tools"} | {"role": "system"}
        if m["role"] == "developer"
        else m
        for m in conversation
    ]
    systems: list[str] = []
    others: list[dict] = []
    merge = False
    for index, message in enumerate(converted):
        if message["role"] != "system":
            others.append(message)
            continue
        merge = merge or index > 0 or bool(systems)
        text = message.get("content", "")
        if isinstance(text, list):
            text = "\n".join(_part_texts(text))
        if text:
            systems.append(text)
    if not merge:
        return converted
    return [{"role": "system", "content": "\n\n".join(systems)}, *others]


def dumped_tools(tools: list[dict] | None) -> list[dict] | None:
    """``[tool.model_dump() for tool in request.tools]``: each function's ``description`` and
    ``parameters`` present (None when the request left them out), ``strict`` only when set."""
    if tools is None:
        return None
    dumped = []
    for tool in tools:
        if not isinstance(tool, dict) or tool.get("type", "function") != "function":
            kind = tool.get("type") if isinstance(tool, dict) else type(tool).__name__
            raise RequestRefused(f"tools: type {kind!r} is not 'function'")
        function = tool.get("function") or {}
        body = {
            "name": function.get("name"),
            "description": function.get("description"),
            "parameters": copy.deepcopy(function.get("parameters")),
        }
        for optional in ("strict", "defer_loading"):
            if function.get(optional) is not None:
                body[optional] = function[optional]
        dumped.append({"type": "function", "function": body})
    return dumped


@functools.lru_cache(maxsize=64)
def content_format(template: str) -> str:
    """``_detect_content_format``: ``OPENAI`` when the template loops over a message's content
    (a message being the loop variable of a loop over ``messages``, or over a variable set from
    it), else ``STRING``."""
    import jinja2.nodes
    from transformers.utils.chat_template_utils import _compile_jinja_template

    try:
        ast = _compile_jinja_template(template).environment.parse(template)
    except Exception:  # vLLM falls back to its default, "string"
        return STRING
    lists = ["messages"]
    for name in lists:  # grows while reading: variables set from a list of messages
        for assign in ast.find_all(jinja2.nodes.Assign):
            target = assign.target
            if _reads(assign.node, name) and isinstance(target, jinja2.nodes.Name):
                if target.name not in lists:
                    lists.append(target.name)
    loops = list(ast.find_all(jinja2.nodes.For))
    items = [
        loop.target.name
        for loop in loops
        if isinstance(loop.target, jinja2.nodes.Name) and any(_reads(loop.iter, n) for n in lists)
    ]
    for loop in loops:
        if any(_reads(loop.iter, item, "content") for item in items):
            return OPENAI
        if isinstance(loop.iter, jinja2.nodes.Name) and loop.iter.name == "content":
            return OPENAI
    return STRING


def _reads(node: Any, name: str, key: str | None = None) -> bool:
    """Whether ``node`` is variable ``name`` (or its item or attribute ``key``), under any
    filter, test or slice (vLLM's ``_is_var_or_elems_access``)."""
    import jinja2.nodes

    node = _unwrapped(node)
    if key is not None:
        if isinstance(node, jinja2.nodes.Getitem):
            if not (isinstance(node.arg, jinja2.nodes.Const) and node.arg.value == key):
                return False
        elif not (isinstance(node, jinja2.nodes.Getattr) and node.attr == key):
            return False
        node = node.node
    return isinstance(node, jinja2.nodes.Name) and node.ctx == "load" and node.name == name


def _unwrapped(node: Any) -> Any:
    import jinja2.nodes

    while True:
        if isinstance(node, jinja2.nodes.Filter | jinja2.nodes.Test) and node.node is not None:
            node = node.node
        elif isinstance(node, jinja2.nodes.Getitem) and isinstance(node.arg, jinja2.nodes.Slice):
            node = node.node
        else:
            return node

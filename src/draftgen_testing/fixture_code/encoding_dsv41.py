"""DeepSeek-V4.1's chat encoding: OpenAI-style messages to the prompt text its servers tokenize, and
a completion's text back to a message.

Written for draftgen to behave as the encoder DeepSeek ships in the model repository
(``encoding/encoding.py`` of deepseek-ai/DeepSeek-V4.1-Flash, the release revisions), after the
copies servers carry (SGLang's ``entrypoints/openai/encoding_dsv41.py``, vLLM's
``tokenizers/deepseek_v41_encoding.py``) and their tests. The ``deepseek-v4.1`` test fixture copies
this file to ``encoding/encoding.py`` in place of a chat template. Standard library only: it is
loaded from the tokenizer directory, not from draftgen.

What changed from V4 (``encoding_dsv4.py``): a ``<｜System｜>`` token opens the conversation
when its first message is a system message or in thinking mode, where the effort line
``Reasoning Effort: N (range 1-100, ...)`` comes first (no paragraph for ``max`` any more); a
system message after the first is its own ``<｜System｜>`` turn and counts as a user turn (the
assistant header follows it, history reasoning is dropped before it); the effort is a number
1..100 or ``low`` (50), ``high`` (75, the default) or ``max`` (100); the DSML tags carry a
leading space (``<｜DSML｜ calls>``, ``<｜DSML｜ invoke``, ``<｜DSML｜ parameter``); tool-call
arguments may be an object as well as JSON text. Not reproduced: image content blocks
(``<｜deepseek_image｜>`` placeholders), and the tool-namespace rendering of the latest
revision, whose details were not read.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["encode_messages", "parse_message_from_completion_text"]

BOS = "<｜begin▁of▁sentence｜>"
EOS = "<｜end▁of▁sentence｜>"
SYSTEM = "<｜System｜>"
USER = "<｜User｜>"
ASSISTANT = "<｜Assistant｜>"
REMINDER = "<｜latest_reminder｜>"
THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
DSML = "｜DSML｜"
# V4.1's tag names, each after the DSML token (V4 wrote "tool_calls", "invoke", "parameter").
CALLS, INVOKE, PARAMETER = " calls", " invoke", " parameter"
# The quick-instruction tasks a user message may carry, and the token each ends the turn with.
TASK_TOKENS = {
    "action": "<｜action｜>",
    "query": "<｜query｜>",
    "authority": "<｜authority｜>",
    "domain": "<｜domain｜>",
    "title": "<｜title｜>",
    "read_url": "<｜read_url｜>",
}

THINKING_MODES = ("chat", "thinking")
# The named efforts of the release (the pre-release table was low 25, high 50, xhigh 75, max 100).
EFFORTS = {"low": 50, "high": 75, "max": 100}
DEFAULT_EFFORT = "high"
# Both open a user turn; so does a system message that is not the first.
USER_ROLES = ("user", "developer")
# Roles history-reasoning dropping never removes (an earlier developer turn is removed whole).
_KEPT_ROLES = ("user", "system", "tool", "latest_reminder", "direct_search_results")

_EFFORT_LINE = (
    "Reasoning Effort: {} (range 1-100, the higher the value, the more thorough the reasoning)\n\n"
)

# The tool declaration, line by line; the schemas (one JSON line each) go in the middle.
_TOOLS_HEAD = (
    "## Tools",
    "",
    "You have access to a set of tools to help answer the user's question. You can invoke tools "
    f'by writing a "<{DSML}{CALLS}>" block like the following:',
    "",
    f"<{DSML}{CALLS}>",
    f'<{DSML}{INVOKE} name="$TOOL_NAME">',
    f'<{DSML}{PARAMETER} name="$PARAMETER_NAME" string="true|false">$PARAMETER_VALUE'
    f"</{DSML}{PARAMETER}>",
    "...",
    f"</{DSML}{INVOKE}>",
    f'<{DSML}{INVOKE} name="$TOOL_NAME2">',
    "...",
    f"</{DSML}{INVOKE}>",
    f"</{DSML}{CALLS}>",
    "",
    'String parameters should be specified as is and set `string="true"`. For all other types '
    '(numbers, booleans, arrays, objects), pass the value in JSON format and set `string="false"`.',
    "",
    f"If thinking_mode is enabled (triggered by {THINK_OPEN}), you MUST output your complete "
    f"reasoning inside {THINK_OPEN}...{THINK_CLOSE} BEFORE any tool calls or final response.",
    "",
    f"Otherwise, output directly after {THINK_CLOSE} with tool calls or final response.",
    "",
    "### Available Tool Schemas",
    "",
)
_TOOLS_TAIL = (
    "",
    "You MUST strictly follow the above defined tool name and parameter schemas to invoke tool "
    "calls.",
    "",
)
_RESPONSE_FORMAT = (
    "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n"
)
# What opens a tool-call block in generated text (the blank line is part of it).
_CALLS_OPEN = f"\n\n<{DSML}{CALLS}"
_CALLS_CLOSE = f"</{DSML}{CALLS}>"


def encode_messages(
    messages: Sequence[Mapping[str, Any]],
    thinking_mode: str,
    context: Sequence[Mapping[str, Any]] | None = None,
    drop_thinking: bool = True,
    add_default_bos_token: bool = True,
    reasoning_effort: str | int | None = None,
) -> str:
    """The prompt text of ``messages``, rendered after ``context`` (which is not rendered).

    ``thinking_mode`` is ``"chat"`` or ``"thinking"``; ``reasoning_effort`` is None (``"high"``),
    ``"low"``, ``"high"``, ``"max"`` or an int 1..100, checked in either mode and written only in
    thinking mode. Tools and a response format are declared by putting ``tools`` (OpenAI format)
    or ``response_format`` on a system or developer message. BOS leads only when
    ``add_default_bos_token`` is set and there is no context.
    """
    if thinking_mode not in THINKING_MODES:
        raise ValueError(f"thinking_mode must be 'chat' or 'thinking', not {thinking_mode!r}")
    budget = _budget(reasoning_effort)
    earlier = _with_tool_results_in_user_turns(context or [])
    current = _with_tool_results_in_user_turns(messages)
    conversation = _results_in_call_order(earlier + current)
    thinking = thinking_mode == "thinking"
    # Reasoning stays in history whenever tools are declared anywhere.
    drops = drop_thinking and not any(m.get("tools") for m in conversation)
    first = len(earlier)
    if thinking and drops:
        conversation = _without_history_reasoning(conversation)
        first = len(_without_history_reasoning(earlier))
    last_user = _last_user_index(conversation)
    parts = [BOS] if add_default_bos_token and not earlier else []
    for index in range(first, len(conversation)):
        if index == 0:
            # The conversation's first message (which context may hold) hosts the system token
            # when it is a system message or thinking puts the effort line before it.
            effort_line = _EFFORT_LINE.format(budget) if thinking else ""
            if effort_line or conversation[0].get("role") == "system":
                parts.append(SYSTEM + effort_line)
        parts.append(_message_text(conversation, index, last_user, thinking, drops))
        parts.append(_turn_change(conversation, index, last_user, thinking, drops))
    return "".join(parts)


def _budget(effort: str | int | None) -> int:
    if effort is None:
        effort = DEFAULT_EFFORT
    # bool is an int to isinstance; the published check is on the exact type.
    if type(effort) is int and 1 <= effort <= 100:
        return effort
    if isinstance(effort, str) and effort in EFFORTS:
        return EFFORTS[effort]
    raise ValueError(
        f"reasoning_effort must be an int within [1, 100] or one of {sorted(EFFORTS)}, "
        f"not {effort!r}"
    )


# -- preparing the conversation ---------------------------------------------------------------


def _with_tool_results_in_user_turns(
    messages: Sequence[Mapping[str, Any]],
) -> list[dict[str, Any]]:
    """Copies of ``messages`` with every tool message turned into a ``tool_result`` block.

    V4.1 has no tool role: results join the user turn before them if it is made of blocks (a run
    of results, or a user message), else open one; a user message joins such a turn too (unless
    that turn carries a task), else it becomes a turn of its own keeping all its fields.
    """
    turns: list[dict[str, Any]] = []
    for original in messages:
        message = copy.deepcopy(dict(original))
        role = message.get("role")
        previous = turns[-1] if turns else None
        joins = (
            previous is not None and previous.get("role") == "user" and "content_blocks" in previous
        )
        if role == "tool":
            block = {
                "type": "tool_result",
                "tool_use_id": message.get("tool_call_id", ""),
                "content": message.get("content", ""),
            }
            if joins:
                previous["content_blocks"].append(block)
            else:
                turns.append({"role": "user", "content_blocks": [block]})
        elif role == "user":
            blocks = message.get("content_blocks")
            if blocks is None:
                blocks = [{"type": "text", "text": message.get("content", "")}]
            if joins and previous.get("task") is None:
                previous["content_blocks"].extend(blocks)
                continue
            message["content_blocks"] = blocks
            turns.append(message)
        else:
            turns.append(message)
    return turns


def _results_in_call_order(turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each user turn's tool results reordered as the last calling assistant turn made the calls
    (by call id; a result without a known id counts as the first call). Text blocks stay put."""
    order: dict[str, int] = {}
    for turn in turns:
        if turn.get("role") == "assistant" and turn.get("tool_calls"):
            order = {}
            for position, call in enumerate(turn["tool_calls"]):
                call_id = call.get("id") or call.get("function", {}).get("id", "")
                if call_id:
                    order[call_id] = position
        elif turn.get("role") == "user" and turn.get("content_blocks"):
            blocks = turn["content_blocks"]
            results = [b for b in blocks if b.get("type") == "tool_result"]
            if len(results) < 2 or not order:
                continue
            ranked = iter(sorted(results, key=lambda b: order.get(b.get("tool_use_id", ""), 0)))
            turn["content_blocks"] = [
                next(ranked) if b.get("type") == "tool_result" else b for b in blocks
            ]
    return turns


def _without_history_reasoning(turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Before the last user turn: assistant turns lose their reasoning, developer (and unknown)
    turns are removed; everything from the last user turn on is kept as it is."""
    last_user = _last_user_index(turns)
    kept = []
    for index, turn in enumerate(turns):
        role = turn.get("role")
        if role in _KEPT_ROLES or index >= last_user:
            kept.append(turn)
        elif role == "assistant":
            kept.append({k: v for k, v in turn.items() if k != "reasoning_content"})
    return kept


def _opens_user_turn(turns: Sequence[Mapping[str, Any]], index: int) -> bool:
    role = turns[index].get("role")
    return role in USER_ROLES or (role == "system" and index > 0)


def _last_user_index(turns: Sequence[Mapping[str, Any]]) -> int:
    for index in range(len(turns) - 1, -1, -1):
        if _opens_user_turn(turns, index):
            return index
    return -1


# -- rendering ---------------------------------------------------------------------------------


def _message_text(
    turns: list[dict[str, Any]], index: int, last_user: int, thinking: bool, drops: bool
) -> str:
    message = turns[index]
    role = message.get("role")
    content = message.get("content")
    if role == "system":
        # The first system message's token came with the conversation's opening.
        lead = SYSTEM if index > 0 else ""
        return lead + str(content or "") + _declarations(message)
    if role == "developer":
        if not content:
            raise ValueError(f"message {index}: a developer message needs content")
        return USER + _text(content, index) + _declarations(message)
    if role == "user":
        blocks = message.get("content_blocks")
        body = "\n\n".join(_block_text(b, index) for b in blocks) if blocks else content or ""
        return USER + _text(body, index)
    if role == "latest_reminder":
        return REMINDER + str(content)
    if role == "assistant":
        # The answer to a task token carries no think block; otherwise a thinking conversation
        # closes one on every assistant turn that keeps its reasoning.
        after_task = index > 0 and turns[index - 1].get("task") is not None
        keeps = not drops or index > last_user
        return _assistant_text(message, thinking and not after_task and keeps)
    raise ValueError(f"message {index} has role {role!r}, which DeepSeek-V4.1 does not have")


def _text(value: Any, index: int) -> str:
    if not isinstance(value, str):
        raise TypeError(f"message {index}: content must be text, not {type(value).__name__}")
    return value


def _block_text(block: Mapping[str, Any], index: int) -> str:
    kind = block.get("type")
    if kind == "text":
        return _text(block.get("text", ""), index)
    if kind != "tool_result":
        return f"[Unsupported {kind}]"
    result = block.get("content", "")
    if isinstance(result, list):
        result = "\n\n".join(
            part.get("text", "")
            if part.get("type") == "text"
            else f"[Unsupported {part.get('type')}]"
            for part in result
        )
    return f"<tool_result>{result}</tool_result>"


def _declarations(message: Mapping[str, Any]) -> str:
    """The tool declaration and response format a system or developer message carries."""
    text = ""
    if message.get("tools"):
        schemas = [_to_json(tool["function"]) for tool in message["tools"]]
        text += "\n\n" + "\n".join((*_TOOLS_HEAD, *schemas, *_TOOLS_TAIL))
    if message.get("response_format"):
        text += "\n\n" + _RESPONSE_FORMAT + _to_json(message["response_format"])
    return text


def _assistant_text(message: Mapping[str, Any], closes_thinking: bool) -> str:
    text = ""
    if closes_thinking:
        # The turn before opened the block: reasoning (possibly none) and </think>.
        text += str(message.get("reasoning_content") or "") + THINK_CLOSE
    text += str(message.get("content") or "")
    calls = message.get("tool_calls")
    if calls:
        invocations = "\n".join(_invocation(call) for call in calls)
        text += f"\n\n<{DSML}{CALLS}>\n{invocations}\n</{DSML}{CALLS}>"
    return text if message.get("wo_eos", False) else text + EOS


def _invocation(call: Mapping[str, Any]) -> str:
    function = call["function"]
    name, raw = function["name"], function["arguments"]
    # JSON text is parsed (invalid text raises); an object is taken as it is.
    arguments = json.loads(raw) if isinstance(raw, str) else raw
    if not isinstance(arguments, dict):
        raise ValueError(f"tool call {name!r}: arguments must be a JSON object")
    parameters = "\n".join(_parameter(str(key), value) for key, value in arguments.items())
    return f'<{DSML}{INVOKE} name="{name}">\n{parameters}\n</{DSML}{INVOKE}>'


def _parameter(key: str, value: Any) -> str:
    # Strings go in as they are (no escaping); anything else as JSON with ", " and ": ".
    is_text = isinstance(value, str)
    body = value if is_text else _to_json(value)
    flag = "true" if is_text else "false"
    return f'<{DSML}{PARAMETER} name="{key}" string="{flag}">{body}</{DSML}{PARAMETER}>'


def _turn_change(
    turns: list[dict[str, Any]], index: int, last_user: int, thinking: bool, drops: bool
) -> str:
    """What follows a message when the next one is an assistant turn (or a reminder), or when it is
    the last: the assistant header and the think switch, or a task's token."""
    following = turns[index + 1].get("role") if index + 1 < len(turns) else None
    if following not in (None, "assistant", "latest_reminder"):
        return ""
    task = turns[index].get("task")
    if task is not None:
        if task not in TASK_TOKENS:
            raise ValueError(
                f"message {index}: unknown task {task!r}; known: {sorted(TASK_TOKENS)}"
            )
        if task != "action":
            return TASK_TOKENS[task]
        return ASSISTANT + (THINK_OPEN if thinking else THINK_CLOSE) + TASK_TOKENS[task]
    if not _opens_user_turn(turns, index):
        return ""
    # History user turns open a think block only when history keeps its reasoning.
    opens = thinking and (not drops or index >= last_user)
    return ASSISTANT + (THINK_OPEN if opens else THINK_CLOSE)


def _to_json(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False)
    except Exception:
        return json.dumps(value, ensure_ascii=True)


# -- reading a completion back -----------------------------------------------------------------

_NAME_LINE = re.compile(r'\s*name="(.*?)">\n', re.DOTALL)
_PARAMETER = re.compile(r' name="(.*?)" string="(true|false)">(.*?)<', re.DOTALL)


def parse_message_from_completion_text(text: str, thinking_mode: str) -> dict[str, Any]:
    """The assistant message of one generated turn (the text after the generation prompt, its
    ``<｜end▁of▁sentence｜>`` included): ``content``, ``reasoning_content`` and OpenAI-style
    ``tool_calls`` whose arguments are JSON text.

    Only the exact shape the encoder writes is read; anything else raises ``ValueError``.
    """
    reader = _Reader(text)
    reasoning = ""
    if thinking_mode == "thinking":
        reasoning, stop = reader.until(THINK_CLOSE, _CALLS_OPEN)
        if stop != THINK_CLOSE:
            raise ValueError("the completion has no </think> closing its reasoning")
    content, stop = reader.until(EOS, _CALLS_OPEN)
    calls: list[dict[str, Any]] = []
    if stop == _CALLS_OPEN:
        calls = _read_calls(reader)
        rest, stop = reader.until(EOS)
        if rest:
            raise ValueError(f"text after the tool calls: {rest!r}")
    elif stop != EOS:
        raise ValueError("the completion does not end with <｜end▁of▁sentence｜>")
    if not reader.done():
        raise ValueError(f"text after the end of the turn: {text[reader.position :]!r}")
    for token in (BOS, EOS, THINK_OPEN, THINK_CLOSE, DSML):
        if token in content or token in reasoning:
            raise ValueError(f"special token {token!r} inside the reasoning or content")
    return {
        "role": "assistant",
        "content": content,
        "reasoning_content": reasoning,
        "tool_calls": [
            {"type": "function", "function": {"name": name, "arguments": arguments}}
            for name, arguments in calls
        ],
    }


class _Reader:
    def __init__(self, text: str) -> None:
        self.text = text
        self.position = 0

    def until(self, *stops: str) -> tuple[str, str | None]:
        """The text up to the earliest stop (which is consumed), and that stop (None: the end)."""
        found = [(at, stop) for stop in stops if (at := self.text.find(stop, self.position)) >= 0]
        start = self.position
        if not found:
            self.position = len(self.text)
            return self.text[start:], None
        at, stop = min(found, key=lambda item: item[0])
        self.position = at + len(stop)
        return self.text[start:at], stop

    def done(self) -> bool:
        return self.position == len(self.text)


def _read_calls(reader: _Reader) -> list[tuple[str, str]]:
    """(name, JSON arguments) of each invoke, up to and including the closing tag."""
    invoke, invoke_end = f"<{DSML}{INVOKE}", f"</{DSML}{INVOKE}"
    parameter, parameter_end = f"<{DSML}{PARAMETER}", f"/{DSML}{PARAMETER}"
    calls = []
    while not reader.done():
        between, stop = reader.until(invoke, _CALLS_CLOSE)
        if between != ">\n":
            raise ValueError(f"expected '>\\n' in the tool calls, found {between!r}")
        if stop == _CALLS_CLOSE:
            break
        if stop is None:
            raise ValueError("the tool calls are not closed")
        head, stop = reader.until(parameter, invoke_end)
        name = _NAME_LINE.fullmatch(head)
        if name is None:
            raise ValueError(f"malformed invoke header: {head!r}")
        values: dict[str, tuple[str, bool]] = {}
        while stop == parameter:
            body, _ = reader.until(parameter_end)
            match = _PARAMETER.fullmatch(body)
            if match is None:
                raise ValueError(f"malformed parameter: {body!r}")
            key, flag, value = match.groups()
            if key in values:
                raise ValueError(f"parameter {key!r} given twice")
            values[key] = (value, flag == "true")
            between, stop = reader.until(parameter, invoke_end)
            if between != ">\n":
                raise ValueError(f"expected '>\\n' after a parameter, found {between!r}")
        pairs = ", ".join(
            f"{_to_json(key)}: {_to_json(value) if is_text else value}"
            for key, (value, is_text) in values.items()
        )
        calls.append((name.group(1), "{" + pairs + "}"))
    return calls

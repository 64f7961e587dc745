"""DeepSeek-V4's chat encoding: OpenAI-style messages to the prompt text its servers tokenize, and
a completion's text back to a message.

Written for draftgen to behave as the encoder DeepSeek ships in the model repository
(``encoding/encoding_dsv4.py`` of deepseek-ai/DeepSeek-V4-Flash), checked against that repository's
golden cases (``encoding/tests/test_input_N.json`` -> ``test_output_N.txt``; vLLM keeps copies in
``tests/tokenizers_/fixtures/deepseek_v4/``). The ``deepseek-v4`` test fixture copies this file to
``encoding/encoding_dsv4.py`` in place of a chat template. Standard library only: it is loaded
from the tokenizer directory, not from draftgen.

What it reproduces, beyond the golden cases: tool messages become ``<tool_result>`` blocks of a user
turn (one turn for a run of results, ordered as the calls were); consecutive user messages join
with a blank line; ``reasoning_effort="max"`` puts a paragraph before the first message in thinking
mode ("high" and None add nothing); history reasoning before the last user turn is dropped in
thinking mode with ``drop_thinking``, unless any message carries ``tools``; ``latest_reminder``,
``developer`` and the quick-instruction ``task`` tokens. Errors are raised where the published file
raises, with messages (and, where it only asserts, exception types) of our own. Not confirmed: its
behaviour on malformed input outside the cases read (non-text content, odd roles after ``context``).
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
USER = "<｜User｜>"
ASSISTANT = "<｜Assistant｜>"
REMINDER = "<｜latest_reminder｜>"
THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
DSML = "｜DSML｜"
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
EFFORTS = (None, "high", "max")
# Both open a user turn; the last of either is "the last user message".
USER_ROLES = ("user", "developer")
# Roles history-reasoning dropping never removes (an earlier developer turn is removed whole).
_KEPT_ROLES = ("user", "system", "tool", "latest_reminder", "direct_search_results")

_MAX_EFFORT = (
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to "
    "resolve the root cause, rigorously stress-testing your logic against all potential paths, "
    "edge cases, and adversarial scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, "
    "considered alternative, and rejected hypothesis to ensure absolutely no assumption is left "
    "unchecked.\n\n"
)

# The tool declaration, line by line; the schemas (one JSON line each) go in the middle.
_TOOLS_HEAD = (
    "## Tools",
    "",
    "You have access to a set of tools to help answer the user's question. You can invoke tools "
    f'by writing a "<{DSML}tool_calls>" block like the following:',
    "",
    f"<{DSML}tool_calls>",
    f'<{DSML}invoke name="$TOOL_NAME">',
    f'<{DSML}parameter name="$PARAMETER_NAME" string="true|false">$PARAMETER_VALUE'
    f"</{DSML}parameter>",
    "...",
    f"</{DSML}invoke>",
    f'<{DSML}invoke name="$TOOL_NAME2">',
    "...",
    f"</{DSML}invoke>",
    f"</{DSML}tool_calls>",
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
_CALLS_OPEN = f"\n\n<{DSML}tool_calls"
_CALLS_CLOSE = f"</{DSML}tool_calls>"


def encode_messages(
    messages: Sequence[Mapping[str, Any]],
    thinking_mode: str,
    context: Sequence[Mapping[str, Any]] | None = None,
    drop_thinking: bool = True,
    add_default_bos_token: bool = True,
    reasoning_effort: str | None = None,
) -> str:
    """The prompt text of ``messages``, rendered after ``context`` (which is not rendered).

    ``thinking_mode`` is ``"chat"`` or ``"thinking"``; ``reasoning_effort`` is None, ``"high"``
    or ``"max"``. Tools and a response format are declared by putting ``tools`` (OpenAI format) or
    ``response_format`` on a system or developer message. BOS leads only when
    ``add_default_bos_token`` is set and there is no context.
    """
    if thinking_mode not in THINKING_MODES:
        raise ValueError(f"thinking_mode must be 'chat' or 'thinking', not {thinking_mode!r}")
    if reasoning_effort not in EFFORTS:
        raise ValueError(
            f"reasoning_effort must be None, 'high' or 'max', not {reasoning_effort!r}"
        )
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
        if index == 0 and thinking and reasoning_effort == "max":
            parts.append(_MAX_EFFORT)
        parts.append(_message_text(conversation, index, last_user, thinking, drops))
        parts.append(_turn_change(conversation, index, last_user, thinking, drops))
    return "".join(parts)


# -- preparing the conversation ---------------------------------------------------------------


def _with_tool_results_in_user_turns(
    messages: Sequence[Mapping[str, Any]],
) -> list[dict[str, Any]]:
    """Copies of ``messages`` with every tool message turned into a ``tool_result`` block.

    V4 has no tool role: results join the user turn before them if it is made of blocks (a run of
    results, or a user message), else open one; a user message joins such a turn too (unless that
    turn carries a task), else it becomes a turn of one text block keeping only its task, wo_eos
    and mask.
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
            block = {"type": "text", "text": message.get("content", "")}
            if joins and previous.get("task") is None:
                previous["content_blocks"].append(block)
                continue
            turn = {
                "role": "user",
                "content": message.get("content", ""),
                "content_blocks": [block],
            }
            turn.update({k: message[k] for k in ("task", "wo_eos", "mask") if k in message})
            turns.append(turn)
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


def _last_user_index(turns: Sequence[Mapping[str, Any]]) -> int:
    for index in range(len(turns) - 1, -1, -1):
        if turns[index].get("role") in USER_ROLES:
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
        return str(content or "") + _declarations(message)
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
    raise ValueError(f"message {index} has role {role!r}, which DeepSeek-V4 does not have")


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
        text += f"\n\n<{DSML}tool_calls>\n{invocations}\n</{DSML}tool_calls>"
    return text if message.get("wo_eos", False) else text + EOS


def _invocation(call: Mapping[str, Any]) -> str:
    function = call["function"]
    name, raw = function["name"], function["arguments"]
    try:
        arguments = json.loads(raw)
    except Exception:
        # Text that is not JSON (or an object instead of text) is kept as one "arguments" value.
        arguments = {"arguments": raw}
    if not isinstance(arguments, dict):
        raise TypeError(f"tool call {name!r}: arguments must be a JSON object")
    parameters = "\n".join(_parameter(str(key), value) for key, value in arguments.items())
    return f'<{DSML}invoke name="{name}">\n{parameters}\n</{DSML}invoke>'


def _parameter(key: str, value: Any) -> str:
    # Strings go in as they are (no escaping); anything else as JSON with ", " and ": ".
    is_text = isinstance(value, str)
    body = value if is_text else _to_json(value)
    flag = "true" if is_text else "false"
    return f'<{DSML}parameter name="{key}" string="{flag}">{body}</{DSML}parameter>'


def _turn_change(
    turns: list[dict[str, Any]], index: int, last_user: int, thinking: bool, drops: bool
) -> str:
    """What follows a message when the next one is an assistant turn (or a reminder), or when it is
    the last: the assistant header and the think switch, or a task's token."""
    following = turns[index + 1].get("role") if index + 1 < len(turns) else None
    if following not in (None, "assistant", "latest_reminder"):
        return ""
    message = turns[index]
    task = message.get("task")
    if task is not None:
        if task not in TASK_TOKENS:
            raise ValueError(
                f"message {index}: unknown task {task!r}; known: {sorted(TASK_TOKENS)}"
            )
        if task != "action":
            return TASK_TOKENS[task]
        return ASSISTANT + (THINK_OPEN if thinking else THINK_CLOSE) + TASK_TOKENS[task]
    if message.get("role") not in USER_ROLES:
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
    invoke, invoke_end = f"<{DSML}invoke", f"</{DSML}invoke"
    parameter, parameter_end = f"<{DSML}parameter", f"/{DSML}parameter"
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

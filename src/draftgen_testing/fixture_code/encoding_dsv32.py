"""DeepSeek-V3.2's chat encoding: OpenAI-style messages to the prompt text its servers tokenize.

Written for draftgen to behave as the encoder DeepSeek ships in the model repository
(``encoding/encoding_dsv32.py``, checked against that repository's golden test case). The
``deepseek-v3.2`` test fixture copies this file to ``encoding/encoding_dsv32.py`` in place of a chat
template. Standard library only: it is loaded from the tokenizer directory, not from draftgen.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["encode_messages"]

BOS = "<｜begin▁of▁sentence｜>"
EOS = "<｜end▁of▁sentence｜>"
USER = "<｜User｜>"
ASSISTANT = "<｜Assistant｜>"
THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
DSML = "｜DSML｜"

THINKING_MODES = ("chat", "thinking")
# Both open a user turn; the last of either is "the last user message".
USER_ROLES = ("user", "developer")

# The tool declaration text, line by line; the schemas go between <functions> and </functions>.
_TOOLS_PREAMBLE = (
    "## Tools",
    "",
    "You have access to a set of tools you can use to answer the user's question.",
    f'You can invoke functions by writing a "<{DSML}function_calls>" block like the following '
    "as part of your reply to the user:",
    f"<{DSML}function_calls>",
    f'<{DSML}invoke name="$FUNCTION_NAME">',
    f'<{DSML}parameter name="$PARAMETER_NAME" string="true|false">$PARAMETER_VALUE'
    f"</{DSML}parameter>",
    "...",
    f"</{DSML}invoke>",
    f'<{DSML}invoke name="$FUNCTION_NAME2">',
    "...",
    f"</{DSML}invoke>",
    f"</{DSML}function_calls>",
    "",
    "String and scalar parameters should be specified as is without any escaping or quotes, "
    'while lists and objects should use JSON format. The "string" attribute should be set to '
    '"true" for string type parameters and "false" for other types (numbers, booleans, arrays, '
    "objects).",
    "",
    "If the thinking_mode is enabled, then after function results you should strongly consider "
    "outputting a thinking block. Here is an example:",
    "",
    f"<{DSML}function_calls>",
    "...",
    f"</{DSML}function_calls>",
    "",
    "<function_results>",
    "...",
    "</function_results>",
    "",
    f"{THINK_OPEN}...thinking about results{THINK_CLOSE}",
    "",
    "Here are the functions available in JSONSchema format:",
    "<functions>",
)
_RESPONSE_FORMAT_PREAMBLE = (
    "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n"
)
_DEVELOPER_LEAD = "\n\n# The user's message is: "


def encode_messages(
    messages: Sequence[Mapping[str, Any]],
    thinking_mode: str,
    context: Sequence[Mapping[str, Any]] | None = None,
    drop_thinking: bool = True,
    add_default_bos_token: bool = True,
) -> str:
    """The prompt text of ``messages``, rendered after ``context`` (which is not rendered).

    ``thinking_mode`` is ``"chat"`` or ``"thinking"``. Tools and a response format are declared by
    putting ``tools`` (OpenAI format) or ``response_format`` on a system or developer message.
    BOS leads only when ``add_default_bos_token`` is set and there is no context. Reasoning of
    assistant turns before the last user message is never rendered; in thinking mode
    ``drop_thinking`` also refuses developer turns before it, as the published encoder does.
    """
    if thinking_mode not in THINKING_MODES:
        raise ValueError(f"thinking_mode must be 'chat' or 'thinking', not {thinking_mode!r}")
    earlier = list(context or [])
    conversation = earlier + list(messages)
    last_user = _last_user_index(conversation)
    if thinking_mode == "thinking" and drop_thinking:
        _check_history_roles(conversation, last_user)
    thinking = thinking_mode == "thinking"
    parts = [BOS] if add_default_bos_token and not earlier else []
    for index in range(len(earlier), len(conversation)):
        parts.append(_render(conversation, index, last_user, thinking))
    return "".join(parts)


def _last_user_index(conversation: Sequence[Mapping[str, Any]]) -> int:
    for index in range(len(conversation) - 1, -1, -1):
        if conversation[index].get("role") in USER_ROLES:
            return index
    return -1


def _check_history_roles(conversation: Sequence[Mapping[str, Any]], last_user: int) -> None:
    # The published encoder removes such turns from the list and then renders by the old indices,
    # which always ends in an index error: refuse them up front instead.
    for index, message in enumerate(conversation[: max(last_user, 0)]):
        role = message.get("role")
        if role not in ("user", "system", "tool", "assistant"):
            raise ValueError(
                f"messages[{index}] has role {role!r} before the last user message, which "
                "DeepSeek-V3.2's encoder cannot render in thinking mode with drop_thinking"
            )


def _render(
    conversation: Sequence[Mapping[str, Any]], index: int, last_user: int, thinking: bool
) -> str:
    message = conversation[index]
    role = message.get("role")
    if role == "system":
        return str(message.get("content") or "") + _declarations(message)
    if role == "developer":
        if not message.get("content"):
            raise ValueError(f"messages[{index}]: a developer message needs content")
        body = _declarations(message) + _DEVELOPER_LEAD + str(message["content"])
        return _user_turn(body, opens_thinking=thinking and index == last_user)
    if role == "user":
        content = str(message.get("content"))
        return _user_turn(content, opens_thinking=thinking and index == last_user)
    if role == "tool":
        return _tool_result(conversation, index, last_user, thinking)
    if role == "assistant":
        return _assistant_turn(message, index, thinks=thinking and index > last_user)
    raise ValueError(f"messages[{index}] has role {role!r}, which DeepSeek-V3.2 does not have")


def _user_turn(body: str, opens_thinking: bool) -> str:
    # The user turn also opens the assistant's: <think> only after the last user message.
    return USER + body + ASSISTANT + (THINK_OPEN if opens_thinking else THINK_CLOSE)


def _declarations(message: Mapping[str, Any]) -> str:
    text = ""
    if message.get("tools"):
        schemas = [_to_json(tool["function"]) for tool in message["tools"]]
        text += "\n\n" + "\n".join((*_TOOLS_PREAMBLE, *schemas, "</functions>", ""))
    if message.get("response_format"):
        text += "\n\n" + _RESPONSE_FORMAT_PREAMBLE + _to_json(message["response_format"])
    return text


def _tool_result(
    conversation: Sequence[Mapping[str, Any]], index: int, last_user: int, thinking: bool
) -> str:
    # Results answer the calls of the assistant turn before the run of tool messages, in order;
    # they continue that turn's text (no user marker), one <result> each.
    caller = index - 1
    while caller >= 0 and conversation[caller].get("role") == "tool":
        caller -= 1
    if caller < 0 or conversation[caller].get("role") != "assistant":
        raise ValueError(f"messages[{index}] is a tool result with no assistant turn before it")
    position = index - caller
    calls = conversation[caller].get("tool_calls") or []
    if len(calls) < position:
        raise ValueError(
            f"messages[{index}] is tool result {position} but messages[{caller}] made "
            f"{len(calls)} tool call(s)"
        )
    text = "\n\n<function_results>" if position == 1 else ""
    text += f"\n<result>{conversation[index].get('content')}</result>"
    if position == len(calls):
        text += "\n</function_results>\n\n"
        text += THINK_OPEN if thinking and index >= last_user else THINK_CLOSE
    return text


def _assistant_turn(message: Mapping[str, Any], index: int, thinks: bool) -> str:
    calls = message.get("tool_calls") or []
    reasoning = message.get("reasoning_content")
    text = ""
    if thinks:
        # The <think> was written by the user turn (or tool results) before.
        if not (reasoning or calls):
            raise ValueError(
                f"messages[{index}]: in thinking mode an assistant turn after the last user "
                "message needs reasoning_content or tool_calls"
            )
        text += (reasoning or "") + THINK_CLOSE
    text += str(message.get("content") or "")
    if calls:
        invocations = "\n".join(_invocation(call, index) for call in calls)
        text += f"\n\n<{DSML}function_calls>\n{invocations}\n</{DSML}function_calls>"
    return text + EOS


def _invocation(call: Mapping[str, Any], index: int) -> str:
    function = call["function"]
    raw = function["arguments"]
    if not isinstance(raw, str):
        # The published encoder json.loads() the arguments: a parsed mapping is an error there.
        raise TypeError(
            f"messages[{index}]: tool call arguments must be a JSON text, not {type(raw).__name__}"
        )
    arguments = json.loads(raw)
    if not isinstance(arguments, dict):
        raise ValueError(f"messages[{index}]: tool call arguments must be a JSON object")
    parameters = "\n".join(_parameter(key, value) for key, value in arguments.items())
    return f'<{DSML}invoke name="{function["name"]}">\n{parameters}\n</{DSML}invoke>'


def _parameter(key: str, value: Any) -> str:
    # Strings go in raw (no escaping); anything else as JSON with the default ", " / ": ".
    if isinstance(value, str):
        return f'<{DSML}parameter name="{key}" string="true">{value}</{DSML}parameter>'
    return f'<{DSML}parameter name="{key}" string="false">{_to_json(value)}</{DSML}parameter>'


def _to_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)

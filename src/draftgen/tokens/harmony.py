"""gpt-oss prompts as vLLM renders them: the chat request turned into harmony messages and
rendered by OpenAI's ``openai-harmony`` library, not through the model's Jinja chat template.

vLLM's chat path for ``model_type == "gpt_oss"`` (``vllm/renderers/online_renderer.py``,
``_make_request_with_harmony``; ``vllm/entrypoints/openai/parser/harmony_utils.py``) never
renders the template: it builds a system message, a developer message and the conversation as
harmony ``Message`` values and asks harmony for the ids. The template differs from that at an
equal token count (a leading system text becomes "# Instructions" followed by a blank line), so
draftgen renders the way vLLM does, step by step below, each step named after vLLM's function.
"""

from __future__ import annotations

import datetime as dt
import os
import threading
from typing import Any

from draftgen.errors import DraftgenError

# The efforts vLLM hands harmony (``harmony_utils.REASONING_EFFORT``); any other value, "none"
# included, is refused with a 400 before anything is generated.
HARMONY_EFFORTS = ("low", "medium", "high")


class HarmonyRefused(ValueError):
    """A request vLLM's harmony path refuses (an effort it does not take, a role harmony has no
    author for): the rendering records the message and the sample is never verified."""


class HarmonyUnavailable(DraftgenError, RuntimeError):
    """openai-harmony is missing or cannot load its vocabulary."""


class HarmonyRenderer:
    """Renders a chat request as vLLM's harmony path does; ``render`` returns (text, ids)."""

    def __init__(self, tokenizer: Any = None) -> None:
        self.encoding = harmony_encoding(tokenizer)
        import openai_harmony

        self.harmony = openai_harmony

    def render(
        self, messages: list[dict], tools: list[dict] | None, variables: dict, now: dt.datetime
    ) -> tuple[str, list[int]]:
        h = self.harmony
        instructions, rest = _leading_instructions(messages)
        effort = variables.get("reasoning_effort")
        prefix = [self._system(effort, now.strftime("%Y-%m-%d"))]
        if instructions or tools:
            # build_harmony_preamble: a developer message only when there is something in it.
            prefix.append(self._developer(instructions, tools))
        conversation = [*prefix, *self._conversation(rest)]
        ids = self.encoding.render_conversation_for_completion(
            h.Conversation.from_messages(conversation), h.Role.ASSISTANT
        )
        return self.encoding.decode(ids), list(ids)

    # -- the preamble (get_system_message, get_developer_message) -----------------------------

    def _system(self, effort: object, date: str) -> Any:
        h = self.harmony
        content = h.SystemContent.new()
        if effort is not None:
            if effort not in HARMONY_EFFORTS:
                raise HarmonyRefused(
                    f"reasoning_effort={effort!r} is not supported by Harmony. "
                    f"Supported values are: {', '.join(HARMONY_EFFORTS)}."
                )
            content = content.with_reasoning_effort(h.ReasoningEffort(effort.capitalize()))
        # vLLM stamps VLLM_SYSTEM_START_DATE or the server's today; draftgen records its own
        # instant with the rendering, and a request across midnight is flagged, not guessed.
        content = content.with_conversation_start_date(date)
        return h.Message.from_role_and_content(h.Role.SYSTEM, content)

    def _developer(self, instructions: str | None, tools: list[dict] | None) -> Any:
        h = self.harmony
        content = h.DeveloperContent.new()
        if instructions is not None:
            content = content.with_instructions(instructions)
        functions = []
        for tool in tools or ():
            kind = tool.get("type") if isinstance(tool, dict) else None
            if kind in ("web_search_preview", "code_interpreter", "container"):
                continue  # built-in tools: vLLM's chat path declares none of them
            if kind != "function":
                raise HarmonyRefused(f"tool type {kind} not supported")
            function = tool.get("function") or {}
            functions.append(
                h.ToolDescription.new(
                    name=function.get("name"),
                    description=function.get("description") or "",
                    parameters=function.get("parameters"),
                )
            )
        if functions:
            content = content.with_function_tools(functions)
        return h.Message.from_role_and_content(h.Role.DEVELOPER, content)

    # -- the conversation (parse_chat_inputs_to_harmony_messages) ------------------------------

    def _conversation(self, messages: list[dict]) -> list[Any]:
        # A tool result is addressed from the function its call named, looked up by call id
        # over the whole conversation (a later call with the same id wins, as in a dict).
        names = {
            call.get("id"): (call.get("function") or {}).get("name")
            for message in messages
            for call in message.get("tool_calls") or ()
            if isinstance(call, dict)
        }
        converted: list[Any] = []
        for message in messages:
            converted.extend(self._message(message, names))
        return _drop_answered_analysis(converted)

    def _message(self, message: dict, names: dict) -> list[Any]:
        """One chat message as the harmony messages vLLM makes of it (none for an empty answer)."""
        h = self.harmony
        role = message.get("role")
        calls = message.get("tool_calls") or []
        if role == "assistant" and calls:
            return _tool_call_turn(h, message, calls)
        if role == "tool":
            return [_tool_result(h, message, names)]
        out: list[Any] = []
        if role == "assistant" and message.get("reasoning"):
            out.append(_assistant(h, message["reasoning"]).with_channel("analysis"))
        content = message.get("content") or ""
        if isinstance(content, str):
            parts = [h.TextContent(text=content)]
        else:
            parts = [h.TextContent(text=part.get("text", "")) for part in content]
        if role == "assistant":
            # An empty answer is left out: the history holds no empty final message.
            if parts and parts[0].text:
                out.append(h.Message.from_role_and_contents(role, parts).with_channel("final"))
        elif role in ("system", "developer"):
            # A system or developer message after the first becomes developer instructions.
            text = _flat_text(message.get("content"))
            if text is not None:
                developer = h.DeveloperContent.new().with_instructions(text)
                out.append(h.Message.from_role_and_content(h.Role.DEVELOPER, developer))
        else:
            try:
                out.append(h.Message.from_role_and_contents(role, parts))
            except Exception as exc:  # harmony has no author for this role
                raise HarmonyRefused(f"harmony cannot render a {role!r} message: {exc}") from None
        return out


def _tool_call_turn(h: Any, message: dict, calls: list) -> list[Any]:
    """An assistant turn with tool calls: its text a commentary preamble, its reasoning the
    analysis, then one commentary message per call, addressed to the function, content type
    "json"."""
    out: list[Any] = []
    text = _flat_text(message.get("content"))
    if text:
        out.append(_assistant(h, text).with_channel("commentary"))
    if message.get("reasoning"):
        out.append(_assistant(h, message["reasoning"]).with_channel("analysis"))
    for call in calls:
        function = call.get("function") or {}
        arguments = function.get("arguments") or ""
        if not isinstance(arguments, str):
            # The chat API's arguments are JSON text; vLLM's request model refuses
            # anything else before harmony sees it.
            raise HarmonyRefused(
                f"tool_calls[].function.arguments must be JSON text, not {type(arguments).__name__}"
            )
        out.append(
            _assistant(h, arguments)
            .with_channel("commentary")
            .with_recipient(f"functions.{function.get('name', '')}")
            .with_content_type("json")
        )
    return out


def _tool_result(h: Any, message: dict, names: dict) -> Any:
    """A tool message: a commentary message to the assistant from the function whose call it
    answers (``names``: function names by call id)."""
    name = names.get(message.get("tool_call_id", ""), "") or ""
    author = h.Author.new(h.Role.TOOL, f"functions.{name}")
    text = _flat_text(message.get("content")) or ""
    return (
        h.Message.from_author_and_content(author, text)
        .with_channel("commentary")
        .with_recipient("assistant")
    )


def _assistant(h: Any, text: str) -> Any:
    return h.Message.from_role_and_content(h.Role.ASSISTANT, text)


def _leading_instructions(messages: list[dict]) -> tuple[str | None, list[dict]]:
    """extract_instructions_from_messages: a first system or developer message is the
    developer message's instructions (its text parts joined), not a turn."""
    if messages and messages[0].get("role") in ("system", "developer"):
        return _flat_text(messages[0].get("content")), list(messages[1:])
    return None, list(messages)


def _flat_text(content: object) -> str | None:
    """flatten_input_text_content: a string as is, parts' texts joined, None if none."""
    if content is None or isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    texts = [
        item if isinstance(item, str) else item.get("text")
        for item in content
        if isinstance(item, str) or (isinstance(item, dict) and item.get("text") is not None)
    ]
    return "".join(texts) if texts else None


def _drop_answered_analysis(messages: list[Any]) -> list[Any]:
    """auto_drop_analysis_messages: reasoning before the last final answer is dropped."""
    last_final = max(
        (
            i
            for i, m in enumerate(messages)
            if m.author.role == "assistant" and m.channel == "final"
        ),
        default=-1,
    )
    return [m for i, m in enumerate(messages) if not (i < last_final and m.channel == "analysis")]


_LOCK = threading.Lock()
_ENCODING: list[Any] = []  # the loaded encoding, once


def harmony_encoding(tokenizer: Any = None) -> Any:
    """harmony's gpt-oss encoding, its o200k vocabulary read from a local, hash-checked file.

    harmony downloads ``o200k_base.tiktoken`` unless ``TIKTOKEN_ENCODINGS_BASE`` names a
    directory holding it; draftgen points it at one it writes (from the tokenizer's own ranks
    where no other source is installed), so a run needs no network.
    """
    with _LOCK:
        if not _ENCODING:
            _ENCODING.append(_load_encoding(tokenizer))
        return _ENCODING[0]


def _load_encoding(tokenizer: Any) -> Any:
    try:
        import openai_harmony
    except ImportError:
        raise HarmonyUnavailable(
            "gpt-oss prompts are rendered by openai-harmony, as vLLM renders them; install it "
            "with pip install openai-harmony"
        ) from None
    if not os.environ.get("TIKTOKEN_ENCODINGS_BASE"):
        from draftgen.tokens.o200k import harmony_encodings_dir

        os.environ["TIKTOKEN_ENCODINGS_BASE"] = str(harmony_encodings_dir(tokenizer))
    try:
        return openai_harmony.load_harmony_encoding(
            openai_harmony.HarmonyEncodingName.HARMONY_GPT_OSS
        )
    except Exception as exc:
        raise HarmonyUnavailable(
            f"openai-harmony cannot load the o200k vocabulary ({exc}); point "
            "TIKTOKEN_ENCODINGS_BASE at a directory holding o200k_base.tiktoken"
        ) from None

"""The reference engine: the prompt ids vLLM's OpenAI chat path gives the model for a request,
written from vLLM's source (each step cites the function it follows), never from draftgen's code.
"""

# Sources read in vllm-project/vllm (V = vllm/, F = vllm/frontend/):
#   F/entrypoints/openai/chat_completion/protocol.py     request validation, chat params
#   V/renderers/chat_utils/parse_chat_message_content.py the conversation a template is given
#   V/renderers/chat_utils/parse_chat_message.py         _postprocess_messages (tool arguments)
#   F/processing/renderers/online_renderer.py           tools dumped; gpt-oss via harmony
#   F/processing/renderers/hf.py                        Jinja templates (HfRenderer)
#   F/processing/tokenizers/deepseek_v32.py, V/tokenizers/deepseek_v4.py, deepseek_v41.py
#   F/processing/renderers/kimi_k3.py                   Kimi K3 (KimiK3Renderer)
#   F/entrypoints/openai/parser/harmony_utils.py        gpt-oss messages
# A request vLLM answers with an error instead of generating raises ``EngineRefused``.

from __future__ import annotations

import copy
import datetime as dt
import functools
import importlib.util
import inspect
import json
import os
from pathlib import Path
from typing import Any

import jinja2.meta
import jinja2.nodes
from transformers.utils.chat_template_utils import _compile_jinja_template


class EngineRefused(Exception):
    """vLLM answers the request with an error (a 400 from validation or the renderer)."""


# -- the request as vLLM validates it ----------------------------------------------------------


def validated_messages(messages: list[dict]) -> list[dict]:
    """``ChatCompletionRequest._normalize_messages_before``: ``reasoning_content`` is popped from
    every message and becomes ``reasoning`` unless that is already set. A deep copy: later steps
    change tool calls in place, as vLLM's do."""
    validated = copy.deepcopy(messages)
    for message in validated:
        reasoning_content = message.pop("reasoning_content", None)
        if reasoning_content is not None and message.get("reasoning") is None:
            message["reasoning"] = reasoning_content
    return validated


def dumped_tools(tools: list[dict] | None) -> list[dict] | None:
    """``[tool.model_dump() for tool in request.tools]`` (online_renderer.render_chat): the
    pydantic ``ChatCompletionToolsParam`` and ``FunctionDefinition`` keep ``description`` and
    ``parameters`` as None when absent and drop ``strict``/``defer_loading`` when None."""
    if tools is None:
        return None
    dumped = []
    for tool in tools:
        if tool.get("type", "function") != "function":
            raise EngineRefused(f"tools: type {tool.get('type')!r} is not 'function'")
        function = tool["function"]
        body = {
            "name": function["name"],
            "description": function.get("description"),
            "parameters": copy.deepcopy(function.get("parameters")),
        }
        for optional in ("strict", "defer_loading"):
            if function.get(optional) is not None:
                body[optional] = function[optional]
        dumped.append({"type": "function", "function": body})
    return dumped


# -- the conversation a template or encoder is given --------------------------------------------


def part_texts(content: Any) -> list[str]:
    """The text parts of ``content`` (``_parse_chat_message_content``: None is no parts, a string
    one text part; parts whose text is None are skipped)."""
    if content is None:
        return []
    if isinstance(content, str):
        return [content]
    texts = []
    for part in content:
        text = part if isinstance(part, str) else part.get("text")
        if text is not None:
            texts.append(text)
    return texts


def parsed_conversation(messages: list[dict], content_format: str) -> list[dict]:
    """``parse_chat_messages`` of validated messages: ``_parse_chat_message_content`` per message,
    then ``_postprocess_messages``.

    Content is a list of ``{"type": "text"}`` parts for an "openai" template, else the parts'
    texts joined by "\\n" (None content: no parts). Assistant messages keep ``tool_calls`` (the
    same call dicts) and get ``reasoning`` and ``reasoning_content`` from ``reasoning``; tool
    messages keep ``tool_call_id`` and always get text content; ``name`` is kept; a developer
    message gets ``tools`` (None when absent). Nothing else reaches the template.
    """
    conversation = []
    for message in messages:
        role = message["role"]
        texts = part_texts(message.get("content"))
        if content_format == "openai":
            content: Any = [{"type": "text", "text": text} for text in texts]
        else:
            content = "\n".join(texts)
        parsed: dict[str, Any] = {"role": role, "content": content}
        if role == "assistant":
            if message.get("tool_calls") is not None:
                parsed["tool_calls"] = list(message["tool_calls"])
            if message.get("reasoning") is not None:
                parsed["reasoning"] = message["reasoning"]
                parsed["reasoning_content"] = message["reasoning"]
        elif role == "tool":
            if "tool_call_id" in message:
                parsed["tool_call_id"] = message["tool_call_id"]
            if isinstance(content, list):
                parsed["content"] = "\n".join(part["text"] for part in content)
        if isinstance(message.get("name"), str):
            parsed["name"] = message["name"]
        if role == "developer":
            parsed["tools"] = message.get("tools")
        conversation.append(parsed)
    parse_tool_arguments(conversation)
    return conversation


def parse_tool_arguments(conversation: list[dict]) -> None:
    """``_postprocess_messages``: an empty ``tool_calls`` list is dropped; each call's
    ``arguments`` becomes a mapping: a JSON object text parsed, anything else (empty text, text
    that is not JSON, JSON that is not an object, None) ``{}``. The call dicts are the request's
    own, so the request's messages change too."""
    for message in conversation:
        if message["role"] != "assistant" or "tool_calls" not in message:
            continue
        calls = message["tool_calls"]
        if not isinstance(calls, list):
            continue
        if not calls:
            message.pop("tool_calls")
            continue
        for call in calls:
            function = call.get("function")
            if call.get("type", "function") != "function" or not isinstance(function, dict):
                raise EngineRefused("chat completions only support tool_calls of type 'function'")
            arguments = function.get("arguments")
            if not arguments:
                function["arguments"] = {}
                continue
            if isinstance(arguments, str):
                try:
                    arguments = json.loads(arguments)
                except json.JSONDecodeError:
                    arguments = None
            function["arguments"] = arguments if isinstance(arguments, dict) else {}


# -- Jinja chat templates (HfRenderer) ----------------------------------------------------------


def _unwrapped(node: jinja2.nodes.Node) -> jinja2.nodes.Node:
    """``node`` under any filter, test or slice around it (vLLM's ``_is_var_or_elems_access``)."""
    while True:
        if isinstance(node, jinja2.nodes.Filter | jinja2.nodes.Test) and node.node is not None:
            node = node.node
        elif isinstance(node, jinja2.nodes.Getitem) and isinstance(node.arg, jinja2.nodes.Slice):
            node = node.node
        else:
            return node


def _reads(node: jinja2.nodes.Node, name: str, key: str | None = None) -> bool:
    """Whether ``node`` is variable ``name`` (or its item ``key``), possibly filtered or sliced."""
    node = _unwrapped(node)
    if key is not None:
        if isinstance(node, jinja2.nodes.Getitem):
            if not (isinstance(node.arg, jinja2.nodes.Const) and node.arg.value == key):
                return False
        elif not (isinstance(node, jinja2.nodes.Getattr) and node.attr == key):
            return False
        node = node.node
    return isinstance(node, jinja2.nodes.Name) and node.ctx == "load" and node.name == name


@functools.lru_cache(maxsize=64)
def content_format(template: str) -> str:
    """``_detect_content_format`` (renderers/hf.py): "openai" when the template loops over a
    message's ``content`` (a loop over ``messages``, or a variable set from it, names the
    message) or over a variable named ``content``; else "string"."""
    ast = _compile_jinja_template(template).environment.parse(template)
    lists, seen = ["messages"], {"messages"}
    for name in lists:  # variables set from ``messages`` (or a slice or filter of it)
        for assign in ast.find_all(jinja2.nodes.Assign):
            target = assign.target
            if _reads(assign.node, name) and isinstance(target, jinja2.nodes.Name):
                if target.name not in seen:
                    seen.add(target.name)
                    lists.append(target.name)
    loops = list(ast.find_all(jinja2.nodes.For))
    items = [
        loop.target.name
        for loop in loops
        if isinstance(loop.target, jinja2.nodes.Name) and any(_reads(loop.iter, n) for n in lists)
    ]
    for loop in loops:
        if any(_reads(loop.iter, item, "content") for item in items):
            return "openai"
        if isinstance(loop.iter, jinja2.nodes.Name) and loop.iter.name == "content":
            return "openai"
    return "string"


def developer_as_system(conversation: list[dict], template: str) -> list[dict]:
    """``safe_apply_chat_template``: when a message is a developer's and the template never
    names the role ``"developer"`` (``_detect_developer_role_support``), developer messages
    become system messages without ``tools`` (``_convert_developer_to_system``), and then any
    system message that is not alone at the front is merged with the others into one first
    system message, their texts joined by a blank line (``_consolidate_system_messages``)."""
    if not any(m["role"] == "developer" for m in conversation):
        return conversation
    if '"developer"' in template or "'developer'" in template:
        return conversation
    converted = []
    for message in conversation:
        if message["role"] == "developer":
            message = {k: v for k, v in message.items() if k != "tools"} | {"role": "system"}
        converted.append(message)
    systems, others, merge = [], [], False
    for index, message in enumerate(converted):
        if message["role"] != "system":
            others.append(message)
            continue
        merge = merge or index > 0 or bool(systems)
        text = message.get("content", "")
        if isinstance(text, list):
            text = "\n".join(p["text"] if isinstance(p, dict) else p for p in text)
        if text:
            systems.append(text)
    if not merge:
        return converted
    return [{"role": "system", "content": "\n\n".join(systems)}, *others]


def accepted_kwargs(tokenizer: Any, template: str, kwargs: dict) -> dict:
    """``resolve_chat_template_kwargs``: the kwargs the template reads, the tokenizer's
    ``apply_chat_template`` names, or transformers' base ``apply_chat_template`` names."""
    names = _accepted_names(type(tokenizer), template)
    return {k: v for k, v in kwargs.items() if k in names - {"chat_template", "tokenize"}}


@functools.lru_cache(maxsize=64)
def _accepted_names(tokenizer_class: type, template: str) -> frozenset[str]:
    """``accepted_kwargs``' names, once per class and template (vLLM caches them too: parsing a
    template for each request of the audit was a tenth of its time)."""
    from transformers import PythonBackend

    env = _compile_jinja_template(template).environment
    names = set(jinja2.meta.find_undeclared_variables(env.parse(template)))
    own = inspect.signature(tokenizer_class.apply_chat_template).parameters
    names |= {k for k, p in own.items() if p.kind is not inspect.Parameter.VAR_KEYWORD}
    base = inspect.signature(PythonBackend.apply_chat_template).parameters
    names |= {k for k, p in base.items() if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}
    return frozenset(names)


def template_kwargs(variables: dict, tools: list[dict] | None) -> dict:
    """The kwargs ``ChatCompletionRequest.build_chat_params`` and ``preprocess_chat`` give the
    renderer: ``chat_template_kwargs`` (here ``variables``), the request's
    ``add_generation_prompt`` (True) and ``continue_final_message`` (False) over them, and
    ``tools``; None values are left out (``merge_kwargs``)."""
    kwargs = {**variables, "add_generation_prompt": True, "continue_final_message": False}
    if tools is not None:
        kwargs.setdefault("tools", dumped_tools(tools))
    return {k: v for k, v in kwargs.items() if v is not None}


def hf_prompt_ids(tokenizer: Any, messages: list[dict], tools: list[dict] | None, variables: dict):
    """``HfRenderer.render_messages``: the template resolved (``resolve_chat_template``), the
    conversation parsed in the template's content format, developer messages converted where
    the template has no such role, ``safe_apply_chat_template(tokenize=False)``, then the text
    encoded without added special tokens (special-token spellings in it become special ids)."""
    template = tokenizer.get_chat_template(None, tools)
    conversation = parsed_conversation(validated_messages(messages), content_format(template))
    conversation = developer_as_system(conversation, template)
    kwargs = template_kwargs(variables, tools)
    tool_dicts = kwargs.pop("tools", None)
    kwargs = accepted_kwargs(tokenizer, template, kwargs)
    try:
        text = tokenizer.apply_chat_template(
            conversation=conversation,
            tools=tool_dicts,
            chat_template=template,
            tokenize=False,
            **kwargs,
        )
    except Exception as exc:  # safe_apply_chat_template: any error is a ValueError, a 400
        raise EngineRefused(f"{type(exc).__name__}: {exc}") from None
    return plain_ids(tokenizer.encode(text, add_special_tokens=False))


def plain_ids(result: Any) -> list[int]:
    if hasattr(result, "keys"):
        result = result["input_ids"]
    return [int(i) for i in result]


# -- DeepSeek's Python encoders (vLLM's tokenizer wrappers) --------------------------------------


@functools.lru_cache(maxsize=8)
def encoder_module(path: str) -> Any:
    """The ``encode_messages`` module shipped in the fixture's ``encoding/`` directory."""
    spec = importlib.util.spec_from_file_location(f"audit_encoder_{abs(hash(path))}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def encoder_path(tokenizer: Any) -> Path | None:
    directory = Path(getattr(tokenizer, "name_or_path", "") or "") / "encoding"
    found = sorted(directory.glob("*.py")) if directory.is_dir() else []
    return found[0] if found else None


def arguments_as_text(messages: list[dict]) -> list[dict]:
    """Parsed ``arguments`` mappings back to their JSON text. vLLM's vendored encoders read a
    mapping as they read its JSON text (``encode_arguments_to_dsml`` in
    vllm/tokenizers/deepseek_v32_encoding.py and deepseek_v4_encoding.py: ``json.loads`` a string,
    else use it as is; V4.1's takes a mapping first); the fixtures' encoders read text."""
    messages = copy.deepcopy(messages)
    for message in messages:
        for call in message.get("tool_calls") or ():
            if isinstance(call["function"].get("arguments"), dict):
                call["function"]["arguments"] = json.dumps(call["function"]["arguments"])
    return messages


def dsv32_text(encode, conversation: list[dict], tools: list[dict] | None, kwargs: dict) -> str:
    """``_DeepseekV32Tokenizer.apply_chat_template`` (frontend/processing/tokenizers/
    deepseek_v32.py): thinking only when ``thinking`` or ``enable_thinking`` is truthy; tools
    on a new system message put first; history reasoning dropped when the last message is a
    user's."""
    thinking = kwargs.get("thinking", False) or kwargs.get("enable_thinking", False)
    messages = list(conversation)
    if tools:
        messages.insert(0, {"role": "system", "tools": tools})
    drop_thinking = messages[-1]["role"] == "user"
    return encode(
        messages, thinking_mode="thinking" if thinking else "chat", drop_thinking=drop_thinking
    )


def dsv4_text(encode, conversation: list[dict], tools: list[dict] | None, kwargs: dict) -> str:
    """``_DeepseekV4Tokenizer.apply_chat_template`` (vllm/tokenizers/deepseek_v4.py): thinking on
    unless ``thinking``/``enable_thinking`` is given and falsy; tools join a leading system or
    developer message, else a new system message put first; effort "none" turns thinking off,
    "max" stays, "low"/"minimal"/"medium" become "low", any other string "high", no effort
    "high" when thinking; ``drop_thinking`` True unless given."""
    given = "thinking" in kwargs or "enable_thinking" in kwargs
    thinking = bool(kwargs.get("thinking")) or bool(kwargs.get("enable_thinking")) or not given
    messages = list(conversation)
    if tools:
        if messages and messages[0].get("role") in ("system", "developer"):
            messages[0] = {**messages[0], "tools": tools}
        else:
            messages.insert(0, {"role": "system", "tools": tools})
    effort = kwargs.get("reasoning_effort")
    if not isinstance(effort, str):
        effort = "high" if thinking else None
    elif effort == "none":
        thinking, effort = False, None
    elif effort in ("low", "minimal", "medium"):
        effort = "low"
    elif effort != "max":
        effort = "high"
    return encode(
        messages,
        thinking_mode="thinking" if thinking else "chat",
        drop_thinking=kwargs.get("drop_thinking", True),
        reasoning_effort=effort,
    )


# vllm/tokenizers/deepseek_v41_encoding.py REASONING_EFFORT_MAPPINGS: what the wrapper accepts.
DSV41_EFFORTS = ("low", "high", "xhigh", "max")


def dsv41_text(encode, messages: list[dict], tools: list[dict] | None, kwargs: dict) -> str:
    """``_DeepseekV41Tokenizer.apply_chat_template`` (vllm/tokenizers/deepseek_v41.py): the
    request's own messages (``_normalize_messages``: a role outside system, developer, user,
    assistant, tool refused, ``reasoning`` copied to ``reasoning_content``, text parts joined by
    a blank line), tools on the first system message wherever it is (else a new empty one put
    first), thinking on unless turned off, effort "none" thinking off, no effort "high", an effort
    outside low/high/xhigh/max (or an int 1..100) refused, ``drop_thinking`` True unless given."""
    normalized = copy.deepcopy(messages)
    for message in normalized:
        if message.get("role") not in ("system", "developer", "user", "assistant", "tool"):
            raise EngineRefused(f"Invalid role: {message.get('role')}")
        if "reasoning" in message:
            message["reasoning_content"] = message["reasoning"]
        if isinstance(message.get("content"), list):
            message["content"] = "\n\n".join(p.get("text", "") for p in message["content"])
    if tools:
        system = next((m for m in normalized if m["role"] == "system"), None)
        if system is None:
            system = {"role": "system", "content": ""}
            normalized.insert(0, system)
        system["tools"] = tools
    thinking = bool(kwargs.get("thinking") or kwargs.get("enable_thinking"))
    if "thinking" not in kwargs and "enable_thinking" not in kwargs:
        thinking = True
    effort = kwargs.get("reasoning_effort")
    if effort == "none":
        thinking, effort = False, None
    if effort is None:
        effort = "high"
    if not ((type(effort) is int and 1 <= effort <= 100) or effort in DSV41_EFFORTS):
        raise EngineRefused("DeepSeek V4.1 reasoning_effort must be low, high, xhigh, max")
    return encode(
        normalized,
        thinking_mode="thinking" if thinking else "chat",
        drop_thinking=kwargs.get("drop_thinking", True),
        reasoning_effort=effort,
    )


# Which vLLM wrapper serves the encoder a fixture ships (the --tokenizer-mode a server runs).
ENCODER_WRAPPERS = {
    "encoding_dsv32.py": "deepseek_v32",
    "encoding_dsv4.py": "deepseek_v4",
    "encoding.py": "deepseek_v41",
}


def encoder_prompt_ids(tokenizer: Any, messages: list[dict], tools, variables: dict) -> list[int]:
    """The DeepSeek renderers (frontend/processing/renderers/deepseek_v32.py, deepseek_v4.py):
    the conversation parsed as "string" content, handed with the request's messages to the
    wrapper's ``apply_chat_template``; its text encoded without added special tokens."""
    path = encoder_path(tokenizer)
    wrapper = ENCODER_WRAPPERS[path.name]
    encode = encoder_module(str(path)).encode_messages
    kwargs = template_kwargs(variables, tools)
    tool_dicts = kwargs.pop("tools", None)
    request = validated_messages(messages)
    # Parsing changes the request's own call dicts (V4.1 reads those, not the conversation).
    conversation = arguments_as_text(parsed_conversation(request, "string"))
    try:
        if wrapper == "deepseek_v32":
            text = dsv32_text(encode, conversation, tool_dicts, kwargs)
        elif wrapper == "deepseek_v4":
            text = dsv4_text(encode, conversation, tool_dicts, kwargs)
        else:
            text = dsv41_text(encode, arguments_as_text(request), tool_dicts, kwargs)
    except EngineRefused:
        raise
    except Exception as exc:
        raise EngineRefused(f"{type(exc).__name__}: {exc}") from None
    return plain_ids(tokenizer.encode(text, add_special_tokens=False))


# -- Kimi K3 (KimiK3Renderer: the tokenizer's own chat encoding) ---------------------------------

K3_EFFORTS = ("low", "high", "max")


def k3_tool_messages(conversation: list[dict]) -> list[dict]:
    """``_normalize_k3_tool_messages``: each run of tool messages after an assistant turn with
    calls is sorted into the calls' order and each result gets ``tool`` (the call's name) and
    ``index`` (its 1-based position), matched by ``tool_call_id`` or ``NAME:POSITION``; a run with
    any result that matches nothing is left as it came."""
    out: list[dict] = []
    i = 0
    while i < len(conversation):
        message = conversation[i]
        out.append(dict(message))
        i += 1
        calls = message.get("tool_calls") if message.get("role") == "assistant" else None
        if not calls:
            continue
        targets: dict[str, tuple[int, str]] = {}
        for position, call in enumerate(calls):
            name = (call.get("function") or {}).get("name")
            if not isinstance(name, str) or not name:
                continue
            aliases = [f"{name}:{position}"]
            if call.get("id"):
                aliases.insert(0, str(call["id"]))
            for alias in aliases:
                targets.setdefault(alias, (position, name))
        start = i
        while i < len(conversation) and conversation[i].get("role") == "tool":
            i += 1
        run = conversation[start:i]
        found = [targets.get(str(m.get("tool_call_id"))) for m in run]
        if any(
            target is None or m.get("tool_call_id") is None
            for target, m in zip(found, run, strict=True)
        ):
            out.extend(dict(m) for m in run)
            continue
        ordered = sorted(
            zip(found, range(len(run)), run, strict=True), key=lambda t: (t[0][0], t[1])
        )
        out.extend({**m, "tool": name, "index": pos + 1} for (pos, name), _, m in ordered)
    return out


def k3_prompt_ids(tokenizer: Any, messages: list[dict], tools, variables: dict) -> list[int]:
    """``KimiK3Renderer``: the conversation parsed as "string" content, tool results normalized,
    ``enable_thinking`` read as ``thinking`` and ``reasoning_effort`` as ``thinking_effort``
    (``_apply_k3_thinking_kwargs``: an effort outside low/high/max refused), ``tool_choice``
    passed only when neither None nor "auto" (a request with tools defaults to "auto"), and the
    tokenizer's ``apply_chat_template(tokenize=True)`` ids taken as they are."""
    conversation = k3_tool_messages(parsed_conversation(validated_messages(messages), "string"))
    kwargs = {**template_kwargs(variables, tools), "return_dict": False}
    if (enable := kwargs.pop("enable_thinking", None)) is not None:
        kwargs.setdefault("thinking", enable)
    effort = kwargs.pop("reasoning_effort", None)
    if effort == "none":
        kwargs.setdefault("thinking", False)
    elif effort is not None:
        kwargs.setdefault("thinking_effort", effort)
    if kwargs.get("thinking_effort") not in (None, *K3_EFFORTS):
        raise EngineRefused("Kimi K3 supports thinking_effort values: low, high, max")
    try:
        return plain_ids(tokenizer.apply_chat_template(conversation, tokenize=True, **kwargs))
    except Exception as exc:
        raise EngineRefused(f"{type(exc).__name__}: {exc}") from None


# -- gpt-oss (openai-harmony, OnlineRenderer._make_request_with_harmony) -------------------------

# ChatCompletionRequest.reasoning_effort's Literal; harmony_utils.REASONING_EFFORT's keys.
REQUEST_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")
HARMONY_EFFORTS = {"high": "HIGH", "medium": "MEDIUM", "low": "LOW"}


@functools.lru_cache(maxsize=1)
def harmony_encoding(tokenizer: Any = None) -> Any:
    """harmony's gpt-oss encoding; its o200k file from the directory draftgen keeps for it (a
    vocabulary file, checked against tiktoken's pinned hash: no rendering of draftgen's)."""
    import openai_harmony

    if not os.environ.get("TIKTOKEN_ENCODINGS_BASE"):
        from draftgen.tokens.o200k import harmony_encodings_dir

        os.environ["TIKTOKEN_ENCODINGS_BASE"] = str(harmony_encodings_dir(tokenizer))
    return openai_harmony.load_harmony_encoding(openai_harmony.HarmonyEncodingName.HARMONY_GPT_OSS)


def flat_text(content: Any) -> str | None:
    """``flatten_input_text_content``: a string as is, text parts joined, None if no text."""
    if content is None or isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    texts = [
        p if isinstance(p, str) else p.get("text") for p in content if isinstance(p, str | dict)
    ]
    texts = [t for t in texts if t is not None]
    return "".join(texts) if texts else None


def harmony_preamble(h, instructions, tools, effort, date: str) -> list:
    """``build_harmony_preamble``: ``get_system_message`` (effort, start date), then
    ``get_developer_message`` when there are instructions or tools (VLLM_GPT_OSS_HARMONY_SYSTEM_
    INSTRUCTIONS unset: instructions go to the developer message)."""
    system = h.SystemContent.new()
    if effort is not None:
        if effort not in HARMONY_EFFORTS:
            raise EngineRefused(
                f"reasoning_effort={effort!r} is not supported by Harmony. "
                f"Supported values are: {', '.join(HARMONY_EFFORTS)}."
            )
        system = system.with_reasoning_effort(getattr(h.ReasoningEffort, HARMONY_EFFORTS[effort]))
    system = system.with_conversation_start_date(date)
    preamble = [h.Message.from_role_and_content(h.Role.SYSTEM, system)]
    if instructions or tools:
        developer = h.DeveloperContent.new()
        if instructions is not None:
            developer = developer.with_instructions(instructions)
        functions = [
            h.ToolDescription.new(
                name=t["function"]["name"],
                description=t["function"].get("description") or "",
                parameters=t["function"].get("parameters"),
            )
            for t in tools or ()
        ]
        if functions:
            developer = developer.with_function_tools(functions)
        preamble.append(h.Message.from_role_and_content(h.Role.DEVELOPER, developer))
    return preamble


def harmony_message(h, message: dict, names: dict) -> list:
    """``parse_chat_input_to_harmony_message``."""
    role = message.get("role")
    calls = message.get("tool_calls", [])
    out = []
    if role == "assistant" and calls:
        content = flat_text(message.get("content"))
        if content:
            out.append(
                h.Message.from_role_and_content(h.Role.ASSISTANT, content).with_channel(
                    "commentary"
                )
            )
        if message.get("reasoning"):
            out.append(
                h.Message.from_role_and_content(
                    h.Role.ASSISTANT, message["reasoning"]
                ).with_channel("analysis")
            )
        for call in calls:
            function = call.get("function", {})
            arguments = function.get("arguments", "") or ""
            out.append(
                h.Message.from_role_and_content(h.Role.ASSISTANT, arguments)
                .with_channel("commentary")
                .with_recipient(f"functions.{function.get('name', '')}")
                .with_content_type("json")
            )
        return out
    if role == "tool":
        name = names.get(message.get("tool_call_id", ""), "")
        content = flat_text(message.get("content")) or ""
        author = h.Author.new(h.Role.TOOL, f"functions.{name}")
        return [
            h.Message.from_author_and_content(author, content)
            .with_channel("commentary")
            .with_recipient("assistant")
        ]
    if role == "assistant" and message.get("reasoning"):
        out.append(
            h.Message.from_role_and_content(h.Role.ASSISTANT, message["reasoning"]).with_channel(
                "analysis"
            )
        )
    content = message.get("content") or ""
    if isinstance(content, str):
        contents = [h.TextContent(text=content)]
    else:
        contents = [h.TextContent(text=part.get("text", "")) for part in content]
    if role == "assistant" and contents and contents[0].text:
        out.append(h.Message.from_role_and_contents(role, contents).with_channel("final"))
    elif role in ("system", "developer"):
        instructions = flat_text(message.get("content"))
        if instructions is not None:
            developer = h.DeveloperContent.new().with_instructions(instructions)
            out.append(h.Message.from_role_and_content(h.Role.DEVELOPER, developer))
    elif role != "assistant":
        out.append(h.Message.from_role_and_contents(role, contents))
    return out


def without_answered_analysis(messages: list) -> list:
    """``auto_drop_analysis_messages``: analysis before the last assistant final message goes."""
    finals = [
        i for i, m in enumerate(messages) if m.author.role == "assistant" and m.channel == "final"
    ]
    last = finals[-1] if finals else -1
    return [m for i, m in enumerate(messages) if not (i < last and m.channel == "analysis")]


def harmony_prompt_ids(tokenizer, messages, tools, variables: dict, now: dt.datetime) -> list[int]:
    """``_make_request_with_harmony``: the request validated (``reasoning_content`` is
    ``reasoning``; ``maybe_serialize_tool_calls`` gives every assistant message a list of calls),
    a leading system or developer message taken as instructions, effort "none" refused, the
    preamble, each remaining message, then ``render_for_completion`` (analysis dropped as above,
    harmony's own auto-drop off). ``chat_template_kwargs`` are never read."""
    import openai_harmony as h

    effort = variables.get("reasoning_effort")
    if effort is not None and effort not in REQUEST_EFFORTS:
        raise EngineRefused(f"reasoning_effort: input should be one of {REQUEST_EFFORTS}")
    request = validated_messages(messages)
    for message in request:
        if message.get("role") == "assistant":
            message["tool_calls"] = list(message.get("tool_calls") or [])
    instructions, rest = None, request
    if request and request[0].get("role") in ("system", "developer"):
        instructions, rest = flat_text(request[0].get("content")), request[1:]
    if effort == "none":
        raise EngineRefused(f"Harmony does not support reasoning_effort={effort!r}")
    dumped = dumped_tools(tools)
    conversation = harmony_preamble(h, instructions, dumped, effort, now.strftime("%Y-%m-%d"))
    names = {
        call.get("id"): call.get("function", {}).get("name")
        for message in rest
        for call in message.get("tool_calls", [])
    }
    for message in rest:
        conversation.extend(harmony_message(h, message, names))
    conversation = without_answered_analysis(conversation)
    return list(
        harmony_encoding(tokenizer).render_conversation_for_completion(
            h.Conversation.from_messages(conversation),
            h.Role.ASSISTANT,
            config=h.RenderConversationConfig(auto_drop_analysis=False),
        )
    )


# -- Mistral (MistralRenderer: mistral-common, never a template) --------------------------------


@functools.lru_cache(maxsize=8)
def mistral_tokenizer(directory: str) -> Any:
    """mistral-common's tokenizer of a fixture directory, loaded once as a server loads it (a
    Tekkenizer builds its whole vocabulary's pieces: 0.1-0.3 s a load)."""
    from mistral_common.tokens.tokenizers.mistral import MistralTokenizer

    path = Path(directory)
    files = sorted(path.glob("tokenizer.model.v*"))
    return MistralTokenizer.from_file(
        path / "tekken.json" if (path / "tekken.json").is_file() else files[-1]
    )


def mistral_prompt_ids(tokenizer: Any, messages: list[dict], tools, variables: dict) -> list[int]:
    """vLLM's mistral mode: ``validate_request_params`` refuses any ``chat_template_kwargs``;
    ``truncate_tool_call_ids`` keeps an id's last 9 characters; ``MistralTokenizer.
    apply_chat_template`` (vllm/tokenizers/mistral.py) pops ``reasoning`` from every message and
    gives a tool a ``description`` ("") and ``parameters`` ({}); transformers'
    ``MistralCommonBackend`` builds ``ChatCompletionRequest.from_openai`` (the effort only for
    tokenizer versions with model settings) and ``encode_chat_completion``'s tokens are the
    prompt; any error is a 400."""
    from mistral_common.protocol.instruct.request import ChatCompletionRequest

    settings = dict(variables)
    effort = settings.pop("reasoning_effort", None)
    if settings:
        raise EngineRefused("chat_template is not supported for Mistral tokenizers.")
    request = validated_messages(messages)
    for message in request:
        message.pop("reasoning", None)
        for call in message.get("tool_calls") or ():
            if isinstance(call.get("id"), str):
                call["id"] = call["id"][-9:]
        if isinstance(message.get("tool_call_id"), str):
            message["tool_call_id"] = message["tool_call_id"][-9:]
    declared = None
    if tools:
        declared = [
            {
                "type": "function",
                "function": {
                    "name": t["function"]["name"],
                    "description": t["function"].get("description") or "",
                    "parameters": t["function"].get("parameters") or {},
                },
            }
            for t in tools
        ]
    mistral = mistral_tokenizer(tokenizer.name_or_path)
    kwargs = {}
    if effort is not None and mistral.instruct_tokenizer.tokenizer.version.supports_model_settings:
        kwargs["reasoning_effort"] = effort
    try:
        built = ChatCompletionRequest.from_openai(messages=request, tools=declared, **kwargs)
        return list(mistral.encode_chat_completion(built).tokens)
    except Exception as exc:
        raise EngineRefused(f"{type(exc).__name__}: {exc}") from None


# -- dispatch ------------------------------------------------------------------------------------


def engine_kind(fixture: str, tokenizer: Any) -> str:
    """How vLLM renders this model: harmony for gpt-oss (``model_type == "gpt_oss"``), a DeepSeek
    tokenizer wrapper for a shipped Python encoder, Kimi K3's renderer for a tokenizer with no
    template that encodes chat itself, else the Jinja template (HfRenderer)."""
    if fixture == "gpt-oss":
        return "harmony"
    directory = Path(getattr(tokenizer, "name_or_path", "") or "")
    if (directory / "tekken.json").is_file() or any(directory.glob("tokenizer.model.v*")):
        return "mistral"
    if encoder_path(tokenizer) is not None:
        return "python-encoder"
    if not getattr(tokenizer, "chat_template", None):
        return "k3"
    return "jinja"


def engine_prompt_ids(
    fixture: str,
    tokenizer: Any,
    messages: list[dict],
    tools: list[dict] | None,
    variables: dict,
    now: dt.datetime,
) -> list[int]:
    """The ids vLLM gives the model for this request (raises ``EngineRefused``)."""
    kind = engine_kind(fixture, tokenizer)
    if kind == "harmony":
        return harmony_prompt_ids(tokenizer, messages, tools, variables, now)
    if kind == "mistral":
        return mistral_prompt_ids(tokenizer, messages, tools, variables)
    if kind == "python-encoder":
        return encoder_prompt_ids(tokenizer, messages, tools, variables)
    if kind == "k3":
        return k3_prompt_ids(tokenizer, messages, tools, variables)
    return hf_prompt_ids(tokenizer, messages, tools, variables)

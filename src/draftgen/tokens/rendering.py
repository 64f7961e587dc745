"""Rendering: a request's prompt, rendered once as the server renders it, and recorded with it.

The server turns ``messages`` into a prompt with the model's own chat template (or Python
encoder, or the tokenizer's own chat encoding), its template variables and its clock. draftgen
does the same when it builds the request and stores the result (``Rendering``) beside the
completion; reconstruction, export and resume read that record and never render with other inputs.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import functools
import importlib.util
import inspect
import sys
from pathlib import Path
from typing import Any

from draftgen.errors import DraftgenError
from draftgen.profiles import (
    DETECTION_ORDER,
    PROFILES,
    ModelProfile,
    UnknownProfileError,
    detect_profile,
    get_profile,
)
from draftgen.profiles.generic import GENERIC, DerivedLayout
from draftgen.records import GenerationSettings, Rendering
from draftgen.tokens import tokenizer as tok
from draftgen.tokens.derived_profile import derive_layout
from draftgen.tokens.harmony import HarmonyRenderer
from draftgen.tokens.mistral import MistralRenderer
from draftgen.tokens.server_messages import (
    STRING,
    arguments_as_text,
    content_format,
    developer_as_system,
    dumped_tools,
    template_conversation,
    validated_messages,
)
from draftgen.tokens.template_clock import template_clock
from draftgen.tokens.tokenizer import encoder_path, tokenizer_encodes_chat


class RenderError(DraftgenError, RuntimeError):
    """The template or encoder raised: the sample keeps the message, the run goes on."""


class RenderSettingsError(DraftgenError, ValueError):
    """Settings the server's renderer would ignore: the prompt would not be the one asked for."""


def request_variables(settings: GenerationSettings, profile: ModelProfile) -> dict:
    """The template variables a request implies: the family's switch for the reasoning settings
    (what a provider sets from them), then ``chat_template_kwargs`` as given."""
    variables = profile.template_variables(settings.reasoning)
    if settings.chat_template_kwargs and profile.prompt_renderer == "harmony":
        raise RenderSettingsError(
            "gpt-oss prompts are rendered by openai-harmony on vLLM and SGLang, which never read "
            "chat_template_kwargs; drop --chat-template-kwargs (the reasoning effort is then "
            "harmony's default, medium)"
        )
    variables.update(settings.chat_template_kwargs or {})
    return variables


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(microsecond=0)


def server_messages(
    messages: list[dict],
    profile: ModelProfile,
    template: str | None = None,
    encoder: bool = False,
) -> list[dict]:
    """``messages`` as vLLM hands them to this family's Jinja ``template``, Python ``encoder``
    or (neither) the tokenizer's own chat code (``draftgen.tokens.server_messages``): reasoning
    under ``reasoning`` and ``reasoning_content``, tool-call arguments parsed into mappings (JSON
    text again for an encoder), content as the template takes it (else the text parts joined),
    developer messages as system messages where the template has no such role. The input is
    not changed."""
    validated = validated_messages(messages)
    if template is None:
        conversation = template_conversation(validated, STRING, profile.encoder_part_separator)
        if not encoder:
            return conversation
        # DeepSeek's wrappers hand the encoder the request's own messages too: fields of the
        # family's own (V4's ``task``) reach it.
        for parsed, original in zip(conversation, validated, strict=True):
            for key, value in original.items():
                if key != "tool_calls":
                    parsed.setdefault(key, value)
        return arguments_as_text(conversation)
    conversation = template_conversation(validated, content_format(template))
    return developer_as_system(conversation, template)


class ChatRenderer:
    """Renders requests for one tokenizer and profile the way an inference server does.

    gpt-oss is rendered with openai-harmony, as vLLM renders it (``draftgen.tokens.harmony``).
    Otherwise three kinds of chat format, tried in this order: a Python encoder shipped in the model
    directory (``encoding/encoding_*.py``, loaded with the tokenizer's remote-code consent), a
    tokenizer class that encodes chat itself (``apply_chat_template`` overridden: its ids are
    the prompt), and the Jinja ``chat_template`` through ``transformers``.
    """

    def __init__(self, tokenizer: Any, profile: ModelProfile, encoder: Any = None) -> None:
        self.tokenizer = tokenizer
        self.profile = profile
        # gpt-oss: vLLM renders with openai-harmony whatever the tokenizer directory holds.
        self.harmony = HarmonyRenderer(tokenizer) if profile.prompt_renderer == "harmony" else None
        # Mistral: vLLM renders with mistral-common (tokenizer_mode mistral), never a template.
        self.mistral = (
            MistralRenderer(tokenizer) if profile.prompt_renderer == "mistral-common" else None
        )
        if self.harmony is not None or self.mistral is not None:
            encoder = None
        elif encoder is None:
            encoder = chat_encoder_of(tokenizer)
        self.encoder = encoder
        self.encodes_chat = (
            self.harmony is None and self.encoder is None and tokenizer_encodes_chat(tokenizer)
        )
        # Whether the prompt's ids are the class's own chat encoding (Kimi K3's segments), not
        # the encoding of its text (K2.5's class only prepares the conversation): the class's
        # slow encode runs on every request only where the two are not proven the same.
        self.chat_ids = self.encodes_chat and not chat_ids_are_text_ids(tokenizer, profile)

    @property
    def kind(self) -> str:
        if self.harmony is not None:
            return "harmony"
        if self.mistral is not None:
            return "mistral-common"
        if self.encoder is not None:
            return "python-encoder"
        return "tokenizer" if self.encodes_chat else "jinja"

    def render(
        self,
        messages: list[dict],
        tools: list[dict] | None,
        variables: dict | None = None,
        now: dt.datetime | None = None,
    ) -> Rendering:
        """The recorded rendering; a template error is kept in ``error``, never raised."""
        variables = dict(variables or {})
        now = now or utc_now()
        try:
            text, ids = self._render(messages, tools, variables, now)
        except Exception as exc:  # templates and encoders raise anything; the sample says it
            return Rendering("", variables, now.isoformat(), None, _error_text(exc))
        return Rendering(text, variables, now.isoformat(), ids)

    def text(
        self, messages: list[dict], tools: list[dict] | None, variables: dict, now: dt.datetime
    ) -> str:
        """Only the text (raises on a template error): for alternatives and checks."""
        return self._render(messages, tools, variables, now, want_ids=False)[0]

    def prompt_ids(self, rendering: Rendering) -> list[int]:
        """The ids the server gave the model for this rendering."""
        if rendering.error:
            raise RenderError(rendering.error)
        if rendering.ids is not None:
            return list(rendering.ids)
        return tok.encode(self.tokenizer, rendering.text)

    def _render(
        self,
        messages: list[dict],
        tools: list[dict] | None,
        variables: dict,
        now: dt.datetime,
        want_ids: bool = True,
    ) -> tuple[str, list[int] | None]:
        if self.harmony is not None:
            # Harmony reads the validated request: ``reasoning_content`` is ``reasoning``,
            # arguments stay the text sent (vLLM parses nothing for it).
            return self.harmony.render(validated_messages(messages), tools, variables, now)
        if self.mistral is not None:
            # The validated request too (vllm/tokenizers/mistral.py then pops ``reasoning``).
            return self.mistral.render(validated_messages(messages), tools, variables, now)
        # Tools as the server dumps its request model: a list (rows hold a tuple; Kimi's
        # tokenizers sort the keys of dicts inside a list only), description and parameters
        # always present.
        tools = dumped_tools(list(tools)) if tools else None
        if self.encoder is not None:
            prepared = server_messages(messages, self.profile, encoder=True)
            return self.encoder.render(prepared, tools, variables, self.profile), None
        prepared = server_messages(messages, self.profile, chat_template_of(self.tokenizer, tools))
        kwargs: dict[str, Any] = {"add_generation_prompt": True, **variables}
        if tools:
            kwargs["tools"] = tools
        with template_clock(self.tokenizer, tools, now):
            text = self.tokenizer.apply_chat_template(prepared, tokenize=False, **kwargs)
            if not isinstance(text, str):
                raise RenderError(f"the chat template returned {type(text).__name__}, not text")
            ids = None
            if self.chat_ids and want_ids:
                ids = ids_of(self.tokenizer.apply_chat_template(prepared, tokenize=True, **kwargs))
        return text, ids


def chat_template_of(tokenizer: Any, tools: list[dict] | None) -> str | None:
    """The Jinja template the server renders with, or None for a tokenizer that encodes chat
    without one (Kimi K3's class)."""
    try:
        return tokenizer.get_chat_template(None, tools)
    except Exception:  # no template: transformers raises ValueError
        return None


_CHAT_IDS: dict[int, tuple[Any, bool]] = {}

# Conversations where a class's own chat encoding would part from encoding the rendered text:
# special-token spellings in user and system data, history with reasoning, tool calls, tools.
_PROBE_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather now.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                "required": ["city"],
            },
        },
    }
]
_PROBES: tuple[tuple[list[dict], list[dict] | None], ...] = (
    (
        [
            {"role": "system", "content": "Be brief. <|im_end|> [EOS] <|im_start|> </s>"},
            {"role": "user", "content": "Hi <think> there </think>\n\n  <|im_user|> 你好 👍🏽 "},
        ],
        None,
    ),
    (
        [
            {"role": "user", "content": "First <|im_middle|> question"},
            {"role": "assistant", "content": "Sure.", "reasoning_content": "Think <|im_end|>."},
            {"role": "user", "content": "  again\n"},
        ],
        None,
    ),
    (
        [
            {"role": "user", "content": "Weather in Paris? <|tool_call_begin|>"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": "functions.get_weather:0",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "functions.get_weather:0", "content": "<|im_end|>"},
        ],
        _PROBE_TOOLS,
    ),
)


def chat_ids_are_text_ids(tokenizer: Any, profile: ModelProfile) -> bool:
    """Whether a class's own chat encoding gives exactly the ids of encoding its rendered text
    (the tokenizer's own ``encode``), on probe conversations with special-token spellings in the
    data, history and tools, both thinking switches; checked once per process and tokenizer."""
    cached = _CHAT_IDS.get(id(tokenizer))
    if cached is not None and cached[0] is tokenizer:
        return cached[1]
    from draftgen.tokens.fast_encoder import reference_encode

    switches = [{}]
    if profile.thinking_variable:
        switches = [{profile.thinking_variable: value} for value in (True, False)]
    compared = 0
    same = True
    for messages, tools in _PROBES:
        for variables in switches:
            kwargs: dict[str, Any] = {"add_generation_prompt": True, **variables}
            if tools:
                kwargs["tools"] = copy.deepcopy(tools)
            prepared = server_messages(messages, profile, chat_template_of(tokenizer, tools))
            try:
                text = tokenizer.apply_chat_template(prepared, tokenize=False, **kwargs)
                ids = ids_of(tokenizer.apply_chat_template(prepared, tokenize=True, **kwargs))
            except Exception:  # a probe this template cannot render proves nothing
                continue
            compared += 1
            if not isinstance(text, str) or ids != reference_encode(tokenizer, text):
                same = False
                break
        if not same:
            break
    holds = same and compared > 0
    _CHAT_IDS[id(tokenizer)] = (tokenizer, holds)
    return holds


def _error_text(exc: BaseException) -> str:
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {message}"[:500] if message else type(exc).__name__


def ids_of(result: Any) -> list[int]:
    """Plain ids from what ``apply_chat_template(tokenize=True)`` returns in transformers 4 or 5
    (a list, a ``BatchEncoding``/dict with ``input_ids``, or a batch of one)."""
    if isinstance(result, dict) or hasattr(result, "keys"):
        result = result["input_ids"]
    if hasattr(result, "tolist"):
        result = result.tolist()
    result = list(result)
    if result and isinstance(result[0], list):
        if len(result) != 1:
            raise RenderError("the tokenizer's chat encoding returned a batch of several prompts")
        result = result[0]
    return [int(i) for i in result]


# -- Python chat encoders shipped with a model ----------------------------------------------------


class PythonChatEncoder:
    """A model repository's ``encode_messages`` module, called as vLLM and SGLang call it.

    Tools go on a system message put first (or join a leading one, where the profile says so:
    V4); thinking follows the ``thinking`` (or ``enable_thinking``) variable, off by default;
    history reasoning is dropped when the prompt ends with a user turn (or always asked to be,
    where the profile says so: V4's encoder keeps it itself when a message carries tools);
    ``reasoning_effort`` is passed where the encoder takes it (V4, V4.1), mapped as the profile
    maps efforts, and ``"none"`` turns thinking off, as vLLM's V4 wrapper does. V4.1's wrapper
    thinks by default and puts tools on the first system message wherever it is.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.module = _load_module(path)
        encode = getattr(self.module, "encode_messages", None)
        if not callable(encode):
            raise RenderError(f"{path} has no encode_messages function")
        self._encode = encode
        self._parameters = set(inspect.signature(encode).parameters)

    def render(
        self,
        messages: list[dict],
        tools: list[dict] | None,
        variables: dict,
        profile: ModelProfile | None = None,
    ) -> str:
        messages = copy.deepcopy(messages)
        if tools:
            joins = profile is not None and profile.encoder_tools_join_system
            anywhere = profile is not None and profile.encoder_tools_join_first_system
            systems = [i for i, m in enumerate(messages) if m.get("role") == "system"]
            host = systems[0] if systems and (anywhere or systems[0] == 0) else None
            if joins and host is not None:
                messages[host] = {**messages[host], "tools": copy.deepcopy(tools)}
            else:
                messages.insert(0, {"role": "system", "tools": copy.deepcopy(tools)})
        default = profile is not None and profile.encoder_thinks_by_default
        thinking = variables.get("thinking", variables.get("enable_thinking", default))
        kwargs: dict[str, Any] = {}
        effort = variables.get("reasoning_effort")
        if "reasoning_effort" in self._parameters and effort == "none":
            thinking = False
        elif "reasoning_effort" in self._parameters and effort:
            if profile is not None and isinstance(effort, str):
                effort = profile.accepted_effort(effort)
            kwargs["reasoning_effort"] = effort
        always = profile is not None and profile.encoder_always_drops_thinking
        kwargs["thinking_mode"] = "thinking" if thinking else "chat"
        kwargs["drop_thinking"] = always or (bool(messages) and messages[-1].get("role") == "user")
        text = self._encode(messages, **kwargs)
        if not isinstance(text, str):
            raise RenderError(f"{self.path.name} returned {type(text).__name__}, not text")
        return text


def resolve_profile(tokenizer: Any, name: str | None = None) -> ModelProfile:
    """The profile named, or the one the tokenizer's chat encoder or vocabulary shows."""
    if name == GENERIC:
        return derived_layout(tokenizer).profile()
    if name:
        return get_profile(name)
    directory = getattr(tokenizer, "name_or_path", "") or ""
    path = encoder_path(directory) if directory and Path(directory).is_dir() else None
    if path is not None and not any(path.name in p.encoder_files for p in PROFILES.values()):
        # Calling an encoder draftgen does not know the way it calls another would render a
        # prompt the server never saw (DeepSeek V4.1's differs from V4's).
        raise UnknownProfileError(
            f"{path} is a chat encoder no draftgen profile knows; pass --profile naming the "
            "family whose encoder it is, or use a tokenizer directory draftgen supports"
        )
    vocab = tok.full_vocab(tokenizer)
    if path is None and not any(p.matches_vocab(vocab) for p in DETECTION_ORDER):
        # A model no family knows: its layout comes from its chat template (the generic
        # profile), every sample still proven by its counts.
        return derived_layout(tokenizer).profile()
    return detect_profile(vocab, path.name if path is not None else "")


def derived_layout(tokenizer: Any) -> DerivedLayout:
    """The generic profile's layout for this tokenizer, derived once per tokenizer object."""
    inner = getattr(tokenizer, "inner", tokenizer)
    cached = _LAYOUTS.get(id(inner))
    if cached is None or cached[0] is not inner:
        cached = _LAYOUTS[id(inner)] = (inner, derive_layout(inner))
    return cached[1]


_LAYOUTS: dict[int, tuple[Any, DerivedLayout]] = {}


def template_renderer(tokenizer: Any, profile: ModelProfile) -> ChatRenderer | None:
    """The published chat template as a renderer, where the engine renders with something else
    (``profile.prompt_renderer``); None where the two are the same or there is no template."""
    if not profile.prompt_renderer or not getattr(tokenizer, "chat_template", None):
        return None
    return ChatRenderer(tokenizer, dataclasses.replace(profile, prompt_renderer=""))


@functools.lru_cache(maxsize=8)
def tokenizer_profile(tokenizer_spec: str, name: str | None = None) -> ModelProfile:
    """``resolve_profile`` of the tokenizer ``tokenizer_spec`` loads (a run's, a simulator's),
    cached. The tokenizer is loaded even when the profile is named: a bad one fails here."""
    return resolve_profile(tok.load_tokenizer(tokenizer_spec), name)


def chat_encoder_of(tokenizer: Any) -> PythonChatEncoder | None:
    """The Python chat encoder beside a tokenizer loaded from a local directory, if any."""
    directory = getattr(tokenizer, "name_or_path", "") or ""
    if not directory or not Path(directory).is_dir():
        return None
    path = encoder_path(directory)
    return _cached_encoder(str(path)) if path is not None else None


_ENCODERS: dict[str, PythonChatEncoder] = {}


def _cached_encoder(path: str) -> PythonChatEncoder:
    encoder = _ENCODERS.get(path)
    if encoder is None:
        encoder = _ENCODERS[path] = PythonChatEncoder(Path(path))
    return encoder


def _load_module(path: Path) -> Any:
    name = f"draftgen_chat_encoder_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise RenderError(f"cannot load the chat encoder {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(name, None)
        raise RenderError(
            f"the chat encoder {path} fails to load ({_error_text(exc)}); check that it is the "
            "model repository's own file and that its imports are installed"
        ) from None
    return module


def render_prompt(
    tokenizer: Any,
    messages: list[dict],
    tools: list[dict] | None,
    variables: dict | None = None,
    profile: ModelProfile | None = None,
) -> str:
    """The prompt text a server renders for these messages now (raises on a template error).

    The profile is detected from the tokenizer unless given. A run records its renderings
    instead (``ChatRenderer.render``); this is for estimates, benchmarks and tests.
    """
    renderer = ChatRenderer(tokenizer, profile or resolve_profile(tokenizer))
    return renderer.text(messages, tools, dict(variables or {}), utc_now())

"""Mistral, Magistral and Devstral as vLLM serves them: the tokenizer is mistral-common's (a
``tekken.json`` or ``tokenizer.model.v*``), and so is the prompt, never a Jinja template.

vLLM picks ``tokenizer_mode=mistral`` by itself for a directory holding ``tekken.json`` or
``tokenizer.model.v*`` (``vllm/tokenizers/registry.py``, ``resolve_tokenizer_args``), and its
renderer (``vllm/renderers/mistral.py``, ``safe_apply_chat_template``) hands the request's messages
to ``vllm/tokenizers/mistral.py`` ``MistralTokenizer.apply_chat_template``, which calls
transformers' ``MistralCommonBackend.apply_chat_template``: ``ChatCompletionRequest.from_openai``
then ``encode_chat_completion``. The ids that gives are the prompt; draftgen records them.
"""

from __future__ import annotations

import copy
import datetime as dt
import re
from pathlib import Path
from typing import Any

# The files that make vLLM serve a directory with mistral-common (resolve_tokenizer_args's
# allow_patterns), in the order draftgen takes them.
MISTRAL_TOKENIZER_FILES = ("tekken.json", "tokenizer.model.v*")

# vllm/tokenizers/mistral.py validate_request_params: any chat_template_kwargs are refused.
CHAT_TEMPLATE_REFUSED = "chat_template is not supported for Mistral tokenizers."


class MistralRefused(ValueError):
    """A request vLLM's mistral-common path refuses (chat_template_kwargs, an effort the tokenizer
    version does not take, a message shape ``from_openai`` or the validator rejects): the
    rendering records the engine's message and the sample is never verified."""


def mistral_tokenizer_file(directory: str | Path) -> Path | None:
    """The mistral-common tokenizer file of a model directory, if it has one."""
    root = Path(directory)
    for pattern in MISTRAL_TOKENIZER_FILES:
        found = sorted(p for p in root.glob(pattern) if p.is_file())
        if found:
            return found[-1]  # the highest version where several SentencePiece files exist
    return None


def load_mistral_tokenizer(directory: str) -> MistralCommonTokenizer:
    path = mistral_tokenizer_file(directory)
    if path is None:
        raise FileNotFoundError(f"{directory} has no tekken.json or tokenizer.model.v*")
    try:
        return MistralCommonTokenizer(path, directory)
    except ImportError as exc:
        raise ImportError(
            f"{path.name} is a mistral-common tokenizer, which vLLM renders with mistral-common: "
            f"install it with pip install mistral-common ({exc})"
        ) from exc


class MistralCommonTokenizer:
    """mistral-common's tokenizer with the small interface draftgen reads from a tokenizer.

    transformers 5 loads such a directory too (``MistralCommonBackend``), but its ``encode``
    never turns a special token's text into the token (rebuilt completions hold ``[THINK]`` and
    ``</s>`` as text) and its ``get_vocab`` collapses undecodable tokens into one string; so
    this adapter answers from mistral-common's own tokenizer instead:

    - ``encode(text)``: the text cut at special-token spellings, each special its id, each piece
      between encoded alone, as mistral-common encodes a message piece by piece;
    - ``decode(ids)``: mistral-common's decode with special tokens kept as text;
    - ``get_vocab()``: specials by their text, tekken's other tokens as GPT-2 byte-level strings
      (as a converted ``tokenizer.json`` holds them), SentencePiece's as pieces;
    - ``added_tokens_decoder``: id -> text of every special token.
    """

    chat_template = None
    bos_token = "<s>"
    eos_token = "</s>"

    def __init__(self, path: Path, directory: str) -> None:
        from mistral_common.protocol.instruct.validator import ValidationMode
        from mistral_common.tokens.tokenizers.mistral import MistralTokenizer
        from mistral_common.tokens.tokenizers.tekken import Tekkenizer

        self.path = Path(path)
        self.name_or_path = directory
        # Test mode, as vLLM requires (vllm/tokenizers/mistral.py, MistralTokenizer.__init__).
        self.mistral = MistralTokenizer.from_file(str(path), mode=ValidationMode.test)
        self.raw = self.mistral.instruct_tokenizer.tokenizer
        self.version = self.raw.version
        self.is_tekken = isinstance(self.raw, Tekkenizer)
        self.added_tokens_decoder: dict[int, str] = {
            i: self.raw.id_to_piece(i) for i in sorted(self.raw.special_ids)
        }
        self._special_ids = {text: i for i, text in self.added_tokens_decoder.items()}
        from draftgen.tokens.fast_encoder import trie_pattern

        self._specials = re.compile(trie_pattern(set(self._special_ids)))
        self._vocab: dict[str, int] | None = None
        self._tokens: dict[int, str] | None = None

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return load_mistral_tokenizer, (self.name_or_path,)

    def __len__(self) -> int:
        return self.raw.n_words

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        ids: list[int] = [self.raw.bos_id] if add_special_tokens else []
        start = 0
        for match in self._specials.finditer(text):
            if match.start() == match.end():
                continue
            if match.start() > start:
                ids += self.raw.encode(text[start : match.start()], bos=False, eos=False)
            ids.append(self._special_ids[match.group()])
            start = match.end()
        if start < len(text):
            ids += self.raw.encode(text[start:], bos=False, eos=False)
        return ids

    def decode(self, ids: Any, skip_special_tokens: bool = False, **_: Any) -> str:
        from mistral_common.tokens.tokenizers.base import SpecialTokenPolicy

        if isinstance(ids, int):
            ids = [ids]
        ids = [int(i) for i in ids]
        policy = SpecialTokenPolicy.IGNORE if skip_special_tokens else SpecialTokenPolicy.KEEP
        if self.is_tekken:
            return self.raw.decode(ids, special_token_policy=policy)
        # SentencePiece: mistral-common keeps specials by joining every piece as the model file
        # spells it ("▁plain▁ascii"); the text is SentencePiece's decode of each run of ordinary
        # ids (as mistral-common's decode without specials gives it), specials between as text.
        parts: list[str] = []
        run: list[int] = []
        for i in ids + [-1]:
            if i in self.added_tokens_decoder or i < 0:
                if run:
                    parts.append(
                        self.raw.decode(run, special_token_policy=SpecialTokenPolicy.IGNORE)
                    )
                    run = []
                if i >= 0 and not skip_special_tokens:
                    parts.append(self.added_tokens_decoder[i])
            else:
                run.append(i)
        return "".join(parts)

    def convert_tokens_to_ids(self, token: str) -> int | None:
        return self.get_vocab().get(token)

    def convert_ids_to_tokens(self, ids: int | list[int]) -> str | list[str]:
        """Each id's entry in ``get_vocab`` (a special's text, a byte-level string)."""
        if self._tokens is None:
            self._tokens = {i: token for token, i in self.get_vocab().items()}
        if isinstance(ids, int):
            return self._tokens[ids]
        return [self._tokens[i] for i in ids]

    def get_vocab(self) -> dict[str, int]:
        if self._vocab is None:
            self._vocab = self._build_vocab()
        return self._vocab

    def _build_vocab(self) -> dict[str, int]:
        from mistral_common.tokens.tokenizers.base import SpecialTokenPolicy

        vocab: dict[str, int] = {}
        if self.is_tekken:
            # GPT-2's byte-level alphabet, in which the rest of draftgen reads vocabularies.
            from transformers.convert_slow_tokenizer import bytes_to_unicode

            table = bytes_to_unicode()
            for i in range(self.raw.n_words):
                if i in self.added_tokens_decoder:
                    vocab[self.added_tokens_decoder[i]] = i
                    continue
                raw = self.raw.id_to_byte_piece(i, SpecialTokenPolicy.KEEP)
                vocab.setdefault("".join(table[b] for b in raw), i)
            return vocab
        # SentencePiece: pieces as the model file names them, the lowest id first.
        for i in reversed(range(self.raw.n_words)):
            vocab[self.raw.id_to_piece(i)] = i
        return dict(sorted(vocab.items(), key=lambda item: item[1]))


class MistralRenderer:
    """Renders a chat request as vLLM's mistral-common path does; ``render`` gives (text, ids)."""

    def __init__(self, tokenizer: MistralCommonTokenizer) -> None:
        if not isinstance(tokenizer, MistralCommonTokenizer):
            raise TypeError(
                "a mistral-common prompt needs a tokenizer directory with tekken.json or "
                "tokenizer.model.v*"
            )
        self.tokenizer = tokenizer
        self.mistral = tokenizer.mistral

    def render(
        self, messages: list[dict], tools: list[dict] | None, variables: dict, now: dt.datetime
    ) -> tuple[str, list[int]]:
        from mistral_common.protocol.instruct.request import ChatCompletionRequest

        variables = dict(variables or {})
        effort = variables.pop("reasoning_effort", None)
        if variables:
            raise MistralRefused(CHAT_TEMPLATE_REFUSED)
        messages = copy.deepcopy([dict(m) for m in messages])
        tools = copy.deepcopy([dict(t) for t in tools]) if tools else None
        if messages and messages[-1].get("role") == "assistant":
            # _prepare_apply_chat_template_tools_and_messages: a chat completion adds a
            # generation prompt, which mistral-common cannot do after an assistant turn.
            raise MistralRefused(
                "Cannot set `add_generation_prompt` to True when the last message is from the "
                "assistant. Consider using `continue_final_message` instead."
            )
        _truncate_tool_call_ids(messages)
        messages, tools = _prepare_messages_and_tools(messages, tools)
        kwargs: dict[str, Any] = {}
        if effort is not None and self.tokenizer.version.supports_model_settings:
            # transformers' MistralCommonBackend passes reasoning_effort to from_openai; the
            # v15 settings builder accepts or refuses the value. Older versions never get it.
            kwargs["reasoning_effort"] = effort
        try:
            request = ChatCompletionRequest.from_openai(
                messages=messages, tools=tools, continue_final_message=False, **kwargs
            )
            ids = list(self.mistral.encode_chat_completion(request).tokens)
        except Exception as exc:  # safe_apply_chat_template: every error becomes a ValueError
            raise MistralRefused(str(exc).strip() or type(exc).__name__) from None
        # The text as the tokenizer's decode gives it (SentencePiece's without its "▁" marks).
        return self.tokenizer.decode(ids), ids


def _truncate_tool_call_ids(messages: list[dict]) -> None:
    """vllm/tokenizers/mistral.py ``truncate_tool_call_ids`` (called by the chat serving code for
    every Mistral tokenizer): ids longer than 9 characters keep their last 9."""
    for message in messages:
        if message.get("role") == "assistant":
            for call in message.get("tool_calls") or ():
                if isinstance(call, dict) and isinstance(call.get("id"), str):
                    call["id"] = call["id"][-9:]
        elif message.get("role") in ("tool_results", "tool"):
            if isinstance(message.get("tool_call_id"), str):
                message["tool_call_id"] = message["tool_call_id"][-9:]


def _prepare_messages_and_tools(
    messages: list[dict], tools: list[dict] | None
) -> tuple[list[dict], list[dict] | None]:
    """vllm/tokenizers/mistral.py ``_prepare_apply_chat_template_tools_and_messages`` and
    transformers' ``MistralCommonBackend.apply_chat_template`` ``_maybe_adapt_message``.

    ``reasoning`` is popped (only ``reasoning_content`` reaches mistral-common as a think chunk);
    a tool's missing ``parameters``/``description`` become ``{}``/``""`` and fields mistral-common
    does not know are dropped; content parts without a type are skipped.
    """
    from mistral_common.protocol.instruct.tool_calls import Function, Tool

    for message in messages:
        message.pop("reasoning", None)
        content = message.get("content")
        if isinstance(content, list):
            message["content"] = [p for p in content if not isinstance(p, dict) or p.get("type")]
    if tools:
        tool_fields, function_fields = set(Tool.model_fields), set(Function.model_fields)
        for tool in tools:
            if tool.get("type") != "function":
                raise MistralRefused("mistral-common only supports function tools.")
            function = tool["function"] = dict(tool.get("function") or {})
            if function.get("parameters") is None:
                function["parameters"] = {}
            if function.get("description") is None:
                function["description"] = ""
            for key in [k for k in tool if k not in tool_fields]:
                tool.pop(key)
            for key in [k for k in function if k not in function_fields]:
                function.pop(key)
    return messages, tools

"""Llama 3.x (3.1, 3.3) and Llama 4 (Scout, Maverick): header-token turns, no reasoning, tool calls
as JSON (3.x) or a Python list of calls (4).

Turns are ``<|start_header_id|>ROLE<|end_header_id|>\\n\\nTEXT<|eot_id|>`` (Llama 4:
``<|header_start|>ROLE<|header_end|>\\n\\nTEXT<|eot|>``); the generation prompt is the assistant
header, and the model answers at once: no think block, so every prompt is a ``closed`` one and the
generated turn is ``A<|eot_id|>`` (``A<|eot|>``). vLLM renders both with the model's Jinja template
(``safe_apply_chat_template``) and counts the stop token in ``completion_tokens``.

Tool calls (what the model writes, not what the template writes in history; REFERENCE.md §9):

- Llama 3.x: ``{"name": "f", "parameters": {...}}``, as the template's tool instructions ask and
  vLLM's ``llama3_json`` parser reads (it re-serialises the arguments with ``json.dumps``). Meta's
  prompt-format document for 3.1 (``llama_models/llama3_1/prompt_format.md``, "JSON based tool
  calling") shows ``<|python_tag|>`` before the call and ``<|eom_id|>`` after it when the system
  turn says ``Environment: ipython``, which the published template writes whenever tools are
  declared. ``<|python_tag|>`` is one token, so the count tells whether it was generated (the
  alternative reading); ``<|eom_id|>`` and the template's history ``<|eot_id|>`` are one token each,
  so the count cannot tell them apart: draftgen assumes ``<|eom_id|>``, server ids show it.
- Llama 4: ``[f(a="x", b=1)]``, Meta's zero-shot format (``models/llama4/prompt_format.md`` of
  meta-llama/llama-models) that vLLM's ``llama4_pythonic`` parser reads (it requires Python
  literals: ``True``, ``None``), ending ``<|eot|>`` as there. The model's published template asks
  for JSON instead (``{"name": ..., "parameters": ...}``, vLLM's ``llama4_json``): that is the
  alternative reading, and the count picks one. Meta's own encoder (``llama4/chat_format.py``)
  ends a tool-call message with ``<|eom|>``; the document and both templates with ``<|eot|>``.
  Which quote the model put around a text argument no count shows (``="x"`` and ``='x'`` are one
  token each), so rebuilt Llama 4 calls are never proven from text
  (``tool_call_format_unconfirmed``); server ids are exact.
"""

from __future__ import annotations

import json

from draftgen.profiles.base import ModelProfile, ToolCallFormatError
from draftgen.profiles.fixture import QwenBpeFixture
from draftgen.profiles.gpt_oss import O200K_PATTERN

# How the families write the tool calls they generate (see ``ModelProfile.tool_call_markups``).
LLAMA3_TOOL_CALLS = "llama3_json"
LLAMA4_TOOL_CALLS = "llama4_pythonic"
PYTHON_TAG = "<|python_tag|>"


def write_json_calls(
    parsed: list, arguments: list, content: str, lead_free: bool
) -> tuple[str, tuple[str, ...]]:
    """``{"name": "NAME", "parameters": ARGS}`` per call, right after the content, joined by
    ``"; "`` (what vLLM's ``llama3_json`` parser splits on; Llama 3's template holds one call per
    turn); the alternative reading (``lead_free``) opens with ``<|python_tag|>``."""
    calls = "; ".join(
        f'{{"name": "{name}", "parameters": {args}}}'
        for (name, _, _), args in zip(parsed, arguments, strict=True)
    )
    return (PYTHON_TAG if lead_free else "") + calls, ()


def write_pythonic_calls(
    parsed: list, arguments: list, content: str, lead_free: bool
) -> tuple[str, tuple[str, ...]]:
    """``[NAME(KEY=VALUE, ...), ...]``, values as Python literals (strings double-quoted, as in
    Meta's example); the alternative reading (``lead_free``) is the published template's JSON."""
    if lead_free:
        return write_json_calls(parsed, arguments, content, False)
    calls = []
    for index, (name, _, raw) in enumerate(parsed):
        values = _argument_mapping(raw, index)
        pairs = ", ".join(f"{key}={python_literal(value)}" for key, value in values.items())
        calls.append(f"{name}({pairs})")
    return "[" + ", ".join(calls) + "]", ()


def python_literal(value: object) -> str:
    """A JSON value as the Python literal ``ast.literal_eval`` reads back to it: strings in
    JSON's escapes (valid Python), ``True``/``False``/``None``, containers spaced as Python
    prints them."""
    if value is True or value is False or value is None:
        return repr(value)
    if isinstance(value, dict):
        pairs = (f"{json.dumps(key)}: {python_literal(item)}" for key, item in value.items())
        return "{" + ", ".join(pairs) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(python_literal(v) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False)


def _argument_mapping(raw: object, index: int) -> dict:
    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw.strip() else {}
        except ValueError:
            raise ToolCallFormatError(
                f"tool_calls[{index}] arguments are not valid JSON, so no Python call can be "
                "rebuilt from them"
            ) from None
    if not isinstance(raw, dict):
        raise ToolCallFormatError(f"tool_calls[{index}] arguments are not a JSON object")
    return raw


LLAMA_3 = ModelProfile(
    name="llama-3",
    # No reasoning: every prompt is "closed" (ModelProfile.prompt_mode: the empty think_end ends
    # any text), so reasoning a provider returns is flagged as it is after a non-thinking prompt.
    think_start="",
    think_end="",
    end_of_turn="<|eot_id|>",
    marker_tokens=("<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"),
    tool_call_tokens=(PYTHON_TAG,),
    tool_call_format=LLAMA3_TOOL_CALLS,
    tool_call_writer=write_json_calls,
    tool_call_end_of_turn="<|eom_id|>",
)

LLAMA_4 = ModelProfile(
    name="llama-4",
    think_start="",
    think_end="",
    end_of_turn="<|eot|>",
    marker_tokens=("<|header_start|>", "<|header_end|>", "<|eot|>"),
    tool_call_tokens=("<|python_start|>", "<|python_end|>"),
    tool_call_format=LLAMA4_TOOL_CALLS,
    tool_call_writer=write_pythonic_calls,
    # '="x"' and "='x'" are one token each (so are '")' and "')"), and the provider's JSON keeps no
    # quote: a count cannot prove the rebuilt ids of a call with text arguments.
    tool_call_format_unconfirmed=(
        "Llama 4 quotes the text arguments of its Python calls with \" or ', one token either "
        "way, and the JSON arguments the provider returns keep no quote"
    ),
)

PROFILES = (LLAMA_3, LLAMA_4)
ALIASES = {"llama-3.1": LLAMA_3, "llama-3.3": LLAMA_3}

# -- fixtures ----------------------------------------------------------------------------------

# Llama 3.x's added tokens, 128000..128255 after its 128,000 BPE ranks (llama_models/llama3/
# tokenizer.model), named as the Hugging Face tokenizer.json of Llama 3.1/3.3 names them (what vLLM
# loads): Meta's tokenizer.py (llama_models/llama3/tokenizer.py) gives the same ids to every token
# below, but calls 128005 <|step_id|> and 128011 <|image|> where the Hugging Face file keeps the
# reserved names of Llama 3.0 (<|reserved_special_token_2|>, _3, ... up to _247 at 128255).
LLAMA3_NAMED: dict[int, str] = {
    128000: "<|begin_of_text|>",
    128001: "<|end_of_text|>",
    128004: "<|finetune_right_pad_id|>",
    128006: "<|start_header_id|>",
    128007: "<|end_header_id|>",
    128008: "<|eom_id|>",
    128009: "<|eot_id|>",
    128010: "<|python_tag|>",
}
LLAMA3_BASE_VOCAB = 128000
LLAMA3_VOCAB_SIZE = 128256


def _llama3_added() -> dict[int, str]:
    added: dict[int, str] = {}
    count = 0
    for token_id in range(LLAMA3_BASE_VOCAB, LLAMA3_VOCAB_SIZE):
        if token_id in LLAMA3_NAMED:
            added[token_id] = LLAMA3_NAMED[token_id]
        else:
            added[token_id] = f"<|reserved_special_token_{count}|>"
            count += 1
    return added


LLAMA3_SPECIAL_TOKENS = _llama3_added()
# llama_models/llama3/tokenizer.py's pat_str (also the Split regex of Llama 3's tokenizer.json):
# Qwen's, but digits in runs of up to three.
LLAMA3_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"""
    r"""| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

# Llama 4's added tokens, 200000..202047 after its 200,000 BPE ranks (llama_models/llama4/
# tokenizer.model), in the order of llama_models/llama4/tokenizer.py: BASIC_SPECIAL_TOKENS, then
# the text post-training, vision and reasoning lists, then <|reserved_special_token_N|> up to its
# 2048 special tokens. Whether the Hugging Face tokenizer.json names the reserved ids alike is not
# confirmed (the named ones below are the ones any prompt or answer uses).
LLAMA4_BASE_VOCAB = 200000
LLAMA4_VOCAB_SIZE = 202048


def _reserved(name: str, count: int, start: int = 0) -> list[str]:
    return [f"<|{name}_reserved_special_token_{i}|>" for i in range(start, start + count)]


def _llama4_added() -> dict[int, str]:
    basic = [
        "<|begin_of_text|>",
        "<|end_of_text|>",
        "<|fim_prefix|>",
        "<|fim_middle|>",
        "<|fim_suffix|>",
    ]
    text = [
        "<|header_start|>",
        "<|header_end|>",
        "<|eom|>",
        "<|eot|>",
        "<|step|>",
        *_reserved("text_post_train", 6),
        "<|python_start|>",
        "<|python_end|>",
        "<|finetune_right_pad|>",
        *_reserved("text_post_train", 61, 8),
    ]
    vision = [
        "<|image_start|>",
        "<|image_end|>",
        *_reserved("vision", 2),
        "<|tile_x_separator|>",
        "<|tile_y_separator|>",
        *_reserved("vision", 4, 2),
        "<|image|>",
        *_reserved("vision", 1, 6),
        "<|patch|>",
        *_reserved("vision", 1041, 7),
    ]
    reasoning = [
        *_reserved("reasoning", 8),
        "<|reasoning_thinking_start|>",
        "<|reasoning_thinking_end|>",
    ]
    named = basic + text + vision + reasoning
    size = LLAMA4_VOCAB_SIZE - LLAMA4_BASE_VOCAB
    tokens = named + [f"<|reserved_special_token_{i}|>" for i in range(size - len(named))]
    return dict(enumerate(tokens, start=LLAMA4_BASE_VOCAB))


LLAMA4_SPECIAL_TOKENS = _llama4_added()
# llama_models/llama4/tokenizer.py's O200K_PATTERN: o200k's split, the one gpt-oss uses.
LLAMA4_PATTERN = O200K_PATTERN

FIXTURES = {
    "llama-3.3": QwenBpeFixture(
        added_tokens=LLAMA3_SPECIAL_TOKENS,
        vocab_size=LLAMA3_VOCAB_SIZE,
        config={
            "bos_token": "<|begin_of_text|>",
            "eos_token": "<|eot_id|>",
            "pad_token": None,
            "unk_token": None,
            "model_max_length": 131072,
        },
        ranks="llama_models:llama3/tokenizer.model",
        base_vocab=LLAMA3_BASE_VOCAB,
        pattern=LLAMA3_PATTERN,
    ),
    "llama-4": QwenBpeFixture(
        added_tokens=LLAMA4_SPECIAL_TOKENS,
        vocab_size=LLAMA4_VOCAB_SIZE,
        config={
            "bos_token": "<|begin_of_text|>",
            "eos_token": "<|eot|>",
            "pad_token": "<|finetune_right_pad|>",
            "unk_token": None,
            "model_max_length": 10485760,
        },
        ranks="llama_models:llama4/tokenizer.model",
        base_vocab=LLAMA4_BASE_VOCAB,
        pattern=LLAMA4_PATTERN,
    ),
}

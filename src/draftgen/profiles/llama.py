"""Llama 3.x (3.1, 3.3) and Llama 4 (Scout, Maverick): header-token turns, no reasoning, tool calls
as JSON (3.x) or a Python list of calls (4).

Turns are ``<|start_header_id|>ROLE<|end_header_id|>\\n\\nTEXT<|eot_id|>`` (Llama 4:
``<|header_start|>ROLE<|header_end|>\\n\\nTEXT<|eot|>``); the generation prompt is the assistant
header, and the model answers at once: no think block, so every prompt is a ``closed`` one and the
generated turn is ``A<|eot_id|>`` (``A<|eot|>``). vLLM renders both with the model's Jinja template
(``safe_apply_chat_template``) and counts the stop token in ``completion_tokens``.

Tool calls (what the model writes, not what the template writes in history; Meta's
llama-models package, ``llama3/chat_format.py`` and ``llama4/chat_format.py``):

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
    tool_arguments_dump="unicode",
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

"""What a rewrite of tool-call arguments on top of the engine's own tool parser leaves in the text,
and which spellings the model may have written that such a rewrite turns into the served text.

The engine's parser is the same at every provider that runs the engine, and what it does to the
model's arguments is judged by each sample's own count. A gateway behind one provider (Go's
``encoding/json``, a Python ``json.dumps`` with its defaults) rewrites again, and some of its
rewrites keep the count: that is a property of the provider, visible in the text it returns as
marks the engine's parser never writes. A sample of such a provider is still proven when, of
every spelling its rewrites could have come from (``inverse_calls``), only the one it was read
with has its count (``spellings_at_count``). docs/verification.md has the rule per family.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
import os
import re
from collections.abc import Iterator
from typing import Any

from draftgen.profiles import ModelProfile
from draftgen.reconstruct.text import CompletionReading, read_completion, recorded_prompt
from draftgen.records import StoredCompletion
from draftgen.tokens import tokenizer as tok
from draftgen.tokens.fast_encoder import special_pattern, splits_at_specials
from draftgen.tokens.rendering import RenderError

# Marks, each a rewrite the engine's parser never makes.
ESCAPED_TEXT = "escaped_text"  # \u escapes of non-ASCII or of <, >, & (Go, ensure_ascii)
SORTED_KEYS = "sorted_keys"  # keys sorted where the tool declares them in another order
NOT_ENGINE_DUMP = "not_engine_dump"  # not json.dumps(..., ensure_ascii=False) of itself

_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\u([0-9a-fA-F]{4})")
_HTML = {0x3C, 0x3E, 0x26}  # Go escapes these (and U+2028/9); no engine does


def rewrite_marks(
    arguments: object, declared: list[str] | None, profile: ModelProfile, forced: bool = False
) -> list:
    """The marks in one call's ``arguments`` text of a rewrite on top of the engine's parser.

    ``declared``: the keys of the called tool's parameters in the order the request declared
    them (None: unknown). ``forced``: the call answered a ``tool_choice`` that forced it, which
    vLLM may serve without the family's parser (its spelling then proves nothing). A text that
    is not a JSON object shows nothing.
    """
    parsed = _parsed_arguments(arguments)
    if parsed is None:
        return []
    marks = []
    ascii_engine = profile.tool_arguments_dump == "ascii"  # harmony's json.dumps escapes them
    codes = [int(code, 16) for code in _ESCAPE.findall(arguments)]
    if any(code in _HTML or (code >= 0x80 and not ascii_engine) for code in codes):
        marks.append(ESCAPED_TEXT)
    keys = list(parsed)
    if declared and len(keys) >= 2 and keys == sorted(keys):
        order = [key for key in declared if key in parsed]
        if len(order) == len(keys) and order != keys:
            marks.append(SORTED_KEYS)
    if profile.tool_arguments_parsed and not forced:
        if arguments != profile.engine_arguments(arguments):
            marks.append(NOT_ENGINE_DUMP)
    return marks


def declared_keys(tools: object, name: object) -> list[str] | None:
    """The parameter names of tool ``name`` in ``tools`` (a request's), in declared order."""
    for tool in tools if isinstance(tools, list) else ():
        function = tool.get("function") if isinstance(tool, dict) else None
        function = function if isinstance(function, dict) else tool
        if not isinstance(function, dict) or function.get("name") != name:
            continue
        parameters = function.get("parameters")
        properties = parameters.get("properties") if isinstance(parameters, dict) else None
        return list(properties) if isinstance(properties, dict) else None
    return None


def call_marks(
    calls: object, tools: object, profile: ModelProfile, forced: bool = False
) -> list[str]:
    """The marks of every structured call of one answer, each once, in the order found."""
    found: dict[str, None] = {}
    for call in calls if isinstance(calls, list) else ():
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            continue
        declared = declared_keys(tools, function.get("name"))
        for mark in rewrite_marks(function.get("arguments"), declared, profile, forced):
            found.setdefault(mark, None)
    return list(found)


# A sample's calls are read in at most this many key orders (five keys in one call: 120); a
# sample with more stays doubted, unread.
KEY_ORDER_LIMIT = 120


def keeps_unsorted_keys(calls: object) -> bool:
    """Whether one of ``calls`` came back with its arguments' keys out of sorted order: the
    provider that served it does not sort keys (no gateway sorts some objects and not others)."""
    for call in calls if isinstance(calls, list) else ():
        function = call.get("function") if isinstance(call, dict) else None
        parsed = _parsed_arguments(
            function.get("arguments") if isinstance(function, dict) else None
        )
        if parsed is not None and list(parsed) != sorted(parsed):
            return True
    return False


def inverse_calls(calls: list, reorders: bool, escapes: bool) -> list[list] | None:
    """The structured calls the model may have had, before a rewrite made of the provider's
    re-serialisation (always: its spacing is lost), its key sorting (``reorders``) and its
    escapes (``escapes``), turned them into ``calls``: the served calls first, then each key
    order spelled spaced and, with ``escapes``, as Go (``<>&``) and ``ensure_ascii`` escape it.
    ``ModelProfile.tool_call_markups`` reads each of them spaced, compact and verbatim. None if
    the calls have more than ``KEY_ORDER_LIMIT`` key orders together.

    A call whose arguments are not a JSON object has one spelling, the served one.
    """
    per_call: list[list[object]] = []
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        parsed = _parsed_arguments(
            function.get("arguments") if isinstance(function, dict) else None
        )
        if parsed is None:
            per_call.append([None])
            continue
        orders = list(
            itertools.islice(key_orders(parsed) if reorders else [parsed], KEY_ORDER_LIMIT + 1)
        )
        per_call.append(orders)
    total = 1
    for orders in per_call:
        total *= len(orders)
    if total > KEY_ORDER_LIMIT:
        return None
    variants = [calls]
    for chosen in itertools.product(*per_call):
        for spell in _SPELLINGS if escapes else _SPELLINGS[:1]:
            variants.append(
                [
                    call if value is None else _with_arguments(call, spell(value))
                    for call, value in zip(calls, chosen, strict=True)
                ]
            )
    return variants


def key_orders(value: object) -> Iterator[object]:
    """``value`` with the keys of each of its objects (nested ones too: Go sorts every map) in
    every order, the given order first."""
    if isinstance(value, dict):
        keys = list(value)
        for order in itertools.permutations(keys):
            for values in itertools.product(*(list(key_orders(value[key])) for key in order)):
                yield dict(zip(order, values, strict=True))
    elif isinstance(value, list):
        yield from (
            list(items) for items in itertools.product(*(list(key_orders(v)) for v in value))
        )
    else:
        yield value


def spellings_at_count(
    stored: StoredCompletion,
    completion_ids: list[int],
    tokenizer: Any,
    profile: ModelProfile,
    variants: list[list],
) -> int | None:
    """How many spellings of ``variants`` (``inverse_calls``) read, with the framing the sample
    was read with, to the provider's ``completion_tokens`` (distinct ids; the sample's own is one
    of them). None when the sample's ids are none of the served calls' readings (a repaired
    whitespace, a prompt that no longer renders): nothing then says which spelling it is.

    The readings are ``read_completion``'s, so every family's markup and the engine's own
    spellings (spaced, compact, verbatim) are the ones the sample's reconstruction knows.
    """
    try:
        prompt_text = recorded_prompt(stored, tokenizer, profile)[0]
    except RenderError:
        return None
    completion = stored.completion
    served = read_completion(completion, prompt_text, profile)
    framing = None
    for index in range(len(served.texts)):
        if served.ids(tokenizer, index) == completion_ids:
            framing = served.framings[index] if served.framings else ()
            break
    if framing is None:
        return None
    expected = completion.completion_tokens
    readings: dict[str, tuple[CompletionReading, int]] = {}  # text -> (its reading, index)
    for calls in variants:
        reading = read_completion(
            dataclasses.replace(completion, tool_calls=calls), prompt_text, profile
        )
        for index, text in enumerate(reading.texts):
            if not reading.framings or reading.framings[index] == framing:
                readings.setdefault(text, (reading, index))
    if served.segments:  # a family encoded piece by piece: each reading whole
        found = {tuple(reading.ids(tokenizer, index)) for reading, index in readings.values()}
        return sum(len(ids) == expected for ids in found)
    head, tails = _tails(tokenizer, list(readings))
    return len({tuple(tail) for tail in tails if head + len(tail) == expected})


def _tails(tokenizer: Any, texts: list[str]) -> tuple[int, list[list[int]]]:
    """(the ids of the texts' shared head, the ids of what follows it in each): the head ends
    where the last special token before the texts part ends, ids never merging across one (the
    reasoning before a call is encoded once, not once a spelling)."""
    inner = getattr(tokenizer, "inner", tokenizer)
    pattern = special_pattern(inner)
    cut = 0
    if pattern is not None and len(texts) > 1 and splits_at_specials(inner):
        common = len(os.path.commonprefix(texts))
        cut = max((m.end() for m in pattern.finditer(texts[0], 0, common)), default=0)
    head = len(tok.encode(tokenizer, texts[0][:cut])) if cut else 0
    return head, tok.encode_batch(tokenizer, [text[cut:] for text in texts])


def _parsed_arguments(arguments: object) -> dict | None:
    """A call's ``arguments`` text as the JSON object it holds (None: not one)."""
    if not isinstance(arguments, str):
        return None
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


def _with_arguments(call: dict, arguments: str) -> dict:
    function = dict(call.get("function") or {})
    function["arguments"] = arguments
    return {**call, "function": function}


def _escaped(value: object, separators: tuple[str, str], ascii_only: bool) -> str:
    """``value`` in JSON with ``separators``, escaped as ``ensure_ascii`` does (``ascii_only``)
    or as Go's ``encoding/json`` does (``<``, ``>``, ``&``, U+2028, U+2029)."""
    text = json.dumps(value, ensure_ascii=ascii_only, separators=separators)
    if ascii_only:
        return text
    for char, escaped in _GO_ESCAPES:
        text = text.replace(char, escaped)
    return text


_GO_ESCAPES = (
    ("<", "\\u003c"),
    (">", "\\u003e"),
    ("&", "\\u0026"),
    ("\u2028", "\\u2028"),
    ("\u2029", "\\u2029"),
)
_SPACED, _COMPACT = (", ", ": "), (",", ":")

# How the model may have spelled an object: as the engine reads it (``tool_call_markups`` reads
# this spaced, compact and verbatim), then as the two escaping rewrites write it, spaced and
# compact (a model may write escapes itself; a rewrite that escapes leaves no way to tell).
_SPELLINGS = (
    lambda value: json.dumps(value, ensure_ascii=False),
    *(
        functools.partial(_escaped, separators=separators, ascii_only=ascii_only)
        for ascii_only in (False, True)
        for separators in (_SPACED, _COMPACT)
    ),
)

"""What a rewrite of tool-call arguments on top of the engine's own tool parser leaves in the text.

The engine's parser is the same at every provider that runs the engine, and what it does to the
model's arguments is judged by each sample's own count. A gateway behind one provider (Go's
``encoding/json``, a Python ``json.dumps`` with its defaults) rewrites again, and some of its
rewrites keep the count: that is a property of the provider, visible in the text it returns as
marks the engine's parser never writes. docs/verification.md has the rule per family.
"""

from __future__ import annotations

import json
import re

from draftgen.profiles import ModelProfile

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
    if not isinstance(arguments, str):
        return []
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return []
    if not isinstance(parsed, dict):
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

"""Tokenizer sources: a ``PREFIX:NAME`` tokenizer that an installed package turns into a local
directory, named by an entry point of ``draftgen.tokenizer_sources`` (its name is the prefix).

draftgen's test package provides ``fixture:`` (offline test tokenizers). draftgen itself knows
only that prefix's name, to say what to install when nothing provides it.
"""

from __future__ import annotations

import functools
import importlib.metadata
import re

GROUP = "draftgen.tokenizer_sources"
FIXTURE = "fixture"
_PREFIX = re.compile(r"([a-z][a-z0-9_-]*):")


@functools.cache
def _sources() -> dict[str, importlib.metadata.EntryPoint]:
    return {entry.name: entry for entry in importlib.metadata.entry_points(group=GROUP)}


def sourced_directory(spec: str) -> str | None:
    """The directory the source of ``spec``'s prefix gives for its name (built on first use by the
    source); None when ``spec`` names no source. ValueError, in a sentence for the user, for a name
    the source does not know or a ``fixture:`` that no installed package provides."""
    match = _PREFIX.match(spec)
    if match is None:
        return None
    entry = _sources().get(match[1])
    if entry is None:
        if match[1] == FIXTURE:
            raise ValueError(
                f"tokenizer {spec!r} names a test fixture, and no installed package provides "
                "them: install draftgen[test] to use fixtures, or pass a tokenizer directory "
                "or hub id"
            )
        return None
    return str(entry.load()(spec[match.end() :]))

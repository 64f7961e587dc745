"""The store as a holder of parts: one connection shared by every part, each method in one part,
and the parts' own reads (``samples.details_by_provider``)."""

from __future__ import annotations

import asyncio
import sqlite3

import pytest

from draftgen.records import Completion, TokenSample
from draftgen.store.database import CompletionWriter, Store

PARTS = (
    "settings",
    "completions",
    "samples",
    "providers",
    "calibrations",
    "batches",
    "tallies",
    "tables",
    "merge",
)


def public_methods(part: object) -> set[str]:
    return {
        name
        for name in dir(type(part))
        if not name.startswith("_") and callable(getattr(type(part), name))
    }


def test_a_connection_opened_again_is_every_parts(tmp_path):
    store = Store(tmp_path)
    first = store.db
    store.file.reopen()  # what the samples' patience does after a refusal for permission
    assert store.db is not first
    assert {id(getattr(store, part).db) for part in PARTS} == {id(store.db)}
    with pytest.raises(sqlite3.ProgrammingError):
        first.execute("SELECT 1")  # the old one is closed, not left open beside the new
    store.settings.set_meta("after", "reopen")
    assert store.tallies.settings.meta("after") == "reopen"  # tallies reads the same part
    store.close()


def test_each_method_is_in_one_part_and_only_opening_is_left_on_store(tmp_path):
    store = Store(tmp_path)
    owners: dict[str, list[str]] = {}
    for part in PARTS:
        for name in public_methods(getattr(store, part)):
            owners.setdefault(name, []).append(part)
    # ``read`` is the read of a part named like it (completions, calibrations, tables).
    assert {name: parts for name, parts in owners.items() if len(parts) > 1} == {
        "read": ["completions", "calibrations", "tables"]
    }
    assert public_methods(store) == {
        "as_found",
        "close",
        "import_unstored",
        "open_run",
        "open_writer",
        "unjournalled",
    }
    store.close()


def test_details_by_provider_groups_the_samples_failed_for_a_reason(tmp_path):
    store = Store(tmp_path)
    writer = CompletionWriter(store.path)
    for key, provider in (("a", "p1"), ("b", "p1"), ("c", None), ("d", "p2")):
        completion = Completion("g", provider, "m", "", "x", None, "stop", "stop", {})
        asyncio.run(writer.add_completion(key, key, 0, b'{"messages": []}', completion, 1, [], 0))
    writer.close()
    store.samples.add_samples(
        [
            TokenSample("a", [1], 0, False, "count", "off by one; repair would match"),
            TokenSample("b", [1], 0, False, "count", "off by two"),
            TokenSample("c", [1], 0, False, "count", "repair would match"),
            TokenSample("d", [1], 0, False, "other", "repair would match"),
        ]
    )
    assert store.samples.details_by_provider("count", "repair would match") == {
        "p1": [("a", "off by one; repair would match")],
        "": [("c", "repair would match")],
    }
    assert store.samples.details_by_provider("none", "repair") == {}
    store.close()

"""Row admission (``inputs.admission``): the one rule the planner and both engines admit rows by,
and ``rejected.jsonl``, which the planner alone writes: each rejected row once, in input order.
"""

from __future__ import annotations

import json

import pytest

from draftgen.inputs.admission import ROWS_PER_STATEMENT, Admission, count_plan
from draftgen.inputs.ingest import Conversation, Rejection
from draftgen.inputs.plan import NOTHING_TO_ANSWER, plan_turns
from draftgen.inputs.shard import Shard

THREE_TURNS = (
    {"role": "user", "content": "a"},
    {"role": "assistant", "content": "old a"},
    {"role": "user", "content": "b"},
    {"role": "assistant", "content": "old b"},
    {"role": "user", "content": "c"},
)
REUSED = (
    "id 'r1' is already used by line 3 of rows.jsonl for a different conversation; "
    "give each row a unique id"
)


def conversation(source_id: str, messages=THREE_TURNS, line: int = 1) -> Conversation:
    return Conversation(source_id, tuple(messages), None, "rows.jsonl", line)


def rows() -> list[Conversation | Rejection]:
    """An unreadable row, one with nothing to answer, a good one, its exact duplicate, and
    another conversation under the good one's id."""
    return [
        Rejection("rows.jsonl", 1, "not JSON"),
        conversation("s", ({"role": "system", "content": "only"},), line=2),
        conversation("r1", line=3),
        conversation("r1", line=4),
        conversation("r1", THREE_TURNS[:1], line=5),
    ]


def listed(path) -> list[tuple[int, str]]:
    return [(r["line"], r["reason"]) for r in map(json.loads, path.read_text().splitlines())]


def test_admit_gives_each_row_its_turns_or_why_it_is_rejected():
    admission = Admission()
    try:
        admitted = admission.admit(rows(), None)
    finally:
        admission.close()
    assert [(len(a.plans), a.rejection and a.rejection.reason, a.ours) for a in admitted] == [
        (0, "not JSON", True),
        (0, NOTHING_TO_ANSWER, True),
        (3, None, True),
        (3, None, True),  # an exact duplicate shares the first one's turns
        (0, REUSED, True),
    ]
    assert admitted[2].plans == admitted[3].plans == plan_turns(conversation("r1", line=3))


def test_ids_are_checked_across_calls_and_lists_as_one_by_one():
    together, apart = Admission(), Admission()
    try:
        whole = together.admit(rows(), None)
        parts = [a for row in rows() for a in apart.admit([row], None)]
    finally:
        together.close()
        apart.close()
    assert whole == parts


def test_each_row_is_exactly_one_shards_and_ids_are_checked_in_every_shard():
    shards = []
    for index in range(2):
        admission = Admission()
        try:
            shards.append(admission.admit(rows(), Shard(index, 2)))
        finally:
            admission.close()
    for first, second in zip(*shards, strict=True):
        assert first.ours != second.ours
        assert (first.plans, first.rejection) == (second.plans, second.rejection)


def test_the_planner_lists_every_rejected_row_once_and_counts_as_the_run(tmp_path):
    path = tmp_path / "rejected.jsonl"
    planned = count_plan(rows(), 2, None, path)
    assert listed(path) == [(1, "not JSON"), (2, NOTHING_TO_ANSWER), (5, REUSED)]
    assert (planned.rows, planned.rejected, planned.answerable) == (5, 3, 2)
    assert (planned.shard_rows, planned.turns, planned.requests) == (2, 6, 12)
    assert planned.first_rejected == Rejection("rows.jsonl", 1, "not JSON")


def test_a_resume_lists_the_rejected_rows_once_not_again(tmp_path):
    path = tmp_path / "rejected.jsonl"
    count_plan(rows(), 1, None, path)
    first = path.read_bytes()
    count_plan(rows(), 1, None, path)  # the same input planned again, as a resume does
    assert path.read_bytes() == first
    assert len(first.splitlines()) == 3


def test_shards_list_the_whole_runs_rejections_between_them(tmp_path):
    count_plan(rows(), 1, None, tmp_path / "whole.jsonl")
    parts = []
    for index in range(3):
        planned = count_plan(rows(), 1, Shard(index, 3), tmp_path / f"{index}.jsonl")
        parts += listed(tmp_path / f"{index}.jsonl")
        assert planned.rejected == len(listed(tmp_path / f"{index}.jsonl"))
    assert sorted(parts) == sorted(listed(tmp_path / "whole.jsonl"))


def test_an_unreadable_input_raises_after_the_rows_before_it():
    def reading():
        yield from (conversation(f"r{i}", THREE_TURNS[:1], line=i) for i in range(3))
        raise OSError("the disk went away")

    seen = []
    admission = Admission()
    with pytest.raises(OSError, match="the disk went away"):
        for admitted in admission.each(reading(), None):
            seen.append(admitted.plans[0].source_id)
    admission.close()
    assert seen == ["r0", "r1", "r2"]


def test_rows_past_one_statement_are_checked_against_the_earlier_lists():
    many = [conversation(f"r{i}", THREE_TURNS[:1], line=i) for i in range(ROWS_PER_STATEMENT + 5)]
    many.append(conversation("r0", THREE_TURNS, line=ROWS_PER_STATEMENT + 5))
    admission = Admission()
    try:
        admitted = list(admission.each(many, None))
    finally:
        admission.close()
    assert [a.rejection is None for a in admitted] == [True] * (ROWS_PER_STATEMENT + 5) + [False]
    assert admitted[-1].rejection.reason.startswith("id 'r0' is already used by line 0 of")

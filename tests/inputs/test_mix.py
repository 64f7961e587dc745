"""The dataset mixer: shares by weight, seeded shuffle by offset index, prefixed ids, counts."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import pytest

from draftgen.inputs.ingest import Conversation, Rejection
from draftgen.inputs.mix import (
    DatasetSpec,
    MixError,
    RowIndex,
    Suite,
    count_jsonl_rows,
    count_suite,
    read_suite,
    shares,
)
from draftgen.run.context import count_rows
from draftgen.run.pipeline import RunError


def rows_file(path: Path, count: int, prefix: str = "r", blank_every: int = 0) -> str:
    lines = []
    for i in range(count):
        lines.append(json.dumps({"id": f"{prefix}{i}", "messages": [user(f"{prefix} {i}")]}))
        if blank_every and i % blank_every == 0:
            lines.append("   ")
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def user(text: str) -> dict:
    return {"role": "user", "content": text}


def ids(suite: Suite) -> list[str]:
    return [item.source_id for item in read_suite(suite) if isinstance(item, Conversation)]


def test_weights_share_the_suite_limit_and_small_datasets_leave_theirs(tmp_path):
    a = rows_file(tmp_path / "a.jsonl", 100, "a")
    b = rows_file(tmp_path / "b.jsonl", 100, "b")
    c = rows_file(tmp_path / "c.jsonl", 4, "c")
    suite = Suite(
        (
            DatasetSpec(a, name="a", weight=1.0),
            DatasetSpec(b, name="b", weight=2.0),
            DatasetSpec(c, name="c", weight=1.0),
        ),
        limit=40,
    )
    # 10 / 20 / 10 by weight; c has 4, its 6 go to a and b as 1:2.
    assert shares(suite) == [12, 24, 4]
    assert count_suite(suite) == 40 == len(ids(suite))
    capped = Suite((DatasetSpec(a, limit=7), DatasetSpec(c)), limit=None)
    assert shares(capped) == [7, 4]
    assert shares(Suite((DatasetSpec(a), DatasetSpec(b)), limit=1000)) == [100, 100]
    assert shares(Suite((DatasetSpec(a), DatasetSpec(b), DatasetSpec(c)), limit=5)) == [2, 2, 1]


def test_rows_are_interleaved_by_share(tmp_path):
    a = rows_file(tmp_path / "a.jsonl", 30, "a")
    b = rows_file(tmp_path / "b.jsonl", 30, "b")
    got = ids(Suite((DatasetSpec(a, name="A"), DatasetSpec(b, name="B", weight=2.0)), limit=9))
    assert got == ["B/b0", "A/a0", "B/b1", "B/b2", "A/a1", "B/b3", "B/b4", "A/a2", "B/b5"]


def test_names_keep_equal_ids_of_two_datasets_apart(tmp_path):
    a = rows_file(tmp_path / "a.jsonl", 2, "r")
    b = rows_file(tmp_path / "b.jsonl", 2, "r")
    suite = Suite((DatasetSpec(a, name="x"), DatasetSpec(b, name="y")))
    assert sorted(ids(suite)) == ["x/r0", "x/r1", "y/r0", "y/r1"]
    assert ids(Suite.from_inputs([a, b])) == ["r0", "r1", "r0", "r1"]  # --input: as before
    with pytest.raises(MixError, match="the name is used by .*a.jsonl too"):
        count_suite(Suite((DatasetSpec(a, name="x"), DatasetSpec(b, name="x"))))


def test_shuffle_is_seeded_stable_and_takes_a_subset(tmp_path):
    path = rows_file(tmp_path / "a.jsonl", 50, "a", blank_every=7)
    spec = DatasetSpec(path, shuffle=True, seed=3, limit=10)
    first = ids(Suite((spec,)))
    assert first == ids(Suite((spec,)))  # a resume picks the same rows, in the same order
    assert len(set(first)) == 10 and first != [f"a{i}" for i in range(10)]
    other = ids(Suite((DatasetSpec(path, shuffle=True, seed=4, limit=10),)))
    assert other != first
    whole = ids(Suite((DatasetSpec(path, shuffle=True, seed=3),)))
    assert whole[:10] == first and sorted(whole) == sorted(f"a{i}" for i in range(50))
    # Line numbers survive the shuffle (blank lines shift them): each row is where it says.
    lines = Path(path).read_text().splitlines()
    for item in read_suite(Suite((spec,))):
        assert json.loads(lines[item.line - 1])["id"] == item.source_id


def test_rejections_keep_their_line_and_count_as_rows(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text('{"messages": [{"role": "user", "content": "q"}], "id": "ok"}\n\n{broken\n')
    for spec in (DatasetSpec(str(path)), DatasetSpec(str(path), shuffle=True, seed=1)):
        items = list(read_suite(Suite((spec,), limit=2)))
        assert count_suite(Suite((spec,), limit=2)) == 2 == len(items)
        [rejection] = [i for i in items if isinstance(i, Rejection)]
        assert rejection.line == 3 and "not valid JSON" in rejection.reason
    assert count_rows([str(path)]) == 2


def test_row_counts_match_what_is_read(tmp_path):
    path = rows_file(tmp_path / "a.jsonl", 1000, "a", blank_every=97)
    assert count_jsonl_rows(path) == 1000 == len(RowIndex.build(path))
    for body, rows in ((b"", 0), (b"\n \n", 0), (b"{}", 1), (b"{}\n\n{}\n", 2), (b" x\n", 1)):
        (tmp_path / "b.jsonl").write_bytes(body)
        assert count_jsonl_rows(str(tmp_path / "b.jsonl")) == rows
        assert len(list(read_suite(Suite.from_inputs([str(tmp_path / "b.jsonl")])))) == rows


def test_refusals_say_what_to_do(tmp_path):
    path = rows_file(tmp_path / "a.jsonl", 3)
    with pytest.raises(MixError, match="weight is a share of the suite's limit, so set limit"):
        count_suite(Suite((DatasetSpec(path, weight=2.0),)))
    parquet_file = tmp_path / "a.parquet"
    parquet_file.write_bytes(b"PAR1")
    with pytest.raises(MixError) as caught:
        count_suite(Suite((DatasetSpec(str(parquet_file), shuffle=True),)))
    assert str(caught.value) == (
        f"dataset {parquet_file}: shuffle reads rows by byte offset or position, which needs a "
        "JSONL file, a JSON array or a datasets.save_to_disk directory; convert "
        f"{parquet_file} to JSONL or drop shuffle"
    )
    with pytest.raises(RunError, match="missing.jsonl does not exist"):
        count_rows(Suite((DatasetSpec(str(tmp_path / "missing.jsonl")),)))


def test_shuffle_holds_offsets_not_rows(tmp_path):
    count = 100_000
    path = tmp_path / "big.jsonl"
    row = json.dumps({"messages": [user("x" * 200)]})
    path.write_text((row + "\n") * count)
    tracemalloc.start()
    index = RowIndex.build(str(path))
    index.shuffle(0)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert index.lines is None  # no blank lines: line numbers cost nothing
    assert index.offsets.itemsize == 8 and index.order.itemsize == 4
    # 12 bytes a row plus array growth slack: far below the 20 MB the rows take.
    assert peak < count * 24 + (1 << 20)
    assert path.stat().st_size > 20 * count


def test_json_arrays_and_datasets_directories_shuffle_by_position(tmp_path):
    import datasets

    rows = [{"id": f"j{i}", "messages": [user(f"j {i}")]} for i in range(50)]
    array_file = tmp_path / "rows.json"
    array_file.write_text(json.dumps(rows))
    saved = tmp_path / "saved"
    datasets.Dataset.from_list(rows).save_to_disk(str(saved))
    lines = rows_file(tmp_path / "rows.jsonl", 50, prefix="j")
    picked = {}
    for path in (str(array_file), str(saved), lines):
        suite = Suite((DatasetSpec(path, shuffle=True, seed=7, limit=10),))
        picked[path] = ids(suite)
        assert ids(suite) == picked[path] and count_suite(suite) == 10
    # One permutation for every format: the same seed picks the same rows in the same order.
    assert picked[str(array_file)] == picked[str(saved)] == picked[lines]
    assert picked[lines] != [f"j{i}" for i in range(10)]
    assert len(set(picked[lines])) == 10

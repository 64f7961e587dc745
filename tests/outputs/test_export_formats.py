"""The parquet, hf and specforge-text exports: the same rows as specforge, read back by datasets.

One small faulty run (sample_runs.make_run) serves every test; the specforge JSONL is the
reference each other format is compared with, value for value.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3

import datasets
import pyarrow.parquet as pq
import pytest
from conftest import draftgen, read_jsonl
from sample_runs import TOOLS, make_run

from draftgen.outputs.export import ExportError, export, parquet_schema
from draftgen.records import Completion, TokenSample
from draftgen.store.database import CompletionWriter, Store

METADATA = [
    "id",
    "source_id",
    "turn",
    "verified",
    "verify_reason",
    "finish_reason",
    "provider",
    "generation_id",
    "id_source",
]


PROVENANCE = [
    "id",
    "verified",
    "verify_reason",
    "finish_reason",
    "provider",
    "generation_id",
    "id_source",
]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return make_run(tmp_path_factory.mktemp("export"))


@pytest.fixture(scope="module")
def reference(run_dir, tmp_path_factory):
    """The specforge rows, default (verified) and all."""
    out = tmp_path_factory.mktemp("reference")
    rows = {}
    for name, extra in (("verified", ()), ("all", ("--include-unverified",))):
        path = out / f"{name}.jsonl"
        result = draftgen(
            "export", str(run_dir), "--format", "specforge", "--out", str(path), *extra
        )
        assert result.returncode == 0, result.stderr
        rows[name] = read_jsonl(path)
    assert 0 < len(rows["verified"]) < len(rows["all"])
    assert all(r["verified"] for r in rows["verified"])
    return rows


@pytest.mark.parametrize("which", ["verified", "all"])
def test_parquet_loads_through_datasets_with_equal_values(run_dir, reference, tmp_path, which):
    path = tmp_path / "train.parquet"
    extra = ("--include-unverified",) if which == "all" else ()
    result = draftgen("export", str(run_dir), "--format", "parquet", "--out", str(path), *extra)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"wrote {len(reference[which])} rows to {path}"
    assert not list(tmp_path.glob("*.partial"))
    loaded = datasets.load_dataset(
        "parquet", data_files=str(path), split="train", cache_dir=str(tmp_path / "cache")
    )
    assert len(loaded) == len(reference[which])
    assert set(loaded.column_names) == {*METADATA, "input_ids", "loss_mask", "seq_len", "draftgen"}
    for got, want in zip(loaded, reference[which], strict=True):
        assert got["input_ids"] == want["input_ids"]
        assert got["loss_mask"] == want["loss_mask"]
        assert got["seq_len"] == len(want["input_ids"]) == len(got["loss_mask"])
        assert {k: got[k] for k in METADATA} == {k: want[k] for k in METADATA}
        # The row's provenance column repeats what identifies it, and adds the run's marks.
        assert {k: got["draftgen"][k] for k in PROVENANCE} == {k: want[k] for k in PROVENANCE}
        marks = got["draftgen"]
        assert marks["simulated"] is True and len(marks["settings_digest"]) == 64
    assert pq.read_schema(path).equals(parquet_schema())


def test_hf_export_is_a_saved_dataset_with_equal_values(run_dir, reference, tmp_path):
    out = tmp_path / "hf"
    for _ in range(2):  # a second export replaces the first
        result = draftgen("export", str(run_dir), "--format", "hf", "--out", str(out))
        assert result.returncode == 0, result.stderr
    loaded = datasets.load_from_disk(str(out))
    assert len(loaded) == len(reference["verified"])
    for got, want in zip(loaded, reference["verified"], strict=True):
        assert got["input_ids"] == want["input_ids"] and got["loss_mask"] == want["loss_mask"]
        assert got["seq_len"] == len(want["input_ids"]) and got["id"] == want["id"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf"]  # no work directory left


def test_hf_export_refuses_to_replace_a_directory_that_is_not_a_dataset(run_dir, tmp_path):
    (tmp_path / "keep").mkdir()
    (tmp_path / "keep" / "notes.txt").write_text("mine")
    result = draftgen("export", str(run_dir), "--format", "hf", "--out", str(tmp_path / "keep"))
    assert result.returncode == 2
    assert "exists and is not an earlier export of this run" in result.stderr
    assert (tmp_path / "keep" / "notes.txt").read_text() == "mine"


def test_specforge_text_is_the_sent_messages_plus_the_answer(run_dir, reference, tmp_path):
    path = tmp_path / "text.jsonl"
    result = draftgen(
        "export",
        str(run_dir),
        "--format",
        "specforge-text",
        "--out",
        str(path),
        "--include-unverified",
    )
    assert result.returncode == 0, result.stderr
    rows = read_jsonl(path)
    assert [r["id"] for r in rows] == [r["id"] for r in reference["all"]]
    db = sqlite3.connect(run_dir / "draftgen.sqlite")
    stored = {
        f"{source}:{turn}": (json.loads(request), reasoning or "", content or "", calls)
        for source, turn, request, reasoning, content, calls in db.execute(
            "SELECT source_id, turn, request, reasoning, content, tool_calls FROM completions"
        )
    }
    with_calls = with_reasoning = 0
    for row in rows:
        request, reasoning, content, calls = stored[row["id"]]
        *sent, answer = row["conversations"]
        assert sent == request["messages"]
        assert answer["role"] == "assistant"
        assert not answer["content"].endswith("<|im_end|>")
        assert "</think>" not in answer["content"]
        if reasoning:  # the provider split it; an unsplit think block is split here
            assert answer["reasoning_content"] == reasoning
            assert answer["content"] == content.removesuffix("<|im_end|>")
        with_reasoning += "reasoning_content" in answer
        if calls:
            assert answer["tool_calls"] == json.loads(calls)
            assert row["tools"] == TOOLS
            with_calls += 1
        else:
            assert "tool_calls" not in answer
    assert with_calls >= 1 and with_reasoning >= len(rows) // 2
    default = tmp_path / "verified.jsonl"
    assert (
        draftgen(
            "export", str(run_dir), "--format", "specforge-text", "--out", str(default)
        ).returncode
        == 0
    )
    assert [r["id"] for r in read_jsonl(default)] == [r["id"] for r in reference["verified"]]


@pytest.mark.parametrize("fmt", ["specforge", "parquet"])
def test_ids_and_loss_mask_at_the_edges(tmp_path, fmt):
    """The mask is 0 on the prompt's ids and 1 after them, however short either part is."""
    samples = {"a": ([], 0), "b": ([7, 8, 9], 0), "c": ([7, 8, 9], 3), "d": ([2**31 - 1, 0, 5], 1)}
    store = Store(tmp_path / "run")
    writer = CompletionWriter(store.path)
    completion = Completion("g", "p", "m", "", "a", None, "stop", "stop", {})
    for key in samples:
        asyncio.run(writer.add_completion(key, key, 0, b'{"messages": []}', completion, 1, [], 0))
    writer.close()
    store.samples.add_samples(
        [TokenSample(k, ids, n, True, "ok") for k, (ids, n) in samples.items()]
    )
    out = tmp_path / "out"
    assert export(store, fmt, out) == 4
    rows = read_jsonl(out) if fmt == "specforge" else pq.read_table(out).to_pylist()
    assert [(row["input_ids"], row["loss_mask"]) for row in rows] == [
        ([], []),
        ([7, 8, 9], [1, 1, 1]),
        ([7, 8, 9], [0, 0, 0]),
        ([2**31 - 1, 0, 5], [0, 1, 1]),
    ]


def test_unsplit_reasoning_and_leaked_end_of_turn_are_undone():
    from draftgen.outputs.export import assistant_message
    from draftgen.profiles import get_profile
    from draftgen.records import Completion

    completion = Completion(
        None, None, None, None, "<think>why</think>answer<|im_end|>", None, "stop", None
    )
    message = assistant_message(completion, get_profile("kimi-k2"))
    assert message == {"role": "assistant", "content": "answer", "reasoning_content": "why"}
    expected = {"role": "assistant", "content": "A", "reasoning_content": "R"}
    # Harmony: the final channel's header is the frame of the answer, not part of it.
    harmony = "<|channel|>analysis<|message|>R<|end|><|start|>assistant<|channel|>final<|message|>A"
    for text, profile in (
        (harmony + "<|return|>", "gpt-oss"),
        ("\n<think>R</think>A<|observation|>", "glm-4.6"),  # GLM's lead; a tool turn's end
        ("R</think>A", "qwen3"),  # the prompt opened the block
    ):
        unsplit = Completion(None, None, None, None, text, None, "stop", None)
        assert assistant_message(unsplit, get_profile(profile)) == expected, profile


def test_an_unknown_format_is_refused(run_dir, tmp_path):
    store = Store(run_dir, create=False)
    try:
        with pytest.raises(ExportError, match="unknown export format 'csv'; use one of specforge"):
            export(store, "csv", tmp_path / "x")
    finally:
        store.close()
    result = draftgen("export", str(run_dir), "--format", "csv", "--out", str(tmp_path / "x"))
    assert result.returncode == 2 and "invalid choice: 'csv'" in result.stderr

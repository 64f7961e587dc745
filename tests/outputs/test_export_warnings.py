"""What an export says where a trainer would change its data: rows longer than the trainers'
windows (2048, 4096, 8192 ids and ``--max-length``), and that ``specforge-text`` is re-tokenized
to other ids; and ``draftgen vocab --for``, each trainer's own vocabulary files.
"""

from __future__ import annotations

import asyncio

import pytest
from conftest import draftgen

from draftgen.outputs.export import (
    LONG_ROWS,
    TEXT_CAVEAT,
    ExportOptions,
    RowLengths,
    write_export,
)
from draftgen.records import Completion, TokenSample
from draftgen.store.database import CompletionWriter, Store

# key -> (length in ids, verified); the unverified one is only in --include-unverified exports.
SAMPLES = {
    "a": (10, True),
    "b": (2049, True),
    "c": (4097, True),
    "d": (9000, True),
    "e": (5000, False),
}


@pytest.fixture
def run_dir(tmp_path):
    """A run whose rows are 10, 2049, 4097 and 9000 ids long (and an unverified one of 5000)."""
    path = tmp_path / "run"
    store = Store(path)
    writer = CompletionWriter(store.path)
    completion = Completion("g", "p", "m", "", "answer", None, "stop", "stop", {})
    for key in SAMPLES:
        asyncio.run(writer.add_completion(key, key, 0, b'{"messages": []}', completion, 1, [], 0))
    writer.close()
    store.samples.add_samples(
        [
            TokenSample(key, list(range(length)), length // 2, verified, "ok" if verified else "x")
            for key, (length, verified) in SAMPLES.items()
        ]
    )
    store.close()
    return path


def test_row_lengths_count_the_exported_rows_beyond_each_limit(run_dir, tmp_path):
    with Store(run_dir, create=False) as store:
        summary = write_export(store, "specforge", tmp_path / "a.jsonl", ExportOptions())
        assert summary.rows == 4
        assert summary.lengths == RowLengths(4, 9000, {2048: 3, 4096: 2, 8192: 1})
        every = write_export(
            store,
            "parquet",
            tmp_path / "b.parquet",
            ExportOptions(include_unverified=True, max_length=4097),
        )
        assert every.rows == 5
        assert every.lengths == RowLengths(5, 9000, {2048: 4, 4096: 3, 4097: 2, 8192: 1})


def test_the_export_says_how_many_rows_a_trainer_would_cut(run_dir, tmp_path):
    out = tmp_path / "train.jsonl"
    result = draftgen("export", str(run_dir), "--out", str(out), "--max-length", "3000")
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"wrote 4 rows to {out}\n"
    assert result.stderr == (
        "draftgen: rows longer than 2048 / 4096 / 8192 ids: 3 / 2 / 1 of 4 (the longest has 9000 "
        f"ids); longer than --max-length 3000: 2. {LONG_ROWS}\n"
    )
    assert LONG_ROWS.startswith("SpecForge cuts every row at data.max_length (default 2048)")
    assert "speculators' train.py truncates rows longer than --total-seq-len (default 8192)" in (
        LONG_ROWS
    )


def test_short_rows_are_counted_only_against_a_max_length_given(tmp_path):
    # Only the 10-id row is verified and complete here.
    path = tmp_path / "run"
    store = Store(path)
    writer = CompletionWriter(store.path)
    completion = Completion("g", "p", "m", "", "answer", None, "stop", "stop", {})
    asyncio.run(writer.add_completion("a", "a", 0, b'{"messages": []}', completion, 1, [], 0))
    writer.close()
    store.samples.add_samples([TokenSample("a", list(range(10)), 4, True, "ok")])
    store.close()
    quiet = draftgen("export", str(path), "--out", str(tmp_path / "a.jsonl"))
    assert (quiet.returncode, quiet.stderr) == (0, "")
    asked = draftgen("export", str(path), "--out", str(tmp_path / "b.jsonl"), "--max-length", "8")
    assert asked.stderr == (
        "draftgen: rows longer than 2048 / 4096 / 8192 ids: 0 / 0 / 0 of 1 (the longest has 10 "
        "ids); longer than --max-length 8: 1\n"
    )


def test_specforge_text_says_a_trainer_re_tokenizing_it_gets_other_ids(run_dir, tmp_path):
    out = tmp_path / "text.jsonl"
    result = draftgen("export", str(run_dir), "--format", "specforge-text", "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines()[-1] == f"draftgen: {TEXT_CAVEAT}"
    assert TEXT_CAVEAT == (
        "specforge-text holds text, not ids: a trainer that re-tokenizes it does not reproduce "
        "the ids draftgen verified. SpecForge's text path (a6b6b02) gave other ids in 47 of 47 "
        "rows: it adds its default system prompt, drops Kimi's reasoning from the supervised "
        "span, supervises Qwen's \\n after <|im_end|> and strips leading newlines. Export "
        "--format specforge (data.prompts_path) or speculators to train on the exact ids"
    )
    ids = draftgen("export", str(run_dir), "--format", "specforge", "--out", str(tmp_path / "x"))
    assert "specforge-text" not in ids.stderr


@pytest.mark.parametrize(
    "trainers, files",
    [
        ((), ["d2t.npy", "t2d.npy", "vocab.json", "vocab_mapping.npz", "vocab_mapping.pt"]),
        (("specforge",), ["vocab.json", "vocab_mapping.npz", "vocab_mapping.pt"]),
        (("speculators",), ["d2t.npy", "t2d.npy", "vocab.json", "vocab_mapping.npz"]),
        (
            ("speculators", "specforge"),
            ["d2t.npy", "t2d.npy", "vocab.json", "vocab_mapping.npz", "vocab_mapping.pt"],
        ),
    ],
)
def test_vocab_writes_each_trainers_own_files(run_dir, tmp_path, trainers, files):
    out = tmp_path / "vocab"
    chosen = [word for trainer in trainers for word in ("--for", trainer)]
    result = draftgen(
        "vocab", str(run_dir), "--size", "16", "--vocab-size", "10000", "--out", str(out), *chosen
    )
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in out.iterdir()) == files
    assert result.stdout.splitlines()[-1] == "wrote " + ", ".join(
        str(out / name)
        for name in ["vocab.json", "vocab_mapping.npz"]
        + (["vocab_mapping.pt"] if "vocab_mapping.pt" in files else [])
        + (["d2t.npy", "t2d.npy"] if "d2t.npy" in files else [])
    )


def test_vocab_for_an_unknown_trainer_is_refused(run_dir, tmp_path):
    result = draftgen("vocab", str(run_dir), "--out", str(tmp_path / "v"), "--for", "eagle")
    assert result.returncode == 2
    assert "argument --for: invalid choice: 'eagle'" in result.stderr
    assert not (tmp_path / "v").exists()

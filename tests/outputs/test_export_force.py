"""``--force`` with the directory formats (issue #35): it replaces what is at ``--out`` as it
does for the file formats, and never the run itself, whatever the format."""

from __future__ import annotations

import datasets
import pytest
from conftest import draftgen
from sample_runs import make_run


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return make_run(tmp_path_factory.mktemp("force"), rows=6)


def test_force_replaces_a_directory_that_is_not_a_dataset(run_dir, tmp_path):
    keep = tmp_path / "keep"
    keep.mkdir()
    (keep / "notes.txt").write_text("mine")
    refused = draftgen("export", str(run_dir), "--format", "hf", "--out", str(keep))
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines()[-1] == (
        f"draftgen: --out {keep} exists and is not an earlier export of this run: choose a new "
        "--out, or pass --force to replace it"
    )
    assert (keep / "notes.txt").read_text() == "mine"
    # Before: the same refusal with --force, which did nothing.
    forced = draftgen("export", str(run_dir), "--format", "hf", "--out", str(keep), "--force")
    assert forced.returncode == 0, forced.stderr
    assert not (keep / "notes.txt").exists()
    assert len(datasets.load_from_disk(str(keep))) > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep"]  # no work directory left


def test_force_replaces_a_file_where_the_dataset_goes(run_dir, tmp_path):
    out = tmp_path / "train_hf"
    out.write_text("not a dataset")
    refused = draftgen("export", str(run_dir), "--format", "hf", "--out", str(out))
    assert refused.returncode == 2 and out.read_text() == "not a dataset"
    forced = draftgen("export", str(run_dir), "--format", "hf", "--out", str(out), "--force")
    assert forced.returncode == 0, forced.stderr
    assert out.is_dir() and len(datasets.load_from_disk(str(out))) > 0


@pytest.mark.parametrize(
    ("fmt", "where"),
    [("hf", "."), ("hf", ".."), ("specforge", "draftgen.sqlite"), ("parquet", "draftgen.lock")],
)
def test_force_never_replaces_the_run_itself(run_dir, fmt, where):
    out = run_dir / where
    before = (run_dir / "draftgen.sqlite").read_bytes()
    result = draftgen("export", str(run_dir), "--format", fmt, "--out", str(out), "--force")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        f"draftgen: --out {out} would replace the run in {run_dir} itself: choose a --out that "
        "is neither the run directory, a folder holding it, nor its draftgen.* files"
    )
    assert (run_dir / "draftgen.sqlite").read_bytes() == before
    assert draftgen("status", str(run_dir)).returncode == 0


@pytest.mark.parametrize("fmt", ["hf", "speculators"])
def test_another_run_s_dataset_is_refused_as_another_run_s_file_is(run_dir, tmp_path, fmt):
    """Issue #41: hf and speculators replaced another run's dataset silently, where specforge
    refused another run's file."""
    theirs = tmp_path / "theirs"
    provenance = {"id": "elsewhere:0", "generation_id": "gen-of-another-run"}
    rows = {"input_ids": [[1, 2, 3]], "loss_mask": [[0, 1, 1]], "draftgen": [provenance]}
    datasets.Dataset.from_dict(rows).save_to_disk(str(theirs))
    before = len(datasets.load_from_disk(str(theirs)))
    refused = draftgen("export", str(run_dir), "--format", fmt, "--out", str(theirs))
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines()[-1] == (
        f"draftgen: --out {theirs} exists and is not an earlier export of this run: choose a new "
        "--out, or pass --force to replace it"
    )
    assert len(datasets.load_from_disk(str(theirs))) == before
    # Its own earlier export is replaced as before.
    mine = tmp_path / "mine"
    assert draftgen("export", str(run_dir), "--format", fmt, "--out", str(mine)).returncode == 0
    again = draftgen("export", str(run_dir), "--format", fmt, "--out", str(mine))
    assert again.returncode == 0, again.stderr

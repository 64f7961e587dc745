"""Opt-in: with torch installed, the exports load through torch's own code as the trainers load
them (``torch.load(weights_only=True)``, ``datasets``' torch formatter, ``torch.from_numpy`` of the
``.npy`` files). torch is not a dependency: without it this module is skipped; the default suite
checks the same files against the formats (tests/outputs/test_speculators_export.py). CI's torch
leg runs it in an env of its own with a CPU torch and ``DRAFTGEN_TORCH_REQUIRED=1``: there a
missing torch fails instead of skipping.
"""

from __future__ import annotations

import os

import datasets
import numpy as np
import pytest
from conftest import draftgen, read_jsonl
from sample_runs import make_run

if os.environ.get("DRAFTGEN_TORCH_REQUIRED"):
    import torch
else:
    torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("torch")
    run_dir = make_run(tmp, rows=12)
    for args in (
        (
            "export",
            "--format",
            "speculators",
            "--out",
            str(tmp / "data"),
            "--draft-vocab-size",
            "64",
        ),
        ("export", "--format", "specforge", "--out", str(tmp / "train.jsonl")),
        ("vocab", "--size", "64", "--out", str(tmp / "vocab")),
    ):
        result = draftgen(args[0], str(run_dir), *args[1:])
        assert result.returncode == 0, result.stderr
    return tmp


def test_the_speculators_dataset_gives_long_tensors_equal_to_the_ids(exports):
    loaded = datasets.load_from_disk(str(exports / "data"))
    reference = {row["id"]: row for row in read_jsonl(exports / "train.jsonl")}
    assert len(loaded) == len(reference)
    for index in range(len(loaded)):
        row = loaded[index]
        want = reference[row["draftgen"]["id"]]
        # ArrowDataset compares its hidden states' token ids (long) with the row's input_ids.
        assert torch.equal(torch.tensor(want["input_ids"], dtype=torch.long), row["input_ids"])
        assert (
            row["loss_mask"].dtype == torch.long and row["loss_mask"].tolist() == want["loss_mask"]
        )


def test_the_vocabulary_files_load_with_torch(exports):
    d2t = torch.from_numpy(np.load(exports / "data" / "d2t.npy"))
    t2d = torch.from_numpy(np.load(exports / "data" / "t2d.npy"))
    assert (d2t.dtype, t2d.dtype, d2t.shape[0], int(t2d.sum())) == (torch.long, torch.bool, 64, 64)
    specforge = torch.load(exports / "vocab" / "vocab_mapping.pt", weights_only=True)
    assert torch.equal(specforge["d2t"], d2t) and torch.equal(specforge["t2d"], t2d)
    frequencies = torch.load(exports / "data" / "token_freq.pt", weights_only=True)
    torch.save(frequencies, exports / "again.pt")
    assert torch.load(exports / "again.pt", weights_only=True) == frequencies
    assert sum(frequencies.values()) == sum(
        sum(row["loss_mask"]) for row in read_jsonl(exports / "train.jsonl")
    )

"""``--format speculators``: the directory vLLM speculators' ``train.py --data-path`` reads
(c05b95b), checked against what its code expects, without torch: ``datasets.load_from_disk``
with the format ``state.json`` records, the columns and dtypes its ``prepare_data.py`` saves and
its ``ArrowDataset`` reads, the loss mask against the specforge export of the same run, and the
vocabulary files its ``parse_vocab_mappings`` loads (``np.load`` of ``d2t.npy`` / ``t2d.npy``,
``torch.load`` of ``token_freq.pt``).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter

import datasets
import numpy as np
import pyarrow as pa
import pytest
from conftest import draftgen, read_jsonl
from sample_runs import make_run
from test_vocab import torch_load

from draftgen.store.database import Store

DRAFT = 64
TARGET = 163840  # fixture:kimi-k2.5's vocabulary (the tokenizer the run recorded)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return make_run(tmp_path_factory.mktemp("speculators"), rows=12)


@pytest.fixture(scope="module")
def reference(run_dir, tmp_path_factory):
    """The specforge rows of the same run, by id, in export order."""
    path = tmp_path_factory.mktemp("reference") / "train.jsonl"
    result = draftgen("export", str(run_dir), "--format", "specforge", "--out", str(path))
    assert result.returncode == 0, result.stderr
    rows = read_jsonl(path)
    assert len(rows) >= 5 and all(row["verified"] for row in rows)
    return rows


@pytest.fixture(scope="module")
def exported(run_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("out") / "data"
    result = draftgen(
        "export",
        str(run_dir),
        "--format",
        "speculators",
        "--out",
        str(out),
        "--draft-vocab-size",
        str(DRAFT),
    )
    assert result.returncode == 0, result.stderr
    return out, result


@pytest.fixture
def torch_format(monkeypatch):
    """``datasets`` formats ``torch`` with numpy here (torch is not installed): what
    ``TorchFormatter`` turns into tensors, the same arrays and dtypes."""
    from datasets import formatting

    if "torch" in formatting._FORMAT_TYPES:
        return  # torch is installed: the real formatter
    monkeypatch.setitem(formatting._FORMAT_TYPES, "torch", formatting.NumpyFormatter)
    monkeypatch.setitem(formatting._FORMAT_TYPES_ALIASES, "torch", "torch")


def supervised(row: dict) -> list[int]:
    return [i for i, m in zip(row["input_ids"], row["loss_mask"], strict=True) if m]


def test_the_directory_is_what_prepare_data_saves_and_train_reads(exported, reference):
    out, result = exported
    assert sorted(p.name for p in out.iterdir()) == [
        "README.md",
        "d2t.npy",
        "data-00000-of-00001.arrow",
        "dataset_info.json",
        "state.json",
        "t2d.npy",
        "token_freq.pt",
    ]
    assert not list(out.parent.glob(".draftgen-hf-*"))  # no work directory left
    assert result.stdout.splitlines() == [
        f"target vocabulary: {TARGET} ids (the tokenizer fixture:kimi-k2.5); pass --vocab-size "
        "if the model's config.json says otherwise",
        result.stdout.splitlines()[1],
        f"wrote {len(reference)} rows to {out} (with d2t.npy, t2d.npy, token_freq.pt)",
    ]
    tokens = sum(len(supervised(row)) for row in reference)
    assert result.stdout.splitlines()[1].endswith(
        f"of {tokens} generated tokens in {len(reference)} samples"
    )
    assert result.stderr == ""  # no row is longer than 2048 ids


def test_state_json_records_the_torch_format_as_set_format_does(exported):
    out, _ = exported
    state = json.loads((out / "state.json").read_text(encoding="utf-8"))
    assert state["_format_type"] == "torch"
    assert (state["_format_columns"], state["_format_kwargs"], state["_output_all_columns"]) == (
        None,
        {},
        False,
    )
    assert state["_data_files"] == [{"filename": "data-00000-of-00001.arrow"}]
    from datasets import formatting

    if "torch" not in formatting._FORMAT_TYPES:  # load_from_disk applies it: torch is needed
        with pytest.raises(ValueError, match="PyTorch needs to be installed"):
            datasets.load_from_disk(str(out))


def test_rows_load_with_the_columns_and_dtypes_arrow_dataset_reads(
    exported, reference, run_dir, torch_format
):
    out, _ = exported
    loaded = datasets.load_from_disk(str(out))
    assert loaded.format["type"] == "torch"
    assert loaded.column_names == ["input_ids", "loss_mask", "seq_len", "draftgen"]
    schema = loaded.data.schema
    assert schema.field("input_ids").type == pa.list_(pa.int64())
    assert schema.field("loss_mask").type == pa.list_(pa.int64())
    assert schema.field("seq_len").type == pa.int64()
    # The order prepare_data.py gives (a seeded shuffle); train.py validates on the last rows.
    order = np.random.default_rng(0).permutation(len(reference))
    assert [loaded[i]["draftgen"]["id"] for i in range(len(loaded))] == [
        reference[i]["id"] for i in order
    ]
    by_id = {row["id"]: row for row in reference}
    with Store(run_dir, create=False) as store:
        settings = store.settings.meta("settings")
    digest = hashlib.sha256(settings.encode()).hexdigest()
    for index in range(len(loaded)):
        row = loaded[index]  # what ArrowDataset's self.data[index] gives
        want = by_id[row["draftgen"]["id"]]
        # numpy arrays here, tensors with torch: int64 either way
        assert np.asarray(row["input_ids"]).dtype == np.asarray(row["loss_mask"]).dtype == np.int64
        assert row["input_ids"].tolist() == want["input_ids"]
        assert row["seq_len"] == len(want["input_ids"]) == len(row["loss_mask"])
        # 1 exactly on the assistant's span: the specforge export's mask, a run of 0s then 1s.
        mask = row["loss_mask"].tolist()
        assert mask == want["loss_mask"]
        generated = sum(mask)
        assert generated > 0 and mask == [0] * (len(mask) - generated) + [1] * generated
        assert row["draftgen"] == {
            "id": want["id"],
            "verified": True,
            "verify_reason": want["verify_reason"],
            "finish_reason": want["finish_reason"],
            "provider": want["provider"],
            "generation_id": want["generation_id"],
            "id_source": want["id_source"],
            "settings_digest": digest,
            "simulated": True,  # the run was answered by draftgen simulate
        }
    # ArrowDataset's lengths for its batch sampler: the seq_len column, unformatted.
    lengths = list(loaded.with_format(None)["seq_len"])
    assert sorted(lengths) == sorted(len(row["input_ids"]) for row in reference)


def test_vocabulary_files_load_as_parse_vocab_mappings_and_prepare_data_write_them(
    exported, reference
):
    out, _ = exported
    d2t, t2d = np.load(out / "d2t.npy"), np.load(out / "t2d.npy")
    assert isinstance(d2t, np.ndarray) and isinstance(t2d, np.ndarray)  # not an NpzFile
    assert (d2t.dtype, d2t.shape) == (np.int64, (DRAFT,))
    assert (t2d.dtype, t2d.shape) == (np.bool_, (TARGET,))
    counts = Counter(token for row in reference for token in supervised(row))
    # speculators' build_vocab_mappings_from_distribution (SpecForge's rule, ties to the lower
    # id), padded with the lowest unseen ids when fewer were generated.
    chosen = sorted(counts, key=lambda token: (-counts[token], token))[:DRAFT]
    chosen += [token for token in range(DRAFT) if token not in chosen][: DRAFT - len(chosen)]
    used = sorted(chosen)
    assert (np.arange(DRAFT) + d2t).tolist() == used
    assert np.flatnonzero(t2d).tolist() == used and int(t2d.sum()) == DRAFT
    # token_freq.pt: torch.save({id: count}) of the rows' supervised tokens, Python ints.
    frequencies = torch_load(out / "token_freq.pt")
    assert frequencies == dict(sorted(counts.items()))
    assert all(type(k) is int and type(v) is int for k, v in frequencies.items())


def test_the_card_says_how_to_train_and_that_the_data_is_synthetic(exported, reference):
    out, _ = exported
    card = (out / "README.md").read_text(encoding="utf-8")
    meta = json.loads(card.splitlines()[1].removeprefix("draftgen: "))
    assert (meta["format"], meta["rows"]) == ("speculators", len(reference))
    assert meta["simulated"] is True
    assert "**Synthetic data**: the completions were made by the draftgen simulator at" in card
    assert f"python scripts/train.py --data-path data --verifier-name-or-path {meta['model']}" in (
        card
    )
    assert f"`d2t.npy` maps {DRAFT} draft ids into the target vocabulary of {TARGET} ids" in card
    assert f"- rows in this dataset: {len(reference)}" in card
    info = json.loads((out / "dataset_info.json").read_text(encoding="utf-8"))
    assert json.loads(info["description"]) == meta


def test_the_vocabulary_matches_draftgen_vocab_for_speculators(exported, run_dir, tmp_path):
    out, _ = exported
    vocab = tmp_path / "vocab"
    result = draftgen(
        "vocab", str(run_dir), "--size", str(DRAFT), "--out", str(vocab), "--for", "speculators"
    )
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in vocab.iterdir()) == [
        "d2t.npy",
        "t2d.npy",
        "vocab.json",
        "vocab_mapping.npz",
    ]
    for name in ("d2t.npy", "t2d.npy"):
        assert (vocab / name).read_bytes() == (out / name).read_bytes()


def test_a_hidden_states_directory_is_not_replaced_without_force(run_dir, tmp_path):
    out = tmp_path / "data"
    args = ["export", str(run_dir), "--format", "speculators", "--out", str(out)]
    assert draftgen(*args, "--vocab-size", str(TARGET)).returncode == 0
    (out / "hidden_states").mkdir()
    (out / "hidden_states" / "hs_0.safetensors").write_bytes(b"kept")
    refused = draftgen(*args)
    assert refused.returncode == 2
    assert refused.stderr == (
        f"draftgen: {out} holds hidden_states/ (speculators' hidden states of its rows), which "
        "replacing it would delete; choose a new --out, or pass --force to replace it\n"
    )
    assert (out / "hidden_states" / "hs_0.safetensors").read_bytes() == b"kept"
    forced = draftgen(*args, "--force")
    assert forced.returncode == 0, forced.stderr
    assert not (out / "hidden_states").exists()


def test_vocabulary_sizes_are_checked_before_anything_is_written(run_dir, tmp_path):
    out = tmp_path / "data"
    args = ["export", str(run_dir), "--format", "speculators", "--out", str(out)]
    large = draftgen(*args, "--draft-vocab-size", "2000", "--vocab-size", "1000")
    assert large.returncode == 2
    assert large.stderr == (
        "draftgen: --draft-vocab-size 2000 is larger than the target vocabulary (1000 ids)\n"
    )
    small = draftgen(*args, "--draft-vocab-size", "8", "--vocab-size", "1000")
    assert small.returncode == 2
    assert "is outside the target vocabulary of 1000 ids" in small.stderr
    assert "--vocab-size" in small.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no work directory left behind


@pytest.mark.parametrize("fmt", ["hf", "speculators"])
def test_a_run_without_rows_exports_an_empty_dataset_that_loads(tmp_path, fmt, torch_format):
    Store(tmp_path / "run").close()
    out = tmp_path / "data"
    result = draftgen(
        "export", str(tmp_path / "run"), "--format", fmt, "--out", str(out), "--vocab-size", "40000"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1].startswith(f"wrote 0 rows to {out}")
    loaded = datasets.load_from_disk(str(out))
    assert len(loaded) == 0 and "draftgen" in loaded.column_names

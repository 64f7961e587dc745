"""``draftgen vocab``: SpecForge's draft-vocabulary rule, its files, and torch.save's layout.

torch is not installed here, so the ``.pt`` file is read the way ``torch.load(weights_only=True)``
reads one: the zip records, a restricted unpickler allowing only the globals torch allows, and
storages by persistent id.
"""

from __future__ import annotations

import pickle
import zipfile
from collections import Counter

import numpy as np
import orjson
import pytest
from conftest import draftgen, read_jsonl
from sample_runs import make_run

from draftgen.outputs.vocab import VocabError, build_mapping, write_mapping, write_torch_tensors

STORAGE_DTYPES = {"LongStorage": np.int64, "BoolStorage": np.bool_}


def torch_load(path) -> dict:
    """What torch.load returns for a dict of 1-d tensors, as numpy arrays."""
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
        prefix = names[0].split("/")[0]
        assert all(name.startswith(prefix + "/") for name in names)
        assert archive.read(f"{prefix}/version") == b"3\n"
        assert archive.read(f"{prefix}/byteorder") == b"little"
        for info in archive.infolist():
            assert info.compress_type == zipfile.ZIP_STORED
            start = info.header_offset + 30 + len(info.filename) + len(info.extra)
            assert start % 64 == 0, info.filename  # torch aligns every record to 64 bytes

        class Unpickler(pickle.Unpickler):
            def find_class(self, module, name):
                if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
                    return rebuild
                if module == "torch" and name in STORAGE_DTYPES:
                    return name
                if (module, name) == ("collections", "OrderedDict"):
                    import collections

                    return collections.OrderedDict
                raise pickle.UnpicklingError(f"weights_only refuses {module}.{name}")

            def persistent_load(self, pid):
                kind, storage, key, location, numel = pid
                assert (kind, location) == ("storage", "cpu")
                data = np.frombuffer(archive.read(f"{prefix}/data/{key}"), STORAGE_DTYPES[storage])
                assert len(data) == numel
                return data

        def rebuild(storage, offset, size, stride, requires_grad, hooks):
            assert (offset, stride, requires_grad, len(hooks)) == (0, (1,), False, 0)
            return storage[: size[0]].copy()

        import io

        return Unpickler(io.BytesIO(archive.read(f"{prefix}/data.pkl"))).load()


def test_specforge_rule_pads_with_low_ids_and_offsets_d2t():
    # 7 seen twice, 3 and 9 once, 100 four times: top 3 by count are 100, 7 and (tie) 3 before 9.
    mapping = build_mapping(Counter({9: 1, 100: 4, 7: 2, 3: 1}), 3, 128)
    assert mapping.used_ids.tolist() == [3, 7, 100]
    assert mapping.d2t.tolist() == [3, 6, 98]  # target id of draft id i is i + d2t[i]
    assert np.flatnonzero(mapping.t2d).tolist() == [3, 7, 100] and len(mapping.t2d) == 128
    assert mapping.coverage == pytest.approx(7 / 8)
    # Fewer distinct tokens than the draft size: the lowest unseen ids fill up, at count 0.
    padded = build_mapping(Counter({5: 3, 1: 1}), 4, 16)
    assert padded.used_ids.tolist() == [0, 1, 2, 5]
    assert padded.d2t.tolist() == [0, 0, 0, 2]


def test_sizes_are_checked():
    with pytest.raises(VocabError, match=r"--size 20 is larger than the target vocabulary \(16"):
        build_mapping(Counter({1: 1}), 20, 16)
    with pytest.raises(VocabError, match="token id 300 is outside the target vocabulary of 256"):
        build_mapping(Counter({1: 1, 300: 2}), 2, 256)


def test_torch_layout_round_trips(tmp_path):
    d2t = np.array([0, 5, -1, 2**40], dtype=np.int64)
    t2d = np.array([True, False, True], dtype=bool)
    write_torch_tensors(tmp_path / "m.pt", {"d2t": d2t, "t2d": t2d})
    loaded = torch_load(tmp_path / "m.pt")
    assert list(loaded) == ["d2t", "t2d"]
    assert loaded["d2t"].dtype == np.int64 and loaded["d2t"].tolist() == d2t.tolist()
    assert loaded["t2d"].dtype == np.bool_ and loaded["t2d"].tolist() == t2d.tolist()
    with pytest.raises(ValueError, match="only 1-d int64 or bool arrays"):
        write_torch_tensors(tmp_path / "x.pt", {"a": np.zeros(2, dtype=np.float32)})


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return make_run(tmp_path_factory.mktemp("vocab"), rows=30)


def test_vocab_counts_generated_tokens_of_the_verified_export(run_dir, tmp_path):
    export_path = tmp_path / "train.jsonl"
    assert (
        draftgen(
            "export", str(run_dir), "--format", "specforge", "--out", str(export_path)
        ).returncode
        == 0
    )
    rows = read_jsonl(export_path)
    expected = Counter()
    for row in rows:
        expected.update(i for i, m in zip(row["input_ids"], row["loss_mask"], strict=True) if m)
    out = tmp_path / "vocab"
    result = draftgen("vocab", str(run_dir), "--size", "64", "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert "target vocabulary: 163840 ids (the tokenizer fixture:kimi-k2.5)" in result.stdout
    summary = orjson.loads((out / "vocab.json").read_bytes())
    assert summary["samples"] == len(rows)
    assert summary["token_frequencies"] == {str(k): v for k, v in sorted(expected.items())}
    assert summary["supervised_tokens"] == sum(expected.values())
    assert (summary["draft_vocab_size"], summary["target_vocab_size"]) == (64, 163840)
    top = sorted(expected.items(), key=lambda kv: (-kv[1], kv[0]))[:64]
    used = sorted(token for token, _ in top)
    assert summary["used_ids"] == used
    assert summary["d2t"] == [token - i for i, token in enumerate(used)]
    assert summary["coverage"] == pytest.approx(
        sum(c for _, c in top) / sum(expected.values()), abs=1e-6
    )
    npz = np.load(out / "vocab_mapping.npz")
    assert npz["d2t"].tolist() == summary["d2t"]
    assert np.flatnonzero(npz["t2d"]).tolist() == used and len(npz["t2d"]) == 163840
    pt = torch_load(out / "vocab_mapping.pt")
    assert pt["d2t"].tolist() == summary["d2t"] and pt["t2d"].tolist() == npz["t2d"].tolist()
    # The draft id -> target id map SpecForge applies: i + d2t[i].
    assert (np.arange(64) + pt["d2t"]).tolist() == used


def test_vocab_size_flag_and_unverified_samples(run_dir, tmp_path):
    small = draftgen(
        "vocab", str(run_dir), "--size", "8", "--vocab-size", "1000", "--out", str(tmp_path / "v")
    )
    assert small.returncode == 2
    assert "is outside the target vocabulary of 1000 ids" in small.stderr
    assert "--vocab-size" in small.stderr
    every = draftgen(
        "vocab",
        str(run_dir),
        "--size",
        "8",
        "--vocab-size",
        "200000",
        "--include-unverified",
        "--out",
        str(tmp_path / "all"),
    )
    assert every.returncode == 0, every.stderr
    summary = orjson.loads((tmp_path / "all" / "vocab.json").read_bytes())
    rows = read_jsonl_all(run_dir, tmp_path)
    assert summary["samples"] == len(rows) and summary["target_vocab_size"] == 200000


def read_jsonl_all(run_dir, tmp_path):
    path = tmp_path / "all.jsonl"
    assert (
        draftgen("export", str(run_dir), "--out", str(path), "--include-unverified").returncode == 0
    )
    return read_jsonl(path)


def test_a_run_without_samples_is_refused(tmp_path):
    from draftgen.store.database import Store

    Store(tmp_path / "empty").close()
    result = draftgen(
        "vocab", str(tmp_path / "empty"), "--vocab-size", "100", "--out", str(tmp_path / "v")
    )
    assert result.returncode == 2
    assert "has no exportable samples to count" in result.stderr


def test_write_mapping_replaces_files(tmp_path):
    mapping = build_mapping(Counter({1: 2, 2: 1}), 2, 4, samples=1)
    first = write_mapping(mapping, tmp_path)
    again = write_mapping(build_mapping(Counter({3: 5}), 2, 4, samples=1), tmp_path)
    assert first == again and not list(tmp_path.glob("*.partial"))
    assert orjson.loads((tmp_path / "vocab.json").read_bytes())["used_ids"] == [0, 3]

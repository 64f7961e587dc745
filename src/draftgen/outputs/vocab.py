"""Draft vocabulary: the N target ids most generated, and the d2t / t2d maps between them.

Counted where ``loss_mask == 1`` over the samples an export would hold, and chosen by SpecForge's
rule (vLLM speculators' is the same), so a drafter trained elsewhere on the same rows gets the same
map. Written framework-neutral (JSON and ``.npz``) and as each trainer loads it: SpecForge's
``torch.save`` file, speculators' ``d2t.npy`` / ``t2d.npy`` (and ``token_freq.pt``), built here
without torch.
"""

from __future__ import annotations

import os
import pickle
import struct
import zipfile
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson

from draftgen.errors import DraftgenError
from draftgen.outputs import VOCAB_TRAINERS
from draftgen.outputs.stop_signals import STOP_SIGNALS
from draftgen.store.database import Store

JSON_NAME = "vocab.json"
NPZ_NAME = "vocab_mapping.npz"
TORCH_NAME = "vocab_mapping.pt"  # SpecForge's model.vocab_mapping_path
D2T_NAME = "d2t.npy"  # vLLM speculators: train.py loads DATA_PATH/d2t.npy and t2d.npy
T2D_NAME = "t2d.npy"
TOKEN_FREQ_NAME = "token_freq.pt"  # speculators' prepare_data.py: {target id: count}
TRAINERS = VOCAB_TRAINERS  # whose files ``write_mapping`` writes; both by default


class VocabError(DraftgenError, ValueError):
    """The vocabulary cannot be built as asked; the message says what to do."""


@dataclass
class VocabMapping:
    used_ids: np.ndarray  # int64 [draft]: the chosen target ids, ascending
    d2t: np.ndarray  # int64 [draft]: target id of draft id i is i + d2t[i]
    t2d: np.ndarray  # bool [target]: whether a target id is in the draft vocabulary
    frequencies: Counter  # target id -> count over loss-masked positions
    samples: int

    @property
    def supervised_tokens(self) -> int:
        return sum(self.frequencies.values())

    @property
    def coverage(self) -> float:
        """Share of the supervised tokens the draft vocabulary can express."""
        total = self.supervised_tokens
        covered = sum(self.frequencies.get(int(i), 0) for i in self.used_ids)
        return covered / total if total else 0.0


class SupervisedCounts:
    """Token frequencies at loss_mask == 1 (the generated ids), a sample at a time: a writer
    counts the rows it writes in the same pass, so the vocabulary is that of the rows written."""

    def __init__(self) -> None:
        self._counts = np.zeros(0, dtype=np.int64)  # index: target id
        self.samples = 0

    def add(self, ids, prompt_len: int) -> None:
        """One sample: its ids (a list, an ``array("i")`` or a numpy array) and prompt length."""
        generated = np.asarray(ids, dtype=np.int64)[prompt_len:]
        self.samples += 1
        if not len(generated):
            return
        low, high = int(generated.min()), int(generated.max())
        if low < 0:
            raise VocabError(f"token id {low} is outside every vocabulary (a negative id)")
        if high >= len(self._counts):  # grown by doubling: a run's ids reach the top quickly
            grown = np.zeros(max(high + 1, 2 * len(self._counts)), dtype=np.int64)
            grown[: len(self._counts)] = self._counts
            self._counts = grown
        np.add.at(self._counts, generated, 1)

    def frequencies(self) -> Counter:
        """Target id -> count, for the ids generated at least once."""
        seen = np.flatnonzero(self._counts)
        return Counter(dict(zip(seen.tolist(), self._counts[seen].tolist(), strict=True)))


def count_supervised(rows: Iterable[dict]) -> tuple[Counter, int]:
    """Token frequencies at loss_mask == 1 (the generated ids) and the number of samples."""
    counts = SupervisedCounts()
    for row in rows:
        counts.add(row["input_ids"], row["prompt_len"])
    return counts.frequencies(), counts.samples


def build_mapping(
    frequencies: Counter, draft_size: int, target_size: int, samples: int = 0
) -> VocabMapping:
    """SpecForge's ``process_token_dict_to_mappings``: pad with the lowest unseen ids when fewer
    than ``draft_size`` were seen, take the most frequent, sort them, d2t as offsets.

    SpecForge breaks frequency ties by the order tokens were first counted; here the lower id
    wins, so the map does not depend on row order.
    """
    check_sizes(draft_size, target_size)
    outside = [token for token in frequencies if not 0 <= token < target_size]
    if outside:
        raise VocabError(
            f"token id {max(outside)} is outside the target vocabulary of {target_size} ids; "
            "pass the model's vocab_size (its config.json) with --vocab-size"
        )
    candidates = dict(frequencies)
    for token in range(draft_size):
        if len(candidates) >= draft_size:
            break
        candidates.setdefault(token, 0)
    ranked = sorted(candidates.items(), key=lambda item: (-item[1], item[0]))[:draft_size]
    used = np.array(sorted(token for token, _ in ranked), dtype=np.int64)
    d2t = used - np.arange(len(used), dtype=np.int64)
    t2d = np.zeros(target_size, dtype=bool)
    t2d[used] = True
    return VocabMapping(used, d2t, t2d, Counter(frequencies), samples)


def check_sizes(draft_size: int, target_size: int, flag: str = "--size") -> None:
    """A draft vocabulary of ``draft_size`` can be taken from ``target_size`` ids (``flag``: the
    option the draft size came from, for the message)."""
    if draft_size < 1:
        raise VocabError(f"{flag} {draft_size} is not a positive number of tokens")
    if draft_size > target_size:
        raise VocabError(
            f"{flag} {draft_size} is larger than the target vocabulary ({target_size} ids)"
        )


def build_from_store(
    store: Store, draft_size: int, target_size: int, include_unverified: bool = False
) -> VocabMapping:
    frequencies, samples = count_supervised(store.samples.export_samples(include_unverified))
    if not samples:
        raise VocabError(
            f"{store.run_dir} has no exportable samples to count; run it first "
            "(or pass --include-unverified)"
        )
    return build_mapping(frequencies, draft_size, target_size, samples)


def target_vocab_size(store: Store) -> int:
    """The vocabulary size of the tokenizer the run recorded (added tokens included)."""
    from draftgen.tokens.tokenizer import load_tokenizer

    spec = store.settings.meta("tokenizer")
    if not spec:
        raise VocabError(
            f"{store.run_dir} records no tokenizer; pass the target's vocab_size with --vocab-size"
        )
    tokenizer = load_tokenizer(spec)
    return max(len(tokenizer), max(tokenizer.get_vocab().values()) + 1)


def write_mapping(
    mapping: VocabMapping, out: Path, trainers: Iterable[str] = TRAINERS
) -> list[Path]:
    """``vocab.json`` (sizes, d2t, frequencies) and ``vocab_mapping.npz`` (d2t, t2d,
    frequencies), then each of ``trainers``' own files: SpecForge's ``vocab_mapping.pt``
    (``{"d2t": int64, "t2d": bool}``), speculators' ``d2t.npy`` and ``t2d.npy``."""
    trainers = tuple(dict.fromkeys(trainers))
    unknown = [name for name in trainers if name not in TRAINERS]
    if unknown:
        raise VocabError(f"no vocabulary files for {unknown[0]!r}; use {' or '.join(TRAINERS)}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    ids = np.array(sorted(mapping.frequencies), dtype=np.int64)
    counts = np.array([mapping.frequencies[int(i)] for i in ids], dtype=np.int64)
    summary = {
        "draft_vocab_size": len(mapping.used_ids),
        "target_vocab_size": len(mapping.t2d),
        "samples": mapping.samples,
        "supervised_tokens": mapping.supervised_tokens,
        "distinct_tokens": len(mapping.frequencies),
        "coverage": round(mapping.coverage, 6),
        "used_ids": mapping.used_ids.tolist(),
        "d2t": mapping.d2t.tolist(),
        "token_frequencies": {str(int(i)): int(c) for i, c in zip(ids, counts, strict=True)},
    }
    files = {
        out / JSON_NAME: lambda p: p.write_bytes(orjson.dumps(summary, option=orjson.OPT_INDENT_2)),
        out / NPZ_NAME: lambda p: write_npz(p, mapping, ids, counts),
    }
    if "specforge" in trainers:
        files[out / TORCH_NAME] = lambda p: write_specforge_mapping(p, mapping)
    if "speculators" in trainers:
        files[out / D2T_NAME] = lambda p: write_npy(p, mapping.d2t)
        files[out / T2D_NAME] = lambda p: write_npy(p, mapping.t2d)
    with STOP_SIGNALS:
        for path, write in files.items():
            _replace(path, write)
    return list(files)


def write_npz(path: Path, mapping: VocabMapping, ids, counts) -> None:
    with open(path, "wb") as handle:
        np.savez(
            handle,
            d2t=mapping.d2t,
            t2d=mapping.t2d,
            used_ids=mapping.used_ids,
            token_ids=ids,
            token_counts=counts,
        )


def write_specforge_mapping(path: Path, mapping: VocabMapping) -> None:
    """SpecForge's ``vocab_mapping.pt``: ``torch.save({"d2t": d2t, "t2d": t2d})``."""
    write_torch_tensors(path, {"d2t": mapping.d2t, "t2d": mapping.t2d})


def write_speculators_mapping(out: Path, mapping: VocabMapping) -> list[Path]:
    """speculators' ``d2t.npy`` (int64, one per draft id) and ``t2d.npy`` (bool, one per target
    id) in ``out``, as its train.py loads them (``np.load`` then ``torch.from_numpy``)."""
    paths = [Path(out) / D2T_NAME, Path(out) / T2D_NAME]
    write_npy(paths[0], mapping.d2t)
    write_npy(paths[1], mapping.t2d)
    return paths


def write_npy(path: Path, array: np.ndarray) -> None:
    # A file handle: given a name, np.save appends ".npy" to one that lacks it (a .partial).
    with open(path, "wb") as handle:
        np.save(handle, array, allow_pickle=False)


def write_token_frequencies(path: Path, frequencies: Counter) -> None:
    """speculators' ``token_freq.pt``: ``torch.save({target id: count})`` of Python ints, by id
    (its train.py builds d2t / t2d from it when they are missing and --draft-vocab-size is
    given)."""
    table = {int(token): int(frequencies[token]) for token in sorted(frequencies)}
    # torch.save pickles with protocol 2 and a pickler that only adds persistent ids for
    # storages: for a dict of ints that is the standard pickle, and no storage records.
    write_torch_archive(path, pickle.dumps(table, protocol=2), [])


def _replace(path: Path, write) -> None:
    partial = path.with_name(path.name + ".partial")
    try:
        write(partial)
        with STOP_SIGNALS.swap():
            os.replace(partial, path)
    except BaseException:  # a signal too (STOP_SIGNALS): no .partial file is left behind
        partial.unlink(missing_ok=True)
        raise


# -- torch.save without torch ---------------------------------------------------------------------

# The zip layout of torch.save (format version 3): a pickle of the object whose tensors refer to
# storages by persistent id, each storage's raw little-endian bytes in data/<key>, aligned to 64.
TORCH_STORAGES = {np.dtype(np.int64): "LongStorage", np.dtype(np.bool_): "BoolStorage"}
TORCH_ALIGNMENT = 64


def write_torch_tensors(path: Path, tensors: dict[str, np.ndarray]) -> None:
    """Write what ``torch.save({name: torch.tensor(array), ...}, path)`` writes for 1-d CPU
    int64 / bool tensors, loadable with ``torch.load(path, weights_only=True)``."""
    storages = []
    for key, (name, array) in enumerate(tensors.items()):
        if array.dtype not in TORCH_STORAGES or array.ndim != 1:
            raise ValueError(f"{name}: only 1-d int64 or bool arrays are written ({array.dtype})")
        storages.append((name, str(key), array))
    write_torch_archive(path, _tensor_dict_pickle(storages), storages)


def write_torch_archive(
    path: Path, data_pickle: bytes, storages: list[tuple[str, str, np.ndarray]]
) -> None:
    """The zip archive of ``torch.save``: ``data_pickle`` and each storage's bytes."""
    archive = Path(path).name.split(".")[0] or "archive"
    records = [
        ("data.pkl", data_pickle),
        (".format_version", b"1"),
        (".storage_alignment", str(TORCH_ALIGNMENT).encode()),
        ("byteorder", b"little"),
        *(
            (f"data/{key}", array.astype(array.dtype.newbyteorder("<")).tobytes())
            for _, key, array in storages
        ),
        ("version", b"3\n"),
    ]
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as archive_file:
        for name, data in records:
            info = zipfile.ZipInfo(f"{archive}/{name}", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_STORED
            # Pad the local header's extra field so the record's bytes start 64-aligned, as
            # torch's writer does (its reader can then map storages straight from the file).
            offset = archive_file.fp.tell() + 30 + len(info.filename.encode()) + 4
            padding = -offset % TORCH_ALIGNMENT
            info.extra = b"FB" + struct.pack("<H", padding) + b"Z" * padding
            archive_file.writestr(info, data)


def _tensor_dict_pickle(storages: list[tuple[str, str, np.ndarray]]) -> bytes:
    """Protocol-2 pickle of ``{name: torch._utils._rebuild_tensor_v2(storage, 0, (n,), (1,),
    False, OrderedDict())}``, each storage a persistent id ``('storage', torch.XStorage, key,
    'cpu', n)``: the opcodes torch's pickler emits, spelled out because torch is not imported."""

    def text(value: str) -> bytes:
        raw = value.encode()
        return b"X" + struct.pack("<I", len(raw)) + raw  # BINUNICODE

    def integer(value: int) -> bytes:
        return b"J" + struct.pack("<i", value)  # BININT

    out = bytearray(b"\x80\x02}(")  # PROTO 2, EMPTY_DICT, MARK
    for name, key, array in storages:
        numel = len(array)
        out += text(name)
        out += b"ctorch._utils\n_rebuild_tensor_v2\n("  # GLOBAL, MARK (the arguments)
        out += b"(" + text("storage") + f"ctorch\n{TORCH_STORAGES[array.dtype]}\n".encode()
        out += text(key) + text("cpu") + integer(numel) + b"tQ"  # TUPLE, BINPERSID
        out += integer(0)  # storage offset
        out += integer(numel) + b"\x85"  # size (TUPLE1)
        out += integer(1) + b"\x85"  # stride
        out += b"\x89"  # requires_grad = NEWFALSE
        out += b"ccollections\nOrderedDict\n)R"  # backward hooks: OrderedDict()
        out += b"tR"  # TUPLE of the arguments, REDUCE
    out += b"u."  # SETITEMS, STOP
    return bytes(out)

"""Draft vocabulary: the N target ids most generated, and SpecForge's d2t / t2d maps between them.

Counted where ``loss_mask == 1`` over the samples an export would hold, and chosen by SpecForge's
rule, so a drafter trained elsewhere on the same rows gets the same map. Written framework-neutral
(JSON and ``.npz``) and as SpecForge's ``torch.save`` file, built here without torch.
"""

from __future__ import annotations

import os
import struct
import zipfile
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson

from draftgen.errors import DraftgenError
from draftgen.outputs.export import STOP_SIGNALS
from draftgen.store.database import Store

JSON_NAME = "vocab.json"
NPZ_NAME = "vocab_mapping.npz"
TORCH_NAME = "vocab_mapping.pt"
SPECFORGE_DRAFT_VOCAB = 32000


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


def count_supervised(rows: Iterable[dict]) -> tuple[Counter, int]:
    """Token frequencies at loss_mask == 1 (the generated ids) and the number of samples."""
    counts: Counter = Counter()
    samples = 0
    for row in rows:
        counts.update(row["input_ids"][row["prompt_len"] :])
        samples += 1
    return counts, samples


def build_mapping(
    frequencies: Counter, draft_size: int, target_size: int, samples: int = 0
) -> VocabMapping:
    """SpecForge's ``process_token_dict_to_mappings``: pad with the lowest unseen ids when fewer
    than ``draft_size`` were seen, take the most frequent, sort them, d2t as offsets.

    SpecForge breaks frequency ties by the order tokens were first counted; here the lower id
    wins, so the map does not depend on row order.
    """
    if draft_size < 1:
        raise VocabError(f"--size {draft_size} is not a positive number of tokens")
    if draft_size > target_size:
        raise VocabError(
            f"--size {draft_size} is larger than the target vocabulary ({target_size} ids)"
        )
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


def build_from_store(
    store: Store, draft_size: int, target_size: int, include_unverified: bool = False
) -> VocabMapping:
    frequencies, samples = count_supervised(store.export_rows(include_unverified))
    if not samples:
        raise VocabError(
            f"{store.run_dir} has no exportable samples to count; run it first "
            "(or pass --include-unverified)"
        )
    return build_mapping(frequencies, draft_size, target_size, samples)


def target_vocab_size(store: Store) -> int:
    """The vocabulary size of the tokenizer the run recorded (added tokens included)."""
    from draftgen.tokens.tokenizer import load_tokenizer

    spec = store.meta("tokenizer")
    if not spec:
        raise VocabError(
            f"{store.run_dir} records no tokenizer; pass the target's vocab_size with --vocab-size"
        )
    tokenizer = load_tokenizer(spec)
    return max(len(tokenizer), max(tokenizer.get_vocab().values()) + 1)


def write_mapping(mapping: VocabMapping, out: Path) -> list[Path]:
    """``vocab.json`` (sizes, d2t, frequencies), ``vocab_mapping.npz`` (d2t, t2d, frequencies)
    and ``vocab_mapping.pt`` (SpecForge's ``{"d2t": int64, "t2d": bool}``)."""
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
    paths = [out / JSON_NAME, out / NPZ_NAME, out / TORCH_NAME]
    with STOP_SIGNALS:
        _write_files(paths, mapping, summary, ids, counts)
    return paths


def _write_files(paths: list[Path], mapping: VocabMapping, summary: dict, ids, counts) -> None:
    _replace(paths[0], lambda p: p.write_bytes(orjson.dumps(summary, option=orjson.OPT_INDENT_2)))

    def write_npz(path: Path) -> None:
        with open(path, "wb") as handle:
            np.savez(
                handle,
                d2t=mapping.d2t,
                t2d=mapping.t2d,
                used_ids=mapping.used_ids,
                token_ids=ids,
                token_counts=counts,
            )

    _replace(paths[1], write_npz)
    _replace(paths[2], lambda p: write_torch_tensors(p, {"d2t": mapping.d2t, "t2d": mapping.t2d}))


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
    archive = Path(path).name.split(".")[0] or "archive"
    storages = []
    for key, (name, array) in enumerate(tensors.items()):
        if array.dtype not in TORCH_STORAGES or array.ndim != 1:
            raise ValueError(f"{name}: only 1-d int64 or bool arrays are written ({array.dtype})")
        storages.append((name, str(key), array))
    records = [
        ("data.pkl", _tensor_dict_pickle(storages)),
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

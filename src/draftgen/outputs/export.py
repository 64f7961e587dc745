"""Export: stored samples to the files training frameworks read.

``specforge`` is SpecForge's pre-tokenized JSONL (its ``data.prompts_path``): one object per
generated turn with ``input_ids`` and a ``loss_mask`` that is 1 exactly on the generated ids.
``parquet`` and ``hf`` hold the same rows plus ``seq_len`` (what vLLM speculators reads through
``datasets``); ``specforge-text`` is SpecForge's conversations JSONL, re-tokenized by its text path.

``EXPORT_FORMATS`` is the one table of formats (the CLI's choices and help read it): adding one is
adding an entry. Every export carries its provenance (``draftgen.outputs.provenance``): in the
Parquet schema metadata, a ``<out>.meta.json`` sidecar beside a JSONL file, and the ``hf``
dataset's card; the rows themselves are the formats' own, unchanged.

numpy, pyarrow and the model profiles are imported by the functions that use them: the CLI imports
this module (for ``FORMATS``) whatever the command.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson

from draftgen.errors import DraftgenError
from draftgen.outputs.provenance import (
    METADATA_KEY,
    dataset_card,
    metadata_bytes,
    provenance,
    sidecar_path,
)
from draftgen.store.database import Store

_log = logging.getLogger("draftgen.export")
PARQUET_BATCH_ROWS = 1024
# Every JSONL line: numpy arrays serialized from their buffer, and the newline written by orjson.
JSONL_OPTIONS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_APPEND_NEWLINE
# Lines go to the file in writes of this size, not one each (a line of ids is ~20 KB): fewer,
# larger writes cost the file system less (~15% of a JSONL export).
WRITE_BUFFER_BYTES = 1 << 20


class ExportError(DraftgenError, ValueError):
    pass


def export(
    store: Store, fmt: str, out: Path, include_unverified: bool = False, force: bool = False
) -> int:
    """Write the export atomically (a reader never sees half a file); return the rows written.

    An existing file at ``out`` is replaced only if it is an earlier export of this run
    (``is_export_of``) or ``force`` is given.
    """
    if fmt not in EXPORT_FORMATS:
        raise ExportError(f"unknown export format {fmt!r}; use one of {', '.join(FORMATS)}")
    spec = EXPORT_FORMATS[fmt]
    out = Path(out)
    one_file = spec.kind == "file"
    if one_file and out.is_dir():
        raise ExportError(
            f"--out {out} is a directory and --format {fmt} writes one file: name the file, "
            f"e.g. {out / spec.example}"
        )
    if one_file and not force and out.exists() and not is_export_of(store, out, fmt):
        raise ExportError(
            f"--out {out} exists and is not an earlier export of this run: choose a new "
            "--out, or pass --force to replace it"
        )
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ExportError(f"cannot create the directory of --out {out} ({exc.strerror})") from None
    meta = provenance(store, fmt, include_unverified)
    with STOP_SIGNALS:
        written = spec.write(store, out, include_unverified, meta)
        late = STOP_SIGNALS.after_swap
    if late is not None:
        _log.warning(
            "%s came once %s was in place, complete: the export is kept and the command ends "
            "as it would have",
            signal.Signals(late).name,
            out,
        )
    return written


class StopSignals:
    """SIGTERM and SIGHUP during an export raise ``KeyboardInterrupt`` as Ctrl-C does, so the
    cleanup that removes the ``.partial`` file and the ``.draftgen-hf-*`` work directory runs
    for them too (their default would end the process on the spot, leaving both behind).

    Any of the three during ``swap`` (the renames that put a finished export in place) or after
    it is noted, not raised: a previous export is never left half replaced, and an export in
    place is complete, so the command reports it and succeeds (``after_swap`` names the
    signal). Handlers are set only in the main thread (Python's rule) and put back on the way
    out.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        self._saved: dict[int, object] = {}
        self._swapping = False
        self._swapped = False
        self.after_swap: int | None = None  # a signal that came during or after the swap

    def __enter__(self) -> StopSignals:
        self._swapped = False
        self.after_swap = None
        if threading.current_thread() is threading.main_thread():
            for signum in self.SIGNALS:
                self._saved[signum] = signal.signal(signum, self._on_signal)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._saved.items():
            signal.signal(signum, handler)
        self._saved.clear()

    def _on_signal(self, signum: int, frame: object) -> None:
        if self._swapping or self._swapped:
            self.after_swap = signum
            return
        raise KeyboardInterrupt

    @contextlib.contextmanager
    def swap(self):
        if threading.current_thread() is not threading.main_thread():
            yield  # signals are handled in the main thread: nothing to hold off here
            return
        self._swapping = True
        try:
            yield
            self._swapped = True  # the export is in place: what is left is tidying up
        finally:
            self._swapping = False


STOP_SIGNALS = StopSignals()


def specforge_rows(store: Store, include_unverified: bool) -> Iterator[dict]:
    """SpecForge records for ``orjson`` with ``JSONL_OPTIONS``: the ids an int32 array, the mask
    its JSON text made at once (each several times faster than a list of Python ints)."""
    import numpy

    for row in store.export_samples(include_unverified):
        ids = numpy.asarray(row["input_ids"])
        mask = loss_mask(row["prompt_len"], len(ids), off=b"0,", on=b"1,")[:-1]
        yield specforge_row(row, ids, orjson.Fragment(b"[" + mask + b"]"))


def specforge_row(row: dict, ids, mask) -> dict:
    """The record of a row of ``Store.export_samples``, its ids and mask as the writer encodes
    them."""
    return {
        "id": f"{row['source_id']}:{row['turn']}",
        "source_id": row["source_id"],
        "turn": row["turn"],
        "input_ids": ids,
        "loss_mask": mask,
        "verified": row["verified"],
        "verify_reason": row["verify_reason"],
        "finish_reason": row["finish_reason"],
        "provider": row["provider"],
        "generation_id": row["generation_id"],
        "id_source": row["id_source"],
    }


def loss_mask(prompt_len: int, length: int, off: bytes = b"\x00", on: bytes = b"\x01") -> bytes:
    """1 exactly on the generated ids (those after the prompt's): ``off`` for each prompt id,
    then ``on`` for each other one; by default the bytes of an int8 array."""
    return off * prompt_len + on * (length - prompt_len)


# -- parquet / hf ---------------------------------------------------------------------------------


def _arrow():
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:  # a dependency of draftgen; missing only in a broken environment
        raise ExportError(
            "the parquet and hf formats need pyarrow; install it with pip install pyarrow"
        ) from None
    return pyarrow, pyarrow.parquet


def parquet_schema():
    pa, _ = _arrow()
    return pa.schema(
        [
            ("id", pa.string()),
            ("source_id", pa.string()),
            ("turn", pa.int32()),
            ("input_ids", pa.list_(pa.int32())),
            ("loss_mask", pa.list_(pa.int8())),
            ("seq_len", pa.int32()),
            ("verified", pa.bool_()),
            ("verify_reason", pa.string()),
            ("finish_reason", pa.string()),
            ("provider", pa.string()),
            ("generation_id", pa.string()),
            ("id_source", pa.string()),
        ]
    )


def write_parquet(store: Store, path: Path, include_unverified: bool, meta: dict) -> int:
    """One Parquet file, written a batch at a time so memory holds one batch, not the run;
    ``meta`` (the provenance) in its schema metadata under ``draftgen``."""
    _, pq = _arrow()
    schema = parquet_schema().with_metadata({METADATA_KEY: metadata_bytes(meta)})
    written = 0
    with pq.ParquetWriter(str(path), schema) as writer:
        batch: list[dict] = []
        for record in parquet_rows(store, include_unverified):
            batch.append(record)
            if len(batch) >= PARQUET_BATCH_ROWS:
                writer.write_table(arrow_table(batch, schema))
                written += len(batch)
                batch = []
        if batch or not written:  # an empty export is still a readable file with the schema
            writer.write_table(arrow_table(batch, schema))
            written += len(batch)
    return written


def parquet_rows(store: Store, include_unverified: bool) -> Iterator[dict]:
    """SpecForge records with ``seq_len``, their ids and mask numpy arrays."""
    import numpy

    for row in store.export_samples(include_unverified):
        ids = numpy.asarray(row["input_ids"])
        mask = numpy.frombuffer(loss_mask(row["prompt_len"], len(ids)), dtype=numpy.int8)
        record = specforge_row(row, ids, mask)
        record["seq_len"] = len(ids)
        yield record


def arrow_table(records: list[dict], schema):
    """``records`` as a table of ``schema``: a list column is its records' arrays joined into
    one, not built from a Python int for each element (``Table.from_pylist``)."""
    import numpy

    pa, _ = _arrow()
    columns = []
    for field in schema:
        values = [record[field.name] for record in records]
        if pa.types.is_list(field.type):
            offsets = pa.array(numpy.cumsum([0, *map(len, values)]), pa.int32())
            elements = numpy.concatenate(values) if values else []
            column = pa.ListArray.from_arrays(offsets, pa.array(elements, field.type.value_type))
        else:
            column = pa.array(values, field.type)
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=schema)


def write_hf_dataset(store: Store, out: Path, include_unverified: bool, meta: dict) -> int:
    """A ``datasets.save_to_disk`` directory with its card (README.md: what the data is, how it
    was made, ``meta``), swapped into place only once it is complete."""
    try:
        import datasets
    except ImportError:
        raise ExportError(
            "the hf format needs the datasets package; install it with pip install datasets"
        ) from None
    datasets.disable_progress_bars()
    if out.exists() and not _is_saved_dataset(out):
        raise ExportError(
            f"{out} exists and is not a saved dataset; choose a new --out or remove it first"
        )
    work = Path(tempfile.mkdtemp(prefix=".draftgen-hf-", dir=out.parent))
    try:
        parquet = work / "rows.parquet"
        written = write_parquet(store, parquet, include_unverified, meta)
        # cache_dir inside the work directory: nothing is left in ~/.cache afterwards.
        dataset = datasets.Dataset.from_parquet(str(parquet), cache_dir=str(work / "cache"))
        # datasets keeps no schema metadata of its own: the provenance goes in its info too.
        dataset.info.description = metadata_bytes({**meta, "rows": written}).decode()
        staged = work / "dataset"
        dataset.save_to_disk(str(staged))
        del dataset
        (staged / "README.md").write_text(dataset_card(meta, written), encoding="utf-8")
        old = work / "previous"
        with STOP_SIGNALS.swap():
            if out.exists():
                os.replace(out, old)
            os.replace(staged, out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return written


def _is_saved_dataset(path: Path) -> bool:
    return all((path / name).is_file() for name in ("dataset_info.json", "state.json"))


# -- specforge-text -------------------------------------------------------------------------------


def specforge_text_rows(store: Store, include_unverified: bool) -> Iterator[dict]:
    """SpecForge conversations: the messages sent for a turn, then the answer the model gave."""
    from draftgen.profiles import DERIVED_LAYOUT, run_profile_named

    name = store.meta("profile")
    profile = run_profile_named(name, store.meta(DERIVED_LAYOUT)) if name else None
    for stored, verdict in store.export_completions(include_unverified):
        row = {
            "id": f"{stored.source_id}:{stored.turn}",
            "conversations": [*stored.messages, assistant_message(stored.completion, profile)],
        }
        if stored.tools:
            row["tools"] = stored.tools
        row.update(verdict)
        yield row


def assistant_message(completion, profile) -> dict:
    """The answer as an OpenAI-style assistant message, with the provider's text slips undone
    the way reconstruction undoes them: a leaked end-of-turn and an unsplit think block."""
    reasoning = completion.reasoning or ""
    content = completion.content or ""
    if profile is not None:
        from draftgen.profiles import split_reasoning

        # Every end a turn can have (a tool-call turn's too): none of them is the answer.
        content = profile.strip_end_of_turn(content, tool_turn=True)
        if not reasoning and profile.think_end and profile.think_end in content:
            # The text as the model wrote it: split it the way a reasoning parser would.
            opens = content.lstrip().startswith(profile.think_start)
            split, content = split_reasoning(content, "model_opens" if opens else "open", profile)
            reasoning = split or ""
        if profile.segmented is not None:  # Kimi K3: its channels' markup left in the fields
            reasoning, content = profile.segmented.answer(reasoning, content)
    message: dict = {"role": "assistant", "content": content}
    if reasoning:
        message["reasoning_content"] = reasoning
    if completion.tool_calls:
        message["tool_calls"] = completion.tool_calls
    return message


# -- files ----------------------------------------------------------------------------------------


def _write_jsonl(rows, path: Path) -> int:
    written = 0
    with open(path, "wb", buffering=WRITE_BUFFER_BYTES) as handle:
        for row in rows:
            handle.write(orjson.dumps(row, option=JSONL_OPTIONS))
            written += 1
    return written


def _atomic_file(out: Path, write, meta: dict | None = None) -> int:
    """``write(path)`` into a work file that replaces ``out`` once complete; with ``meta``, the
    sidecar ``<out>.meta.json`` (``meta`` and the rows written) too, put in place with it."""
    partial = out.with_name(out.name + ".partial")
    sidecar = sidecar_path(out)
    side_partial = sidecar.with_name(sidecar.name + ".partial")
    work = (partial, side_partial) if meta is not None else (partial,)
    try:
        written = write(partial)
        _fsync(partial)
        if meta is not None:
            side_partial.write_bytes(metadata_bytes({**meta, "rows": written}))
            _fsync(side_partial)
        with STOP_SIGNALS.swap():
            os.replace(partial, out)
            if meta is not None:
                os.replace(side_partial, sidecar)
    except OSError as exc:
        for path in work:
            path.unlink(missing_ok=True)
        if exc.filename not in (*map(str, work), str(out), str(sidecar)):
            raise
        # The work file is ours, not the user's: the error names the path they gave.
        raise ExportError(
            f"cannot write --out {out} ({exc.strerror or exc.__class__.__name__})"
        ) from None
    except BaseException:
        for path in work:
            path.unlink(missing_ok=True)
        raise
    return written


def _fsync(path: Path) -> None:
    with open(path, "rb+") as handle:
        os.fsync(handle.fileno())


# -- the formats ----------------------------------------------------------------------------------


def _specforge(store: Store, out: Path, include_unverified: bool, meta: dict) -> int:
    rows = specforge_rows(store, include_unverified)
    return _atomic_file(out, lambda path: _write_jsonl(rows, path), meta)


def _specforge_text(store: Store, out: Path, include_unverified: bool, meta: dict) -> int:
    rows = specforge_text_rows(store, include_unverified)
    return _atomic_file(out, lambda path: _write_jsonl(rows, path), meta)


def _parquet(store: Store, out: Path, include_unverified: bool, meta: dict) -> int:
    # The provenance is in the file: no sidecar.
    return _atomic_file(out, lambda path: write_parquet(store, path, include_unverified, meta))


@dataclass(frozen=True)
class ExportFormat:
    """One export format: what it writes and how, and its line of ``--format`` help."""

    name: str
    kind: str  # "file" or "directory" (what --out names)
    example: str  # the file name suggested when --out is a directory and a file is wanted
    # (store, out, include_unverified, provenance) -> rows written, atomically
    write: Callable[[Store, Path, bool, dict], int]
    help: str


EXPORT_FORMATS: dict[str, ExportFormat] = {
    spec.name: spec
    for spec in (
        ExportFormat("specforge", "file", "train.jsonl", _specforge, "pre-tokenized JSONL"),
        ExportFormat(
            "specforge-text", "file", "train.jsonl", _specforge_text, "conversations JSONL"
        ),
        ExportFormat("parquet", "file", "train.parquet", _parquet, "one Parquet file"),
        ExportFormat("hf", "directory", "", write_hf_dataset, "a datasets.save_to_disk directory"),
    )
}
FORMATS: tuple[str, ...] = tuple(EXPORT_FORMATS)  # the names, for choices
DEFAULT_FORMAT = "specforge"


def formats_help() -> str:
    """``--format``'s help: each format's line, the default marked."""
    return "; ".join(
        f"{spec.name}: {spec.help}" + (" (default)" if spec.name == DEFAULT_FORMAT else "")
        for spec in EXPORT_FORMATS.values()
    )


# An earlier export is recognised by its first row: this run's id and generation id among the
# first rows of the run in export order (where an earlier export's first row is, unless the run
# has since stored samples that sort before it).
RECOGNISED_ROWS = 1000
FIRST_LINE_BYTES = 64 << 20


def is_export_of(store: Store, path: Path, fmt: str) -> bool:
    """Whether ``path`` is an earlier ``fmt`` export of the run in ``store`` (an empty file, or
    an export with no rows, counts: there is nothing in it to lose)."""
    try:
        if path.stat().st_size == 0:
            return True
        first = _first_parquet_row(path) if fmt == "parquet" else _first_jsonl_row(path)
    except (OSError, ValueError):
        return False
    if first is None:
        return fmt == "parquet"  # the schema and no rows: what an empty export writes
    if not isinstance(first, dict) or not isinstance(first.get("id"), str):
        return False
    wanted = (first["id"], first.get("generation_id"))
    for number, row in enumerate(store.export_samples(True)):
        if number >= RECOGNISED_ROWS:
            break
        row_id = f"{row['source_id']}:{row['turn']}"
        if row_id == wanted[0] and (
            "generation_id" not in first or row["generation_id"] == wanted[1]
        ):
            return True
    return False


def _first_jsonl_row(path: Path):
    with open(path, "rb") as handle:
        line = handle.readline(FIRST_LINE_BYTES)
    return orjson.loads(line)  # orjson.JSONDecodeError is a ValueError


def _first_parquet_row(path: Path) -> dict | None:
    _, pq = _arrow()
    try:
        reader = pq.ParquetFile(str(path))
    except Exception as exc:  # pyarrow's ArrowInvalid: not a Parquet file
        raise ValueError(str(exc)) from None
    names = set(reader.schema_arrow.names)
    if not {"id", "generation_id"} <= names:
        return {}
    for batch in reader.iter_batches(batch_size=1, columns=["id", "generation_id"]):
        if batch.num_rows:
            return batch.to_pylist()[0]
    return None

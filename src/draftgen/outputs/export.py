"""Export: stored samples to the files training frameworks read.

``specforge`` is SpecForge's pre-tokenized JSONL (its ``data.prompts_path``): one object per
generated turn with ``input_ids`` and a ``loss_mask`` that is 1 exactly on the generated ids.
``parquet`` and ``hf`` hold the same rows plus ``seq_len`` (what vLLM speculators reads through
``datasets``); ``specforge-text`` is SpecForge's conversations JSONL, re-tokenized by its text path.

numpy, pyarrow and the model profiles are imported by the functions that use them: the CLI imports
this module (for ``FORMATS``) whatever the command.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import orjson

from draftgen.errors import DraftgenError
from draftgen.store.database import Store

FORMATS = ("specforge", "specforge-text", "parquet", "hf")
PARQUET_BATCH_ROWS = 1024
# Every JSONL line: numpy arrays serialized from their buffer, and the newline written by orjson.
JSONL_OPTIONS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_APPEND_NEWLINE
# Lines go to the file in writes of this size, not one each (a line of ids is ~20 KB): fewer,
# larger writes cost the file system less (~15% of a JSONL export).
WRITE_BUFFER_BYTES = 1 << 20


class ExportError(DraftgenError, ValueError):
    pass


def export(store: Store, fmt: str, out: Path, include_unverified: bool = False) -> int:
    """Write the export atomically (a reader never sees half a file); return the rows written."""
    if fmt not in FORMATS:
        raise ExportError(f"unknown export format {fmt!r}; use one of {', '.join(FORMATS)}")
    out = Path(out)
    if fmt != "hf" and out.is_dir():
        raise ExportError(
            f"--out {out} is a directory and --format {fmt} writes one file: name the file, "
            f"e.g. {out / ('train.parquet' if fmt == 'parquet' else 'train.jsonl')}"
        )
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ExportError(f"cannot create the directory of --out {out} ({exc.strerror})") from None
    if fmt == "parquet":
        return _atomic_file(out, lambda path: write_parquet(store, path, include_unverified))
    if fmt == "hf":
        return write_hf_dataset(store, out, include_unverified)
    if fmt == "specforge-text":
        rows = specforge_text_rows(store, include_unverified)
    else:
        rows = specforge_rows(store, include_unverified)
    return _atomic_file(out, lambda path: _write_jsonl(rows, path))


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


def write_parquet(store: Store, path: Path, include_unverified: bool) -> int:
    """One Parquet file, written a batch at a time so memory holds one batch, not the run."""
    _, pq = _arrow()
    schema = parquet_schema()
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


def write_hf_dataset(store: Store, out: Path, include_unverified: bool) -> int:
    """A ``datasets.save_to_disk`` directory, swapped into place only once it is complete."""
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
        written = write_parquet(store, parquet, include_unverified)
        # cache_dir inside the work directory: nothing is left in ~/.cache afterwards.
        dataset = datasets.Dataset.from_parquet(str(parquet), cache_dir=str(work / "cache"))
        staged = work / "dataset"
        dataset.save_to_disk(str(staged))
        del dataset
        old = work / "previous"
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
    from draftgen.profiles import get_profile

    name = store.meta("profile")
    profile = get_profile(name) if name else None
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


def _atomic_file(out: Path, write) -> int:
    partial = out.with_name(out.name + ".partial")
    try:
        written = write(partial)
        with open(partial, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(partial, out)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return written

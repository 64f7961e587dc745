"""Export: stored samples to the files training frameworks read.

``specforge`` is SpecForge's pre-tokenized JSONL (its ``data.prompts_path``): one object per
generated turn with ``input_ids`` and a ``loss_mask`` that is 1 exactly on the generated ids.
``speculators`` is the directory vLLM speculators' ``train.py --data-path`` reads, as its
``prepare_data.py`` writes it (a torch-format ``save_to_disk`` dataset and the draft vocabulary).
``parquet`` and ``hf`` hold the same rows plus ``seq_len`` for ``datasets``; ``specforge-text`` is
SpecForge's conversations JSONL, re-tokenized by its text path (to other ids: ``TEXT_CAVEAT``).

``EXPORT_FORMATS`` is the one table of formats (the CLI's choices and help read it): adding one is
adding an entry. Every export carries its provenance (``draftgen.outputs.provenance``): in the
Parquet schema metadata, a ``<out>.meta.json`` sidecar beside a JSONL file, and the directory
formats' dataset card; the dataset formats give each row a ``draftgen`` column trainers ignore.

numpy, pyarrow and the model profiles are imported by the functions that use them: the CLI imports
this module (for ``FORMATS``) whatever the command.
"""

from __future__ import annotations

import itertools
import logging
import os
import shutil
import signal
import tempfile
from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from draftgen.errors import DraftgenError
from draftgen.outputs import DRAFT_VOCAB_SIZE
from draftgen.outputs.provenance import (
    METADATA_KEY,
    dataset_card,
    metadata_bytes,
    provenance,
    row_provenance,
    sidecar_path,
)
from draftgen.outputs.stop_signals import STOP_SIGNALS
from draftgen.records import PROOFS
from draftgen.store.database import Store
from draftgen.store.samples import export_filter

if TYPE_CHECKING:
    from draftgen.outputs.vocab import VocabMapping

_log = logging.getLogger("draftgen.export")
PARQUET_BATCH_ROWS = 1024
# Every JSONL line: numpy arrays serialized from their buffer, and the newline written by orjson.
JSONL_OPTIONS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_APPEND_NEWLINE
# Lines go to the file in writes of this size, not one each (a line of ids is ~20 KB): fewer,
# larger writes cost the file system less (~15% of a JSONL export).
WRITE_BUFFER_BYTES = 1 << 20


# Row lengths the export counts rows beyond: SpecForge's data.max_length default (2048), and the
# windows trainers are commonly run with (speculators' --total-seq-len default is 8192).
LENGTH_LIMITS = (2048, 4096, 8192)
# speculators' prepare_data.py shuffles its rows with --seed (default 0) before it saves them, and
# train.py holds out the dataset's last rows for validation: the export shuffles alike.
SPECULATORS_SHUFFLE_SEED = 0
# What the trainers do with rows longer than their window, as their code does it (SpecForge
# a6b6b02's prompt_builder; speculators c05b95b's MultipackDistributedBatchSamplerV2 and CollateFn).
LONG_ROWS = (
    "SpecForge cuts every row at data.max_length (default 2048) without a word, so the end of "
    "those answers is never trained on; speculators' train.py truncates rows longer than "
    "--total-seq-len (default 8192) to it, with a warning"
)


class ExportError(DraftgenError, ValueError):
    pass


@dataclass(frozen=True)
class ExportOptions:
    """What an export is asked for besides its format and path."""

    include_unverified: bool = False
    force: bool = False  # replace what is at --out even if it is not an earlier export of this run
    max_length: int | None = None  # a trainer's length the user names: rows beyond it counted
    # The speculators format's vocabulary: draft ids, and the target's (None: the tokenizer's).
    draft_vocab_size: int = DRAFT_VOCAB_SIZE
    target_vocab_size: int | None = None
    # Only the samples these proofs prove (``records.PROOFS``); None: every proof.
    proofs: tuple[str, ...] | None = None


@dataclass(frozen=True)
class RowLengths:
    """The exported rows' lengths in ids, against the trainers' common limits."""

    rows: int
    longest: int
    over: dict[int, int]  # limit -> rows longer than it, for LENGTH_LIMITS and --max-length
    common: tuple[int, ...] = LENGTH_LIMITS
    trainers: str = LONG_ROWS  # what the trainers do with longer rows


@dataclass
class ExportSummary:
    """What an export wrote, and what a trainer would change in it."""

    rows: int
    lengths: RowLengths | None = None
    # The speculators format: the draft vocabulary written beside the rows, and the target
    # vocabulary size it maps (taken from the run's tokenizer unless given).
    vocab: VocabMapping | None = None
    target_vocab_size: int | None = None
    target_from_tokenizer: bool = False
    caveat: str | None = None  # what to say at every export in this format (EXPORT_FORMATS)
    files: tuple[Path, ...] = ()  # what a directory export holds besides its rows


def export(
    store: Store, fmt: str, out: Path, include_unverified: bool = False, force: bool = False
) -> int:
    """Write the export atomically (a reader never sees half a file); return the rows written.

    An existing file at ``out`` is replaced only if it is an earlier export of this run
    (``is_export_of``) or ``force`` is given.
    """
    return write_export(store, fmt, out, ExportOptions(include_unverified, force)).rows


def write_export(store: Store, fmt: str, out: Path, options: ExportOptions) -> ExportSummary:
    """``export`` with every option, and what it wrote: the rows, their lengths against the
    trainers' limits and, for ``speculators``, the draft vocabulary."""
    include_unverified, force, proofs = options.include_unverified, options.force, options.proofs
    if fmt not in EXPORT_FORMATS:
        raise ExportError(f"unknown export format {fmt!r}; use one of {', '.join(FORMATS)}")
    unknown = [name for name in proofs or () if name not in PROOFS]
    if unknown:
        raise ExportError(f"proofs {unknown[0]!r} is not a proof; use some of {', '.join(PROOFS)}")
    spec = EXPORT_FORMATS[fmt]
    out = Path(out)
    one_file = spec.kind == "file"
    if one_file and out.is_dir():
        raise ExportError(
            f"--out {out} is a directory and --format {fmt} writes one file: name the file, "
            f"e.g. {out / spec.example}"
        )
    _check_not_the_run(store, out)
    # One rule for every format: what is at --out is replaced only if it is an earlier export
    # of this run (another run's dataset is no less someone's data than another run's file).
    if not force and out.exists() and not is_export_of(store, out, fmt):
        raise ExportError(
            f"--out {out} exists and is not an earlier export of this run: choose a new "
            "--out, or pass --force to replace it"
        )
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ExportError(f"cannot create the directory of --out {out} ({exc.strerror})") from None
    meta = provenance(store, fmt, include_unverified, proofs)
    with STOP_SIGNALS:
        summary = spec.write(store, out, options, meta)
        late = STOP_SIGNALS.after_swap
    if late is not None:
        _log.warning(
            "%s came once %s was in place, complete: the export is kept and the command ends "
            "as it would have",
            signal.Signals(late).name,
            out,
        )
    summary.lengths = row_lengths(store, include_unverified, options.max_length, proofs)
    summary.caveat = spec.caveat
    return summary


def row_lengths(
    store: Store,
    include_unverified: bool,
    max_length: int | None,
    proofs: tuple[str, ...] | None = None,
) -> RowLengths:
    """How many of the rows an export holds are longer than each of ``LENGTH_LIMITS`` (and
    ``max_length``): from the stored ids' sizes, without reading the ids."""
    limits = sorted({*LENGTH_LIMITS, *([max_length] if max_length else [])})
    itemsize = array("i").itemsize  # the samples' ids are stored as array("i") bytes
    sql = (
        "SELECT count(*), coalesce(max(n), 0)"
        + "".join(f", coalesce(sum(n > {int(limit)}), 0)" for limit in limits)
        + f" FROM (SELECT length(s.input_ids) / {itemsize} AS n FROM samples s"
        " JOIN completions c ON c.key = s.key" + export_filter(include_unverified, proofs) + ")"
    )
    rows, longest, *over = store.db.execute(sql).fetchone()
    return RowLengths(rows, longest, dict(zip(limits, over, strict=True)))


def specforge_rows(
    store: Store, include_unverified: bool, proofs: tuple[str, ...] | None = None
) -> Iterator[dict]:
    """SpecForge records for ``orjson`` with ``JSONL_OPTIONS``: the ids an int32 array, the mask
    its JSON text made at once (each several times faster than a list of Python ints)."""
    import numpy

    for row in store.samples.export_samples(include_unverified, proofs):
        ids = numpy.asarray(row["input_ids"])
        mask = loss_mask(row["prompt_len"], len(ids), off=b"0,", on=b"1,")[:-1]
        yield specforge_row(row, ids, orjson.Fragment(b"[" + mask + b"]"))


def specforge_row(row: dict, ids, mask) -> dict:
    """The record of a row of ``Store.samples.export_samples``, its ids and mask as the writer
    encodes them."""
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


def row_provenance_type():
    """The ``draftgen`` column's type (``provenance.row_provenance``)."""
    pa, _ = _arrow()
    return pa.struct(
        [
            ("id", pa.string()),
            ("verified", pa.bool_()),
            ("verify_reason", pa.string()),
            ("finish_reason", pa.string()),
            ("provider", pa.string()),
            ("generation_id", pa.string()),
            ("id_source", pa.string()),
            ("settings_digest", pa.string()),
            ("simulated", pa.bool_()),
        ]
    )


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
            (METADATA_KEY, row_provenance_type()),
        ]
    )


def speculators_schema():
    """The columns and types speculators' ``prepare_data.py`` saves (its rows are ``torch.long``
    tensors, which ``datasets`` stores as int64 lists; ``seq_len`` an int), and the
    ``draftgen`` column, which its loaders never read."""
    pa, _ = _arrow()
    return pa.schema(
        [
            ("input_ids", pa.list_(pa.int64())),
            ("loss_mask", pa.list_(pa.int64())),
            ("seq_len", pa.int64()),
            (METADATA_KEY, row_provenance_type()),
        ]
    )


def write_parquet(
    store: Store,
    path: Path,
    include_unverified: bool,
    meta: dict,
    proofs: tuple[str, ...] | None = None,
) -> int:
    """The ``parquet`` format's file (``write_parquet_rows`` of ``parquet_rows``)."""
    rows = parquet_rows(store, include_unverified, meta, proofs)
    return write_parquet_rows(path, rows, parquet_schema(), meta)


def write_parquet_rows(path: Path, records: Iterator[dict], schema, meta: dict) -> int:
    """One Parquet file of ``records`` in ``schema``, written a batch at a time so memory holds
    one batch, not the run; ``meta`` (the provenance) in its schema metadata under
    ``draftgen``."""
    _, pq = _arrow()
    schema = schema.with_metadata({METADATA_KEY: metadata_bytes(meta)})
    written = 0
    with pq.ParquetWriter(str(path), schema) as writer:
        while batch := list(itertools.islice(records, PARQUET_BATCH_ROWS)):
            writer.write_table(arrow_table(batch, schema))
            written += len(batch)
        if not written:  # an empty export is still a readable file with the schema
            writer.write_table(arrow_table([], schema))
    return written


def parquet_rows(
    store: Store, include_unverified: bool, meta: dict, proofs: tuple[str, ...] | None = None
) -> Iterator[dict]:
    """SpecForge records with ``seq_len`` and the ``draftgen`` column, their ids and mask numpy
    arrays."""
    import numpy

    for row in store.samples.export_samples(include_unverified, proofs):
        ids = numpy.asarray(row["input_ids"])
        mask = numpy.frombuffer(loss_mask(row["prompt_len"], len(ids)), dtype=numpy.int8)
        record = specforge_row(row, ids, mask)
        record["seq_len"] = len(ids)
        record[METADATA_KEY] = row_provenance(row, meta)
        yield record


def speculators_rows(
    store: Store,
    include_unverified: bool,
    meta: dict,
    counts,
    proofs: tuple[str, ...] | None = None,
) -> Iterator[dict]:
    """speculators' rows (``input_ids``, ``loss_mask``, ``seq_len``) and the ``draftgen``
    column; each row's generated ids counted into ``counts`` (a ``SupervisedCounts``) as it
    goes, so the vocabulary is that of the rows written."""
    import numpy

    for row in store.samples.export_samples(include_unverified, proofs):
        ids = numpy.asarray(row["input_ids"])
        counts.add(ids, row["prompt_len"])
        yield {
            "input_ids": ids,
            "loss_mask": numpy.frombuffer(loss_mask(row["prompt_len"], len(ids)), numpy.int8),
            "seq_len": len(ids),
            METADATA_KEY: row_provenance(row, meta),
        }


def arrow_table(records: Sequence[dict], schema):
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


HF_COLUMNS = (
    "Each row is one generated turn, pre-tokenized: `input_ids` (the prompt as the chat "
    "template renders it, then the ids generated), `loss_mask` (1 exactly on the generated ids) "
    "and `seq_len`, with `verified` and `verify_reason` saying whether the ids were proven to be "
    "the ones the model generated, and `draftgen`: the row's provenance (settings digest, "
    "provider, generation id, verification reason, simulated or not)."
)
SPECULATORS_COLUMNS = (
    "Each row is one generated turn, pre-tokenized as vLLM speculators' `prepare_data.py` "
    "writes it (torch format, int64): `input_ids` (the prompt as the chat template renders it, "
    "then the ids generated), `loss_mask` (1 exactly on the generated ids) and `seq_len`; "
    "`draftgen` is the row's provenance (settings digest, provider, generation id, verification "
    "reason, simulated or not), which speculators' loaders do not read. The rows are in a fixed "
    f"shuffled order (seed {SPECULATORS_SHUFFLE_SEED}), as `prepare_data.py` shuffles them: "
    "`train.py` holds out the last rows for validation. `d2t.npy` and `t2d.npy` are the draft "
    "vocabulary, `token_freq.pt` the generated tokens' frequencies."
)


def write_hf_dataset(store: Store, out: Path, options: ExportOptions, meta: dict) -> ExportSummary:
    """A ``datasets.save_to_disk`` directory with its card (README.md: what the data is, how it
    was made, ``meta``), swapped into place only once it is complete."""
    usage = [
        "```python",
        "import datasets",
        f'rows = datasets.load_from_disk("{out.name}")',
        "```",
    ]

    def finish(staged: Path, written: int) -> None:
        card = dataset_card(meta, written, HF_COLUMNS, usage)
        (staged / "README.md").write_text(card, encoding="utf-8")

    rows = parquet_rows(store, options.include_unverified, meta, options.proofs)
    written = _save_dataset(out, rows, parquet_schema(), meta, options, finish)
    return ExportSummary(written)


def write_speculators(store: Store, out: Path, options: ExportOptions, meta: dict) -> ExportSummary:
    """vLLM speculators' data directory: the dataset its ``prepare_data.py`` saves (torch
    format, recorded in ``state.json`` as ``set_format("torch")`` records it, without torch
    here), its ``token_freq.pt``, and ``d2t.npy`` / ``t2d.npy`` that its ``train.py`` loads
    from ``--data-path``; with a card (README.md)."""
    from draftgen.outputs import vocab

    target = options.target_vocab_size or vocab.target_vocab_size(store)
    vocab.check_sizes(options.draft_vocab_size, target, "--draft-vocab-size")
    counts = vocab.SupervisedCounts()
    summary = ExportSummary(
        0, target_vocab_size=target, target_from_tokenizer=options.target_vocab_size is None
    )
    usage = [
        "```bash",
        f"python scripts/train.py --data-path {out.name} --verifier-name-or-path "
        f"{meta['model'] or 'MODEL'} ...",
        "```",
        "",
        f"`d2t.npy` maps {options.draft_vocab_size} draft ids into the target vocabulary of "
        f"{target} ids (`t2d.npy`): give `train.py` no `--draft-vocab-size`, or this one.",
    ]

    def finish(staged: Path, written: int) -> None:
        summary.vocab = vocab.build_mapping(
            counts.frequencies(), options.draft_vocab_size, target, counts.samples
        )
        record_torch_format(staged)
        written_files = vocab.write_speculators_mapping(staged, summary.vocab)
        vocab.write_token_frequencies(staged / vocab.TOKEN_FREQ_NAME, summary.vocab.frequencies)
        summary.files = (*written_files, staged / vocab.TOKEN_FREQ_NAME)
        card = dataset_card(meta, written, SPECULATORS_COLUMNS, usage)
        (staged / "README.md").write_text(card, encoding="utf-8")

    rows = speculators_rows(store, options.include_unverified, meta, counts, options.proofs)
    summary.rows = _save_dataset(
        out, rows, speculators_schema(), meta, options, finish, SPECULATORS_SHUFFLE_SEED
    )
    summary.files = tuple(out / path.name for path in summary.files)
    return summary


def record_torch_format(dataset_dir: Path) -> None:
    """Record the torch format in a saved dataset's ``state.json`` as ``set_format("torch")``
    does (``_format_type``; no columns, kwargs or other columns), so ``load_from_disk`` gives
    tensors; ``set_format`` itself would need torch installed."""
    path = dataset_dir / "state.json"
    state = orjson.loads(path.read_bytes())
    state.update(
        _format_type="torch", _format_kwargs={}, _format_columns=None, _output_all_columns=False
    )
    path.write_bytes(orjson.dumps(state, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))


def _save_dataset(
    out: Path,
    records: Iterator[dict],
    schema,
    meta: dict,
    options: ExportOptions,
    finish: Callable[[Path, int], None],
    shuffle_seed: int | None = None,
) -> int:
    """``records`` as a ``datasets.save_to_disk`` directory, ``finish(directory, rows)`` adding
    its other files, swapped into place at ``out`` only once it is complete."""
    try:
        import datasets
    except ImportError:
        raise ExportError(
            f"the {meta['format']} format needs the datasets package; install it with pip "
            "install datasets"
        ) from None
    datasets.disable_progress_bars()
    if (out / "hidden_states").is_dir() and not options.force:
        raise ExportError(
            f"{out} holds hidden_states/ (speculators' hidden states of its rows), which "
            "replacing it would delete; choose a new --out, or pass --force to replace it"
        )
    work = Path(tempfile.mkdtemp(prefix=".draftgen-hf-", dir=out.parent))
    try:
        parquet = work / "rows.parquet"
        written = write_parquet_rows(parquet, records, schema, meta)
        if written:
            # cache_dir inside the work directory: nothing is left in ~/.cache afterwards.
            dataset = datasets.Dataset.from_parquet(str(parquet), cache_dir=str(work / "cache"))
        else:  # datasets' Parquet reader refuses a file without rows (a batch size of 0)
            features = datasets.Features.from_arrow_schema(schema)
            dataset = datasets.Dataset.from_dict({name: [] for name in schema.names}, features)
        if shuffle_seed is not None:
            dataset = dataset.shuffle(
                seed=shuffle_seed, indices_cache_file_name=str(work / "shuffled.arrow")
            )
        # datasets keeps no schema metadata of its own: the provenance goes in its info too.
        dataset.info.description = metadata_bytes({**meta, "rows": written}).decode()
        staged = work / "dataset"
        # One shard at least: datasets saves none for no rows, and cannot load that back.
        dataset.save_to_disk(str(staged), num_shards=None if written else 1)
        del dataset
        finish(staged, written)
        old = work / "previous"
        with STOP_SIGNALS.swap():
            if out.exists():
                os.replace(out, old)
            os.replace(staged, out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return written


def _check_not_the_run(store: Store, out: Path) -> None:
    """Refuse an ``--out`` that --force would make replace the run itself: its directory (or
    one holding it) or one of the store's own files (``draftgen.*`` beside the database)."""
    run_dir, target = store.run_dir.resolve(), out.resolve()
    if run_dir.is_relative_to(target) or (
        target.parent == run_dir and target.name.startswith("draftgen.")
    ):
        raise ExportError(
            f"--out {out} would replace the run in {store.run_dir} itself: choose a --out "
            "that is neither the run directory, a folder holding it, nor its draftgen.* files"
        )


def _is_saved_dataset(path: Path) -> bool:
    return all((path / name).is_file() for name in ("dataset_info.json", "state.json"))


# -- specforge-text -------------------------------------------------------------------------------


def specforge_text_rows(
    store: Store, include_unverified: bool, proofs: tuple[str, ...] | None = None
) -> Iterator[dict]:
    """SpecForge conversations: the messages sent for a turn, then the answer the model gave."""
    from draftgen.profiles import DERIVED_LAYOUT, run_profile_named

    name = store.settings.meta("profile")
    profile = run_profile_named(name, store.settings.meta(DERIVED_LAYOUT)) if name else None
    for stored, verdict in store.samples.export_completions(include_unverified, proofs):
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


def _specforge(store: Store, out: Path, options: ExportOptions, meta: dict) -> ExportSummary:
    rows = specforge_rows(store, options.include_unverified, options.proofs)
    return ExportSummary(_atomic_file(out, lambda path: _write_jsonl(rows, path), meta))


def _specforge_text(store: Store, out: Path, options: ExportOptions, meta: dict) -> ExportSummary:
    rows = specforge_text_rows(store, options.include_unverified, options.proofs)
    return ExportSummary(_atomic_file(out, lambda path: _write_jsonl(rows, path), meta))


def _parquet(store: Store, out: Path, options: ExportOptions, meta: dict) -> ExportSummary:
    # The provenance is in the file: no sidecar.
    def write(path: Path) -> int:
        return write_parquet(store, path, options.include_unverified, meta, options.proofs)

    return ExportSummary(_atomic_file(out, write))


# What SpecForge's text path did to draftgen's specforge-text rows (REFERENCE: SpecForge a6b6b02,
# its preprocess_conversations and template registry): said at every such export.
TEXT_CAVEAT = (
    "specforge-text holds text, not ids: a trainer that re-tokenizes it does not reproduce the "
    "ids draftgen verified. SpecForge's text path (a6b6b02) gave other ids in 47 of 47 rows: it "
    "adds its default system prompt, drops Kimi's reasoning from the supervised span, supervises "
    "Qwen's \\n after <|im_end|> and strips leading newlines. Export --format specforge "
    "(data.prompts_path) or speculators to train on the exact ids"
)


@dataclass(frozen=True)
class ExportFormat:
    """One export format: what it writes and how, its line of ``--format`` help, and what to
    say at every export in it (``caveat``)."""

    name: str
    kind: str  # "file" or "directory" (what --out names)
    example: str  # the file name suggested when --out is a directory and a file is wanted
    # (store, out, options, provenance) -> what was written, atomically
    write: Callable[[Store, Path, ExportOptions, dict], ExportSummary]
    help: str
    caveat: str | None = None


EXPORT_FORMATS: dict[str, ExportFormat] = {
    spec.name: spec
    for spec in (
        ExportFormat("specforge", "file", "train.jsonl", _specforge, "pre-tokenized JSONL"),
        ExportFormat(
            "specforge-text",
            "file",
            "train.jsonl",
            _specforge_text,
            "conversations JSONL (re-tokenized by the trainer: other ids)",
            TEXT_CAVEAT,
        ),
        ExportFormat("parquet", "file", "train.parquet", _parquet, "one Parquet file"),
        ExportFormat("hf", "directory", "", write_hf_dataset, "a datasets.save_to_disk directory"),
        ExportFormat(
            "speculators",
            "directory",
            "",
            write_speculators,
            "vLLM speculators' train.py --data-path directory (dataset, d2t.npy, t2d.npy)",
        ),
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
    an export with no rows, counts: there is nothing in it to lose). A directory format's is a
    saved dataset whose first row's provenance (the ``draftgen`` column) is one of the run's."""
    if EXPORT_FORMATS[fmt].kind != "file":
        return _is_saved_dataset(path) and _is_dataset_of(store, path)
    try:
        if path.stat().st_size == 0:
            return True
        first = _first_parquet_row(path) if fmt == "parquet" else _first_jsonl_row(path)
    except (OSError, ValueError):
        return False
    if first is None:
        return fmt == "parquet"  # the schema and no rows: what an empty export writes
    return _holds_row_of(store, first)


def _is_dataset_of(store: Store, path: Path) -> bool:
    """Read from the dataset's first Arrow file itself: ``datasets.load_from_disk`` would need
    torch for a speculators export (saved with the torch format)."""
    pa, _ = _arrow()
    try:
        files = orjson.loads((path / "state.json").read_bytes())["_data_files"]
        with pa.ipc.open_stream(str(path / files[0]["filename"])) as reader:
            for batch in reader:
                if batch.num_rows:
                    if "draftgen" not in batch.schema.names:
                        return False
                    return _holds_row_of(store, batch.column("draftgen")[0].as_py())
    except Exception:  # anything a foreign directory holds: not this run's export
        return False
    return True  # a dataset of no rows: nothing in it to lose


def _holds_row_of(store: Store, first: object) -> bool:
    """Whether ``first`` (an exported row, or its provenance) names a sample of the run."""
    if not isinstance(first, dict) or not isinstance(first.get("id"), str):
        return False
    wanted = (first["id"], first.get("generation_id"))
    for number, row in enumerate(store.samples.export_samples(True)):
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

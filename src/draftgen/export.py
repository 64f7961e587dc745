"""Export: stored samples to the files training frameworks read.

``specforge`` is SpecForge's pre-tokenized JSONL (its ``data.prompts_path``): one object per
generated turn with ``input_ids`` and a ``loss_mask`` that is 1 exactly on the generated ids.
"""

from __future__ import annotations

import os
from pathlib import Path

import orjson

from draftgen.store import Store

FORMATS = ("specforge",)


class ExportError(ValueError):
    pass


def export(store: Store, fmt: str, out: Path, include_unverified: bool = False) -> int:
    """Write the export atomically (a reader never sees half a file); return the rows written."""
    if fmt not in FORMATS:
        raise ExportError(f"unknown export format {fmt!r}; use one of {', '.join(FORMATS)}")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    written = 0
    with open(partial, "wb") as handle:
        for row in store.export_rows(include_unverified):
            handle.write(orjson.dumps(specforge_row(row)) + b"\n")
            written += 1
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(partial, out)
    return written


def specforge_row(row: dict) -> dict:
    prompt_len, ids = row["prompt_len"], row["input_ids"]
    return {
        "id": f"{row['source_id']}:{row['turn']}",
        "source_id": row["source_id"],
        "turn": row["turn"],
        "input_ids": ids,
        "loss_mask": [0] * prompt_len + [1] * (len(ids) - prompt_len),
        "verified": row["verified"],
        "verify_reason": row["verify_reason"],
        "finish_reason": row["finish_reason"],
        "provider": row["provider"],
        "generation_id": row["generation_id"],
        "id_source": row["id_source"],
    }

"""What every export says of where its rows came from: model, tokenizer, renderer, settings, dates,
counts, cost, draftgen version and whether a simulator made them; each row's own provenance (the
``draftgen`` column of the dataset formats); and the dataset card of the directory formats.

The same dict goes into Parquet's schema metadata (key ``draftgen``), a JSONL export's sidecar
``<out>.meta.json`` and the card's front matter, so a reader checks one shape whatever the format.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from pathlib import Path

import orjson

from draftgen import __version__
from draftgen.redact import usd
from draftgen.store.database import Store

# The Parquet schema metadata key, the card's front matter key, and the dataset formats' column
# of per-row provenance.
METADATA_KEY = "draftgen"
SIDECAR_SUFFIX = ".meta.json"


def provenance(
    store: Store, fmt: str, include_unverified: bool, proofs: tuple[str, ...] | None = None
) -> dict:
    """The provenance of an export of ``store`` in ``fmt`` (its rows counted by the writer);
    ``proofs``: the only proofs its rows hold (None: every one)."""
    raw = store.settings.meta("settings")
    settings = orjson.loads(raw) if raw else {}
    raw = store.settings.meta("sources")
    sources = orjson.loads(raw) if raw else []
    simulator = store.settings.simulated()
    counts = store.tallies.counts()  # what status shows: the run's cost is the same figure
    figures = {key: counts[key] for key in ("samples", "verified", "truncated")}
    first, last = store.db.execute(
        "SELECT min(created_at), max(created_at) FROM completions"
    ).fetchone()
    profile, tokenizer = store.settings.meta("profile"), store.settings.meta("tokenizer")
    return {
        "format": fmt,
        "draftgen_version": __version__,
        "model": settings.get("model"),
        "tokenizer": tokenizer,
        "tokenizer_digest": store.settings.meta("tokenizer_digest"),
        "profile": profile,
        "renderer": f"draftgen's {profile} profile over the chat template of {tokenizer}"
        if profile
        else None,
        "settings": settings,
        "settings_digest": settings_digest(settings),
        # A simulator's completions look real (provider names, ids): this says they are not.
        "simulated": simulator is not None,
        "simulator": simulator,
        "sources": sources,
        "include_unverified": include_unverified,
        "proofs": list(proofs) if proofs is not None else None,
        "verification": figures,
        "verified_share": round(figures["verified"] / figures["samples"], 6)
        if figures["samples"]
        else None,
        "cost_usd": counts["cost"],
        "cost_per_verified_usd": counts["cost_per_verified"],
        "generated_from": _iso(first),
        "generated_to": _iso(last),
        "exported_at": _iso(datetime.now(UTC).timestamp()),
    }


def settings_digest(settings: dict) -> str:
    """SHA-256 of the run's generation settings (sorted-key JSON): every request of a run is
    sent with them (a resume with others is refused), so it identifies what each row asked."""
    return hashlib.sha256(orjson.dumps(settings, option=orjson.OPT_SORT_KEYS)).hexdigest()


def row_provenance(row: dict, meta: dict) -> dict:
    """The ``draftgen`` column of a row of ``Store.samples.export_samples``: what identifies it,
    which trainers ignore (they read ``input_ids``, ``loss_mask`` and ``seq_len``)."""
    return {
        "id": f"{row['source_id']}:{row['turn']}",
        "verified": row["verified"],
        "verify_reason": row["verify_reason"],
        "finish_reason": row["finish_reason"],
        "provider": row["provider"],
        "generation_id": row["generation_id"],
        "id_source": row["id_source"],
        "settings_digest": meta["settings_digest"],
        "simulated": meta["simulated"],
    }


def _iso(moment: float | None) -> str | None:
    if moment is None:
        return None
    return datetime.fromtimestamp(moment, UTC).isoformat(timespec="seconds")


def sidecar_path(out: Path) -> Path:
    """Where a JSONL export's provenance is written: beside it, ``<out>.meta.json``."""
    return out.with_name(out.name + SIDECAR_SUFFIX)


def metadata_bytes(meta: dict) -> bytes:
    return orjson.dumps(meta, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2)


def dataset_card(meta: dict, rows: int, columns: str, usage: list[str]) -> str:
    """A directory export's README.md: what the data is (``columns``: what a row holds), how to
    use it (``usage``: lines), how it was made, its provenance (also as front matter, under
    ``draftgen``) and its counts."""
    figures = meta["verification"]
    settings = ", ".join(f"{k}={v!r}" for k, v in sorted(meta["settings"].items()) if k != "model")
    if meta["simulated"]:
        nature = (
            f"**Synthetic data**: the completions were made by the {meta['simulator']}, not by "
            "the model. Use it to test a pipeline, never to train a draft model."
        )
    else:
        nature = f"Completions generated by `{meta['model']}`."
    sources = ", ".join(f"{s['endpoint']} ({s.get('server', 'unknown')})" for s in meta["sources"])
    kept = "every sample" if meta["include_unverified"] else "verified samples only"
    share = meta["verified_share"]
    return "\n".join(
        [
            "---",
            # JSON is YAML: the front matter needs no YAML writer to be read by one.
            f"{METADATA_KEY}: {orjson.dumps({**meta, 'rows': rows}).decode()}",
            "---",
            "",
            f"# Draft-model training data for {meta['model']}",
            "",
            nature,
            "",
            columns,
            "",
            "## Use",
            "",
            *usage,
            "",
            "## How it was made",
            "",
            f"- draftgen {meta['draftgen_version']}, format `{meta['format']}` ({kept}), "
            f"exported {meta['exported_at']}",
            f"- model `{meta['model']}`, tokenizer `{meta['tokenizer']}` "
            f"(digest `{meta['tokenizer_digest']}`), profile `{meta['profile']}`",
            f"- renderer: {meta['renderer'] or 'not recorded'}",
            f"- generation settings: {settings or 'none recorded'} "
            f"(digest `{meta['settings_digest']}`)",
            f"- data source: {sources or 'not recorded'}",
            f"- generated {meta['generated_from'] or '-'} to {meta['generated_to'] or '-'}",
            f"- cost: {usd(meta['cost_usd'])} ({usd(meta['cost_per_verified_usd'])} per "
            "verified sample)",
            "",
            "## Verification",
            "",
            f"- rows in this dataset: {rows}",
            f"- samples in the run: {figures['samples']}, verified {figures['verified']}, "
            f"truncated {figures['truncated']}",
            f"- verified share: {'-' if share is None else f'{share:.1%}'}",
            "",
        ]
    )

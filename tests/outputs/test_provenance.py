"""Every export says where its rows came from (model, tokenizer digest, profile, renderer, settings
and their digest, dates, cost, counts, draftgen version, simulated or not): a JSONL file's sidecar,
Parquet's schema metadata, the directory formats' card and info; a run made by a simulator says so
in status, the report and every export.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
import time
from datetime import UTC, datetime

import datasets
import pyarrow.parquet as pq
import pytest
from conftest import draftgen, read_jsonl
from sample_runs import TOKENIZER, make_run

import draftgen as package
from draftgen.cli.parser import build_parser, subparsers
from draftgen.outputs.export import EXPORT_FORMATS, FORMATS, formats_help
from draftgen.redact import usd
from draftgen.store.database import Store

SPECFORGE_KEYS = {
    "id",
    "source_id",
    "turn",
    "input_ids",
    "loss_mask",
    "verified",
    "verify_reason",
    "finish_reason",
    "provider",
    "generation_id",
    "id_source",
}


@pytest.fixture(scope="module")
def sim_run(tmp_path_factory):
    """A run against ``draftgen simulate``: the probe knew it for a simulator (meta sources)."""
    return make_run(tmp_path_factory.mktemp("provenance"), rows=12)


def copied(run_dir, tmp_path_factory, name: str, server: str | None, mark: bool):
    path = tmp_path_factory.mktemp(name) / "run"
    shutil.copytree(run_dir, path)
    with Store(path, create=False) as store:
        if server is not None:
            sources = [{**s, "server": server} for s in json.loads(store.settings.meta("sources"))]
            store.settings.set_meta("sources", json.dumps(sources))
        if mark:
            store.settings.mark_simulated()
    return path


@pytest.fixture(scope="module")
def real_run(sim_run, tmp_path_factory):
    """The same run as if a vLLM server had answered it."""
    return copied(sim_run, tmp_path_factory, "real", "vllm", mark=False)


@pytest.fixture(scope="module")
def simulated_run(sim_run, tmp_path_factory):
    """The same run, marked as one the built-in simulator answered."""
    return copied(sim_run, tmp_path_factory, "simulated", None, mark=True)


@pytest.fixture(scope="module")
def resumed_run(sim_run, tmp_path_factory):
    """Begun on the built-in simulator, resumed against a vLLM server."""
    return copied(sim_run, tmp_path_factory, "resumed", "vllm", mark=True)


def iso(moment: float) -> str:
    return datetime.fromtimestamp(moment, UTC).isoformat(timespec="seconds")


def stamped(meta: dict) -> dict:
    """``meta`` without its export time, once that is checked to be now (UTC, to the second)."""
    meta = dict(meta)
    exported = datetime.fromisoformat(meta.pop("exported_at"))
    assert exported.tzinfo == UTC and abs(exported.timestamp() - time.time()) < 120
    return meta


def expected(run_dir, fmt: str, include_unverified: bool = False) -> dict:
    """The provenance an export of ``run_dir`` must carry (but its export time), from the
    store's own records."""
    with Store(run_dir, create=False) as store:
        meta = store.settings.all_meta()
        counts = store.tallies.counts()
    db = sqlite3.connect(run_dir / "draftgen.sqlite")
    first, last = db.execute("SELECT min(created_at), max(created_at) FROM completions").fetchone()
    db.close()
    settings = json.loads(meta["settings"])
    simulator = meta.get("simulated") or next(
        (
            f"draftgen simulator at {s['endpoint']}"
            for s in json.loads(meta["sources"])
            if s["server"] == "simulator"
        ),
        None,
    )
    return {
        "format": fmt,
        "draftgen_version": package.__version__,
        "model": settings["model"],
        "tokenizer": TOKENIZER,
        "tokenizer_digest": meta["tokenizer_digest"],
        "profile": meta["profile"],
        "renderer": f"draftgen's {meta['profile']} profile over the chat template of {TOKENIZER}",
        "settings": settings,
        "settings_digest": hashlib.sha256(
            json.dumps(settings, sort_keys=True, separators=(",", ":")).encode()
        ).hexdigest(),
        "simulated": simulator is not None,
        "simulator": simulator,
        "sources": json.loads(meta["sources"]),
        "include_unverified": include_unverified,
        "proofs": None,  # every proof: no --proof given
        "verification": {k: counts[k] for k in ("samples", "verified", "truncated")},
        "verified_share": round(counts["verified"] / counts["samples"], 6),
        "cost_usd": counts["cost"],
        "cost_per_verified_usd": counts["cost_per_verified"],
        "generated_from": iso(first),
        "generated_to": iso(last),
    }


def export(run_dir, fmt: str, out, *extra: str):
    result = draftgen("export", str(run_dir), "--format", fmt, "--out", str(out), *extra)
    assert result.returncode == 0, result.stderr
    return out


@pytest.mark.parametrize("fmt", ["specforge", "specforge-text"])
def test_a_jsonl_export_has_its_provenance_beside_it(real_run, tmp_path, fmt):
    out = export(real_run, fmt, tmp_path / "train.jsonl")
    rows = read_jsonl(out)
    sidecar = json.loads((tmp_path / "train.jsonl.meta.json").read_text(encoding="utf-8"))
    assert stamped(sidecar) == {**expected(real_run, fmt), "rows": len(rows)}
    assert sidecar["tokenizer_digest"] and sidecar["simulated"] is False
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.jsonl", "train.jsonl.meta.json"]
    if fmt == "specforge":  # SpecForge reads these rows: no field added
        assert all(set(row) == SPECFORGE_KEYS for row in rows)


def test_include_unverified_is_recorded(real_run, tmp_path):
    export(real_run, "specforge", tmp_path / "all.jsonl", "--include-unverified")
    sidecar = json.loads((tmp_path / "all.jsonl.meta.json").read_text(encoding="utf-8"))
    assert sidecar["include_unverified"] is True
    assert sidecar["rows"] == len(read_jsonl(tmp_path / "all.jsonl"))


def test_a_parquet_export_holds_its_provenance_in_the_schema(real_run, tmp_path):
    out = export(real_run, "parquet", tmp_path / "train.parquet")
    metadata = pq.read_schema(out).metadata
    assert stamped(json.loads(metadata[b"draftgen"])) == expected(real_run, "parquet")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.parquet"]  # no sidecar


def test_an_hf_export_has_a_dataset_card_and_its_provenance_in_the_info(real_run, tmp_path):
    out = export(real_run, "hf", tmp_path / "hf")
    rows = len(datasets.load_from_disk(str(out)))
    want = {**expected(real_run, "hf"), "rows": rows}
    card = (out / "README.md").read_text(encoding="utf-8")
    lines = card.splitlines()
    assert lines[0] == "---" and lines[2] == "---"
    assert stamped(json.loads(lines[1].removeprefix("draftgen: "))) == want
    assert f"# Draft-model training data for {want['model']}" in card
    assert f"- rows in this dataset: {rows}" in card
    assert f"- renderer: {want['renderer']}" in card
    assert f"(digest `{want['settings_digest']}`)" in card
    assert f"- generated {want['generated_from']} to {want['generated_to']}" in card
    assert f"- verified share: {want['verified_share']:.1%}" in card
    cost, each = usd(want["cost_usd"]), usd(want["cost_per_verified_usd"])
    assert f"- cost: {cost} ({each} per verified sample)" in card
    figures = want["verification"]
    assert (
        f"- samples in the run: {figures['samples']}, verified {figures['verified']}, "
        f"truncated {figures['truncated']}"
    ) in card
    assert "Synthetic" not in card
    info = json.loads((out / "dataset_info.json").read_text(encoding="utf-8"))
    assert stamped(json.loads(info["description"])) == want


def test_a_simulated_run_says_so_in_status(simulated_run, real_run):
    shown = draftgen("status", str(simulated_run), "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["simulated"] == "built-in simulator"
    text = draftgen("status", str(simulated_run)).stdout.splitlines()
    assert text[1] == "  simulated           yes (built-in simulator): the data is synthetic"
    # A run of real data shows what it always showed: no key, no line.
    real = draftgen("status", str(real_run), "--json")
    assert "simulated" not in json.loads(real.stdout)
    assert "simulated" not in draftgen("status", str(real_run)).stdout


def test_a_simulated_run_says_so_in_the_report(simulated_run, resumed_run, real_run):
    pages = {}
    for run_dir in (simulated_run, resumed_run, real_run):
        result = draftgen("report", str(run_dir))
        assert result.returncode == 0, result.stderr
        report = json.loads((run_dir / "report.json").read_text(encoding="utf-8"))
        simulated = None if run_dir == real_run else "built-in simulator"
        assert report["simulated"] == simulated
        pages[run_dir] = (run_dir / "report.html").read_text(encoding="utf-8")
    assert "These completions are synthetic" in pages[simulated_run]
    # Resumed against a real server: its sources are real, the marker says what is not.
    assert (
        "Part of these completions is synthetic (from the built-in simulator)"
        in (pages[resumed_run])
    )
    assert "synthetic" not in pages[real_run]


def test_a_run_against_draftgen_simulate_is_simulated_in_its_exports(sim_run, tmp_path):
    export(sim_run, "specforge", tmp_path / "train.jsonl")
    meta = json.loads((tmp_path / "train.jsonl.meta.json").read_text(encoding="utf-8"))
    assert meta["simulated"] is True
    assert meta["simulator"].startswith("draftgen simulator at http://127.0.0.1:")
    with Store(sim_run, create=False) as store:
        # Status and the report say so too (issue #41); the meta mark stays the built-in one's.
        assert store.settings.simulated() == meta["simulator"]
        assert store.settings.meta("simulated") is None


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_export_of_a_simulated_run_says_so(simulated_run, tmp_path, fmt):
    directory = EXPORT_FORMATS[fmt].kind == "directory"
    out = export(simulated_run, fmt, tmp_path / ("data" if directory else "train.out"))
    if fmt == "parquet":
        meta = json.loads(pq.read_schema(out).metadata[b"draftgen"])
        rows = pq.read_table(out, columns=["draftgen"]).column("draftgen").to_pylist()
    elif directory:
        meta = json.loads((out / "README.md").read_text(encoding="utf-8").splitlines()[1][10:])
        assert "**Synthetic data**: the completions were made by the built-in simulator" in (
            (out / "README.md").read_text(encoding="utf-8")
        )
        rows = saved_rows(out)
    else:
        meta = json.loads((tmp_path / "train.out.meta.json").read_text(encoding="utf-8"))
        rows = None
    assert (meta["simulated"], meta["simulator"]) == (True, "built-in simulator")
    assert stamped(meta) == {
        **expected(simulated_run, fmt),
        **({"rows": meta["rows"]} if "rows" in meta else {}),
    }
    if rows is not None:  # every row of a dataset format says so too
        assert rows and all(row["simulated"] is True for row in rows)
        assert {row["settings_digest"] for row in rows} == {meta["settings_digest"]}


def saved_rows(out) -> list[dict]:
    """The ``draftgen`` column of a saved dataset, read from its Arrow files (no formatter: the
    speculators format records torch, which is not installed here)."""
    import pyarrow as pa

    state = json.loads((out / "state.json").read_text(encoding="utf-8"))
    rows = []
    for data_file in state["_data_files"]:
        with pa.memory_map(str(out / data_file["filename"])) as source:
            rows += pa.ipc.open_stream(source).read_all().column("draftgen").to_pylist()
    return rows


def test_the_format_table_is_the_one_list_of_formats():
    assert FORMATS == ("specforge", "specforge-text", "parquet", "hf", "speculators")
    # The CLI offers what the table holds, with the table's help.
    fmt = next(
        action
        for action in subparsers(build_parser())["export"]._actions
        if "--format" in action.option_strings
    )
    assert (tuple(fmt.choices), fmt.default, fmt.help) == (FORMATS, "specforge", formats_help())
    assert formats_help() == (
        "specforge: pre-tokenized JSONL (default); specforge-text: conversations JSONL "
        "(re-tokenized by the trainer: other ids); parquet: one Parquet file; hf: a "
        "datasets.save_to_disk directory; speculators: vLLM speculators' train.py --data-path "
        "directory (dataset, d2t.npy, t2d.npy)"
    )
    assert {spec.kind for spec in EXPORT_FORMATS.values()} == {"file", "directory"}
    directories = [name for name, spec in EXPORT_FORMATS.items() if spec.kind == "directory"]
    assert directories == ["hf", "speculators"]
    assert [name for name, spec in EXPORT_FORMATS.items() if spec.caveat] == ["specforge-text"]

"""Simulated runs whose model re-splits (the simulator's ``resplit`` quirk): the text proof holds
samples verified with other ids at an equal count, and the run's estimate of them is within a
factor of two of the simulator's ground truth; the ids proof never holds one; ``--proof`` keeps
only the proofs asked for, in every format."""

from __future__ import annotations

import asyncio
import json
import shutil

import datasets
import pyarrow.parquet as pq
import pytest
from conftest import draftgen, read_jsonl

from draftgen.api import RunDir
from draftgen.run.pipeline import RunOptions, run
from draftgen.simulator import SimConfig, SimulatorThread
from draftgen.store.database import Store

TOKENIZER = "fixture:qwen3"
ROWS = 160
RESPLIT_RATE = 0.3


def simulated(tmp_path, dialect: str, rows: int = ROWS) -> tuple[dict, list[dict]]:
    """A run of ``rows`` prompts against the simulator's ``dialect`` whose model re-splits
    ``RESPLIT_RATE`` of its answers: (ground truth by generation id, every sample exported)."""
    lines = [
        json.dumps({"id": f"r{i}", "messages": [{"role": "user", "content": f"Q{i} — café 🙂"}]})
        for i in range(rows)
    ]
    (tmp_path / "rows.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    config = SimConfig(
        tokenizer=TOKENIZER,
        seed=11,
        min_tokens=20,
        max_tokens=120,
        quirks={"resplit": RESPLIT_RATE},
        dialect=dialect,
    )
    with SimulatorThread(config) as sim:
        options = RunOptions(
            inputs=[str(tmp_path / "rows.jsonl")],
            model="test/model",
            tokenizer=TOKENIZER,
            out=tmp_path / "run",
            base_url=sim.base_url,
            api_key_env="DRAFTGEN_TEST_KEY",
            concurrency=8,
            progress_interval=3600,
            backend=dialect,
            no_calibrate=True,  # its questions would be answers of the truth too
        )
        asyncio.run(run(options))
        truth = dict(sim.truth)
    with Store(tmp_path / "run", create=False) as store:
        exported = list(store.samples.export_rows(include_unverified=True))
    return truth, exported


def generated(truth: dict, row: dict) -> list[int]:
    record = truth[row["generation_id"]]
    return record["prompt_ids"] + record["completion_ids"]


@pytest.fixture(scope="module")
def text_run(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("resplit-text")
    pytest.MonkeyPatch().setenv("DRAFTGEN_TEST_KEY", "sk-test")
    truth, exported = simulated(tmp_path, "openrouter")
    return tmp_path / "run", truth, exported


def test_text_proof_holds_hidden_re_splits_and_the_estimate_is_within_a_factor_of_two(text_run):
    run_dir, truth, exported = text_run
    assert len(exported) == len(truth) == ROWS
    resplit = [r for r in truth.values() if "resplit" in r["quirks"]]
    wrong = [r for r in exported if r["verified"] and r["input_ids"] != generated(truth, r)]
    # Every sample is the text proof's; every wrong verified one is a re-split that kept the
    # count (the simulator's only fault here), and some re-splits changed it and were flagged.
    assert {r["id_source"] for r in exported} == {"text"}
    assert all("resplit" in truth[r["generation_id"]]["quirks"] for r in wrong)
    flagged = [r for r in exported if not r["verified"]]
    assert len(resplit) > 30 and len(wrong) >= 5 and len(flagged) > len(wrong)
    status = RunDir(run_dir).status()
    text = status["proofs"]["text"]
    assert (text["samples"], text["verified"]) == (ROWS, ROWS - len(flagged))
    assert status["proofs"]["ids"] == status["proofs"]["logprobs"] == {"samples": 0, "verified": 0}
    estimate = text["resplits"]
    assert estimate["basis"] == "tokenizer_pairs" and estimate["pairs"]["resplit"] > 100
    assert estimate["count_changed"] == len(flagged)
    assert len(wrong) / 2 <= estimate["estimated_wrong"] <= 2 * len(wrong), (estimate, len(wrong))
    share = estimate["estimated_wrong"] / estimate["verified"]
    assert estimate["estimated_wrong_share"] == pytest.approx(share, abs=0.001)
    # The share of answers with a re-split, estimated, against the truth.
    truth_share = len(resplit) / len(truth)
    assert truth_share / 2 <= estimate["resplit_share"] <= 2 * truth_share


def test_status_prints_the_proofs_and_the_estimate(text_run):
    run_dir, _, _ = text_run
    result = draftgen("status", str(run_dir))
    assert result.returncode == 0, result.stderr
    estimate = RunDir(run_dir).status()["proofs"]["text"]["resplits"]
    lines = result.stdout.split("\n  proofs:\n", 1)[1].splitlines()
    assert lines[0].split()[:3] == ["text", str(ROWS), "verified"]
    assert lines[1] == (
        "      re-splits that keep the count (a count cannot see them): an estimated "
        f"{estimate['estimated_wrong']:g} verified samples "
        f"({estimate['estimated_wrong_share']:.1%}) hold other ids"
    )
    assert lines[2].startswith(
        f"      basis: {estimate['count_changed']} of {estimate['samples']} answers' counts "
        f"differ; {estimate['keeps_count']:.1%} of re-splits keep the count ("
        f"{estimate['pairs']['kept']:,} of {estimate['pairs']['resplit']:,} re-splitting pairs"
    )
    as_json = json.loads(draftgen("status", str(run_dir), "--json").stdout)
    assert as_json["proofs"]["text"]["resplits"] == estimate


def test_the_report_carries_the_proofs(text_run, tmp_path):
    run_dir, _, _ = text_run
    json_path, html_path = RunDir(run_dir).report(tmp_path)
    report = json.loads(json_path.read_text())
    assert report["proofs"] == RunDir(run_dir).status()["proofs"]
    page = html_path.read_text()
    wrong = report["proofs"]["text"]["resplits"]["estimated_wrong"]
    assert f"an estimated {wrong} of the " in page


def test_ids_proof_never_holds_a_re_split_and_grades_the_text_path(tmp_path, monkeypatch):
    monkeypatch.setenv("DRAFTGEN_TEST_KEY", "sk-test")
    truth, exported = simulated(tmp_path, "vllm", rows=80)
    assert len(exported) == len(truth) == 80
    assert {r["id_source"] for r in exported} == {"ids"}
    assert all(r["verified"] and r["input_ids"] == generated(truth, r) for r in exported)
    with Store(tmp_path / "run", create=False) as store:
        checks = dict(store.db.execute("SELECT key, text_check FROM samples"))
    # What the text path would have verified with other ids: the server's ids show each one.
    hidden = [r for r in exported if checks[r["key"]] == "ids_differ"]
    assert hidden and all("resplit" in truth[r["generation_id"]]["quirks"] for r in hidden)
    status = RunDir(tmp_path / "run").status()
    assert status["proofs"]["ids"] == {"samples": 80, "verified": 80}
    assert status["proofs"]["text"]["resplits"]["samples"] == 0


FORMATS = ["specforge", "specforge-text", "parquet", "hf", "speculators"]


@pytest.fixture(scope="module")
def mixed_run(text_run, tmp_path_factory):
    """The text run with a third of its samples made the ids proof as an old store wrote it
    ("server") and a third logprobs."""
    run_dir = tmp_path_factory.mktemp("mixed") / "run"
    shutil.copytree(text_run[0], run_dir)
    with Store(run_dir, create=False) as store:
        store.db.execute("UPDATE samples SET id_source = 'server' WHERE rowid % 3 = 0")
        store.db.execute("UPDATE samples SET id_source = 'logprobs' WHERE rowid % 3 = 1")
        by_proof = {
            proof: {key for (key,) in store.db.execute(sql)}
            for proof, sql in (
                ("ids", "SELECT key FROM samples WHERE verified AND rowid % 3 = 0"),
                ("logprobs", "SELECT key FROM samples WHERE verified AND rowid % 3 = 1"),
                ("text", "SELECT key FROM samples WHERE verified AND rowid % 3 = 2"),
            )
        }
        generation = dict(store.db.execute("SELECT key, generation_id FROM completions"))
    return run_dir, by_proof, generation


def exported_proofs(fmt: str, out) -> list[str]:
    """The id_source of every row of an export in ``fmt`` at ``out``."""
    if fmt in ("specforge", "specforge-text"):
        return [row["id_source"] for row in read_jsonl(out)]
    if fmt == "parquet":
        return [row["draftgen"]["id_source"] for row in pq.read_table(out).to_pylist()]
    # The directory formats' Arrow files, read as they are: the speculators format is saved in
    # torch's format, which a test environment without torch cannot hand out.
    return [
        row["id_source"]
        for path in sorted(out.glob("data-*.arrow"))
        for row in datasets.Dataset.from_file(str(path))["draftgen"]
    ]


@pytest.mark.parametrize("fmt", FORMATS)
def test_export_writes_only_the_proofs_asked_for_in_every_format(mixed_run, tmp_path, fmt):
    run_dir, by_proof, _ = mixed_run
    counts = {}
    for proofs in ("ids,logprobs", "text", None):
        out = tmp_path / f"{fmt}-{proofs}".replace(",", "-")
        extra = ("--proof", proofs) if proofs else ()
        result = draftgen(
            "export", str(run_dir), "--format", fmt, "--out", str(out), "--force", *extra
        )
        assert result.returncode == 0, result.stderr
        found = exported_proofs(fmt, out)
        wanted = proofs.split(",") if proofs else ["ids", "logprobs", "text"]
        assert sorted(found) == sorted(p for p in wanted for _ in by_proof[p]), proofs
        counts[proofs] = len(found)
    assert counts["ids,logprobs"] + counts["text"] == counts[None] > counts["text"] > 0


def test_export_records_the_proofs_and_refuses_unknown_ones(mixed_run, tmp_path):
    run_dir, by_proof, _ = mixed_run
    out = tmp_path / "ids.jsonl"
    result = draftgen("export", str(run_dir), "--out", str(out), "--proof", "ids")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"wrote {len(by_proof['ids'])} rows to {out}")
    sidecar = json.loads((tmp_path / "ids.jsonl.meta.json").read_text())
    assert sidecar["proofs"] == ["ids"]
    result = draftgen("export", str(run_dir), "--out", str(out), "--proof", "ids,server")
    assert result.returncode == 2
    assert (
        "argument --proof: takes ids, logprobs, text, comma-separated (e.g. ids,logprobs), "
        "not 'server'" in result.stderr
    )
    from draftgen.api import ExportOptions
    from draftgen.outputs.export import ExportError

    with pytest.raises(ExportError, match="proofs 'server' is not a proof; use some of ids, "):
        RunDir(run_dir).write_export("specforge", out, ExportOptions(proofs=("server",)))

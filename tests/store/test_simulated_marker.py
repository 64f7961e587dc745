"""A run the built-in simulator answers is marked in its store (meta ``simulated``), the mark
survives a resume and a merge, and a run of real data has none."""

from __future__ import annotations

import asyncio
import dataclasses
import json

from conftest import write_prompts

from draftgen import Run, RunDir, RunOptions
from draftgen.records import Completion
from draftgen.store.database import DB_NAME, SIMULATED, CompletionWriter, Store
from draftgen.store.merge import merge_runs

TOKENIZER = "fixture:qwen3-instruct-2507"


def builtin_options(tmp_path, out: str) -> RunOptions:
    """A run on the built-in simulator (chosen explicitly where the options can say so)."""
    prompts = write_prompts(tmp_path / "p.jsonl", 3, invalid=False)
    chosen = (
        {"simulate": True} if "simulate" in {f.name for f in dataclasses.fields(RunOptions)} else {}
    )
    return RunOptions(
        inputs=[str(prompts)],
        model="m",
        tokenizer=TOKENIZER,
        out=tmp_path / out,
        max_tokens=32,
        **chosen,
    )


def test_a_run_on_the_built_in_simulator_is_marked(tmp_path):
    summary = Run(builtin_options(tmp_path, "run")).execute()
    assert summary.stopped is None
    with Store(tmp_path / "run", create=False) as store:
        assert store.settings.simulated() == "built-in simulator"
        assert store.settings.meta(SIMULATED) == "built-in simulator"
    assert RunDir.open(tmp_path / "run").status()["simulated"] == "built-in simulator"


def test_the_mark_is_set_once_and_only_by_mark_simulated(tmp_path):
    with Store(tmp_path / "run") as store:
        assert store.settings.simulated() is None
        assert "simulated" not in store.tallies.counts()
        store.settings.mark_simulated("draftgen simulator at http://127.0.0.1:1/api/v1")
        store.settings.mark_simulated()  # a later resume does not rewrite what first answered
        assert store.settings.simulated() == "draftgen simulator at http://127.0.0.1:1/api/v1"
        assert store.tallies.counts()["simulated"] == store.settings.simulated()


def test_a_merge_of_runs_one_simulated_is_simulated(tmp_path):
    completion = Completion("g", "p", "m", "", "a", None, "stop", "stop", {})
    for index in (0, 1):
        with Store(tmp_path / f"s{index}") as store:
            store.settings.check_settings({"model": "m"})
            if index == 1:
                store.settings.mark_simulated()
        writer = CompletionWriter(tmp_path / f"s{index}" / DB_NAME)
        key = f"k{index}"
        asyncio.run(writer.add_completion(key, key, 0, b'{"messages": []}', completion, 1, [], 0))
        writer.close()
    merge_runs([tmp_path / "s0", tmp_path / "s1"], tmp_path / "merged")
    with Store(tmp_path / "merged", create=False) as store:
        assert store.settings.simulated() == "built-in simulator"
    merge_runs([tmp_path / "s0"], tmp_path / "real")
    with Store(tmp_path / "real", create=False) as store:
        assert store.settings.simulated() is None
        assert json.loads(store.settings.meta("settings")) == {"model": "m"}


def test_a_standalone_simulator_found_by_the_probe_marks_the_data_as_synthetic(tmp_path):
    """Issue #41: status (text) and the report did not say a run's data came from a `draftgen
    simulate` server (report.json: "simulated": null); only the exports' provenance knew."""
    from draftgen.cli.present import format_status
    from draftgen.outputs.report import build_report

    with Store(tmp_path / "run") as store:
        sources = [{"endpoint": "http://127.0.0.1:9/api/v1", "server": "simulator"}]
        store.settings.set_meta("sources", json.dumps(sources))
        assert store.settings.simulated() == "draftgen simulator at http://127.0.0.1:9/api/v1"
        counts = store.tallies.counts()
        report = build_report(store)
    assert counts["simulated"] == "draftgen simulator at http://127.0.0.1:9/api/v1"
    assert "simulated           yes (draftgen simulator at http://127.0.0.1:9/api/v1)" in (
        format_status(counts, tmp_path / "run")
    )
    assert report["simulated"] == "draftgen simulator at http://127.0.0.1:9/api/v1"

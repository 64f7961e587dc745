"""The library API the CLI is built on: the README's Python example, run as written."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import draftgen
from draftgen.api import Run, RunDir
from draftgen.errors import DraftgenError
from draftgen.inputs.shard import Shard
from draftgen.simulator import SimConfig, SimulatorThread

README = Path(__file__).resolve().parent.parent / "README.md"


def readme_python_example() -> str:
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## From Python") :]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_readme_python_example_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    examples = Path(__file__).resolve().parent.parent / "examples"
    (tmp_path / "examples").symlink_to(examples)
    namespace: dict = {}
    exec(compile(readme_python_example(), "README.md", "exec"), namespace)
    rows = [line for line in (tmp_path / "runs/py/specforge.jsonl").read_text().splitlines()]
    assert rows and len(rows) == namespace["written"]
    status = namespace["status"]
    assert status["completions"] >= len(rows) > 0


def test_every_user_facing_error_is_a_draftgen_error(tmp_path):
    try:
        draftgen.RunDir.open(tmp_path / "nothing")
    except DraftgenError as exc:
        assert "holds no draftgen run" in str(exc)
    else:
        raise AssertionError("opening an empty directory must fail")


# -- every command is one call: estimate, status, cancel and merge, through the API only ----------

TOKENIZER = "fixture:kimi-k2.5"
MODEL = "moonshotai/kimi-k2.5"  # the simulator lists it with prices
PROMPTS = 6


@pytest.fixture(scope="module")
def sim():
    with SimulatorThread(SimConfig(tokenizer=TOKENIZER)) as running:
        yield running


@pytest.fixture(scope="module")
def prompts(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("prompts") / "prompts.jsonl"
    rows = [
        {"id": f"r{i}", "messages": [{"role": "user", "content": f"Explain {i}."}]}
        for i in range(PROMPTS)
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def run_options(sim, prompts: Path, out: Path, **extra) -> draftgen.RunOptions:
    return draftgen.RunOptions(
        inputs=[str(prompts)],
        model=MODEL,
        tokenizer=TOKENIZER,
        out=out,
        base_url=sim.base_url,
        api_key_env="DRAFTGEN_TEST_KEY",
        max_tokens=64,
        **extra,
    )


@pytest.fixture(scope="module")
def shards(sim, prompts, tmp_path_factory) -> list[Path]:
    """Two run directories, shards 0/2 and 1/2 of the prompts, in one folder."""
    folder = tmp_path_factory.mktemp("runs")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DRAFTGEN_TEST_KEY", "k")
        for index in range(2):
            out = folder / f"shard{index}"
            summary = Run(run_options(sim, prompts, out, shard=Shard(index, 2))).execute()
            assert summary.stopped is None
    return [folder / "shard0", folder / "shard1"]


def test_estimate_counts_prices_and_writes_nothing(sim, prompts, tmp_path, monkeypatch):
    monkeypatch.setenv("DRAFTGEN_TEST_KEY", "k")
    out = tmp_path / "never"
    result = Run(run_options(sim, prompts, out, samples=2)).estimate()
    assert (result.rows, result.rejected, result.turns, result.requests) == (PROMPTS, 0, 6, 12)
    assert (result.output_low, result.output_high, result.output_source) == (
        0,
        12 * 64,
        "max_tokens",
    )
    assert result.price_source == "listing" and result.cost_high > result.cost_low > 0
    assert not out.exists()


def test_status_is_the_data_status_json_prints(shards):
    first = draftgen.status(shards[0])
    assert first == RunDir.open(shards[0]).status()
    assert first["completions"] + draftgen.status(shards[1])["completions"] == PROMPTS
    # A folder of runs: each run's status under its path.
    assert draftgen.status(shards[0].parent) == {
        "runs": {str(path): RunDir.open(path).status() for path in shards}
    }


def test_cancel_of_a_run_without_batches_says_so(shards):
    with pytest.raises(DraftgenError) as refused:
        RunDir.open(shards[0]).cancel()
    assert str(refused.value) == f"{shards[0]} has no batches: it was not run with --batch"


def test_merge_runs_joins_the_shards_into_one_run(shards, tmp_path):
    merged = tmp_path / "merged"
    summary = draftgen.merge_runs(shards, merged)
    assert (summary.out, summary.runs, summary.completions, summary.shard) == (
        merged,
        2,
        PROMPTS,
        "all",
    )
    status = RunDir.open(merged).status()
    assert status["completions"] == PROMPTS
    assert status["samples"] == sum(draftgen.status(path)["samples"] for path in shards)

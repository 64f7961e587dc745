"""--shard I/N and draftgen merge: three shards merged export what one unsharded run exports."""

from __future__ import annotations

import asyncio
import collections
import json
import sqlite3
from pathlib import Path

import pytest
from conftest import SimProcess, draftgen, export_all, read_jsonl, run_args, write_prompts
from hypothesis import given
from hypothesis import strategies as st

from draftgen.cli import main as cli
from draftgen.cli.config import ConfigError, load_config
from draftgen.inputs.shard import Shard, ShardError, parse_shard, stable_bucket
from draftgen.records import Completion, TokenSample
from draftgen.store.database import CompletionWriter, RunLock, Store, StoreError
from draftgen.store.merge import MergeError, merge_runs, merged_shard_label

TOKENIZER = "fixture:kimi-k2.5"
SHARDS = 3
# After write_prompts' rows: a reused id and an empty row (both refused), and a row whose own
# answer is regenerated.
EXTRA_ROWS = [
    {"id": "r0", "messages": [{"role": "user", "content": "Same id, other conversation."}]},
    {"messages": []},
    {
        "id": "answered",
        "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
    },
]
# Concurrency 1: the simulator draws each answer from (prompt, attempt number), and a prompt's
# two samples are the same prompt, so only requests in a fixed order give the same answers twice.
RUN_FLAGS = ("--completions-per-turn", "2", "--concurrency", "1")


def prompt_file(path: Path) -> Path:
    write_prompts(path, 40)
    with open(path, "a", encoding="utf-8") as handle:
        for row in EXTRA_ROWS:
            handle.write(json.dumps(row) + "\n")
    return path


def run_flags() -> list[str]:
    return list(RUN_FLAGS)


def keys(run_dir: Path, table: str = "completions") -> set[str]:
    db = sqlite3.connect(run_dir / "draftgen.sqlite")
    try:
        return {row[0] for row in db.execute(f"SELECT key FROM {table}")}
    finally:
        db.close()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One unsharded run, three shards of the same prompts on a fresh simulator, and their merge."""
    tmp = tmp_path_factory.mktemp("shards")
    prompts = prompt_file(tmp / "prompts.jsonl")
    faults, quirks = [("server_error", 0.05)], [("drift", 0.1)]
    whole_sim = SimProcess(tmp, TOKENIZER, faults, quirks)
    shard_sim = SimProcess(tmp, TOKENIZER, faults, quirks)
    try:
        whole = tmp / "whole"
        result = draftgen(*run_args(whole_sim, [prompts], whole, TOKENIZER, *run_flags()))
        assert result.returncode == 0, result.stderr
        shards = [tmp / f"shard{i}" for i in range(SHARDS)]
        for index, out in enumerate(shards):
            flags = (*run_flags(), "--shard", f"{index}/{SHARDS}")
            result = draftgen(*run_args(shard_sim, [prompts], out, TOKENIZER, *flags))
            assert result.returncode == 0, result.stderr
        merged = tmp / "merged"
        result = draftgen("merge", *map(str, shards), "--out", str(merged))
        assert result.returncode == 0, result.stderr
        yield {
            "tmp": tmp,
            "prompts": prompts,
            "whole": whole,
            "shards": shards,
            "merged": merged,
            "sim": shard_sim,
            "merge_stdout": result.stdout,
        }
    finally:
        whole_sim.stop()
        shard_sim.stop()


@pytest.mark.slow
def test_merged_shards_export_what_the_unsharded_run_exports(runs):
    tmp = runs["tmp"]
    whole = export_all(runs["whole"], tmp / "whole.jsonl")
    merged = export_all(runs["merged"], tmp / "merged.jsonl")
    rows = read_jsonl(whole)
    assert len(rows) > 40 and any(r["id"].endswith("#1:0") for r in rows)  # two samples each
    assert any(not r["verified"] for r in rows) and any(r["verified"] for r in rows)
    # Byte for byte, generation ids included (the simulator draws them like the answers).
    assert merged.read_bytes() == whole.read_bytes()
    assert "merged 3 runs" in runs["merge_stdout"] and "shard all" in runs["merge_stdout"]


@pytest.mark.slow
def test_shards_are_disjoint_cover_the_run_and_keep_a_prompt_together(runs):
    shard_keys = [keys(out) for out in runs["shards"]]
    assert all(shard_keys)  # 40 rows over three shards: none is empty
    for a in range(SHARDS):
        for b in range(a + 1, SHARDS):
            assert not shard_keys[a] & shard_keys[b]
    assert set().union(*shard_keys) == keys(runs["whole"]) == keys(runs["merged"])
    owner: dict[str, int] = {}
    for index, out in enumerate(runs["shards"]):
        db = sqlite3.connect(out / "draftgen.sqlite")
        for (source_id,) in db.execute("SELECT source_id FROM completions"):
            base = source_id.partition("#")[0]  # sample k of a row is ID#k
            assert owner.setdefault(base, index) == index, source_id
        db.close()
    assert len(owner) > 10


@pytest.mark.slow
def test_each_rejected_row_lands_in_exactly_one_shard(runs):
    whole = (runs["whole"] / "rejected.jsonl").read_bytes().splitlines()
    parts = [(out / "rejected.jsonl").read_bytes().splitlines() for out in runs["shards"]]
    assert len(whole) == 5  # three bad rows, a reused id, an empty conversation
    assert collections.Counter(line for part in parts for line in part) == collections.Counter(
        whole
    )
    merged = (runs["merged"] / "rejected.jsonl").read_bytes().splitlines()
    assert sorted(merged) == sorted(whole)
    reasons = [json.loads(line)["reason"] for line in merged]
    assert any("already used by line" in reason for reason in reasons)


@pytest.mark.slow
def test_status_and_report_read_the_merged_run(runs):
    merged, whole = runs["merged"], runs["whole"]
    status = draftgen("status", str(merged), "--json")
    assert status.returncode == 0, status.stderr
    counts = json.loads(status.stdout)
    expected = json.loads(draftgen("status", str(whole), "--json").stdout)
    for name in ("completions", "samples", "verified", "reasons", "failures", "finish_reasons"):
        assert counts[name] == expected[name], name
    report = draftgen("report", str(merged))
    assert report.returncode == 0, report.stderr
    assert (merged / "report.html").is_file()


@pytest.mark.slow
def test_a_resume_with_another_shard_is_refused(runs):
    sim, prompts, shard0 = runs["sim"], runs["prompts"], runs["shards"][0]
    other = draftgen(*run_args(sim, [prompts], shard0, TOKENIZER, *run_flags(), "--shard", "1/3"))
    assert other.returncode == cli.EXIT_ERROR
    assert (
        f"{shard0} holds shard 0/3 of the rows but this run has --shard 1/3: resume it with "
        "--shard 0/3, or choose a new --out directory"
    ) in other.stderr
    unsharded = draftgen(*run_args(sim, [prompts], shard0, TOKENIZER, *run_flags()))
    assert unsharded.returncode == cli.EXIT_ERROR
    assert "this run has no --shard: resume it with --shard 0/3" in unsharded.stderr
    whole = draftgen(
        *run_args(sim, [prompts], runs["whole"], TOKENIZER, *run_flags(), "--shard", "0/3")
    )
    assert "holds shard all of the rows but this run has --shard 0/3: resume it without" in (
        whole.stderr
    )
    again = draftgen(*run_args(sim, [prompts], shard0, TOKENIZER, *run_flags(), "--shard", "0/3"))
    assert again.returncode == 0, again.stderr  # the same shard resumes, buying nothing
    assert keys(shard0) == keys(runs["shards"][0])


@pytest.mark.slow
def test_merge_refuses_other_settings_and_an_occupied_out(runs):
    tmp, sim = runs["tmp"], runs["sim"]
    short = tmp / "short"
    few = write_prompts(tmp / "few.jsonl", 3, invalid=False)
    result = draftgen(*run_args(sim, [few], short, TOKENIZER, "--max-tokens", "50"))
    assert result.returncode == 0, result.stderr
    refused = draftgen("merge", str(runs["shards"][0]), str(short), "--out", str(tmp / "m2"))
    assert refused.returncode == cli.EXIT_ERROR
    assert (
        f"{runs['shards'][0]} and {short} were generated with different max_tokens (None and "
        "50); merge only runs made with the same settings"
    ) in refused.stderr
    assert not (tmp / "m2").exists()
    occupied = draftgen("merge", str(runs["shards"][0]), "--out", str(runs["merged"]))
    assert occupied.returncode == cli.EXIT_ERROR
    assert f"--out {runs['merged']} already holds a draftgen run" in occupied.stderr


# -- merge on stores made here --------------------------------------------------------------------


def _completion(content: str, endpoint: str | None = None) -> Completion:
    return Completion(
        generation_id=f"gen-{content}",
        provider="P",
        model="m",
        reasoning=None,
        content=content,
        tool_calls=None,
        finish_reason="stop",
        native_finish_reason="stop",
        usage={"prompt_tokens": 3, "completion_tokens": 2},
        endpoint=endpoint,
    )


def _store(run_dir: Path, completions: dict[str, str], failures=(), verified=()) -> Path:
    with Store(run_dir) as store:
        store.settings.check_settings({"model": "m"})
        store.settings.set_meta("tokenizer", "fixture:kimi-k2.5")
        store.settings.set_meta("profile", "kimi-k2.5")
        store.settings.set_meta("reconstruction", "same")

    async def write() -> None:
        writer = CompletionWriter(run_dir / "draftgen.sqlite")
        for key, content in completions.items():
            request = json.dumps({"messages": [{"role": "user", "content": key}]}).encode()
            await writer.add_completion(key, key, 0, request, _completion(content), 1, [], 0.1)
        for key in failures:
            await writer.add_failure(key, key, 0, "server_error", 8, [])
        writer.close()

    asyncio.run(write())
    with Store(run_dir) as store:
        store.samples.add_samples(
            [TokenSample(k, [1, 2, 3], 1, k in verified, "ok") for k in completions]
        )
    return run_dir


def test_merge_keeps_the_verified_then_the_completed_record_of_a_key(tmp_path):
    first = _store(tmp_path / "a", {"k1": "a-unverified", "k3": "only-a"}, failures=["k2"])
    second = _store(tmp_path / "b", {"k1": "b-verified", "k2": "b-done"}, verified=["k1"])
    summary = merge_runs([first, second], tmp_path / "out")
    assert (summary.completions, summary.failures, summary.shared_keys) == (3, 0, 2)
    with Store(tmp_path / "out", create=False) as store:
        contents = {
            key: store.completions.answer(key)[0] for key, _ in store.completions.stored_finishes()
        }
        assert contents == {
            "k1": "b-verified",
            "k2": "b-done",
            "k3": "only-a",
        }
        assert (
            store.tallies.counts()["verified"] == 1
            and store.settings.meta("reconstruction") == "same"
        )
    # The first run listed wins a tie: both verified nothing for k3 here, only a has it.
    tie = merge_runs([second, first], tmp_path / "tie")
    assert tie.completions == 3


def test_merge_reads_older_stores_and_carries_tables_it_does_not_know(tmp_path):
    new = _store(tmp_path / "new", {"k1": "new"})
    old = _store(tmp_path / "old", {"k2": "old"})
    db = sqlite3.connect(old / "draftgen.sqlite")
    db.execute("ALTER TABLE completions DROP COLUMN endpoint_latency")
    db.execute("ALTER TABLE completions DROP COLUMN endpoint")
    db.execute("DROP TABLE logprob_tokens")
    db.execute("CREATE TABLE notes (key TEXT PRIMARY KEY, note TEXT)")
    db.execute("INSERT INTO notes VALUES ('k2', 'kept'), ('k9', 'no record, dropped')")
    db.commit()
    db.close()
    (old / "rejected.jsonl").write_text('{"input": "p.jsonl", "line": 2, "reason": "bad"}\n')
    summary = merge_runs([new, old], tmp_path / "out")
    assert summary.completions == 2 and summary.rejected == 1
    db = sqlite3.connect(tmp_path / "out" / "draftgen.sqlite")
    assert db.execute("SELECT endpoint FROM completions WHERE key = 'k2'").fetchone() == (None,)
    assert db.execute("SELECT key, note FROM notes").fetchall() == [("k2", "kept")]
    db.close()


def test_merge_refuses_a_different_tokenizer_and_a_run_listed_twice(tmp_path):
    first = _store(tmp_path / "a", {"k1": "a"})
    second = _store(tmp_path / "b", {"k2": "b"})
    with Store(second) as store:
        store.settings.set_meta("tokenizer", "other/tokenizer")
    with pytest.raises(MergeError, match=f"{first} and {second} have different tokenizer"):
        merge_runs([first, second], tmp_path / "out")
    with pytest.raises(MergeError, match="is listed twice; list each run directory once"):
        merge_runs([first, first], tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_merge_refuses_a_run_that_is_still_running(tmp_path):
    first = _store(tmp_path / "a", {"k1": "a"})
    running = RunLock(first)
    running.acquire()
    try:
        with pytest.raises(StoreError, match=f"{first} is in use by draftgen pid"):
            merge_runs([first], tmp_path / "out")
    finally:
        running.release()
    assert merge_runs([first], tmp_path / "out").completions == 1


def test_merged_shard_labels():
    assert merged_shard_label(["0/3", "1/3", "2/3"]) == "all"
    assert merged_shard_label(["2/3", "0/3"]) == "0/3,2/3"
    assert merged_shard_label(["0/3,2/3", "1/3"]) == "all"
    assert merged_shard_label(["1/2"]) == "1/2"
    assert merged_shard_label(["all", "0/2"]) == "all"


# -- shard.py -------------------------------------------------------------------------------------


@given(st.text(min_size=1, max_size=40), st.integers(min_value=1, max_value=64))
def test_every_key_is_in_exactly_one_shard(key, count):
    holders = [i for i in range(count) if Shard(i, count).holds_key(key)]
    assert len(holders) == 1


@given(st.text(max_size=30), st.integers(min_value=1, max_value=10**6), st.integers(1, 16))
def test_every_rejected_line_is_in_exactly_one_shard_whatever_its_directory(name, line, count):
    holders = [i for i in range(count) if Shard(i, count).holds_line(f"a/{name}.jsonl", line)]
    assert len(holders) == 1
    assert Shard(holders[0], count).holds_line(f"/elsewhere/{name}.jsonl", line)


def test_the_hash_is_stable_across_processes():
    # Fixed values: a change here would move rows between shards of runs already made.
    assert stable_bucket(b"abc", 1000) == 721
    assert stable_bucket(b"", 7) == 0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("3/3", "--shard 3/3 is out of range; use I/N with 0 <= I < N"),
        ("0/0", "--shard 0/0 is out of range"),
        ("1", "--shard '1' is not I/N, e.g. 0/4 for the first of four shards"),
        ("-1/2", "--shard '-1/2' is not I/N"),
    ],
)
def test_bad_shards_are_refused_in_one_sentence(text, message, capsys):
    with pytest.raises(ShardError, match=message.replace("'", ".")):
        parse_shard(text)
    with pytest.raises(SystemExit):
        cli.main(["run", f"--shard={text}"])
    assert message in capsys.readouterr().err


def test_shard_is_a_config_key(tmp_path):
    good = tmp_path / "good.toml"
    good.write_text('shard = "1/4"\n')
    assert load_config(good)["shard"] == Shard(1, 4)
    bad = tmp_path / "bad.toml"
    bad.write_text('shard = "4/4"\n')
    with pytest.raises(ConfigError, match="bad.toml: shard = '4/4' is refused: --shard 4/4 is"):
        load_config(bad)


def test_check_shard_records_a_new_run_and_reads_older_and_merged_ones(tmp_path):
    from draftgen.run.pipeline import RunError, check_shard

    with Store(tmp_path / "new") as store:
        check_shard(store, Shard(2, 5), tmp_path / "new")
        assert store.settings.meta("shard") == "2/5"
        check_shard(store, Shard(2, 5), tmp_path / "new")  # the same shard resumes
    with Store(tmp_path / "old") as store:
        store.settings.check_settings(
            {"model": "m"}
        )  # used before shards existed: it read every row
        check_shard(store, None, tmp_path / "old")
        assert store.settings.meta("shard") == "all"
    with Store(tmp_path / "merged") as store:
        store.settings.set_meta("shard", "0/3,2/3")
        with pytest.raises(
            RunError,
            match="0/3,2/3 of the rows but this run has no --shard: a merge of some shards cannot",
        ):
            check_shard(store, None, tmp_path / "merged")


def test_merge_of_runs_that_stored_nothing(tmp_path):
    first = _store(tmp_path / "a", {})
    second = _store(tmp_path / "b", {})
    assert merge_runs([first, second], tmp_path / "out").completions == 0

"""draftgen run --ray N on a local Ray: shard tasks merged export what an unsharded run does."""

from __future__ import annotations

import json

import pytest
from conftest import SimProcess, draftgen, export_all, read_jsonl, run_args, write_prompts

pytest.importorskip("ray")

TOKENIZER = "fixture:kimi-k2.5"


@pytest.mark.slow
@pytest.mark.long  # ~50 s: Ray's start-up (pytest -m long; CI runs it)
def test_ray_shards_merged_equal_an_unsharded_run(tmp_path):
    prompts = write_prompts(tmp_path / "prompts.jsonl", 20)
    whole_sim = SimProcess(tmp_path, TOKENIZER, [("server_error", 0.05)])
    ray_sim = SimProcess(tmp_path, TOKENIZER, [("server_error", 0.05)])
    try:
        whole, on_ray = tmp_path / "whole", tmp_path / "ray"
        flags = ("--concurrency", "1")  # answers depend on request order per prompt (see there)
        result = draftgen(*run_args(whole_sim, [prompts], whole, TOKENIZER, *flags))
        assert result.returncode == 0, result.stderr
        ray_flags = (*flags, "--ray", "2")
        result = draftgen(
            *run_args(ray_sim, [prompts], on_ray, TOKENIZER, *ray_flags),
            env_extra={"RAY_USAGE_STATS_ENABLED": "0"},
            subprocess_only=True,  # Ray's workers and its shutdown belong to a process of their own
        )
        assert result.returncode == 0, result.stderr
        shard_keys = []
        for index in range(2):
            shard = on_ray / "shards" / str(index)
            assert json.loads(draftgen("status", str(shard), "--json").stdout)["completions"]
            shard_keys.append(read_jsonl(export_all(shard, tmp_path / f"s{index}.jsonl")))
        ids = [{row["id"] for row in rows} for rows in shard_keys]
        assert ids[0] and ids[1] and not ids[0] & ids[1]
        expected = export_all(whole, tmp_path / "whole.jsonl").read_bytes()
        assert export_all(on_ray, tmp_path / "ray.jsonl").read_bytes() == expected
        assert sorted((on_ray / "rejected.jsonl").read_text().splitlines()) == sorted(
            (whole / "rejected.jsonl").read_text().splitlines()
        )
    finally:
        whole_sim.stop()
        ray_sim.stop()

"""``draftgen show RUN_DIR ID`` (issue #27): one sample's verdict and tokens, boundaries marked."""

from __future__ import annotations

import json

from conftest import draftgen
from golden import plain_rows, run_rows

from draftgen.api import RunDir
from draftgen.tokens.tokenizer import decode, load_tokenizer


def test_show_prints_a_samples_verdict_and_tokens(tmp_path, monkeypatch):
    truth, exported = run_rows(tmp_path, monkeypatch, "qwen3", plain_rows(3))
    run = tmp_path / "run"
    row = exported[0]
    sample = RunDir.open(run).sample(f"{row['source_id']}:{row['turn']}")
    assert sample["input_ids"] == row["input_ids"] and sample["key"] == row["key"]
    tokenizer = load_tokenizer("fixture:qwen3")
    assert sample["tokens"] == [decode(tokenizer, [i]) for i in row["input_ids"]]
    assert RunDir.open(run).sample(row["key"])["id"] == sample["id"]

    result = draftgen("show", str(run), sample["id"])
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert f"sample {sample['id']}" in out and "verified: ok" in out
    assert f"prompt {row['prompt_len']} tokens" in out
    assert "|<|im_start|>|user|" in out  # every token between bars
    as_json = json.loads(draftgen("show", str(run), sample["id"], "--json").stdout)
    assert as_json["input_ids"] == row["input_ids"]


def test_an_unknown_id_is_one_sentence(tmp_path, monkeypatch):
    run_rows(tmp_path, monkeypatch, "qwen3", plain_rows(1))
    result = draftgen("show", str(tmp_path / "run"), "nope:0")
    assert result.returncode == 2
    assert "has no sample 'nope:0'" in result.stderr and "SOURCE_ID:TURN" in result.stderr

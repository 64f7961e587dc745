"""A run refused before its first request leaves nothing it made behind (issue #27): not the
``--out`` directory (nor the parents made for it), not an empty store in a directory that was
there; a directory that was there, or that holds anything else, is kept."""

from __future__ import annotations

import json
import socket

from conftest import draftgen, write_prompts

UNSET = "DRAFTGEN_TEST_NEVER_SET_KEY"


def closed_port() -> int:
    """A loopback port nothing listens on: a connection to it is refused at once."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def run(prompts, out, base_url, key_variable, **kwargs):
    return draftgen(
        "run",
        "--input",
        str(prompts),
        "--model",
        "test/model",
        "--tokenizer",
        "fixture:kimi-k2.5",
        "--out",
        str(out),
        "--base-url",
        base_url,
        "--api-key-env",
        key_variable,
        "--no-config",
        **kwargs,
    )


def test_a_run_refused_for_its_key_makes_no_directory(tmp_path):
    prompts = write_prompts(tmp_path / "p.jsonl", 3, invalid=False)
    out = tmp_path / "new" / "run"
    result = run(prompts, out, f"http://127.0.0.1:{closed_port()}/api/v1", UNSET)
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == (
        f"draftgen: environment variable {UNSET} is not set; export your API key in it or name "
        "another one with --api-key-env"
    )
    assert not (tmp_path / "new").exists()
    # Set and empty: the same, and a directory that was there stays, as it was.
    kept = tmp_path / "kept"
    kept.mkdir()
    empty = run(
        prompts,
        kept,
        "http://127.0.0.1:1/api/v1",
        "DRAFTGEN_TEST_EMPTY",
        env_extra={"DRAFTGEN_TEST_EMPTY": ""},
    )
    assert empty.returncode == 2 and "DRAFTGEN_TEST_EMPTY is empty" in empty.stderr
    assert kept.is_dir() and list(kept.iterdir()) == []


def test_a_run_refused_by_the_probe_takes_back_what_it_made(tmp_path):
    prompts = write_prompts(tmp_path / "p.jsonl", 3, invalid=False)
    url = f"http://127.0.0.1:{closed_port()}/api/v1"
    out = tmp_path / "new" / "run"
    result = run(prompts, out, url, "DRAFTGEN_TEST_KEY")
    assert result.returncode == 2 and "cannot connect to" in result.stderr
    assert not (tmp_path / "new").exists()
    # A directory that was there keeps what it held, and loses only the empty store.
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    result = run(prompts, mine, url, "DRAFTGEN_TEST_KEY")
    assert result.returncode == 2
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]


def test_a_refusal_that_names_the_rejected_rows_keeps_them(tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"messages": [{"role": "assistant", "content": "hi"}]}) + "\n")
    out = tmp_path / "run"
    result = draftgen(
        "run",
        "--input",
        str(prompts),
        "--model",
        "test/model",
        "--tokenizer",
        "fixture:kimi-k2.5",
        "--out",
        str(out),
        "--simulate",
        "--no-config",
    )
    assert result.returncode == 2 and "rejected.jsonl" in result.stderr
    assert (out / "rejected.jsonl").is_file()

"""End to end against the simulator with faults and quirks on: exported ids equal the ground truth.

For a Kimi-shaped and a DeepSeek-V4 tokenizer, streaming and not: every sample the text can prove is
exported with the simulator's ground-truth ids, every sample it cannot is flagged, none twice, the
rejected rows are listed, and the API key appears in nothing the run leaves behind.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest
from conftest import (
    SECRET,
    SimProcess,
    check_against_truth,
    draftgen,
    export_all,
    read_jsonl,
    run_args,
    write_prompts,
)

from draftgen.reconstruct.background import WHERE_ENV

FAULTS = [
    ("rate_limit", 0.05),
    ("overloaded", 0.03),
    ("server_error", 0.03),
    ("error_200", 0.03),
    ("finish_error", 0.03),
    ("midstream_error", 0.03),
    ("drop", 0.03),
    ("empty", 0.03),
    ("budget_in_flight", 0.02),
    ("rate_limit_no_header", 0.02),
    ("malformed_json", 0.02),
]
QUIRKS = [
    ("drift", 0.08),
    ("strip_whitespace", 0.05),
    ("leak_eot", 0.1),
    ("no_split", 0.1),
    ("empty_reasoning", 0.08),
    ("tool_call_text", 0.08),
    ("reasoning_content_field", 0.1),
]


@pytest.mark.parametrize(
    "tokenizer, stream",
    [
        ("fixture:kimi-k2.5", True),
        ("fixture:kimi-k2.5", False),
        ("fixture:deepseek-v3-thinking", True),
        ("fixture:deepseek-v3-thinking", False),
    ],
)
def test_faulty_run_exports_ground_truth(tmp_path, tokenizer, stream):
    sim = SimProcess(tmp_path, tokenizer, FAULTS, QUIRKS)
    try:
        inputs = write_prompts(tmp_path / "prompts.jsonl", 40)
        out = tmp_path / "run"
        flag = "--stream" if stream else "--no-stream"
        result = draftgen(*run_args(sim, [inputs], out, tokenizer, "--concurrency", "16", flag))
        assert result.returncode == 0, result.stderr
        export_path = tmp_path / "all.jsonl"
        result = draftgen(
            "export",
            str(out),
            "--format",
            "specforge",
            "--out",
            str(export_path),
            "--include-unverified",
        )
        assert result.returncode == 0, result.stderr
        exact, flagged, rows = check_against_truth(out, sim, export_path)
        assert exact > 10 and flagged > 0
        # The default export holds exactly the verified, complete samples.
        default_path = tmp_path / "verified.jsonl"
        assert (
            draftgen(
                "export", str(out), "--format", "specforge", "--out", str(default_path)
            ).returncode
            == 0
        )
        verified = read_jsonl(default_path)
        assert len(verified) == exact and all(r["verified"] for r in verified)
        rejected = read_jsonl(out / "rejected.jsonl")
        assert [(r["line"], r["reason"].split(";")[0].split(" (")[0]) for r in rejected] == [
            (2, "line is not valid JSON"),
            (4, "messages[0] has unknown role 'wizard'"),
            (6, "messages[0].content is int, not a string"),
        ]
        # Exact duplicates were generated once: 40 rows, 8 of them the same prompt.
        turns = sum(2 if (i * 7) % 5 == 1 else 1 for i in range(40))
        assert len(rows) == turns - 7
        status = draftgen("status", str(out))
        assert status.returncode == 0 and "verified" in status.stdout
        for path in out.rglob("*"):
            if path.is_file():
                assert SECRET.encode() not in path.read_bytes(), path
    finally:
        sim.stop()


@pytest.mark.parametrize("where", ["thread", pytest.param("process", marks=pytest.mark.long)])
def test_kill_9_then_resume_buys_nothing_stored_again(tmp_path, where):
    """``where``: where the killed run reconstructs; a process of its own must end with it."""
    tokenizer = "fixture:kimi-k2.5"
    sim = SimProcess(
        tmp_path,
        tokenizer,
        [("server_error", 0.05), ("drop", 0.03)],
        [("drift", 0.05)],
        extra=["--latency", "0.05"],
    )
    try:
        inputs = write_prompts(tmp_path / "prompts.jsonl", 150, invalid=False, seed=1)
        out = tmp_path / "run"
        args = run_args(sim, [inputs], out, tokenizer, "--concurrency", "8")
        env = {**os.environ, "DRAFTGEN_TEST_KEY": SECRET, WHERE_ENV: where}
        victim = subprocess.Popen(
            [sys.executable, "-m", "draftgen.cli", *args],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        db_path = out / "draftgen.sqlite"
        deadline = time.monotonic() + 120
        stored = 0
        while time.monotonic() < deadline and stored < 30:
            time.sleep(0.1)
            if db_path.exists():
                try:
                    stored = (
                        sqlite3.connect(db_path)
                        .execute("SELECT count(*) FROM completions")
                        .fetchone()[0]
                    )
                except sqlite3.OperationalError:
                    pass
        assert victim.poll() is None, "the run finished before it could be killed"
        children = _children(victim.pid)
        assert (where == "process") == bool(children), children
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and _alive(children):
            time.sleep(0.1)
        assert not _alive(children), "the reconstruction outlived the killed run"
        db = sqlite3.connect(db_path)
        before = dict(db.execute("SELECT generation_id, key FROM completions"))
        db.close()
        assert len(before) >= 30
        served_before = len(sim.truth())
        truth = {t["generation_id"]: t for t in sim.truth()}
        bought = {truth[g]["prompt_sha256"] for g in before}

        result = draftgen(*args)
        assert result.returncode == 0, result.stderr
        served_after = sim.truth()[served_before:]
        assert served_after, "the resume generated nothing"
        assert not bought & {t["prompt_sha256"] for t in served_after}, (
            "a stored completion was bought again"
        )
        db = sqlite3.connect(db_path)
        after = dict(db.execute("SELECT generation_id, key FROM completions"))
        assert all(after.get(g) == k for g, k in before.items()), "a stored completion changed"
        export_path = tmp_path / "all.jsonl"
        export_all(out, export_path)
        check_against_truth(out, sim, export_path)
    finally:
        sim.stop()


def _children(parent: int) -> list[int]:
    """The running processes whose parent is ``parent``."""
    return [pid for pid, ppid in _processes() if ppid == parent]


def _alive(pids: list[int]) -> list[int]:
    """Those of ``pids`` still running (a zombie waiting for its reaper has ended)."""
    return [pid for pid, _ in _processes() if pid in pids]


def _processes():
    """(pid, parent pid) of every running process, from /proc."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    state, ppid = handle.read().rsplit(")", 1)[1].split()[:2]
            except (FileNotFoundError, ProcessLookupError):
                continue
            if state != "Z":
                yield int(entry), int(ppid)


def test_resume_with_other_settings_refuses(tmp_path):
    tokenizer = "fixture:kimi-k2.5"
    sim = SimProcess(tmp_path, tokenizer)
    try:
        inputs = write_prompts(tmp_path / "p.jsonl", 5, invalid=False)
        out = tmp_path / "run"
        assert draftgen(*run_args(sim, [inputs], out, tokenizer)).returncode == 0
        served = len(sim.truth())
        again = draftgen(*run_args(sim, [inputs], out, tokenizer))
        assert again.returncode == 0 and len(sim.truth()) == served  # a finished run buys nothing
        other = draftgen(*run_args(sim, [inputs], out, tokenizer, "--max-tokens", "64"))
        assert other.returncode == 2
        assert "max_tokens not set (now 64)" in other.stderr
        assert len(sim.truth()) == served
    finally:
        sim.stop()


@pytest.mark.parametrize(
    "fault, message",
    [
        ("auth", "the API rejected the key"),
        ("payment", "out of credits"),
    ],
)
def test_fatal_errors_stop_with_a_clear_message_and_keep_the_store(tmp_path, fault, message):
    tokenizer = "fixture:kimi-k2.5"
    sim = SimProcess(tmp_path, tokenizer, [(fault, 1.0)], extra=["--fatal-after", "6"])
    try:
        inputs = write_prompts(tmp_path / "p.jsonl", 30, invalid=False)
        out = tmp_path / "run"
        result = draftgen(*run_args(sim, [inputs], out, tokenizer, "--concurrency", "1"))
        assert result.returncode == 2
        assert message in result.stderr and "the same command resumes" in result.stderr
        assert SECRET not in result.stderr + result.stdout
        stored = (
            sqlite3.connect(out / "draftgen.sqlite")
            .execute("SELECT count(*) FROM completions")
            .fetchone()[0]
        )
        assert stored == len(sim.truth()) >= 1
    finally:
        sim.stop()


def test_missing_key_and_insecure_url_are_refused(tmp_path, monkeypatch):
    inputs = write_prompts(tmp_path / "p.jsonl", 2, invalid=False)
    base = [
        "run",
        "--model",
        "m",
        "--tokenizer",
        "fixture:kimi-k2.5",
        "--input",
        str(inputs),
        "--out",
        str(tmp_path / "run"),
    ]
    result = draftgen(
        *base, "--base-url", "https://example.invalid/api/v1", "--api-key-env", "NOPE_UNSET"
    )
    assert result.returncode == 2 and "environment variable NOPE_UNSET is not set" in result.stderr
    monkeypatch.setenv("NOPE_EMPTY", "")
    result = draftgen(
        *base, "--base-url", "https://example.invalid/api/v1", "--api-key-env", "NOPE_EMPTY"
    )
    assert result.returncode == 2 and "environment variable NOPE_EMPTY is empty" in result.stderr
    result = draftgen(
        *base, "--base-url", "http://example.com/api/v1", "--api-key-env", "DRAFTGEN_TEST_KEY"
    )
    assert result.returncode == 2 and "--allow-insecure-http" in result.stderr
    result = draftgen(
        *base[:-1], str(tmp_path / "missing"), "--input", str(tmp_path / "nope.jsonl")
    )
    assert result.returncode == 2 and "nope.jsonl does not exist" in result.stderr

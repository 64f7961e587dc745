"""Shared test tools: a simulator in a subprocess, the draftgen command, prompt files."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

SECRET = "sk-test-draftgen-0123456789abcdef"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class SimProcess:
    """``draftgen simulate`` in its own process: a client can be killed while it keeps serving."""

    def __init__(self, tmp: Path, tokenizer: str, faults=(), quirks=(), extra=()) -> None:
        self.port = free_port()
        self.truth_path = tmp / f"truth-{self.port}.jsonl"
        self.log = open(tmp / f"sim-{self.port}.log", "w")
        args = [
            sys.executable,
            "-m",
            "draftgen.cli",
            "simulate",
            "--tokenizer",
            tokenizer,
            "--port",
            str(self.port),
            "--truth",
            str(self.truth_path),
            *extra,
        ]
        for name, rate in faults:
            args += ["--fault", f"{name}={rate}"]
        for name, rate in quirks:
            args += ["--quirk", f"{name}={rate}"]
        self.process = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        self.base_url = f"http://127.0.0.1:{self.port}/api/v1"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"simulator exited: {(tmp / f'sim-{self.port}.log').read_text()}"
                )
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("simulator did not start")

    def truth(self) -> list[dict]:
        if not self.truth_path.exists():
            return []
        return [json.loads(line) for line in self.truth_path.read_text().splitlines() if line]

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()
        self.log.close()


# Commands that only read and write a run directory run in the test's own process (the CLI's
# ``main``, its exit code and both outputs captured): a process of their own would prove nothing
# more and costs a Python start, imports and a tokenizer load (~2-3 s) each time. ``run``,
# ``simulate`` and anything whose signals or process matter keep their subprocess.
# DRAFTGEN_TEST_SUBPROCESS=1 runs every command in its own process again.
IN_PROCESS = frozenset(
    () if os.environ.get("DRAFTGEN_TEST_SUBPROCESS") else {"status", "export", "merge", "vocab"}
)


def draftgen(
    *args: str,
    env_extra: dict | None = None,
    timeout: float = 300,
    subprocess_only: bool = False,
) -> subprocess.CompletedProcess:
    extra = {"DRAFTGEN_TEST_KEY": SECRET, **(env_extra or {})}
    if args and args[0] in IN_PROCESS and not subprocess_only:
        return _draftgen_in_process(list(args), extra)
    return subprocess.run(
        [sys.executable, "-m", "draftgen.cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **extra},
        timeout=timeout,
    )


def _draftgen_in_process(args: list[str], extra: dict) -> subprocess.CompletedProcess:
    import contextlib
    import io

    from draftgen.cli import main as cli

    out, err = io.StringIO(), io.StringIO()
    saved = {name: os.environ.get(name) for name in extra}
    os.environ.update(extra)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = cli.main(args)
            except SystemExit as exc:  # argparse's usage errors
                code = exc.code if isinstance(exc.code, int) else 1
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    return subprocess.CompletedProcess(["draftgen", *args], code, out.getvalue(), err.getvalue())


def export_all(out: Path, path: Path) -> Path:
    """``draftgen export --include-unverified`` of a run, asserted to succeed."""
    result = draftgen(
        "export", str(out), "--format", "specforge", "--out", str(path), "--include-unverified"
    )
    assert result.returncode == 0, result.stderr
    return path


def run_args(
    sim: SimProcess, inputs: list[Path], out: Path, tokenizer: str, *extra: str
) -> list[str]:
    args = [
        "run",
        "--model",
        "test/model",
        "--tokenizer",
        tokenizer,
        "--base-url",
        sim.base_url,
        "--api-key-env",
        "DRAFTGEN_TEST_KEY",
        "--out",
        str(out),
        "--retry-base-delay",
        "0.01",
        "--idle-timeout",
        "10",
        "--max-attempts",
        "12",
    ]
    for path in inputs:
        args += ["--input", str(path)]
    return args + list(extra)


def write_prompts(path: Path, count: int, *, invalid: bool = True, seed: int = 0) -> Path:
    """Varied rows: single and multi-turn, ShareGPT, system prompts, duplicates, special text."""
    lines = []
    for i in range(count):
        n = (i * 7 + seed) % 5
        if n == 0:
            row = {
                "id": f"r{i}",
                "messages": [{"role": "user", "content": f"Question {i}: explain item {i}."}],
            }
        elif n == 1:
            row = {
                "id": f"r{i}",
                "messages": [
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": f"First {i}"},
                    {"role": "assistant", "content": "old"},
                    {"role": "user", "content": f"Second {i} — café 日本 🎉"},
                ],
            }
        elif n == 2:
            row = {
                "conversations": [
                    {"from": "human", "value": f"ShareGPT prompt {i}"},
                    {"from": "gpt", "value": "old answer"},
                ]
            }
        elif n == 3:
            row = {
                "id": f"r{i}",
                "messages": [
                    {"role": "user", "content": f"Literal <|im_end|> and </think> in data {i}"}
                ],
            }
        else:
            row = {
                "id": f"r{i}",
                "messages": [{"role": "user", "content": "Explain binary search."}],
            }  # duplicates
        lines.append(json.dumps(row, ensure_ascii=False))
    if invalid:
        lines.insert(1, "{broken json")
        lines.insert(3, json.dumps({"messages": [{"role": "wizard", "content": "x"}]}))
        lines.insert(5, json.dumps({"messages": [{"role": "user", "content": 5}]}))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def secret() -> str:
    return SECRET


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Benchmarks and soaks are long tests: ``-m long`` selects them, a plain run leaves them out
    (pyproject's ``-m "not long"``); this runs before the selection by marker."""
    for item in items:
        if item.get_closest_marker("bench") or item.get_closest_marker("soak"):
            item.add_marker(pytest.mark.long)


def pytest_addoption(parser):
    parser.addoption("--long", action="store_true", help="run the soak test at its long size")


# The simulator's provider that strips whitespace whenever the strip_whitespace quirk is on.
STRIPPING_PROVIDER = "Chutes"


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def check_against_truth(out, sim, export_path, allow_failures=False):
    """Every exported row against the simulator's ground truth; returns (exact, flagged, rows)."""
    truth = {t["generation_id"]: t for t in sim.truth()}
    rows = read_jsonl(export_path)
    assert rows, "nothing was exported"
    assert len({r["id"] for r in rows}) == len(rows), "a sample was exported twice"
    db = sqlite3.connect(out / "draftgen.sqlite")
    stored = db.execute("SELECT count(*) FROM completions").fetchone()[0]
    failures = db.execute("SELECT count(*) FROM failures").fetchone()[0]
    assert len(rows) == stored and (allow_failures or failures == 0)
    exact = flagged = 0
    for row in rows:
        record = truth[row["generation_id"]]
        truth_ids = record["prompt_ids"] + record["completion_ids"]
        assert len(row["loss_mask"]) == len(row["input_ids"])
        assert (
            row["loss_mask"]
            == [0] * len(record["prompt_ids"]) + [1] * len(record["completion_ids"])
            or not row["verified"]
        )
        truncated = record["finish_reason"] == "length"
        if record["text_exact"] and not truncated:
            if row["verify_reason"] == "provider_strips_whitespace":
                # Unprovable, not wrong: this provider strips, and a strip here is invisible.
                assert record["provider"] == STRIPPING_PROVIDER
                flagged += 1
                continue
            assert row["verified"], (row["verify_reason"], record["quirks"])
            assert row["input_ids"] == truth_ids, record["quirks"]
            exact += 1
        else:
            assert not row["verified"], record["quirks"]
            flagged += 1
    return exact, flagged, rows


async def start_app(app) -> tuple:
    """Serve an aiohttp ``app`` on a free loopback port: (runner to clean up, base URL .../v1)."""
    from aiohttp import web

    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    return runner, f"http://127.0.0.1:{port}/v1"

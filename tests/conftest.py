"""Shared test tools: the simulator, the draftgen command (in process or not), prompt files."""

from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import traceback
from pathlib import Path

import pytest

import draftgen.tokens.tokenizer as _tokenizer

SECRET = "sk-test-draftgen-0123456789abcdef"

# One load of each tokenizer for the whole session: the library keeps eight (enough for a run),
# but the suite walks twenty fixtures over and over, and each reload costs up to 3 s. Replaced
# before any test module imports the name.
_tokenizer.load_tokenizer = functools.lru_cache(maxsize=None)(_tokenizer.load_tokenizer.__wrapped__)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class SimProcess:
    """``draftgen simulate`` with these flags: on its own event loop in a thread of the test's
    process (the flags parsed by the CLI into the same configuration), or in a process of its own
    with ``own_process=True`` or DRAFTGEN_TEST_SUBPROCESS=1. A client can be killed either way
    while it keeps serving; the thread saves a Python start and a tokenizer load per simulator."""

    def __init__(
        self, tmp: Path, tokenizer: str, faults=(), quirks=(), extra=(), own_process=False
    ) -> None:
        self.port = free_port()
        self.truth_path = tmp / f"truth-{self.port}.jsonl"
        args = ["simulate", "--tokenizer", tokenizer, "--port", str(self.port)]
        args += ["--truth", str(self.truth_path), *extra]
        for name, rate in faults:
            args += ["--fault", f"{name}={rate}"]
        for name, rate in quirks:
            args += ["--quirk", f"{name}={rate}"]
        self.base_url = f"http://127.0.0.1:{self.port}/api/v1"
        self.process = self.thread = None
        if own_process or os.environ.get("DRAFTGEN_TEST_SUBPROCESS"):
            self._start_process(tmp, args)
        else:
            from draftgen.simulator import SimulatorThread

            config, host, port = _simulator_config(args)
            self.thread = SimulatorThread(config, host, port)

    def _start_process(self, tmp: Path, args: list[str]) -> None:
        log_path = tmp / f"sim-{self.port}.log"
        self.log = open(log_path, "w")  # noqa: SIM115 (closed by stop)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "draftgen.cli", *args], stdout=self.log, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"simulator exited: {log_path.read_text()}")
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
        if self.thread is not None:
            self.thread.stop()
            return
        self.process.kill()
        self.process.wait()
        self.log.close()


def _simulator_config(args: list[str]) -> tuple:
    """(SimConfig, host, port) that ``draftgen simulate ARGS`` would serve, built by the CLI."""
    from draftgen.cli import main as cli

    parsed = cli.build_parser().parse_args(args)
    return cli.simulator_config(parsed), parsed.host, parsed.port


# Every command but ``simulate`` runs in the test's own process (the CLI's ``main``, its exit code
# and both outputs captured): a process of its own would prove nothing more and costs a Python
# start, imports and a tokenizer load (~2-4 s) each time. Tests that prove something about a real
# process (a signal, kill -9, the lock of another pid, a closed pipe) pass ``subprocess_only=True``
# or start their own; DRAFTGEN_TEST_SUBPROCESS=1 runs every command in its own process again.
IN_PROCESS = frozenset(
    ()
    if os.environ.get("DRAFTGEN_TEST_SUBPROCESS")
    else {"run", "status", "export", "merge", "vocab", "report", "estimate", "cancel", "init"}
)


def draftgen(
    *args: str,
    env_extra: dict | None = None,
    timeout: float = 300,
    subprocess_only: bool = False,
    failpoint: str | None = None,
) -> subprocess.CompletedProcess:
    """``draftgen ARGS``; with ``failpoint`` (``after_create``, ``mid_page:2``) in a process of
    its own that kills itself there (draftgen_testing.failpoints), never in pytest's."""
    extra = {"DRAFTGEN_TEST_KEY": SECRET, **(env_extra or {})}
    args = with_simulator(args)
    in_process = args and args[0] in IN_PROCESS and not subprocess_only
    if in_process and failpoint is None:
        return _draftgen_in_process(list(args), extra)
    command = ["draftgen.cli", *args]
    if failpoint is not None:
        command = ["draftgen_testing.failpoints", failpoint, "--", *args]
    return subprocess.run(
        [sys.executable, "-m", *command],
        capture_output=True,
        text=True,
        env={**os.environ, **extra},
        timeout=timeout,
    )


def with_simulator(args: tuple[str, ...]) -> tuple[str, ...]:
    """``args`` with ``--simulate`` where a run (or an estimate's pilot) names no endpoint, on
    the command line or in its config file: the simulator is chosen, never a default."""
    command = next((arg for arg in args if not arg.startswith("-")), None)
    if command not in ("run", "estimate") or {"--base-url", "--simulate"} & set(args):
        return args
    if command == "estimate" and "--pilot" not in args:
        return args
    config = Path(args[args.index("--config") + 1]) if "--config" in args else None
    if config is None and "--no-config" not in args:
        config = Path("draftgen.toml")
    if config is not None and config.is_file():
        import tomllib

        table = tomllib.loads(config.read_text(encoding="utf-8"))
        if {"base_url", "simulate"} & set(table) or "endpoints" in table.get("backend", {}):
            return args
    at = args.index(command) + 1
    return (*args[:at], "--simulate", *args[at:])


def _draftgen_in_process(args: list[str], extra: dict) -> subprocess.CompletedProcess:
    """``main(args)`` as the command would run: what it changes in the process is put back after
    (environment, working directory, argv, signal handlers, log handlers and levels, the secrets
    the log redactor knows), so a test sees no more than it would of a finished process."""
    import logging

    from draftgen.cli import main as cli
    from draftgen.logs import REDACTOR

    out, err = io.StringIO(), io.StringIO()
    saved_env = {name: os.environ.get(name) for name in extra}
    saved_cwd, saved_argv = os.getcwd(), sys.argv
    saved_signals = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    root, ours = logging.getLogger(), logging.getLogger("draftgen")
    saved_handlers, saved_levels = list(root.handlers), (root.level, ours.level)
    saved_secrets = set(REDACTOR.secrets)
    REDACTOR.secrets.clear()  # as in a new process: only what this command registers
    os.environ.update(extra)
    sys.argv = ["draftgen", *args]
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = cli.main(args)
            except SystemExit as exc:  # argparse's usage errors
                code = exc.code if isinstance(exc.code, int) else 1
            except Exception:  # what the interpreter does with an uncaught one (--log-level debug)
                traceback.print_exc()
                code = 1
    finally:
        for name, value in saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        os.chdir(saved_cwd)
        sys.argv = saved_argv
        for sig, handler in saved_signals.items():
            if handler is not None:
                signal.signal(sig, handler)
        for handler in list(root.handlers):
            if handler not in saved_handlers:
                root.removeHandler(handler)
        root.setLevel(saved_levels[0])
        ours.setLevel(saved_levels[1])
        REDACTOR.secrets.clear()
        REDACTOR.secrets.update(saved_secrets)
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
        # These runs count what the server sold against what was stored; calibration's own
        # purchases are proven in tests/generate/test_calibrate.py.
        "--no-calibrate",
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
# The simulator's provider that re-serialises tool arguments whenever reserialize_arguments is on.
RESERIALISING_PROVIDER = "SiliconFlow"
# Samples unverified for what their provider was caught doing elsewhere: unprovable, not wrong.
PROVIDER_LEVEL_REASONS = {
    "provider_strips_whitespace": STRIPPING_PROVIDER,
    "provider_reserialises_tool_arguments": RESERIALISING_PROVIDER,
}


def assert_worked(result: subprocess.CompletedProcess, out: Path) -> None:
    """``result`` of a run that worked every turn: exit 0, or 4 where some failed for good (the
    faults and caps these runs use leave some; the store's failures say which)."""
    db = sqlite3.connect(Path(out) / "draftgen.sqlite")
    try:
        failed = db.execute("SELECT count(*) FROM failures").fetchone()[0]
    finally:
        db.close()
    assert result.returncode == (4 if failed else 0), result.stderr


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
            if row["verify_reason"] in PROVIDER_LEVEL_REASONS:
                # Unprovable, not wrong: this provider strips (or re-serialises tool arguments),
                # and doing it here would be invisible.
                assert record["provider"] == PROVIDER_LEVEL_REASONS[row["verify_reason"]]
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


@pytest.fixture
def small_disk(tmp_path):
    """A 8 MiB tmpfs (root only; skipped where mounting is not permitted)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(disk)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=True)


def fill_disk(disk: Path) -> Path:
    """Fill ``disk`` to the last byte; the file that holds the space."""
    ballast = disk / "ballast"
    fd = os.open(ballast, os.O_WRONLY | os.O_CREAT)
    try:
        with contextlib.suppress(OSError):
            while True:
                os.write(fd, b"x" * 65536)
        with contextlib.suppress(OSError):
            while True:
                os.write(fd, b"x")
    finally:
        os.close(fd)
    return ballast


def run_on_app(app, inputs: Path, out: Path, tokenizer: str, monkeypatch, **overrides):
    """``draftgen.run`` of ``inputs`` against an aiohttp ``app`` served on loopback, unstreamed,
    calibration off, bounded to 60 s (a hang fails the test); ``overrides`` are RunOptions'."""
    import asyncio

    from draftgen.options import RunOptions
    from draftgen.run.pipeline import run

    monkeypatch.setenv("DRAFTGEN_TEST_KEY", "sk-test")

    async def go():
        runner, base_url = await start_app(app)
        options = RunOptions(
            no_calibrate=True,
            inputs=[str(inputs)],
            model="test/model",
            tokenizer=tokenizer,
            out=out,
            base_url=base_url,
            api_key_env="DRAFTGEN_TEST_KEY",
            stream=False,
            retry_base_delay=0.01,
            progress_interval=3600,
            **overrides,
        )
        try:
            return await asyncio.wait_for(run(options), 60)
        finally:
            await runner.cleanup()

    return asyncio.run(go())

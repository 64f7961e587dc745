"""Peak memory of a run whose answers are all huge: issue #35's trial of oversized and endless
answers at a given concurrency, the run and the simulator each a process of their own.

    .venv/bin/python benchmarks/memory_trial.py endless --concurrency 32
    .venv/bin/python benchmarks/memory_trial.py oversized --bytes 100000000 --concurrency 32
    .venv/bin/python benchmarks/memory_trial.py endless --concurrency 32 --no-stream

Every request of the run is answered with ``--hostile KIND`` (share 1): each is refused at the
byte cap (no --max-tokens: 64 MiB an answer) or at the run's memory budget, once
(``--max-attempts 1``). Prints the run's peak RSS (``wait4``) and its wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TOKENIZER = "fixture:kimi-k2.5"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_simulator(tmp: Path, kind: str, size: int) -> tuple[subprocess.Popen, str]:
    port = free_port()
    args = [sys.executable, "-m", "draftgen.cli", "simulate", "--tokenizer", TOKENIZER]
    args += ["--port", str(port), "--hostile", kind, "--hostile-share", "1"]
    args += ["--hostile-bytes", str(size), "--truth", str(tmp / "truth.jsonl")]
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return process, f"http://127.0.0.1:{port}/api/v1"
        except OSError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError("the simulator did not start")


def measured_run(tmp: Path, base_url: str, prompts: int, concurrency: int, stream: bool):
    """(exit code, peak RSS in bytes, seconds, last line of stderr) of one ``draftgen run``."""
    rows = tmp / "rows.jsonl"
    rows.write_text(
        "".join(
            json.dumps({"id": f"m{i}", "messages": [{"role": "user", "content": f"Q {i}?"}]}) + "\n"
            for i in range(prompts)
        )
    )
    args = [sys.executable, "-m", "draftgen.cli", "run", "--model", "test/model"]
    args += ["--tokenizer", TOKENIZER, "--base-url", base_url, "--api-key-env", "MEMORY_KEY"]
    args += ["--out", str(tmp / "run"), "--input", str(rows), "--no-calibrate"]
    args += ["--concurrency", str(concurrency), "--max-attempts", "1"]
    args += ["--idle-timeout", "30"]
    args += ["--stream" if stream else "--no-stream"]
    began = time.monotonic()
    process = subprocess.Popen(
        args,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "MEMORY_KEY": "sk-memory-trial"},
    )
    err = process.stderr.read().decode()
    _, status, usage = os.wait4(process.pid, 0)
    lines = [line for line in err.splitlines() if line.strip()]
    return (
        os.waitstatus_to_exitcode(status),
        usage.ru_maxrss * 1024,
        time.monotonic() - began,
        lines[-1] if lines else "",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kind", choices=("endless", "oversized"))
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--prompts", type=int, default=None, help="default: the concurrency")
    parser.add_argument("--bytes", type=int, default=100_000_000, help="an oversized answer's")
    parser.add_argument("--no-stream", action="store_true")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        simulator, base_url = start_simulator(tmp, options.kind, options.bytes)
        try:
            code, peak, seconds, last = measured_run(
                tmp,
                base_url,
                options.prompts or options.concurrency,
                options.concurrency,
                not options.no_stream,
            )
        finally:
            simulator.kill()
            simulator.wait()
    print(
        f"{options.kind} ({'no stream' if options.no_stream else 'stream'}), concurrency "
        f"{options.concurrency}: peak RSS {peak / 2**20:,.0f} MiB, {seconds:.1f} s, exit {code}"
    )
    print(f"  {last[:300]}")


if __name__ == "__main__":
    main()

"""draftgen against the openai SDK and against the machine's limits, on the same canned server.

    .venv/bin/python benchmarks/bench.py                 # issue 3 sizes (several minutes)
    .venv/bin/python benchmarks/bench.py --size ci       # reduced sizes, as tests/test_bench.py

Each pipeline runs as its own process tree; wall time, CPU time (user+sys, children included) and
peak RSS of the whole tree are measured from outside. Only ratios between runs of the same
invocation are meaningful: absolute times depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import orjson
import psutil
from common import TOKENIZER, canned_answers, log, prompt_token_counts, write_prompts

HERE = Path(__file__).resolve().parent
PYTHON = sys.executable
SIZES = {
    # prompts, tokens per answer, concurrency; streams, chunks per stream, stream concurrency
    "full": dict(
        prompts=10_000,
        tokens=2800,
        concurrency=2000,
        streams=1000,
        chunks=2000,
        stream_concurrency=500,
    ),
    "ci": dict(
        prompts=1500, tokens=2800, concurrency=500, streams=150, chunks=2000, stream_concurrency=150
    ),
}


@dataclass
class Measure:
    name: str
    wall: float
    cpu: float
    peak_rss_mb: float

    def __add__(self, other: Measure) -> Measure:
        return Measure(
            self.name,
            self.wall + other.wall,
            self.cpu + other.cpu,
            max(self.peak_rss_mb, other.peak_rss_mb),
        )


def measure(
    name: str, argv: list[str], env: dict | None = None, cwd: Path | None = None
) -> Measure:
    """Run ``argv`` to completion; its tree's peak RSS is sampled every 20 ms."""
    started = time.perf_counter()
    # Files, not pipes: a chatty child must never block on a full pipe while it is timed.
    output = tempfile.TemporaryFile()
    process = subprocess.Popen(argv, env=env, cwd=cwd, stdout=output, stderr=subprocess.STDOUT)
    root = psutil.Process(process.pid)
    peak = 0
    exited = threading.Event()

    def sample() -> None:
        nonlocal peak
        # Not process.poll(): it reaps the child when it has exited, and the wait4 below would
        # then fail with "no child processes". Only wait4 reaps; the sampler stops when told.
        while not exited.is_set():
            try:
                tree = [root, *root.children(recursive=True)]
                peak = max(peak, sum(p.memory_info().rss for p in tree))
            except psutil.Error:
                pass  # a process of the tree ended between listing and reading it
            exited.wait(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    # wait4 reports the child's usage including the grandchildren it reaped (a process pool).
    try:
        _, status, usage = os.wait4(process.pid, 0)
    finally:
        exited.set()
    wall = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    sampler.join()
    output.seek(0)
    text = output.read().decode("utf-8", "replace")
    output.close()
    if process.returncode != 0:
        raise SystemExit(f"{name} failed ({process.returncode}):\n{text[-3000:]}")
    # Not usage.ru_maxrss: it counts this process's own RSS from before the child's exec.
    return Measure(name, wall, usage.ru_utime + usage.ru_stime, peak / 2**20)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    def __init__(self, work: Path, counts: Path, answers: Path, chunks: int, *extra: str) -> None:
        self.port = free_port()
        self.process = subprocess.Popen(
            [
                PYTHON,
                str(HERE / "canned_server.py"),
                "--port",
                str(self.port),
                "--counts",
                str(counts),
                "--answers",
                str(answers),
                "--chunks",
                str(chunks),
                *extra,
            ],
            stdout=subprocess.PIPE,
            cwd=HERE,
        )
        if self.process.stdout.readline().strip() != b"ready":
            raise SystemExit("the canned server did not start")
        self.base_url = f"http://127.0.0.1:{self.port}/api/v1"

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()


def prepare(work: Path, name: str, prompts: int, tokens: int) -> tuple[Path, Path, Path]:
    inputs, counts, answers = (
        work / f"{name}.jsonl",
        work / f"{name}.counts",
        work / f"{name}.answers.json",
    )
    write_prompts(inputs, prompts)
    counts.write_bytes(prompt_token_counts(inputs, prompts).tobytes())
    answers.write_bytes(orjson.dumps(canned_answers(tokens)))
    return inputs, counts, answers


def draftgen_pipeline(
    work: Path, name: str, inputs: Path, base_url: str, concurrency: int, stream: bool
) -> Measure:
    run_dir = work / f"{name}-run"
    env = {**os.environ, "OPENROUTER_API_KEY": "bench"}
    run = measure(
        "draftgen run",
        [
            PYTHON,
            "-m",
            "draftgen.cli",
            "run",
            "--input",
            str(inputs),
            "--model",
            "bench/kimi-k2.5",
            "--tokenizer",
            TOKENIZER,
            "--base-url",
            base_url,
            "--out",
            str(run_dir),
            "--concurrency",
            str(concurrency),
            "--stream" if stream else "--no-stream",
        ],
        env=env,
    )
    export = measure(
        "draftgen export",
        [
            PYTHON,
            "-m",
            "draftgen.cli",
            "export",
            str(run_dir),
            "--out",
            str(work / f"{name}-draftgen.jsonl"),
        ],
        env=env,
    )
    log(
        f"  draftgen run {run.wall:.2f} s wall {run.cpu:.2f} s cpu; export {export.wall:.2f} s "
        f"wall {export.cpu:.2f} s cpu"
    )
    total = run + export
    total.name = "draftgen run+export"
    return total


def check_same_rows(draftgen_out: Path, sdk_out: Path, expected: int) -> None:
    """draftgen's export and the SDK baseline must hold the same ids for every prompt."""
    sdk = {}
    with open(sdk_out, "rb") as handle:
        for line in handle:
            row = orjson.loads(line)
            sdk[row["id"]] = row["input_ids"]
    count = 0
    with open(draftgen_out, "rb") as handle:
        for line in handle:
            row = orjson.loads(line)
            if row["input_ids"] != sdk[row["source_id"]]:
                raise SystemExit(f"draftgen and the SDK baseline disagree on {row['source_id']}")
            count += 1
    if count != expected or len(sdk) != expected:
        raise SystemExit(f"rows: draftgen {count}, sdk {len(sdk)}, expected {expected} verified")


def scenario(
    work: Path, name: str, prompts: int, tokens: int, concurrency: int, chunks: int, stream: bool
) -> dict:
    log(f"[{name}] preparing {prompts} prompts of ~{tokens}-token answers")
    inputs, counts, answers = prepare(work, name, prompts, tokens)
    server = Server(work, counts, answers, chunks if stream else 0)
    flag = ["--stream"] if stream else []
    try:
        common = ["--input", str(inputs), "--base-url", server.base_url]
        results = {}
        log(f"[{name}] plain aiohttp fetch")
        results["fetch"] = measure(
            "plain aiohttp fetch",
            [
                PYTHON,
                str(HERE / "plain_fetch.py"),
                *common,
                "--concurrency",
                str(concurrency),
                *flag,
            ],
            cwd=HERE,
        )
        log(f"[{name}] tokenizer batch encode")
        results["encode"] = measure(
            "tokenizer batch encode",
            [
                PYTHON,
                str(HERE / "tokenize_limit.py"),
                "--input",
                str(inputs),
                "--answers",
                str(answers),
            ],
            cwd=HERE,
        )
        log(f"[{name}] draftgen")
        results["draftgen"] = draftgen_pipeline(
            work, name, inputs, server.base_url, concurrency, stream
        )
        log(f"[{name}] openai SDK baseline")
        sdk_out = work / f"{name}-sdk.jsonl"
        results["sdk"] = measure(
            "openai SDK (aiohttp)",
            [
                PYTHON,
                str(HERE / "sdk_baseline.py"),
                *common,
                "--out",
                str(sdk_out),
                "--concurrency",
                str(concurrency),
                *flag,
            ],
            cwd=HERE,
        )
    finally:
        server.stop()
    check_same_rows(work / f"{name}-draftgen.jsonl", sdk_out, prompts)
    limit = max(results["fetch"].wall, results["encode"].wall)
    return {
        "name": name,
        "prompts": prompts,
        "measures": {key: asdict(m) for key, m in results.items()},
        "load_average": os.getloadavg()[0],  # other work on the machine while this ran
        "speedup_vs_sdk": results["sdk"].wall / results["draftgen"].wall,
        "over_limit": results["draftgen"].wall / limit,
        # The same with the encoder's CPU spread evenly over every core: what an idle machine
        # would give (the measured limit is larger whenever other work holds a core).
        "over_ideal_limit": results["draftgen"].wall
        / max(results["fetch"].wall, results["encode"].cpu / (os.cpu_count() or 1)),
    }


def report(result: dict) -> str:
    lines = [
        f"{result['name']}: {result['prompts']} prompts "
        f"(1-minute load average at the end: {result['load_average']:.2f})"
    ]
    lines.append(f"  {'pipeline':<26}{'wall s':>9}{'cpu s':>9}{'peak RSS MB':>13}")
    for m in result["measures"].values():
        lines.append(f"  {m['name']:<26}{m['wall']:>9.2f}{m['cpu']:>9.2f}{m['peak_rss_mb']:>13.0f}")
    lines.append(f"  draftgen speedup over the SDK baseline: {result['speedup_vs_sdk']:.2f}x")
    lines.append(
        f"  draftgen wall / machine limit (max of fetch, encode): {result['over_limit']:.2f}x"
    )
    lines.append(
        f"  draftgen wall / ideal limit (encode CPU over {os.cpu_count()} cores): "
        f"{result['over_ideal_limit']:.2f}x"
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", choices=sorted(SIZES), default="full")
    parser.add_argument("--only", choices=("plain", "stream"))
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--workdir", type=Path, help="keep the files here (default: a temp dir)")
    args = parser.parse_args()
    size = SIZES[args.size]
    results = []
    with tempfile.TemporaryDirectory(prefix="draftgen-bench-") as tmp:
        work = args.workdir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        if args.only in (None, "plain"):
            results.append(
                scenario(
                    work,
                    "plain",
                    size["prompts"],
                    size["tokens"],
                    size["concurrency"],
                    0,
                    stream=False,
                )
            )
            print(report(results[-1]), flush=True)
        if args.only in (None, "stream"):
            results.append(
                scenario(
                    work,
                    "stream",
                    size["streams"],
                    size["chunks"],
                    size["stream_concurrency"],
                    size["chunks"],
                    stream=True,
                )
            )
            print(report(results[-1]), flush=True)
    if args.json:
        args.json.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))


if __name__ == "__main__":
    main()

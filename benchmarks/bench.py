"""draftgen against the openai SDK and against the machine's limits, on the same canned server.

    .venv/bin/python benchmarks/bench.py                 # issue 3/16 sizes (~15 minutes)
    .venv/bin/python benchmarks/bench.py --size ci       # reduced sizes, as tests/test_bench.py
    .venv/bin/python benchmarks/bench.py --only paced    # 2,000 server-paced streams (~2 minutes)

For each tokenizer (by default the fast Kimi fixture and the remote-code one, Moonshot's shape),
the plain scenario measures: the HTTP limit, the tokenizer's own encode and the fast encoder
draftgen proves (the tokenizer limit), draftgen run+export, the same run with every sample failing
its count check, and the openai-SDK pipeline. The stream scenario runs for the first tokenizer,
and so does the paced one: every stream comes at a provider's pace (tokens a second), all of them
at once, and draftgen's run + export is measured against one stream's duration alone on the same
server (``--paced-server simulator``: draftgen's simulator paces them instead of the canned one).
Each pipeline runs as its own process tree; wall time, CPU time (user+sys, children included) and
peak RSS of the whole tree are measured from outside. Only ratios between runs of the same
invocation are meaningful: absolute times depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import aiohttp
import orjson
import psutil
from common import (
    MODEL,
    TOKENIZER_ENV,
    canned_answers,
    log,
    personalise,
    prompt_renderer,
    prompt_token_counts,
    read_prompts,
    write_prompts,
)

HERE = Path(__file__).resolve().parent
PYTHON = sys.executable
SIZES = {
    # prompts, tokens per answer, concurrency; streams, chunks per stream, stream concurrency;
    # paced streams (all at once), their tokens, tokens a second and tokens per SSE event
    "full": dict(
        prompts=10_000,
        tokens=2800,
        concurrency=2000,
        streams=1000,
        chunks=2000,
        stream_concurrency=500,
        paced_streams=2000,
        paced_tokens=2000,
        paced_rate=80.0,  # 25 s a stream
        paced_chunk_tokens=4,
    ),
    "ci": dict(
        prompts=1000,
        tokens=2800,
        concurrency=500,
        streams=150,
        chunks=2000,
        stream_concurrency=150,
        paced_streams=300,
        paced_tokens=800,
        paced_rate=80.0,  # 10 s a stream
        paced_chunk_tokens=4,
    ),
}
PACED_SERVERS = ("canned", "simulator")
TOKENIZERS = ("fixture:kimi-k2.5", "fixture:kimi-k2.5-remote")
# Every answer's usage.completion_tokens is this much off in the failing run: no reading and no
# whitespace repair matches, so every sample takes the slowest path and fails.
FAILING_OFFSET = 7


@dataclass
class Measure:
    name: str
    wall: float
    cpu: float
    peak_rss_mb: float
    note: str = ""  # what the child said after "encoder: " (tokenize_limit.py)

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
    """Run ``argv`` to completion; its tree's peak RSS is sampled every 20 ms.

    Each starts with no dirty page left by an earlier pipeline (``os.sync``): a run or an
    export writes hundreds of MB, and the kernel writing them back, or slowing a writer while
    they wait, made the next pipeline measured here up to ~2 s and a second of system CPU
    slower (four runs of the same draftgen run in a row, each kept: 7.2 s, 7.9 s, 8.7 s, 9.3 s).
    What a pipeline writes itself is still counted in its own time.
    """
    os.sync()
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
    notes = [line for line in text.splitlines() if line.startswith("encoder: ")]
    note = notes[-1].removeprefix("encoder: ") if notes else ""
    return Measure(name, wall, usage.ru_utime + usage.ru_stime, peak / 2**20, note)


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


def prepare(
    work: Path, name: str, prompts: int, tokens: int, spec: str
) -> tuple[Path, Path, Path, Path]:
    inputs, counts, answers, failing = (
        work / f"{name}.jsonl",
        work / f"{name}.counts",
        work / f"{name}.answers.json",
        work / f"{name}.failing.json",
    )
    write_prompts(inputs, prompts)
    counts.write_bytes(prompt_token_counts(inputs, prompts, spec).tobytes())
    canned = canned_answers(tokens, spec=spec)
    answers.write_bytes(orjson.dumps(canned))
    off = [{**a, "completion_tokens": a["completion_tokens"] + FAILING_OFFSET} for a in canned]
    failing.write_bytes(orjson.dumps(off))
    return inputs, counts, answers, failing


def draftgen_pipeline(
    work: Path,
    name: str,
    inputs: Path,
    base_url: str,
    concurrency: int,
    stream: bool,
    spec: str,
    env_extra: dict | None = None,
) -> Measure:
    run_dir = work / f"{name}-run"
    env = {**os.environ, "OPENROUTER_API_KEY": "bench", TOKENIZER_ENV: spec, **(env_extra or {})}
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
            spec,
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
    total.note = f"run {run.wall:.2f} s wall {run.cpu:.2f} s cpu; export {export.wall:.2f} s wall"
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


def count_rows(path: Path) -> int:
    with open(path, "rb") as handle:
        return sum(1 for _ in handle)


def scenario(
    work: Path,
    name: str,
    spec: str,
    prompts: int,
    tokens: int,
    concurrency: int,
    chunks: int,
    stream: bool,
) -> dict:
    log(f"[{name}] preparing {prompts} prompts of ~{tokens}-token answers ({spec})")
    inputs, counts, answers, failing = prepare(work, name, prompts, tokens, spec)
    env = {**os.environ, TOKENIZER_ENV: spec}
    server = Server(work, counts, answers, chunks if stream else 0)
    flag = ["--stream"] if stream else []
    results = {}
    encoder_names = {}
    try:
        common = ["--input", str(inputs), "--base-url", server.base_url]
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
            env=env,
            cwd=HERE,
        )
        for encoder in ("reference", "fast"):
            log(f"[{name}] {encoder} encoder")
            argv = [
                PYTHON,
                str(HERE / "tokenize_limit.py"),
                "--input",
                str(inputs),
                "--answers",
                str(answers),
                "--encoder",
                encoder,
            ]
            results[f"encode_{encoder}"], encoder_names[encoder] = measure_encoder(
                f"encode: {encoder}", argv, env
            )
        log(f"[{name}] draftgen")
        results["draftgen"] = draftgen_pipeline(
            work, name, inputs, server.base_url, concurrency, stream, spec
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
            env=env,
            cwd=HERE,
        )
    finally:
        server.stop()
    check_same_rows(work / f"{name}-draftgen.jsonl", sdk_out, prompts)
    if not stream:
        log(f"[{name}] draftgen, every sample failing its count")
        server = Server(work, counts, failing, 0)
        try:
            results["draftgen_failing"] = draftgen_pipeline(
                work, f"{name}-failing", inputs, server.base_url, concurrency, stream, spec
            )
            results["draftgen_failing"].name = "draftgen, every sample failing"
        finally:
            server.stop()
        if count_rows(work / f"{name}-failing-draftgen.jsonl") != 0:
            raise SystemExit("a sample of the failing run verified")
    limit = max(results["fetch"].wall, results["encode_fast"].wall)
    draftgen = results["draftgen"].wall
    figures = {
        "name": name,
        "tokenizer": spec,
        "prompts": prompts,
        "encoders": encoder_names,
        "measures": {key: asdict(m) for key, m in results.items()},
        "load_average": os.getloadavg()[0],  # other work on the machine while this ran
        "speedup_vs_sdk": results["sdk"].wall / draftgen,
        "over_limit": draftgen / limit,
        # The fast encoder against the tokenizer's own, on the same texts (CPU: both are
        # measured whole, the fast one on every core).
        "fast_encoder_speedup": results["encode_reference"].cpu / results["encode_fast"].cpu,
        "fast_encoder_wall_speedup": results["encode_reference"].wall / results["encode_fast"].wall,
    }
    if "draftgen_failing" in results:
        figures["failing_over_verifying"] = results["draftgen_failing"].wall / draftgen
    return figures


class PacedSimulator:
    """draftgen's simulator streaming at ``rate`` tokens a second (``paced_server.py``)."""

    def __init__(self, spec: str, tokens: int, rate: float, chunk_tokens: int, truth: Path) -> None:
        port = free_port()
        self.process = subprocess.Popen(
            [
                PYTHON,
                str(HERE / "paced_server.py"),
                "--port",
                str(port),
                "--tokenizer",
                spec,
                "--tokens",
                str(tokens),
                "--tokens-per-second",
                str(rate),
                "--chunk-tokens",
                str(chunk_tokens),
                "--truth",
                str(truth),
            ],
            stdout=subprocess.PIPE,
            cwd=HERE,
        )
        if b"listening on" not in self.process.stdout.readline():
            raise SystemExit("the simulator did not start")
        self.base_url = f"http://127.0.0.1:{port}/api/v1"

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()


def one_stream(base_url: str, index: int) -> float:
    """Seconds from sending one streaming request to the end of its answer, on an idle server.

    The prompt's index is outside the run's, so it is nobody's answer (and the simulator counts
    no attempt against a prompt of the run).
    """
    body = orjson.dumps(
        {
            "model": MODEL,
            "messages": [{"role": "user", "content": f"[q{index:07d}] One stream, alone."}],
            "stream": True,
        }
    )

    async def fetch() -> float:
        async with aiohttp.ClientSession() as session:
            started = time.perf_counter()
            async with session.post(
                base_url + "/chat/completions",
                data=body,
                headers={"Authorization": "Bearer bench"},
            ) as response:
                response.raise_for_status()
                data = await response.read()
            took = time.perf_counter() - started
        if not data.rstrip().endswith(b"data: [DONE]"):
            raise SystemExit("the single stream did not end with [DONE]")
        return took

    return asyncio.run(fetch())


def server_cpu(process: subprocess.Popen) -> float:
    times = psutil.Process(process.pid).cpu_times()
    return times.user + times.system


def check_reference_ids(export: Path, inputs: Path, answers: list[dict], spec: str) -> int:
    """Every exported row's ids against the tokenizer's own encode of the prompt and the answer
    the canned server sent it; the number of rows."""
    from draftgen.profiles import detect_profile
    from draftgen.tokens.fast_encoder import reference_encode
    from draftgen.tokens.tokenizer import full_vocab, load_tokenizer

    tokenizer = load_tokenizer(spec)
    profile = detect_profile(full_vocab(tokenizer))
    render = prompt_renderer(tokenizer)
    messages = {row["id"]: row["messages"] for row in read_prompts(inputs)}
    count = 0
    with open(export, "rb") as handle:
        for line in handle:
            row = orjson.loads(line)
            index = int(row["source_id"].removeprefix("p"))
            answer = answers[index % len(answers)]
            text = personalise(
                answer["reasoning"] + profile.think_end + answer["content"] + profile.end_of_turn,
                index,
            )
            expected = reference_encode(tokenizer, render(messages[row["source_id"]]))
            expected += reference_encode(tokenizer, text)
            if row["input_ids"] != expected:
                raise SystemExit(f"{row['source_id']}: ids differ from the tokenizer's own")
            count += 1
    return count


def check_truth_ids(export: Path, truth: Path) -> int:
    """Every exported row's ids against the simulator's ground truth (the ids its model produced,
    which it checked are the tokenizer's own encoding of the text: ``text_exact``)."""
    records = {}
    with open(truth, "rb") as handle:
        for line in handle:
            record = orjson.loads(line)
            at = record["prompt_text"].find("[q")
            source_id = f"p{int(record['prompt_text'][at + 2 : at + 9])}"
            if source_id in records:
                raise SystemExit(f"{source_id} was answered twice")
            records[source_id] = record
    count = 0
    with open(export, "rb") as handle:
        for line in handle:
            row = orjson.loads(line)
            record = records[row["source_id"]]
            if not record["text_exact"]:
                raise SystemExit(f"{row['source_id']}: the simulator's text is not exact")
            if row["input_ids"] != record["prompt_ids"] + record["completion_ids"]:
                raise SystemExit(f"{row['source_id']}: ids differ from the simulator's")
            count += 1
    return count


def paced_scenario(
    work: Path,
    spec: str,
    streams: int,
    tokens: int,
    rate: float,
    chunk_tokens: int,
    server_kind: str,
) -> dict:
    """``streams`` paced streams at once: draftgen's run + export against one stream's duration.

    The canned server's CPU is negligible (pre-serialised answers); the simulator renders,
    generates and checks every answer, on the same cores as draftgen: its CPU during the run is
    reported beside the figures.
    """
    name = f"paced-{server_kind}"
    log(
        f"[{name}] {streams} streams of {tokens} tokens at {rate:g} tokens/s, "
        f"{chunk_tokens} a chunk ({spec})"
    )
    inputs = work / f"{name}.jsonl"
    write_prompts(inputs, streams)
    truth = work / f"{name}.truth.jsonl"
    answers: list[dict] = []
    if server_kind == "canned":
        counts, answers_path = work / f"{name}.counts", work / f"{name}.answers.json"
        counts.write_bytes(prompt_token_counts(inputs, streams, spec).tobytes())
        answers = canned_answers(tokens, spec=spec)
        answers_path.write_bytes(orjson.dumps(answers))
        chunks = max(2, tokens // chunk_tokens)

        def start(truth: Path) -> Server:
            return Server(work, counts, answers_path, chunks, "--tokens-per-second", str(rate))
    else:

        def start(truth: Path) -> PacedSimulator:
            truth.unlink(missing_ok=True)
            return PacedSimulator(spec, tokens, rate, chunk_tokens, truth)

    env = {**os.environ, TOKENIZER_ENV: spec}
    results = {}
    server = start(truth)
    try:
        log(f"[{name}] one stream alone")
        single = one_stream(server.base_url, streams)
        log(f"  {single:.2f} s")
        log(f"[{name}] draftgen")
        cpu_before = server_cpu(server.process)
        results["draftgen"] = draftgen_pipeline(
            work, name, inputs, server.base_url, streams, True, spec
        )
        draftgen_server_cpu = server_cpu(server.process) - cpu_before
    finally:
        server.stop()
    log(f"[{name}] plain aiohttp fetch")
    # A fresh server: the simulator counts attempts per prompt, and keeps its own truth.
    server = start(work / f"{name}.fetch-truth.jsonl")
    try:
        cpu_before = server_cpu(server.process)
        results["fetch"] = measure(
            "plain aiohttp fetch",
            [
                PYTHON,
                str(HERE / "plain_fetch.py"),
                "--input",
                str(inputs),
                "--base-url",
                server.base_url,
                "--concurrency",
                str(streams),
                "--stream",
            ],
            env=env,
            cwd=HERE,
        )
        fetch_server_cpu = server_cpu(server.process) - cpu_before
    finally:
        server.stop()
    log(f"[{name}] checking every id")
    export = work / f"{name}-draftgen.jsonl"
    if server_kind == "canned":
        verified = check_reference_ids(export, inputs, answers, spec)
    else:
        verified = check_truth_ids(export, truth)
    if verified != streams:
        raise SystemExit(f"{verified} rows verified of {streams}")
    draftgen = results["draftgen"].wall
    return {
        "name": name,
        "tokenizer": spec,
        "prompts": streams,
        "tokens": tokens,
        "tokens_per_second": rate,
        "chunk_tokens": chunk_tokens,
        "server": server_kind,
        "measures": {key: asdict(m) for key, m in results.items()},
        "load_average": os.getloadavg()[0],
        "single_stream": single,
        "server_cpu_draftgen": draftgen_server_cpu,
        "server_cpu_fetch": fetch_server_cpu,
        "paced_over_single": draftgen / single,
        "fetch_over_single": results["fetch"].wall / single,
        "paced_over_fetch": draftgen / results["fetch"].wall,
    }


def paced_report(result: dict) -> str:
    m = result["measures"]
    return "\n".join(
        [
            f"{result['name']}: {result['prompts']} streams at once, {result['tokens']} tokens "
            f"at {result['tokens_per_second']:g} tokens/s, {result['chunk_tokens']} a chunk, "
            f"{result['tokenizer']} (1-minute load average at the end: "
            f"{result['load_average']:.2f})",
            f"  one stream alone                    {result['single_stream']:9.2f} s",
            f"  {'pipeline':<32}{'wall s':>9}{'cpu s':>9}{'peak RSS MB':>13}{'server cpu s':>14}",
            f"  {m['fetch']['name']:<32}{m['fetch']['wall']:>9.2f}{m['fetch']['cpu']:>9.2f}"
            f"{m['fetch']['peak_rss_mb']:>13.0f}{result['server_cpu_fetch']:>14.2f}",
            f"  {m['draftgen']['name']:<32}{m['draftgen']['wall']:>9.2f}"
            f"{m['draftgen']['cpu']:>9.2f}{m['draftgen']['peak_rss_mb']:>13.0f}"
            f"{result['server_cpu_draftgen']:>14.2f}",
            f"    ({m['draftgen']['note']})",
            f"  draftgen run+export / one stream: {result['paced_over_single']:.2f}x",
            f"  plain fetch / one stream: {result['fetch_over_single']:.2f}x; draftgen / plain "
            f"fetch: {result['paced_over_fetch']:.2f}x",
        ]
    )


def measure_encoder(name: str, argv: list[str], env: dict) -> tuple[Measure, str]:
    """``measure`` of tokenize_limit.py, and the codec it named on stderr (fast only)."""
    result = measure(name, argv, env=env, cwd=HERE)
    return result, result.note


def report(result: dict) -> str:
    lines = [
        f"{result['name']}: {result['prompts']} prompts, {result['tokenizer']} "
        f"(1-minute load average at the end: {result['load_average']:.2f})"
    ]
    if result["encoders"].get("fast"):
        lines.append(f"  fast encoder: {result['encoders']['fast']}")
    lines.append(f"  {'pipeline':<32}{'wall s':>9}{'cpu s':>9}{'peak RSS MB':>13}")
    for m in result["measures"].values():
        lines.append(f"  {m['name']:<32}{m['wall']:>9.2f}{m['cpu']:>9.2f}{m['peak_rss_mb']:>13.0f}")
    lines.append(
        f"  fast encoder over the tokenizer's own: {result['fast_encoder_speedup']:.1f}x less CPU, "
        f"{result['fast_encoder_wall_speedup']:.1f}x less wall"
    )
    lines.append(f"  draftgen speedup over the SDK baseline: {result['speedup_vs_sdk']:.2f}x")
    lines.append(
        f"  draftgen wall / machine limit (max of fetch, fast encode): {result['over_limit']:.2f}x"
    )
    if "failing_over_verifying" in result:
        lines.append(
            "  every sample failing / every sample verifying (draftgen wall): "
            f"{result['failing_over_verifying']:.2f}x"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", choices=sorted(SIZES), default="full")
    parser.add_argument("--only", choices=("plain", "stream", "paced"))
    parser.add_argument(
        "--paced-server",
        choices=PACED_SERVERS,
        default="canned",
        help="who paces the streams: the canned server (its CPU negligible, the default) or "
        "draftgen's simulator (renders and generates every answer on the same cores)",
    )
    parser.add_argument(
        "--tokenizer",
        action="append",
        help=f"a tokenizer spec, repeatable (default: {', '.join(TOKENIZERS)})",
    )
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--workdir", type=Path, help="keep the files here (default: a temp dir)")
    args = parser.parse_args()
    size = SIZES[args.size]
    specs = args.tokenizer or list(TOKENIZERS)
    results = []
    with tempfile.TemporaryDirectory(prefix="draftgen-bench-") as tmp:
        work = args.workdir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        for index, spec in enumerate(specs):
            suffix = "" if index == 0 else f"-{spec.split(':')[-1]}"
            if args.only in (None, "plain"):
                results.append(
                    scenario(
                        work,
                        "plain" + suffix,
                        spec,
                        size["prompts"],
                        size["tokens"],
                        size["concurrency"],
                        0,
                        stream=False,
                    )
                )
                print(report(results[-1]), flush=True)
            if args.only in (None, "stream") and index == 0:
                results.append(
                    scenario(
                        work,
                        "stream",
                        spec,
                        size["streams"],
                        size["chunks"],
                        size["stream_concurrency"],
                        size["chunks"],
                        stream=True,
                    )
                )
                print(report(results[-1]), flush=True)
            if args.only in (None, "paced") and index == 0:
                results.append(
                    paced_scenario(
                        work,
                        spec,
                        size["paced_streams"],
                        size["paced_tokens"],
                        size["paced_rate"],
                        size["paced_chunk_tokens"],
                        args.paced_server,
                    )
                )
                print(paced_report(results[-1]), flush=True)
    if args.json:
        args.json.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))


if __name__ == "__main__":
    main()

"""Memory as the input grows, and how soon a resume over a big store starts generating.

    .venv/bin/python benchmarks/scale.py                       # 10k, 100k, 1M rows; resume 100k
    .venv/bin/python benchmarks/scale.py --sizes 10000 --resume 10000
    .venv/bin/python benchmarks/scale.py --sizes --resume 100000 --resume-runs 3

Answers are short (~40 tokens) so the run measures the rows, not the tokenizer. Runs of up to
``--distinct-limit`` rows ask that many distinct prompts; longer inputs repeat prompts under
distinct ids (every row is still read, planned and deduplicated, and its answer looked up).
Resume: a store of N completions, then the same input plus new rows; the time reported is from
launching ``draftgen run`` to the canned server seeing its first request.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import orjson
from bench import PYTHON, Server, measure
from common import MODEL, TOKENIZER, canned_answers, log, prompt_token_counts, write_prompts


def draftgen_run(inputs: Path, run_dir: Path, base_url: str, concurrency: int = 2000):
    env = {**os.environ, "OPENROUTER_API_KEY": "bench"}
    return measure(
        f"draftgen run {inputs.name}",
        [PYTHON, "-m", "draftgen.cli", "run", "--input", str(inputs), "--model", MODEL,
         "--tokenizer", TOKENIZER, "--base-url", base_url, "--out", str(run_dir),
         "--concurrency", str(concurrency), "--no-stream"],
        env=env,
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="*", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--distinct-limit", type=int, default=100_000)
    parser.add_argument("--resume", type=int, default=100_000, help="0 to skip")
    parser.add_argument(
        "--resume-runs", type=int, default=1, help="resumes timed, each from the same store"
    )
    parser.add_argument("--workdir", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="draftgen-scale-") as tmp:
        work = args.workdir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        distinct = max([*[min(n, args.distinct_limit) for n in args.sizes], args.resume + 1000])
        log(f"preparing {distinct} distinct prompts")
        write_prompts(work / "distinct.jsonl", distinct)
        counts = prompt_token_counts(work / "distinct.jsonl", distinct)
        (work / "counts").write_bytes(counts.tobytes())
        (work / "answers.json").write_bytes(orjson.dumps(canned_answers(40)))
        first = work / "first-request"
        server = Server(work, work / "counts", work / "answers.json", 0, "--first-request",
                        str(first))  # fmt: skip
        try:
            for size in args.sizes:
                inputs = work / f"rows-{size}.jsonl"
                write_prompts(inputs, size, distinct=min(size, args.distinct_limit))
                run_dir = work / f"run-{size}"
                log(f"run over {size} rows")
                m = draftgen_run(inputs, run_dir, server.base_url)
                print(f"{size:>9} rows  wall {m.wall:7.1f} s  cpu {m.cpu:7.1f} s  "
                      f"peak RSS {m.peak_rss_mb:6.0f} MB", flush=True)  # fmt: skip
                shutil.rmtree(run_dir)
                inputs.unlink()
            if args.resume:
                stored = work / f"resume-{args.resume}.jsonl"
                write_prompts(stored, args.resume)
                run_dir = work / "run-resume"
                pristine = work / "run-resume-stored"
                for old in (run_dir, pristine):  # a --workdir used before
                    shutil.rmtree(old, ignore_errors=True)
                log(f"storing {args.resume} completions")
                draftgen_run(stored, run_dir, server.base_url)
                grown = work / f"resume-{args.resume}-plus.jsonl"
                write_prompts(grown, args.resume + 1000)
                shutil.copytree(run_dir, pristine)
                for _ in range(args.resume_runs):
                    shutil.rmtree(run_dir)
                    shutil.copytree(pristine, run_dir)
                    first.unlink(missing_ok=True)
                    started = time.time()
                    m = draftgen_run(grown, run_dir, server.base_url)
                    waited = float(first.read_text()) - started
                    print(f"resume over {args.resume} stored completions: first request after "
                          f"{waited:.2f} s (whole run {m.wall:.1f} s, peak RSS "
                          f"{m.peak_rss_mb:.0f} MB, load average {os.getloadavg()[0]:.2f})",
                          flush=True)  # fmt: skip
        finally:
            server.stop()


if __name__ == "__main__":
    sys.exit(main())

"""What ``draftgen merge`` and export cost on big stores, and the store writer's commit rate.

    .venv/bin/python benchmarks/merge_scale.py                         # 3 shards x 100k rows
    .venv/bin/python benchmarks/merge_scale.py --shards 4 --rows 20000 --answer-tokens 2800

Each shard store holds ``--rows`` completions (an answer of ``--answer-tokens`` tokens at ~4
bytes of text a token, its usage and the record of the message as received, stored by the live
writer's own statements) with a verified sample of prompt + answer ids, written straight into
SQLite in draftgen's schema (no generation); the merge is ``draftgen.store.merge.merge_runs``, then
the merged store is exported (``specforge`` JSONL and ``parquet``). Last, ``--writer-rows``
completions go through ``CompletionWriter`` (draftgen's live writer: WAL, ``synchronous=FULL``,
one transaction per queue drain). docs/scaling.md scales these figures to 10M prompts.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import sqlite3
import tempfile
import time
from array import array
from pathlib import Path

import orjson

from draftgen.outputs.export import export
from draftgen.records import Completion
from draftgen.store.database import (
    DB_NAME,
    INSERT_SAMPLE,
    SCHEMA,
    CompletionWriter,
    Store,
    completion_statements,
)
from draftgen.store.merge import merge_runs

PROMPT_TOKENS = 300


def answer(key: str, content: str, answer_tokens: int) -> Completion:
    """A completion as an OpenRouter answer gives it: the text, its usage and the message as
    received (the store's record of it, where the copies of the text become references)."""
    usage = {
        "prompt_tokens": PROMPT_TOKENS,
        "completion_tokens": answer_tokens,
        "total_tokens": PROMPT_TOKENS + answer_tokens,
        "cost": 0.0021,
        "prompt_tokens_details": {"cached_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0},
    }
    message = {"role": "assistant", "content": content, "refusal": None, "reasoning": None}
    return Completion(f"gen-{key}", "P", "m", None, content, None, "stop", "stop", usage, message)


def build_shard(run_dir: Path, index: int, count: int, rows: int, answer_tokens: int) -> None:
    run_dir.mkdir(parents=True)
    db = sqlite3.connect(run_dir / DB_NAME, isolation_level=None)
    db.executescript(SCHEMA)
    db.execute("PRAGMA synchronous=OFF")
    settings = orjson.dumps({"model": "bench/model"}, option=orjson.OPT_SORT_KEYS).decode()
    meta = {"settings": settings, "tokenizer": "t", "profile": "p", "reconstruction": "r"}
    meta["shard"] = f"{index}/{count}"
    db.executemany("INSERT INTO meta VALUES (?, ?)", meta.items())
    rng = random.Random(index)
    length = PROMPT_TOKENS + answer_tokens
    db.execute("BEGIN")
    for row in range(rows):
        key = f"{index:04d}{row:028d}"
        content = f"answer {key} " + "word " * (answer_tokens * 4 // 5)
        request = orjson.dumps({"messages": [{"role": "user", "content": "q " * PROMPT_TOKENS}]})
        completion = answer(key, content, answer_tokens)
        completion.endpoint, completion.endpoint_latency = "http://127.0.0.1:1/v1", 0.1
        # The statements the live writer runs (the completion, its usage and record).
        for statement, values in completion_statements(
            key, key, 0, request, completion, 1, [], 0.1
        ):
            db.execute(statement, values)
        # Ids below 65,536 at random: about as compressible as real token ids, not less.
        ids = array("i", array("H", rng.randbytes(2 * length))).tobytes()
        db.execute(INSERT_SAMPLE, (key, ids, PROMPT_TOKENS, 1, "ok", "", 0, "text", ""))
    db.execute("COMMIT")
    db.close()


def writer_rate(run_dir: Path, rows: int, answer_tokens: int, in_flight: int = 2000) -> float:
    """Completions a second through CompletionWriter with ``in_flight`` awaiting at once."""
    Store(run_dir).close()
    content = "word " * (answer_tokens * 4 // 5)
    request = orjson.dumps({"messages": [{"role": "user", "content": "q " * PROMPT_TOKENS}]})

    async def write() -> float:
        writer = CompletionWriter(run_dir / DB_NAME)
        started = time.monotonic()

        async def one(row: int) -> None:
            completion = answer(f"{row:032d}", content, answer_tokens)
            await writer.add_completion(f"{row:032d}", str(row), 0, request, completion, 1, [], 0)

        for first in range(0, rows, in_flight):
            await asyncio.gather(*(one(r) for r in range(first, min(rows, first + in_flight))))
        seconds = time.monotonic() - started
        writer.close()
        return seconds

    return rows / asyncio.run(write())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=3)
    parser.add_argument("--rows", type=int, default=100_000, help="completions per shard")
    parser.add_argument("--answer-tokens", type=int, default=40)
    parser.add_argument("--writer-rows", type=int, default=50_000)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="draftgen-merge-bench-"))
    try:
        started = time.monotonic()
        shards = [work / f"shard{i}" for i in range(args.shards)]
        for index, shard in enumerate(shards):
            build_shard(shard, index, args.shards, args.rows, args.answer_tokens)
        built = time.monotonic() - started
        summary = merge_runs(shards, work / "merged")
        total = args.shards * args.rows
        size = (work / "merged" / DB_NAME).stat().st_size
        print(
            f"{args.shards} shards x {args.rows} rows ({args.answer_tokens}-token answers), "
            f"built in {built:.1f} s"
        )
        print(
            f"merge: {summary.seconds:.2f} s, {total / summary.seconds:,.0f} rows/s, merged store "
            f"{size / 1e6:.1f} MB ({size / total:,.0f} bytes a row)"
        )
        with Store(work / "merged", create=False) as store:
            for fmt, name in (("specforge", "rows.jsonl"), ("parquet", "rows.parquet")):
                started = time.monotonic()
                written = export(store, fmt, work / name)
                seconds = time.monotonic() - started
                size = (work / name).stat().st_size
                print(
                    f"export {fmt}: {seconds:.2f} s, {written / seconds:,.0f} rows/s, "
                    f"{size / 1e6:.1f} MB ({size / written:,.0f} bytes a row)"
                )
        shutil.rmtree(work / "merged")
        rate = writer_rate(work / "writer", args.writer_rows, args.answer_tokens)
        size = (work / "writer" / DB_NAME).stat().st_size
        print(
            f"CompletionWriter: {args.writer_rows} completions at {rate:,.0f} a second, store "
            f"{size / 1e6:.1f} MB ({size / args.writer_rows:,.0f} bytes a completion, no sample)"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

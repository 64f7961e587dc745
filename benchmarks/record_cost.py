"""What the record of paid answers (``draftgen.journal``, an fsync'd append before every commit)
costs the write path, against the same writer with the record switched off, in the same run.

    .venv/bin/python benchmarks/record_cost.py                     # 2,000 answers of 2,800 tokens
    .venv/bin/python benchmarks/record_cost.py --answers 500 --answer-tokens 300 --repeats 5

Two loads through ``CompletionWriter``: every answer at once (the writer groups what is queued:
one fsync of the record and one commit per group), and one answer at a time (a group each: the
record's fsync added to every commit, its worst case). Prints each time and the ratio with/without.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from draftgen.records import Completion
from draftgen.store import journal
from draftgen.store.database import CompletionWriter, Store


def answer(tokens: int) -> Completion:
    text = "word " * tokens  # ~4-5 bytes a token, as in merge_scale.py
    return Completion("g", "p", "m", None, text, None, "stop", None, usage={"prompt_tokens": 300})


async def write_all(writer: CompletionWriter, count: int, tokens: int, at_once: bool) -> None:
    made = answer(tokens)
    request = b'{"messages": [{"role": "user", "content": "' + b"q" * 1200 + b'"}]}'
    if at_once:
        await asyncio.gather(
            *(
                writer.add_completion(f"k{i}", "s", i, request, made, 1, [], 0.0)
                for i in range(count)
            )
        )
        return
    for i in range(count):
        await writer.add_completion(f"k{i}", "s", i, request, made, 1, [], 0.0)


def timed(count: int, tokens: int, at_once: bool, recorded: bool) -> float:
    original = journal.Journal.append
    if not recorded:
        journal.Journal.append = lambda self, statements: None
    try:
        with tempfile.TemporaryDirectory(dir=Path.cwd()) as scratch:
            store = Store.open_run(Path(scratch) / "run")
            writer = store.open_writer()
            started = time.perf_counter()
            asyncio.run(write_all(writer, count, tokens, at_once))
            elapsed = time.perf_counter() - started
            writer.close()
            store.close()
    finally:
        journal.Journal.append = original
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--answers", type=int, default=2000)
    parser.add_argument("--answer-tokens", type=int, default=2800)
    parser.add_argument("--repeats", type=int, default=3, help="runs of each; the median is shown")
    args = parser.parse_args()
    for at_once, what in ((True, "all at once (grouped)"), (False, "one at a time")):
        count = args.answers if at_once else max(args.answers // 10, 50)
        times = {True: [], False: []}
        for _ in range(args.repeats):  # interleaved: a busy moment costs both alike
            for recorded in (False, True):
                times[recorded].append(timed(count, args.answer_tokens, at_once, recorded))
        without, with_ = statistics.median(times[False]), statistics.median(times[True])
        print(
            f"{count} answers of {args.answer_tokens} tokens, {what}: without the record "
            f"{without:.2f} s ({count / without:,.0f}/s), with it {with_:.2f} s "
            f"({count / with_:,.0f}/s): x{with_ / without:.2f}"
        )


if __name__ == "__main__":
    main()

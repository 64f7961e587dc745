"""Shared tools of the batch tests: a simulator with batches, run --batch arguments, and the
ledger of the simulator's batch log that proves no row was sent or paid twice."""

from __future__ import annotations

import json
import sqlite3
from collections import defaultdict
from pathlib import Path

from conftest import SimProcess, run_args

TOKENIZER = "fixture:kimi-k2.5"
QUIRKS = [("drift", 0.05), ("leak_eot", 0.05), ("no_split", 0.05)]


def batch_sim(tmp: Path, *, faults=(), seconds=0.6, visible_after=0.5, extra=()) -> SimProcess:
    """A simulator whose batches take ``seconds`` and log to ``tmp/batches-*.jsonl``."""
    args = ["--batch-seconds", str(seconds), "--batch-visible-after", str(visible_after)]
    log = tmp / f"batches-{len(list(tmp.glob('batches-*.jsonl')))}.jsonl"
    args += ["--batch-log", str(log)]
    for name, rate in faults:
        args += ["--batch-fault", f"{name}={rate}"]
    sim = SimProcess(tmp, TOKENIZER, quirks=QUIRKS, extra=[*args, *extra])
    sim.batch_log = log
    return sim


def batch_args(sim: SimProcess, inputs: list[Path], out: Path, *extra: str) -> list[str]:
    return run_args(
        sim, inputs, out, TOKENIZER, "--batch", "--batch-poll", "0.2", "--batch-grace", "3", *extra
    )


def read_log(sim: SimProcess) -> list[dict]:
    path = sim.batch_log
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def check_never_twice(events: list[dict]) -> dict:
    """Every request body was put in a new batch only after each earlier batch holding it had
    ended without answering it, and answered at most once: nothing was sent or paid twice.
    Returns counts (bodies, batches, bodies sent more than once)."""
    ends = {e["batch_id"]: e for e in events if e["event"] == "end"}
    sent: dict[str, list[dict]] = defaultdict(list)  # body -> creates holding it, in order
    for event in events:
        if event["event"] != "create":
            continue
        for row in event["rows"]:
            for earlier in sent[row["body_sha256"]]:
                end = ends.get(earlier["batch_id"])
                assert end is not None and end["at"] <= event["at"], (
                    f"body {row['body_sha256'][:12]} was sent in {event['batch_id']} while "
                    f"{earlier['batch_id']} could still answer it"
                )
                assert earlier["custom_id"] not in end["delivered"], (
                    f"body {row['body_sha256'][:12]} was answered by {earlier['batch_id']} and "
                    f"sent again in {event['batch_id']}"
                )
            sent[row["body_sha256"]].append({"batch_id": event["batch_id"], **row})
    answered: dict[str, int] = defaultdict(int)
    by_custom = {r["custom_id"]: body for body, rows in sent.items() for r in rows}
    for end in ends.values():
        for custom in end["delivered"]:
            answered[by_custom[custom]] += 1
    twice = [body for body, count in answered.items() if count > 1]
    assert not twice, f"{len(twice)} bodies were answered (and paid) twice"
    return {
        "bodies": len(sent),
        "batches": sum(1 for e in events if e["event"] == "create"),
        "sent_again": sum(1 for rows in sent.values() if len(rows) > 1),
    }


def store_rows(out: Path, sql: str) -> list[tuple]:
    db = sqlite3.connect(out / "draftgen.sqlite")
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()

"""Merge: the stores of several run directories (shards, or runs of one suite) into a new one.

Runs must share their generation settings, tokenizer and profile. A key stored by more than one
run keeps the verified sample, else the completion, else the failure (the first run listed wins a
tie), and every keyed table is copied from the run that won the key, column by column by name, so
older stores with fewer columns merge too. Tables without keys are concatenated; so are the runs'
``rejected.jsonl``.
"""

from __future__ import annotations

import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

import orjson

from draftgen.errors import DraftgenError
from draftgen.inputs.shard import ALL
from draftgen.store.database import (
    DB_NAME,
    REJECTED_NAME,
    SIMULATED,
    RunLock,
    Store,
    StoreError,
    mend_if_idle,
)
from draftgen.store.journal import store_damage

# Meta that must agree between runs: what a sample means depends on it.
AGREEING_META = ("tokenizer", "profile", "tokenizer_digest")
# Money each run spent whatever became of its keys (answers refused for their usage): every
# run's rows are kept, not only those of the keys it won.
SPENT_TABLES = ("refused_answers",)
# How a run's record of a key ranks: the best one is kept.
RANK_VERIFIED, RANK_COMPLETED, RANK_FAILED = 3, 2, 1


class MergeError(DraftgenError, ValueError):
    """Runs that cannot be merged as asked; the message names the run directories and the fix."""


@dataclass
class MergeSummary:
    out: Path
    runs: int
    completions: int
    failures: int
    samples: int
    rejected: int
    shared_keys: int  # keys more than one run had (one copy kept)
    shard: str  # the merged run's shard label: "all" when the shards cover every row
    seconds: float


def merge_runs(sources: list[Path], out: Path, *, replace: bool = False) -> MergeSummary:
    """Merge the run directories ``sources`` into ``out``; ``replace`` lets an existing store
    in ``out`` be swapped for the merge (the Ray runner re-merging after a resume)."""
    started = time.monotonic()
    sources = [Path(source) for source in sources]
    out = Path(out)
    for source in sources:
        # A shard's store truncated, overwritten or deleted is rebuilt from its record first,
        # as status and export do; one damaged with no record is named, not read.
        _readable(source, mend_if_idle)
        _readable(source, _whole)
    _check_paths(sources, out, replace)
    metas = [_readable(source, _read_meta) for source in sources]
    meta = _agreed_meta(sources, metas)  # before --out is made: a refusal leaves nothing
    locks = [RunLock(path) for path in (*sources, out)]
    out.mkdir(parents=True, exist_ok=True, mode=0o700)
    acquired = []
    try:
        for lock in locks:
            lock.acquire()
            acquired.append(lock)
        partial = out / f".{DB_NAME}.merging"
        partial.unlink(missing_ok=True)
        with Store.unjournalled(partial) as merged:
            shared = _choose_keys(merged, sources)
            for index, source in enumerate(sources):
                _copy_run(merged, index, source, samples="reconstruction" in meta)
            label = merged_shard_label([m.get("shard", ALL) for m in metas])
            meta["shard"] = label
            meta["merged_from"] = orjson.dumps([str(s) for s in sources]).decode()
            for name, value in meta.items():
                merged.settings.set_meta(name, value)
            counts = {
                table: merged.tables.row_count(table)
                for table in ("completions", "failures", "samples")
            }
        with open(partial, "rb+") as handle:
            os.fsync(handle.fileno())
        for suffix in ("-wal", "-shm"):
            (out / (DB_NAME + suffix)).unlink(missing_ok=True)
        os.replace(partial, out / DB_NAME)
        rejected = _merge_rejected(sources, out)
    finally:
        for lock in acquired:
            lock.release()
    return MergeSummary(
        out=out,
        runs=len(sources),
        completions=counts["completions"],
        failures=counts["failures"],
        samples=counts["samples"],
        rejected=rejected,
        shared_keys=shared,
        shard=label,
        seconds=time.monotonic() - started,
    )


def merged_shard_label(labels: list[str]) -> str:
    """``all`` when the runs read every row between them (an unsharded run, or shards 0..N-1 of
    one N), else the shards they hold, e.g. ``0/3,2/3``."""
    held = {part for label in labels for part in label.split(",")}
    if ALL in held:
        return ALL
    counts = {part.partition("/")[2] for part in held}
    if len(counts) == 1:
        count = int(counts.pop())
        if held == {f"{i}/{count}" for i in range(count)}:
            return ALL
    return ",".join(sorted(held, key=lambda part: tuple(int(n) for n in part.split("/"))[::-1]))


def _check_paths(sources: list[Path], out: Path, replace: bool) -> None:
    if not sources:
        raise MergeError("merge needs at least one RUN_DIR to read")
    seen: set[Path] = set()
    for source in sources:
        if not (source / DB_NAME).is_file():
            raise MergeError(f"{source} holds no draftgen run ({DB_NAME} is missing)")
        resolved = source.resolve()
        if resolved in seen:
            raise MergeError(f"{source} is listed twice; list each run directory once")
        seen.add(resolved)
    if out.resolve() in seen:
        raise MergeError(f"--out {out} is one of the runs merged; choose a new directory")
    if (out / DB_NAME).exists() and not replace:
        raise MergeError(
            f"--out {out} already holds a draftgen run; choose a new directory or remove it"
        )


def _readable(source: Path, read):
    """``read(source)``, a store that cannot be read (damaged with no record to rebuild it from)
    named in one sentence."""
    try:
        return read(source)
    except (sqlite3.DatabaseError, StoreError) as exc:
        raise MergeError(
            f"{source}'s store cannot be read ({exc}) and no record (draftgen.journal) rebuilt "
            "it; merge the other runs, or run that one again"
        ) from None


def _whole(source: Path) -> None:
    damage = store_damage(source / DB_NAME)
    if damage:
        raise StoreError(f"it is {damage}")


def _read_meta(source: Path) -> dict[str, str]:
    with Store.as_found(source) as store:
        return store.settings.all_meta()


def _agreed_meta(sources: list[Path], metas: list[dict[str, str]]) -> dict[str, str]:
    """The merged run's meta: the first run's, once every run is checked to agree with it."""
    first, base = sources[0], metas[0]
    base_settings = orjson.loads(base.get("settings", "{}"))
    for source, meta in zip(sources[1:], metas[1:], strict=True):
        settings = orjson.loads(meta.get("settings", "{}"))
        for name in sorted(set(base_settings) | set(settings)):
            if base_settings.get(name) != settings.get(name):
                raise MergeError(
                    f"{first} and {source} were generated with different {name} "
                    f"({base_settings.get(name)!r} and {settings.get(name)!r}); merge only runs "
                    "made with the same settings"
                )
        for name in AGREEING_META:
            if base.get(name) != meta.get(name):
                raise MergeError(
                    f"{first} and {source} have different {name} ({base.get(name)!r} and "
                    f"{meta.get(name)!r}); merge only runs made with the same {name}"
                )
    merged = {name: value for name, value in base.items() if name != "shard"}
    # Where the data came from (meta "sources", the endpoints each run probed): all of them.
    answered: list[dict] = []
    for meta in metas:
        answered += [e for e in orjson.loads(meta.get("sources") or "[]") if e not in answered]
    if answered:
        merged["sources"] = orjson.dumps(answered).decode()
    # Synthetic data in any run makes the merged run's data partly synthetic.
    simulated = next((meta[SIMULATED] for meta in metas if meta.get(SIMULATED)), None)
    if simulated:
        merged[SIMULATED] = simulated
    # Samples built by another tokenizer build or draftgen version are not carried: an export
    # of the merged run rebuilds them all.
    if any(meta.get("reconstruction") != base.get("reconstruction") for meta in metas):
        merged.pop("reconstruction", None)
    return merged


def _choose_keys(merged: Store, sources: list[Path]) -> int:
    """Give each key to the run whose record of it ranks best; return how many keys more than
    one run had."""
    shared = 0
    for index, source in enumerate(sources):
        with Store.as_found(source) as store:
            for records in store.merge.key_records():
                ranks = [(key, _rank(verified, done)) for key, verified, done in records]
                shared += merged.merge.rank_keys(index, ranks)
    return shared


def _rank(verified: bool, completed: bool) -> int:
    if verified:
        return RANK_VERIFIED
    return RANK_COMPLETED if completed else RANK_FAILED


def _copy_run(merged: Store, index: int, source: Path, samples: bool) -> None:
    """Copy run ``index``'s rows of the keys it won, and all its rows of tables without keys."""
    with Store.as_found(source) as store:
        known = merged.tables.read()
        for table, create in store.tables.read().items():
            if table == "meta" or (table == "samples" and not samples):
                continue
            if table not in known:  # a table this draftgen does not know: carried as it is
                merged.tables.add_table(create)
                known[table] = create
            columns = sorted(store.tables.columns(table) & merged.tables.columns(table))
            merged.merge.copy_rows(store, table, columns, index, every_row=table in SPENT_TABLES)


def _merge_rejected(sources: list[Path], out: Path) -> int:
    """Every run's rejected rows, in the order the runs are listed, each row once."""
    seen: set[bytes] = set()
    partial = out / (REJECTED_NAME + ".partial")
    with open(partial, "wb") as merged:
        for source in sources:
            path = source / REJECTED_NAME
            if not path.is_file():
                continue
            with open(path, "rb") as handle:
                for line in handle:
                    line = line.rstrip(b"\n")
                    if line and line not in seen:
                        seen.add(line)
                        merged.write(line + b"\n")
        merged.flush()
        os.fsync(merged.fileno())
    os.replace(partial, out / REJECTED_NAME)
    return len(seen)

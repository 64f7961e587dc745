"""Store: one SQLite database per run directory, the single source of truth of a run.

Completions are committed the moment they arrive (WAL, ``synchronous=FULL``) by one writer thread
that groups whatever is queued into one transaction, so thousands of requests in flight cost one
fsync per batch and the event loop never waits on disk. A ``kill -9`` loses nothing committed.
The store knows rows, not providers. A run's store also watches its own file: a database deleted
or replaced under a run, a disk that refuses writes or a second run on the directory never costs
a completion that was paid for (``Store.open_run``, ``StoreIdentity``, the writer's patience).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import fcntl
import logging
import os
import queue
import re
import sqlite3
import struct
import threading
import time
from array import array
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import ClassVar

import orjson

from draftgen.errors import DraftgenError
from draftgen.profiles import DERIVED_LAYOUT, DerivedLayout
from draftgen.records import Completion, Rendering, StoredCompletion, TokenSample
from draftgen.store.batch_timing import ENDED, IN_FLIGHT, batch_timing, billed_without_rows
from draftgen.store.calibration import calibration_cost, read_calibrations

DB_NAME = "draftgen.sqlite"
REJECTED_NAME = "rejected.jsonl"  # the rows a run could not use, beside the store
LOCK_NAME = "draftgen.lock"
# Meta: what answered a run made by a simulator ("built-in simulator"), whose data is synthetic.
# Set once and kept: a run resumed against a real server still holds the synthetic part.
SIMULATED = "simulated"
# What a run saves beside a store that was deleted or replaced under it (``StoreIdentity``), and
# the writes a full disk kept out of the store (``CompletionWriter``); a resume takes both back.
RECOVERED_GLOB = "recovered-*.sqlite"
UNSTORED_GLOB = "unstored-*.jsonl"
# Seconds a run's writer keeps trying a write the disk refuses (full, I/O error, locked) before
# it keeps the write in a side file and stops the run; the rows wait in memory meanwhile, and the
# workers waiting on them send nothing new.
STORE_PATIENCE = 300.0
RETRY_FIRST_DELAY = 0.05  # seconds before the first retry of a refused write, doubling ...
RETRY_MAX_DELAY = 5.0  # ... up to this
WARN_EVERY = 30.0  # seconds between warnings while writes wait

_log = logging.getLogger("draftgen.store")

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS completions (
    key TEXT PRIMARY KEY,
    source_id TEXT NOT NULL,
    turn INTEGER NOT NULL,
    request BLOB NOT NULL,
    generation_id TEXT,
    provider TEXT,
    model TEXT,
    reasoning TEXT,
    content TEXT,
    tool_calls TEXT,
    finish_reason TEXT,
    native_finish_reason TEXT,
    prompt_tokens INTEGER,
    completion_tokens INTEGER,
    reasoning_tokens INTEGER,
    cost REAL NOT NULL DEFAULT 0,
    usage TEXT,
    raw_message TEXT,
    attempts INTEGER NOT NULL,
    errors TEXT,
    latency REAL,
    created_at REAL NOT NULL,
    endpoint TEXT,
    endpoint_latency REAL
);
CREATE TABLE IF NOT EXISTS failures (
    key TEXT PRIMARY KEY,
    source_id TEXT NOT NULL,
    turn INTEGER NOT NULL,
    reason TEXT NOT NULL,
    attempts INTEGER NOT NULL,
    errors TEXT,
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS samples (
    key TEXT PRIMARY KEY,
    input_ids BLOB NOT NULL,
    prompt_len INTEGER NOT NULL,
    verified INTEGER NOT NULL,
    reason TEXT NOT NULL,
    detail TEXT NOT NULL,
    truncated INTEGER NOT NULL,
    id_source TEXT NOT NULL,
    text_check TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS server_ids (
    key TEXT PRIMARY KEY,
    prompt_ids BLOB NOT NULL,
    completion_ids BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS logprob_tokens (
    key TEXT PRIMARY KEY,
    token_bytes BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS endpoint_events (
    endpoint TEXT NOT NULL,
    event TEXT NOT NULL,
    detail TEXT NOT NULL,
    at REAL NOT NULL
);
-- run --batch (draftgen.generate.batch): one intent per batch create, committed before it is
-- sent, and the rows it holds (custom_id = <nonce>-<row>); a row is in at most one live batch.
CREATE TABLE IF NOT EXISTS batch_intents (
    nonce TEXT PRIMARY KEY,
    dialect TEXT NOT NULL,
    url TEXT NOT NULL,
    model TEXT NOT NULL,
    endpoint TEXT NOT NULL,
    rows INTEGER NOT NULL,
    body_hash TEXT NOT NULL,
    worst_cost REAL,
    created_at REAL NOT NULL,
    state TEXT NOT NULL,
    batch_id TEXT UNIQUE,
    input_file_id TEXT,
    status TEXT,
    status_at REAL,
    request_counts TEXT,
    cost REAL,
    error TEXT,
    results_cursor TEXT,
    detail TEXT
);
CREATE TABLE IF NOT EXISTS batch_rows (
    custom_id TEXT PRIMARY KEY,
    nonce TEXT NOT NULL,
    key TEXT NOT NULL,
    source_id TEXT NOT NULL,
    turn INTEGER NOT NULL,
    request BLOB NOT NULL,
    prompt_tokens INTEGER,
    outcome TEXT,
    error TEXT
);
CREATE INDEX IF NOT EXISTS batch_rows_by_key ON batch_rows (key);
CREATE INDEX IF NOT EXISTS batch_rows_by_nonce ON batch_rows (nonce);
-- Providers a live run caught serving something else and routes around (draftgen.generate.judge),
-- kept so a resume goes on leaving them out.
CREATE TABLE IF NOT EXISTS provider_exclusions (
    provider TEXT PRIMARY KEY,
    at REAL NOT NULL,
    evidence TEXT NOT NULL
);
-- What a run's calibration asked each provider before buying from it, and what the answer
-- proved (draftgen.generate.calibrate): one row per provider and question, paid for, so its
-- cost counts in the run's. A resume asks no provider a question it already answered.
CREATE TABLE IF NOT EXISTS provider_calibrations (
    provider TEXT NOT NULL,
    question TEXT NOT NULL,
    verdict TEXT NOT NULL,
    at REAL NOT NULL,
    route TEXT,
    expected INTEGER,
    answered INTEGER,
    matched TEXT,
    cost REAL NOT NULL DEFAULT 0,
    prompt_tokens INTEGER,
    completion_tokens INTEGER,
    detail TEXT NOT NULL DEFAULT '',
    generation_id TEXT,
    PRIMARY KEY (provider, question)
);
-- Completions of an excluded provider that failed proof and were bought again elsewhere: the
-- completion as it was (paid for, so counted in the run's cost and the provider's figures),
-- the check it failed, and when it was replaced. A key is re-bought once.
CREATE TABLE IF NOT EXISTS replaced_completions (
    key TEXT PRIMARY KEY,
    provider TEXT,
    cost REAL NOT NULL,
    prompt_tokens INTEGER,
    completion_tokens INTEGER,
    latency REAL,
    generation_id TEXT,
    failed_check TEXT NOT NULL,
    replaced_at REAL NOT NULL,
    completion TEXT NOT NULL
);
"""

INSERT_COMPLETION = """
INSERT OR IGNORE INTO completions (key, source_id, turn, request, generation_id, provider, model,
    reasoning, content, tool_calls, finish_reason, native_finish_reason, prompt_tokens,
    completion_tokens, reasoning_tokens, cost, usage, raw_message, attempts, errors, latency,
    created_at, endpoint, endpoint_latency)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
"""
INSERT_ENDPOINT_EVENT = (
    "INSERT INTO endpoint_events (endpoint, event, detail, at) VALUES (?, ?, ?, ?)"
)
INSERT_FAILURE = """
INSERT OR REPLACE INTO failures (key, source_id, turn, reason, attempts, errors, created_at)
VALUES (?, ?, ?, ?, ?, ?, ?)
"""
INSERT_SAMPLE = """
INSERT OR REPLACE INTO samples (key, input_ids, prompt_len, verified, reason, detail, truncated,
    id_source, text_check) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
"""
INSERT_SERVER_IDS = """
INSERT OR IGNORE INTO server_ids (key, prompt_ids, completion_ids) VALUES (?, ?, ?)
"""


SELECT_COMPLETIONS = (
    "SELECT c.*, i.prompt_ids AS server_prompt_ids,"
    " i.completion_ids AS server_completion_ids, l.token_bytes AS logprob_token_bytes"
    " FROM completions c LEFT JOIN server_ids i ON i.key = c.key"
    " LEFT JOIN logprob_tokens l ON l.key = c.key"
)
INSERT_LOGPROB_TOKENS = "INSERT OR IGNORE INTO logprob_tokens (key, token_bytes) VALUES (?, ?)"


class StoreError(DraftgenError, RuntimeError):
    """The run directory cannot be used as asked; the message says what to do."""


class StoreHalted(StoreError):
    """The run must stop: its store's file is gone or the disk kept refusing a write. The message
    says where the rows are and what to do, so a caller adds nothing to it."""


LOCK_WAIT = 30.0  # seconds a connection waits for another's lock before it gives up


def connect(path: Path) -> sqlite3.Connection:
    connection = sqlite3.connect(
        path, timeout=LOCK_WAIT, isolation_level=None, check_same_thread=False
    )
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("PRAGMA synchronous=FULL")
    return connection


def begin_immediate(db: sqlite3.Connection) -> None:
    """Take the write lock (``BEGIN IMMEDIATE``), trying again every millisecond.

    SQLite's own busy handler sleeps the longer it has waited, up to 100 ms a try: the run's
    writer and its reconstruction (another process) take turns at the lock many times a
    second, and each spent most of its waits asleep after the lock was free.
    """
    db.execute("PRAGMA busy_timeout = 0")
    try:
        deadline = time.monotonic() + LOCK_WAIT
        while True:
            try:
                db.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.001)
    finally:
        db.execute(f"PRAGMA busy_timeout = {int(LOCK_WAIT * 1000)}")


class Store:
    """Reads and synchronous writes; ``CompletionWriter`` does the writes of a live run."""

    def __init__(self, run_dir: Path, *, create: bool = True, lock: RunLock | None = None) -> None:
        """``lock``: the run's lock on the directory (``open_run``), released on ``close``."""
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / DB_NAME
        self.lock = lock
        _check_run_dir(self.run_dir)
        # The lock file a run made a moment ago is no sign that a run was here before.
        check_store_file(
            self.run_dir, create, ignore={LOCK_NAME} if lock and lock.made_file else ()
        )
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            self.db = connect(self.path)
            self.db.executescript(SCHEMA)
            _add_missing_columns(self.db)
            self.identity = StoreIdentity(self.path, lock)
        except sqlite3.DatabaseError as exc:
            if getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_NOTADB:
                raise not_a_store(self.path) from None
            raise StoreError(f"cannot open the store in {self.run_dir}: {exc}") from None
        except OSError as exc:
            raise StoreError(f"cannot open the store in {self.run_dir}: {exc}") from None

    @classmethod
    def open_run(cls, run_dir: Path) -> Store:
        """The store of a run about to write: the directory locked against other runs (before
        its files are judged), a store a run saved when its own was deleted put back, and the
        writes a full disk kept in side files imported."""
        run_dir = Path(run_dir)
        _check_run_dir(run_dir)
        try:
            run_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as exc:
            raise StoreError(f"cannot open the store in {run_dir}: {exc}") from None
        lock = RunLock(run_dir)
        lock.acquire()
        try:
            restore_recovered(run_dir)
            store = cls(run_dir, lock=lock)
        except BaseException:
            lock.release()
            raise
        try:
            store.import_unstored()
        except BaseException:
            store.close()
            raise
        return store

    def open_writer(self, patience: float | None = None) -> CompletionWriter:
        """The run's completion writer: after every commit it checks that this store's file is
        still the one at its path, and it holds a write the disk refuses for up to ``patience``
        seconds (``STORE_PATIENCE``) before keeping it in a side file."""
        self.identity.check(self.db)
        return CompletionWriter(
            self.path, self.identity, STORE_PATIENCE if patience is None else patience
        )

    def close(self) -> None:
        self.db.close()
        if self.identity is not None and self.identity.lost is not None:
            self.identity.drop_journal()  # the run's last connection to the lost file is closed
        if self.lock is not None:  # after the database: no connection of this run is left
            self.lock.release()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- settings -------------------------------------------------------------------------------

    def check_settings(self, settings: dict) -> None:
        """Record the generation settings, or refuse if the store was made with others."""
        row = self.db.execute("SELECT value FROM meta WHERE name = 'settings'").fetchone()
        if row is None:
            self.db.execute(
                "INSERT INTO meta (name, value) VALUES ('settings', ?)",
                (orjson.dumps(settings, option=orjson.OPT_SORT_KEYS).decode(),),
            )
            return
        stored = orjson.loads(row[0])
        changed = [
            (f"{name} not set" if stored.get(name) is None else f"{name}={stored[name]!r}")
            + (" (now not set)" if settings.get(name) is None else f" (now {settings[name]!r})")
            for name in sorted(set(stored) | set(settings))
            if stored.get(name) != settings.get(name)
        ]
        if changed and self.holds_nothing():
            # A run that stopped before storing anything (an endpoint it could not reach) bought
            # nothing with its settings: the next one may choose others.
            self.db.execute(
                "UPDATE meta SET value = ? WHERE name = 'settings'",
                (orjson.dumps(settings, option=orjson.OPT_SORT_KEYS).decode(),),
            )
            return
        if changed:
            raise StoreError(
                f"{self.run_dir} was generated with other settings: {', '.join(changed)}; "
                "rerun with the stored settings to resume, or choose a new --out directory"
            )

    def holds_nothing(self) -> bool:
        """Whether nothing was generated here yet: no completion, failure or batch."""
        return not any(
            self.db.execute(f"SELECT 1 FROM {table} LIMIT 1").fetchone()
            for table in ("completions", "failures", "batch_intents", "replaced_completions")
        )

    def check_identity(self, name: str, value: str, what: str) -> None:
        """Record ``value`` under meta ``name``, or refuse if the store has another one.

        A store from before ``name`` was recorded takes the value it is resumed with.
        """
        stored = self.meta(name)
        if stored is None:
            self.set_meta(name, value)
        elif stored != value:
            raise StoreError(
                f"{self.run_dir} was generated with another {what} ({name} {stored[:12]}, now "
                f"{value[:12]}); resume with the {what} it was made with, or choose a new --out "
                "directory"
            )

    def meta(self, name: str) -> str | None:
        row = self.db.execute("SELECT value FROM meta WHERE name = ?", (name,)).fetchone()
        return row[0] if row else None

    def set_meta(self, name: str, value: str) -> None:
        self.db.execute("INSERT OR REPLACE INTO meta (name, value) VALUES (?, ?)", (name, value))

    def mark_simulated(self, source: str = "built-in simulator") -> None:
        """Record that a simulator (``source``) answers this run: its data is synthetic."""
        if self.meta(SIMULATED) is None:
            self.set_meta(SIMULATED, source)

    def simulated(self) -> str | None:
        """What simulator answered this run (``mark_simulated``), or None for real data."""
        return self.meta(SIMULATED)

    def import_unstored(self) -> int:
        """Write the statements a run kept in side files (``unstored-*.jsonl``) when the disk
        refused them, then delete the files: the completions stored. A file's import is marked
        in the same transaction until the file is gone, so an import cut short is done again
        and never twice (keys are unique; events and failures are not)."""
        completions = 0
        for side in sorted(self.run_dir.glob(UNSTORED_GLOB)):
            marker = f"imported {side.name}"
            if self.meta(marker) is None:
                statements = read_side_file(side)
                try:
                    begin_immediate(self.db)
                    for sql, params in statements:
                        self.db.execute(sql, params)
                    self.set_meta(marker, str(len(statements)))
                    self.db.execute("COMMIT")
                except sqlite3.Error as exc:
                    if self.db.in_transaction:
                        self.db.execute("ROLLBACK")
                    raise StoreError(
                        f"cannot import {side} into the store ({exc}); free disk space and rerun "
                        "the same command"
                    ) from None
                imported = sum(sql == INSERT_COMPLETION for sql, _ in statements)
                completions += imported
                _log.warning(
                    "imported %d completions a run could not store from %s", imported, side
                )
            side.unlink()
            self.db.execute("DELETE FROM meta WHERE name = ?", (marker,))
        return completions

    # -- completions ----------------------------------------------------------------------------

    def stored_finishes(self) -> Iterator[tuple[str, str | None]]:
        """(key, finish_reason) of every stored completion, streamed: what a resume skips."""
        yield from self.db.execute("SELECT key, finish_reason FROM completions")

    def answer(self, key: str) -> tuple[str, str | None] | None:
        """(content, finish_reason) of the completion stored under ``key``, or None."""
        row = self.db.execute(
            "SELECT content, finish_reason FROM completions WHERE key = ?", (key,)
        ).fetchone()
        return None if row is None else (row[0] or "", row[1])

    def completions(self, without_sample: bool = False) -> Iterator[StoredCompletion]:
        sql = SELECT_COMPLETIONS
        if without_sample:
            sql += " WHERE c.key NOT IN (SELECT key FROM samples)"
        cursor = self.db.execute(sql + " ORDER BY source_id, turn")
        names = [d[0] for d in cursor.description]
        for values in cursor:
            yield _stored_completion(dict(zip(names, values, strict=True)))

    def pending_completions(
        self,
        batch: int = 256,
        follow: threading.Event | None = None,
        stop: threading.Event | None = None,
        poll: float = 0.05,
    ) -> Iterator[list[StoredCompletion]]:
        """Completions without a sample, ``batch`` at a time, in storage order.

        No cursor stays open between batches, so samples can be written in between, and only
        one batch is in memory however many completions the store holds. With ``follow``, keep
        waiting for completions another connection stores until it is set, then take the rest
        (from the start again: nothing committed meanwhile is missed). ``stop`` ends at once.
        """
        sql = (
            SELECT_COMPLETIONS.replace("SELECT ", "SELECT c.rowid AS store_rowid, ", 1)
            + " WHERE c.rowid > ? AND c.key NOT IN (SELECT key FROM samples)"
            " ORDER BY c.rowid LIMIT ?"
        )
        after = 0
        # Keys of the last batches handed out: their samples may not be written yet when the
        # last pass starts over, and must not be handed out twice (``reconstruct_all`` holds up
        # to three unwritten: one being encoded, one reconstructed, one being written).
        recent: collections.deque[set[str]] = collections.deque(maxlen=4)
        last_pass = False
        while stop is None or not stop.is_set():
            following = follow is not None and not follow.is_set()
            cursor = self.db.execute(sql, (after, batch))
            names = [d[0] for d in cursor.description]
            rows = [dict(zip(names, values, strict=True)) for values in cursor.fetchall()]
            if not rows:
                if not following:
                    if follow is None or after == 0:
                        return
                    follow, after, last_pass = None, 0, True  # the last pass, from the start
                    continue
                follow.wait(poll)
                continue
            after = rows[-1].pop("store_rowid")
            if last_pass:
                rows = [row for row in rows if not any(row["key"] in keys for keys in recent)]
            else:
                recent.append({row["key"] for row in rows})
            for row in rows:
                row.pop("store_rowid", None)
            if rows:
                yield [_stored_completion(row) for row in rows]

    def clear_samples(self) -> None:
        self.db.execute("DELETE FROM samples")

    def add_samples(self, samples: list[TokenSample]) -> None:
        rows = [sample_row(s) for s in samples]  # made before the lock is taken
        self._write_samples(INSERT_SAMPLE, rows)

    def _write_samples(self, sql: str, rows: list[tuple]) -> None:
        """``executemany`` in one transaction, waiting out a disk that refuses it like the
        completion writer does: samples can be made again, but a run that has stored every
        completion should not end in an error for want of a moment's disk space."""
        try:
            write_patiently(
                lambda: _transaction(self.db, sql, rows),
                STORE_PATIENCE,
                lambda: f"{len(rows)} samples",
                self.run_dir,
            )
        except sqlite3.OperationalError as exc:
            raise StoreError(
                f"cannot write samples to the store ({exc}); the completions are stored: free "
                "disk space and run draftgen export to reconstruct the rest"
            ) from None

    def providers_with_reason(self, reason: str) -> set[str]:
        return {
            provider or ""
            for (provider,) in self.db.execute(
                "SELECT DISTINCT c.provider FROM samples s JOIN completions c ON c.key = s.key"
                " WHERE s.reason = ?",
                (reason,),
            )
        }

    def providers_keeping_edge_whitespace(self) -> set[str]:
        """Providers that returned some content with whitespace at its edges: they do not strip."""
        return {
            provider or ""
            for (provider,) in self.db.execute(
                "SELECT DISTINCT provider FROM completions WHERE content <>"
                " trim(content, ' ' || char(9) || char(10) || char(13))"
            )
        }

    def verified_contents(self, providers: set[str]) -> Iterator[tuple[str, str]]:
        """(key, content) of every verified text-path sample served by one of ``providers``
        (ids a server returned do not depend on what its text looked like)."""
        for provider in sorted(providers):
            yield from self.db.execute(
                "SELECT c.key, coalesce(c.content, '') FROM samples s JOIN completions c"
                " ON c.key = s.key WHERE s.verified = 1 AND s.id_source = 'text'"
                " AND coalesce(c.provider, '') = ?",
                (provider,),
            ).fetchall()

    def verified_tool_calls(self, providers: set[str]) -> Iterator[tuple[str, str, list]]:
        """(provider, key, structured tool calls) of every verified text-path sample with tool
        calls served by one of ``providers``."""
        for provider in sorted(providers):
            for key, calls in self.db.execute(
                "SELECT c.key, c.tool_calls FROM samples s JOIN completions c ON c.key = s.key"
                " WHERE s.verified = 1 AND s.id_source = 'text' AND c.tool_calls IS NOT NULL"
                " AND coalesce(c.provider, '') = ?",
                (provider,),
            ).fetchall():
                yield provider, key, orjson.loads(calls)

    def tool_call_answers(self) -> Iterator[tuple[str, list, dict]]:
        """(provider, structured tool calls, the request) of every stored answer with tool
        calls: what each provider returned, to look for rewrites in."""
        for provider, calls, request in self.db.execute(
            "SELECT coalesce(provider, ''), tool_calls, request FROM completions"
            " WHERE tool_calls IS NOT NULL"
        ):
            yield provider, orjson.loads(calls), orjson.loads(request)

    def text_path_prompts(self) -> Iterator[tuple[str, str, bytes, int | None, bool]]:
        """(key, provider, request, prompt_tokens, verified) of every text-path sample that is
        verified or failed on its prompt count, in key order (what a renderer doubt reads)."""
        yield from (
            (key, provider or "", request, prompt_tokens, bool(verified))
            for key, provider, request, prompt_tokens, verified in self.db.execute(
                "SELECT c.key, c.provider, c.request, c.prompt_tokens, s.verified FROM samples s"
                " JOIN completions c ON c.key = s.key WHERE s.id_source = 'text'"
                " AND (s.verified = 1 OR s.reason = 'prompt_count_mismatch') ORDER BY c.key"
            )
        )

    def flag_samples(self, flags: list[tuple[str, str, str]]) -> None:
        """Mark samples unverified: (key, reason, detail)."""
        self._write_samples(
            "UPDATE samples SET verified = 0, reason = ?, detail = ? WHERE key = ?",
            [(reason, detail, key) for key, reason, detail in flags],
        )

    def export_rows(self, include_unverified: bool) -> Iterator[dict]:
        """The samples an export holds, in order, ``input_ids`` a list of ints."""
        for row in self.export_samples(include_unverified):
            row["input_ids"] = row["input_ids"].tolist()
            yield row

    def export_samples(self, include_unverified: bool) -> Iterator[dict]:
        """``export_rows`` with ``input_ids`` an ``array("i")``, for writers that take the ids as
        one buffer (numpy, Arrow) rather than a Python int each."""
        sql = """
            SELECT c.key, c.source_id, c.turn, c.finish_reason, c.provider, c.generation_id,
                   s.prompt_len, s.verified, s.reason, s.truncated, s.id_source
            FROM samples s JOIN completions c ON c.key = s.key
        """
        if not include_unverified:
            sql += " WHERE s.verified = 1 AND s.truncated = 0"
        # The ids are read after the sort, a sample at a time, from the snapshot the sorted
        # statement holds open: sorting rows that carry them would first copy every id through
        # SQLite's sorter (a temporary file as large as the ids).
        for row in self.db.execute(sql + " ORDER BY c.source_id, c.turn, c.key"):
            (
                key,
                source_id,
                turn,
                finish,
                provider,
                generation_id,
                prompt_len,
                verified,
                reason,
                truncated,
                id_source,
            ) = row
            (blob,) = self.db.execute(
                "SELECT input_ids FROM samples WHERE key = ?", (key,)
            ).fetchone()
            ids = array("i")
            ids.frombytes(blob)
            yield {
                "key": key,
                "source_id": source_id,
                "turn": turn,
                "input_ids": ids,
                "prompt_len": prompt_len,
                "verified": bool(verified) and not truncated,
                "verify_reason": reason,
                "finish_reason": finish,
                "provider": provider,
                "generation_id": generation_id,
                "id_source": id_source,
            }

    def sample_record(self, sample_id: str) -> dict | None:
        """One sample by its export id (``SOURCE_ID:TURN``) or its key, with its verdict and ids
        (None if the run has no such sample); a turn sampled several times gives the first."""
        source_id, _, turn = sample_id.rpartition(":")
        found = self.db.execute(
            "SELECT c.key, c.source_id, c.turn, c.finish_reason, c.provider, c.generation_id,"
            " s.input_ids, s.prompt_len, s.verified, s.reason, s.detail, s.truncated, s.id_source"
            " FROM samples s JOIN completions c ON c.key = s.key WHERE c.key = ?"
            " OR (c.source_id = ? AND c.turn = ?) ORDER BY c.key = ? DESC, c.key LIMIT 1",
            (sample_id, source_id, int(turn) if turn.isdigit() else -1, sample_id),
        ).fetchone()
        if found is None:
            return None
        key, source_id, turn, finish, provider, generation_id, blob, prompt_len = found[:8]
        verified, reason, detail, truncated, id_source = found[8:]
        ids = array("i")
        ids.frombytes(blob)
        return {
            "id": f"{source_id}:{turn}",
            "key": key,
            "source_id": source_id,
            "turn": turn,
            "input_ids": ids.tolist(),
            "prompt_len": prompt_len,
            "verified": bool(verified) and not truncated,
            "verify_reason": reason,
            "detail": detail,
            "finish_reason": finish,
            "provider": provider,
            "generation_id": generation_id,
            "id_source": id_source,
        }

    def export_completions(
        self, include_unverified: bool
    ) -> Iterator[tuple[StoredCompletion, dict]]:
        """The completions of the samples ``export_rows`` yields, in the same order, each with
        its verdict (``verified``, ``verify_reason``): for exports that keep text, not ids."""
        sql = (
            SELECT_COMPLETIONS.replace(
                "SELECT ",
                "SELECT s.verified AS sample_verified, s.truncated AS sample_truncated,"
                " s.reason AS sample_reason, ",
                1,
            )
            + " JOIN samples s ON s.key = c.key"
        )
        if not include_unverified:
            sql += " WHERE s.verified = 1 AND s.truncated = 0"
        cursor = self.db.execute(sql + " ORDER BY c.source_id, c.turn, c.key")
        names = [d[0] for d in cursor.description]
        for values in cursor:
            row = dict(zip(names, values, strict=True))
            verified, truncated = row.pop("sample_verified"), row.pop("sample_truncated")
            verdict = {
                "verified": bool(verified) and not truncated,
                "verify_reason": row.pop("sample_reason"),
            }
            yield _stored_completion(row), verdict

    def report_rows(self) -> Iterator[dict]:
        """One dict per stored completion with what ``draftgen report`` draws: usage, latency,
        time, attempt errors, and its sample's verdict (None before reconstruction)."""
        cursor = self.db.execute(
            "SELECT c.key, c.provider, c.finish_reason, c.prompt_tokens, c.completion_tokens,"
            " c.reasoning_tokens, c.cost, c.latency, c.created_at, c.attempts, c.errors,"
            " s.prompt_len, length(s.input_ids) / 4 AS sample_len, s.verified, s.truncated,"
            " s.reason, c.endpoint, c.endpoint_latency"
            " FROM completions c LEFT JOIN samples s ON s.key = c.key"
            " ORDER BY c.created_at"
        )
        names = [d[0] for d in cursor.description]
        for values in cursor:
            row = dict(zip(names, values, strict=True))
            row["errors"] = orjson.loads(row["errors"]) if row["errors"] else []
            yield row

    def failure_rows(self) -> Iterator[dict]:
        """One dict per request that finally failed: reason, attempts, attempt errors, time."""
        cursor = self.db.execute(
            "SELECT key, source_id, turn, reason, attempts, errors, created_at FROM failures"
            " ORDER BY created_at"
        )
        names = [d[0] for d in cursor.description]
        for values in cursor:
            row = dict(zip(names, values, strict=True))
            row["errors"] = orjson.loads(row["errors"]) if row["errors"] else []
            yield row

    def spend_rows(self) -> Iterator[tuple[float, int | None, int | None, int | None, int | None]]:
        """(cost, prompt_tokens, completion_tokens, request bytes, answer bytes) of every stored
        completion, what ``--max-cost`` counts it by; the byte lengths only where the count is
        missing (they bound it)."""
        return self.db.execute(
            "SELECT cost, prompt_tokens, completion_tokens,"
            " CASE WHEN prompt_tokens IS NULL THEN length(request) END,"
            " CASE WHEN completion_tokens IS NULL THEN length(CAST(coalesce(content, '')"
            " || coalesce(reasoning, '') || coalesce(tool_calls, '') AS BLOB)) END"
            " FROM completions"
            # Completions bought again were paid for too; their kept text bounds missing counts.
            " UNION ALL SELECT cost, prompt_tokens, completion_tokens,"
            " CASE WHEN prompt_tokens IS NULL THEN length(completion) END,"
            " CASE WHEN completion_tokens IS NULL THEN length(completion) END"
            " FROM replaced_completions"
            # Calibration questions are billed like any answer.
            " UNION ALL SELECT cost, prompt_tokens, completion_tokens, NULL, NULL"
            " FROM provider_calibrations"
        )

    def counts(self) -> dict:
        """Everything ``draftgen status`` prints."""
        one = lambda sql: self.db.execute(sql).fetchone()  # noqa: E731
        # Each full scan of a table walks every row's overflow pages (answers, ids): one scan
        # gives all the sums of a table.
        # A negative cost (stored before usage was checked) never takes money off the total.
        completions, cost, prompt_tokens, completion_tokens = one(
            "SELECT count(*), coalesce(sum(max(cost, 0)), 0), coalesce(sum(prompt_tokens), 0),"
            " coalesce(sum(completion_tokens), 0) FROM completions"
        )
        # Where a batch API says what a batch charged, the run cost that: rows it billed and
        # never returned (a cancelled batch's) count too.
        cost += billed_without_rows(self.db)
        # Failed attempts sent again, by kind: the one count of retries (progress counts alike).
        retried = self.retried_errors()
        rebuys = self.rebuy_figures()
        # What was bought and replaced was paid for: the run's cost and tokens count it.
        cost += rebuys["spoiled_cost"]
        prompt_tokens += rebuys["spoiled_prompt_tokens"]
        completion_tokens += rebuys["spoiled_completion_tokens"]
        calibrations = self.calibrations()
        cost += calibration_cost(calibrations)
        figures = self.sample_figures()
        return {
            "completions": completions,
            "cost": round(cost, 9),  # money to 1e-9 in JSON: no float noise (0.0220151000000003)
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            # The headline of a run: what one sample a trainer can use cost (None: none yet).
            "cost_per_verified": round(cost / figures["verified"], 9)
            if figures["verified"]
            else None,
            "retried_attempts": sum(retried.values()),
            "retried_errors": retried,
            "failures": dict(
                self.db.execute(
                    "SELECT reason, count(*) FROM failures GROUP BY reason ORDER BY 2 DESC"
                )
            ),
            "finish_reasons": dict(
                self.db.execute(
                    "SELECT coalesce(finish_reason, 'none'), count(*) FROM completions"
                    " GROUP BY 1 ORDER BY 2 DESC"
                )
            ),
            **figures,
            "reasons": dict(
                self.db.execute(
                    "SELECT reason, count(*) FROM samples GROUP BY reason ORDER BY 2 DESC"
                )
            ),
            "unreconstructed": self.unreconstructed(),
            "exactness": self.exactness(),
            "endpoints": self.endpoint_figures(),
            "providers": self.provider_figures(),
            # Only when a provider was left out: the run went on without it.
            **({"excluded_providers": excluded} if (excluded := self.excluded_providers()) else {}),
            **({"rebuys": rebuys} if rebuys["rebought"] else {}),
            # Only when the run calibrated: what each provider was asked and what it proved.
            **({"calibration": calibrations} if calibrations else {}),
            **self.rejected_rows(),
            "active_run": RunLock.holder(self.run_dir, ignore_own=True),
            "batches": self.batch_figures(),
            # Only when set: a run of real data shows what it showed before the marker existed.
            **({"simulated": simulated} if (simulated := self.simulated()) else {}),
            # Only for the generic profile: what its chat template showed.
            **({"derived_layout": derived} if (derived := self.derived_layout()) else {}),
        }

    def provider_figures(self) -> dict[str, dict]:
        """Per provider (``provider_figures``), most completions first."""
        return provider_figures(self.db)

    def excluded_providers(self) -> dict[str, dict]:
        """The providers a run left out (``draftgen.generate.judge``): name -> when (``at``, a
        Unix time) and the evidence, in the order they were left out."""
        return {
            provider: {"at": at, "evidence": evidence}
            for provider, at, evidence in self.db.execute(
                "SELECT provider, at, evidence FROM provider_exclusions ORDER BY at, provider"
            )
        }

    def calibrations(self) -> dict[str, dict[str, dict]]:
        """What calibration asked each provider (``store.calibration.read_calibrations``)."""
        return read_calibrations(self.db)

    def exclude_provider(self, provider: str, evidence: str) -> None:
        """Record ``provider`` as left out of the run (``excluded_providers``)."""
        for sql, params in exclusion_statements(provider, evidence):
            self.db.execute(sql, params)

    def spent(self) -> float:
        """What every completion bought cost (a negative cost counts 0), those replaced by a
        re-buy included."""
        return self.db.execute(
            "SELECT coalesce(sum(max(cost, 0)), 0) FROM (SELECT cost FROM completions"
            " UNION ALL SELECT cost FROM replaced_completions"
            " UNION ALL SELECT cost FROM provider_calibrations)"
        ).fetchone()[0]

    def spoiled_completions(self, providers: list[str]) -> list[dict]:
        """The completions of ``providers`` whose sample failed a check (not one cut at
        max_tokens, which another provider would cut too) and that were not bought again yet,
        in storage order: every column, and the check failed as ``failed_check``."""
        if not providers:
            return []
        marks = ", ".join("?" * len(providers))
        cursor = self.db.execute(
            "SELECT c.*, s.reason AS failed_check FROM completions c JOIN samples s"
            " ON s.key = c.key WHERE s.verified = 0 AND s.truncated = 0"
            f" AND c.provider IN ({marks})"
            " AND c.key NOT IN (SELECT key FROM replaced_completions) ORDER BY c.rowid",
            providers,
        )
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor]

    def rebuy_figures(self) -> dict:
        """Completions bought again after their provider was left out: how many, what the
        spoiled ones cost (and their tokens), and what buying them again cost."""
        rebought, spoiled, prompt, completion = self.db.execute(
            "SELECT count(*), coalesce(sum(max(cost, 0)), 0), coalesce(sum(prompt_tokens), 0),"
            " coalesce(sum(completion_tokens), 0) FROM replaced_completions"
        ).fetchone()
        again = self.db.execute(
            "SELECT coalesce(sum(max(c.cost, 0)), 0) FROM completions c"
            " JOIN replaced_completions r ON r.key = c.key"
        ).fetchone()[0]
        return {
            "rebought": rebought,
            "spoiled_cost": round(spoiled, 9),
            "spoiled_prompt_tokens": prompt,
            "spoiled_completion_tokens": completion,
            "rebuy_cost": round(again, 9),
        }

    def derived_layout(self) -> list[str]:
        """What the generic profile derived from the chat template, a line per item ([]: the
        run's profile is a family's own)."""
        stored = self.meta(DERIVED_LAYOUT)
        return DerivedLayout.from_json(orjson.loads(stored)).describe() if stored else []

    def sample_figures(self) -> dict:
        """Samples reconstructed, verified (and not cut at max_tokens), and truncated."""
        samples, verified, truncated = self.db.execute(
            "SELECT count(*), coalesce(sum(verified = 1 AND truncated = 0), 0),"
            " coalesce(sum(truncated = 1), 0) FROM samples"
        ).fetchone()
        return {"samples": samples, "verified": verified, "truncated": truncated}

    def batch_figures(self) -> dict:
        """Batches of ``run --batch`` (empty for a live run): intents by state, final batches by
        status, the ones in flight, and what the API charged (``usage.cost``) against the cost
        of the rows that came back. A batch that reached a final status (recorded by ``draftgen
        cancel`` or a poll) is final before a run stores its results."""
        one = lambda sql: self.db.execute(sql).fetchone()  # noqa: E731
        if not one("SELECT count(*) FROM batch_intents")[0]:
            return {}
        in_flight = [
            {
                "nonce": nonce,
                "batch_id": batch_id,
                "state": state,
                "status": status,
                "rows": rows,
                "submitted_at": created_at,
                "status_at": status_at,
            }
            for nonce, batch_id, state, status, rows, created_at, status_at in self.db.execute(
                "SELECT nonce, batch_id, state, status, rows, created_at, status_at"
                f" FROM batch_intents WHERE {IN_FLIGHT} ORDER BY created_at, nonce"
            )
        ]
        charged, known = one(
            f"SELECT coalesce(sum(cost), 0), count(cost) FROM batch_intents WHERE {ENDED}"
        )
        rows_cost = one(
            "SELECT coalesce(sum(c.cost), 0) FROM batch_rows r JOIN completions c ON c.key = r.key"
            " WHERE r.outcome = 'done'"
        )[0]
        return {
            "by_state": dict(
                self.db.execute("SELECT state, count(*) FROM batch_intents GROUP BY 1")
            ),
            "final": dict(
                self.db.execute(
                    f"SELECT status, count(*) FROM batch_intents WHERE {ENDED}"
                    " GROUP BY 1 ORDER BY 2 DESC"
                )
            ),
            "in_flight": in_flight,
            "rows_in_flight": sum(b["rows"] for b in in_flight),
            "rows_sent": one("SELECT count(*) FROM batch_rows")[0],
            "rows_answered": one("SELECT count(*) FROM batch_rows WHERE outcome = 'done'")[0],
            "rows_sent_again": one(
                "SELECT count(*) FROM batch_rows WHERE outcome IN"
                " ('failed', 'expired', 'cancelled', 'missing', 'batch_failed')"
            )[0],
            "charged": round(charged, 9) if known else None,  # None: the API reports none
            "rows_cost": round(rows_cost, 9),
            "timing": batch_timing(self.db, time.time()),
        }

    def unreconstructed(self) -> int:
        """Stored completions without a sample yet (an export leaves them out)."""
        return self.db.execute(
            "SELECT count(*) FROM completions WHERE key NOT IN (SELECT key FROM samples)"
        ).fetchone()[0]

    def retried_errors(self) -> dict[str, int]:
        """Failed attempts that were tried again, by kind: every error of a stored completion,
        and all but the last of a final failure (the last one is the failure itself)."""
        rows = self.db.execute(
            "SELECT coalesce(json_extract(e.value, '$.kind'), 'unknown'), count(*) FROM ("
            " SELECT c.errors AS errors, -1 AS last FROM completions c WHERE c.errors IS NOT NULL"
            " UNION ALL SELECT f.errors, json_array_length(f.errors) - 1 FROM failures f"
            " WHERE f.errors IS NOT NULL) AS t, json_each(t.errors) AS e"
            " WHERE t.last < 0 OR e.key < t.last GROUP BY 1 ORDER BY 2 DESC, 1"
        )
        return dict(rows)

    def rejected_rows(self) -> dict:
        """``rejected``: rows the last run over this directory could not use (the lines of
        ``rejected.jsonl``), and ``rejected_reasons``: how many for each kind of reason."""
        path = self.run_dir / REJECTED_NAME
        reasons: collections.Counter = collections.Counter()
        try:
            with open(path, "rb") as handle:
                for line in handle:
                    if line.strip():
                        try:
                            reason = orjson.loads(line).get("reason")
                        except (orjson.JSONDecodeError, AttributeError):
                            reason = None
                        reasons[rejection_kind(reason if isinstance(reason, str) else "")] += 1
        except FileNotFoundError:
            pass
        return {"rejected": sum(reasons.values()), "rejected_reasons": dict(reasons.most_common())}

    def endpoint_figures(self) -> dict[str, dict]:
        """Per endpoint (base URL): attempts sent, completions served, failed attempts by kind,
        ejections and readmissions, mean latency of the serving attempt, tokens. Stores from
        before endpoints were recorded have none."""
        figures: dict[str, dict] = {}

        def entry(endpoint: str) -> dict:
            return figures.setdefault(
                endpoint,
                {
                    "requests": 0,
                    "completions": 0,
                    "errors": 0,
                    "error_kinds": {},
                    "ejections": 0,
                    "readmissions": 0,
                    "removed": False,
                    "latency_mean": None,
                    "prompt_tokens": 0,
                    "completion_tokens": 0,
                },
            )

        for endpoint, served, latency, prompt, completion in self.db.execute(
            "SELECT endpoint, count(*), avg(endpoint_latency), coalesce(sum(prompt_tokens), 0),"
            " coalesce(sum(completion_tokens), 0) FROM completions WHERE endpoint IS NOT NULL"
            " GROUP BY endpoint"
        ):
            row = entry(endpoint)
            row.update(completions=served, prompt_tokens=prompt, completion_tokens=completion)
            row["latency_mean"] = round(latency, 4) if latency is not None else None
        for endpoint, kind, count in self.db.execute(
            "SELECT json_extract(e.value, '$.endpoint') AS endpoint, json_extract(e.value,"
            " '$.kind'), count(*) FROM (SELECT errors FROM completions WHERE errors IS NOT NULL"
            " UNION ALL SELECT errors FROM failures WHERE errors IS NOT NULL) AS t,"
            " json_each(t.errors) AS e WHERE endpoint IS NOT NULL GROUP BY 1, 2"
        ):
            row = entry(endpoint)
            row["errors"] += count
            row["error_kinds"][kind or "unknown"] = count
        for endpoint, event, count in self.db.execute(
            "SELECT endpoint, event, count(*) FROM endpoint_events GROUP BY 1, 2"
        ):
            row = entry(endpoint)
            if event == "ejected":
                row["ejections"] = count
            elif event == "readmitted":
                row["readmissions"] = count
            elif event == "removed":
                row["removed"] = True
        for row in figures.values():
            row["requests"] = row["completions"] + row["errors"]
            row["error_kinds"] = dict(sorted(row["error_kinds"].items(), key=lambda i: -i[1]))
        return dict(sorted(figures.items(), key=lambda item: (-item[1]["requests"], item[0])))

    def exactness(self) -> dict:
        """Per id source (server | logprobs | text): samples, verified; and, where the server
        gave the ids, how often the text path rebuilt exactly them (``text_check``)."""
        by_source = {
            source: {"samples": samples, "verified": verified}
            for source, samples, verified in self.db.execute(
                "SELECT id_source, count(*), coalesce(sum(verified = 1 AND truncated = 0), 0)"
                " FROM samples GROUP BY id_source ORDER BY 2 DESC"
            )
        }
        checks = dict(
            self.db.execute(
                "SELECT text_check, count(*) FROM samples WHERE text_check <> ''"
                " GROUP BY text_check ORDER BY 2 DESC"
            )
        )
        checked = sum(checks.values())
        agrees = checks.get("agrees", 0)
        return {
            "id_sources": by_source,
            "text_checks": checks,
            "text_agreement": round(agrees / checked, 4) if checked else None,
        }

    # -- merging runs (draftgen.store.merge) ----------------------------------------------------

    @classmethod
    def as_found(cls, run_dir: Path) -> Store:
        """A run's store opened to be read as it is: no table or column is added and no journal
        mode set, so a store an older draftgen made is read, not upgraded."""
        store = cls.__new__(cls)
        store.run_dir = Path(run_dir)
        store.path = store.run_dir / DB_NAME
        store.lock = store.identity = None
        store.db = sqlite3.connect(store.path, isolation_level=None)
        return store

    @classmethod
    def unjournalled(cls, path: Path) -> Store:
        """A new store file at ``path`` filled in one go, with no journal and no syncs: its
        maker syncs it and renames it into a run directory (a crash leaves a file to delete)."""
        store = cls.__new__(cls)
        store.path = Path(path)
        store.run_dir = store.path.parent
        store.lock = store.identity = None
        store.db = sqlite3.connect(store.path, isolation_level=None)
        store.db.execute("PRAGMA synchronous=OFF")
        store.db.execute("PRAGMA journal_mode=OFF")
        store.db.executescript(SCHEMA)
        return store

    def all_meta(self) -> dict[str, str]:
        return dict(self.db.execute("SELECT name, value FROM meta"))

    def tables(self) -> dict[str, str]:
        """Each table's CREATE statement by name, tables this draftgen does not know included."""
        return dict(
            self.db.execute(
                "SELECT name, sql FROM sqlite_master WHERE type = 'table'"
                " AND name NOT LIKE 'sqlite_%'"
            )
        )

    def columns(self, table: str) -> set[str]:
        return {row[1] for row in self.db.execute(f'PRAGMA table_info("{table}")')}

    def add_table(self, create: str) -> None:
        """Create a table from its CREATE statement (another store's, as ``tables`` gives it)."""
        self.db.execute(create)

    def row_count(self, table: str) -> int:
        return self.db.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]

    def key_records(self, batch: int = 10_000) -> Iterator[list[tuple[str, bool, bool]]]:
        """(key, has a verified untruncated sample, has a completion) of every key with a
        completion or a failure, ``batch`` keys at a time; tables an older store lacks count as
        empty."""
        tables = self.tables()
        parts = []
        if "completions" in tables:
            verified = (
                "EXISTS (SELECT 1 FROM samples s WHERE s.key = c.key AND s.verified = 1"
                " AND s.truncated = 0)"
                if "samples" in tables
                else "0"
            )
            parts.append(
                f"SELECT c.key AS key, {verified} AS verified, 1 AS done FROM completions c"
            )
        if "failures" in tables:
            parts.append("SELECT key, 0 AS verified, 0 AS done FROM failures")
        if not parts:
            return
        cursor = self.db.execute(
            f"SELECT key, max(verified), max(done) FROM ({' UNION ALL '.join(parts)}) GROUP BY key"
        )
        while rows := cursor.fetchmany(batch):
            yield [(key, bool(verified), bool(done)) for key, verified, done in rows]

    def rank_keys(self, run: int, ranks: list[tuple[str, int]]) -> int:
        """Record that run ``run`` holds these keys, each at its rank: a key keeps the run that
        holds it at the highest rank, the first one recorded on a tie. Returns how many of the
        keys were recorded for a run before. Keys are given once per run."""
        self._merge_tables()
        self.db.execute("BEGIN")
        try:
            self.db.execute("DELETE FROM temp.merge_ranks")
            self.db.executemany("INSERT INTO temp.merge_ranks (key, rank) VALUES (?, ?)", ranks)
            shared = self.db.execute(
                "SELECT count(*) FROM temp.merge_ranks JOIN temp.merge_choice USING (key)"
            ).fetchone()[0]
            self.db.execute(
                "INSERT INTO temp.merge_choice (key, rank, run) SELECT key, rank, ?"
                " FROM temp.merge_ranks WHERE true ON CONFLICT (key) DO UPDATE SET"
                " rank = excluded.rank, run = excluded.run WHERE excluded.rank > merge_choice.rank",
                (run,),
            )
            self.db.execute("COMMIT")
        finally:
            if self.db.in_transaction:
                self.db.execute("ROLLBACK")
        return shared

    def _merge_tables(self) -> None:
        # Also made before copying: a run that holds no keys never ranks any.
        self.db.execute(
            "CREATE TEMP TABLE IF NOT EXISTS merge_choice (key TEXT PRIMARY KEY,"
            " rank INTEGER NOT NULL, run INTEGER NOT NULL)"
        )
        self.db.execute(
            "CREATE TEMP TABLE IF NOT EXISTS merge_ranks (key TEXT NOT NULL, rank INTEGER NOT NULL)"
        )

    def copy_rows(self, source: Store, table: str, columns: list[str], run: int) -> None:
        """Copy ``columns`` of ``source``'s rows of ``table`` into this store, run ``run`` of a
        merge: a keyed row only if ``rank_keys`` gave its key to that run, a row whose key is
        stored already kept. One statement streams the rows inside SQLite (twice the speed of
        taking them through Python in batches)."""
        self._merge_tables()
        names = ", ".join(f'"{name}"' for name in columns)
        select = f'SELECT {names} FROM merge_source."{table}"'
        if "key" in columns:
            select += f" WHERE key IN (SELECT key FROM temp.merge_choice WHERE run = {int(run)})"
        self.db.execute("ATTACH DATABASE ? AS merge_source", (str(source.path),))
        try:
            self.db.execute("BEGIN")
            self.db.execute(f'INSERT OR IGNORE INTO main."{table}" ({names}) {select}')
            self.db.execute("COMMIT")
        finally:
            if self.db.in_transaction:
                self.db.execute("ROLLBACK")
            self.db.execute("DETACH DATABASE merge_source")


class RunLock:
    """An exclusive lock on a run directory, naming the process that holds it.

    Two ``flock``s: one on the directory itself, which deleting a file cannot free, keeps other
    runs out; one on ``draftgen.lock``, whose text names the holder for ``status`` (and which
    a draftgen from before the directory lock still honours). A lock file deleted under a run is
    made again at the run's next commit (``keep``).
    """

    # (st_dev, st_ino) of the directories this process holds: its own run is not "another run".
    _held: ClassVar[set[tuple[int, int]]] = set()

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_NAME
        self.made_file = False  # the lock file did not exist before ``acquire``
        self._handle = None
        self._file_key: tuple[int, int] | None = None
        self._dir_fd: int | None = None
        self._dir_key: tuple[int, int] | None = None

    def acquire(self) -> None:
        fd = os.open(self.run_dir, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise self._in_use(_lock_file_text(self.path)) from None
        try:
            self.made_file = not self.path.exists()
            self._take_file()
        except BaseException:
            os.close(fd)
            raise
        self._dir_fd, self._dir_key = fd, _fd_key(fd)
        RunLock._held.add(self._dir_key)

    def _take_file(self) -> None:
        """Open and lock the lock file (made if missing) and write this process's pid in it."""
        handle = open(self.path, "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or None
            handle.close()
            raise self._in_use(holder) from None  # a draftgen that locks only the file
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}")
        handle.flush()
        self._handle, self._file_key = handle, _fd_key(handle.fileno())

    def _in_use(self, holder: str | None) -> StoreError:
        who = (
            f"draftgen {holder}"
            if holder
            else f"another draftgen process (its {LOCK_NAME} was deleted)"
        )
        return StoreError(
            f"{self.run_dir} is in use by {who}; wait for it to finish or stop it before running "
            "again on this directory"
        )

    def keep(self) -> None:
        """Make the lock file again if it was deleted or replaced, so that ``status`` still
        names this process; the directory's own lock keeps other runs out meanwhile, so the run
        goes on."""
        if self._dir_fd is None:
            return
        try:
            if _file_key(self.path) == self._file_key:
                return
        except FileNotFoundError:
            pass
        except OSError:
            return  # cannot tell (permissions): nothing to mend
        old = self._handle
        try:
            self._take_file()
        except (OSError, StoreError):
            return  # an older draftgen holds the new file: the directory is still this run's
        if old is not None:
            old.close()
        _log.warning("%s was deleted or replaced during the run; it is made again", self.path)

    def release(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None
        if self._dir_fd is not None:
            RunLock._held.discard(self._dir_key)
            os.close(self._dir_fd)
            self._dir_fd = None

    @staticmethod
    def holder(run_dir: Path, ignore_own: bool = False) -> str | None:
        """Who holds the directory now (``"pid N"``, or ``"another process"`` if its lock file
        is gone: a run is working on the directory), or None.

        Reading takes no lock a run would wait for: a shared lock is tried and let go at once.
        ``ignore_own``: this process's own run is not "another run" (a run's final summary).
        """
        try:
            fd = os.open(Path(run_dir), os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            return None  # no directory: no run can hold it
        try:
            own = _fd_key(fd) in RunLock._held
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                fcntl.flock(fd, fcntl.LOCK_UN)
                held = False
            except BlockingIOError:
                held = True
        finally:
            os.close(fd)
        if own:
            return None if ignore_own else f"pid {os.getpid()}"
        named = _lock_file_holder(Path(run_dir) / LOCK_NAME)
        if held:
            return named or "another process"
        return named  # a draftgen from before the directory lock holds only the file


def _lock_file_holder(path: Path) -> str | None:
    """The text of a lock file whose lock is held (``"another process"`` if it is blank), or
    None if no process holds it."""
    try:
        handle = open(path)
    except OSError:
        return None
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return handle.read().strip() or "another process"
        fcntl.flock(handle, fcntl.LOCK_UN)
    return None


def _lock_file_text(path: Path) -> str | None:
    """What a lock file says (``"pid N"``), or None if it is gone or blank."""
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def _fd_key(fd: int) -> tuple[int, int]:
    stat = os.fstat(fd)
    return stat.st_dev, stat.st_ino


def _file_key(path: Path) -> tuple[int, int]:
    stat = os.stat(path)
    return stat.st_dev, stat.st_ino


def _check_run_dir(run_dir: Path) -> None:
    if run_dir.exists() and not run_dir.is_dir():
        raise StoreError(
            f"{run_dir} is a file, not a run directory; give a directory (new or a run's) instead"
        )


def run_files(run_dir: Path) -> list[str]:
    """The files of a run in ``run_dir`` besides its database: what shows a run was here."""
    names = [LOCK_NAME, REJECTED_NAME, f"{DB_NAME}-wal", f"{DB_NAME}-shm"]
    found = [name for name in names if (run_dir / name).exists()]
    for pattern in (RECOVERED_GLOB, UNSTORED_GLOB):
        found += sorted(path.name for path in run_dir.glob(pattern))
    return found


def check_store_file(run_dir: Path, create: bool, ignore: Collection[str] = ()) -> None:
    """Refuse a database file that is not a run's store before SQLite would take it for a new
    one: an empty (0-byte) file where a run's other files show a run was here (a store emptied
    under a run would start it over, buying everything again), or a file that is not SQLite. A
    brand-new directory (``create``) starts a new run; ``ignore``: files that show nothing."""
    path = run_dir / DB_NAME
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        if create:
            return
        saved = sorted(run_dir.glob(RECOVERED_GLOB))
        hint = f"; {saved[-1]} holds the store a run saved: move it to {path}" if saved else ""
        raise StoreError(f"{run_dir} holds no draftgen run ({DB_NAME} is missing{hint})") from None
    except OSError:
        return  # SQLite's open says what is wrong
    if size == 0:
        found = [name for name in run_files(run_dir) if name not in ignore]
        if found:
            raise StoreError(
                f"{path} is empty (0 bytes) but {run_dir} holds a run's files ({', '.join(found)}):"
                " put the store back from a backup, or delete it to start the run over (every "
                "completion is then bought again)"
            )
        if not create:
            raise StoreError(f"{run_dir} holds no draftgen run ({DB_NAME} is empty)")
    # A file that is not SQLite is refused by SQLite's own first read (``not_a_store``): opening
    # it here would not do, since closing any descriptor of the file drops every lock this
    # process's connections hold on it, and another process would then take the store for idle.


def not_a_store(path: Path) -> StoreError:
    return StoreError(
        f"{path} is not an SQLite database: put the run's store back from a backup, or move it "
        f"out of {path.parent} to start the run over"
    )


def restore_recovered(run_dir: Path) -> None:
    """Put back the store a run saved when its database was deleted under it (see
    ``StoreIdentity``), or refuse a directory where that store and another one compete."""
    path = run_dir / DB_NAME
    if not path.exists():
        # A journal without its database is the deleted store's: SQLite would lay its pages
        # over the next database opened here.
        for suffix in ("-wal", "-shm"):
            (run_dir / f"{DB_NAME}{suffix}").unlink(missing_ok=True)
    recovered = sorted(run_dir.glob(RECOVERED_GLOB))
    if not recovered:
        return
    if len(recovered) == 1 and not path.exists():
        os.replace(recovered[0], path)
        _log.warning("resuming from %s, saved when the store was deleted under a run", recovered[0])
        return
    names = ", ".join(str(p) for p in recovered)
    if path.exists():
        raise StoreError(
            f"{names} holds the store of a run whose {DB_NAME} was replaced under it: move it to "
            f"{path} to resume from it, or out of {run_dir} to resume from the store there"
        )
    raise StoreError(
        f"{run_dir} holds {len(recovered)} saved stores ({names}) and no {DB_NAME}: move the one "
        f"to resume from to {path} and the others out of {run_dir}"
    )


class StoreIdentity:
    """The database file a store opened (device and inode), checked against its path.

    SQLite goes on writing to a file deleted or replaced under it, where nothing will find the
    rows: the run's writer checks after every commit (an ``os.stat`` of the database and one of
    the lock file, 4 µs together, where a commit's fsync takes 300 µs or more) and, if the file
    at the path is another one, saves what the still-open connection holds to
    ``recovered-<time>.sqlite`` with SQLite's backup and stops the run. The run's lock file is
    watched too (``RunLock.keep``).
    """

    def __init__(self, path: Path, lock: RunLock | None = None) -> None:
        self.path = path
        self.key = _file_key(path)
        self.lock = lock
        self.recovery: Path | None = None  # where the rows were saved once the file was lost
        self.lost: str | None = None  # the message of the loss, once found
        self._journal: dict[Path, tuple[int, int]] = {}  # the lost file's -wal and -shm
        self._saving = threading.Lock()

    def check(self, db: sqlite3.Connection) -> None:
        """Raise ``StoreHalted`` if the file at the path is not the one opened, having saved
        what ``db`` (a connection to the file opened) holds on the first time."""
        if self.lost is None and self._holds_path():
            if self.lock is not None:
                self.lock.keep()
            return
        with self._saving:
            if self.lost is None:
                self.lost = self._save(db)
        raise StoreHalted(self.lost)

    def save_again(self, db: sqlite3.Connection) -> None:
        """Save what ``db`` holds once more, over the first save: rows written after the loss."""
        with self._saving:
            if self.recovery is not None:
                with contextlib.suppress(OSError, sqlite3.Error):
                    _backup(db, self.recovery)

    def drop_journal(self) -> None:
        """Delete the lost file's journal (``-wal``, ``-shm``) once no connection of this
        process holds the file: SQLite keeps it when its file has moved, and would lay its pages
        over the next database opened at the path."""
        for path, key in self._journal.items():
            with contextlib.suppress(OSError):
                if _file_key(path) == key:
                    path.unlink()

    def _holds_path(self) -> bool:
        try:
            return _file_key(self.path) == self.key
        except (FileNotFoundError, NotADirectoryError):
            return False
        except OSError:
            return True  # cannot tell (permissions): a paid run is not stopped on a guess

    def _save(self, db: sqlite3.Connection) -> str:
        """Save the rows ``db`` holds beside the path; the sentence that stops the run."""
        deleted = not self.path.exists()
        for suffix in ("-wal", "-shm"):  # still the lost file's: its connections have them open
            with contextlib.suppress(OSError):
                journal = self.path.with_name(self.path.name + suffix)
                self._journal[journal] = _file_key(journal)
        what = f"{self.path} was deleted or replaced while the run was writing to it"
        target = self.path.parent / f"recovered-{time.strftime('%Y%m%dT%H%M%S')}.sqlite"
        try:
            completions = _backup(db, target)
        except (OSError, sqlite3.Error) as exc:
            return (
                f"{what}, and the store it held could not be saved ({exc}): its completions are "
                "lost, and the same command starts the run over"
            )
        self.recovery = target
        _log.warning("saved the %d completions of the lost store in %s", completions, target)
        if deleted:
            return (
                f"{what}; the store it held is saved in {target}, which the same command "
                "resumes from"
            )
        return (
            f"{what}; the store it held is saved in {target}: move it to {self.path}, in place "
            "of the file put there, and rerun the same command to resume"
        )


def _backup(db: sqlite3.Connection, target: Path) -> int:
    """Copy the database ``db`` holds to ``target`` (whole, or not at all); its completions."""
    partial = target.with_name(f".{target.name}.partial")
    partial.unlink(missing_ok=True)
    copy = sqlite3.connect(partial)
    try:
        db.backup(copy)
        completions = copy.execute("SELECT count(*) FROM completions").fetchone()[0]
    finally:
        copy.close()
    with open(partial, "rb+") as handle:
        os.fsync(handle.fileno())
    os.replace(partial, target)
    _sync_directory(target.parent)
    return completions


def _sync_directory(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def side_file_line(sql: str, params: tuple) -> bytes:
    """One statement of a side file as a JSON line (blobs as hex, their places listed)."""
    blobs = [i for i, value in enumerate(params) if isinstance(value, bytes)]
    values = [value.hex() if i in blobs else value for i, value in enumerate(params)]
    return orjson.dumps({"sql": sql, "params": values, "blobs": blobs}) + b"\n"


def read_side_file(path: Path) -> list[tuple[str, tuple]]:
    """The statements of a side file; a line cut short by a crash is left out (its write was
    never reported done, so its turn is asked again)."""
    statements = []
    with open(path, "rb") as handle:
        for line in handle:
            try:
                entry = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            params = [
                bytes.fromhex(value) if i in entry["blobs"] else value
                for i, value in enumerate(entry["params"])
            ]
            statements.append((entry["sql"], tuple(params)))
    return statements


# A provider's figures, one row per (provider, reason a sample failed): one pass over the
# completions, the median latency ranked in the same pass (nearest rank, as the report's).
PROVIDER_FIGURES = """
WITH bought AS (
    SELECT coalesce(c.provider, '') AS provider, max(c.cost, 0) AS cost, c.latency AS latency,
        s.key IS NOT NULL AS sampled, s.verified = 1 AND s.truncated = 0 AS proven,
        s.truncated = 1 AS cut, CASE WHEN s.verified = 0 THEN s.reason END AS failed
    FROM completions c LEFT JOIN samples s ON s.key = c.key
    -- What a provider served that was bought again elsewhere is still its, failed as it was.
    UNION ALL
    SELECT coalesce(provider, ''), max(cost, 0), latency, 1, 0, 0, failed_check
    FROM replaced_completions
), served AS (
    SELECT *, row_number() OVER (PARTITION BY provider
            ORDER BY latency IS NULL, latency) AS latency_rank,
        count(latency) OVER (PARTITION BY provider) AS timed
    FROM bought
)
SELECT provider, failed, count(*), coalesce(sum(sampled), 0), coalesce(sum(proven), 0),
    coalesce(sum(cut), 0), sum(cost), max(CASE WHEN latency_rank = (timed + 1) / 2 THEN latency END)
FROM served GROUP BY provider, failed
"""
UNKNOWN_PROVIDER = "unknown"  # what a completion that named no provider is counted under


def _empty_figures() -> dict:
    return {
        "completions": 0,
        "samples": 0,
        "verified": 0,
        "unverified": {},
        "truncated": 0,
        "cost": 0.0,
        "latency_p50": None,
    }


def provider_figures(db: sqlite3.Connection) -> dict[str, dict]:
    """Per provider, most completions first: completions, samples, ``verified`` (and not cut at
    max_tokens), ``unverified`` (samples that failed a check, by reason, most first),
    ``truncated``, ``cost`` (a negative cost counts 0, as in ``counts``), ``latency_p50`` and
    ``cost_per_verified`` (None while nothing it served is verified)."""
    figures: dict[str, dict] = {}
    for provider, failed, served, sampled, proven, cut, cost, latency in db.execute(
        PROVIDER_FIGURES
    ):
        row = figures.setdefault(provider or UNKNOWN_PROVIDER, _empty_figures())
        row["completions"] += served
        row["samples"] += sampled
        row["verified"] += proven
        row["truncated"] += cut
        row["cost"] += cost
        if failed is not None:
            row["unverified"][failed] = sampled
        if latency is not None:
            row["latency_p50"] = round(latency, 3)
    # What calibration's questions cost went to the provider that answered them (one left out
    # by its answer has a row of its own: it was paid, and sold nothing else).
    for provider, questions in read_calibrations(db).items():
        row = figures.setdefault(provider or UNKNOWN_PROVIDER, _empty_figures())
        row["cost"] += calibration_cost({provider: questions})
    for row in figures.values():
        row["cost"] = round(row["cost"], 9)
        row["cost_per_verified"] = (
            round(row["cost"] / row["verified"], 9) if row["verified"] else None
        )
        row["unverified"] = dict(sorted(row["unverified"].items(), key=lambda i: (-i[1], i[0])))
    return dict(sorted(figures.items(), key=lambda item: (-item[1]["completions"], item[0])))


# The samples' count and the per-provider figures of a live run (its display, and the judge of
# its providers, which leaves a provider out as soon as they condemn it) are read at most this
# often, and less often when reading takes longer than this share of the time (a full pass over
# a large store).
FIGURES_EVERY = 1.0
FIGURES_SHARE = 0.05


class SampleTally:
    """Samples reconstructed and verified so far, and the figures of each provider
    (``provider_figures``), counted by a thread of its own on its own connection: a live
    display reads a few numbers, the loop never waits."""

    def __init__(
        self, path: Path, every: float = FIGURES_EVERY, figures_every: float = FIGURES_EVERY
    ) -> None:
        self.path = path
        self.every = every
        self.figures_every = figures_every
        self.samples = 0
        self.verified = 0
        self.providers: dict[str, dict] = {}
        self._figures_due = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="draftgen-tally", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def count(self, db: sqlite3.Connection, figures: bool = False) -> None:
        """Count the samples; read the providers' figures too when they are due or asked."""
        self.samples, self.verified = db.execute(
            "SELECT count(*), coalesce(sum(verified = 1 AND truncated = 0), 0) FROM samples"
        ).fetchone()
        started = time.monotonic()
        if figures or started >= self._figures_due:
            self.providers = provider_figures(db)
            spent = time.monotonic() - started
            self._figures_due = started + max(self.figures_every, spent / FIGURES_SHARE)

    def _run(self) -> None:
        try:
            db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=30)
        except sqlite3.Error:
            return  # a figure of the display only: the run goes on without it
        try:
            while True:
                started = time.monotonic()
                try:
                    self.count(db)
                except sqlite3.Error:
                    pass
                spent = time.monotonic() - started
                if self._stop.wait(max(self.every, spent / FIGURES_SHARE)):
                    with contextlib.suppress(sqlite3.Error):
                        self.count(db, figures=True)  # the figures as the display closes
                    return
        finally:
            db.close()


class CompletionWriter:
    """A thread committing completions and failures in groups; awaiting a write means durable.

    A group's writers are woken by one call into their event loop, not one each: thousands of
    completions a second would otherwise cost as many wake-ups of the loop.

    ``identity``: the file the run's store opened (None: the one at ``path`` now), checked after
    every commit. ``patience``: seconds a write the disk refuses (full, I/O error, locked) is
    tried again, its rows held in memory, before it is kept in a side file
    (``unstored-<time>.jsonl``, imported by the next run) and the run stopped; None: it fails at
    once, as for a store written outside a run (``Store.open_writer`` gives a run's writer).
    """

    def __init__(
        self, path: Path, identity: StoreIdentity | None = None, patience: float | None = None
    ) -> None:
        self.failure_reasons: collections.Counter = collections.Counter()  # this process's
        # (statements, the future of the coroutine awaiting them, or None), or None to stop.
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._db = connect(path)
        self._identity = identity or StoreIdentity(Path(path))
        self._patience = patience
        self._side_file = Path(path).parent / (
            f"unstored-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}.jsonl"
        )
        self._gave_up = False  # a write went to the side file: later ones wait no longer
        self._waited = 0.0  # seconds the last refused write was tried
        self._unsaved = False  # rows written after the store was lost, not yet saved
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._run, name="draftgen-store", daemon=True)
        self._thread.start()

    async def add_completion(
        self,
        key: str,
        source_id: str,
        turn: int,
        request: bytes,
        completion: Completion,
        attempts: int,
        errors: list[dict],
        latency: float,
    ) -> None:
        await self._submit(
            completion_statements(
                key, source_id, turn, request, completion, attempts, errors, latency
            )
        )

    async def write(self, statements: list[tuple[str, tuple]]) -> None:
        """Commit ``statements`` in one transaction (with whatever else is queued); durable
        once awaited."""
        await self._submit(statements)

    async def add_failure(
        self, key: str, source_id: str, turn: int, reason: str, attempts: int, errors: list[dict]
    ) -> None:
        row = (key, source_id, turn, reason, attempts, _json_or_none(errors), time.time())
        self.failure_reasons[reason] += 1
        await self._submit([(INSERT_FAILURE, row)])

    def note_endpoint_event(self, endpoint: str, event: str, detail: str) -> None:
        """Queue an endpoint's ejection, readmission or removal; not awaited, since the router
        that reports it runs in no coroutine of its own (a lost event costs only a figure)."""
        row = (endpoint, event, detail[:500], time.time())
        self._queue.put(([(INSERT_ENDPOINT_EVENT, row)], None))

    async def _submit(self, statements: list) -> None:
        future = asyncio.get_running_loop().create_future()
        self._queue.put((statements, future))
        await future

    def close(self) -> None:
        self._closing.set()  # a write being retried goes to the side file now
        self._queue.put(None)
        self._thread.join()
        if self._unsaved:
            self._identity.save_again(self._db)
        self._db.close()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            batch = [item]
            while len(batch) < 1000:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    self._queue.put(None)
                    break
                batch.append(nxt)
            self._commit(batch)

    def _commit(self, batch: list[tuple[list, asyncio.Future | None]]) -> None:
        """Commit a group in one transaction and wake its writers; whatever fails, fails their
        awaits with a ``StoreError``, never this thread (its death left a run waiting forever)."""
        started = time.monotonic()
        try:
            self._write_patiently(batch)
        except sqlite3.OperationalError as exc:
            self._waited = time.monotonic() - started
            # The store itself (disk full, I/O, lock): every write of the group fails alike.
            if self._patience is None:
                _settle(batch, StoreError(f"cannot write to the store: {exc}"))
            else:
                _settle(batch, StoreHalted(self._keep_aside(batch, exc)))
            return
        except Exception as exc:
            if len(batch) > 1:
                # A value one write could not bind (an int past 64 bits): the rest are kept.
                for item in batch:
                    self._commit([item])
                return
            _settle(batch, StoreError(_write_failure(exc)))
            return
        was_lost = self._identity.lost is not None
        try:
            # After the commit: the rows are in the file the connection holds, which a loss saves.
            self._identity.check(self._db)
        except StoreHalted as exc:
            self._unsaved = was_lost
            _settle(batch, exc)
            return
        _settle(batch, None)

    def _write_patiently(self, batch: list[tuple[list, asyncio.Future | None]]) -> None:
        """``_write``, tried again while the disk refuses it for up to ``patience`` seconds (none
        once a write went to the side file, or as the writer closes); raises the last error."""
        write_patiently(
            lambda: self._write(batch),
            0.0 if self._gave_up or self._patience is None else self._patience,
            lambda: f"{len(batch) + self._queue.qsize()} writes",
            self._side_file.parent,
            self._closing,
        )

    def _write(self, batch: list[tuple[list, asyncio.Future | None]]) -> None:
        begin_immediate(self._db)
        try:
            for statements, _ in batch:
                for sql, params in statements:
                    self._db.execute(sql, params)
            self._db.execute("COMMIT")
        except BaseException:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            raise

    def _keep_aside(self, batch: list[tuple[list, asyncio.Future | None]], exc: Exception) -> str:
        """Keep a write the store refused in the side file, or at least list its completions in
        the log; the sentence that stops the run."""
        waited = f" for {self._waited:.0f} s" if self._waited >= 1 else ""
        reason = f"cannot write to the store{waited} ({exc})"
        try:
            self._append_side_file(batch)
        except (OSError, TypeError, orjson.JSONEncodeError) as err:
            paid = [f"{key} (generation {gen})" for key, gen in _completion_ids(batch)]
            _log.error(
                "%s nor to %s (%s); these completions were paid for and are not stored: %s",
                reason,
                self._side_file,
                err,
                ", ".join(paid) or "none",
            )
            listed = ", ".join(paid[:3]) + (f" and {len(paid) - 3} more" if len(paid) > 3 else "")
            return (
                f"{reason} nor to {self._side_file} ({err}): the {len(paid)} completions of the "
                f"failed write are lost, and the log lists their keys and generation ids ("
                f"{listed or 'none'}); free disk space and rerun the same command"
            )
        if not self._gave_up:
            _log.warning("kept a write the store refused in %s", self._side_file)
        self._gave_up = True
        return (
            f"{reason}; the writes it refused are kept in {self._side_file}, which the next run "
            "imports: free disk space and rerun the same command to resume"
        )

    def _append_side_file(self, batch: list[tuple[list, asyncio.Future | None]]) -> None:
        lines = b"".join(
            side_file_line(sql, params) for statements, _ in batch for sql, params in statements
        )
        made = not self._side_file.exists()
        try:
            with open(self._side_file, "ab") as handle:
                handle.write(lines)
                handle.flush()
                os.fsync(handle.fileno())
        except OSError:
            if made:  # an empty or cut file would only say something was kept
                self._side_file.unlink(missing_ok=True)
            raise
        if made:
            _sync_directory(self._side_file.parent)


def write_patiently(
    write: Callable[[], None],
    patience: float,
    waiting: Callable[[], str],
    where: Path,
    stop: threading.Event | None = None,
) -> None:
    """Call ``write``, and again while the disk refuses it (``_disk_refused``) for up to
    ``patience`` seconds, sooner if ``stop`` is set; a warning every ``WARN_EVERY`` seconds
    names what waits (``waiting()``) and where space is wanted. Raises the last error."""
    started = time.monotonic()
    delay, warned = RETRY_FIRST_DELAY, None
    while True:
        try:
            write()
        except sqlite3.OperationalError as exc:
            waited = time.monotonic() - started
            stopped = stop is not None and stop.is_set()
            if not _disk_refused(exc) or stopped or waited >= patience:
                raise
            if warned is None or time.monotonic() - warned >= WARN_EVERY:
                warned = time.monotonic()
                _log.warning(
                    "cannot write to the store (%s): %s wait in memory and are tried again for "
                    "up to %.0f s more; free disk space in %s",
                    exc,
                    waiting(),
                    patience - waited,
                    where,
                )
            (stop or threading.Event()).wait(min(delay, patience - waited))
            delay = min(delay * 2, RETRY_MAX_DELAY)
            continue
        if warned is not None:
            _log.warning(
                "the store took the waiting writes after %.1f s", time.monotonic() - started
            )
        return


def _transaction(db: sqlite3.Connection, sql: str, rows: list[tuple]) -> None:
    """``executemany`` in one write transaction, rolled back if it fails (a COMMIT refused for
    a full disk leaves the transaction open)."""
    begin_immediate(db)
    try:
        db.executemany(sql, rows)
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise


def _disk_refused(exc: sqlite3.OperationalError) -> bool:
    """A write the disk or another connection refused for now (full, I/O error, locked), which
    a later try may get through, unlike a statement that cannot work."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        primary = code & 0xFF
        return primary in (
            sqlite3.SQLITE_FULL,
            sqlite3.SQLITE_IOERR,
            sqlite3.SQLITE_BUSY,
            sqlite3.SQLITE_LOCKED,
        )
    text = str(exc)
    return any(words in text for words in ("disk is full", "disk I/O error", "is locked"))


def _completion_ids(batch: list[tuple[list, asyncio.Future | None]]) -> list[tuple[str, str]]:
    """(key, generation id) of each completion a group of writes stores."""
    return [
        (params[0], params[4])
        for statements, _ in batch
        for sql, params in statements
        if sql == INSERT_COMPLETION
    ]


def _completions_in(batch: list[tuple[list, asyncio.Future | None]]) -> int:
    return len(_completion_ids(batch))


def _write_failure(exc: Exception) -> str:
    if isinstance(exc, sqlite3.Error):
        return f"cannot write to the store: {exc}"
    return f"cannot write to the store: {exc} ({exc.__class__.__name__})"


def _settle(batch: list[tuple[list, asyncio.Future | None]], error: Exception | None) -> None:
    """Wake the writers of a committed (or failed) group, in their order, one call per loop."""
    by_loop: dict[asyncio.AbstractEventLoop, list[asyncio.Future]] = {}
    for _, future in batch:
        if future is not None:
            by_loop.setdefault(future.get_loop(), []).append(future)
    for loop, futures in by_loop.items():
        try:
            loop.call_soon_threadsafe(_settle_futures, futures, error)
        except RuntimeError:
            pass  # the loop is closed: no coroutine awaits these any more


def _settle_futures(futures: list[asyncio.Future], error: Exception | None) -> None:
    for future in futures:
        if future.done():  # its coroutine was cancelled; the write stands all the same
            continue
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(error)


def exclusion_statements(provider: str, evidence: str) -> list[tuple[str, tuple]]:
    """The statement that records ``provider`` as left out (the first record of it stays)."""
    return [
        (
            "INSERT OR IGNORE INTO provider_exclusions (provider, at, evidence) VALUES (?, ?, ?)",
            (provider, time.time(), evidence),
        )
    ]


def replacement_statements(old: dict) -> list[tuple[str, tuple]]:
    """The statements that set aside the completion ``old`` (a row of ``spoiled_completions``)
    with everything it held, and the sample made of it, so the completion bought again takes its
    key; ``completion_statements`` of the new one follow in the same transaction."""
    key = old["key"]
    kept = {
        name: (value.decode("utf-8", "replace") if isinstance(value, bytes) else value)
        for name, value in old.items()
    }
    row = (
        key,
        old["provider"],
        old["cost"],
        old["prompt_tokens"],
        old["completion_tokens"],
        old["latency"],
        old["generation_id"],
        old["failed_check"],
        time.time(),
        orjson.dumps(kept).decode(),
    )
    return [
        (
            "INSERT OR IGNORE INTO replaced_completions (key, provider, cost, prompt_tokens,"
            " completion_tokens, latency, generation_id, failed_check, replaced_at, completion)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            row,
        ),
        *((f"DELETE FROM {table} WHERE key = ?", (key,)) for table in KEYED_TABLES),
    ]


# What a stored completion's key holds: the completion and what was made of it.
KEYED_TABLES = ("completions", "samples", "server_ids", "logprob_tokens")


def completion_statements(
    key: str,
    source_id: str,
    turn: int,
    request: bytes,
    completion: Completion,
    attempts: int,
    errors: list[dict],
    latency: float,
) -> list[tuple[str, tuple]]:
    """The statements that store one completion (and clear a failure of its key); a completion
    already stored under ``key`` is kept, so storing one twice changes nothing."""
    row = (
        key,
        source_id,
        turn,
        request,
        completion.generation_id,
        completion.provider,
        completion.model,
        completion.reasoning,
        completion.content,
        _json_or_none(completion.tool_calls),
        completion.finish_reason,
        completion.native_finish_reason,
        completion.prompt_tokens,
        completion.completion_tokens,
        completion.reasoning_tokens,
        completion.cost,
        _json_or_none(completion.usage),
        _json_or_none(pack_message(completion)),
        attempts,
        _json_or_none(errors),
        latency,
        time.time(),
        completion.endpoint,
        completion.endpoint_latency,
    )
    statements = [(INSERT_COMPLETION, row), ("DELETE FROM failures WHERE key = ?", (key,))]
    if completion.prompt_token_ids is not None and completion.completion_token_ids is not None:
        ids = (
            key,
            array("i", completion.prompt_token_ids).tobytes(),
            array("i", completion.completion_token_ids).tobytes(),
        )
        statements.append((INSERT_SERVER_IDS, ids))
    if completion.logprob_bytes is not None:
        packed = orjson.dumps([token.hex() for token in completion.logprob_bytes])
        statements.append((INSERT_LOGPROB_TOKENS, (key, packed)))
    return statements


def rejection_kind(reason: str) -> str:
    """A rejection reason without its row's particulars, so that alike rows count together:
    "messages[3] has unknown role 'x'; use one of ..." is "messages[i] has unknown role 'x'"."""
    kind = re.split(r"; | \(", reason, maxsplit=1)[0].strip()
    kind = re.sub(r"\[\d+\]", "[i]", kind)
    kind = re.sub(r"\bid '[^']*'", "id '…'", kind)
    kind = re.sub(r"\b\d+\b", "N", kind)
    return kind or "unknown"


def sample_row(sample: TokenSample) -> tuple:
    ids = sample.input_ids
    return (
        sample.key,
        # The bytes of ``array("i", ids)``, which readers take back, packed in half the time.
        struct.pack(f"{len(ids)}i", *ids),
        sample.prompt_len,
        int(sample.verified),
        sample.reason,
        sample.detail,
        int(sample.truncated),
        sample.id_source,
        sample.text_check,
    )


def _stored_completion(row: dict) -> StoredCompletion:
    request = orjson.loads(row["request"])
    completion = Completion(
        generation_id=row["generation_id"],
        provider=row["provider"],
        model=row["model"],
        reasoning=row["reasoning"],
        content=row["content"],
        tool_calls=orjson.loads(row["tool_calls"]) if row["tool_calls"] else None,
        finish_reason=row["finish_reason"],
        native_finish_reason=row["native_finish_reason"],
        usage=orjson.loads(row["usage"]) if row["usage"] else {},
        raw_message=unpack_message(row["raw_message"], row["reasoning"], row["content"]),
        prompt_token_ids=_ids_or_none(row.get("server_prompt_ids")),
        completion_token_ids=_ids_or_none(row.get("server_completion_ids")),
        logprob_bytes=(
            [bytes.fromhex(t) for t in orjson.loads(row["logprob_token_bytes"])]
            if row.get("logprob_token_bytes") is not None
            else None
        ),
    )
    return StoredCompletion(
        key=row["key"],
        source_id=row["source_id"],
        turn=row["turn"],
        messages=request["messages"],
        tools=request.get("tools"),
        completion=completion,
        rendering=(
            Rendering.from_dict(request["rendering"])
            if isinstance(request.get("rendering"), dict)
            else None
        ),
        stored_at=row.get("created_at"),
        latency=row.get("latency"),
    )


def _ids_or_none(blob: bytes | None) -> list[int] | None:
    if blob is None:
        return None
    ids = array("i")
    ids.frombytes(blob)
    return ids.tolist()


def _add_missing_columns(db: sqlite3.Connection) -> None:
    """Columns added after a store was first made (CREATE TABLE IF NOT EXISTS keeps old tables)."""
    columns = {row[1] for row in db.execute("PRAGMA table_info(samples)")}
    if "text_check" not in columns:
        db.execute("ALTER TABLE samples ADD COLUMN text_check TEXT NOT NULL DEFAULT ''")
    columns = {row[1] for row in db.execute("PRAGMA table_info(completions)")}
    for name, kind in (("endpoint", "TEXT"), ("endpoint_latency", "REAL")):
        if name not in columns:  # stores from before several endpoints: NULL, "not recorded"
            db.execute(f"ALTER TABLE completions ADD COLUMN {name} {kind}")


# In a stored raw message, a text that is the completion's reasoning or content (OpenRouter sends
# the reasoning twice: ``reasoning`` and ``reasoning_details[].text``) is this one-key object
# naming the column that holds it, so the store keeps each text once.
SAME_AS = "\u0000same_as"
_SAME_AS_JSON = orjson.dumps(SAME_AS).decode()  # the key as it appears in the stored text
_SHARED_MIN = 64  # shorter texts are cheaper to keep than to point at


def pack_message(completion: Completion) -> object:
    """``completion.raw_message`` with its copies of the reasoning and content made references."""
    content, reasoning = completion.content, completion.reasoning
    content = content if content and len(content) >= _SHARED_MIN else None
    reasoning = reasoning if reasoning and len(reasoning) >= _SHARED_MIN else None
    if content is None and reasoning is None:
        return completion.raw_message

    def pack(value: object) -> object:
        # Compared, not looked up: hashing a fresh answer's texts costs more than comparing
        # them (a copy is usually the same object, and texts of other lengths differ at once).
        if isinstance(value, str):
            if value == reasoning:  # a text that is both is stored as the reasoning
                return {SAME_AS: "reasoning"}
            return {SAME_AS: "content"} if value == content else value
        if isinstance(value, dict):
            return {k: pack(v) for k, v in value.items()}
        if isinstance(value, list):
            return [pack(v) for v in value]
        return value

    return pack(completion.raw_message)


def unpack_message(text: str | None, reasoning: str | None, content: str | None) -> dict:
    """The raw message as the API sent it, from what ``pack_message`` stored."""
    if not text:
        return {}
    message = orjson.loads(text)
    if _SAME_AS_JSON not in text:
        return message
    columns = {"reasoning": reasoning, "content": content}

    def unpack(value: object) -> object:
        if isinstance(value, dict):
            if len(value) == 1 and SAME_AS in value:
                return columns[value[SAME_AS]]
            return {k: unpack(v) for k, v in value.items()}
        if isinstance(value, list):
            return [unpack(v) for v in value]
        return value

    return unpack(message)


def _json_or_none(value: object) -> str | None:
    return orjson.dumps(value).decode() if value else None

"""The store's tables and the statements that fill them, in one place: the schema, the columns
added since, a connection and its lock, and the one connection the store's parts share.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

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
    errors TEXT,
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
-- Answers refused for their usage (a false cost, a count out of range; draftgen.store.refused):
-- billed, so kept and counted as spent at their billed estimate (cost), never reconstructed or
-- exported. A turn has up to two (generate.client.REFUSED_ANSWERS); key is NULL for calibration's.
CREATE TABLE IF NOT EXISTS refused_answers (
    key TEXT,
    source_id TEXT NOT NULL,
    turn INTEGER NOT NULL,
    generation_id TEXT,
    provider TEXT,
    reason TEXT NOT NULL,
    usage TEXT NOT NULL,
    answer BLOB NOT NULL,
    prompt_tokens INTEGER,
    completion_tokens INTEGER,
    cost REAL NOT NULL,
    created_at REAL NOT NULL,
    UNIQUE (source_id, turn, created_at)  -- a record replayed twice keeps each answer once
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


# What a stored completion's key holds: the completion and what was made of it.
KEYED_TABLES = ("completions", "samples", "server_ids", "logprob_tokens")


def add_missing_columns(db: sqlite3.Connection) -> None:
    """Columns added after a store was first made (CREATE TABLE IF NOT EXISTS keeps old tables)."""
    columns = {row[1] for row in db.execute("PRAGMA table_info(samples)")}
    if "text_check" not in columns:
        db.execute("ALTER TABLE samples ADD COLUMN text_check TEXT NOT NULL DEFAULT ''")
    columns = {row[1] for row in db.execute("PRAGMA table_info(completions)")}
    for name, kind in (("endpoint", "TEXT"), ("endpoint_latency", "REAL")):
        if name not in columns:  # stores from before several endpoints: NULL, "not recorded"
            db.execute(f"ALTER TABLE completions ADD COLUMN {name} {kind}")
    columns = {row[1] for row in db.execute("PRAGMA table_info(provider_calibrations)")}
    for name in ("generation_id", "errors"):
        if name not in columns:  # calibration answers stored before they kept these: NULL
            db.execute(f"ALTER TABLE provider_calibrations ADD COLUMN {name} TEXT")


LOCK_WAIT = 30.0  # seconds a connection waits for another's lock before it gives up


def connect(path: Path) -> sqlite3.Connection:
    connection = sqlite3.connect(
        path, timeout=LOCK_WAIT, isolation_level=None, check_same_thread=False
    )
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("PRAGMA synchronous=FULL")
    return connection


@dataclass
class StoreFile:
    """A store's file and the one connection every part of the store shares (``StorePart``):
    a connection opened again (``reopen``) is then every part's."""

    path: Path
    run_dir: Path
    db: sqlite3.Connection

    def reopen(self) -> None:
        """A connection opened while the store's file could not be written stays read-only."""
        fresh = connect(self.path)
        self.db.close()
        self.db = fresh


class StorePart:
    """One thing a store keeps (its settings, samples, providers ...): its reads and writes over
    the store's one connection, held by ``Store`` as an attribute named by what it keeps."""

    def __init__(self, file: StoreFile) -> None:
        self.file = file

    @property
    def db(self) -> sqlite3.Connection:
        return self.file.db

    @property
    def run_dir(self) -> Path:
        return self.file.run_dir


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


@contextlib.contextmanager
def write_transaction(db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """A write transaction (``begin_immediate``) committed when the block ends, rolled back if
    anything in it raises (a COMMIT refused for a full disk leaves the transaction open)."""
    begin_immediate(db)
    try:
        yield db
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise

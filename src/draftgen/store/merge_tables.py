"""A store's side of merging runs (``draftgen.store.merge``): its tables and columns listed
(``Tables``), its keys ranked and rows copied across stores (``Merge``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from draftgen.store.schema import StoreFile, StorePart


class Located(Protocol):
    """A store, or a store's file: what names the file a merge copies rows from."""

    path: Path


class Tables(StorePart):
    """``Store.tables``: the tables a store's file holds, their columns and rows, whatever
    draftgen made them."""

    def read(self) -> dict[str, str]:
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


class Merge(StorePart):
    """``Store.merge``: a store's side of a merge: its keys ranked, rows copied from another
    store in one statement."""

    def __init__(self, file: StoreFile, tables: Tables) -> None:
        super().__init__(file)
        self.tables = tables

    def key_records(self, batch: int = 10_000) -> Iterator[list[tuple[str, bool, bool]]]:
        """(key, has a verified untruncated sample, has a completion) of every key with a
        completion or a failure, ``batch`` keys at a time; tables an older store lacks count as
        empty."""
        tables = self.tables.read()
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

    def copy_rows(
        self, source: Located, table: str, columns: list[str], run: int, every_row: bool = False
    ) -> None:
        """Copy ``columns`` of ``source``'s rows of ``table`` into this store, run ``run`` of a
        merge: a keyed row only if ``rank_keys`` gave its key to that run (unless
        ``every_row``), a row whose key is stored already kept. One statement streams the rows
        inside SQLite (twice the speed of taking them through Python in batches)."""
        self._merge_tables()
        names = ", ".join(f'"{name}"' for name in columns)
        select = f'SELECT {names} FROM merge_source."{table}"'
        if "key" in columns and not every_row:
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

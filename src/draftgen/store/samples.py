"""Samples and their verdicts: the token samples reconstruction writes, the flags a later check
sets, the reads of exports and of the background checks, and ``SampleTally``, a live run's count
of samples and of each provider's figures.
"""

from __future__ import annotations

import contextlib
import sqlite3
import struct
import threading
import time
from array import array
from collections.abc import Collection, Iterator
from pathlib import Path

import orjson

from draftgen.records import OLD_PROOF_NAMES, StoredCompletion, TokenSample, proof_name
from draftgen.store import writer
from draftgen.store.completions import _stored_completion
from draftgen.store.identity import StoreError
from draftgen.store.providers import provider_figures
from draftgen.store.schema import INSERT_SAMPLE, SELECT_COMPLETIONS, StorePart
from draftgen.store.writer import _transaction, write_patiently


class Samples(StorePart):
    """``Store.samples``: the writes and reads of samples and verdicts."""

    def restart_samples(self, fingerprint: str) -> None:
        """Delete every sample, then record what the next ones are made with (meta
        ``reconstruction``: the tokenizer, profile and version); a stop between the two only
        leaves the delete to be done again."""
        self.clear_samples()
        self._write_samples(
            "INSERT OR REPLACE INTO meta (name, value) VALUES (?, ?)",
            [("reconstruction", fingerprint)],
        )

    def clear_samples(self) -> None:
        self._write_samples("DELETE FROM samples", [()])

    def add_samples(self, samples: list[TokenSample]) -> None:
        rows = [sample_row(s) for s in samples]  # made before the lock is taken
        self._write_samples(INSERT_SAMPLE, rows)

    def _write_samples(self, sql: str, rows: list[tuple]) -> None:
        """``executemany`` in one transaction, waiting out a disk that refuses it (full, or the
        directory made read-only, the connection then opened again) like the completion writer
        does: samples can be made again, but a run that has stored every completion should not
        end in an error for want of a moment's disk space or permission."""
        try:
            write_patiently(
                lambda: _transaction(self.db, sql, rows),
                writer.STORE_PATIENCE,  # read now: a test shortens it
                lambda: f"{len(rows)} samples",
                self.run_dir,
                reopen=self.file.reopen,
            )
        except sqlite3.OperationalError as exc:
            raise StoreError(
                f"cannot write samples to the store ({exc}); the completions are stored: free "
                "disk space or make the directory writable, and run draftgen export to "
                "reconstruct the rest"
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

    def details_by_provider(self, reason: str, containing: str) -> dict[str, list[tuple[str, str]]]:
        """(key, detail) by provider ('' where none was named) of the samples failed for
        ``reason`` whose detail holds ``containing``."""
        explained: dict[str, list[tuple[str, str]]] = {}
        for provider, key, detail in self.db.execute(
            "SELECT coalesce(c.provider, ''), s.key, s.detail FROM samples s JOIN completions c"
            " ON c.key = s.key WHERE s.reason = ? AND instr(s.detail, ?) > 0",
            (reason, containing),
        ).fetchall():
            explained.setdefault(provider, []).append((key, detail))
        return explained

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

    def verified_tool_call_samples(
        self, providers: set[str]
    ) -> Iterator[tuple[str, StoredCompletion, list[int]]]:
        """(provider, stored completion, the sample's completion ids) of every verified
        text-path sample with tool calls served by one of ``providers``, in key order."""
        for provider in sorted(providers):
            cursor = self.db.execute(
                SELECT_COMPLETIONS.replace(
                    "SELECT ",
                    "SELECT s.input_ids AS sample_ids, s.prompt_len AS sample_prompt, ",
                    1,
                )
                + " JOIN samples s ON s.key = c.key WHERE s.verified = 1 AND s.id_source = 'text'"
                " AND c.tool_calls IS NOT NULL AND coalesce(c.provider, '') = ? ORDER BY c.key",
                (provider,),
            )
            names = [d[0] for d in cursor.description]
            for values in cursor:
                row = dict(zip(names, values, strict=True))
                ids = array("i")
                ids.frombytes(row.pop("sample_ids"))
                start = row.pop("sample_prompt")
                yield provider, _stored_completion(row), ids[start:].tolist()

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

    def export_rows(
        self, include_unverified: bool, proofs: Collection[str] | None = None
    ) -> Iterator[dict]:
        """The samples an export holds, in order, ``input_ids`` a list of ints; with ``proofs``,
        only the samples proven by one of them (``records.PROOFS``)."""
        for row in self.export_samples(include_unverified, proofs):
            row["input_ids"] = row["input_ids"].tolist()
            yield row

    def export_samples(
        self, include_unverified: bool, proofs: Collection[str] | None = None
    ) -> Iterator[dict]:
        """``export_rows`` with ``input_ids`` an ``array("i")``, for writers that take the ids as
        one buffer (numpy, Arrow) rather than a Python int each."""
        sql = """
            SELECT c.key, c.source_id, c.turn, c.finish_reason, c.provider, c.generation_id,
                   s.prompt_len, s.verified, s.reason, s.truncated, s.id_source
            FROM samples s JOIN completions c ON c.key = s.key
        """
        sql += export_filter(include_unverified, proofs)
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
                "id_source": proof_name(id_source),
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
            "id_source": proof_name(id_source),
        }

    def export_completions(
        self, include_unverified: bool, proofs: Collection[str] | None = None
    ) -> Iterator[tuple[StoredCompletion, dict]]:
        """The completions of the samples ``export_rows`` yields, in the same order, each with
        its verdict (``verified``, ``verify_reason``) and proof (``id_source``): for exports that
        keep text, not ids."""
        sql = (
            SELECT_COMPLETIONS.replace(
                "SELECT ",
                "SELECT s.verified AS sample_verified, s.truncated AS sample_truncated,"
                " s.reason AS sample_reason, s.id_source AS sample_id_source, ",
                1,
            )
            + " JOIN samples s ON s.key = c.key"
            + export_filter(include_unverified, proofs)
        )
        cursor = self.db.execute(sql + " ORDER BY c.source_id, c.turn, c.key")
        names = [d[0] for d in cursor.description]
        for values in cursor:
            row = dict(zip(names, values, strict=True))
            verified, truncated = row.pop("sample_verified"), row.pop("sample_truncated")
            verdict = {
                "verified": bool(verified) and not truncated,
                "verify_reason": row.pop("sample_reason"),
                "id_source": proof_name(row.pop("sample_id_source")),
            }
            yield _stored_completion(row), verdict


def export_filter(include_unverified: bool, proofs: Collection[str] | None = None) -> str:
    """The WHERE clause (or "") of the samples an export holds, over ``samples s``: verified
    ones unless ``include_unverified``, and with ``proofs`` only those proven by one of them
    (an old store's "server" is "ids")."""
    conditions = [] if include_unverified else ["s.verified = 1 AND s.truncated = 0"]
    if proofs is not None:
        stored = {name for name in proofs} | {
            old for old, name in OLD_PROOF_NAMES.items() if name in proofs
        }
        # The names are checked against PROOFS where they are given; quoted here all the same.
        names = ", ".join("'" + name.replace("'", "''") + "'" for name in sorted(stored))
        conditions.append(f"s.id_source IN ({names})")
    return " WHERE " + " AND ".join(conditions) if conditions else ""


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
        proof_name(sample.id_source),
        sample.text_check,
    )


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

    def recount(self) -> None:
        """Count once more, now (its thread stopped): the figures once reconstruction is done."""
        with contextlib.suppress(sqlite3.Error):
            db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=30)
            try:
                self.count(db, figures=True)
            finally:
                db.close()

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

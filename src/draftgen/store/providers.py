"""Providers in the store's rows: each one's figures (``provider_figures``), the ones a run left
out (``exclusion_statements``), the completions bought again elsewhere (``replacement_statements``,
re-buy figures), and what calibration asked them (``store.calibration``).
"""

from __future__ import annotations

import sqlite3
import time

import orjson

from draftgen.store.calibration import calibration_cost, read_calibrations
from draftgen.store.refused import refused_by_provider
from draftgen.store.schema import KEYED_TABLES, StorePart


class Providers(StorePart):
    """``Store.providers``: providers' figures, the ones left out, and re-buys (what calibration
    asked them is ``Store.calibrations``)."""

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

    def exclude_provider(self, provider: str, evidence: str) -> None:
        """Record ``provider`` as left out of the run (``excluded_providers``)."""
        for sql, params in exclusion_statements(provider, evidence):
            self.db.execute(sql, params)

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
    # An answer refused for its usage was billed by the provider that sent it.
    for provider, (_, cost) in refused_by_provider(db).items():
        row = figures.setdefault(provider or UNKNOWN_PROVIDER, _empty_figures())
        row["cost"] += cost
    for row in figures.values():
        row["cost"] = round(row["cost"], 9)
        row["cost_per_verified"] = (
            round(row["cost"] / row["verified"], 9) if row["verified"] else None
        )
        row["unverified"] = dict(sorted(row["unverified"].items(), key=lambda i: (-i[1], i[0])))
    return dict(sorted(figures.items(), key=lambda item: (-item[1]["completions"], item[0])))


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

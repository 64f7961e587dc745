"""What ``draftgen status`` counts (``counts`` and its parts: cost, samples, retries, failures,
endpoints, batches, rejected rows), and the rows the report and ``--max-cost`` read.
"""

from __future__ import annotations

import collections
import re
from collections.abc import Iterator

import orjson

from draftgen.records import PROOFS, proof_name
from draftgen.store.batch_timing import Batches, billed_without_rows
from draftgen.store.calibration import Calibrations, calibration_cost
from draftgen.store.identity import REJECTED_NAME, RunLock
from draftgen.store.providers import Providers
from draftgen.store.refused import refused_figures
from draftgen.store.schema import StoreFile, StorePart
from draftgen.store.settings import Settings


class Tallies(StorePart):
    """``Store.tallies``: the counts; ``counts`` also reads the other parts' figures (providers,
    re-buys, calibration, batches, settings), which it is given."""

    def __init__(
        self,
        file: StoreFile,
        *,
        settings: Settings,
        providers: Providers,
        calibrations: Calibrations,
        batches: Batches,
    ) -> None:
        super().__init__(file)
        self.settings = settings
        self.providers = providers
        self.calibrations = calibrations
        self.batches = batches

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
        rebuys = self.providers.rebuy_figures()
        # What was bought and replaced was paid for: the run's cost and tokens count it.
        cost += rebuys["spoiled_cost"]
        prompt_tokens += rebuys["spoiled_prompt_tokens"]
        completion_tokens += rebuys["spoiled_completion_tokens"]
        calibrations = self.calibrations.read()
        cost += calibration_cost(calibrations)
        # Answers refused for their usage were billed: their estimates count, as --max-cost's do.
        refused, refused_cost = refused_figures(self.db)
        cost += refused_cost
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
            # Only when there are any: answers kept apart, never exported (draftgen.store.refused).
            **(
                {"refused_usage": {"answers": refused, "cost": round(refused_cost, 9)}}
                if refused
                else {}
            ),
            **self._outcome_tallies(figures),
            **self._source_figures(rebuys, calibrations),
            **self._directory_figures(),
        }

    def _outcome_tallies(self, figures: dict) -> dict:
        """``counts``' part on how requests ended and samples fared: failures, finish reasons,
        the sample ``figures``, verdict reasons, what is not reconstructed yet, exactness."""
        return {
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
        }

    def _source_figures(self, rebuys: dict, calibrations: dict) -> dict:
        """``counts``' part on where the answers came from: endpoints, providers, the providers
        left out, re-buys and calibration (the last three only when there are any)."""
        return {
            "endpoints": self.endpoint_figures(),
            "providers": self.providers.provider_figures(),
            # Only when a provider was left out: the run went on without it.
            **(
                {"excluded_providers": excluded}
                if (excluded := self.providers.excluded_providers())
                else {}
            ),
            **({"rebuys": rebuys} if rebuys["rebought"] else {}),
            # Only when the run calibrated: what each provider was asked and what it proved.
            **({"calibration": calibrations} if calibrations else {}),
        }

    def _directory_figures(self) -> dict:
        """``counts``' part on the run directory: rejected rows, a run holding it, batches, and
        the simulated marker and derived layout (only when set)."""
        return {
            **self.rejected_rows(),
            "active_run": RunLock.holder(self.run_dir, ignore_own=True),
            "batches": self.batches.batch_figures(),
            # Only when set: a run of real data shows what it showed before the marker existed.
            **({"simulated": simulated} if (simulated := self.settings.simulated()) else {}),
            # Only for the generic profile: what its chat template showed.
            **({"derived_layout": derived} if (derived := self.settings.derived_layout()) else {}),
        }

    def spent(self) -> float:
        """What every completion bought cost (a negative cost counts 0), those replaced by a
        re-buy included."""
        return self.db.execute(
            "SELECT coalesce(sum(max(cost, 0)), 0) FROM (SELECT cost FROM completions"
            " UNION ALL SELECT cost FROM replaced_completions"
            " UNION ALL SELECT cost FROM provider_calibrations)"
        ).fetchone()[0]

    def sample_figures(self) -> dict:
        """Samples reconstructed, verified (and not cut at max_tokens), and truncated."""
        samples, verified, truncated = self.db.execute(
            "SELECT count(*), coalesce(sum(verified = 1 AND truncated = 0), 0),"
            " coalesce(sum(truncated = 1), 0) FROM samples"
        ).fetchone()
        return {"samples": samples, "verified": verified, "truncated": truncated}

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
            " WHERE f.errors IS NOT NULL"
            # Calibration's questions keep only the attempts that were sent again.
            " UNION ALL SELECT p.errors, -1 FROM provider_calibrations p"
            " WHERE p.errors IS NOT NULL) AS t, json_each(t.errors) AS e"
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

    def proof_counts(self) -> dict[str, dict]:
        """Samples and verified samples by proof, every one of ``records.PROOFS`` in its order
        (an old store's names read as the new)."""
        counts = {name: {"samples": 0, "verified": 0} for name in PROOFS}
        for source, samples, verified in self.db.execute(
            "SELECT id_source, count(*), coalesce(sum(verified = 1 AND truncated = 0), 0)"
            " FROM samples GROUP BY id_source"
        ):
            row = counts.setdefault(proof_name(source), {"samples": 0, "verified": 0})
            row["samples"] += samples
            row["verified"] += verified
        return counts

    def exactness(self) -> dict:
        """Per proof (ids | logprobs | text) found: samples, verified; and, where the server
        gave the ids, how often the text path rebuilt exactly them (``text_check``)."""
        found = [(name, row) for name, row in self.proof_counts().items() if row["samples"]]
        by_source = dict(sorted(found, key=lambda item: -item[1]["samples"]))
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


def rejection_kind(reason: str) -> str:
    """A rejection reason without its row's particulars, so that alike rows count together:
    "messages[3] has unknown role 'x'; use one of ..." is "messages[i] has unknown role 'x'"."""
    kind = re.split(r"; | \(", reason, maxsplit=1)[0].strip()
    kind = re.sub(r"\[\d+\]", "[i]", kind)
    kind = re.sub(r"\bid '[^']*'", "id '…'", kind)
    kind = re.sub(r"\b\d+\b", "N", kind)
    return kind or "unknown"

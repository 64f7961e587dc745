"""Report: a run's numbers as ``report.json``, the document ``report.html`` draws.

Everything is computed once here, into the JSON; the page (``report_page``, a Jinja2 template)
only lays it out, and every number it prints carries ``data-metric="<json path>"`` (and
``data-scale`` when it is shown as a percentage) so a test can check the page against the JSON.
"""

from __future__ import annotations

import math
import os
import shlex
import time
from collections import Counter, defaultdict
from pathlib import Path

import orjson

from draftgen import __version__

# Besides OUTCOMES, the page's names: importable from here as before the page was a template.
from draftgen.outputs.report_charts import (  # noqa: F401
    GREEN,
    GREY,
    LABEL_LINE,
    OUTCOMES,
    RED,
    TICK_ROOM,
    row_colour,
)
from draftgen.outputs.report_page import (  # noqa: F401
    bar_chart,
    flagged_section,
    provider_section,
    render_html,
    throughput_chart,
)
from draftgen.outputs.show import sample_tokens
from draftgen.reconstruct.reasons import DOCS, meaning_of
from draftgen.reconstruct.resplits import proof_figures, record_pairs, stored_pairs
from draftgen.reconstruct.verify import unproven_figures
from draftgen.redact import printable_json
from draftgen.store.batch_timing import batch_rounds
from draftgen.store.database import REJECTED_NAME, Store

JSON_NAME = "report.json"
HTML_NAME = "report.html"
HISTOGRAM_BINS = 12
THROUGHPUT_POINTS = 40
# A gap between stored completions this long (and 20 times the usual gap) is a pause: Ctrl-C and
# a resume, a stop at --max-cost, a stall. The chart cuts it out and labels it.
PAUSE_SECONDS = 30.0
# Throughput buckets people read without arithmetic: seconds, minutes, hours.
BUCKET_SECONDS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600)
# Flagged samples listed by id in the report (the rest are counted).
FLAGGED_SHOWN = 50
# Sample rows drawn token by token: the prompt's last tokens and the answer's first.
PROMPT_TAIL = 40
ANSWER_HEAD = 400
# SpecForge's --max-length (2048 by default) and the lengths drafters are commonly trained at.
MAX_LENGTHS = (1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)


# -- numbers --------------------------------------------------------------------------------------


def build_report(store: Store) -> dict:
    """The document: every figure report.html shows, computed once (docs/report.md names them)."""
    rows = list(store.tallies.report_rows())
    failures = list(store.tallies.failure_rows())
    counts = store.tallies.counts()
    sequences = [_sequence_len(r) for r in rows]
    batch_run = bool(counts.get("batches"))
    flow = throughput(rows, pauses=not batch_run)
    run_sources = sources(store, counts)
    return {
        "draftgen_version": __version__,
        "run_dir": str(store.run_dir),
        "generated_at": round(time.time(), 3),
        "model": _settings(store).get("model"),
        "tokenizer": store.settings.meta("tokenizer"),
        "profile": store.settings.meta("profile"),
        "settings": settings_panel(store, run_sources),
        "time": run_time(rows, failures, flow, counts["completion_tokens"]),
        "flagged": flagged(store, rows, failures),
        "sources": run_sources,
        # What simulator answered (the store's marker), or None: the data is real.
        "simulated": store.settings.simulated(),
        "active_run": counts.get("active_run"),
        "totals": totals(counts, len(failures)),
        "outcomes": outcome_counts(rows, failures),
        "verification_reasons": counts["reasons"],
        "reason_meanings": reason_meanings(counts["reasons"]),
        "finish_reasons": counts["finish_reasons"],
        "failure_reasons": counts["failures"],
        "retried_errors": counts.get("retried_errors") or {},
        "attempt_errors": attempt_errors(rows, failures),
        "rejected": {
            "rows": counts.get("rejected", 0),
            "reasons": counts.get("rejected_reasons") or {},
            "file": str(store.run_dir / REJECTED_NAME),
        },
        "lengths": lengths(rows, sequences),
        "max_length_fit": max_length_fit(sequences),
        "providers": providers(rows, counts["providers"]),
        # The providers the run left out, with the evidence, and what buying again came to.
        "excluded_providers": counts.get("excluded_providers") or {},
        "rebuys": counts.get("rebuys") or {},
        # What calibration asked each provider before buying, what it proved and cost.
        "calibration": counts.get("calibration") or {},
        # Yield lost to doubt: samples that may be exact but that the proof could not settle.
        "unproven": unproven_figures(counts["reasons"], counts["samples"]),
        "throughput": flow,
        "exactness": counts["exactness"],
        # Samples by proof; the text proof's re-splits a count cannot see, estimated.
        "proofs": proofs(store),
        "endpoints": endpoints(counts.get("endpoints") or {}, rows),
        # run --batch: batches by state and status, and what the API charged (usage.cost).
        "batches": counts.get("batches") or {},
        # Every batch as the chart of rounds draws it (a live run has none).
        "batch_rounds": batch_rounds(store.db, time.time()) if batch_run else [],
        "sample_rows": sample_rows(store, rows),
    }


def proofs(store: Store) -> dict:
    """``proof_figures``; the pairs it needs measured here for a run whose reconstruction did
    not (a store from before), unless the run's tokenizer does not load."""
    if stored_pairs(store) is None and store.settings.meta("tokenizer"):
        try:
            from draftgen.tokens.tokenizer import load_tokenizer

            record_pairs(store, load_tokenizer(store.settings.meta("tokenizer")))
        except Exception:  # the counts are still worth having: the estimate says "not measured"
            pass
    return proof_figures(store)


def totals(counts: dict, failures: int) -> dict:
    """The run's headline figures (the page's cards) from ``Store.tallies.counts``."""
    return {
        "completions": counts["completions"],
        "samples": counts["samples"],
        "verified": counts["verified"],
        "failures": failures,
        "rejected": counts.get("rejected", 0),
        "cost": counts["cost"],
        # The headline: what one sample a trainer can use cost (None: none verified).
        "cost_per_verified": counts["cost_per_verified"],
        "prompt_tokens": counts["prompt_tokens"],
        "completion_tokens": counts["completion_tokens"],
        "retried_attempts": counts["retried_attempts"],
        "verified_share": round(counts["verified"] / counts["samples"], 4)
        if counts["samples"]
        else 0.0,
    }


def outcome_counts(rows: list[dict], failures: list[dict]) -> dict:
    """Stored completions by outcome (``OUTCOMES``), and the turns that failed."""
    outcomes = Counter(_outcome(row) for row in rows)
    outcomes["failed"] = len(failures)
    return {name: outcomes.get(name, 0) for name in OUTCOMES}


def reason_meanings(reasons: dict) -> dict:
    """What each verification reason of the run means, and the docs section that says more."""
    return {
        reason: {"meaning": meaning, "docs": f"{DOCS}#{anchor}"}
        for reason in reasons
        for meaning, anchor in [meaning_of(reason)]
    }


def attempt_errors(rows: list[dict], failures: list[dict]) -> dict:
    """Every failed attempt by kind, retried or final, most frequent first."""
    kinds = Counter(e.get("kind") or "unknown" for row in rows for e in row["errors"])
    kinds.update(e.get("kind") or "unknown" for f in failures for e in f["errors"])
    return dict(kinds.most_common())


def lengths(rows: list[dict], sequences: list) -> dict:
    """The distributions of prompt, reasoning, answer and whole-row lengths, in tokens."""
    return {
        "prompt": distribution([_prompt_len(r) for r in rows]),
        "reasoning": distribution([r["reasoning_tokens"] for r in rows]),
        "answer": distribution([_answer_len(r) for r in rows]),
        "sequence": distribution(sequences),
    }


def sample_rows(store: Store, rows: list[dict]) -> dict:
    """A few samples token by token, as ``draftgen show`` prints them (the same function): the
    first verified, unverified and truncated one stored, the prompt's last ``PROMPT_TAIL``
    tokens and the answer's first ``ANSWER_HEAD``, each token as ``[id, text]``."""
    firsts: dict[str, str] = {}
    for row in rows:
        if row["verified"] is not None:
            firsts.setdefault(_outcome(row), row["key"])
    keys = [firsts[kind] for kind in ("verified", "unverified", "truncated") if kind in firsts]
    if not keys:
        return {"samples": [], "unavailable": None}
    try:
        from draftgen.tokens.tokenizer import load_tokenizer

        tokenizer = load_tokenizer(store.settings.meta("tokenizer"))
    except Exception as exc:  # the report is still worth having without them
        return {"samples": [], "unavailable": f"the run's tokenizer did not load ({exc})"}
    run_dir = shlex.quote(str(store.run_dir))
    shown = []
    for key in keys:
        sample = sample_tokens(store, key, tokenizer)
        if sample is None:
            continue
        pairs = [list(pair) for pair in zip(sample["input_ids"], sample["tokens"], strict=True)]
        prompt, answer = pairs[: sample["prompt_len"]], pairs[sample["prompt_len"] :]
        shown.append(
            {
                "id": sample["id"],
                "verified": sample["verified"],
                "verify_reason": sample["verify_reason"],
                "provider": sample["provider"],
                "finish_reason": sample["finish_reason"],
                "prompt_tokens": len(prompt),
                "answer_tokens": len(answer),
                "prompt_tail": prompt[-PROMPT_TAIL:],
                "answer": answer[:ANSWER_HEAD],
                "command": f"draftgen show {run_dir} {shlex.quote(sample['id'])}",
            }
        )
    return {"samples": shown, "unavailable": None}


def settings_panel(store: Store, run_sources: list[dict]) -> dict:
    """What the run was made with: the generation settings the store checks on every resume,
    the tokenizer and its digest, the profile, where it was sent (no secrets), draftgen's
    version."""
    settings = _settings(store)
    reasoning = settings.get("reasoning")
    return {
        "model": settings.get("model"),
        "max_tokens": settings.get("max_tokens"),
        "temperature": settings.get("temperature"),
        "top_p": settings.get("top_p"),
        "seed": settings.get("seed"),
        "reasoning": reasoning,
        "effort": reasoning.get("effort") if isinstance(reasoning, dict) else None,
        "profile": store.settings.meta("profile"),
        "tokenizer": store.settings.meta("tokenizer"),
        "tokenizer_digest": store.settings.meta("tokenizer_digest"),
        "endpoints": [
            f"{endpoint_label(s.get('endpoint', ''))} ({s.get('server', 'unknown')})"
            for s in run_sources
        ],
        "draftgen_version": __version__,
        # Everything else the store recorded (backend fields, provider routing, template kwargs).
        "other": {
            name: value
            for name, value in sorted(settings.items())
            if name not in ("model", "max_tokens", "temperature", "top_p", "seed", "reasoning")
            and value is not None
        },
    }


def endpoint_label(url: str) -> str:
    """``url`` without what could be a secret: user and password, query and fragment."""
    from urllib.parse import urlsplit, urlunsplit

    from draftgen.redact import redact

    try:
        parts = urlsplit(url)
    except ValueError:
        return redact(url)
    if not parts.scheme:
        return redact(url)
    host = parts.hostname or ""
    netloc = host + (f":{parts.port}" if parts.port else "")
    return redact(urlunsplit((parts.scheme, netloc, parts.path, "", "")))


def run_time(rows: list[dict], failures: list[dict], flow: dict, completion_tokens: int) -> dict:
    """When the run worked and how fast: from the first request (the first stored completion's
    time less its latency) to the last completion or failure stored; working time leaves the
    throughput chart's pauses out, and output tokens per second are over working time."""
    starts = [r["created_at"] - (r["latency"] or 0.0) for r in rows if r["created_at"]]
    ends = [r["created_at"] for r in rows if r["created_at"]]
    ends += [f["created_at"] for f in failures if f.get("created_at")]
    if not starts and not ends:
        return {
            "started_at": None,
            "finished_at": None,
            "wall_seconds": None,
            "working_seconds": None,
            "paused_seconds": 0.0,
            "completion_tokens_per_second": None,
            "completions_per_minute": None,
        }
    started, finished = min(starts or ends), max(ends)
    wall = max(0.0, finished - started)
    paused = sum((p["seconds"] for p in flow.get("pauses") or []), 0.0)
    working = max(0.0, wall - paused)
    return {
        "started_at": round(started, 3),
        "finished_at": round(finished, 3),
        "wall_seconds": round(wall, 3),
        "working_seconds": round(working, 3),
        "paused_seconds": round(paused, 3),
        "completion_tokens_per_second": round(completion_tokens / working, 2) if working else None,
        "completions_per_minute": round(60 * len(rows) / working, 2) if working else None,
    }


def flagged(store: Store, rows: list[dict], failures: list[dict]) -> dict:
    """Samples the default export leaves out (unverified, truncated) and turns that failed, each
    with its id, reason and what to do; the first ``FLAGGED_SHOWN`` by id are listed."""
    left_out = {
        r["key"]: r
        for r in rows
        if r["verified"] is not None and (not r["verified"] or r["truncated"])
    }
    by_reason: Counter = Counter()
    for row in left_out.values():
        by_reason["truncated" if row["truncated"] else row["reason"] or "unknown"] += 1
    for failure in failures:
        by_reason[f"failed: {failure['reason'] or 'unknown'}"] += 1
    listed: list[dict] = []
    if left_out:
        # Ids are read from the completions (in id order) only until enough are found.
        for stored in store.completions.read():
            row = left_out.get(stored.key)
            if row is None:
                continue
            kind = "truncated" if row["truncated"] else "unverified"
            reason = "length" if row["truncated"] else row["reason"] or "unknown"
            listed.append(_flag(f"{stored.source_id}:{stored.turn}", kind, reason))
            if len(listed) >= FLAGGED_SHOWN:
                break
    for failure in sorted(failures, key=lambda f: (str(f["source_id"]), f["turn"] or 0)):
        if len(listed) >= FLAGGED_SHOWN:
            break
        listed.append(
            _flag(
                f"{failure['source_id']}:{failure['turn']}",
                "failed",
                failure["reason"] or "unknown",
            )
        )
    total = len(left_out) + len(failures)
    run_dir = shlex.quote(str(store.run_dir))
    return {
        "count": total,
        "unverified": sum(1 for r in left_out.values() if not r["truncated"]),
        "truncated": sum(1 for r in left_out.values() if r["truncated"]),
        "failed": len(failures),
        "by_reason": dict(by_reason.most_common()),
        "shown": listed,
        "more": total - len(listed),
        "commands": {
            "include": f"draftgen export {run_dir} --include-unverified --out "
            + shlex.quote(str(store.run_dir / "with-unverified.jsonl")),
            "retry_failed": "run the same draftgen run command again (final failures are "
            "retried on a resume)",
        },
    }


def _flag(sample_id: str, kind: str, reason: str) -> dict:
    if kind == "failed":
        fix = "run the same draftgen run command again: a resume retries final failures"
    elif kind == "truncated":
        fix = (
            "cut at max_tokens: export with --include-unverified to keep it, or raise "
            "--max-tokens in a new run"
        )
    else:
        meaning = meaning_of(reason)[0]
        fix = f"{meaning}; export with --include-unverified to keep it (verified: false)"
    return {"id": sample_id, "kind": kind, "reason": reason, "fix": fix}


def sources(store: Store, counts: dict) -> list[dict]:
    """Where the data came from: the endpoints each run probed (``server`` says what answered:
    ``simulator`` for the built-in one, whose data is synthetic), else the endpoints that served
    completions (a run from before draftgen recorded its sources)."""
    raw = store.settings.meta("sources")
    if raw:
        return orjson.loads(raw)
    return [{"endpoint": url, "server": "unknown"} for url in counts.get("endpoints") or {}]


def _sequence_len(row: dict) -> int | None:
    """A training row's whole length: prompt and generated ids (the provider's counts before
    reconstruction)."""
    if row.get("sample_len") is not None:
        return row["sample_len"]
    if row["prompt_tokens"] is None or row["completion_tokens"] is None:
        return None
    return row["prompt_tokens"] + row["completion_tokens"]


def max_length_fit(lengths: list) -> list[dict]:
    """For each common training ``max_length``: the samples it holds whole, the rest being cut.

    Listed up to the first length that holds every sample (at least up to SpecForge's 2048)."""
    known = [n for n in lengths if n is not None]
    if not known:
        return []
    longest = max(known)
    table = []
    for limit in MAX_LENGTHS:
        fits = sum(1 for n in known if n <= limit)
        table.append(
            {
                "max_length": limit,
                "fits": fits,
                "cut": len(known) - fits,
                "share": round(fits / len(known), 4),
            }
        )
        if limit >= longest and limit >= 2048:
            break
    return table


def _settings(store: Store) -> dict:
    raw = store.settings.meta("settings")
    return orjson.loads(raw) if raw else {}


def _outcome(row: dict) -> str:
    if row["verified"] is None:
        return "not_reconstructed"
    if row["truncated"]:
        return "truncated"
    return "verified" if row["verified"] else "unverified"


def _prompt_len(row: dict) -> int | None:
    # The rebuilt prompt is exact; the provider's count is the fallback before reconstruction.
    return row["prompt_len"] if row["prompt_len"] is not None else row["prompt_tokens"]


def _answer_len(row: dict) -> int | None:
    if row["completion_tokens"] is None:
        return None
    return max(0, row["completion_tokens"] - (row["reasoning_tokens"] or 0))


def distribution(values: list) -> dict:
    """count, mean, percentiles and a histogram of equal-width bins from 0 over known values."""
    known = sorted(v for v in values if v is not None)
    if not known:
        return {"count": 0, "missing": len(values), "histogram": []}
    width = nice_step(known[-1] / HISTOGRAM_BINS) if known[-1] > 0 else 1
    bins = Counter(min(int(v // width), HISTOGRAM_BINS + 1) for v in known)
    last = max(bins)
    return {
        "count": len(known),
        "missing": len(values) - len(known),
        "min": known[0],
        "mean": round(sum(known) / len(known), 2),
        "p50": percentile(known, 50),
        "p90": percentile(known, 90),
        "max": known[-1],
        "histogram": [
            {"lo": i * width, "hi": (i + 1) * width, "count": bins.get(i, 0)}
            for i in range(last + 1)
        ],
    }


def percentile(ordered: list, q: float):
    """Nearest-rank percentile of an ascending list."""
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def nice_step(raw: float) -> float:
    """The smallest of 1, 2, 5 x 10^k at least ``raw`` (integers stay integers)."""
    if raw <= 0:
        return 1
    power = 10 ** math.floor(math.log10(raw))
    for factor in (1, 2, 5, 10):
        if factor * power >= raw:
            step = factor * power
            return int(step) if step >= 1 else step
    return 10 * power


def _verified_share(rows: list[dict]) -> float | None:
    """Verified and complete samples over the reconstructed ones among ``rows``."""
    sampled = [r for r in rows if r["verified"] is not None]
    if not sampled:
        return None
    return round(sum(1 for r in sampled if r["verified"] and not r["truncated"]) / len(sampled), 4)


def providers(rows: list[dict], figures: dict[str, dict] | None = None) -> list[dict]:
    """A row per provider, most completions first; ``figures``
    (``Store.providers.provider_figures``) add dollars per verified sample and the samples that
    failed, by reason, and count what a provider served that was bought again elsewhere (its
    completions, cost and failed samples), which the stored rows no longer hold."""
    figures = figures or {}
    by_provider: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        by_provider[row["provider"] or "unknown"].append(row)
    for name in figures:
        by_provider.setdefault(name, [])
    table = []
    for name, group in by_provider.items():
        latencies = sorted(r["latency"] for r in group if r["latency"] is not None)
        sampled = [r for r in group if r["verified"] is not None]
        verified = sum(1 for r in sampled if r["verified"] and not r["truncated"])
        counted = {
            "completions": len(group),
            "cost": sum(r["cost"] or 0.0 for r in group),
            "samples": len(sampled),
            "verified": verified,
        }
        if name in figures:
            counted = {key: figures[name][key] for key in counted}
        samples = counted["samples"]
        table.append(
            {
                "provider": name,
                "completions": counted["completions"],
                "cost": counted["cost"],
                "latency_p50": round(percentile(latencies, 50), 3)
                if latencies
                else figures.get(name, {}).get("latency_p50"),
                "latency_p90": round(percentile(latencies, 90), 3) if latencies else None,
                "retried_errors": sum(len(r["errors"]) for r in group),
                "unverified": samples - counted["verified"],
                "samples": samples,
                "verified_share": round(counted["verified"] / samples, 4) if samples else None,
                **price_and_reasons(figures.get(name)),
            }
        )
    table.sort(key=lambda row: (-row["completions"], row["provider"]))
    return table


def price_and_reasons(figures: dict | None) -> dict:
    """A provider's dollars per verified sample, and its failed samples by reason: counted and
    as a share of its samples."""
    figures = figures or {"cost_per_verified": None, "unverified": {}, "samples": 0}
    failed = figures["unverified"]
    return {
        "cost_per_verified": figures["cost_per_verified"],
        "unverified_reasons": failed,
        "unverified_shares": {
            reason: round(count / figures["samples"], 4) for reason, count in failed.items()
        },
    }


def endpoints(figures: dict[str, dict], rows: list[dict]) -> list[dict]:
    """The store's per-endpoint figures with latency percentiles of the serving attempts."""
    latencies: dict[str, list[float]] = defaultdict(list)
    for row in rows:
        if row.get("endpoint") is not None and row.get("endpoint_latency") is not None:
            latencies[row["endpoint"]].append(row["endpoint_latency"])
    served: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        served[row.get("endpoint")].append(row)
    table = []
    for url, figure in figures.items():
        ordered = sorted(latencies.get(url, ()))
        table.append(
            {
                "endpoint": url,
                "samples": sum(1 for r in served.get(url, []) if r["verified"] is not None),
                "verified_share": _verified_share(served.get(url, [])),
                "requests": figure["requests"],
                "completions": figure["completions"],
                "errors": figure["errors"],
                "error_kinds": figure["error_kinds"],
                "ejections": figure["ejections"],
                "readmissions": figure["readmissions"],
                "removed": figure["removed"],
                "latency_p50": round(percentile(ordered, 50), 3) if ordered else None,
                "latency_p90": round(percentile(ordered, 90), 3) if ordered else None,
                "prompt_tokens": figure["prompt_tokens"],
                "completion_tokens": figure["completion_tokens"],
            }
        )
    return table


def throughput(rows: list[dict], pauses: bool = True) -> dict:
    """Completions and completion tokens stored per time bucket, over the time the run worked.

    Gaps of ``PAUSE_SECONDS`` or more (and 20 times the median gap) are pauses: listed with
    their length and left out of the buckets, so a resume a day later is a labelled break in the
    chart, not a day of empty buckets. Within the run's working time an empty bucket is a
    bucket in which nothing was stored.
    """
    ordered = sorted(rows, key=lambda r: r["created_at"])
    if not ordered:
        return {"bucket_seconds": 0, "start": None, "points": [], "pauses": []}
    times = [r["created_at"] for r in ordered]
    gaps = sorted(b - a for a, b in zip(times, times[1:], strict=False))
    usual = gaps[len(gaps) // 2] if gaps else 0.0
    # A batch run (``pauses`` False) stores each batch's answers at once: the waits between
    # batches are the work, not pauses.
    threshold = max(PAUSE_SECONDS, 20 * usual) if pauses else math.inf
    # Segments of work between pauses, as (first index, last index).
    segments, first = [], 0
    for i in range(1, len(times)):
        if times[i] - times[i - 1] >= threshold:
            segments.append((first, i - 1))
            first = i
    segments.append((first, len(times) - 1))
    working = sum(times[b] - times[a] for a, b in segments)
    bucket = bucket_seconds(working / THROUGHPUT_POINTS)
    start = times[0]
    points, pauses = [], []
    for number, (a, b) in enumerate(segments):
        if number:
            gap_start = times[segments[number - 1][1]]
            pauses.append(
                {"after": round(gap_start - start, 3), "seconds": round(times[a] - gap_start, 3)}
            )
        count = int((times[b] - times[a]) // bucket) + 1
        completions, tokens = [0] * count, [0] * count
        for row in ordered[a : b + 1]:
            index = min(int((row["created_at"] - times[a]) // bucket), count - 1)
            completions[index] += 1
            tokens[index] += row["completion_tokens"] or 0
        points += [
            {
                "t": round(times[a] - start + i * bucket, 3),
                "completions": completions[i],
                "tokens": tokens[i],
                "segment": number,
            }
            for i in range(count)
        ]
    return {"bucket_seconds": bucket, "start": round(start, 3), "points": points, "pauses": pauses}


def bucket_seconds(raw: float) -> int:
    """The smallest of ``BUCKET_SECONDS`` at least ``raw`` (whole hours past the last)."""
    for step in BUCKET_SECONDS:
        if step >= raw:
            return step
    return 3600 * math.ceil(raw / 3600)


# -- files ----------------------------------------------------------------------------------------


def write_report(store: Store, out_dir: Path | None = None) -> tuple[Path, Path]:
    """Write report.json and report.html into ``out_dir`` (the run directory by default)."""
    report = build_report(store)
    out_dir = Path(out_dir or store.run_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, html_path = out_dir / JSON_NAME, out_dir / HTML_NAME
    _replace(json_path, printable_json(report, indent=True).encode())
    _replace(html_path, render_html(report).encode())
    return json_path, html_path


def _replace(path: Path, data: bytes) -> None:
    partial = path.with_name(path.name + ".partial")
    partial.write_bytes(data)
    os.replace(partial, path)

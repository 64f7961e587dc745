"""Report: a run's numbers as ``report.json`` and a self-contained ``report.html`` with pictures.

Everything is computed once into the JSON; the page only draws it (inline SVG, no scripts, no
network), and every number it prints carries ``data-metric="<json path>"`` (and ``data-scale``
when it is shown as a percentage) so a test can check the page against the JSON. Colours carry
meaning: green is verified, amber unverified, purple truncated, red failed; bars of providers and
endpoints are coloured by the verified share of what they served.
"""

from __future__ import annotations

import html
import math
import os
import shlex
import textwrap
import time
from collections import Counter, defaultdict
from pathlib import Path

import orjson

import draftgen
from draftgen import __version__
from draftgen.outputs.show import sample_tokens
from draftgen.reconstruct.verify import unproven_figures
from draftgen.redact import printable, usd, usd_decimals
from draftgen.store.batch_timing import batch_rounds, duration_text, timing_text
from draftgen.store.database import REJECTED_NAME, Store

JSON_NAME = "report.json"
HTML_NAME = "report.html"
HISTOGRAM_BINS = 12
THROUGHPUT_POINTS = 40
MAX_LABEL = 60  # characters of a bar's label; longer ones end in an ellipsis (table: whole)
# A gap between stored completions this long (and 20 times the usual gap) is a pause: Ctrl-C and
# a resume, a stop at --max-cost, a stall. The chart cuts it out and labels it.
PAUSE_SECONDS = 30.0
# Throughput buckets people read without arithmetic: seconds, minutes, hours.
BUCKET_SECONDS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600)
# A verified share of fewer samples than this says little: drawn neutral, labelled with its n.
MIN_SHARE_SAMPLES = 5
# Flagged samples listed by id in the report (the rest are counted).
FLAGGED_SHOWN = 50
# Batches drawn in the report's chart of rounds (the rest are in report.json).
ROUNDS_SHOWN = 40
# Sample rows drawn token by token: the prompt's last tokens and the answer's first.
PROMPT_TAIL = 40
ANSWER_HEAD = 400
# Characters of a bar label's line: longer labels wrap onto more lines (never cut).
LABEL_LINE = 30
# SpecForge's --max-length (2048 by default) and the lengths drafters are commonly trained at.
MAX_LENGTHS = (1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)
OUTCOMES = ("verified", "unverified", "truncated", "failed", "not_reconstructed")
GREEN, LIGHT_GREEN, AMBER, RED, PURPLE, GREY = (
    "#3a9a5b",
    "#8cc084",
    "#e08a2e",
    "#c2453d",
    "#7d5ab5",
    "#8f8f8f",
)
BLUE = "#2f6db5"  # quantities with no good or bad: lengths, throughput
OUTCOME_COLOURS = dict(zip(OUTCOMES, (GREEN, AMBER, PURPLE, RED, GREY), strict=True))
FINISH_COLOURS = {"stop": GREEN, "tool_calls": GREEN, "length": PURPLE}
# Verified share -> colour, from the top band down; the legend lists the same bands.
SHARE_BANDS = ((0.95, GREEN, "95% or more"), (0.8, LIGHT_GREEN, "80-95%"), (0.5, AMBER, "50-80%"))
SHARE_LOW = (RED, "under 50%")
DOCS = "docs/verification.md"
# What each verification reason means (README "What verified means"), and the doc section.
REASON_MEANINGS: dict[str, tuple[str, str]] = {
    "ok": ("the ids decode to the text and both token counts match the provider's", "the-checks"),
    "completion_count_mismatch": (
        "the provider counted a different number of generated tokens: a non-canonical "
        "segmentation or text the provider altered",
        "the-checks",
    ),
    "prompt_count_mismatch": (
        "the provider's prompt differs from the render of the chat template",
        "prompt-ids",
    ),
    "decode_mismatch": ("decoding the ids does not give back the text", "the-checks"),
    "whitespace_altered": (
        "the count matches once whitespace is restored at the content's edges: the provider "
        "stripped it",
        "whitespace-a-provider-strips",
    ),
    "provider_strips_whitespace": (
        "this provider strips edge whitespace and a strip here would not change the count, so "
        "the sample cannot be proven",
        "whitespace-a-provider-strips",
    ),
    "provider_reserialises_tool_arguments": (
        "this provider was caught re-serialising tool-call arguments, and a re-serialisation "
        "here would not change the count, so the sample cannot be proven",
        "tool-arguments-a-provider-re-serialises",
    ),
    "no_usage": ("the response carried no token counts, so nothing could be proven", "the-checks"),
    "structured_tool_calls": (
        "the API returned message.tool_calls and the profile has no tool-call format",
        "completion-ids",
    ),
    "tool_calls_inexact": (
        "the tool-call markup rebuilt from message.tool_calls matches the count in no reading",
        "completion-ids",
    ),
    "tool_arguments_reserialised": (
        "the count matches only a re-serialised reading of the tool arguments: likely, not proven",
        "completion-ids",
    ),
    "tool_argument_literal_unproven": (
        "a rebuilt tool argument is a boolean or null, which the model spells two ways "
        "(true or True) that a count cannot tell apart",
        "completion-ids",
    ),
    "tool_call_id_rebuilt": (
        "the provider renamed the model's tool call ids; rebuilt ones cannot be proven",
        "completion-ids",
    ),
    "tool_call_format_unconfirmed": (
        "the profile's tool-call markup is not confirmed, so rebuilt calls are never proven",
        "models",
    ),
    "server_count_mismatch": (
        "ids returned by a vLLM / SGLang server disagree with its own usage counts",
        "the-checks",
    ),
    "logprob_text_mismatch": (
        "logprob token bytes do not spell the returned content",
        "the-checks",
    ),
    "reasoning_in_non_thinking_prompt": (
        "reasoning came back although the prompt turned thinking off",
        "the-checks",
    ),
    "content_filter": ("the provider filtered the answer", "the-checks"),
    "prompt_render_failed": (
        "the chat template, encoder or harmony could not render the prompt, or the engine "
        "refuses it (gpt-oss: an effort other than low, medium or high)",
        "prompt-ids",
    ),
    "prompt_mode_unproven": (
        "thinking on and off render prompts of the same length, and the answer does not show "
        "which one the server used",
        "template-variables-and-what-is-proven",
    ),
    "prompt_date_unproven": (
        "the template stamps the date and the request crossed midnight (UTC)",
        "template-variables-and-what-is-proven",
    ),
    "prompt_renderer_unproven": (
        "the published chat template renders this prompt to other ids at the same count as the "
        "engine's renderer, and this provider has not shown which one it uses",
        "renderer-parity",
    ),
}


# -- numbers --------------------------------------------------------------------------------------


def build_report(store: Store) -> dict:
    rows = list(store.report_rows())
    failures = list(store.failure_rows())
    counts = store.counts()
    outcomes = Counter()
    for row in rows:
        outcomes[_outcome(row)] += 1
    outcomes["failed"] = len(failures)
    attempt_errors = Counter(e.get("kind") or "unknown" for row in rows for e in row["errors"])
    attempt_errors.update(e.get("kind") or "unknown" for f in failures for e in f["errors"])
    sequences = [_sequence_len(r) for r in rows]
    batch_run = bool(counts.get("batches"))
    flow = throughput(rows, pauses=not batch_run)
    run_sources = sources(store, counts)
    return {
        "draftgen_version": __version__,
        "run_dir": str(store.run_dir),
        "generated_at": round(time.time(), 3),
        "model": _settings(store).get("model"),
        "tokenizer": store.meta("tokenizer"),
        "profile": store.meta("profile"),
        "settings": settings_panel(store, run_sources),
        "time": run_time(rows, failures, flow, counts["completion_tokens"]),
        "flagged": flagged(store, rows, failures),
        "sources": run_sources,
        # What simulator answered (the store's marker), or None: the data is real.
        "simulated": store.simulated(),
        "active_run": counts.get("active_run"),
        "totals": {
            "completions": counts["completions"],
            "samples": counts["samples"],
            "verified": counts["verified"],
            "failures": len(failures),
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
        },
        "outcomes": {name: outcomes.get(name, 0) for name in OUTCOMES},
        "verification_reasons": counts["reasons"],
        "reason_meanings": {
            reason: {"meaning": meaning, "docs": f"{DOCS}#{anchor}"}
            for reason in counts["reasons"]
            for meaning, anchor in [REASON_MEANINGS.get(reason, ("see the docs", "the-checks"))]
        },
        "finish_reasons": counts["finish_reasons"],
        "failure_reasons": counts["failures"],
        "retried_errors": counts.get("retried_errors") or {},
        "attempt_errors": dict(attempt_errors.most_common()),
        "rejected": {
            "rows": counts.get("rejected", 0),
            "reasons": counts.get("rejected_reasons") or {},
            "file": str(store.run_dir / REJECTED_NAME),
        },
        "lengths": {
            "prompt": distribution([_prompt_len(r) for r in rows]),
            "reasoning": distribution([r["reasoning_tokens"] for r in rows]),
            "answer": distribution([_answer_len(r) for r in rows]),
            "sequence": distribution(sequences),
        },
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
        "endpoints": endpoints(counts.get("endpoints") or {}, rows),
        # run --batch: batches by state and status, and what the API charged (usage.cost).
        "batches": counts.get("batches") or {},
        # Every batch as the chart of rounds draws it (a live run has none).
        "batch_rounds": batch_rounds(store.db, time.time()) if batch_run else [],
        "sample_rows": sample_rows(store, rows),
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

        tokenizer = load_tokenizer(store.meta("tokenizer"))
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
        "profile": store.meta("profile"),
        "tokenizer": store.meta("tokenizer"),
        "tokenizer_digest": store.meta("tokenizer_digest"),
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
        for stored in store.completions():
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
        meaning = REASON_MEANINGS.get(reason, ("see the docs", "the-checks"))[0]
        fix = f"{meaning}; export with --include-unverified to keep it (verified: false)"
    return {"id": sample_id, "kind": kind, "reason": reason, "fix": fix}


def sources(store: Store, counts: dict) -> list[dict]:
    """Where the data came from: the endpoints each run probed (``server`` says what answered:
    ``simulator`` for the built-in one, whose data is synthetic), else the endpoints that served
    completions (a run from before draftgen recorded its sources)."""
    raw = store.meta("sources")
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
    raw = store.meta("settings")
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
    """A row per provider, most completions first; ``figures`` (``Store.provider_figures``)
    add dollars per verified sample and the samples that failed, by reason, and count what a
    provider served that was bought again elsewhere (its completions, cost and failed samples),
    which the stored rows no longer hold."""
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


def per_bucket(seconds: float) -> str:
    """A bucket as an axis names it: "second", "10 s", "5 min", "2 h"."""
    if seconds == 1:
        return "second"
    if seconds < 60 or seconds % 60:
        return f"{seconds:g} s"
    if seconds < 3600 or seconds % 3600:
        return "minute" if seconds == 60 else f"{seconds / 60:g} min"
    return "hour" if seconds == 3600 else f"{seconds / 3600:g} h"


# -- files ----------------------------------------------------------------------------------------


def write_report(store: Store, out_dir: Path | None = None) -> tuple[Path, Path]:
    """Write report.json and report.html into ``out_dir`` (the run directory by default)."""
    report = build_report(store)
    out_dir = Path(out_dir or store.run_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, html_path = out_dir / JSON_NAME, out_dir / HTML_NAME
    _replace(json_path, orjson.dumps(report, option=orjson.OPT_INDENT_2))
    _replace(html_path, render_html(report).encode())
    return json_path, html_path


def _replace(path: Path, data: bytes) -> None:
    partial = path.with_name(path.name + ".partial")
    partial.write_bytes(data)
    os.replace(partial, path)


# -- page -----------------------------------------------------------------------------------------


def metric(path: tuple, value, decimals: int | None = None, scale: int = 1) -> str:
    """A number as the page shows it, tagged with its place in report.json (a JSON list of keys,
    since reason names may hold any character); ``scale`` 100 shows a share as a percentage."""
    where = html.escape(orjson.dumps(list(path)).decode())
    if scale != 1 and value is not None:
        shown = format_number(value * scale, 1 if decimals is None else decimals)
        return f'<span class="num" data-metric="{where}" data-scale="{scale}">{shown}</span>%'
    return f'<span class="num" data-metric="{where}">{format_number(value, decimals)}</span>'


def dollars(path: tuple, value) -> str:
    """Money as every command prints it (``redact.usd``): cents, or four significant
    digits under a cent."""
    return "$" + metric(path, value, usd_decimals(value or 0.0))


def price(path: tuple, value: float | None) -> str:
    """Dollars per verified sample: enough digits for a fraction of a cent ("–" for none)."""
    return "–" if value is None else "$" + metric(path, value, usd_decimals(value))


def percent(path: tuple, value) -> str:
    return metric(path, value, 1, scale=100)


def format_number(value, decimals: int | None = None) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return str(value)
    if decimals is None:
        decimals = 4 if abs(value) < 1 else 2
    return f"{value:.{decimals}f}"


def share_colour(share: float | None) -> str:
    """The colour of a verified share (``SHARE_BANDS``); grey when nothing was reconstructed."""
    if share is None:
        return GREY
    for floor, colour, _ in SHARE_BANDS:
        if share >= floor:
            return colour
    return SHARE_LOW[0]


def row_colour(row: dict) -> str:
    """A provider's or endpoint's bar colour: its verified share's, or neutral grey when it
    served fewer than ``MIN_SHARE_SAMPLES`` samples (one unverified sample is not 0%)."""
    if (row.get("samples") or 0) < MIN_SHARE_SAMPLES:
        return GREY
    return share_colour(row.get("verified_share"))


def _few(row: dict) -> str:
    """ " (n=1)" after a share of fewer than ``MIN_SHARE_SAMPLES`` samples."""
    n = row.get("samples") or 0
    return f" (n={n})" if 0 < n < MIN_SHARE_SAMPLES else ""


def share_legend() -> str:
    bands = [(colour, label) for _, colour, label in SHARE_BANDS] + [
        SHARE_LOW,
        (GREY, f"none, or fewer than {MIN_SHARE_SAMPLES} samples (n shown)"),
    ]
    swatches = "".join(
        f'<span class="swatch" style="background:{colour}"></span>{html.escape(label)} '
        for colour, label in bands
    )
    return f'<p class="legend">Bar colour: verified share of the samples served. {swatches}</p>'


def render_html(report: dict) -> str:
    t = report["totals"]
    cards = [
        ("completions stored", metric(("totals", "completions"), t["completions"])),
        ("samples", metric(("totals", "samples"), t["samples"])),
        ("verified", metric(("totals", "verified"), t["verified"])),
        ("verified share", percent(("totals", "verified_share"), t["verified_share"])),
        ("final failures", metric(("totals", "failures"), t["failures"])),
        ("rows rejected", metric(("totals", "rejected"), t.get("rejected", 0))),
        ("cost (USD)", dollars(("totals", "cost"), t["cost"])),  # as charged, where reported
        ("$ per verified sample", price(("totals", "cost_per_verified"), t["cost_per_verified"])),
        ("prompt tokens", metric(("totals", "prompt_tokens"), t["prompt_tokens"])),
        ("completion tokens", metric(("totals", "completion_tokens"), t["completion_tokens"])),
        ("retried attempts", metric(("totals", "retried_attempts"), t["retried_attempts"])),
    ]
    batches = report.get("batches") or {}
    if batches.get("charged") is not None:  # what the batch API says it charged
        charged = dollars(("batches", "charged"), batches["charged"])
        cards.append(("charged by the batch API", charged))
    timing = report.get("time") or {}
    if timing.get("wall_seconds") is not None:
        cards.append(("wall time", html.escape(_duration(timing["wall_seconds"]))))
        rate = timing.get("completion_tokens_per_second")
        cards.append(
            (
                "output tokens / s",
                metric(("time", "completion_tokens_per_second"), rate, 2)
                if rate is not None
                else "–",
            )
        )
    sections = [
        _section(
            "Settings",
            settings_section(report),
            "What the run was generated with (a resume refuses other generation settings).",
            wide=True,
        ),
        _section(
            "Flagged samples",
            flagged_section(report),
            "Samples the default export leaves out, and turns that never got an answer: what "
            "each reason means and what to do.",
            wide=True,
        ),
        _section(
            "Outcomes",
            bar_chart("outcomes", report["outcomes"], OUTCOME_COLOURS.get, "samples or requests"),
            "Every stored completion is verified, unverified or truncated once reconstructed; "
            "failed counts requests that never produced one.",
        ),
        _section(
            "Verification reasons",
            bar_chart(
                "verification_reasons",
                report["verification_reasons"],
                lambda name: GREEN if name == "ok" else AMBER,
                "samples",
            )
            + reason_table(report),
            "Green is proven; amber keeps the sample out of the default export.",
        ),
        _section(
            "Finish reasons",
            bar_chart(
                "finish_reasons",
                report["finish_reasons"],
                lambda name: FINISH_COLOURS.get(name, RED),
                "completions",
            ),
            "length is a turn cut at max_tokens (truncated, exported only when asked).",
        ),
        _section(
            "Errors",
            "<h3>Final failures, by reason</h3>"
            + bar_chart("failure_reasons", report["failure_reasons"], lambda _: RED, "turns")
            + "<h3>Retried attempts, by kind</h3>"
            + bar_chart(
                "retried_errors", report.get("retried_errors") or {}, lambda _: AMBER, "attempts"
            ),
            "A final failure is a turn with no completion; a retried attempt failed and was sent "
            "again (the completion may still have come).",
        ),
        _section(
            "Rejected rows",
            rejected_section(report.get("rejected") or {}),
            "Input rows that could not be used; each is listed with its file, line and reason.",
        ),
        _section(
            "Sequence length against max_length",
            sequence_section(report),
            "Whole training rows: prompt and generated ids. A trainer cuts rows longer than its "
            "max_length (SpecForge's --max-length, 2048 by default), losing their end.",
            wide=True,
        ),
    ]
    for name, title in (
        ("prompt", "Prompt tokens"),
        ("reasoning", "Reasoning tokens"),
        ("answer", "Answer tokens"),
    ):
        axis = f"{name} length (tokens)"
        sections.append(
            _section(f"{title} per sample", histogram(name, report["lengths"][name], axis))
        )
    sections.append(
        _section(
            "Providers",
            provider_section(report["providers"])
            + calibration_section(report.get("calibration"), report.get("unproven"))
            + left_out_section(report.get("excluded_providers"), report.get("rebuys")),
            "Latency is from the first attempt to the stored answer, retries included. Dollars "
            "per verified sample: what a provider was paid over the samples it served that are "
            "proven, the price of what a trainer can use.",
            wide=True,
        )
    )
    sections.append(
        _section(
            "Endpoints",
            endpoint_section(report.get("endpoints") or []),
            "Requests are attempts sent to each base URL; latency is of the attempt that served "
            "the answer. An endpoint is ejected after failures in a row and readmitted when it "
            "answers a health probe.",
            wide=True,
        )
    )
    if report.get("batches"):
        # A batch's answers arrive at once when it ends: its rounds, not a throughput, say how
        # the run went.
        sections.append(
            _section(
                "Batch rounds",
                batch_section(report),
                "Each bar is a batch, from when it was sent to when it ended (or now, in "
                "flight); a round is the batches sent together, and the next round sends the "
                "turns their answers made possible and the rows a failed, expired or cancelled "
                "batch left.",
                wide=True,
            )
        )
    else:
        sections.append(
            _section(
                "Throughput over time",
                throughput_chart(report["throughput"]),
                "Completions stored per time bucket while the run worked; a pause (Ctrl-C and "
                "a resume, a stop at --max-cost, a stall) is a labelled break, not empty "
                "buckets.",
                wide=True,
            )
        )
    sections.append(
        _section(
            "Sample rows",
            sample_section(report.get("sample_rows") or {}),
            "The first verified, unverified and truncated sample, token by token as training "
            "sees them: each token is a box (hover for its id), the prompt's last tokens, then "
            "the answer the loss mask trains on.",
            wide=True,
        )
    )
    title = f"draftgen report: {report['run_dir']}"
    subtitle = " · ".join(
        html.escape(str(part))
        for part in (report.get("model"), report.get("tokenizer"), report.get("profile"))
        if part
    )
    card_html = "".join(
        f'<div class="card"><div class="label">{label}</div><div class="value">{value}</div></div>'
        for label, value in cards
    )
    return PAGE.format(
        title=html.escape(title),
        subtitle=subtitle,
        source=source_banner(report),
        generated=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(report["generated_at"])),
        version=html.escape(report["draftgen_version"]),
        cards=card_html,
        sections="".join(sections),
    )


def settings_section(report: dict) -> str:
    """The settings panel: one row a setting, the values as the store recorded them."""
    settings = report.get("settings") or {}
    if not settings:
        return '<p class="empty">no settings recorded</p>'
    reasoning = settings.get("reasoning")
    rows = [
        ("model", settings.get("model")),
        ("max_tokens", settings.get("max_tokens")),
        ("temperature", settings.get("temperature")),
        ("top_p", settings.get("top_p")),
        ("seed", settings.get("seed")),
        ("effort", settings.get("effort")),
        ("reasoning", orjson.dumps(reasoning).decode() if reasoning is not None else None),
        ("profile", settings.get("profile")),
        ("tokenizer", settings.get("tokenizer")),
        ("tokenizer digest (sha256)", settings.get("tokenizer_digest")),
        ("endpoints", ", ".join(settings.get("endpoints") or []) or None),
        ("draftgen", settings.get("draftgen_version")),
    ]
    for name, value in (settings.get("other") or {}).items():
        shown = value if isinstance(value, str) else orjson.dumps(value).decode()
        rows.append((name, shown))
    body = "".join(
        f"<tr><th>{html.escape(name)}</th><td>"
        + (
            f"<code>{html.escape(str(value))}</code>"
            if value is not None
            else '<span class="empty">not set (the provider\'s default)</span>'
        )
        + "</td></tr>"
        for name, value in rows
    )
    timing = report.get("time") or {}
    when = ""
    if timing.get("started_at") is not None:
        stamp = lambda t: time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))  # noqa: E731
        rate = metric(("time", "completions_per_minute"), timing["completions_per_minute"], 2)
        when = (
            f'<p class="stats">from {stamp(timing["started_at"])} to '
            f"{stamp(timing['finished_at'])}: wall "
            f"{metric(('time', 'wall_seconds'), timing['wall_seconds'], 2)} s, working "
            f"{metric(('time', 'working_seconds'), timing['working_seconds'], 2)} s (pauses "
            f"left out), {rate} completions a minute</p>"
        )
    return f'<table class="grid settings">{body}</table>{when}'


def flagged_section(report: dict) -> str:
    """The flagged samples by id, with what to do, and the command that keeps them."""
    flags = report.get("flagged") or {}
    if not flags.get("count"):
        return '<p class="empty">nothing flagged: every sample is verified and complete</p>'
    counts = (
        f'<p class="stats">{metric(("flagged", "count"), flags["count"])} flagged: '
        f"{metric(('flagged', 'unverified'), flags['unverified'])} unverified, "
        f"{metric(('flagged', 'truncated'), flags['truncated'])} truncated, "
        f"{metric(('flagged', 'failed'), flags['failed'])} failed turns</p>"
    )
    rows = "".join(
        f"<tr><td><code>{html.escape(entry['id'])}</code></td>"
        f"<td>{html.escape(entry['kind'])}</td>"
        f"<td><code>{html.escape(entry['reason'])}</code></td>"
        f"<td>{html.escape(entry['fix'])}</td></tr>"
        for entry in flags.get("shown") or []
    )
    more = (
        f'<p class="stats">and {metric(("flagged", "more"), flags["more"])} more (the counts '
        "by reason are above; draftgen export --include-unverified writes them all, each with "
        "its verify_reason)</p>"
        if flags.get("more")
        else ""
    )
    commands = flags.get("commands") or {}
    return (
        counts
        + '<table class="grid flagged"><tr><th>id</th><th>kind</th><th>reason</th>'
        + f"<th>what it means, what to do</th></tr>{rows}</table>"
        + more
        + "<p>Keep the unverified and truncated samples (each marked <code>verified: "
        "false</code>):</p>"
        + f"<pre><code>{html.escape(commands.get('include', ''))}</code></pre>"
        + (
            f"<p>Failed turns: {html.escape(commands['retry_failed'])}.</p>"
            if flags.get("failed")
            else ""
        )
    )


def source_banner(report: dict) -> str:
    """Where the data came from, first thing on the page: synthetic data must not pass for real."""
    sources = report.get("sources") or []
    active = report.get("active_run")
    note = (
        f'<p class="banner warn">A run is active ({html.escape(str(active))}): these numbers '
        "are a snapshot.</p>"
        if active
        else ""
    )
    if sources and all(s.get("server") == "simulator" for s in sources):
        where = ", ".join(
            "the built-in simulator (no --base-url)"
            if s["endpoint"] == "built-in simulator"
            else f"a draftgen simulator at {html.escape(s['endpoint'])}"
            for s in sources
        )
        return note + (
            f'<p class="banner warn">Data source: {where}. These completions are synthetic: '
            "a dry run, not training data.</p>"
        )
    if not sources and not report.get("simulated"):
        return note + '<p class="banner">Data source: not recorded.</p>'
    listed = ", ".join(
        f"{html.escape(s['endpoint'])} ({html.escape(s.get('server', 'unknown'))})" for s in sources
    )
    if report.get("simulated"):  # resumed against a real server: part of it is synthetic
        return note + (
            f'<p class="banner warn">Data source: {listed or "not recorded"}. Part of these '
            f"completions is synthetic (from the {html.escape(report['simulated'])}): a dry "
            "run, not training data.</p>"
        )
    return note + f'<p class="banner">Data source: {listed}.</p>'


def _section(title: str, body: str, note: str = "", wide: bool = False) -> str:
    note_html = f'<p class="note">{html.escape(note)}</p>' if note else ""
    tag = '<section class="wide">' if wide else "<section>"
    return f"{tag}<h2>{html.escape(title)}</h2>{note_html}{body}</section>"


def bar_chart(path: str | tuple, table: dict, colour_of, unit: str) -> str:
    """Horizontal bars, one per entry, coloured by what the entry means, with the axis named in
    ``unit`` and the counts (at ``path`` in report.json) tagged in a table below."""
    path = (path,) if isinstance(path, str) else path
    if not table:
        return f'<p class="empty">{html.escape(path[-1].replace("_", " "))}: none</p>'
    svg = _bars_svg(
        table,
        lambda i, name: colour_of(name) or GREY,
        lambda name, count: f"<title>{html.escape(str(name))}: {count} {unit}</title>",
        lambda i, value: str(value),
        unit,
    )
    rows = "".join(
        f"<tr><td>{html.escape(str(name))}</td>"
        f'<td class="r">{metric((*path, name), count)}</td></tr>'
        for name, count in table.items()
    )
    return svg + f'<table class="counts">{rows}</table>'


def _bars_svg(table: dict, colour_of, inner_of, label_of, axis: str) -> str:
    """The SVG of horizontal bars scaled to the largest value, with the value axis titled
    ``axis`` (its unit) under them; callers choose colour and labels (``label_of(i, value)``).

    The chart is drawn at the width a page column gives it (no scaling down), and a long label
    wraps onto more lines of the same size instead of being cut."""
    label_w, bar_w, value_w, line_h = 230, 250, 110, 14
    lines = [wrap_label(str(name)) for name in table]
    heights = [max(24, line_h * len(wrapped) + 10) for wrapped in lines]
    peak = max(table.values()) or 1
    height = sum(heights) + 8
    total = height + 34
    width_all = label_w + bar_w + value_w
    parts = [
        f'<svg class="chart" viewBox="0 0 {width_all} {total}" '
        f'width="{width_all}" height="{total}" role="img">'
    ]
    y = 4
    for i, ((name, value), wrapped, row_h) in enumerate(
        zip(table.items(), lines, heights, strict=True)
    ):
        width = max(1.0, bar_w * value / peak) if value else 0
        middle = y + row_h / 2
        first = middle - line_h * (len(wrapped) - 1) / 2 + 4
        spans = "".join(
            f'<tspan x="{label_w - 8}" y="{first + line_h * n:.1f}">{html.escape(text)}</tspan>'
            for n, text in enumerate(wrapped)
        )
        parts.append(
            f'<text class="label" text-anchor="end">{spans}</text>'
            f'<rect x="{label_w}" y="{middle - 9:.1f}" width="{width:.1f}" height="18" '
            f'fill="{colour_of(i, name)}">{inner_of(name, value)}</rect>'
            f'<text x="{label_w + width + 6:.1f}" y="{middle + 4:.1f}" class="tick">'
            f"{html.escape(label_of(i, value))}</text>"
        )
        y += row_h
    parts.append(
        f'<line x1="{label_w}" y1="{height}" x2="{label_w + bar_w}" y2="{height}" class="axis"/>'
        f'<text x="{label_w}" y="{height + 14}" class="tick">0</text>'
        f'<text x="{label_w + bar_w}" y="{height + 14}" text-anchor="end" class="tick">'
        f"{_tick(peak)}</text>"
        f'<text x="{label_w + bar_w / 2}" y="{height + 28}" text-anchor="middle" '
        f'class="axis-title">{html.escape(axis)}</text></svg>'
    )
    return "".join(parts)


def wrap_label(text: str) -> list[str]:
    """``text`` in lines of at most ``LABEL_LINE`` characters, broken at spaces where it can
    be; past eight lines the rest is an ellipsis (the table under the chart has it whole)."""
    wrapped = textwrap.wrap(text, LABEL_LINE, break_on_hyphens=False) or [""]
    if len(wrapped) > 8:
        wrapped = wrapped[:7] + [wrapped[7][: LABEL_LINE - 1] + "…"]
    return wrapped


def _tick(value) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def reason_table(report: dict) -> str:
    meanings = report.get("reason_meanings") or {}
    if not meanings:
        return ""
    link = _docs_link()
    rows = "".join(
        f"<tr><td><code>{html.escape(reason)}</code></td>"
        f"<td>{html.escape(entry['meaning'])}</td>"
        f"<td>{link(entry['docs'])}</td></tr>"
        for reason, entry in meanings.items()
    )
    return (
        '<table class="grid"><tr><th>reason</th><th>what it means</th><th>more</th></tr>'
        f"{rows}</table>"
    )


def _docs_link():
    """A link to a docs section: the checkout's docs when draftgen runs from one, else the path
    (the page fetches nothing either way; a link is only followed when clicked)."""
    root = Path(draftgen.__file__).resolve().parents[2] / "docs"

    def link(target: str) -> str:
        name, _, anchor = target.partition("#")
        path = root.parent / name
        if path.is_file():
            href = html.escape(path.as_uri() + (f"#{anchor}" if anchor else ""))
            return f'<a href="{href}">{html.escape(target)}</a>'
        return f"<code>{html.escape(target)}</code>"

    return link


def rejected_section(rejected: dict) -> str:
    if not rejected.get("rows"):
        return '<p class="empty">no rows rejected</p>'
    chart = bar_chart(
        ("rejected", "reasons"), rejected.get("reasons") or {}, lambda _: GREY, "rows"
    )
    where = html.escape(str(rejected.get("file", REJECTED_NAME)))
    return (
        f'<p class="stats">{metric(("rejected", "rows"), rejected["rows"])} rows, each with its '
        f"file, line and reason in <code>{where}</code></p>{chart}"
    )


def sequence_section(report: dict) -> str:
    dist = report["lengths"].get("sequence") or {}
    fit = report.get("max_length_fit") or []
    chart = histogram("sequence", dist, "prompt + completion (tokens)", markers=fit)
    if not fit:
        return chart
    rows = "".join(
        f'<tr><td class="r">{row["max_length"]}</td>'
        f'<td class="r">{metric(("max_length_fit", i, "fits"), row["fits"])}</td>'
        f'<td class="r">{percent(("max_length_fit", i, "share"), row["share"])}</td>'
        f'<td class="r">{metric(("max_length_fit", i, "cut"), row["cut"])}</td></tr>'
        for i, row in enumerate(fit)
    )
    return chart + (
        '<table class="grid"><tr><th>max_length</th><th>samples whole</th><th>share whole</th>'
        f"<th>samples cut</th></tr>{rows}</table>"
    )


def histogram(name: str, dist: dict, quantity: str, markers: list | None = None) -> str:
    """Equal-width bins of ``quantity`` (x axis, tokens) against samples (y axis); ``markers``
    draws each ``max_length`` that falls inside the range as a dashed line."""
    if not dist.get("count"):
        return '<p class="empty">no values recorded</p>'
    bins = dist["histogram"]
    w, h, pad, top = 640, 180, 48, 10
    peak = max(b["count"] for b in bins) or 1
    bar = (w - pad) / len(bins)
    span = bins[-1]["hi"] or 1
    parts = [
        f'<svg class="chart" viewBox="0 0 {w} {h + 44}" width="{w}" height="{h + 44}" role="img">',
        f'<line x1="{pad}" y1="{h}" x2="{w}" y2="{h}" class="axis"/>',
        f'<line x1="{pad}" y1="{top}" x2="{pad}" y2="{h}" class="axis"/>',
    ]
    for i, b in enumerate(bins):
        bh = (h - top) * b["count"] / peak
        x = pad + i * bar
        parts.append(
            f'<rect x="{x + 1:.1f}" y="{h - bh:.1f}" width="{bar - 2:.1f}" height="{bh:.1f}" '
            f'fill="{BLUE}"><title>{b["lo"]}–{b["hi"]} tokens: {b["count"]} samples</title></rect>'
        )
        if i % max(1, len(bins) // 6) == 0:
            parts.append(f'<text x="{x:.1f}" y="{h + 14}" class="tick">{b["lo"]}</text>')
    shown = [row for row in markers or [] if row["max_length"] < span]
    for i, row in enumerate(shown):
        x = pad + (w - pad) * row["max_length"] / span
        # Labels step down so that close lines (1024, 2048) do not write over each other.
        parts.append(
            f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{h}" class="marker"/>'
            f'<text x="{x + 3:.1f}" y="{top + 10 + 13 * i}" class="marker-label">'
            f"{row['max_length']}</text>"
        )
    if shown:
        parts.append(
            f'<text x="{w}" y="{top + 10}" text-anchor="end" class="tick">dashed: max_length</text>'
        )
    parts.append(
        f'<text x="{pad - 6}" y="{top + 4}" text-anchor="end" class="tick">{peak}</text>'
        f'<text x="{pad - 6}" y="{h}" text-anchor="end" class="tick">0</text>'
        f'<text x="12" y="{(h + top) / 2}" transform="rotate(-90 12 {(h + top) / 2})" '
        'text-anchor="middle" class="axis-title">samples</text>'
        f'<text x="{(w + pad) / 2}" y="{h + 34}" text-anchor="middle" class="axis-title">'
        f"{html.escape(quantity)}</text></svg>"
    )
    stats = " · ".join(
        f"{label} {metric(('lengths', name, key), dist[key])}"
        for label, key in (
            ("samples", "count"),
            ("p50", "p50"),
            ("p90", "p90"),
            ("mean", "mean"),
            ("max", "max"),
        )
    )
    return "".join(parts) + f'<p class="stats">{stats} tokens</p>'


def provider_section(table: list[dict]) -> str:
    if not table:
        return '<p class="empty">no completions stored</p>'
    chart = _bars_svg(
        {row["provider"]: row["latency_p50"] or 0.0 for row in table},
        lambda i, name: row_colour(table[i]),
        lambda name, value: f"<title>{html.escape(str(name))}: {value:.3f} s</title>",
        lambda i, value: f"{value:.3f} s" + _few(table[i]),
        "median latency (seconds)",
    )
    header = (
        "provider",
        "completions",
        "cost (USD)",
        "latency p50 (s)",
        "latency p90 (s)",
        "retried attempts",
        "unverified",
        "verified share",
        "$ per verified sample",
        "unverified by reason (share of samples)",
    )
    body = []
    for i, row in enumerate(table):
        cells = [
            metric(("providers", i, "completions"), row["completions"]),
            dollars(("providers", i, "cost"), row["cost"]),
            metric(("providers", i, "latency_p50"), row["latency_p50"]),
            metric(("providers", i, "latency_p90"), row["latency_p90"]),
            metric(("providers", i, "retried_errors"), row["retried_errors"]),
            metric(("providers", i, "unverified"), row["unverified"]),
            percent(("providers", i, "verified_share"), row["verified_share"]) + _few(row)
            if row["verified_share"] is not None
            else "–",
            price(("providers", i, "cost_per_verified"), row.get("cost_per_verified")),
            reason_shares(i, row.get("unverified_shares") or {}),
        ]
        body.append(
            f"<tr><td>{html.escape(row['provider'])}</td>"
            + "".join(f'<td class="r">{cell}</td>' for cell in cells)
            + "</tr>"
        )
    head = "".join(f"<th>{h}</th>" for h in header)
    return (
        f"<h3>Median latency</h3>{chart}{share_legend()}"
        f'<table class="grid"><tr>{head}</tr>{"".join(body)}</table>'
    )


def calibration_section(calibration: dict | None, unproven: dict | None) -> str:
    """What calibration asked each provider and proved, and the samples the proof left
    unproven, by reason (docs/providers.md#calibration)."""
    items = []
    for name, questions in (calibration or {}).items():
        for question, row in questions.items():
            items.append(
                f"<li><b>{html.escape(name or '(the endpoint)')}</b> "
                f"{html.escape(question)}: {html.escape(row['verdict'])}: "
                f"{html.escape(row.get('detail') or '')} (cost "
                f"{dollars(('calibration', name, question, 'cost'), row.get('cost') or 0.0)})</li>"
            )
    if unproven and unproven.get("samples"):
        reasons = ", ".join(
            f"{html.escape(reason)} {count}" for reason, count in unproven["by_reason"].items()
        )
        items.append(
            f"<li>unproven: {metric(('unproven', 'samples'), unproven['samples'])} samples "
            f"({percent(('unproven', 'share'), unproven['share'])}) the proof could not "
            f"settle: {reasons}</li>"
        )
    if not items:
        return ""
    return f'<h3>Calibration and doubt</h3><ul class="calibration">{"".join(items)}</ul>'


def left_out_section(excluded: dict | None, rebuys: dict | None) -> str:
    """The providers the run left out (``provider.ignore``) with the evidence, and what buying
    their spoiled samples again cost (docs/providers.md)."""
    if not excluded and not rebuys:
        return ""
    items = "".join(
        f"<li><b>{html.escape(name)}</b> left out: {html.escape(entry['evidence'])}</li>"
        for name, entry in (excluded or {}).items()
    )
    if rebuys:
        items += (
            f"<li>bought again: {metric(('rebuys', 'rebought'), rebuys['rebought'])} spoiled "
            f"samples for {dollars(('rebuys', 'rebuy_cost'), rebuys['rebuy_cost'])} (the "
            f"spoiled ones cost {dollars(('rebuys', 'spoiled_cost'), rebuys['spoiled_cost'])}, "
            "counted in the run's cost and in their provider's row)</li>"
        )
    return f'<h3>Providers left out</h3><ul class="left-out">{items}</ul>'


def reason_shares(i: int, shares: dict[str, float]) -> str:
    """A provider's failed samples by reason, a line each: "reason 12.5%"."""
    lines = [
        f"{html.escape(reason)} " + percent(("providers", i, "unverified_shares", reason), share)
        for reason, share in shares.items()
    ]
    return "<br>".join(lines) or "–"


def endpoint_section(table: list[dict]) -> str:
    if not table:
        return '<p class="empty">no endpoint recorded (a run from before draftgen kept them)</p>'
    chart = _bars_svg(
        {row["endpoint"]: row["requests"] for row in table},
        lambda i, name: row_colour(table[i]),
        lambda name, value: f"<title>{html.escape(str(name))}: {value} requests</title>",
        lambda i, value: f"{value} requests" + _few(table[i]),
        "requests (attempts sent)",
    )
    keys = (
        "requests",
        "completions",
        "errors",
        "ejections",
        "readmissions",
        "latency_p50",
        "latency_p90",
        "prompt_tokens",
        "completion_tokens",
    )
    header = ("endpoint", *(key.replace("_", " ") for key in keys), "verified share")
    body = []
    for i, row in enumerate(table):
        cells = [
            metric(("endpoints", i, key), row[key]) if row[key] is not None else "–" for key in keys
        ]
        share = row.get("verified_share")
        cells.append(
            percent(("endpoints", i, "verified_share"), share) + _few(row)
            if share is not None
            else "–"
        )
        name = html.escape(row["endpoint"]) + (" (removed)" if row["removed"] else "")
        body.append(
            f"<tr><td>{name}</td>" + "".join(f'<td class="r">{c}</td>' for c in cells) + "</tr>"
        )
    head = "".join(f"<th>{h}</th>" for h in header)
    return f'{chart}{share_legend()}<table class="grid"><tr>{head}</tr>{"".join(body)}</table>'


def throughput_chart(data: dict) -> str:
    """Bars per time bucket (an empty bucket is visibly empty), with each pause a hatched break
    labelled with its length; the time axis in human units, its labels never overlapping."""
    points = data["points"]
    if not points:
        return '<p class="empty">no completions stored</p>'
    pauses = data.get("pauses") or []
    w, h, pad, top, gap = 640, 180, 48, 10, 56
    peak = max(p["completions"] for p in points) or 1
    slot = (w - pad - gap * len(pauses)) / len(points)
    parts = [
        f'<svg class="chart" viewBox="0 0 {w} {h + 44}" width="{w}" height="{h + 44}" role="img">',
        f'<line x1="{pad}" y1="{h}" x2="{w}" y2="{h}" class="axis"/>',
        f'<line x1="{pad}" y1="{top}" x2="{pad}" y2="{h}" class="axis"/>',
    ]
    ticks = [(float(pad), "0 s")]  # (x, text): the start of each segment of work, and the end
    x, segment = float(pad), 0
    for point in points:
        if point.get("segment", 0) != segment:
            pause = pauses[segment]
            parts.append(
                f'<rect x="{x + 4:.1f}" y="{top}" width="{gap - 8}" height="{h - top}" '
                f'class="pause"><title>paused {_duration(pause["seconds"])}</title></rect>'
                f'<text x="{x + gap / 2:.1f}" y="{top + 12}" text-anchor="middle" class="tick">'
                f"paused</text>"
                f'<text x="{x + gap / 2:.1f}" y="{top + 26}" text-anchor="middle" class="tick">'
                f"{_duration(pause['seconds'])}</text>"
            )
            x += gap
            segment = point["segment"]
            ticks.append((x, _duration(point["t"])))
        bh = (h - top) * point["completions"] / peak
        parts.append(
            f'<rect x="{x:.1f}" y="{h - bh:.1f}" width="{max(slot - 1, 0.5):.1f}" '
            f'height="{bh:.1f}" fill="{BLUE}"><title>{_duration(point["t"])}: '
            f"{point['completions']} completions, {point['tokens']} tokens</title></rect>"
        )
        x += slot
    seconds = data["bucket_seconds"]
    last = points[-1]["t"] + seconds
    parts.extend(_time_ticks(ticks, (float(w), _duration(last)), h))
    parts.append(
        f'<text x="{pad - 6}" y="{top + 4}" text-anchor="end" class="tick">{peak}</text>'
        f'<text x="{pad - 6}" y="{h}" text-anchor="end" class="tick">0</text>'
        f'<text x="12" y="{(h + top) / 2}" transform="rotate(-90 12 {(h + top) / 2})" '
        f'text-anchor="middle" class="axis-title">completions per {per_bucket(seconds)}</text>'
        f'<text x="{(w + pad) / 2}" y="{h + 34}" text-anchor="middle" class="axis-title">'
        "time since the first completion</text></svg>"
    )
    total = sum(p["completions"] for p in points)
    paused = "; paused " + ", ".join(_duration(p["seconds"]) for p in pauses) if pauses else ""
    return "".join(parts) + (
        f'<p class="stats">completions per bucket of '
        f"{metric(('throughput', 'bucket_seconds'), seconds)} s; {total} in {len(points)} "
        f"buckets{paused}</p>"
    )


ROUND_COLOURS = {"completed": GREEN, "expired": AMBER, "failed": RED, "cancelled": GREY}


def batch_section(report: dict) -> str:
    """The batches' time and money (``store.batch_timing``, the line ``status`` prints) and a
    chart of the rounds."""
    batches = report.get("batches") or {}
    timing = batches.get("timing") or {}
    eta = timing.get("eta_seconds")
    worst = timing.get("worst_cost_in_flight")
    final = ", ".join(f"{n} {status}" for status, n in (batches.get("final") or {}).items())
    facts = [
        (
            "batches in flight",
            metric(("batches", "rows_in_flight"), batches.get("rows_in_flight"))
            + f" rows in {len(batches.get('in_flight') or [])} batches",
        ),
        ("final batches", html.escape(final) or "none yet"),
        (
            "oldest batch in flight",
            html.escape(duration_text(timing.get("oldest_age_seconds")))
            if timing.get("oldest_age_seconds") is not None
            else "none in flight",
        ),
        (
            "finished batches took",
            f"{html.escape(duration_text(timing.get('typical_seconds')))} (median of "
            f"{metric(('batches', 'timing', 'finished_batches'), timing.get('finished_batches'))})"
            if timing.get("typical_seconds") is not None
            else "none completed yet",
        ),
        (
            "this round ends",
            (
                f"in about {html.escape(duration_text(eta[0]))}, "
                if eta and eta[0] is not None
                else ""
            )
            + f"at the latest in {html.escape(duration_text(eta[1]))} (the "
            f"{html.escape(duration_text(timing.get('window_seconds')))} window)"
            if eta
            else "no batch in flight",
        ),
        (
            "worst case in flight",
            "$" + metric(("batches", "timing", "worst_cost_in_flight"), worst, usd_decimals(worst))
            if worst is not None and eta
            else ("unknown (priced only under --max-cost)" if eta else "nothing in flight"),
        ),
        (
            "charged by the batch API",
            dollars(("batches", "charged"), batches["charged"])
            if batches.get("charged") is not None
            else "not reported (see the tokens)",
        ),
        (
            "billed for rows that never came back",
            dollars(
                ("batches", "timing", "billed_without_rows"), timing.get("billed_without_rows")
            ),
        ),
    ]
    table = "".join(f"<tr><th>{name}</th><td>{value}</td></tr>" for name, value in facts)
    line = timing_text(timing)
    return (
        f'<table class="grid settings">{table}</table>'
        + (f'<p class="stats">as status says it: {html.escape(line)}</p>' if line else "")
        + rounds_chart(report.get("batch_rounds") or [])
    )


def rounds_chart(rounds: list[dict]) -> str:
    """A bar per batch from when it was sent to when it ended, a band per round, coloured by
    status (green completed, amber expired, red failed, grey cancelled, blue in flight)."""
    if not rounds:
        return '<p class="empty">no batch sent</p>'
    shown = rounds[:ROUNDS_SHOWN]
    start = min(r["sent_at"] for r in shown)
    span = max(max(r["sent_at"] + r["seconds"] for r in shown) - start, 1e-3)
    label_w, w, row_h, top = 230, 640, 22, 4
    plot = w - label_w - 12
    h = top + row_h * len(shown)
    parts = [
        f'<svg class="chart" viewBox="0 0 {w} {h + 44}" width="{w}" height="{h + 44}" role="img">'
    ]
    for i, r in enumerate(shown):
        y = top + i * row_h
        if r["round"] % 2 == 0:  # every other round on a band: a round reads as one block
            parts.append(f'<rect x="0" y="{y}" width="{w}" height="{row_h}" class="round-band"/>')
        x = label_w + plot * (r["sent_at"] - start) / span
        width = max(2.0, plot * r["seconds"] / span)
        colour = BLUE if r["in_flight"] else ROUND_COLOURS.get(r["status"], GREY)
        charged = f", charged {usd(r['charged'])}" if r["charged"] is not None else ""
        label = f"round {r['round']} · {r['status']} · {r['answered']}/{r['rows']} rows"
        parts.append(
            f'<text x="{label_w - 8}" y="{y + 15}" text-anchor="end" class="label">'
            f"{html.escape(printable(label))}</text>"
            f'<rect x="{x:.1f}" y="{y + 3}" width="{width:.1f}" height="{row_h - 6}" '
            f'fill="{colour}"><title>{html.escape(printable(r["batch"]))}: '
            f"{html.escape(printable(r['status']))}, sent at {_duration(r['sent_at'] - start)}, "
            f"{'running for' if r['in_flight'] else 'took'} {_duration(r['seconds'])}; "
            f"{r['answered']} of {r['rows']} rows came back{charged}</title></rect>"
        )
    parts.append(f'<line x1="{label_w}" y1="{h}" x2="{label_w + plot}" y2="{h}" class="axis"/>')
    parts.extend(
        _time_ticks([(float(label_w), "0 s")], (float(label_w + plot), _duration(span)), h)
    )
    parts.append(
        f'<text x="{label_w + plot / 2}" y="{h + 34}" text-anchor="middle" class="axis-title">'
        "time since the first batch was sent</text></svg>"
    )
    more = (
        f'<p class="stats">and {len(rounds) - len(shown)} more batches (all in report.json, '
        "batch_rounds)</p>"
        if len(rounds) > len(shown)
        else ""
    )
    return "".join(parts) + more


def sample_section(samples: dict) -> str:
    """Each sample's tokens as boxes (hover: the id and the text spelled out), the prompt's
    tail apart from the answer, and the ``draftgen show`` command that prints it whole."""
    if samples.get("unavailable"):
        return f'<p class="empty">{html.escape(samples["unavailable"])}</p>'
    if not samples.get("samples"):
        return '<p class="empty">no sample reconstructed yet</p>'
    blocks = []
    for i, sample in enumerate(samples["samples"]):
        verdict = "verified" if sample["verified"] else "not verified"
        left_prompt = sample["prompt_tokens"] - len(sample["prompt_tail"])
        left_answer = sample["answer_tokens"] - len(sample["answer"])
        where = ("sample_rows", "samples", i)
        prompt = metric((*where, "prompt_tokens"), sample["prompt_tokens"])
        answer = metric((*where, "answer_tokens"), sample["answer_tokens"])
        heading = (
            f"<h3><code>{html.escape(sample['id'])}</code>: {verdict} "
            f"(<code>{html.escape(str(sample['verify_reason']))}</code>), "
            f"{html.escape(printable(str(sample['provider'])))}, finish "
            f"{html.escape(printable(str(sample['finish_reason'])))}</h3>"
        )
        stats = (
            f'<p class="stats">prompt {prompt} tokens'
            + (f" (the first {left_prompt} left out here)" if left_prompt else "")
            + f", answer {answer} tokens"
            + (f" (the last {left_answer} left out here)" if left_answer else "")
            + f"; in the terminal: <code>{html.escape(sample['command'])}</code></p>"
        )
        blocks.append(
            heading
            + stats
            + '<div class="tokens"><span class="part">prompt</span>'
            + _token_boxes(sample["prompt_tail"])
            + '<span class="part">answer</span>'
            + _token_boxes(sample["answer"])
            + "</div>"
        )
    return "".join(blocks)


def _token_boxes(pairs: list) -> str:
    """A box per token, its text as it is (line breaks break the line); the hover title gives
    its id and its text spelled out, so that whitespace and control characters show."""
    return "".join(
        f'<span class="tok" title="id {token_id}: {html.escape(printable(repr(text)))}">'
        f"{html.escape(text) or ' '}</span>"
        for token_id, text in pairs
    )


TICK_ROOM = 64  # px a time label of the throughput axis needs (11 px text, "2 min 30 s")


def _time_ticks(ticks: list[tuple[float, str]], end: tuple[float, str], y: float) -> list[str]:
    """The axis labels that fit: left to right, each at least ``TICK_ROOM`` from the one before
    and from the end label (right-aligned at the end of the axis), which is always drawn."""
    drawn, last = [], -math.inf
    for x, text in ticks:
        if x - last >= TICK_ROOM and end[0] - x >= TICK_ROOM:
            drawn.append(f'<text x="{x:.1f}" y="{y + 14}" class="tick">{html.escape(text)}</text>')
            last = x
    drawn.append(
        f'<text x="{end[0]:.1f}" y="{y + 14}" text-anchor="end" class="tick">'
        f"{html.escape(end[1])}</text>"
    )
    return drawn


def _duration(seconds: float) -> str:
    if seconds < 10 and seconds != int(seconds):
        return f"{seconds:.1f} s"
    seconds = int(round(seconds))
    if seconds < 120:
        return f"{seconds} s"
    hours, rest = divmod(seconds, 3600)
    return (
        f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60} min {rest % 60} s"
    )


PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>{title}</title>
<style>
body {{ font: 14px/1.45 system-ui, sans-serif; margin: 24px 32px; color: #1d2733;
       background: #ffffff; }}
h1 {{ font-size: 22px; margin: 0 0 4px; }}
h2 {{ font-size: 17px; margin: 28px 0 8px; border-bottom: 1px solid #d5dbe3; }}
h3 {{ font-size: 14px; margin: 12px 0 4px; }}
.sub {{ color: #5a6b7d; margin-bottom: 10px; }}
.banner {{ background: #eef3f9; border-left: 4px solid #2f6db5; padding: 6px 12px;
          margin: 0 0 12px; }}
.banner.warn {{ background: #fdf2e6; border-left-color: #e08a2e; }}
.cards {{ display: flex; flex-wrap: wrap; gap: 10px; }}
.card {{ background: #eef3f9; border-radius: 6px; padding: 10px 14px; min-width: 130px; }}
.card .label {{ color: #5a6b7d; font-size: 12px; }}
.card .value {{ font-size: 22px; font-weight: 600; }}
main {{ display: grid; grid-template-columns: repeat(auto-fit, minmax(600px, 1fr));
        column-gap: 40px; }}
section.wide {{ grid-column: 1 / -1; }}
svg.chart {{ display: block; max-width: 100%; height: auto; }}
svg text {{ font: 12px system-ui, sans-serif; fill: #1d2733; }}
svg text.tick {{ fill: #5a6b7d; font-size: 11px; }}
svg text.axis-title {{ fill: #3b4a5a; font-size: 12px; font-style: italic; }}
svg .axis {{ stroke: #8f9bab; }}
svg .marker {{ stroke: #c2453d; stroke-dasharray: 4 3; }}
svg text.marker-label {{ fill: #c2453d; font-size: 11px; stroke: #ffffff; stroke-width: 3px;
                        paint-order: stroke; }}
svg .pause {{ fill: #e6eaef; stroke: #b8c2cd; stroke-dasharray: 3 3; }}
table {{ border-collapse: collapse; margin-top: 6px; }}
td, th {{ padding: 2px 10px; border-bottom: 1px solid #e6eaef; text-align: left; }}
td.r {{ text-align: right; font-variant-numeric: tabular-nums; }}
.note, .stats, .empty, .legend {{ color: #5a6b7d; }}
.swatch {{ display: inline-block; width: 10px; height: 10px; margin: 0 3px 0 8px; }}
table.settings th {{ font-weight: 500; color: #3b4a5a; width: 220px; }}
table.settings code, table.flagged code {{ overflow-wrap: anywhere; }}
pre {{ background: #f4f6f9; padding: 8px 12px; overflow-x: auto; }}
svg .round-band {{ fill: #f3f6fa; }}
.tokens {{ font: 12px/1.9 ui-monospace, monospace; white-space: pre-wrap;
          overflow-wrap: anywhere; border: 1px solid #e6eaef; padding: 6px; }}
.tok {{ background: #eef3f9; border-right: 1px solid #9fb3c8; }}
.tok:nth-child(even) {{ background: #e2eaf4; }}
.tok:hover {{ background: #f9d98c; outline: 1px solid #e08a2e; }}
.part {{ display: block; font: italic 12px system-ui, sans-serif; color: #5a6b7d;
         margin: 4px 0 2px; }}
</style></head>
<body>
<h1>{title}</h1>
<div class="sub">{subtitle} · generated {generated} by draftgen {version}</div>
{source}
<div class="cards">{cards}</div>
<main>{sections}</main>
</body></html>
"""

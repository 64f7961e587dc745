"""Report: a run's numbers as ``report.json`` and a self-contained ``report.html`` with pictures.

Everything is computed once into the JSON; the page only draws it (inline SVG, no scripts, no
network), and every number it prints carries ``data-metric="<json path>"`` so a test can check
the page against the JSON.
"""

from __future__ import annotations

import html
import math
import os
import time
from collections import Counter, defaultdict
from pathlib import Path

import orjson

from draftgen import __version__
from draftgen.store import Store

JSON_NAME = "report.json"
HTML_NAME = "report.html"
HISTOGRAM_BINS = 12
THROUGHPUT_POINTS = 40
OUTCOMES = ("verified", "unverified", "truncated", "failed", "not_reconstructed")
PALETTE = ("#2f6db5", "#e08a2e", "#3a9a5b", "#c2453d", "#7d5ab5", "#8c6d4f", "#d16fae", "#6f7f8f")
OUTCOME_COLOURS = dict(
    zip(OUTCOMES, ("#3a9a5b", "#e08a2e", "#7d5ab5", "#c2453d", "#8f8f8f"), strict=True)
)


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
    return {
        "draftgen_version": __version__,
        "run_dir": str(store.run_dir),
        "generated_at": round(time.time(), 3),
        "model": _settings(store).get("model"),
        "tokenizer": store.meta("tokenizer"),
        "profile": store.meta("profile"),
        "totals": {
            "completions": counts["completions"],
            "samples": counts["samples"],
            "verified": counts["verified"],
            "failures": len(failures),
            "cost": counts["cost"],
            "prompt_tokens": counts["prompt_tokens"],
            "completion_tokens": counts["completion_tokens"],
            "retried_attempts": counts["retried_attempts"],
            "verified_share": round(counts["verified"] / counts["samples"], 4)
            if counts["samples"]
            else 0.0,
        },
        "outcomes": {name: outcomes.get(name, 0) for name in OUTCOMES},
        "verification_reasons": counts["reasons"],
        "finish_reasons": counts["finish_reasons"],
        "failure_reasons": counts["failures"],
        "attempt_errors": dict(attempt_errors.most_common()),
        "lengths": {
            "prompt": distribution([_prompt_len(r) for r in rows]),
            "reasoning": distribution([r["reasoning_tokens"] for r in rows]),
            "answer": distribution([_answer_len(r) for r in rows]),
        },
        "providers": providers(rows),
        "throughput": throughput(rows),
        "exactness": counts["exactness"],
        "endpoints": endpoints(counts.get("endpoints") or {}, rows),
    }


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


def providers(rows: list[dict]) -> list[dict]:
    by_provider: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        by_provider[row["provider"] or "unknown"].append(row)
    table = []
    for name, group in sorted(by_provider.items(), key=lambda item: (-len(item[1]), item[0])):
        latencies = sorted(r["latency"] for r in group if r["latency"] is not None)
        sampled = [r for r in group if r["verified"] is not None]
        verified = sum(1 for r in sampled if r["verified"] and not r["truncated"])
        table.append(
            {
                "provider": name,
                "completions": len(group),
                "cost": sum(r["cost"] or 0.0 for r in group),
                "latency_p50": round(percentile(latencies, 50), 3) if latencies else None,
                "latency_p90": round(percentile(latencies, 90), 3) if latencies else None,
                "retried_errors": sum(len(r["errors"]) for r in group),
                "unverified": sum(1 for r in sampled if not r["verified"] or r["truncated"]),
                "verified_share": round(verified / len(sampled), 4) if sampled else None,
            }
        )
    return table


def endpoints(figures: dict[str, dict], rows: list[dict]) -> list[dict]:
    """The store's per-endpoint figures with latency percentiles of the serving attempts."""
    latencies: dict[str, list[float]] = defaultdict(list)
    for row in rows:
        if row.get("endpoint") is not None and row.get("endpoint_latency") is not None:
            latencies[row["endpoint"]].append(row["endpoint_latency"])
    table = []
    for url, figure in figures.items():
        ordered = sorted(latencies.get(url, ()))
        table.append(
            {
                "endpoint": url,
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


def throughput(rows: list[dict]) -> dict:
    """Completions and completion tokens stored per time bucket since the first one."""
    times = [r["created_at"] for r in rows]
    if not times:
        return {"bucket_seconds": 0, "start": None, "points": []}
    start, span = min(times), max(times) - min(times)
    bucket = nice_step(span / THROUGHPUT_POINTS) if span > 0 else 1
    buckets = int(span // bucket) + 1
    completions = [0] * buckets
    tokens = [0] * buckets
    for row in rows:
        index = min(int((row["created_at"] - start) // bucket), buckets - 1)
        completions[index] += 1
        tokens[index] += row["completion_tokens"] or 0
    return {
        "bucket_seconds": bucket,
        "start": round(start, 3),
        "points": [
            {"t": round(i * bucket, 3), "completions": completions[i], "tokens": tokens[i]}
            for i in range(buckets)
        ],
    }


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


def metric(path: tuple, value, decimals: int | None = None) -> str:
    """A number as the page shows it, tagged with its place in report.json (a JSON list of keys,
    since reason names may hold any character)."""
    where = html.escape(orjson.dumps(list(path)).decode())
    return f'<span class="num" data-metric="{where}">{format_number(value, decimals)}</span>'


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


def render_html(report: dict) -> str:
    t = report["totals"]
    cards = [
        ("completions", metric(("totals", "completions"), t["completions"])),
        ("samples", metric(("totals", "samples"), t["samples"])),
        ("verified", metric(("totals", "verified"), t["verified"])),
        ("verified share", metric(("totals", "verified_share"), t["verified_share"])),
        ("final failures", metric(("totals", "failures"), t["failures"])),
        ("cost (credits)", metric(("totals", "cost"), t["cost"], 4)),
        ("prompt tokens", metric(("totals", "prompt_tokens"), t["prompt_tokens"])),
        ("completion tokens", metric(("totals", "completion_tokens"), t["completion_tokens"])),
        ("retried attempts", metric(("totals", "retried_attempts"), t["retried_attempts"])),
    ]
    sections = [
        _section(
            "Outcomes",
            bar_chart("outcomes", report["outcomes"], colours=OUTCOME_COLOURS),
            "Every stored completion is verified, unverified or truncated once reconstructed; "
            "failed requests never produced one.",
        ),
        _section(
            "Verification reasons",
            bar_chart("verification_reasons", report["verification_reasons"]),
        ),
        _section("Finish reasons", bar_chart("finish_reasons", report["finish_reasons"])),
        _section(
            "Errors",
            bar_chart("failure_reasons", report["failure_reasons"])
            + bar_chart("attempt_errors", report["attempt_errors"]),
            "Final failures by reason, then every failed attempt by kind (retried or final).",
        ),
    ]
    for name, title in (
        ("prompt", "Prompt tokens"),
        ("reasoning", "Reasoning tokens"),
        ("answer", "Answer tokens"),
    ):
        sections.append(_section(f"{title} per sample", histogram(name, report["lengths"][name])))
    sections.append(
        _section(
            "Providers",
            provider_section(report["providers"]),
            "Latency is from the first attempt to the stored answer.",
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
    sections.append(_section("Throughput over time", throughput_chart(report["throughput"])))
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
        generated=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(report["generated_at"])),
        version=html.escape(report["draftgen_version"]),
        cards=card_html,
        sections="".join(sections),
    )


def _section(title: str, body: str, note: str = "", wide: bool = False) -> str:
    note_html = f'<p class="note">{html.escape(note)}</p>' if note else ""
    tag = '<section class="wide">' if wide else "<section>"
    return f"{tag}<h2>{html.escape(title)}</h2>{note_html}{body}</section>"


def bar_chart(path: str, table: dict, colours: dict | None = None) -> str:
    """Horizontal bars, one per entry, with their counts tagged in a table below."""
    if not table:
        return f'<p class="empty">{html.escape(path.replace("_", " "))}: none</p>'
    svg = _bars_svg(
        table,
        lambda i, name: (colours or {}).get(name, PALETTE[i % len(PALETTE)]),
        lambda name, count: f"<title>{html.escape(str(name))}: {count}</title>",
    )
    rows = "".join(
        f"<tr><td>{html.escape(str(name))}</td>"
        f'<td class="r">{metric((path, name), count)}</td></tr>'
        for name, count in table.items()
    )
    return svg + f'<table class="counts">{rows}</table>'


def _bars_svg(table: dict, colour_of, inner_of, label_of=None) -> str:
    """The SVG of horizontal bars scaled to the largest value; callers choose colour and labels."""
    label_w, bar_w, row_h = 230, 420, 24
    peak = max(table.values()) or 1
    height = row_h * len(table) + 8
    parts = [
        f'<svg class="chart" viewBox="0 0 {label_w + bar_w + 90} {height}" '
        f'width="{label_w + bar_w + 90}" height="{height}" role="img">'
    ]
    for i, (name, value) in enumerate(table.items()):
        y = 4 + i * row_h
        width = max(1.0, bar_w * value / peak) if value else 0
        parts.append(
            f'<text x="{label_w - 8}" y="{y + 16}" text-anchor="end">{html.escape(str(name))}'
            f'</text><rect x="{label_w}" y="{y + 3}" width="{width:.1f}" height="{row_h - 6}" '
            f'fill="{colour_of(i, name)}">{inner_of(name, value)}</rect>'
        )
        if label_of is not None:
            parts.append(
                f'<text x="{label_w + width + 6:.1f}" y="{y + 16}" class="tick">'
                f"{label_of(value)}</text>"
            )
    parts.append("</svg>")
    return "".join(parts)


def histogram(name: str, dist: dict) -> str:
    if not dist.get("count"):
        return '<p class="empty">no values recorded</p>'
    bins = dist["histogram"]
    w, h, pad = 640, 180, 36
    peak = max(b["count"] for b in bins) or 1
    bar = (w - pad) / len(bins)
    parts = [
        f'<svg class="chart" viewBox="0 0 {w} {h + 30}" width="{w}" height="{h + 30}" role="img">',
        f'<line x1="{pad}" y1="{h}" x2="{w}" y2="{h}" class="axis"/>',
    ]
    for i, b in enumerate(bins):
        bh = (h - 10) * b["count"] / peak
        x = pad + i * bar
        parts.append(
            f'<rect x="{x + 1:.1f}" y="{h - bh:.1f}" width="{bar - 2:.1f}" height="{bh:.1f}" '
            f'fill="{PALETTE[0]}"><title>{b["lo"]}–{b["hi"]}: {b["count"]}</title></rect>'
        )
        if i % max(1, len(bins) // 6) == 0:
            parts.append(f'<text x="{x:.1f}" y="{h + 16}" class="tick">{b["lo"]}</text>')
    parts.append(f'<text x="{pad - 6}" y="14" text-anchor="end" class="tick">{peak}</text></svg>')
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
    return "".join(parts) + f'<p class="stats">{stats}</p>'


def provider_section(table: list[dict]) -> str:
    if not table:
        return '<p class="empty">no completions stored</p>'
    latency = {row["provider"]: row["latency_p50"] or 0.0 for row in table}
    chart = bar_chart_plain(latency, "s")
    header = (
        "provider",
        "completions",
        "cost",
        "latency p50 (s)",
        "latency p90 (s)",
        "retried errors",
        "unverified",
        "verified share",
    )
    keys = (
        "completions",
        "cost",
        "latency_p50",
        "latency_p90",
        "retried_errors",
        "unverified",
        "verified_share",
    )
    body = []
    for i, row in enumerate(table):
        cells = "".join(
            f'<td class="r">{metric(("providers", i, key), row[key], 4 if key == "cost" else None)}'
            "</td>"
            for key in keys
        )
        body.append(f"<tr><td>{html.escape(row['provider'])}</td>{cells}</tr>")
    head = "".join(f"<th>{h}</th>" for h in header)
    return (
        f'<h3>Median latency</h3>{chart}<table class="grid"><tr>{head}</tr>{"".join(body)}</table>'
    )


def endpoint_section(table: list[dict]) -> str:
    if not table:
        return '<p class="empty">no endpoint recorded (a run from before draftgen kept them)</p>'
    chart = _bars_svg(
        {row["endpoint"]: row["requests"] for row in table},
        lambda i, name: PALETTE[(i + 2) % len(PALETTE)],
        lambda name, value: f"<title>{html.escape(str(name))}: {value} requests</title>",
        lambda value: f"{value} requests",
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
    header = ("endpoint", *(key.replace("_", " ") for key in keys))
    body = []
    for i, row in enumerate(table):
        cells = "".join(
            '<td class="r">'
            + (metric(("endpoints", i, key), row[key]) if row[key] is not None else "–")
            + "</td>"
            for key in keys
        )
        name = html.escape(row["endpoint"]) + (" (removed)" if row["removed"] else "")
        body.append(f"<tr><td>{name}</td>{cells}</tr>")
    head = "".join(f"<th>{h}</th>" for h in header)
    return f'{chart}<table class="grid"><tr>{head}</tr>{"".join(body)}</table>'


def bar_chart_plain(table: dict, unit: str) -> str:
    """Bars without data-metric tags (their numbers are in the table below)."""
    return _bars_svg(
        table,
        lambda i, name: PALETTE[(i + 1) % len(PALETTE)],
        lambda name, value: "",
        lambda value: f"{value:.3f} {unit}",
    )


def throughput_chart(data: dict) -> str:
    points = data["points"]
    if not points:
        return '<p class="empty">no completions stored</p>'
    w, h, pad = 640, 180, 36
    peak = max(p["completions"] for p in points) or 1
    step = (w - pad) / max(1, len(points) - 1)
    coords = [
        (pad + i * step, h - (h - 10) * p["completions"] / peak) for i, p in enumerate(points)
    ]
    line = " ".join(f"{x:.1f},{y:.1f}" for x, y in coords)
    area = f"{pad},{h} {line} {coords[-1][0]:.1f},{h}"
    span = points[-1]["t"]
    parts = [
        f'<svg class="chart" viewBox="0 0 {w} {h + 30}" width="{w}" height="{h + 30}" role="img">',
        f'<polygon points="{area}" fill="{PALETTE[0]}" fill-opacity="0.25"/>',
        f'<polyline points="{line}" fill="none" stroke="{PALETTE[0]}" stroke-width="2"/>',
        f'<line x1="{pad}" y1="{h}" x2="{w}" y2="{h}" class="axis"/>',
        f'<text x="{pad}" y="{h + 16}" class="tick">0 s</text>',
        f'<text x="{w}" y="{h + 16}" text-anchor="end" class="tick">{span:g} s</text>',
        f'<text x="{pad - 6}" y="14" text-anchor="end" class="tick">{peak}</text></svg>',
    ]
    seconds = data["bucket_seconds"]
    total = sum(p["completions"] for p in points)
    return "".join(parts) + (
        f'<p class="stats">completions per {metric(("throughput", "bucket_seconds"), seconds)} s '
        f"bucket; {total} in {len(points)} buckets</p>"
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
.sub {{ color: #5a6b7d; margin-bottom: 16px; }}
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
svg .axis {{ stroke: #8f9bab; }}
table {{ border-collapse: collapse; margin-top: 6px; }}
td, th {{ padding: 2px 10px; border-bottom: 1px solid #e6eaef; text-align: left; }}
td.r {{ text-align: right; font-variant-numeric: tabular-nums; }}
.note, .stats, .empty {{ color: #5a6b7d; }}
</style></head>
<body>
<h1>{title}</h1>
<div class="sub">{subtitle} · generated {generated} by draftgen {version}</div>
<div class="cards">{cards}</div>
<main>{sections}</main>
</body></html>
"""

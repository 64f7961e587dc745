"""The report's charts as geometry: where each bar, label and tick of an SVG chart goes, and in
which colour; the template (``templates/report_charts.html.j2``) writes the SVG from it.

Colours carry meaning: green is verified, amber unverified, purple truncated, red failed; bars of
providers and endpoints are coloured by the verified share of what they served.
"""

from __future__ import annotations

import math
import textwrap

GREEN, LIGHT_GREEN, AMBER, RED, PURPLE, GREY = (
    "#3a9a5b",
    "#8cc084",
    "#e08a2e",
    "#c2453d",
    "#7d5ab5",
    "#8f8f8f",
)
BLUE = "#2f6db5"  # quantities with no good or bad: lengths, throughput
OUTCOMES = ("verified", "unverified", "truncated", "failed", "not_reconstructed")
OUTCOME_COLOURS = dict(zip(OUTCOMES, (GREEN, AMBER, PURPLE, RED, GREY), strict=True))
FINISH_COLOURS = {"stop": GREEN, "tool_calls": GREEN, "length": PURPLE}
ROUND_COLOURS = {"completed": GREEN, "expired": AMBER, "failed": RED, "cancelled": GREY}
# How the page colours a table of counts, by what its entries mean (``count_colours``).
COUNT_SCHEMES = {
    "outcome": lambda name: OUTCOME_COLOURS.get(name),
    "reason": lambda name: GREEN if name == "ok" else AMBER,
    "finish": lambda name: FINISH_COLOURS.get(name, RED),
    "failure": lambda _: RED,
    "retry": lambda _: AMBER,
    "neutral": lambda _: GREY,
}
# Verified share -> colour, from the top band down; the legend lists the same bands.
SHARE_BANDS = ((0.95, GREEN, "95% or more"), (0.8, LIGHT_GREEN, "80-95%"), (0.5, AMBER, "50-80%"))
SHARE_LOW = (RED, "under 50%")
# A verified share of fewer samples than this says little: drawn neutral, labelled with its n.
MIN_SHARE_SAMPLES = 5
# Characters of a bar label's line: longer labels wrap onto more lines (never cut).
LABEL_LINE = 30
# Batches drawn in the report's chart of rounds (the rest are in report.json).
ROUNDS_SHOWN = 40
TICK_ROOM = 64  # px a time label of the throughput axis needs (11 px text, "2 min 30 s")
# Histograms and the time charts: width, height of the plot, left padding, top.
PLOT_W, PLOT_H, PLOT_PAD, PLOT_TOP = 640, 180, 48, 10


# -- colours --------------------------------------------------------------------------------------


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


def few(row: dict) -> str:
    """ " (n=1)" after a share of fewer than ``MIN_SHARE_SAMPLES`` samples."""
    n = row.get("samples") or 0
    return f" (n={n})" if 0 < n < MIN_SHARE_SAMPLES else ""


def share_legend() -> list[tuple[str, str]]:
    """The legend of the share colours: (colour, what it means), top band first."""
    return [(colour, label) for _, colour, label in SHARE_BANDS] + [
        SHARE_LOW,
        (GREY, f"none, or fewer than {MIN_SHARE_SAMPLES} samples (n shown)"),
    ]


def count_colours(table: dict, scheme: str) -> list[str]:
    """The colour of each entry of a table of counts, in the ``COUNT_SCHEMES`` named."""
    colour_of = COUNT_SCHEMES[scheme]
    return [colour_of(name) or GREY for name in table]


# -- words on the axes ----------------------------------------------------------------------------


def wrap_label(text: str) -> list[str]:
    """``text`` in lines of at most ``LABEL_LINE`` characters, broken at spaces where it can
    be; past eight lines the rest is an ellipsis (the table under the chart has it whole)."""
    wrapped = textwrap.wrap(text, LABEL_LINE, break_on_hyphens=False) or [""]
    if len(wrapped) > 8:
        wrapped = wrapped[:7] + [wrapped[7][: LABEL_LINE - 1] + "…"]
    return wrapped


def tick(value) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def duration(seconds: float) -> str:
    """A time as the charts write it: "4.5 s", "90 s", "2 min 30 s", "2:00:00"."""
    if seconds < 10 and seconds != int(seconds):
        return f"{seconds:.1f} s"
    seconds = int(round(seconds))
    if seconds < 120:
        return f"{seconds} s"
    hours, rest = divmod(seconds, 3600)
    return (
        f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60} min {rest % 60} s"
    )


def per_bucket(seconds: float) -> str:
    """A bucket as an axis names it: "second", "10 s", "5 min", "2 h"."""
    if seconds == 1:
        return "second"
    if seconds < 60 or seconds % 60:
        return f"{seconds:g} s"
    if seconds < 3600 or seconds % 3600:
        return "minute" if seconds == 60 else f"{seconds / 60:g} min"
    return "hour" if seconds == 3600 else f"{seconds / 3600:g} h"


def time_ticks(ticks: list[tuple[float, str]], end: tuple[float, str]) -> list[dict]:
    """The time labels that fit: left to right, each at least ``TICK_ROOM`` from the one before
    and from the end label (right-aligned at the end of the axis), which is always drawn."""
    drawn, last = [], -math.inf
    for x, text in ticks:
        if x - last >= TICK_ROOM and end[0] - x >= TICK_ROOM:
            drawn.append({"x": x, "text": text, "end": False})
            last = x
    drawn.append({"x": end[0], "text": end[1], "end": True})
    return drawn


# -- bars -----------------------------------------------------------------------------------------


def bars(entries: list[dict], axis: str) -> dict:
    """Horizontal bars scaled to the largest ``value`` of ``entries`` (each with its ``name``,
    ``colour``, hover ``title`` and ``label`` after the bar), the value axis titled ``axis``.

    The chart is drawn at the width a page column gives it (no scaling down), and a long name
    wraps onto more lines of the same size instead of being cut."""
    label_w, bar_w, value_w, line_h = 230, 250, 110, 14
    peak = max(entry["value"] for entry in entries) or 1
    rows, y = [], 4
    for entry in entries:
        wrapped = wrap_label(str(entry["name"]))
        row_h = max(24, line_h * len(wrapped) + 10)
        width = max(1.0, bar_w * entry["value"] / peak) if entry["value"] else 0
        middle = y + row_h / 2
        first = middle - line_h * (len(wrapped) - 1) / 2 + 4
        rows.append(
            {
                **entry,
                "lines": [(first + line_h * n, text) for n, text in enumerate(wrapped)],
                "y": middle - 9,
                "width": width,
                "label_at": (label_w + width + 6, middle + 4),
            }
        )
        y += row_h
    height = y + 4
    return {
        "width": label_w + bar_w + value_w,
        "height": height + 34,
        "axis_y": height,
        "left": label_w,
        "right": label_w + bar_w,
        "peak": tick(peak),
        "axis": axis,
        "rows": rows,
    }


def count_bars(table: dict, colours: list[str], unit: str) -> dict:
    """A bar per entry of a table of counts, in ``colours``, the axis in ``unit``."""
    return bars(
        [
            {
                "name": name,
                "value": count,
                "colour": colour,
                "title": f"{name}: {count} {unit}",
                "label": str(count),
            }
            for (name, count), colour in zip(table.items(), colours, strict=True)
        ],
        unit,
    )


def provider_bars(table: list[dict]) -> dict:
    """Each provider's median latency, coloured by its verified share."""
    entries = []
    for row in table:
        value = row["latency_p50"] or 0.0
        entries.append(
            {
                "name": row["provider"],
                "value": value,
                "colour": row_colour(row),
                "title": f"{row['provider']}: {value:.3f} s",
                "label": f"{value:.3f} s" + few(row),
            }
        )
    return bars(entries, "median latency (seconds)")


def endpoint_bars(table: list[dict]) -> dict:
    """The attempts sent to each endpoint, coloured by its verified share."""
    return bars(
        [
            {
                "name": row["endpoint"],
                "value": row["requests"],
                "colour": row_colour(row),
                "title": f"{row['endpoint']}: {row['requests']} requests",
                "label": f"{row['requests']} requests" + few(row),
            }
            for row in table
        ],
        "requests (attempts sent)",
    )


# -- histograms and time --------------------------------------------------------------------------


def histogram(dist: dict, markers: list | None = None) -> dict:
    """Equal-width bins (x: tokens) against samples (y); each ``max_length`` of ``markers``
    that falls inside the range is a dashed line, their labels stepping down so that close
    lines (1024, 2048) do not write over each other."""
    bins = dist["histogram"]
    w, h, pad, top = PLOT_W, PLOT_H, PLOT_PAD, PLOT_TOP
    peak = max(b["count"] for b in bins) or 1
    bar = (w - pad) / len(bins)
    span = bins[-1]["hi"] or 1
    every = max(1, len(bins) // 6)
    shown = [row["max_length"] for row in markers or [] if row["max_length"] < span]
    return {
        "peak": peak,
        "bins": [
            {
                **b,
                "x": pad + i * bar,
                "width": bar - 2,
                "height": (h - top) * b["count"] / peak,
                "tick": i % every == 0,
            }
            for i, b in enumerate(bins)
        ],
        "markers": [
            {"x": pad + (w - pad) * limit / span, "y": top + 10 + 13 * i, "max_length": limit}
            for i, limit in enumerate(shown)
        ],
    }


def throughput(data: dict) -> dict:
    """Bars per time bucket (an empty bucket is visibly empty), each pause a hatched break
    labelled with its length; the time axis in human units, its labels never overlapping."""
    points, pauses = data["points"], data.get("pauses") or []
    w, h, pad, top, gap = PLOT_W, PLOT_H, PLOT_PAD, PLOT_TOP, 56
    peak = max(p["completions"] for p in points) or 1
    slot = (w - pad - gap * len(pauses)) / len(points)
    ticks = [(float(pad), "0 s")]  # (x, text): the start of each segment of work, and the end
    x, segment, drawn = float(pad), 0, []
    for point in points:
        pause = None  # the break drawn before the first bucket after a pause
        if point.get("segment", 0) != segment:
            pause = {"x": x, "seconds": pauses[segment]["seconds"]}
            x += gap
            segment = point["segment"]
            ticks.append((x, duration(point["t"])))
        height = (h - top) * point["completions"] / peak
        drawn.append({**point, "x": x, "height": height, "pause": pause})
        x += slot
    seconds = data["bucket_seconds"]
    end = (float(w), duration(points[-1]["t"] + seconds))
    return {
        "peak": peak,
        "width": max(slot - 1, 0.5),
        "gap": gap,
        "points": drawn,
        "ticks": time_ticks(ticks, end),
        "per": per_bucket(seconds),
        "total": sum(p["completions"] for p in points),
    }


def rounds(batches: list[dict]) -> dict:
    """A bar per batch (the first ``ROUNDS_SHOWN``) from when it was sent to when it ended, a
    band on every other round, coloured by status (green completed, amber expired, red
    failed, grey cancelled, blue in flight)."""
    shown = batches[:ROUNDS_SHOWN]
    start = min(r["sent_at"] for r in shown)
    span = max(max(r["sent_at"] + r["seconds"] for r in shown) - start, 1e-3)
    label_w, w, row_h, top = 230, PLOT_W, 22, 4
    plot = w - label_w - 12
    h = top + row_h * len(shown)
    drawn = [
        {
            **r,
            "y": top + i * row_h,
            "band": r["round"] % 2 == 0,  # a round reads as one block
            "x": label_w + plot * (r["sent_at"] - start) / span,
            "width": max(2.0, plot * r["seconds"] / span),
            "colour": BLUE if r["in_flight"] else ROUND_COLOURS.get(r["status"], GREY),
            "sent": duration(r["sent_at"] - start),
            "took": duration(r["seconds"]),
        }
        for i, r in enumerate(shown)
    ]
    end = (float(label_w + plot), duration(span))
    return {
        "width": w,
        "height": h,
        "row_h": row_h,
        "left": label_w,
        "right": label_w + plot,
        "batches": drawn,
        "ticks": time_ticks([(float(label_w), "0 s")], end),
        "more": len(batches) - len(shown),
    }

"""report.html: the Jinja2 templates in ``outputs/templates`` lay report.json out as one page
(inline CSS and SVG, no scripts, no network), with autoescape on.

The page draws the document ``build_report`` gives and computes nothing of its own: numbers come
formatted by the filters below, charts as geometry from ``report_charts``.
"""

from __future__ import annotations

import html
import time
from functools import cache
from pathlib import Path

import jinja2
import orjson
from markupsafe import Markup

import draftgen
from draftgen.outputs import report_charts as charts
from draftgen.redact import printable, usd, usd_decimals
from draftgen.store.batch_timing import duration_text, timing_text
from draftgen.store.database import REJECTED_NAME

PAGE = "report.html.j2"
SECTIONS = "report_sections.html.j2"
CHARTS = "report_charts.html.j2"


def render_html(report: dict) -> str:
    """The page of ``report`` (what ``build_report`` gives, or report.json read back)."""
    return _environment().get_template(PAGE).render(report=report)


def provider_section(table: list[dict]) -> str:
    """The providers' latency chart and table (``report["providers"]``)."""
    return str(_macro(SECTIONS, "providers")(table))


def flagged_section(report: dict) -> str:
    """The flagged samples by id with what to do (``report["flagged"]``)."""
    return str(_macro(SECTIONS, "flagged")(report))


def bar_chart(path: str | tuple, table: dict, colour_of, unit: str) -> str:
    """A bar per entry of a table of counts (at ``path`` in report.json), each in the colour
    ``colour_of(name)`` gives (grey for None), the axis named in ``unit``, and the counts tagged
    in a table below."""
    path = (path,) if isinstance(path, str) else tuple(path)
    colours = [colour_of(name) or charts.GREY for name in table]
    return str(_macro(CHARTS, "counts")(path, table, colours, unit))


def throughput_chart(data: dict) -> str:
    """Completions per time bucket (``report["throughput"]``), each pause a labelled break."""
    return str(_macro(CHARTS, "throughput")(data))


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


def docs_href(target: str) -> str | None:
    """A docs section (``docs/verification.md#the-checks``) as a link into the checkout's docs
    when draftgen runs from one, else None (the page shows the path; it fetches nothing either
    way, a link is only followed when clicked)."""
    name, _, anchor = target.partition("#")
    path = Path(draftgen.__file__).resolve().parents[2] / name
    if not path.is_file():
        return None
    return path.as_uri() + (f"#{anchor}" if anchor else "")


def _escaped(value) -> Markup:
    """Every value the templates print, its control characters escaped (``printable``: a
    server's ESC or CR never reaches the page raw) and then as ``html.escape`` spells it
    (``&#x27;``, where markupsafe writes ``&#39;``): the one spelling the report has always had.
    Markup (a macro's output) is already HTML."""
    if hasattr(value, "__html__"):
        return value
    return Markup(html.escape(printable(value, newlines=True)))


def _utc(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(seconds))


@cache
def _environment() -> jinja2.Environment:
    environment = jinja2.Environment(
        loader=jinja2.PackageLoader("draftgen.outputs", "templates"),
        autoescape=True,
        finalize=_escaped,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    environment.filters.update(
        json_path=lambda path: orjson.dumps(list(path)).decode(),
        json=lambda value: orjson.dumps(value).decode(),
        number=format_number,
        coord=lambda value: f"{value:.1f}",
        duration=charts.duration,
        duration_text=duration_text,
        usd=usd,
        usd_decimals=usd_decimals,
        printable=printable,
        repr=repr,
        utc=_utc,
    )
    environment.globals.update(
        plot={
            "w": charts.PLOT_W,
            "h": charts.PLOT_H,
            "pad": charts.PLOT_PAD,
            "top": charts.PLOT_TOP,
        },
        colours={"blue": charts.BLUE},
        count_bars=charts.count_bars,
        count_colours=charts.count_colours,
        provider_bars=charts.provider_bars,
        endpoint_bars=charts.endpoint_bars,
        histogram_geometry=charts.histogram,
        throughput_geometry=charts.throughput,
        rounds_geometry=charts.rounds,
        share_bands=charts.share_legend,
        few=charts.few,
        docs_href=docs_href,
        timing_text=timing_text,
        rejected_name=REJECTED_NAME,
    )
    return environment


def _macro(template: str, name: str):
    return getattr(_environment().get_template(template).module, name)

"""``draftgen report``: report.json agrees with the store, and report.html, rendered by headless
Chromium, draws pictures and shows exactly the numbers of report.json."""

from __future__ import annotations

import html
import html.parser
import json
import shutil
import sqlite3
import subprocess

import numpy as np
import pytest
from conftest import draftgen
from sample_runs import make_run

WINDOW = (1280, 6400)  # tall enough for the length histograms, below the flagged samples
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = make_run(tmp_path_factory.mktemp("report"), invalid=True)
    result = draftgen("report", str(out))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"wrote {out / 'report.html'} and {out / 'report.json'}"
    return out


@pytest.fixture(scope="module")
def report(run_dir):
    return json.loads((run_dir / "report.json").read_text())


def test_report_json_agrees_with_the_store(run_dir, report):
    db = sqlite3.connect(run_dir / "draftgen.sqlite")
    one = lambda sql: db.execute(sql).fetchone()[0]  # noqa: E731
    completions = one("SELECT count(*) FROM completions")
    failures = one("SELECT count(*) FROM failures")
    assert report["totals"]["completions"] == completions > 0
    assert report["totals"]["failures"] == failures > 0
    assert report["totals"]["cost"] == pytest.approx(one("SELECT sum(cost) FROM completions"))
    outcomes = report["outcomes"]
    assert (
        outcomes["verified"]
        == one("SELECT count(*) FROM samples WHERE verified = 1 AND truncated = 0")
        > 0
    )
    assert outcomes["truncated"] == one("SELECT count(*) FROM samples WHERE truncated = 1") > 0
    assert (
        outcomes["unverified"]
        == one("SELECT count(*) FROM samples WHERE verified = 0 AND truncated = 0")
        > 0
    )
    assert outcomes["failed"] == failures and outcomes["not_reconstructed"] == 0
    assert sum(report["finish_reasons"].values()) == completions
    assert sum(report["failure_reasons"].values()) == failures
    errors = sum(
        len(json.loads(e))
        for (e,) in db.execute(
            "SELECT errors FROM completions WHERE errors IS NOT NULL UNION ALL "
            "SELECT errors FROM failures WHERE errors IS NOT NULL"
        )
    )
    assert sum(report["attempt_errors"].values()) == errors > 0
    providers = dict(db.execute("SELECT provider, count(*) FROM completions GROUP BY provider"))
    assert {p["provider"]: p["completions"] for p in report["providers"]} == providers
    latencies = sorted(s for (s,) in db.execute("SELECT latency FROM completions"))
    assert max(p["latency_p90"] for p in report["providers"]) <= round(latencies[-1], 3)
    assert sum(p["completions"] for p in report["throughput"]["points"]) == completions
    answer = report["lengths"]["answer"]
    assert answer["count"] == completions
    assert sum(b["count"] for b in answer["histogram"]) == completions
    served = dict(db.execute("SELECT endpoint, count(*) FROM completions GROUP BY endpoint"))
    endpoints = {e["endpoint"]: e for e in report["endpoints"]}
    assert {url: e["completions"] for url, e in endpoints.items()} == served
    assert len(served) == 1 and None not in served  # one --base-url, recorded on every row
    assert sum(e["errors"] for e in endpoints.values()) == errors  # every attempt has its URL
    assert all(e["requests"] == e["completions"] + e["errors"] for e in endpoints.values())
    assert sum(e["completion_tokens"] for e in endpoints.values()) == one(
        "SELECT sum(completion_tokens) FROM completions"
    )
    prompt_lens = sorted(n for (n,) in db.execute("SELECT prompt_len FROM samples"))
    assert report["lengths"]["prompt"]["max"] == prompt_lens[-1]
    assert report["lengths"]["prompt"]["p50"] == prompt_lens[(len(prompt_lens) + 1) // 2 - 1]


def test_report_prices_each_verified_sample_and_says_why_the_rest_failed(run_dir, report):
    db = sqlite3.connect(run_dir / "draftgen.sqlite")
    one = lambda sql: db.execute(sql).fetchone()[0]  # noqa: E731
    verified = one("SELECT count(*) FROM samples WHERE verified = 1 AND truncated = 0")
    cost = one("SELECT sum(max(cost, 0)) FROM completions")
    assert report["totals"]["cost_per_verified"] == pytest.approx(cost / verified, abs=1e-9)
    for row in report["providers"]:
        where = "coalesce(c.provider, '') = ?"
        proven, paid = db.execute(
            "SELECT coalesce(sum(s.verified = 1 AND s.truncated = 0), 0), sum(max(c.cost, 0))"
            f" FROM completions c LEFT JOIN samples s ON s.key = c.key WHERE {where}",
            (row["provider"],),
        ).fetchone()
        price = round(paid / proven, 9) if proven else None
        assert row["cost_per_verified"] == price, row["provider"]
        failed = dict(
            db.execute(
                "SELECT s.reason, count(*) FROM samples s JOIN completions c ON c.key = s.key"
                f" WHERE s.verified = 0 AND {where} GROUP BY 1",
                (row["provider"],),
            )
        )
        assert row["unverified_reasons"] == failed, row["provider"]
        assert row["unverified_shares"] == {
            reason: round(count / row["samples"], 4) for reason, count in failed.items()
        }
    assert any(row["unverified_reasons"] for row in report["providers"])
    page = (run_dir / "report.html").read_text()
    assert "<th>$ per verified sample</th>" in page
    assert '<div class="label">$ per verified sample</div>' in page


def test_the_provider_table_prices_a_verified_sample_in_fractions_of_a_cent(tmp_path):
    from provider_stores import served_store

    from draftgen.outputs.report import build_report, provider_section
    from draftgen.store.database import Store

    with Store(served_store(tmp_path / "run"), create=False) as store:
        report = build_report(store)
    assert report["totals"]["cost_per_verified"] == 0.0055
    table = {row["provider"]: row for row in report["providers"]}
    assert table["Gamma"]["cost_per_verified"] is None
    assert table["Gamma"]["unverified_shares"] == {
        "prompt_count_mismatch": 0.6667,
        "provider_strips_whitespace": 0.3333,
    }
    assert table["unknown"]["unverified_shares"] == {}
    section = provider_section(report["providers"])
    alpha = section.split("<tr><td>Alpha</td>")[1].split("</tr>")[0]
    price = '[&quot;providers&quot;,0,&quot;cost_per_verified&quot;]">0.002000</span>'
    assert f'$<span class="num" data-metric="{price}' in alpha
    assert "prompt_count_mismatch <span" in alpha and ">25.0</span>%" in alpha
    gamma = section.split("<tr><td>Gamma</td>")[1].split("</tr>")[0]
    assert ">66.7</span>%<br>provider_strips_whitespace <span" in gamma
    assert '<td class="r">–</td>' in gamma  # nothing verified: no price


def test_report_says_where_the_data_came_from_and_what_was_left_out(run_dir, report):
    # The sample run's simulator is a `draftgen simulate` process: its data is synthetic.
    assert [s["server"] for s in report["sources"]] == ["simulator"]
    page = (run_dir / "report.html").read_text()
    assert "These completions are synthetic" in page
    # Rejected rows are counted in the totals and by reason.
    rejected = [json.loads(line) for line in (run_dir / "rejected.jsonl").read_text().splitlines()]
    assert report["totals"]["rejected"] == report["rejected"]["rows"] == len(rejected) > 0
    assert sum(report["rejected"]["reasons"].values()) == len(rejected)
    # Every verification reason is explained, with the docs section it comes from.
    assert set(report["reason_meanings"]) == set(report["verification_reasons"])
    for reason, entry in report["reason_meanings"].items():
        assert entry["docs"].startswith("docs/verification.md#"), reason
        assert html.escape(entry["meaning"]) in page
    # Whole sequence lengths against the max_length a trainer cuts at.
    sequence = report["lengths"]["sequence"]
    assert sequence["count"] == report["totals"]["completions"]
    fit = report["max_length_fit"]
    assert fit[0]["max_length"] == 1024 and fit[-1]["max_length"] >= max(2048, sequence["max"])
    assert all(row["fits"] + row["cut"] == sequence["count"] for row in fit)
    assert fit[-1]["share"] == 1.0


def test_every_chart_has_axis_titles_and_colours_that_mean_something(run_dir, report):
    page = (run_dir / "report.html").read_text()
    charts = page.split('<svg class="chart"')[1:]
    assert len(charts) >= 10
    for chart in charts:
        assert chart.count('class="axis-title"') >= 1, chart[:300]
    for unit in ("samples", "attempts", "median latency (seconds)", "requests (attempts sent)"):
        assert f'class="axis-title">{unit}<' in page, unit
    assert "time since the first completion" in page and "prompt length (tokens)" in page
    # Provider bars are coloured by their verified share (neutral under MIN_SHARE_SAMPLES), and
    # the legend says so.
    from draftgen.outputs.report import row_colour

    for provider in report["providers"]:
        colour = row_colour(provider)
        name = provider["provider"]
        assert f'fill="{colour}"><title>{name}: ' in page, name
    assert "Bar colour: verified share of the samples served." in page


def test_report_says_what_was_made_how_fast_and_what_to_do_with_the_flagged(run_dir, report):
    db = sqlite3.connect(run_dir / "draftgen.sqlite")
    meta = dict(db.execute("SELECT name, value FROM meta"))
    settings = report["settings"]
    stored = json.loads(meta["settings"])
    assert (settings["model"], settings["max_tokens"]) == (stored["model"], 180)
    assert settings["tokenizer"] == "fixture:kimi-k2.5" and settings["profile"] == "kimi-k2"
    assert settings["tokenizer_digest"] == meta["tokenizer_digest"]
    (endpoint,) = settings["endpoints"]
    assert endpoint.startswith("http://127.0.0.1:") and endpoint.endswith("/api/v1 (simulator)")
    page = (run_dir / "report.html").read_text()
    assert f"<code>{meta['tokenizer_digest']}</code>" in page
    assert '<th>temperature</th><td><span class="empty">not set' in page
    # Wall time from the first request to the last answer; output tokens a second of work.
    timing = report["time"]
    first, last = db.execute(
        "SELECT min(created_at - latency), max(created_at) FROM completions"
    ).fetchone()
    last = max(last, db.execute("SELECT max(created_at) FROM failures").fetchone()[0])
    assert timing["wall_seconds"] == pytest.approx(last - first, abs=0.002)
    assert timing["working_seconds"] == timing["wall_seconds"]  # no pause in this run
    tokens = report["totals"]["completion_tokens"]
    assert timing["completion_tokens_per_second"] == pytest.approx(
        tokens / timing["working_seconds"], rel=0.01
    )
    # Every flagged sample by id, with its reason and what to do.
    flagged = report["flagged"]
    unverified = db.execute(
        "SELECT c.source_id || ':' || c.turn, s.reason FROM samples s JOIN completions c "
        "ON c.key = s.key WHERE s.verified = 0 AND s.truncated = 0"
    ).fetchall()
    truncated = db.execute(
        "SELECT c.source_id || ':' || c.turn FROM samples s JOIN completions c ON c.key = s.key "
        "WHERE s.truncated = 1"
    ).fetchall()
    failed = db.execute("SELECT source_id || ':' || turn, reason FROM failures").fetchall()
    assert (flagged["unverified"], flagged["truncated"], flagged["failed"]) == (
        len(unverified),
        len(truncated),
        len(failed),
    )
    assert flagged["count"] == len(unverified) + len(truncated) + len(failed) > 0
    assert flagged["more"] == 0 and len(flagged["shown"]) == flagged["count"]
    shown = {(f["id"], f["kind"], f["reason"]) for f in flagged["shown"]}
    assert shown == (
        {(i, "unverified", r) for i, r in unverified}
        | {(i, "truncated", "length") for (i,) in truncated}
        | {(i, "failed", r) for i, r in failed}
    )
    from draftgen.reconstruct.reasons import REASONS

    for entry in flagged["shown"]:
        assert f"<code>{html.escape(entry['id'])}</code>" in page
        assert html.escape(entry["fix"]) in page
        if entry["kind"] == "unverified":
            assert entry["fix"].startswith(REASONS[entry["reason"]].meaning)
    command = (
        f"draftgen export {run_dir} --include-unverified --out {run_dir}/with-unverified.jsonl"
    )
    assert flagged["commands"]["include"] == command and html.escape(command) in page


def test_flagged_samples_are_capped_with_the_rest_counted(tmp_path, monkeypatch):
    from draftgen.outputs import report as module

    out = make_run(tmp_path, rows=12)
    monkeypatch.setattr(module, "FLAGGED_SHOWN", 2)
    with module.Store(out, create=False) as store:
        flagged = module.build_report(store)["flagged"]
    assert flagged["count"] > 2 and len(flagged["shown"]) == 2
    assert flagged["more"] == flagged["count"] - 2
    page = module.flagged_section({"flagged": flagged})
    assert page.count("<tr><td><code>") == 2
    assert f">{flagged['more']}</span> more" in page


def test_a_provider_with_few_samples_is_neutral_and_labelled_with_its_n():
    from draftgen.outputs.report import GREY, RED, provider_section, providers

    rows = [
        {
            "provider": "Big",
            "latency": 1.0,
            "verified": True,
            "truncated": False,
            "cost": 0.1,
            "errors": [],
        }
        for _ in range(6)
    ] + [
        {
            "provider": "Tiny",
            "latency": 2.0,
            "verified": False,
            "truncated": False,
            "cost": 0.1,
            "errors": [],
        }
    ]
    table = providers(rows)
    tiny = next(row for row in table if row["provider"] == "Tiny")
    assert (tiny["samples"], tiny["verified_share"]) == (1, 0.0)
    section = provider_section(table)
    assert f'fill="{GREY}"><title>Tiny: ' in section and f'fill="{RED}"' not in section
    assert ">2.000 s (n=1)</text>" in section and "</span>% (n=1)</td>" in section


def test_bar_labels_wrap_at_a_readable_size_and_are_never_cut():
    import re

    from draftgen.outputs.report import LABEL_LINE, bar_chart

    reason = (
        "messages[3].content is a list of parts of which one is an image_url, which draftgen "
        "cannot send to a text model"
    )
    chart = bar_chart(("rejected", "reasons"), {reason: 3, "short": 1}, lambda _: None, "rows")
    width = int(re.search(r'<svg class="chart" viewBox="0 0 (\d+) ', chart).group(1))
    assert width <= 600  # drawn at its size in a page column: 12 px text stays 12 px
    spans = re.findall(r"<tspan [^>]*>([^<]*)</tspan>", chart)
    assert all(len(line) <= LABEL_LINE for line in spans)
    assert " ".join(spans[:-1]) == html.escape(reason, quote=True) and spans[-1] == "short"


def test_throughput_axis_reads_in_human_units_without_overlap():
    import re

    from draftgen.outputs.report import TICK_ROOM, throughput, throughput_chart

    # A batch answer: every completion stored within 2 ms.
    burst = [{"created_at": 5000.0 + i * 0.00005, "completion_tokens": 7} for i in range(40)]
    data = throughput(burst)
    assert data["bucket_seconds"] == 1
    chart = throughput_chart(data)
    assert "completions per second</text>" in chart and "e-0" not in chart
    # Ten minutes of steady work: buckets of 15 s, labelled in minutes and seconds.
    steady = [{"created_at": 100.0 + 3 * i, "completion_tokens": 7} for i in range(200)]
    chart = throughput_chart(throughput(steady))
    assert "completions per 15 s</text>" in chart and ">10 min 0 s</text>" in chart
    # Batches an hour apart are the batch API at work, not pauses.
    batches = [
        {"created_at": 3600.0 * b + i, "completion_tokens": 7} for b in range(3) for i in range(5)
    ]
    assert throughput(batches)["pauses"] and not throughput(batches, pauses=False)["pauses"]
    chart = throughput_chart(throughput(batches, pauses=False))
    assert "completions per 5 min</text>" in chart and "paused" not in chart
    # Many pauses close together: the time labels that would overlap are left out.
    sessions = [
        {"created_at": 1000.0 * s + i, "completion_tokens": 7} for s in range(8) for i in range(3)
    ]
    chart = throughput_chart(throughput(sessions))
    xs = [float(x) for x in re.findall(r'<text x="([\d.]+)" y="194" class="tick">', chart)]
    assert len(xs) >= 2 and all(b - a >= TICK_ROOM for a, b in zip(xs, xs[1:], strict=False))


def test_throughput_shows_a_pause_as_a_pause():
    from draftgen.outputs.report import render_html, throughput

    # Two sessions of work, 10 s each, 2 hours apart (Ctrl-C, then a resume).
    times = [1000.0 + i * 0.5 for i in range(21)] + [8210.0 + i * 0.5 for i in range(21)]
    rows = [{"created_at": t, "completion_tokens": 10} for t in times]
    data = throughput(rows)
    assert data["pauses"] == [{"after": 10.0, "seconds": 7200.0}]
    assert sum(p["completions"] for p in data["points"]) == 42
    # The buckets cover the 20 s of work, not 2 hours of empty ones (a second is the shortest).
    assert data["bucket_seconds"] == 1 and len(data["points"]) == 22
    assert {p["segment"] for p in data["points"]} == {0, 1}
    from draftgen.outputs.report import throughput_chart

    chart = throughput_chart(data)
    assert "<title>paused 2:00:00</title>" in chart and "paused 2:00:00</p>" in chart
    assert render_html  # the page draws the same chart


def test_report_html_is_self_contained(run_dir):
    page = (run_dir / "report.html").read_text()
    assert "<svg" in page
    for needle in ("<script", "<link", "src=", "url(", "@import"):
        assert needle not in page, needle


def find_chromium() -> str | None:
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


def chromium(tmp_path, *args: str) -> subprocess.CompletedProcess:
    binary = find_chromium()
    if binary is None:
        pytest.skip("no chromium binary on PATH (apt-get install chromium; .ci/run installs it)")
    profile = tmp_path / "chromium-profile"
    profile.mkdir(exist_ok=True)
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
    ]
    return subprocess.run([binary, *flags, *args], capture_output=True, text=True, timeout=120)


class MetricCollector(html.parser.HTMLParser):
    """(json path, text, scale) of every element carrying data-metric (a share shown as a
    percentage has data-scale 100)."""

    def __init__(self) -> None:
        super().__init__()
        self.metrics: list[tuple[list, str, float]] = []
        self._open: list | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        where = attrs.get("data-metric")
        if where is not None:
            self._open = [json.loads(where), "", float(attrs.get("data-scale", 1))]

    def handle_data(self, data):
        if self._open is not None:
            self._open[1] += data

    def handle_endtag(self, tag):
        if self._open is not None and tag == "span":
            self.metrics.append(tuple(self._open))
            self._open = None


def test_rendered_page_shows_the_numbers_of_report_json(run_dir, report, tmp_path):
    result = chromium(tmp_path, "--dump-dom", (run_dir / "report.html").as_uri())
    assert result.returncode == 0, result.stderr[-2000:]
    collector = MetricCollector()
    collector.feed(result.stdout)
    shown = collector.metrics
    paths = {tuple(path) for path, _, _ in shown}
    for key in report["totals"]:
        assert ("totals", key) in paths, key
    for key in report["outcomes"]:
        assert ("outcomes", key) in paths, key
    for key in report["verification_reasons"]:
        assert ("verification_reasons", key) in paths, key
    assert ("providers", 0, "latency_p50") in paths and ("lengths", "answer", "p90") in paths
    for key in (
        ("time", "completion_tokens_per_second"),
        ("time", "wall_seconds"),
        ("flagged", "count"),
        ("flagged", "failed"),
    ):
        assert key in paths, key
    for key in ("requests", "errors", "ejections", "latency_p50", "completion_tokens"):
        assert ("endpoints", 0, key) in paths, key
    for key in ("rejected", "reasons"), ("max_length_fit", 0, "share"), ("totals", "rejected"):
        assert key in paths or key[:2] in {p[:2] for p in paths}, key
    for path, text, scale in shown:
        value = report
        for key in path:
            value = value[key]
        if isinstance(value, int) and scale == 1:
            assert text == str(value), path
        else:
            decimals = len(text.partition(".")[2])
            least = 1 if scale != 1 else 2  # percentages show one decimal: 92.0%
            assert decimals >= least, path
            # Half a unit of the last digit shown, and a float's error (0.245 shows as 0.24).
            assert abs(float(text) - value * scale) <= 0.5 * 10**-decimals + 1e-9, path
    scales = {tuple(path): scale for path, _, scale in shown}
    # Shares read as percentages and money as dollars, everywhere.
    assert scales[("totals", "verified_share")] == scales[("providers", 0, "verified_share")] == 100
    assert all(scale == 100 for path, scale in scales.items() if path[-1] in ("share",))
    page = result.stdout
    # Dollars: the cost and the price of a verified sample, of the run and of each provider.
    priced = [report["totals"]] + report["providers"]
    assert page.count("$<span") == len(priced) + sum(
        row["cost_per_verified"] is not None for row in priced
    )
    assert "credits" not in page


def read_png(path) -> np.ndarray:
    """The RGB pixels of a PNG (height, width, 3), as Pillow decodes it."""
    from PIL import Image

    with Image.open(path) as image:
        return np.asarray(image.convert("RGB"))


def test_screenshot_is_not_blank_and_draws_the_charts(run_dir, tmp_path):
    shot = tmp_path / "report.png"
    result = chromium(
        tmp_path,
        f"--screenshot={shot}",
        f"--window-size={WINDOW[0]},{WINDOW[1]}",
        (run_dir / "report.html").as_uri(),
    )
    assert result.returncode == 0 and shot.exists(), result.stderr[-2000:]
    shutil.copy(shot, run_dir / "report.png")  # kept beside the report, to be looked at
    pixels = read_png(shot)
    assert pixels.shape == (WINDOW[1], WINDOW[0], 3)
    background = np.all(pixels >= 250, axis=2)
    assert background.mean() < 0.97, "the page rendered (nearly) blank"
    # Colours at 5 bits a channel, packed into one number each: np.unique over rows of three
    # sorts 8 million rows (10 s); over numbers, a fraction of a second.
    coarse = (pixels // 8).astype(np.int32)
    colours = np.unique((coarse[:, :, 0] << 10) | (coarse[:, :, 1] << 5) | coarse[:, :, 2])
    assert len(colours) > 30, "too few colours for text and charts"
    signed = pixels.astype(np.int16)
    # Bars in the colours of their meaning: verified green, unverified amber, failed red; the
    # length histograms (no good or bad) blue.
    for rgb in ((0x3A, 0x9A, 0x5B), (0xE0, 0x8A, 0x2E), (0xC2, 0x45, 0x3D), (0x2F, 0x6D, 0xB5)):
        matches = np.all(np.abs(signed - np.array(rgb, dtype=np.int16)) <= 3, axis=2).sum()
        assert matches > 500, f"no chart drawn in #{bytes(rgb).hex()}"


def test_sample_rows_show_each_token_as_draftgen_show_does(run_dir, report):
    from draftgen.api import RunDir
    from draftgen.outputs.report import ANSWER_HEAD, PROMPT_TAIL

    shown = report["sample_rows"]["samples"]
    assert report["sample_rows"]["unavailable"] is None
    db = sqlite3.connect(run_dir / "draftgen.sqlite")
    kinds = {
        "verified": "s.verified = 1 AND s.truncated = 0",
        "unverified": "s.verified = 0 AND s.truncated = 0",
        "truncated": "s.truncated = 1",
    }
    # The first stored sample of each kind, in the order the report reads them.
    firsts = [
        db.execute(
            "SELECT c.source_id || ':' || c.turn FROM completions c JOIN samples s ON s.key ="
            f" c.key WHERE {where} ORDER BY c.created_at, c.rowid LIMIT 1"
        ).fetchone()[0]
        for where in kinds.values()
    ]
    assert [s["id"] for s in shown] == firsts
    page = (run_dir / "report.html").read_text()
    for entry in shown:
        sample = RunDir.open(run_dir).sample(entry["id"])  # draftgen show's data
        pairs = [list(p) for p in zip(sample["input_ids"], sample["tokens"], strict=True)]
        prompt, answer = pairs[: sample["prompt_len"]], pairs[sample["prompt_len"] :]
        assert entry["prompt_tail"] == prompt[-PROMPT_TAIL:]
        assert entry["answer"] == answer[:ANSWER_HEAD]
        assert (entry["prompt_tokens"], entry["answer_tokens"]) == (len(prompt), len(answer))
        assert entry["command"] == f"draftgen show {run_dir} {entry['id']}"
        assert html.escape(entry["command"]) in page
        token_id, text = entry["answer"][0]
        # Each token a box whose hover title names its id and spells its text out.
        assert f'<span class="tok" title="id {token_id}: ' in page
    assert page.count('<div class="tokens">') == len(shown) == 3


def test_a_batch_run_draws_its_rounds_and_their_time_not_a_throughput(report):
    import re

    from draftgen.outputs.report import GREEN, GREY, render_html

    batches = {
        "final": {"completed": 1, "cancelled": 1},
        "in_flight": [{"batch_id": "batch_c", "nonce": "c", "status": "in_progress", "rows": 4}],
        "rows_in_flight": 4,
        "charged": 0.0035,
        "timing": {
            "window_seconds": 86400,
            "finished_batches": 1,
            "typical_seconds": 840.0,
            "oldest_age_seconds": 300.0,
            "worst_cost_in_flight": 0.25,
            "eta_seconds": [540.0, 86100.0],
            "billed_without_rows": 0.0015,
        },
    }
    rounds = [
        {"round": 1, "batch": "batch_a", "status": "cancelled", "in_flight": False,
         "sent_at": 1000.0, "seconds": 60.0, "rows": 5, "answered": 0, "charged": 0.0015},
        {"round": 2, "batch": "batch_b", "status": "completed", "in_flight": False,
         "sent_at": 1060.0, "seconds": 840.0, "rows": 5, "answered": 5, "charged": 0.002},
        {"round": 3, "batch": "batch_c", "status": "in_progress", "in_flight": True,
         "sent_at": 1900.0, "seconds": 300.0, "rows": 4, "answered": 0, "charged": None},
    ]  # fmt: skip
    page = render_html({**report, "batches": batches, "batch_rounds": rounds})
    assert "<h2>Batch rounds</h2>" in page and "<h2>Throughput over time</h2>" not in page
    assert "completions per" not in page and "paused" not in page
    section = page.split("<h2>Batch rounds</h2>")[1].split("</section>")[0]
    # The batch figures status prints: age, typical duration, the ETA band, the worst case.
    assert "<th>oldest batch in flight</th><td>5m</td>" in section
    assert "<th>finished batches took</th><td>14m (median of" in section
    assert "<th>this round ends</th><td>in about 9m, at the latest in 23h55m (the 24h" in section
    worst = "[&quot;batches&quot;,&quot;timing&quot;,&quot;worst_cost_in_flight&quot;]"
    assert f'{worst}">0.25<' in section
    assert "billed for rows that never came back" in section
    # A bar a batch, in its round's colour; the time axis in seconds and minutes.
    assert f'fill="{GREY}"><title>batch_a: cancelled, sent at 0 s, took 60 s;' in section
    assert f'fill="{GREEN}"><title>batch_b: completed, sent at 60 s, took 14 min 0 s;' in section
    assert "round 3 · in_progress · 0/4 rows</text>" in section
    assert ">20 min 0 s</text>" in section and "time since the first batch was sent" in section
    bars = r'<rect x="[\d.]+" y="\d+" width="([\d.]+)" height="16" fill'
    widths = [float(w) for w in re.findall(bars, section)]
    assert len(widths) == 3 and widths[1] == pytest.approx(14 * widths[0], rel=0.01)

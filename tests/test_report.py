"""``draftgen report``: report.json agrees with the store, and report.html, rendered by headless
Chromium, draws pictures and shows exactly the numbers of report.json."""

from __future__ import annotations

import html.parser
import json
import shutil
import sqlite3
import struct
import subprocess
import zlib

import numpy as np
import pytest
from conftest import draftgen
from sample_runs import make_run

WINDOW = (1280, 1800)
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = make_run(tmp_path_factory.mktemp("report"))
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
    """(json path, text) of every element carrying data-metric."""

    def __init__(self) -> None:
        super().__init__()
        self.metrics: list[tuple[list, str]] = []
        self._open: list | None = None

    def handle_starttag(self, tag, attrs):
        where = dict(attrs).get("data-metric")
        if where is not None:
            self._open = [json.loads(where), ""]

    def handle_data(self, data):
        if self._open is not None:
            self._open[1] += data

    def handle_endtag(self, tag):
        if self._open is not None and tag == "span":
            self.metrics.append((self._open[0], self._open[1]))
            self._open = None


def test_rendered_page_shows_the_numbers_of_report_json(run_dir, report, tmp_path):
    result = chromium(tmp_path, "--dump-dom", (run_dir / "report.html").as_uri())
    assert result.returncode == 0, result.stderr[-2000:]
    collector = MetricCollector()
    collector.feed(result.stdout)
    shown = collector.metrics
    paths = {tuple(path) for path, _ in shown}
    for key in report["totals"]:
        assert ("totals", key) in paths, key
    for key in report["outcomes"]:
        assert ("outcomes", key) in paths, key
    for key in report["verification_reasons"]:
        assert ("verification_reasons", key) in paths, key
    assert ("providers", 0, "latency_p50") in paths and ("lengths", "answer", "p90") in paths
    for key in ("requests", "errors", "ejections", "latency_p50", "completion_tokens"):
        assert ("endpoints", 0, key) in paths, key
    for path, text in shown:
        value = report
        for key in path:
            value = value[key]
        if isinstance(value, int):
            assert text == str(value), path
        else:
            decimals = len(text.partition(".")[2])
            assert decimals >= 2 and abs(float(text) - value) <= 0.5 * 10**-decimals, path


def read_png(path) -> np.ndarray:
    """Decode an 8-bit RGB/RGBA non-interlaced PNG (what Chromium writes) to an array."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat = 8, b""
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and colour in (2, 6) and interlace == 0
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    channels = 4 if colour == 6 else 3
    stride = width * channels
    raw = np.frombuffer(zlib.decompress(idat), dtype=np.uint8).reshape(height, stride + 1)
    image = np.zeros((height, stride), dtype=np.uint8)
    previous = np.zeros(stride, dtype=np.int32)
    for y in range(height):
        kind, line = raw[y, 0], raw[y, 1:].astype(np.int32)
        if kind == 0:
            row = line
        elif kind == 1:
            row = np.cumsum(line.reshape(width, channels), axis=0).reshape(-1) % 256
        elif kind == 2:
            row = (line + previous) % 256
        else:
            row = np.zeros(stride, dtype=np.int32)
            for x in range(stride):
                left = int(row[x - channels]) if x >= channels else 0
                up = int(previous[x])
                corner = int(previous[x - channels]) if x >= channels else 0
                if kind == 3:
                    guess = (left + up) // 2
                else:
                    p = left + up - corner
                    pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                    guess = left if pa <= pb and pa <= pc else up if pb <= pc else corner
                row[x] = (int(line[x]) + guess) % 256
        image[y] = row
        previous = row
    return image.reshape(height, width, channels)[:, :, :3]


def test_screenshot_is_not_blank_and_draws_the_charts(run_dir, tmp_path):
    shot = tmp_path / "report.png"
    result = chromium(
        tmp_path,
        f"--screenshot={shot}",
        f"--window-size={WINDOW[0]},{WINDOW[1]}",
        (run_dir / "report.html").as_uri(),
    )
    assert result.returncode == 0 and shot.exists(), result.stderr[-2000:]
    pixels = read_png(shot)
    assert pixels.shape == (WINDOW[1], WINDOW[0], 3)
    background = np.all(pixels >= 250, axis=2)
    assert background.mean() < 0.97, "the page rendered (nearly) blank"
    colours = np.unique(pixels.reshape(-1, 3) // 8, axis=0)
    assert len(colours) > 30, "too few colours for text and charts"
    # The outcome bars are drawn in their SVG colours: verified green, bars of the palette blue.
    for rgb in ((0x3A, 0x9A, 0x5B), (0x2F, 0x6D, 0xB5)):
        matches = np.all(np.abs(pixels.astype(int) - rgb) <= 3, axis=2).sum()
        assert matches > 500, f"no chart drawn in #{bytes(rgb).hex()}"

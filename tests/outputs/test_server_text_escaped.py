"""A server's text (a provider's name, a finish reason) with terminal controls in it reaches no
page, JSON file or JSON line raw (issue #41, item 6): the report, report.json, ``--json`` and the
JSON log lines escape it with the one function that escapes log lines (``redact.printable``),
and JSON still parses to the very text the server sent."""

from __future__ import annotations

import json
import logging
import re

from provider_stores import SERVED, served_store

from draftgen.cli.present import as_json
from draftgen.logs import JsonFormatter
from draftgen.outputs.report import build_report, write_report
from draftgen.store.database import Store

# ESC (a colour, a clear screen), CR (rewrites its line), BEL, a C1 CSI, DEL and a right-to-left
# override: what a terminal or a viewer acts on rather than shows.
FORGED = "Evil\x1b[2J\r\x07 all 5000 verified\x9b31m\x7f\u202eRTL"
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def forged_store(tmp_path):
    served = {**SERVED, "a1": (FORGED, 0.001, 1.0, (True, "ok", False))}
    run_dir = served_store(tmp_path / "run", served)
    with Store(run_dir) as store:
        store.db.execute("UPDATE completions SET finish_reason = ? WHERE key = 'a1'", (FORGED,))
        store.db.commit()
    return run_dir


def test_the_report_and_its_json_hold_no_raw_control_character(tmp_path):
    run_dir = forged_store(tmp_path)
    json_path, html_path = write_report(Store(run_dir, create=False))
    page = html_path.read_text()
    assert RAW.findall(page) == []
    # Shown as the log lines and status show it, then HTML-escaped.
    assert "Evil\\x1b[2J\\x0d\\x07 all 5000 verified\\x9b31m\\x7f\\u202eRTL" in page
    text = json_path.read_text()
    assert RAW.findall(text) == []
    providers = [row["provider"] for row in json.loads(text)["providers"]]
    assert FORGED in providers  # the data itself unchanged


def test_json_output_and_json_log_lines_hold_no_raw_control_character(tmp_path):
    with Store(forged_store(tmp_path), create=False) as store:
        report = build_report(store)
    printed = as_json(report)
    assert RAW.findall(printed) == [] and json.loads(printed) == json.loads(json.dumps(report))
    record = logging.LogRecord("draftgen.run", logging.INFO, __file__, 1, "%s", (FORGED,), None)
    line = JsonFormatter().format(record)
    assert RAW.findall(line) == [] and json.loads(line)["message"] == FORGED

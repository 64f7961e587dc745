"""A pytest plugin that appends each test phase's duration to a file as the phase ends, so a run
cut short (a timeout, a loaded machine) keeps the figures ``--durations`` prints only at its end.

    PYTHONPATH=benchmarks DURLOG=/tmp/durations.tsv .venv/bin/python -m pytest -q -n 2 \\
        --dist worksteal -p durlog
    sort -u /tmp/durations.tsv | sort -rn | head -20

Lines are ``seconds<TAB>phase<TAB>outcome<TAB>node id``; with xdist both the worker and the
controller write each line (``sort -u`` drops the copies).
"""

from __future__ import annotations

import os

PATH = os.environ.get("DURLOG", "durations.tsv")


def pytest_runtest_logreport(report) -> None:
    with open(PATH, "a", encoding="utf-8") as handle:
        handle.write(f"{report.duration:.3f}\t{report.when}\t{report.outcome}\t{report.nodeid}\n")

"""Failpoints: a real ``kill -9`` of this process at a named step of a batch run.

``python -m draftgen_testing.failpoints POINT -- ARGS`` runs ``draftgen ARGS`` and SIGKILLs itself
when it reaches POINT, one of ``draftgen.generate.batch.steps.STEPS``: ``after_create``, or
``mid_page:2`` for the second time that step is reached, or several joined by commas.
"""

from __future__ import annotations

import collections
import os
import signal
import sys

from draftgen.generate.batch import steps

POINTS = steps.STEPS


def install(points: str) -> None:
    """Replace the product's no-op step hook in this process with one that kills it at
    ``points`` (``NAME[:N]``, comma-separated)."""
    wanted: dict[str, int] = {}
    for entry in points.split(","):
        name, _, nth = entry.strip().partition(":")
        if name not in POINTS:
            raise ValueError(f"unknown failpoint {name!r}: use one of {', '.join(POINTS)}")
        wanted[name] = int(nth) if nth else 1
    reached: collections.Counter = collections.Counter()

    def kill_at(name: str) -> None:
        reached[name] += 1
        if wanted.get(name) == reached[name]:
            os.kill(os.getpid(), signal.SIGKILL)

    steps.reached = kill_at


def main(argv: list[str] | None = None) -> int:
    """``POINTS -- ARGS``: install the failpoints, then run the ``draftgen`` command ARGS."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 2 or argv[1] != "--":
        raise SystemExit("usage: python -m draftgen_testing.failpoints POINT[:N][,...] -- ARGS")
    install(argv[0])
    from draftgen.cli.main import main as draftgen_main

    return draftgen_main(argv[2:])


if __name__ == "__main__":
    raise SystemExit(main())

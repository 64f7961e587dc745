"""An OpenRouter-compatible simulator that keeps the ground-truth token ids of every completion.

All tests run against it: it reproduces on demand the quirks and faults OpenRouter documents (its
error bodies, errors inside HTTP 200 and mid-stream, keep-alive comments) and those seen of its
providers (``draftgen.simulator.config``'s ``FAULTS`` and ``QUIRKS`` say each one's shape).
"""

from draftgen.simulator.config import FAULTS, HOSTILE, QUIRKS, SimConfig, format_retry_after
from draftgen.simulator.server import SimServer, SimulatorThread, serve_forever, start_simulator

__all__ = [
    "FAULTS",
    "HOSTILE",
    "QUIRKS",
    "SimConfig",
    "SimServer",
    "SimulatorThread",
    "format_retry_after",
    "serve_forever",
    "start_simulator",
]

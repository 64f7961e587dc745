"""An OpenRouter-compatible simulator that keeps the ground-truth token ids of every completion.

All tests run against it: it reproduces the quirks and faults of REFERENCE.md §2 on demand.
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

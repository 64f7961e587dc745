"""draftgen: exact-token training data for speculative-decoding drafters.

The library (``draftgen.api``): ``Run(RunOptions(...))`` with ``execute()``, ``estimate()`` and
``on_ray(n)``; ``RunDir.open(path)`` with ``status()``, ``export()``, ``report()``, ``vocab()`` and
``cancel()``; ``status``, ``merge_runs`` and ``simulate``. Every error a user can act on is a
``DraftgenError``.
"""

from __future__ import annotations

from typing import Any

# The package's one version: pyproject.toml's is read from here ([tool.setuptools.dynamic]).
__version__ = "0.1.0"

# Loaded on first use: ``import draftgen`` stays cheap for the CLI and the simulator.
_EXPORTS = {
    "Run": "draftgen.api",
    "RunDir": "draftgen.api",
    "Snapshot": "draftgen.api",
    "RunOptions": "draftgen.options",
    "RunSummary": "draftgen.run.pipeline",
    "DraftgenError": "draftgen.errors",
    "merge_runs": "draftgen.api",
    "status": "draftgen.api",
    "simulate": "draftgen.api",
    "SimConfig": "draftgen.simulator",
    "estimate": "draftgen.run.estimate",
    "EstimateOptions": "draftgen.options",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'draftgen' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)

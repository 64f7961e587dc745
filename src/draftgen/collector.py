"""Python's cycle collector paced for work that keeps many objects alive at once, and paused while
a tokenizer is built from millions of short-lived ones.

Reference counting frees nearly everything draftgen makes; the collector only finds cycles. With
its default thresholds it runs every 700 new objects and scans each survivor again as it ages: a
run with 2,000 requests in flight (some 100,000 objects, each alive for a second) spent a third of
its event loop's time there, for almost nothing collected.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

# New objects between two collections of the youngest generation while ``collecting_less``; the
# older generations keep their default ratios.
YOUNG_THRESHOLD = 100_000

_lock = threading.Lock()
_depth = 0  # ``collecting_less`` blocks open, in any thread
_saved: tuple[int, int, int] | None = None  # the thresholds before the first of them


@contextlib.contextmanager
def collecting_less() -> Iterator[None]:
    """Collect the youngest generation every ``YOUNG_THRESHOLD`` new objects instead of 700 (the
    thresholds in force come back when the last such block ends; cycles are still collected)."""
    global _depth, _saved
    with _lock:
        if _depth == 0:
            _saved = gc.get_threshold()
            gc.set_threshold(max(YOUNG_THRESHOLD, _saved[0]), *_saved[1:])
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _saved is not None:
                gc.set_threshold(*_saved)
                _saved = None


@contextlib.contextmanager
def not_collecting() -> Iterator[None]:
    """No collection inside the block (the first one after it finds any cycles it left)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()

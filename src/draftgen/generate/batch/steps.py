"""Crash points: a real ``kill -9`` of this process at a named step of submission or ingestion.

Failure injection for the tests (``DRAFTGEN_BATCH_CRASH=after_create`` or ``mid_page:2``, the
second time that step is reached); unset, a crash point costs one dictionary lookup.
"""

from __future__ import annotations

import collections
import os
import signal

CRASH_VARIABLE = "DRAFTGEN_BATCH_CRASH"
# Where a batch run can be cut, in the order a batch goes through them.
CRASH_POINTS: tuple[str, ...] = (
    "before_upload",  # openai-files: the intent is committed, the JSONL not yet uploaded
    "after_upload",  # openai-files: uploaded and the file id recorded, no create sent
    "before_create",  # the intent is committed, the create not yet sent
    "after_create",  # the API accepted the batch; its id is not recorded yet
    "after_record",  # the batch id is recorded
    "mid_page",  # part of a results page is stored, the rest and the cursor are not
    "after_page",  # a whole page and its cursor are stored
    "before_finish",  # every page is stored; the batch is not yet marked ingested
    "after_ingest",  # the batch is ingested; rows out of retries are not yet marked failed
)
_reached: collections.Counter = collections.Counter()


def crash_point(name: str) -> None:
    """SIGKILL this process if ``DRAFTGEN_BATCH_CRASH`` names this step (and this visit)."""
    wanted = os.environ.get(CRASH_VARIABLE)
    if not wanted:
        return
    _reached[name] += 1
    for entry in wanted.split(","):
        point, _, nth = entry.strip().partition(":")
        if point == name and _reached[name] == (int(nth) if nth else 1):
            os.kill(os.getpid(), signal.SIGKILL)

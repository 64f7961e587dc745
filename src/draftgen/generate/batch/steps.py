"""The named steps of batch submission and ingestion, where a crash test cuts a run.

``reached(name)`` does nothing: the step is named so that a test can replace it in its own child
process (``draftgen_testing.failpoints`` kills that process there with SIGKILL).
"""

from __future__ import annotations

# Where a batch run can be cut, in the order a batch goes through them.
STEPS: tuple[str, ...] = (
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


def reached(name: str) -> None:
    """Nothing: a run has reached step ``name`` of ``STEPS``."""

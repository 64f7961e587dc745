"""A real ``kill -9`` at every step of batch submission and ingestion, one after another on the
same run directory: nothing is lost and no row is sent (or paid) twice.

Each run is killed by SIGKILL from inside at a named step (``draftgen_testing.failpoints``, at
the steps of ``draftgen.generate.batch.steps``): before the create, after the API accepted it but
before its id was recorded, after recording it, in the middle of a results page, after a page,
before the batch is marked ingested, after it. The next run picks up from the store alone. At the
end every planned turn is stored (or finally failed), the export equals the simulator's ground
truth, and the simulator's own log shows no request body in two batches.
"""

from __future__ import annotations

import pytest
from batch_runs import batch_args, batch_sim, check_never_twice, read_log, store_rows
from conftest import check_against_truth, draftgen, export_all, write_prompts

from draftgen.inputs.ingest import Conversation, read_conversations
from draftgen.inputs.plan import plan_turns
from draftgen_testing.failpoints import POINTS

OPENROUTER_CHAIN = (
    "before_create",
    "after_create",
    "after_record",
    "mid_page",
    "after_page",
    "before_finish",
    "after_ingest",
)
OPENAI_CHAIN = (
    "before_upload",
    "after_upload",
    "after_create",
    "after_record",
    "mid_page",
    "before_finish",
)


def planned_keys(path):
    keys = set()
    for item in read_conversations([str(path)]):
        if isinstance(item, Conversation):
            keys.update(plan.key for plan in plan_turns(item))
    return keys


@pytest.mark.slow
@pytest.mark.long  # about a minute each: eight runs of draftgen on one directory
@pytest.mark.parametrize(
    ("dialect", "chain"), [("openrouter", OPENROUTER_CHAIN), ("openai-files", OPENAI_CHAIN)]
)
def test_kill_9_at_every_step_loses_nothing_and_sends_no_row_twice(tmp_path, dialect, chain):
    assert set(chain) <= set(POINTS)
    sim = batch_sim(tmp_path, seconds=0.5)
    try:
        inputs = write_prompts(tmp_path / "prompts.jsonl", 150, invalid=False, seed=2)
        out = tmp_path / "run"
        extra = ["--batch-size", "100", "--batch-dialect", dialect]
        if dialect == "openai-files":
            extra += ["--batch-url", sim.base_url.removesuffix("/api/v1") + "/v1"]
        args = batch_args(sim, [inputs], out, *extra)
        for point in chain:
            result = draftgen(*args, failpoint=point)
            assert result.returncode == -9, (
                f"the run did not reach {point} (exit {result.returncode}): {result.stderr}"
            )
            check_never_twice(read_log(sim))  # after every kill, not only at the end
        result = draftgen(*args)
        assert result.returncode == 0, result.stderr
        stats = check_never_twice(read_log(sim))
        # No batch faults here: a body is in at most one batch the API made, whatever the kills.
        assert stats["sent_again"] == 0, stats
        stored = {key for (key,) in store_rows(out, "SELECT key FROM completions")}
        failed = {key for (key,) in store_rows(out, "SELECT key FROM failures")}
        assert stored | failed == planned_keys(inputs) and not stored & failed
        assert store_rows(
            out, "SELECT count(*) FROM batch_intents WHERE state IN ('submitting', 'submitted')"
        ) == [(0,)]
        # Every batch the API made is bound to its intent: the one made before its id could be
        # recorded was found in the listing, not orphaned (and not made again).
        made = {e["batch_id"] for e in read_log(sim) if e["event"] == "create"}
        bound = store_rows(out, "SELECT batch_id FROM batch_intents WHERE batch_id IS NOT NULL")
        assert made == {b for (b,) in bound}
        # The intent killed before its create was proven absent, and its rows sent afresh.
        states = dict(store_rows(out, "SELECT state, count(*) FROM batch_intents GROUP BY 1"))
        assert states.get("absent", 0) >= 1 and set(states) == {"absent", "ingested"}
        # Every row the API answered is stored once; none was left out.
        delivered = {c for e in read_log(sim) if e["event"] == "end" for c in e["delivered"]}
        answered = {
            c for (c,) in store_rows(out, "SELECT custom_id FROM batch_rows WHERE outcome = 'done'")
        }
        assert answered == delivered
        export_all(out, tmp_path / "all.jsonl")
        check_against_truth(out, sim, tmp_path / "all.jsonl", allow_failures=True)
    finally:
        sim.stop()

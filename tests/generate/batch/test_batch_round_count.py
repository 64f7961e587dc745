"""The batch progress line's round is the report's (issue #35): a pass that sent nothing new
used to count a round of its own, so the line said "round 4" where the report drew rounds 1-2."""

from __future__ import annotations

from pathlib import Path

from batch_runs import TOKENIZER

from draftgen.api import Run, RunOptions
from draftgen.generate.batch.progress import BatchProgress
from draftgen.store.batch_timing import batch_rounds
from draftgen.store.database import Store

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "prompts.jsonl"


def _batch_options(tmp_path) -> RunOptions:
    """The examples as a batch run on the simulator, ten rows a batch."""
    return RunOptions(
        inputs=[str(EXAMPLES)],
        model="moonshotai/kimi-k2.5",
        tokenizer=TOKENIZER,
        out=tmp_path / "run",
        simulate=True,
        batch=True,
        batch_size=10,
    )


def test_the_progress_round_is_the_last_round_the_report_draws(tmp_path):
    options = _batch_options(tmp_path)
    summary = Run(options).execute()
    assert isinstance(summary.progress, BatchProgress)
    with Store(tmp_path / "run", create=False) as store:
        drawn = [batch["round"] for batch in batch_rounds(store.db, 0.0)]
    # The examples' longest conversation takes 3 rounds; a failed batch's rows may add one.
    assert max(drawn) >= 3
    assert summary.progress.round == max(drawn)
    assert summary.progress.line().startswith(f"round {max(drawn)} | ")


def test_the_round_shown_as_a_batch_is_sent_is_that_batchs_round(tmp_path, monkeypatch):
    from draftgen.generate.batch.progress import BatchDisplay

    shown = []  # (round, batches sent) at each refresh once a batch is out
    refresh = BatchDisplay.refresh

    def watched(self):
        if self.progress.batches_submitted:
            shown.append((self.progress.round, self.progress.batches_submitted))
        refresh(self)

    monkeypatch.setattr(BatchDisplay, "refresh", watched)
    options = _batch_options(tmp_path)
    Run(options).execute()
    with Store(tmp_path / "run", create=False) as store:
        drawn = [batch["round"] for batch in batch_rounds(store.db, 0.0)]
    # The first refresh after the first batch was sent said "round 0" while it validated.
    assert shown[0] == (1, 1)
    # Each refresh shows the round of the last batch sent by then, as the report draws it.
    assert all(shown_round == drawn[sent - 1] for shown_round, sent in shown)

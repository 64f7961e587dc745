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


def test_the_progress_round_is_the_last_round_the_report_draws(tmp_path):
    options = RunOptions(
        inputs=[str(EXAMPLES)],
        model="moonshotai/kimi-k2.5",
        tokenizer=TOKENIZER,
        out=tmp_path / "run",
        simulate=True,
        batch=True,
        batch_size=10,
    )
    summary = Run(options).execute()
    assert isinstance(summary.progress, BatchProgress)
    with Store(tmp_path / "run", create=False) as store:
        drawn = [batch["round"] for batch in batch_rounds(store.db, 0.0)]
    # The examples' longest conversation takes 3 rounds; a failed batch's rows may add one.
    assert max(drawn) >= 3
    assert summary.progress.round == max(drawn)
    assert summary.progress.line().startswith(f"round {max(drawn)} | ")

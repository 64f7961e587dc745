"""Money in batch mode: the ``:batch`` catalog price, a batch's worst case before it is sent, what
has been charged so far (``--max-cost``), and what a cancelled batch billed (``draftgen cancel``).

A batch is paid before its answers are seen, so every batch is sent with its worst case (each
row's prompt plus ``max_tokens`` at the batch price; progress, status and the report show it), and
``--max-cost`` counts every live batch at it and sends no batch that could pass the limit; a
finished batch counts at what it cost.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from draftgen.backends.listing import listed_prices
from draftgen.store.batch_timing import IN_FLIGHT, billed_without_rows


@dataclass(frozen=True)
class BatchPrices:
    prompt: float  # USD per token
    completion: float
    source: str  # where they come from, for the log and the estimate


async def find_batch_prices(
    base_url: str, model: str, api_key: str | None
) -> tuple[BatchPrices | None, str]:
    """The ``MODEL:batch`` entry's prices from ``GET {base_url}/models`` (or, if the listing has
    none, the live price as an upper bound) and a sentence saying which."""
    variant = model if model.endswith(":batch") else model + ":batch"
    listed = await listed_prices(base_url, variant, api_key)
    if isinstance(listed, tuple):
        return BatchPrices(*listed, f"{variant} in the listing"), f"batch prices of {variant}"
    live = await listed_prices(base_url, model.removesuffix(":batch"), api_key)
    if isinstance(live, tuple):
        return (
            BatchPrices(*live, f"{model} (live price: the listing has no {variant})"),
            f"the listing has no {variant}: batches are counted at the live price",
        )
    return None, listed


def row_worst(prices: BatchPrices, max_tokens: int, prompt_tokens: int) -> float:
    """The most one row can cost: its prompt and ``max_tokens`` of output at ``prices``."""
    return prompt_tokens * prices.prompt + max_tokens * prices.completion


class BatchBudget:
    """``--max-cost`` for batches: spent plus live worst cases plus the next batch's worst case
    must stay within the limit."""

    def __init__(
        self, limit: float, prices: BatchPrices, max_tokens: int, db: sqlite3.Connection
    ) -> None:
        self.limit = limit
        self.prices = prices
        self.max_tokens = max_tokens
        self.db = db

    def worst(self, prompt_tokens: int) -> float:
        return row_worst(self.prices, self.max_tokens, prompt_tokens)

    def spent(self) -> float:
        """Charged so far: every stored completion (at the batch price when the API reported
        no cost), and what finished batches charged beyond their returned rows (a cancelled
        batch bills its finished rows and returns none)."""
        stored = self.db.execute(
            "SELECT coalesce(sum(CASE WHEN cost > 0 THEN cost ELSE coalesce(prompt_tokens, 0) * ?"
            " + coalesce(completion_tokens, 0) * ? END), 0) FROM completions",
            (self.prices.prompt, self.prices.completion),
        ).fetchone()[0]
        return stored + billed_without_rows(self.db)

    def committed(self) -> float:
        """The worst case of the batches still running (their rows may all come back long); one
        that ended counts in ``spent`` at what it cost."""
        return self.db.execute(
            f"SELECT coalesce(sum(worst_cost), 0) FROM batch_intents WHERE {IN_FLIGHT}"
        ).fetchone()[0]

    def room(self) -> float:
        return self.limit - self.spent() - self.committed()

    def sentence(self) -> str:
        spent, committed = self.spent(), self.committed()
        text = f"reached --max-cost ${self.limit:.4f}: spent ${spent:.4f}"
        if committed:
            text += f", and batches still running could cost up to ${committed:.4f} more"
        return text + "; raise --max-cost and rerun the same command to continue"

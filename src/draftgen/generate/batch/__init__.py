"""Batch inference as a generation mode (``draftgen run --batch``): half the price, crash-safe,
never paying twice.

``Batch`` is a run's engine in place of the live one (``draftgen.generate.contract.Engine``);
the plan, the store, reconstruction, verification and exports are the live run's own. Modules:
``dialects`` (the wire: OpenRouter inline batches, OpenAI-style file batches), ``submit``
(intents, creates, reconciliation), ``ingest`` (results into the store), ``generate`` (the run:
rows admitted, rounds driven, signals), ``rounds`` (a round's ready turns rendered, priced and
sent), ``polling`` (live batches polled, their results stored, rows retried or given up),
``state`` (what those parts share), ``money`` (prices, ``--max-cost``). The batch tables' SQL is
``draftgen.store.batch_ledger``; cancelling a run's batches is ``draftgen.run.cancel``.
"""

from draftgen.generate.batch.generate import Batch

__all__ = ["Batch"]

"""Batch inference as a generation mode (``draftgen run --batch``): half the price, crash-safe,
never paying twice.

``generate_batch`` replaces the live generation step of a run (``draftgen.run.pipeline.run``);
the plan, the store, reconstruction, verification and exports are the live run's own. Modules:
``dialects`` (the wire: OpenRouter inline batches, OpenAI-style file batches), ``submit``
(intents, creates, reconciliation), ``ingest`` (results into the store), ``generate`` (rounds and
polling), ``money`` (prices, ``--max-cost``). The batch tables' SQL is
``draftgen.store.batch_ledger``; cancelling a run's batches is ``draftgen.run.cancel``.
"""

from draftgen.generate.batch.generate import generate_batch

__all__ = ["generate_batch"]

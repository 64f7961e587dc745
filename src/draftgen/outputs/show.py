"""One sample as training sees it, each token's text apart: what ``draftgen show`` prints
(``RunDir.sample``) and the report's sample rows draw, from one function."""

from __future__ import annotations

from typing import Any

from draftgen.store.database import Store
from draftgen.tokens.tokenizer import decode_batch, load_tokenizer


def sample_tokens(store: Store, sample_id: str, tokenizer: Any = None) -> dict | None:
    """The sample ``sample_id`` (its export id ``SOURCE_ID:TURN`` or its key) with its verdict,
    ids and ``tokens``: each id's text as the run's tokenizer decodes it alone (None if the run
    has no such sample). ``tokenizer``: one already loaded, else the run's own is."""
    record = store.samples.sample_record(sample_id)
    if record is None:
        return None
    if tokenizer is None:
        tokenizer = load_tokenizer(store.settings.meta("tokenizer"))
    record["tokens"] = decode_batch(tokenizer, [[i] for i in record["input_ids"]])
    return record

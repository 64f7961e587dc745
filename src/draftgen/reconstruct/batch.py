"""Reconstruct many stored completions at once, with the tokenizer's work spread over every core.

``reconstruct_sample`` stays the one definition of a sample; this module only runs it over a batch
whose texts were encoded ahead in batch calls (``tokenizer.encode_batch``: the fast encoder proven
for the run, GIL released, all cores): first every text the batch reads, then the whitespace
repairs of the samples whose counts do not match.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from draftgen.collector import collecting_less
from draftgen.profiles import ModelProfile
from draftgen.reconstruct.text import (
    batch_reading,
    reconstruct_sample,
    renderer_for,
    repair_texts,
)
from draftgen.records import StoredCompletion, TokenSample
from draftgen.tokens import long_text
from draftgen.tokens import tokenizer as tok


class PreEncodedTokenizer(tok.EncoderView):
    """The target tokenizer, answering from batch results for the texts it was given ahead.

    Whatever it was not given (a reading added later to ``reconstruct``) goes to
    ``tokenizer.encode``, so the results are the same as without it, only sooner.
    """

    def __init__(self, tokenizer: Any) -> None:
        self.inner = tokenizer
        self._ids: dict[str, list[int]] = {}
        # id of a list handed out -> (that list, its text decoded)
        self._decoded: dict[int, tuple[list[int], str]] = {}
        self.memo: dict = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def encode_ahead(self, texts: list[str], decode: list[str] = ()) -> None:
        """Encode ``texts`` in batch calls, and decode back those also in ``decode`` (what
        verification will compare with its text); the GIL is released meanwhile."""
        texts = [t for t in dict.fromkeys(texts) if t not in self._ids]
        if texts:
            self._ids.update(zip(texts, tok.encode_batch(self.inner, texts), strict=True))
        lists = [self._ids[t] for t in dict.fromkeys(decode)]
        lists = [ids for ids in lists if id(ids) not in self._decoded]
        if lists:
            decoded = tok.decode_batch(self.inner, lists)
            self._decoded.update(
                (id(ids), (ids, text)) for ids, text in zip(lists, decoded, strict=True)
            )

    def encode_text(self, text: str) -> list[int]:
        """The batch's own list, not a copy (copies were a tenth of reconstruction's Python):
        reconstruction only reads the ids it is given and builds new lists from them."""
        ids = self._ids.get(text)
        return tok.encode(self.inner, text) if ids is None else ids

    def count_text(self, text: str) -> int:
        ids = self._ids.get(text)
        return len(ids) if ids is not None else tok.count(self.inner, text)

    def decode_ids(self, ids: list[int]) -> str:
        entry = self._decoded.get(id(ids))
        if entry is not None and entry[0] is ids:
            return entry[1]
        return tok.decode(self.inner, ids)


def prepare(
    batch: list[StoredCompletion], tokenizer: Any, profile: ModelProfile
) -> tuple[PreEncodedTokenizer, list[str], list[str]]:
    """List every text the batch's reconstruction will encode, and the completion readings
    among them, which verification also decodes (holds the GIL).

    Prompts are the renderings recorded with the requests; a store from before they were
    recorded is rendered here with the template's defaults, once per completion.
    """
    cached = PreEncodedTokenizer(tokenizer)
    texts: list[str] = []
    readings: list[str] = []
    for index, stored in enumerate(batch):
        rendering = stored.rendering
        if rendering is None:
            rendering = renderer_for(tokenizer, profile).render(stored.messages, stored.tools)
            batch[index] = replace(stored, rendering=rendering)
        if rendering.error:
            continue
        if rendering.ids is None:
            texts.append(rendering.text)
        if profile.segmented is None:  # a segmented family's readings are encoded piece by piece
            reading = batch_reading(stored.completion, rendering.text, profile, cached)
            readings.extend(reading.texts)
    return cached, texts + readings, readings


def reconstruct_batches(
    batches: Iterable[list[StoredCompletion]],
    tokenizer: Any,
    profile: ModelProfile,
    stop: threading.Event | None = None,
) -> Iterator[list[TokenSample]]:
    """Samples of each batch, in order: batch k+1 is prepared while batch k is encoded.

    Rendering (Jinja) and verification hold the GIL; the encoder runs in a helper thread with
    the GIL released and uses every core, so both overlap. The first batch's texts are the
    sample on which the fast encoder is proven against the tokenizer's own code. Once ``stop``
    is set, a long text's encode raises ``long_text.EncodingStopped`` between two groups of
    pieces: the batch in hand is left for a later pass.
    """
    # A batch holds hundreds of lists of thousands of ids: at the collector's default pace,
    # walking them (to find no cycle: ids are ints) was a fifth of reconstruction's Python.
    # Left by an exception (Ctrl-C) or with ``stop`` set, the encoder stops between two groups
    # of a long text's pieces instead of finishing the batch's encodes first: ``stopping`` sets
    # the stop on its way out, before the executor's exit waits for its thread.
    stop = stop if stop is not None else threading.Event()
    with (
        ThreadPoolExecutor(
            1, thread_name_prefix="draftgen-encode", initializer=long_text.obey, initargs=(stop,)
        ) as encoder,
        long_text.stopping(stop),
        collecting_less(),
    ):
        waiting: tuple[list[StoredCompletion], PreEncodedTokenizer, Future] | None = None
        for batch in batches:
            if not batch:
                continue
            cached, texts, readings = prepare(batch, tokenizer, profile)
            job = encoder.submit(cached.encode_ahead, texts, readings)
            if waiting is not None:
                yield _finish(*waiting, profile)
            waiting = (batch, cached, job)
        if waiting is not None:
            yield _finish(*waiting, profile)


def _finish(
    batch: list[StoredCompletion],
    cached: PreEncodedTokenizer,
    job: Future,
    profile: ModelProfile,
) -> list[TokenSample]:
    job.result()
    # Samples whose count matches no reading try whitespace restored at the content's edges:
    # those texts too go to the encoder together, not one by one.
    repairs = [text for stored in batch for text in repair_texts(stored, cached, profile)]
    cached.encode_ahead(repairs)
    return [reconstruct_sample(stored, cached, profile) for stored in batch]

"""Reconstruct many stored completions at once, with the tokenizer's work spread over every core.

``reconstruct_sample`` stays the one definition of a sample; this module only runs it over a batch
whose texts were encoded ahead in one ``encode_batch`` call (Rust, GIL released, all cores).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from draftgen import tokenizer as tok
from draftgen.profiles import ModelProfile
from draftgen.reconstruct import read_completion, reconstruct_sample, renderer_for
from draftgen.records import StoredCompletion, TokenSample


class PreEncodedTokenizer:
    """The target tokenizer, answering from batch results for the texts it was given ahead.

    Whatever it was not given (a whitespace repair, a reading added later to ``reconstruct``) goes
    to the real tokenizer, so the results are the same as without it, only sooner.
    """

    def __init__(self, tokenizer: Any) -> None:
        self.inner = tokenizer
        self._ids: dict[str, list[int]] = {}
        self._texts_decoded: dict[str, str] = {}
        self._decoded: dict[int, tuple[list[int], list[int], str]] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def encode_ahead(self, texts: list[str]) -> None:
        """Encode and decode ``texts`` in batches; the GIL is released while Rust works."""
        texts = [t for t in dict.fromkeys(texts) if t not in self._ids]
        if not texts:
            return
        raw = self.inner._tokenizer
        ids = [e.ids for e in batch_encoder(raw)(texts, add_special_tokens=False)]
        self._ids.update(zip(texts, ids, strict=True))
        self._texts_decoded.update(
            zip(texts, raw.decode_batch(ids, skip_special_tokens=False), strict=True)
        )

    def encode(self, text: str, add_special_tokens: bool = True, **kwargs: Any) -> list[int]:
        ids = None if add_special_tokens or kwargs else self._ids.get(text)
        if ids is None:
            return self.inner.encode(text, add_special_tokens=add_special_tokens, **kwargs)
        copy = list(ids)
        decoded = self._texts_decoded.get(text)
        if decoded is not None:
            self._decoded[id(copy)] = (copy, ids, decoded)
        return copy

    def decode(self, ids, skip_special_tokens: bool = False, **kwargs: Any) -> str:
        entry = self._decoded.get(id(ids))
        if (
            entry is not None
            and entry[0] is ids
            and ids == entry[1]
            and not skip_special_tokens
            and kwargs == {"clean_up_tokenization_spaces": False}
        ):
            return entry[2]
        return self.inner.decode(ids, skip_special_tokens=skip_special_tokens, **kwargs)


def batch_encoder(raw: Any) -> Any:
    """The Rust tokenizer's batch encode: ``encode_batch_fast`` (tokenizers >= 0.20) skips the
    character offsets nothing here reads, ~10% less CPU for the same ids; else ``encode_batch``."""
    return getattr(raw, "encode_batch_fast", None) or raw.encode_batch


def batch_encoding_agrees(tokenizer: Any, text: str) -> bool:
    """Whether ``encode_batch``/``decode_batch`` give what ``tok.encode``/``tok.decode`` give.

    They do for every tokenizer draftgen has met; checked per batch because a tokenizer whose
    Python side adds its own handling would otherwise make every sample silently different.
    """
    raw = getattr(tokenizer, "_tokenizer", None)
    if raw is None or not hasattr(raw, "encode_batch"):
        return False
    ids = tok.encode(tokenizer, text)
    batch = batch_encoder(raw)([text], add_special_tokens=False)[0].ids
    return batch == ids and raw.decode_batch([ids], skip_special_tokens=False)[0] == tok.decode(
        tokenizer, ids
    )


def prepare(
    batch: list[StoredCompletion], tokenizer: Any, profile: ModelProfile
) -> tuple[PreEncodedTokenizer, list[str]]:
    """List every text the batch's reconstruction will encode (holds the GIL).

    Prompts are the renderings recorded with the requests; a store from before they were
    recorded is rendered here with the template's defaults, once per completion.
    """
    cached = PreEncodedTokenizer(tokenizer)
    texts: list[str] = []
    for index, stored in enumerate(batch):
        rendering = stored.rendering
        if rendering is None:
            rendering = renderer_for(tokenizer, profile).render(stored.messages, stored.tools)
            batch[index] = replace(stored, rendering=rendering)
        if rendering.error:
            continue
        if rendering.ids is None:
            texts.append(rendering.text)
        texts.extend(read_completion(stored.completion, rendering.text, profile).texts)
    return cached, texts


def reconstruct_batches(
    batches: Iterable[list[StoredCompletion]], tokenizer: Any, profile: ModelProfile
) -> Iterator[list[TokenSample]]:
    """Samples of each batch, in order: batch k+1 is prepared while batch k is encoded.

    Rendering (Jinja) and verification hold the GIL; ``encode_batch`` runs in a helper thread
    with the GIL released and uses every core, so both overlap.
    """
    with ThreadPoolExecutor(1, thread_name_prefix="draftgen-encode") as encoder:
        waiting: tuple[list[StoredCompletion], PreEncodedTokenizer, Future | None] | None = None
        fast: bool | None = None
        for batch in batches:
            if not batch:
                continue
            cached, texts = prepare(batch, tokenizer, profile)
            if fast is None and texts:
                fast = batch_encoding_agrees(tokenizer, texts[-1])
            job = encoder.submit(cached.encode_ahead, texts) if fast else None
            if waiting is not None:
                yield _finish(*waiting, profile)
            waiting = (batch, cached, job)
        if waiting is not None:
            yield _finish(*waiting, profile)


def _finish(
    batch: list[StoredCompletion],
    cached: PreEncodedTokenizer,
    job: Future | None,
    profile: ModelProfile,
) -> list[TokenSample]:
    if job is not None:
        job.result()
    return [reconstruct_sample(stored, cached, profile) for stored in batch]

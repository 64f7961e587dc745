"""Re-splits a count cannot see: how many verified ``text``-proof samples likely hold other ids
than the model generated at an equal count, estimated from the run itself (docs/verification.md).

A completion the model segmented otherwise than its text re-encodes (` is`+`the` where the text
re-encodes as ` ist`+`he`) is caught by the count only when the segmentations differ in length.
The estimate joins two measures of the run:

- how often its text-proof answers re-split with a count change: the samples whose completion
  count differs (``completion_count_mismatch``, ``whitespace_altered`` from a provider not seen
  stripping; other reasons say something else happened), each
  answer's re-splits taken as a Poisson count proportional to its length in tokens;
- how often a re-split keeps the count for this tokenizer: pairs of the run's own generated tokens
  (two of one stretch of an answer, a few places apart), as a model that picks each token without
  regard to how the text will re-encode could write them side by side, their bytes joined and
  re-encoded; of the pairs that re-encode to other ids, the share that re-encode to two
  (``keeps_count``). Where the run also holds samples whose server gave the ids, the text path's
  own record against them (``text_check``) is that share measured directly, and is used instead
  once it has seen enough re-splits.

Thinning a Poisson count leaves two independent ones, so a sample whose count matched still holds
``keeps_count / (1 - keeps_count)`` hidden re-splits per detected one at its length. The pairs are
drawn once per reconstruction (bounded and seeded) and kept in the store's meta; ``estimate`` is a
few sums over the samples, cheap enough for ``status``.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from typing import Any

import orjson

from draftgen.reconstruct.reasons import (
    COMPLETION_COUNT_MISMATCH,
    OK,
    PROVIDER_STRIPS_WHITESPACE,
    WHITESPACE_ALTERED,
)
from draftgen.store.database import Store
from draftgen.tokens import tokenizer as tok

# Where the pairs' measure is kept (meta), and what bounds it.
PAIRS_META = "resplit_pairs"
SAMPLES_READ = 2_000  # the run's token distribution is read from at most this many samples
TOKENS_READ = 400_000  # ... and at most this many of their generated tokens
PAIRS_DRAWN = 1_000_000  # at most this many pairs are drawn
DRAW_ROUND = 20_000  # ... this many at a time
PAIR_DISTANCE = 8  # a pair's tokens are 2 to this many places apart in one answer
# ... and no more once this many re-split: the share kept is then known within about 0.02 (its
# standard error), and a run's end pays a few tenths of a second for it (the pairs' encoding).
RESPLITS_WANTED = 500
SEED = 20261207
# The server's ids measure the share directly once they have seen this many re-splits (the text
# path flagged or wrong); fewer leave the tokenizer's pairs the better measure.
CHECKED_ENOUGH = 30
# The reasons of a completion count that differs: a whitespace repair that matches the count is
# no evidence of a strip where the provider keeps whitespace (vLLM never strips).
COUNT_CHANGED = (COMPLETION_COUNT_MISMATCH, WHITESPACE_ALTERED)
# Tokens that re-encode alone to themselves, of those a run's answers hold: fewer, and pairs
# encoded alone are not pairs in a text (PairMeasure.alone).
ALONE_ENOUGH = 0.9
# text_check's value for a text path verified against server ids that are not its own.
TEXT_IDS_DIFFER = "ids_differ"


@dataclass(frozen=True)
class PairMeasure:
    """Pairs of a run's generated tokens, drawn and re-encoded (``measure_pairs``)."""

    fingerprint: str  # the reconstruction the tokens were read from (meta ``reconstruction``)
    samples: int  # samples read
    tokens: int  # their generated tokens, specials left out
    drawn: int  # pairs drawn (within an answer's stretch) whose joined bytes are text (UTF-8)
    resplit: int  # of those, pairs that re-encode to other ids
    kept: int  # of those, pairs that re-encode to two ids: a re-split the count cannot see
    # The share of the distinct tokens read whose text alone re-encodes to them: below
    # ``ALONE_ENOUGH`` the tokenizer encodes a piece by its place (SentencePiece's dummy prefix)
    # and a pair encoded alone says nothing of it in a text.
    alone: float = 1.0

    @property
    def keeps_count(self) -> float | None:
        if self.alone < ALONE_ENOUGH:
            return None
        return self.kept / self.resplit if self.resplit else None


def measure_pairs(store: Store, tokenizer: Any) -> PairMeasure:
    """Draw pairs from the run's generated tokens (seeded, bounded) and re-encode each.

    A pair is two tokens of one answer a few places apart (``PAIR_DISTANCE``), not neighbours:
    neighbours are the canonical encoding's own pairs, which re-encode as they are by
    construction, while two tokens of the same stretch of text are what a model writing that
    stretch could have put side by side. An added token (``<think>``, ``</think>``) ends a
    stretch: BPE does not merge across it."""
    fingerprint = store.settings.meta("reconstruction") or ""
    tokens: list[int] = []
    stretch: list[int] = []  # each token's stretch of ordinary tokens
    samples = 0
    added = set(getattr(tokenizer, "added_tokens_decoder", None) or {})
    for blob, prompt_len in store.db.execute(
        "SELECT input_ids, prompt_len FROM samples ORDER BY key LIMIT ?", (SAMPLES_READ,)
    ):
        samples += 1
        current = stretch[-1] + 1 if stretch else 0  # a new answer, a new stretch
        for token in _ids(blob)[prompt_len:]:
            if token in added:
                current += 1
                continue
            tokens.append(token)
            stretch.append(current)
        if len(tokens) >= TOKENS_READ:
            break
    if not tokens:
        return PairMeasure(fingerprint, samples, 0, 0, 0, 0)
    token_bytes = _token_bytes(tokenizer, set(tokens))
    alone = _alone(tokenizer, token_bytes)
    if alone < ALONE_ENOUGH:
        return PairMeasure(fingerprint, samples, len(tokens), 0, 0, 0, round(alone, 4))
    # Drawn a round at a time with numpy: a vocabulary whose pairs seldom re-split needs many
    # draws to find enough that do, and each distinct pair is encoded once.
    import numpy

    rng = numpy.random.default_rng(SEED)
    ids, stretches = numpy.asarray(tokens, numpy.int64), numpy.asarray(stretch, numpy.int64)
    width = int(ids.max()) + 1
    outcomes: dict[int, int] = {}  # pair (left * width + right) -> ids it re-encodes to
    drawn = resplit = kept = draws = 0
    while draws < PAIRS_DRAWN and resplit < RESPLITS_WANTED:
        left = rng.integers(0, len(ids), DRAW_ROUND)
        right = left + rng.integers(2, PAIR_DISTANCE + 1, DRAW_ROUND)
        inside = right < len(ids)
        left, right = left[inside], right[inside]
        same = stretches[left] == stretches[right]
        left, right = left[same], right[same]
        draws += DRAW_ROUND
        codes, counts = numpy.unique(ids[left] * width + ids[right], return_counts=True)
        new = [int(code) for code in codes if int(code) not in outcomes]
        _encode_new(tokenizer, token_bytes, outcomes, new, width)
        for code, count in zip(codes.tolist(), counts.tolist(), strict=True):
            length = outcomes[code]
            if length == 0:
                continue  # joined bytes that are not text: no text spells this pair alone
            drawn += count
            if length != -1:
                resplit += count
                kept += count if length == 2 else 0
    return PairMeasure(fingerprint, samples, len(tokens), drawn, resplit, kept, round(alone, 4))


def _alone(tokenizer: Any, token_bytes: dict[int, bytes]) -> float:
    """The share of these tokens (those whose bytes are text) that re-encode alone to
    themselves."""
    texts, ids = [], []
    for index, raw in token_bytes.items():
        try:
            texts.append(raw.decode("utf-8"))
            ids.append(index)
        except UnicodeDecodeError:
            continue
    if not texts:
        return 0.0
    again = tok.encode_batch(tokenizer, texts)
    return sum(found == [index] for index, found in zip(ids, again, strict=True)) / len(ids)


def _encode_new(
    tokenizer: Any,
    token_bytes: dict[int, bytes],
    outcomes: dict[int, int],
    codes: list[int],
    width: int,
) -> None:
    """Record for each pair (``left * width + right``): -1 if its text re-encodes to the pair
    itself, else the number of ids it re-encodes to (0: its bytes are not text)."""
    texts, kept = [], []
    for code in codes:
        pair = divmod(code, width)
        try:
            texts.append((token_bytes[pair[0]] + token_bytes[pair[1]]).decode("utf-8"))
            kept.append((code, list(pair)))
        except UnicodeDecodeError:
            outcomes[code] = 0
    for (code, pair), again in zip(kept, tok.encode_batch(tokenizer, texts), strict=True):
        outcomes[code] = -1 if again == pair else len(again)


def _token_bytes(tokenizer: Any, ids: set[int]) -> dict[int, bytes]:
    """Each id's bytes: a byte-level vocabulary's token mapped back, a SentencePiece one's read
    (``▁`` a space, ``<0x0A>`` a byte: decoding it alone would drop its leading space), else the
    id decoded."""
    decoder = tok.byte_decoder()
    found: dict[int, bytes] = {}
    for token, index in tok.full_vocab(tokenizer).items():
        if index in ids:
            try:
                found[index] = bytes(decoder[ch] for ch in token)
            except KeyError:  # not a byte-level vocabulary entry
                byte = re.fullmatch(r"<0x([0-9A-Fa-f]{2})>", token)
                found[index] = (
                    bytes([int(byte.group(1), 16)])
                    if byte
                    else token.replace("\u2581", " ").encode("utf-8")
                )
    for index in ids - found.keys():
        found[index] = tok.decode(tokenizer, [index]).encode("utf-8")
    return found


def _ids(blob: bytes) -> list[int]:
    from array import array

    ids = array("i")
    ids.frombytes(blob)
    return ids.tolist()


def record_pairs(store: Store, tokenizer: Any) -> PairMeasure:
    """Measure the pairs of the run's tokens and keep the measure in the store (meta)."""
    measure = measure_pairs(store, tokenizer)
    store.settings.set_meta(PAIRS_META, orjson.dumps(asdict(measure)).decode())
    return measure


def stored_pairs(store: Store) -> PairMeasure | None:
    """The measure kept for the store's current reconstruction, or None."""
    raw = store.settings.meta(PAIRS_META)
    if not raw:
        return None
    try:
        measure = PairMeasure(**orjson.loads(raw))
    except (TypeError, ValueError):
        return None  # another version's shape: measured again at the next reconstruction
    return measure if measure.fingerprint == (store.settings.meta("reconstruction") or "") else None


def estimate(store: Store) -> dict:
    """The text proof's re-splits: what the run shows, and the verified samples likely wrong.

    ``samples``: text-proof samples whose count settles it (verified, or flagged for their
    completion count alone); ``count_changed``: those flagged; ``verified``: those exported as
    verified; ``keeps_count`` and its ``basis``; ``resplit_share``: the estimated share of the
    samples with any re-split; ``estimated_wrong`` and ``estimated_wrong_share`` (of
    ``verified``): verified samples whose ids likely differ at an equal count (None when the
    tokenizer's share is not measured yet).
    """
    lengths = _text_lengths(store)
    samples = sum(n for n, _, _ in lengths.values())
    changed = sum(c for _, c, _ in lengths.values())
    verified = sum(v for _, _, v in lengths.values())
    share, basis, measured = _keeps_count(store)
    result: dict[str, Any] = {
        "samples": samples,
        "count_changed": changed,
        "verified": verified,
        "keeps_count": None if share is None else round(share, 4),
        "basis": basis,
        **measured,
        "resplit_share": None,
        "estimated_wrong": None,
        "estimated_wrong_share": None,
    }
    if share is None or not samples:
        return result
    # Count-changing re-splits per token: the rate at which the expected share of samples with
    # at least one equals the share flagged.
    seen = _poisson_rate(lengths, changed)
    hidden = seen * share / (1 - share) if share < 1 else math.inf
    if math.isinf(hidden) or math.isinf(seen):
        wrong = float(verified)
        resplit = 1.0
    else:
        wrong = sum(v * (1 - math.exp(-hidden * length)) for length, (_, _, v) in lengths.items())
        resplit = (
            sum(
                n * (1 - math.exp(-(seen + hidden) * length))
                for length, (n, _, _) in lengths.items()
            )
            / samples
        )
    result.update(
        resplit_share=round(resplit, 4),
        estimated_wrong=round(wrong, 1),
        estimated_wrong_share=round(wrong / verified, 4) if verified else None,
    )
    return result


def _text_lengths(store: Store) -> dict[int, tuple[int, int, int]]:
    """Generated length -> (samples whose count settles them, flagged for their completion
    count, exported as verified), over the text-proof samples of providers not seen stripping
    whitespace (a strip changes the count too: their mismatches say nothing of re-splits)."""
    strippers = store.samples.providers_with_reason(WHITESPACE_ALTERED)
    strippers -= store.samples.providers_keeping_edge_whitespace()
    strippers |= store.samples.providers_with_reason(PROVIDER_STRIPS_WHITESPACE)
    itemsize = 4  # the samples' ids are stored as array("i") bytes
    lengths: dict[int, tuple[int, int, int]] = {}
    for n, provider, count, changed, exported in store.db.execute(
        f"SELECT length(s.input_ids) / {itemsize} - s.prompt_len AS n, coalesce(c.provider, ''),"
        " count(*), coalesce(sum(s.reason <> ?), 0),"
        " coalesce(sum(s.verified = 1 AND s.truncated = 0), 0)"
        " FROM samples s JOIN completions c ON c.key = s.key WHERE s.id_source = 'text'"
        " AND (s.reason IN (?, ?) OR (s.verified = 1 AND s.reason = ?)) GROUP BY 1, 2",
        (OK, *COUNT_CHANGED, OK),
    ):
        if provider in strippers:
            continue
        had = lengths.get(max(1, n), (0, 0, 0))
        lengths[max(1, n)] = (had[0] + count, had[1] + changed, had[2] + exported)
    return lengths


def _poisson_rate(lengths: dict[int, tuple[int, int, int]], changed: int) -> float:
    """The rate per token at which samples of these lengths would have ``changed`` of them with
    at least one event (a bisection: the expected count rises with the rate)."""
    total = sum(n for n, _, _ in lengths.values())
    if changed <= 0:
        return 0.0
    if changed >= total:
        return math.inf

    def expected(rate: float) -> float:
        return sum(n * (1 - math.exp(-rate * length)) for length, (n, _, _) in lengths.items())

    low, high = 0.0, 1.0
    while expected(high) < changed:
        high *= 2
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if expected(middle) < changed else (low, middle)
    return (low + high) / 2


def _keeps_count(store: Store) -> tuple[float | None, str | None, dict]:
    """The share of re-splits that keep the count, what it was measured on, and its figures."""
    checks = dict(
        store.db.execute(
            "SELECT text_check, count(*) FROM samples WHERE text_check IN (?, ?, ?)"
            " GROUP BY text_check",
            (TEXT_IDS_DIFFER, *COUNT_CHANGED),
        )
    )
    differ = checks.get(TEXT_IDS_DIFFER, 0)
    flagged = sum(checks.get(reason, 0) for reason in COUNT_CHANGED)
    if differ + flagged >= CHECKED_ENOUGH:
        # Samples, not pairs: a sample with a hidden and a counted re-split is counted once, as
        # flagged, as the text proof's samples are.
        figures = {"checked": {"ids_differ": differ, "count_changed": flagged}}
        return differ / (differ + flagged), "server_ids", figures
    pairs = stored_pairs(store)
    if pairs is None:
        return None, None, {}
    figures = {"pairs": {k: v for k, v in asdict(pairs).items() if k != "fingerprint"}}
    if pairs.alone < ALONE_ENOUGH:
        return None, "tokenizer_pairs", figures  # a tokenizer that encodes pieces by place
    if not pairs.resplit:
        # No drawn pair re-split: none keeps the count that the sample could show.
        return (0.0 if pairs.drawn else None), "tokenizer_pairs", figures
    return pairs.keeps_count, "tokenizer_pairs", figures


def proof_figures(store: Store) -> dict[str, dict]:
    """Samples and verified samples by proof (``Store.tallies.proof_counts``), the text proof's with
    its re-splits (``estimate``)."""
    figures = store.tallies.proof_counts()
    figures["text"]["resplits"] = estimate(store)
    return figures

"""Long texts encoded in pieces whose ids, joined, are exactly the whole text's ids.

The ``tokenizers`` library keeps about 500 bytes per token of an encoding (ids, type ids, token
strings, offsets, masks): a 15 MB answer cost 2.5 GB to encode at once and 0.1 GB in pieces of
256K characters. So a text longer than ``LONG_TEXT_CHARS`` is cut, but only where no id can cross
the cut:

- the tokenizer is a ``tokenizers`` one whose normalizer is none or NFC, whose pre-tokenizer is
  byte-level without a prefix space (alone, or after regex splits and digit splits), and whose
  added tokens hold no whitespace and strip none: its ids never span a pre-token boundary, and an
  added token is found in a piece exactly as in the whole;
- a cut sits before a space between an ASCII letter or digit and an ASCII letter (``abc| def``):
  every byte-level pattern (GPT-2's, Llama 3's, Qwen's, o200k's, DeepSeek's splits) ends a letter
  or digit run there and starts `` def`` as a pre-token of its own, and no NFC composition
  crosses ASCII. Each cut is also checked by the tokenizer's own pre-tokenizer on the characters
  around it.

Any other tokenizer encodes its texts whole, as before. ``tests/tokens/test_long_text.py`` proves
the joined ids equal to the whole text's on every fixture with cuts every few characters.

Pieces are encoded a group at a time (``encode_grouped``), and an encoding can be stopped between
two groups (``stopping``): a 100 MB answer is a minute of the encoder's time, which a Ctrl-C must
not have to wait for.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
from collections.abc import Callable, Iterator
from typing import Any

LONG_TEXT_CHARS = 1 << 18
# Characters handed to the encoder in one call: a piece for each core, so one call keeps every
# core busy, holds the encoder's working memory for a few pieces only (``tokenizers`` keeps ~500
# bytes a token until the call returns), and ends within a fraction of a second.
GROUP_CHARS = max(2, os.cpu_count() or 1) * LONG_TEXT_CHARS
# Where a cut may sit (before the space).
_CUT = re.compile(r"(?<=[A-Za-z0-9]) (?=[A-Za-z])")
# Characters on each side of a cut its check pre-tokenizes.
WINDOW = 32
_BYTE_LEVEL_STEPS = frozenset({"ByteLevel", "Split", "Digits"})

_SAFE: dict[int, tuple[Any, Any]] = {}


def pieces(tokenizer: Any, text: str, size: int | None = None) -> Iterator[str]:
    """``text`` as pieces of about ``size`` characters whose ids, joined, are its ids; the text
    whole when it is short or the tokenizer cannot be cut safely."""
    size = size or LONG_TEXT_CHARS
    pre_tokenizer = _cuttable(tokenizer) if len(text) > size else None
    if pre_tokenizer is None:
        yield text
        return
    start = 0
    while len(text) - start > size:
        cut = _next_cut(pre_tokenizer, text, start + max(size // 2, 1))
        if cut is None:
            break
        yield text[start:cut]
        start = cut
    yield text[start:]


class EncodingStopped(BaseException):
    """An encoding stopped between two groups of pieces because its stop was set.

    A ``BaseException``, as ``KeyboardInterrupt``: no ``except Exception`` on the way (a fallback
    to the tokenizer's own code, a codec's proof) may take it for a failure and encode on.
    """


# The stop event the encodes of this thread obey (``stopping``, ``obey``).
_THREAD = threading.local()


@contextlib.contextmanager
def stopping(stop: threading.Event | None = None) -> Iterator[threading.Event]:
    """Within the block, this thread's encodes of long texts, and those of the threads that
    ``obey`` the event yielded, stop at their next group (``EncodingStopped``) once ``stop`` is
    set. Leaving the block by an exception (Ctrl-C's ``KeyboardInterrupt``) sets it, so a
    helper thread encoding for the block does not hold the process for minutes."""
    stop = stop if stop is not None else threading.Event()
    before = getattr(_THREAD, "stop", None)
    _THREAD.stop = stop
    try:
        yield stop
    except BaseException:
        stop.set()
        raise
    finally:
        _THREAD.stop = before


def obey(stop: threading.Event) -> None:
    """Make this thread's encodes stop once ``stop`` is set (a helper thread's initializer)."""
    _THREAD.stop = stop


def check_stop() -> None:
    """Raise ``EncodingStopped`` if the stop this thread obeys is set."""
    stop = getattr(_THREAD, "stop", None)
    if stop is not None and stop.is_set():
        raise EncodingStopped("the encoding was stopped between two groups of pieces")


def encode_grouped(
    pieces: list[str], encode_flat: Callable[[list[str]], list[list[int]]]
) -> list[list[int]]:
    """``encode_flat(pieces)``, in calls of about ``GROUP_CHARS`` characters when there are more,
    a stop (``check_stop``) looked for between two calls."""
    total = sum(map(len, pieces))
    if total <= GROUP_CHARS:
        return encode_flat(pieces)
    out: list[list[int]] = []
    start = size = 0
    for end, piece in enumerate(pieces, 1):
        size += len(piece)
        if size >= GROUP_CHARS or end == len(pieces):
            check_stop()
            out.extend(encode_flat(pieces[start:end]))
            start, size = end, 0
    return out


def _next_cut(pre_tokenizer: Any, text: str, position: int) -> int | None:
    return cut_after(pre_tokenizer, text, position)


def cutter(tokenizer: Any) -> Any:
    """What checks a cut of ``tokenizer``'s texts (its pre-tokenizer), None if they may not be
    cut as the module says."""
    return _cuttable(tokenizer)


def cut_after(pre_tokenizer: Any, text: str, position: int, limit: int | None = None) -> int | None:
    """The first place at or after ``position`` (and at most ``limit``) where ``text`` may be
    cut, checked by ``pre_tokenizer`` (``cutter``); None if there is none."""
    end = len(text) if limit is None else min(len(text), limit + 2)
    for match in _CUT.finditer(text, position, end):
        if _cut_holds(pre_tokenizer, text, match.start()):
            return match.start()
    return None


def cut_before(pre_tokenizer: Any, text: str, position: int, floor: int = 0) -> int | None:
    """The last place at or before ``position`` (and at least ``floor``) where ``text`` may be
    cut; looked for backwards in growing spans, so a near one costs a few characters' scan."""
    span = 256
    while True:
        start = max(floor, position - span)
        found = [m.start() for m in _CUT.finditer(text, start, min(len(text), position + 2))]
        for cut in reversed(found):
            if cut <= position and _cut_holds(pre_tokenizer, text, cut):
                return cut
        if start <= floor:
            return None
        span *= 4


def _cut_holds(pre_tokenizer: Any, text: str, cut: int) -> bool:
    """Whether the tokenizer's own pre-tokenizer starts a pre-token at ``cut`` when given the
    characters around it."""
    window = text[max(cut - WINDOW, 0) : cut + WINDOW]
    offset = cut - max(cut - WINDOW, 0)
    return any(start == offset for _, (start, _) in pre_tokenizer.pre_tokenize_str(window))


def _cuttable(tokenizer: Any) -> Any:
    """The tokenizer's pre-tokenizer if its texts may be cut as the module says, else None."""
    cached = _SAFE.get(id(tokenizer))
    if cached is None or cached[0] is not tokenizer:
        cached = _SAFE[id(tokenizer)] = (tokenizer, _safe_pre_tokenizer(tokenizer))
    return cached[1]


def _safe_pre_tokenizer(tokenizer: Any) -> Any:
    raw = getattr(tokenizer, "backend_tokenizer", None)
    if raw is None or raw.pre_tokenizer is None:
        return None
    # The parts read one by one, not the whole tokenizer's JSON: that spells out the vocabulary
    # (0.3-1.4 s a tokenizer to write and parse).
    try:
        normalizer = raw.normalizer
        spec = json.loads(normalizer.__getstate__()) if normalizer is not None else {}
        steps = _steps(json.loads(raw.pre_tokenizer.__getstate__()))
        added = list(raw.get_added_tokens_decoder().values())
    except Exception:  # another tokenizers layout: encode whole
        return None
    if not all(step.get("type") == "NFC" for step in _normalizers(spec)):
        return None
    if not steps or not all(step.get("type") in _BYTE_LEVEL_STEPS for step in steps):
        return None
    byte_levels = [step for step in steps if step.get("type") == "ByteLevel"]
    if not byte_levels or any(step.get("add_prefix_space") for step in byte_levels):
        return None
    for token in added:
        if any(ch.isspace() for ch in token.content) or token.lstrip or token.rstrip:
            return None
    return raw.pre_tokenizer


def _normalizers(normalizer: dict) -> list[dict]:
    if normalizer.get("type") == "Sequence":
        return [step for inner in normalizer.get("normalizers", []) for step in _normalizers(inner)]
    return [normalizer] if normalizer else []


def _steps(pre_tokenizer: dict) -> list[dict]:
    if pre_tokenizer.get("type") == "Sequence":
        return [step for inner in pre_tokenizer.get("pretokenizers", []) for step in _steps(inner)]
    return [pre_tokenizer] if pre_tokenizer else []


# -- a long text's count from a known text's ---------------------------------------------------

# How far the common middle of two texts may have moved between them (characters), and the
# largest piece ``changed_pieces`` hands back to be encoded.
MAX_SHIFT = 256
# Characters compared at once when two long texts are compared (one slice of this size at a time).
_COMPARE_CHARS = 1 << 20


def changed_pieces(
    pre_tokenizer: Any, base: str, text: str, start: int = 0, end: int | None = None
) -> tuple[str, ...] | None:
    """What ``text`` changes of ``base`` within ``base[start:end]``, as (base's piece, text's
    piece) pairs flattened, each no longer than ``LONG_TEXT_CHARS``; None if no such pieces are
    found.

    ``text`` must begin as ``base[:start]`` and end as ``base[end:]``, and both be places ids do
    not cross (special tokens' edges, or the texts' ends). Then the count of ``text`` is the
    count of ``base``, less the ids of base's pieces, plus those of text's: each piece lies
    between places the texts may be cut (``cut_after``) with the same characters around them in
    both texts, and what lies between the pieces is the same in both (compared, never assumed).
    Two pieces when the texts differ near both ends of a long middle (edge whitespace restored
    around a long answer), else one. ``pre_tokenizer`` is ``cutter``'s.
    """
    end = len(base) if end is None else end
    tail = len(text) - len(base)
    lo = min(start + common_prefix(base, text, start), end)
    hi = max(end - common_suffix(base, text, len(base) - end), lo, lo - tail)
    if hi > end:
        return None
    # Pieces begin and end at cuts whose windows hold no change, or at the span's own edges.
    first = cut_before(pre_tokenizer, base, lo - WINDOW, start + WINDOW)
    last = cut_after(pre_tokenizer, base, hi + WINDOW, end - WINDOW)
    first = start if first is None else first
    last = end if last is None else last
    if max(last - first, last + tail - first) <= LONG_TEXT_CHARS:
        return base[first:last], text[first : last + tail]
    middle = _common_middle(pre_tokenizer, base, text, lo, hi)
    if middle is None:
        return None
    cut, other_cut, shift = middle
    if (
        not first <= cut < other_cut <= last
        or cut + shift < first
        or other_cut + shift > last + tail
    ):
        return None
    pieces = (
        base[first:cut],
        text[first : cut + shift],
        base[other_cut:last],
        text[other_cut + shift : last + tail],
    )
    return pieces if max(map(len, pieces)) <= LONG_TEXT_CHARS else None


def _common_middle(
    pre_tokenizer: Any, base: str, text: str, lo: int, hi: int
) -> tuple[int, int, int] | None:
    """(cut, other cut, shift): ``base[cut:other_cut]`` is ``text[cut + shift:other_cut +
    shift]``, and so are the ``WINDOW`` characters around either cut; the cuts lie after ``lo``
    and before ``hi`` by more than ``MAX_SHIFT``. None if there are none such."""
    cut = cut_after(pre_tokenizer, base, lo + WINDOW + MAX_SHIFT, hi - WINDOW - MAX_SHIFT)
    other = cut_before(pre_tokenizer, base, hi - WINDOW - MAX_SHIFT, lo + WINDOW + MAX_SHIFT)
    if cut is None or other is None or cut >= other:
        return None
    probe = base[cut - WINDOW : cut + WINDOW]
    reach = MAX_SHIFT + abs(len(text) - len(base))
    low, high = max(0, cut - WINDOW - reach), cut + WINDOW + reach
    found = text.find(probe, low, high)
    for _ in range(8):  # periodic text: several places match the probe; any that holds will do
        if found < 0:
            return None
        shift = found - (cut - WINDOW)
        if same_text(base, cut - WINDOW, other + WINDOW, text, found):
            return cut, other, shift
        found = text.find(probe, found + 1, high)
    return None


def same_text(base: str, start: int, end: int, text: str, at: int) -> bool:
    """Whether ``base[start:end]`` is ``text[at:at + end - start]``, compared a slice at a time."""
    if at < 0 or at + end - start > len(text):
        return False
    for position in range(start, end, _COMPARE_CHARS):
        stop = min(end, position + _COMPARE_CHARS)
        if not text.startswith(base[position:stop], at + position - start):
            return False
    return True


def common_prefix(a: str, b: str, start: int = 0) -> int:
    """How many characters from ``start`` on ``a`` and ``b`` have in common, compared in
    slices that grow (a difference near ``start`` costs a few characters' comparison)."""
    size = min(len(a), len(b))
    position, step = start, 64
    while position < size:
        stop = min(size, position + step)
        if a.startswith(b[position:stop], position):
            position, step = stop, min(step * 2, _COMPARE_CHARS)
            continue
        while stop - position > 16:  # the difference is in this slice: halve it
            middle = (position + stop) // 2
            if a.startswith(b[position:middle], position):
                position = middle
            else:
                stop = middle
        while a[position] == b[position]:
            position += 1
        break
    return max(position, start) - start if start <= size else 0


def common_suffix(a: str, b: str, start: int = 0) -> int:
    """How many characters ``a`` and ``b`` have in common at their ends, from ``start``
    characters before their ends on."""
    size = min(len(a), len(b))
    position, step = start, 64
    while position < size:
        stop = min(size, position + step)
        if a.endswith(b[len(b) - stop : len(b) - position], 0, len(a) - position):
            position, step = stop, min(step * 2, _COMPARE_CHARS)
            continue
        while stop - position > 16:
            middle = (position + stop) // 2
            if a.endswith(b[len(b) - middle : len(b) - position], 0, len(a) - position):
                position = middle
            else:
                stop = middle
        while a[len(a) - 1 - position] == b[len(b) - 1 - position]:
            position += 1
        break
    return max(position, start) - start if start <= size else 0

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
    for match in _CUT.finditer(text, position):
        cut = match.start()
        window = text[max(cut - WINDOW, 0) : cut + WINDOW]
        offset = cut - max(cut - WINDOW, 0)
        if any(start == offset for _, (start, _) in pre_tokenizer.pre_tokenize_str(window)):
            return cut
    return None


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
    try:
        spec = json.loads(raw.to_str())
    except Exception:  # another tokenizers layout: encode whole
        return None
    if not all(step.get("type") == "NFC" for step in _normalizers(spec.get("normalizer") or {})):
        return None
    steps = _steps(spec.get("pre_tokenizer") or {})
    if not steps or not all(step.get("type") in _BYTE_LEVEL_STEPS for step in steps):
        return None
    byte_levels = [step for step in steps if step.get("type") == "ByteLevel"]
    if not byte_levels or any(step.get("add_prefix_space") for step in byte_levels):
        return None
    for added in spec.get("added_tokens") or []:
        content = added.get("content", "")
        if any(ch.isspace() for ch in content) or added.get("lstrip") or added.get("rstrip"):
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

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
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

LONG_TEXT_CHARS = 1 << 18
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

"""Masking what looks like a secret in any text a user sees: error sentences, log lines.

A key given in the wrong place (a mistyped flag, a variable name, a config value) must never be
printed back; ``redact`` replaces key-shaped text with ``***`` wherever it appears.
"""

from __future__ import annotations

import math
import re
from collections import Counter

MASK = "***"
# Key shapes with a known prefix: OpenAI/OpenRouter/Anthropic ``sk-``, Hugging Face ``hf_``,
# GitHub ``ghp_``/``github_pat_``, Google ``AIza``, Slack ``xox?-``, AWS ``AKIA``; and the value of
# an ``Authorization: Bearer`` header.
_PREFIXED = re.compile(
    r"(?i)(?P<bearer>\bbearer\s+)[^\s\"',;]+"
    r"|\bsk-[A-Za-z0-9_-]{6,}"
    r"|\bhf_[A-Za-z0-9]{10,}"
    r"|\b(?:gh[pousr]_|github_pat_)[A-Za-z0-9_]{10,}"
    r"|\bAIza[0-9A-Za-z_-]{20,}"
    r"|\bxox[abposr]-[A-Za-z0-9-]{10,}"
    r"|\bAKIA[0-9A-Z]{12,}"
)
# Long runs of token characters: masked when they look random (see ``looks_random``).
_TOKEN = re.compile(r"[A-Za-z0-9+/=_-]{32,}")
MIN_ENTROPY = 3.8  # bits per character; random base62 of 32+ characters has about 4.5 to 5


def looks_random(token: str) -> bool:
    """Whether ``token`` (32+ characters) reads as a generated secret, not a name or a hash.

    Lowercase hex (turn keys, digests) and words joined by ``-``/``_`` (file and model names)
    stay readable; mixed-case letters with digits at high entropy do not.
    """
    if re.fullmatch(r"[0-9a-f]+", token) or re.fullmatch(r"[0-9A-F]+", token):
        return False
    classes = sum(bool(re.search(pattern, token)) for pattern in (r"[a-z]", r"[A-Z]", r"[0-9]"))
    if classes < 3:
        return False
    # Names are words: long alphabetic runs between separators; a key has short ones.
    words = [w for w in re.split(r"[-_./+=]", token) if w]
    if words and max(len(w) for w in words) < 20 and len(words) >= 3:
        return False
    counts = Counter(token)
    entropy = -sum(n / len(token) * math.log2(n / len(token)) for n in counts.values())
    return entropy >= MIN_ENTROPY


def redact(text: str, secrets: set[str] | frozenset[str] = frozenset()) -> str:
    """``text`` with every value in ``secrets`` and everything key-shaped replaced by ``***``."""
    for secret in secrets:
        if secret and secret in text:
            text = text.replace(secret, MASK)
    text = _PREFIXED.sub(lambda m: (m.group("bearer") or "") + MASK, text)
    return _TOKEN.sub(lambda m: MASK if looks_random(m.group(0)) else m.group(0), text)

"""What may be printed: secrets masked, control characters defused, stray values described,
dollar amounts shown alike everywhere.

A key given in the wrong place (a mistyped flag, a variable name, a config value) must never be
printed back; ``redact`` replaces key-shaped text with ``***`` wherever it appears, and
``described`` names a value that could be a key by its length only; ``key_shaped`` and
``url_credentials`` say what a setting is refused for. Text a server sent (a
finish reason, a provider name, an error) goes through ``printable`` before a terminal sees it.
"""

from __future__ import annotations

import difflib
import math
import os
import re
from collections import Counter
from collections.abc import Sequence
from urllib.parse import parse_qsl, urlsplit

import orjson

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


def key_shaped(text: str) -> bool:
    """Whether ``text`` holds a key as ``redact`` sees one: what is masked when printed is what a
    setting is refused for, so no value that could be a key is ever written to a run."""
    return redact(text) != text


# Query parameters that carry a credential (``?key=...``, ``&api_key=...``, ``?token=...``).
URL_SECRET_PARAMETERS = frozenset(
    {"key", "api_key", "apikey", "api-key", "token", "access_token", "auth", "password", "secret"}
)


def url_credentials(text: str) -> str | None:
    """What credential the URL ``text`` carries, named without its value ("a user name or
    password before its host", "the token= query parameter"); None for a URL without one, or for
    text that is no URL."""
    if "://" not in text:
        return None
    try:
        parts = urlsplit(text)
    except ValueError:  # a malformed IPv6 host: no URL to find credentials in
        return None
    if "@" in parts.netloc:
        return "a user name or password before its host"
    for name, _ in parse_qsl(parts.query, keep_blank_values=True):
        if name.lower() in URL_SECRET_PARAMETERS:
            return f"the {name.lower()}= query parameter"
    return None


def redact(text: str, secrets: set[str] | frozenset[str] = frozenset()) -> str:
    """``text`` with every value in ``secrets`` and everything key-shaped replaced by ``***``."""
    for secret in secrets:
        if secret and secret in text:
            text = text.replace(secret, MASK)
    text = _PREFIXED.sub(lambda m: (m.group("bearer") or "") + MASK, text)
    return _TOKEN.sub(lambda m: MASK if looks_random(m.group(0)) else m.group(0), text)


# What a terminal would act on rather than show: C0 controls but newline and tab, DEL, the C1
# controls (CSI among them) and the bidirectional overrides that reorder what a line shows.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_CONTROL_OR_NEWLINE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def printable(text: object, newlines: bool = False, json: bool = False) -> str:
    """``text`` from a server or a file, safe to print: every control character (an ANSI escape's
    ESC, a carriage return, a bell) is shown as its escape (``\\x1b``), so nothing it holds can
    move the cursor, recolour or rewrite a line. Newlines are escaped too unless ``newlines``.

    The one escaping of what draftgen prints or writes for people: log lines, messages, the
    report's page (every value it shows) and, with ``json``, JSON text (``--json``, report.json,
    JSON log lines), whose strings then hold ``\\u001b`` instead: the same data once parsed.
    """
    pattern = _CONTROL if newlines or json else _CONTROL_OR_NEWLINE
    return pattern.sub(_json_escape if json else _escape, str(text))


def printable_json(value: object, indent: bool = False) -> str:
    """``value`` as JSON (orjson's types; others as ``str``) with every control character of
    ``printable`` escaped: orjson leaves DEL, the C1 controls and the bidirectional overrides
    raw."""
    option = orjson.OPT_INDENT_2 if indent else 0
    return printable(orjson.dumps(value, default=str, option=option).decode(), json=True)


def _escape(match: re.Match) -> str:
    code = ord(match.group(0))
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _json_escape(match: re.Match) -> str:
    return f"\\u{ord(match.group(0)):04x}"


NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def described(value: object, choices: Sequence[str] = ()) -> str:
    """A value the user gave in the wrong place, named without showing it when it could be a
    key: a number, a short word or an existing path as itself, anything else by kind and length
    ("a 40-character string"). A value one slip away from one of ``choices`` is a mistyped choice,
    not a key: it is shown, with the choice it was likely meant to be."""
    if isinstance(value, str) and choices:
        close = difflib.get_close_matches(value, [str(c) for c in choices], n=1, cutoff=0.75)
        if close:
            return f"{printable(value)!r} (did you mean {close[0]!r}?)"
    if isinstance(value, (bool, int, float)) or value is None:
        return repr(value)
    if not isinstance(value, str):
        return f"a {type(value).__name__}"
    # No key is under 8 characters or holds a space; a number or a path that exists is no key;
    # a key-shaped one is shown masked (``***``), as everywhere else.
    masked = redact(value)
    shown = repr(printable(masked))
    if masked != value or len(value) < 8 or NUMBER.fullmatch(value):
        return shown
    if any(c.isspace() for c in value.strip()):
        return shown
    try:
        if os.path.exists(value):
            return shown
    except (OSError, ValueError):
        pass
    return f"a {len(value)}-character string (not shown: it may be a key)"


def usd_decimals(amount: float) -> int:
    """Decimals a dollar amount is shown with: cents (a run's cost: $12.35), or four significant
    digits for less than a cent (a sample's price: $0.0001234, never $0.00), up to the 1e-9 the
    store keeps."""
    if amount == 0 or abs(amount) >= 0.01:
        return 2
    decimals = min(9, 3 - math.floor(math.log10(abs(amount))))
    return 2 if abs(round(amount, decimals)) >= 0.01 else decimals  # $0.0099999 is $0.01


def usd(amount: float | None) -> str:
    """A dollar amount as every command prints it; "-" for none (nothing verified to price)."""
    return "-" if amount is None else f"${amount:.{usd_decimals(amount)}f}"

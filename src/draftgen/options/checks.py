"""What a setting's value must be: the checks and parsers a flag, a TOML key and a Python caller
share, each failing with the CLI's one sentence (``OptionError``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import PurePath
from typing import TYPE_CHECKING, Any

from draftgen.errors import DraftgenError
from draftgen.redact import NUMBER, described, key_shaped, url_credentials

if TYPE_CHECKING:
    from draftgen.inputs.shard import Shard


class OptionError(DraftgenError, ValueError):
    """A setting whose value a run cannot take; the message is the CLI's sentence for it."""


KEYS_GO_IN_THE_ENVIRONMENT = (
    "API keys are never taken on the command line, where other users can read them in the "
    "process list: export the key in an environment variable and name that variable with "
    "--api-key-env (default OPENROUTER_API_KEY)"
)


# -- checks of a value: the same sentence for a flag, a TOML key and a Python caller -------------


@dataclass(frozen=True)
class Check:
    """What a value must be (``ok``) and what is said of one that is not (``phrase``)."""

    ok: Callable[[Any], bool]
    phrase: str  # follows the value: "0 is not a positive integer"


POSITIVE = Check(lambda v: v >= 1, "is not a positive integer")
NON_NEGATIVE = Check(lambda v: v >= 0, "is not a whole number of 0 or more")
DOLLARS = Check(lambda v: v >= 0, "is not an amount of dollars of 0 or more")
TEMPERATURE = Check(lambda v: 0 <= v <= 2, "is not within 0..2 (OpenRouter's range)")
UNIT = Check(lambda v: 0 < v <= 1, "is not within 0 < P <= 1")
SHARE = Check(lambda v: 0 <= v <= 1, "is not a share within 0..1")


# -- secrets: no value that could be a key is taken, so none is ever written to a run -----------

NO_KEY_WRITTEN = "and draftgen writes no key into a run"


def secret_problem(named: str, value: object, key_variable: str, key: str | None) -> str | None:
    """Why ``value`` (the setting ``named``, with every string inside it) cannot be taken: it is
    shaped like a key, holds ``key`` (the value of ``key_variable``) or is a URL carrying
    credentials. None if it is none of these; the sentence never shows the value."""
    for text in _texts(value):
        if key and (text == key or (len(key) >= MIN_KEY_INSIDE and key in text)):
            return (
                f"{named} holds the API key itself (the value of {key_variable}, not shown), "
                f"{NO_KEY_WRITTEN}; check what was given there"
            )
        carried = url_credentials(text)
        if carried is not None:
            return (
                f"{named} is a URL carrying credentials ({carried}, not shown), {NO_KEY_WRITTEN}; "
                "give the URL without them and the key in the environment variable --api-key-env "
                "names"
            )
        if key_shaped(text):
            return (
                f"{named} holds a value shaped like an API key (not shown), {NO_KEY_WRITTEN}; "
                "check what was given there, and keep the key in the environment variable "
                "--api-key-env names"
            )
    return None


# A key this long is looked for inside values too (a path or URL holding it); a shorter one only
# as a whole value, where "k" would otherwise be found in almost anything.
MIN_KEY_INSIDE = 12


def _texts(value: object) -> Iterator[str]:
    """Every string a setting's value holds: itself, a path, the items of a list and the keys and
    values of a table, and the fields of a value such as a dataset or an endpoint."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, (str, PurePath)):
            yield str(item)
        elif isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            pending.extend(item)
        elif dataclasses.is_dataclass(item) and not isinstance(item, type):
            pending.extend(getattr(item, f.name) for f in dataclasses.fields(item))


def _env_name(text: str) -> str:
    """``--api-key-env``: a variable's name. A key given here instead is refused unshown."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", text):
        raise OptionError(
            "this takes the name of an environment variable (like OPENROUTER_API_KEY), and what "
            f"was given is not one (not shown: it may be a key); {KEYS_GO_IN_THE_ENVIRONMENT}"
        )
    return text


def _shard(text: str) -> Shard:
    from draftgen.inputs.shard import ShardError, parse_shard

    try:
        return parse_shard(text)
    except ShardError as exc:
        raise OptionError(str(exc)) from None


def _json_object(text: str) -> dict:
    """``--chat-template-kwargs``: a JSON object of template variables."""
    import json

    try:
        value = json.loads(text)
    except ValueError:
        raise OptionError(
            "is not valid JSON; give an object such as '{\"enable_thinking\": false}'"
        ) from None
    if not isinstance(value, dict):
        raise OptionError("must be a JSON object of template variables")
    return value


def _proofs(text: str) -> tuple[str, ...]:
    """``export --proof``: the proofs a user accepts, comma-separated (``records.PROOFS``)."""
    from draftgen.records import PROOFS

    names = tuple(dict.fromkeys(name.strip() for name in text.split(",") if name.strip()))
    unknown = [name for name in names if name not in PROOFS]
    if unknown or not names:
        shown = ", ".join(described(name) for name in unknown) or "nothing"
        raise OptionError(
            f"takes {', '.join(PROOFS)}, comma-separated (e.g. ids,logprobs), not {shown}"
        )
    return names


def checked_text(text: str, kind: type, check: Check) -> int | float:
    """``text`` as an int or float that passes ``check``; OptionError with the CLI's sentence."""
    if kind is int:
        try:
            value = int(text)
        except ValueError:
            raise OptionError(f"{_number(text)} {check.phrase}") from None
        if not check.ok(value):
            raise OptionError(f"{_number(text)} {check.phrase}")
        return value
    try:
        number = float(text)
    except ValueError:
        raise OptionError(f"{described(text)} is not a number") from None
    if not check.ok(number):
        raise OptionError(f"{text} {check.phrase}")
    return number


def _number(text: str) -> str:
    """A flag's value in its error: a number as written, anything else ``described``."""
    return text if NUMBER.fullmatch(text) else described(text)


def kind_of(value: object) -> str:
    return {
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "a table",
        type(None): "nothing",
    }.get(type(value), f"a {type(value).__name__}")

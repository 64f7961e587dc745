"""What a setting's value must be: the checks and parsers a flag, a TOML key and a Python caller
share, each failing with the CLI's one sentence (``OptionError``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import PurePath
from typing import TYPE_CHECKING

# The checks a declaration itself uses sit with it (draftgen.declaration), below the simulator's
# settings; importable from here as before.
from draftgen.declaration import (  # noqa: F401
    KEYS_GO_IN_THE_ENVIRONMENT,
    Check,
    OptionError,
    _env_name,
    _number,
    checked_text,
    kind_of,
)
from draftgen.redact import described, key_shaped, url_credentials

if TYPE_CHECKING:
    from draftgen.inputs.shard import Shard


# -- checks of a value: the same sentence for a flag, a TOML key and a Python caller -------------


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

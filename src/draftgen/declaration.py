"""A setting's declaration (``Setting``: type, default, choices, help, flag, TOML key) and the one
conversion of its draftgen.toml values, for the run's options and the simulator's settings alike.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from draftgen.errors import DraftgenError
from draftgen.redact import NUMBER, described


class OptionError(DraftgenError, ValueError):
    """A setting whose value a run cannot take; the message is the CLI's sentence for it."""


KEYS_GO_IN_THE_ENVIRONMENT = (
    "API keys are never taken on the command line, where other users can read them in the "
    "process list: export the key in an environment variable and name that variable with "
    "--api-key-env (default OPENROUTER_API_KEY)"
)


@dataclass(frozen=True)
class Check:
    """What a value must be (``ok``) and what is said of one that is not (``phrase``)."""

    ok: Callable[[Any], bool]
    phrase: str  # follows the value: "0 is not a positive integer"


def _env_name(text: str) -> str:
    """``--api-key-env``: a variable's name. A key given here instead is refused unshown."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", text):
        raise OptionError(
            "this takes the name of an environment variable (like OPENROUTER_API_KEY), and what "
            f"was given is not one (not shown: it may be a key); {KEYS_GO_IN_THE_ENVIRONMENT}"
        )
    return text


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


# -- the declaration -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Setting:
    """One setting: everything the CLI, draftgen.toml, the docs and the checks know of it."""

    help: str  # "{default}" is replaced by the default as --help shows it
    group: str  # a key of GROUPS
    kind: type = str  # what a value is: str, int, float, bool, Path, dict (given as JSON), object
    name: str = ""  # the RunOptions field (filled in from the field)
    key: str = ""  # the TOML key and the parser's dest (default: name)
    flag: str | None = ""  # "--max-tokens" (default: from key); None: no flag (TOML or API)
    short: str | None = None  # "-o"
    metavar: str | None = None
    choices: Callable[[], Sequence[str]] | None = None  # the registry's names
    check: Check | None = None
    parse: Callable[[str], Any] | None = None  # text to value, OptionError if it cannot be
    many: bool = False  # a repeatable flag, a list in TOML (--input)
    repeatable: bool = False  # a repeatable flag that stays one string in TOML (--base-url)
    negatable: bool = False  # --stream / --no-stream
    toml: bool = True  # a key of draftgen.toml (top-level, or in ``table``)
    table: str | None = None  # the TOML table holding the key ([estimate])
    renamed: tuple[str, str] | None = None  # (old flag, what the new one means)
    old_key: str | None = None  # a TOML key that still means this setting
    required: tuple[str, ...] = ()  # the commands that cannot go without it
    commands: tuple[str, ...] = ("run", "estimate")
    # How a repeatable flag's values gather: "one" value, NAME=RATE "rates" (a table in TOML, a
    # dict) or NAME[,NAME] "kinds" (a list in TOML, a tuple of names): the simulator's faults,
    # quirks and hostile answers.
    shape: str = "one"
    default: Any = None  # filled in from the field

    def __post_init__(self) -> None:
        key = self.key or self.name
        object.__setattr__(self, "key", key)
        if self.flag == "" and key:
            object.__setattr__(self, "flag", "--" + key.replace("_", "-"))

    @property
    def spelled(self) -> str:
        """How messages name the setting: its flag, else its key."""
        return self.flag or self.key

    @property
    def named(self) -> str:
        """How a refusal names the setting wherever it was given: its flag and its key in
        draftgen.toml ("--model (model in draftgen.toml)")."""
        if self.toml:
            key = f"{self.table}.{self.key}" if self.table else self.key
            return f"{self.flag} ({key} in draftgen.toml)" if self.flag else key
        if self.flag is None and self.help.startswith("["):  # a table the config reader builds
            return f"RunOptions.{self.name} ({self.help} in draftgen.toml)"
        return self.spelled

    def shown_default(self) -> str:
        """The default as ``--help`` says it: 300.0 as 300, 0.5 as 0.5."""
        value = self.default
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return f"{value:g}"
        return str(value)

    def help_text(self) -> str:
        """The help, with its default and (where it says ``{choices}``) its choices."""
        text = self.help.replace("{default}", self.shown_default())
        if self.choices is not None:
            text = text.replace("{choices}", ", ".join(self.choices()))
        return text

    def from_text(self, text: str) -> Any:
        """A flag's (or a TOML value's) text as this setting's value, checked; OptionError with
        the CLI's sentence if it is not one."""
        if self.parse is not None:
            return self.parse(text)
        if self.check is not None:
            return checked_text(text, self.kind, self.check)
        if self.kind is Path and self.many:
            return text  # a list of paths stays strings, as given
        return self.kind(text) if self.kind in (int, float, Path) else text

    def problem(self, value: Any) -> str | None:
        """What is wrong with ``value`` given from Python, as the CLI says it; None if nothing."""
        if value is None:  # not given: a setting without a default may be left so
            return None if self.default is None else self._kind_problem(value)
        if self.required and isinstance(value, str) and not value.strip():
            # An empty model would be sent with every request and every turn refused for it.
            return f"{self.named} is empty; give its value, a run cannot go without it"
        if self.many:
            if not isinstance(value, list):
                return f"{self.spelled} must be a list, not {kind_of(value)}"
            return next(filter(None, (self.problem_of_one(v) for v in value)), None)
        return self.problem_of_one(value)

    def problem_of_one(self, value: Any) -> str | None:
        kind_problem = self._kind_problem(value)
        if kind_problem:
            return kind_problem
        taken = self.choices
        if taken is not None and value not in taken():
            names = ", ".join(taken())
            return f"{self.spelled} must be one of {names}, not {described(value, taken())}"
        if self.check is not None and not self.check.ok(value):
            return f"{self.spelled} {value} {self.check.phrase}"
        if self.parse is _env_name:
            try:
                _env_name(value)
            except OptionError as exc:
                return f"{self.spelled}: {exc}"
        return None

    def _kind_problem(self, value: Any) -> str | None:
        kinds = {
            bool: ((bool,), "true or false"),
            int: ((int,), "an integer"),
            float: ((int, float), "a number"),
            str: ((str,), "a string"),
            Path: ((str, Path), "a path"),
            dict: ((dict,), "a dict"),
        }
        if self.kind not in kinds or (self.repeatable and isinstance(value, list)):
            return None
        types, expected = kinds[self.kind]
        if isinstance(value, types) and (self.kind is bool or not isinstance(value, bool)):
            return None
        shown = "" if value is None else f" {described(value)}"
        return f"{self.spelled} must be {expected}, not {kind_of(value)}{shown}"


SETTING = "draftgen_setting"  # the key of a field's metadata that holds its Setting


def setting(default: Any = dataclasses.MISSING, **declared: Any) -> Any:
    """A dataclass field declared as a setting (``Setting``'s fields as keywords); a ``default``
    that is a type (``dict``) makes each instance's own."""
    made = {"default_factory": default} if isinstance(default, type) else {"default": default}
    return field(**made, metadata={SETTING: Setting(**declared)})


def settings_of(cls: type) -> tuple[Setting, ...]:
    """The settings ``cls`` (RunOptions or a subclass, SimConfig) declares, in field order, each
    with its field's name and default."""
    found = []
    for f in dataclasses.fields(cls):
        declared = f.metadata.get(SETTING)
        if declared is not None:
            default = None if f.default is dataclasses.MISSING else f.default
            if f.default_factory is not dataclasses.MISSING:
                default = f.default_factory()
            found.append(dataclasses.replace(declared, name=f.name, default=default))
    return tuple(found)


# -- a value given in draftgen.toml (or a repeatable flag's values) ------------------------------


def toml_value(declared: Setting, key: str, value: Any) -> Any:
    """``value`` of ``declared`` from draftgen.toml (``key`` as the file names it), or the values
    a repeatable flag gathered, converted and checked as its flag's text is; OptionError naming
    ``key`` when it is not one. Relative paths stay relative: the file's reader places them."""
    if declared.shape == "rates":
        return _rates(key, value)
    if declared.shape == "kinds":
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise OptionError(f"{key} takes names, e.g. {declared.metavar}")
        return tuple(k.strip() for kinds in value for k in kinds.split(",") if k.strip())
    if declared.kind is bool:
        if not isinstance(value, bool):
            raise OptionError(f"{key} must be true or false, not {kind_of(value)}")
        return value
    if declared.many:
        if not isinstance(value, list):
            example = '"prompts.jsonl"' if declared.key == "input" else '"..."'
            raise OptionError(
                f"{key} must be a list, e.g. {key} = [{example}], not {kind_of(value)}"
            )
        return [_scalar(f"{key}[{i}]", declared, v) for i, v in enumerate(value)]
    return _scalar(key, declared, value)


def _scalar(key: str, declared: Setting, value: Any) -> Any:
    kind = declared.kind if declared.kind in (int, float) else str
    if kind is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif kind is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    else:
        ok = isinstance(value, str)
    if not ok:
        expected = {int: "an integer", float: "a number"}.get(kind, "a string")
        raise OptionError(f"{key} must be {expected}, not {_shown(value)}")
    try:
        converted = declared.from_text(str(value))  # the flag's own conversion and checks
    except (OptionError, ValueError) as exc:
        raise OptionError(f"{key} = {described(value)} is refused: {exc}") from None
    if declared.choices is not None and converted not in declared.choices():
        choices = ", ".join(str(c) for c in declared.choices())
        shown = described(value, [str(c) for c in declared.choices()])
        raise OptionError(f"{key} must be one of {choices}, not {shown}")
    return converted


def _shown(value: Any) -> str:
    """A mistyped value as an error names it: never verbatim when it could be a key."""
    shown = described(value)
    return shown if shown.startswith("a ") else f"{kind_of(value)} {shown}"


def _rates(key: str, value: Any) -> dict[str, float]:
    """NAME=RATE pairs (a flag's, or a list of them) or a table of rates, as {name: rate}."""
    if isinstance(value, dict):
        pairs = [f"{name}={rate}" for name, rate in value.items()]
    elif isinstance(value, list):
        pairs = [str(pair) for pair in value]
    else:
        raise OptionError(f"{key} takes NAME=RATE pairs, e.g. drift=0.05")
    rates = {}
    for pair in pairs:
        name, _, rate = pair.partition("=")
        try:
            rates[name] = float(rate)
        except ValueError:
            raise OptionError(f"{key} {pair!r} is not NAME=RATE, e.g. drift=0.05") from None
    return rates

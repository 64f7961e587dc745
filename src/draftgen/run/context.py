"""A run's context: what its options resolve to, resolved once and passed on as values (the
suite and its row count, the backend, the generation settings, the tokenizer and profile).
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from draftgen.backends import Backend, SettingsError, UnknownBackendError, get_backend
from draftgen.generate.errors import RunError
from draftgen.inputs.mix import MixError, Suite, count_suite
from draftgen.profiles import ModelProfile
from draftgen.records import GenerationSettings
from draftgen.tokens.rendering import resolve_profile
from draftgen.tokens.tokenizer import load_tokenizer

if TYPE_CHECKING:
    from draftgen.options import RunOptions

# What a reasoning answer runs to when the run sets no --max-tokens (about 4 characters a token):
# how much a run will encode, which decides how it is reconstructed.
TYPICAL_ANSWER_TOKENS = 2000


@dataclass
class RunContext:
    """The run of ``options``, checked: built by ``RunContext.build`` before anything is
    recorded, then handed to the probe, the engine and the store's checks (``generate.contract.
    GenerationContext`` is what an engine reads of it)."""

    options: RunOptions
    suite: Suite
    total_rows: int  # rows the suite yields, counted once
    backend: Backend
    settings: GenerationSettings

    @classmethod
    def build(cls, options: RunOptions) -> RunContext:
        """Check the options as a run does before it touches the run directory: the inputs, the
        settings (what the backend takes), batch mode's limits; count the rows."""
        options.check()  # every setting as the CLI checks it (OptionError with its sentence)
        for path in options.inputs if not options.datasets else ():
            if not os.path.isfile(path):
                raise RunError(f"--input {path} does not exist or is not a file")
        suite = options.suite()
        try:
            suite.check()
        except MixError as exc:
            raise RunError(str(exc)) from None
        settings, backend = checked_settings(options)
        if options.batch:  # refused before anything is recorded in the run directory
            from draftgen.generate.batch.generate import check_batch_options

            check_batch_options(options, settings, backend)
        return cls(options, suite, count_rows(suite), backend, settings)

    @property
    def expected_chars(self) -> int:
        """About how many characters the run's answers hold: what reconstruction will encode."""
        options = self.options
        answer_chars = (options.max_tokens or TYPICAL_ANSWER_TOKENS) * 4
        return self.total_rows * options.samples * answer_chars

    # The tokenizer is loaded on first use, not by ``build``: a big run's reconstruction process,
    # started just after ``build``, loads its own copy meanwhile on another core.
    @functools.cached_property
    def tokenizer(self) -> Any:
        return load_tokenizer(self.options.tokenizer)

    @functools.cached_property
    def profile(self) -> ModelProfile:
        """``options.profile``, or the one the tokenizer shows."""
        return resolve_profile(self.tokenizer, self.options.profile)


def count_rows(inputs: list[str] | Suite) -> int:
    """Rows the run reads (conversations and rejected rows): what the suite's mix yields."""
    suite = inputs if isinstance(inputs, Suite) else Suite.from_inputs(inputs)
    try:
        return count_suite(suite)
    except MixError as exc:
        raise RunError(str(exc)) from None


def resolve_backend(name: str) -> Backend:
    try:
        return get_backend(name)
    except UnknownBackendError as exc:
        raise RunError(str(exc)) from None


def checked_settings(options: RunOptions) -> tuple[GenerationSettings, Backend]:
    """What each request asks of the model, checked (a resume must ask the same), and the
    backend that sends it."""
    if options.reasoning_effort is not None and options.reasoning_max_tokens is not None:
        raise RunError(
            "--reasoning-effort and --reasoning-max-tokens exclude each other (OpenRouter takes "
            "one of them); drop one"
        )
    backend = resolve_backend(options.backend)
    try:
        # The backend says which of its request fields the run's options fill (reasoning,
        # provider routing, template variables) and refuses those its server does not take.
        fields = backend.settings(options)
    except SettingsError as exc:
        raise RunError(str(exc)) from None
    if options.samples < 1:
        raise RunError(f"--completions-per-turn {options.samples} must be at least 1")
    settings = GenerationSettings(
        model=options.model,
        max_tokens=options.max_tokens,
        temperature=options.temperature,
        top_p=options.top_p,
        seed=options.seed,
        **fields,
    )
    return settings, backend


def generation_settings(options: RunOptions) -> GenerationSettings:
    """What each request asks of the model, checked; a resume must ask the same."""
    return checked_settings(options)[0]

"""The clock a chat template reads (``strftime_now``) while draftgen renders: the recorded instant.

A template that stamps today's date renders another prompt tomorrow; draftgen records the instant
of each rendering and makes the template read that one, so a rendering can be repeated exactly.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
from collections.abc import Iterator
from typing import Any

# The instant a template's ``strftime_now`` reads while draftgen renders (per thread and task).
_CLOCK: contextvars.ContextVar[dt.datetime | None] = contextvars.ContextVar(
    "draftgen_template_clock", default=None
)


@contextlib.contextmanager
def template_clock(tokenizer: Any, tools: list[dict] | None, now: dt.datetime) -> Iterator[None]:
    """Inside: the tokenizer's template (for these tools) reads ``now`` as the time."""
    _install_clock(tokenizer, tools)
    token = _CLOCK.set(now)
    try:
        yield
    finally:
        _CLOCK.reset(token)


def _template_strftime(format: str) -> str:
    """``strftime_now`` for templates: the recorded instant while draftgen renders, else the
    local time, as transformers' own does."""
    instant = _CLOCK.get()
    return (instant or dt.datetime.now()).strftime(format)


def _install_clock(tokenizer: Any, tools: list[dict] | None) -> None:
    """Point the compiled template's ``strftime_now`` at the recorded instant.

    transformers turns template variables into plain data, so a callable cannot be passed in;
    its compiled templates are cached per source, so the global is set on the one it renders.
    """
    try:
        from transformers.utils.chat_template_utils import _compile_jinja_template

        source = tokenizer.get_chat_template(None, tools)
    except Exception:  # no Jinja template (a Python encoder), or another transformers layout
        return
    compiled = _compile_jinja_template(source)
    if compiled.globals.get("strftime_now") is not _template_strftime:
        compiled.globals["strftime_now"] = _template_strftime

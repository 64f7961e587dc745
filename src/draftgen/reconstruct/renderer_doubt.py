"""Prompts a count cannot tell from the published template's: which renderer a provider uses.

vLLM renders gpt-oss with openai-harmony, and draftgen does too; an engine that renders the
model's published chat template instead gives other ids for some prompts, at the same count
where a system message leads ("# Instructions" then a blank line). A provider proves it renders
as the engine does with one verified sample whose template rendering counts differently, and is
caught rendering the template with one failed sample whose count is the template's; calibration
(``generate.calibrate``) proves or catches it before the run with one question. Until it has
proven itself, its verified samples whose two renderings differ at an equal count are unproven.
"""

from __future__ import annotations

from collections.abc import Iterable

import orjson

from draftgen.records import Rendering
from draftgen.tokens.rendering import ChatRenderer


def unproven_renderings(
    samples: Iterable[tuple[str, str, bytes, int | None, bool]],
    template: ChatRenderer,
    engine: str,
    calibrated: set[str] | frozenset[str] = frozenset(),
    miscalibrated: set[str] | frozenset[str] = frozenset(),
) -> list[tuple[str, str]]:
    """(key, detail) of the verified samples that stay unproven.

    ``samples`` are (key, provider, request, prompt_tokens, verified) of text-path samples that
    were verified or failed on their prompt count; a provider already proven (by a sample, or
    ``calibrated``: calibration's prompt count showed it renders as draftgen does) is not
    rendered again; ``miscalibrated`` providers were shown to render otherwise.
    """
    proven: set[str] = set(calibrated)
    caught: set[str] = set(miscalibrated)
    doubtful: dict[str, list[str]] = {}
    for key, provider, request, prompt_tokens, verified in samples:
        if provider in proven:
            continue
        record = orjson.loads(request)
        rendering = Rendering.from_dict(record.get("rendering") or {})
        if rendering.error or rendering.ids is None:
            continue
        other = _template_ids(template, record, rendering)
        if other is None or other == list(rendering.ids):
            continue
        if len(other) != len(rendering.ids):
            if verified:
                proven.add(provider)
                doubtful.pop(provider, None)
            elif prompt_tokens == len(other):
                caught.add(provider)
        elif verified:
            doubtful.setdefault(provider, []).append(key)
    flagged = []
    for provider, keys in doubtful.items():
        if provider in caught:
            detail = (
                f"this provider was caught rendering the published chat template instead of "
                f"{engine}, and here the two give other ids at the same count"
            )
        else:
            detail = (
                f"the published chat template gives other ids than {engine} at the same count, "
                "and no sample of this provider has shown which one it renders with"
            )
        flagged += [(key, detail) for key in keys]
    return flagged


def _template_ids(template: ChatRenderer, record: dict, rendering: Rendering) -> list[int] | None:
    instant = rendering.instant
    if instant is None:
        return None
    try:
        text = template.text(
            record.get("messages") or [], record.get("tools"), dict(rendering.variables), instant
        )
    except Exception:  # the template refuses this prompt: an engine rendering it would too
        return None
    return template.prompt_ids(Rendering(text))

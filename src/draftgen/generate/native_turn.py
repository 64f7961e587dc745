"""Turns for servers that take and return token ids (SGLang ``/generate``): the prompt ids
draftgen renders itself, and the reasoning/content split of the ids that come back.

The prompt is the request's recorded rendering (``draftgen.tokens.rendering``), encoded as
reconstruction encodes it, so the ids sent are the ids the text path rebuilds. The split is the
one a server's reasoning parser would make, at the profile's markers; no HTTP here.
"""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import Any

from draftgen.backends.base import TokenPrompt  # the wire value: backends send it
from draftgen.profiles import ModelProfile, split_reasoning
from draftgen.records import Completion, Rendering
from draftgen.tokens import tokenizer as tok
from draftgen.tokens.rendering import ChatRenderer, tokenizer_profile


class NativeTurns:
    """Renders prompts to ids and reads generated ids back as reasoning and content."""

    def __init__(self, tokenizer: Any, profile: ModelProfile) -> None:
        self.tokenizer = tokenizer
        self.profile = profile
        self.renderer = ChatRenderer(tokenizer, profile)
        ends = [tok.encode(tokenizer, text) for text in profile.stop_texts()]
        # An end of turn spelled by several tokens cannot be a stop id; the server's eos must do.
        self._stop_ids = [end[0] for end in ends if len(end) == 1]

    def prompt(self, rendering: Rendering) -> TokenPrompt:
        """The ids of a recorded rendering (``RenderError`` if it failed)."""
        ids = self.renderer.prompt_ids(rendering)
        return TokenPrompt(rendering.text, ids, list(self._stop_ids))

    def read(self, completion: Completion, prompt: TokenPrompt) -> Completion:
        """``completion`` with the prompt ids sent and the text of its ids split in two.

        SGLang keeps the matched stop token in ``output_ids`` and trims it from ``text``; the
        split is of the text, so the stop token is left out of it the same way.
        """
        ids = completion.completion_token_ids or []
        finish = completion.raw_message.get("finish_reason")
        matched = finish.get("matched") if isinstance(finish, dict) else None
        if isinstance(matched, int) and ids and ids[-1] == matched:
            ids = ids[:-1]
        text = tok.decode(self.tokenizer, ids)
        reasoning, content = split_reasoning(
            text, self.profile.prompt_mode(prompt.text), self.profile
        )
        raw = {**completion.raw_message, "role": "assistant", "content": content}
        if reasoning is not None:
            raw["reasoning"] = reasoning
        return replace(
            completion,
            reasoning=reasoning,
            content=content,
            prompt_token_ids=list(prompt.ids),
            raw_message=raw,
        )


@functools.lru_cache(maxsize=8)
def native_turns(tokenizer_spec: str, profile_name: str | None) -> NativeTurns:
    """The ``NativeTurns`` of a run's tokenizer and profile (detected if not named), cached."""
    profile = tokenizer_profile(tokenizer_spec, profile_name)
    return NativeTurns(tok.load_tokenizer(tokenizer_spec), profile)

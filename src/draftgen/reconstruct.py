"""Reconstruct: the exact token ids of one generated turn, rebuilt from the text the API returned.

Prompt ids come from the tokenizer's own chat template over exactly the messages that were sent.
Completion ids come from ``reasoning + think_end + content + end_of_turn``, shaped by how the
prompt ends (``<think>`` already open, thinking closed, or the model opens it itself). Where the
text leaves a real ambiguity (a truncation right at ``</think>``, a model that skipped thinking),
every reading is encoded and the provider's ``completion_tokens`` picks the one it generated.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from draftgen import tokenizer as tok
from draftgen.profiles import ModelProfile
from draftgen.records import Completion, StoredCompletion, TokenSample
from draftgen.verify import verify_sample

COMPLETE_FINISH_REASONS = ("stop", "tool_calls")
# Whitespace a provider may strip from the edges of content (Kimi/DeepSeek parsers, ``str.strip``).
EDGE_WHITESPACE = ("", " ", "\n", "\n\n")


@dataclass
class CompletionReading:
    """The candidate texts of one completion (most likely first) and what was noticed on the way."""

    texts: list[str]
    notes: list[str] = field(default_factory=list)
    complete: bool = True


def prompt_mode(prompt_text: str, profile: ModelProfile) -> str:
    """``open`` (prompt ends inside ``<think>``), ``closed`` (thinking off) or ``model_opens``."""
    tail = prompt_text.rstrip()
    if tail.endswith(profile.think_end):
        return "closed"
    if tail.endswith(profile.think_start):
        return "open"
    return "model_opens"


def read_completion(
    completion: Completion, prompt_text: str, profile: ModelProfile
) -> CompletionReading:
    reasoning = completion.reasoning or ""
    content = completion.content or ""
    notes: list[str] = []
    eot = profile.end_of_turn
    if content.endswith(eot):
        # The provider failed to strip the end-of-turn text; the real one is appended below.
        while content.endswith(eot):
            content = content[: -len(eot)]
        notes.append("leaked_end_of_turn")
    complete = completion.finish_reason in COMPLETE_FINISH_REASONS
    suffix = eot if complete else ""
    mode = prompt_mode(prompt_text, profile)
    opened = profile.think_start if mode == "model_opens" else ""
    if mode == "closed":
        if reasoning:
            notes.append("reasoning_in_non_thinking_prompt")
        bodies = [content]
    elif not reasoning and profile.think_end in content:
        # No reasoning split: the think markup is still inside content.
        notes.append("no_reasoning_split")
        if opened and content.startswith(opened):
            opened = ""
        bodies = [opened + content]
    elif not complete and not content:
        # Truncated inside reasoning, or exactly after think_end: the count decides.
        bodies = [opened + reasoning, opened + reasoning + profile.think_end]
    else:
        bodies = [opened + reasoning + profile.think_end + content]
        if opened and not reasoning:
            bodies.append(content)  # a model that writes no think block at all
    return CompletionReading([body + suffix for body in bodies], notes, complete)


def reconstruct_sample(
    stored: StoredCompletion, tokenizer: Any, profile: ModelProfile
) -> TokenSample:
    completion = stored.completion
    prompt_text = tok.render_prompt(tokenizer, stored.messages, stored.tools)
    prompt_ids = tok.encode(tokenizer, prompt_text)
    reading = read_completion(completion, prompt_text, profile)
    encoded = [tok.encode(tokenizer, text) for text in reading.texts]
    expected = completion.completion_tokens
    chosen = next((i for i, ids in enumerate(encoded) if len(ids) == expected), 0)
    completion_ids = encoded[chosen]
    repair = None
    if expected is not None and len(completion_ids) != expected:
        repair = whitespace_repair(completion, prompt_text, profile, tokenizer)
    verdict = verify_sample(
        stored=stored,
        profile=profile,
        prompt_ids=prompt_ids,
        completion_ids=completion_ids,
        completion_text=reading.texts[chosen],
        decoded_text=tok.decode(tokenizer, completion_ids),
        notes=reading.notes,
        whitespace_repair=repair,
    )
    return TokenSample(
        key=stored.key,
        input_ids=prompt_ids + completion_ids,
        prompt_len=len(prompt_ids),
        verified=verdict.verified,
        reason=verdict.reason,
        detail=verdict.detail,
        truncated=not reading.complete,
        id_source="text",
    )


def whitespace_repair(
    completion: Completion, prompt_text: str, profile: ModelProfile, tokenizer: Any
) -> str | None:
    """If whitespace restored at the content's edges makes the count match, say which."""
    expected = completion.completion_tokens
    for lead in EDGE_WHITESPACE:
        for trail in EDGE_WHITESPACE:
            if not (lead or trail):
                continue
            repaired = replace(completion, content=lead + (completion.content or "") + trail)
            reading = read_completion(repaired, prompt_text, profile)
            if any(len(tok.encode(tokenizer, text)) == expected for text in reading.texts):
                return f"the count matches with {lead!r} before and {trail!r} after the content"
    return None


def strip_is_invisible(content: str, tokenizer: Any) -> bool:
    """Whether whitespace stripped from this content's edges would leave the token count as is.

    Such a strip cannot be seen in the counts, so content from a provider known to strip is
    unprovable whenever this holds (a leading space merges into the first word's token).
    """
    if not content:
        return False
    count = len(tok.encode(tokenizer, content))
    return any(
        len(tok.encode(tokenizer, edge + content)) == count
        or len(tok.encode(tokenizer, content + edge)) == count
        for edge in EDGE_WHITESPACE[1:]
    )

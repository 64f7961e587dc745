"""Verify: prove a reconstructed sample exact against the provider's own counts, or say why not.

A sample passes only if decoding its ids gives back the text, the prompt ids count equals
``usage.prompt_tokens`` and the completion ids count equals ``usage.completion_tokens``. Text alone
cannot reveal a non-canonical segmentation or whitespace a provider removed; the counts can.
"""

from __future__ import annotations

from dataclasses import dataclass

from draftgen.profiles import ModelProfile
from draftgen.records import StoredCompletion

# Reason codes, in the order they are checked; the first failing one is the sample's reason.
OK = "ok"
STRUCTURED_TOOL_CALLS = "structured_tool_calls"
NO_USAGE = "no_usage"
PROMPT_COUNT_MISMATCH = "prompt_count_mismatch"
COMPLETION_COUNT_MISMATCH = "completion_count_mismatch"
DECODE_MISMATCH = "decode_mismatch"
REASONING_IN_NON_THINKING = "reasoning_in_non_thinking_prompt"
CONTENT_FILTER = "content_filter"
WHITESPACE_ALTERED = "whitespace_altered"
# Set after all samples are read: this provider strips whitespace somewhere, and a strip here
# would not change the count, so the sample cannot be proven from text.
PROVIDER_STRIPS_WHITESPACE = "provider_strips_whitespace"


@dataclass(frozen=True)
class Verdict:
    verified: bool
    reason: str
    detail: str


def verify_sample(
    *,
    stored: StoredCompletion,
    profile: ModelProfile,
    prompt_ids: list[int],
    completion_ids: list[int],
    completion_text: str,
    decoded_text: str,
    notes: list[str],
    whitespace_repair: str | None = None,
) -> Verdict:
    completion = stored.completion
    details = list(notes)
    special = special_text_in_prompt(stored.messages, profile)
    if special:
        details.append(f"special_text_in_prompt={special}")
    failures: list[tuple[str, str]] = []
    if completion.tool_calls:
        failures.append(
            (STRUCTURED_TOOL_CALLS, "the API returned structured tool_calls, not raw markup")
        )
    prompt_tokens, completion_tokens = completion.prompt_tokens, completion.completion_tokens
    if prompt_tokens is None or completion_tokens is None:
        failures.append((NO_USAGE, "the response carried no token counts to check against"))
    else:
        if len(prompt_ids) != prompt_tokens:
            failures.append(
                (PROMPT_COUNT_MISMATCH, f"prompt {len(prompt_ids)} ids, provider {prompt_tokens}")
            )
        if len(completion_ids) != completion_tokens:
            counts = f"completion {len(completion_ids)} ids, provider {completion_tokens}"
            if whitespace_repair:
                failures.append((WHITESPACE_ALTERED, f"{counts}; {whitespace_repair}"))
            else:
                failures.append((COMPLETION_COUNT_MISMATCH, counts))
    if decoded_text != completion_text:
        failures.append((DECODE_MISMATCH, "decoding the ids does not give back the text"))
    if "reasoning_in_non_thinking_prompt" in notes:
        failures.append(
            (REASONING_IN_NON_THINKING, "reasoning returned for a prompt with thinking off")
        )
    if completion.finish_reason == "content_filter":
        failures.append((CONTENT_FILTER, "the provider filtered the completion"))
    if failures:
        details.extend(text for _, text in failures)
        return Verdict(False, failures[0][0], "; ".join(details))
    return Verdict(True, OK, "; ".join(details))


def special_text_in_prompt(messages: list[dict], profile: ModelProfile) -> str:
    """The first delimiter typed literally in non-assistant data (legal, but worth reporting)."""
    for message in messages:
        if message.get("role") == "assistant":
            continue
        content = message.get("content") or ""
        for text in profile.special_texts():
            if text in content:
                return text
    return ""

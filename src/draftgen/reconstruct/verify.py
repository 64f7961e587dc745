"""Verify: prove a reconstructed sample exact against the provider's own counts, or say why not.

A sample passes only if decoding its ids gives back the text, the prompt ids count equals
``usage.prompt_tokens`` and the completion ids count equals ``usage.completion_tokens``. Text alone
cannot reveal a non-canonical segmentation or whitespace a provider removed; the counts can.
Server ids are checked against the server's own counts (``verify_server_ids``), ids from logprobs
against the counts and the text they must spell (``verify_logprob_ids``).
"""

from __future__ import annotations

from dataclasses import dataclass

from draftgen.profiles import ModelProfile
from draftgen.reconstruct.reasons import (
    COMPLETION_COUNT_MISMATCH,
    CONTENT_FILTER,
    DECODE_MISMATCH,
    DOUBT_REASONS,
    LOGPROB_TEXT_MISMATCH,
    NO_USAGE,
    OK,
    PROMPT_COUNT_MISMATCH,
    REASONING_END_UNPROVEN,
    REASONING_IN_NON_THINKING,
    SERVER_COUNT_MISMATCH,
    STRUCTURED_TOOL_CALLS,
    TOOL_ARGUMENT_LITERAL_UNPROVEN,
    TOOL_ARGUMENTS_COUNT_NEUTRAL,
    TOOL_ARGUMENTS_RESERIALISED,
    TOOL_CALL_FORMAT_UNCONFIRMED,
    TOOL_CALL_ID_REBUILT,
    TOOL_CALLS_INEXACT,
)
from draftgen.records import Completion, StoredCompletion

# The end of a whitespace repair's words in a sample's detail: how the provider-level check
# finds the count mismatches a repair would explain.
REPAIR_WOULD_MATCH = "after the content would also match the count"
# What a completion count that differs can mean, whatever whitespace repair would match it.
RESPLIT_OR_ALTERED = (
    "re-tokenization (the model's ids are not the canonical encoding of its text) or altered text"
)
# A flag in the detail of a sample, verified or not: the prompt's data (a message, a tool schema)
# spells a special token, which servers render as that token's id. Legal, and the ids are what the
# server used, but such rows are suspicious (prompt injection, leaked markup): filter on it.
SPECIAL_TEXT_IN_PROMPT = "special_text_in_prompt"
# A note on a sample whose count matched no reading: its content is long and its counts with
# whitespace restored at its edges could not be worked out from pieces of it (a tokenizer whose
# texts cannot be cut), so no repair was tried rather than one whole encode each.
WHITESPACE_UNCHECKED = "whitespace_repairs_not_tried"
# Notes left by the reading of a completion with structured tool calls.
TOOL_CALLS_REBUILT = "tool_calls_rebuilt"
TOOL_CALLS_UNREBUILT = "tool_calls_not_rebuilt"


def unproven_figures(reasons: dict[str, int], samples: int) -> dict:
    """Of a run's sample reasons (``Store.tallies.counts()["reasons"]``), those of
    ``DOUBT_REASONS``: ``samples`` left unproven, their ``share`` of all samples and the count
    ``by_reason``."""
    by_reason = {reason: n for reason, n in reasons.items() if reason in DOUBT_REASONS}
    total = sum(by_reason.values())
    return {
        "samples": total,
        "share": round(total / samples, 6) if samples else None,
        "by_reason": by_reason,
    }


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
    special_text: str | None = None,
) -> Verdict:
    """The verdict on ids rebuilt from text: every check that fails adds a failure, in the order
    the checks run here (the first is the reason)."""
    completion = stored.completion
    details = list(notes) + _prompt_notes(stored, profile, special_text)
    failures: list[tuple[str, str]] = []
    rebuilt = TOOL_CALLS_REBUILT in notes
    if completion.tool_calls and not rebuilt:
        failures.append(
            (
                STRUCTURED_TOOL_CALLS,
                f"profile {profile.name} cannot rebuild the structured tool_calls as markup",
            )
        )
    failures += _count_failures(
        completion, profile, prompt_ids, completion_ids, rebuilt, whitespace_repair
    )
    if rebuilt and profile.tool_call_format_unconfirmed:
        failures.append(
            (
                TOOL_CALL_FORMAT_UNCONFIRMED,
                f"{profile.tool_call_format_unconfirmed}, so the rebuilt tool calls cannot be "
                "proven even when the count matches; use a backend that returns token ids",
            )
        )
    failures += _tool_argument_failures(notes, profile, details)
    if REASONING_END_UNPROVEN in notes:
        failures.append(
            (
                REASONING_END_UNPROVEN,
                f"the answer came back as all reasoning and no content, which reads both with "
                f"and without {profile.think_end} (an answer that ended inside its reasoning), "
                "and the count does not prove which the model generated: an answer that ended "
                "inside its reasoning with a re-split (ids that are not the canonical encoding "
                f"of its text) has the count of the reading with {profile.think_end}",
            )
        )
    if decoded_text != completion_text:
        failures.append((DECODE_MISMATCH, "decoding the ids does not give back the text"))
    if REASONING_IN_NON_THINKING in notes:
        failures.append(
            (REASONING_IN_NON_THINKING, "reasoning returned for a prompt with thinking off")
        )
    if completion.finish_reason == "content_filter":
        failures.append((CONTENT_FILTER, "the provider filtered the completion"))
    return _verdict(failures, details)


def _count_failures(
    completion: Completion,
    profile: ModelProfile,
    prompt_ids: list[int],
    completion_ids: list[int],
    rebuilt: bool,
    whitespace_repair: str | None,
) -> list[tuple[str, str]]:
    """The failures of the ids against the provider's token counts: none given, or a count
    that differs (for the completion, named by what most likely made it differ)."""
    failures: list[tuple[str, str]] = []
    prompt_tokens, completion_tokens = completion.prompt_tokens, completion.completion_tokens
    if prompt_tokens is None or completion_tokens is None:
        failures.append((NO_USAGE, "the response carried no token counts to check against"))
        return failures
    if len(prompt_ids) != prompt_tokens:
        failures.append(
            (PROMPT_COUNT_MISMATCH, f"prompt {len(prompt_ids)} ids, provider {prompt_tokens}")
        )
    if len(completion_ids) != completion_tokens:
        counts = f"completion {len(completion_ids)} ids, provider {completion_tokens}"
        if whitespace_repair:
            # A repair that fits the count is no evidence of a strip (vLLM never strips; a
            # re-split often changes the count by one, as a restored space does): the
            # provider-level check names the strip where the provider is known to strip.
            failures.append(
                (COMPLETION_COUNT_MISMATCH, f"{counts}; {RESPLIT_OR_ALTERED}; {whitespace_repair}")
            )
        elif completion.tool_calls and rebuilt:
            failures.append(
                (
                    TOOL_CALLS_INEXACT,
                    f"{counts}; no reading of the structured tool_calls as "
                    f"{profile.name} markup matches the count",
                )
            )
        else:
            failures.append((COMPLETION_COUNT_MISMATCH, f"{counts}; {RESPLIT_OR_ALTERED}"))
    return failures


def _tool_argument_failures(
    notes: list[str], profile: ModelProfile, details: list[str]
) -> list[tuple[str, str]]:
    """The failures the tool-call readings' notes make (a spelling the count cannot prove, a
    rebuilt id); a spelling the engine's own parser made is a detail, not a failure."""
    failures: list[tuple[str, str]] = []
    for note in notes:
        if note == TOOL_ARGUMENTS_COUNT_NEUTRAL:
            failures.append(
                (
                    TOOL_ARGUMENTS_COUNT_NEUTRAL,
                    "the engine's parser rewrote the tool-call arguments and another spelling "
                    "of them has the same count, so the count cannot say which one the model "
                    "wrote",
                )
            )
        elif (
            note.startswith(TOOL_ARGUMENTS_RESERIALISED + "=")
            and profile.tool_arguments_parsed
            and not profile.xml_arguments
        ):
            # The engine's own parser re-spelled the JSON the model wrote: the count picked the
            # model's spelling (``TOOL_ARGUMENTS_COUNT_NEUTRAL`` says when it cannot). A
            # container value in an XML parameter stays unproven: the model may spell it in
            # more ways than the readings hold.
            details.append(f"the count picked the {note.partition('=')[2]} spelling")
        elif note.startswith(TOOL_ARGUMENTS_RESERIALISED + "="):
            style = note.partition("=")[2]
            failures.append(
                (
                    TOOL_ARGUMENTS_RESERIALISED,
                    f"the provider re-serialised the tool-call arguments; the {style} reading "
                    "matches the count, but key order and spacing cannot be proven by a count",
                )
            )
        elif note.startswith(TOOL_ARGUMENT_LITERAL_UNPROVEN + "="):
            failures.append(
                (
                    TOOL_ARGUMENT_LITERAL_UNPROVEN,
                    f"the tool-call argument {note.partition('=')[2]} is a boolean or null, which "
                    "the model spells two ways a count cannot tell apart",
                )
            )
        elif note == TOOL_CALL_ID_REBUILT:
            failures.append(
                (
                    TOOL_CALL_ID_REBUILT,
                    "the provider renamed the tool-call ids; rebuilt ones cannot be proven",
                )
            )
    return failures


def verify_server_ids(
    *,
    stored: StoredCompletion,
    profile: ModelProfile,
    prompt_ids: list[int],
    completion_ids: list[int],
    template_agrees: bool,
    special_text: str | None = None,
) -> Verdict:
    """Ids the server generated are the training data; check them against its own counts.

    A prompt rendered by the server's template differently from the local tokenizer's is still
    what the model saw, so it is reported, not failed: text-only runs of it would be wrong.
    """
    completion = stored.completion
    details = _prompt_notes(stored, profile, special_text)
    if not template_agrees:
        details.append("server_prompt_differs_from_local_template")
    failures: list[tuple[str, str]] = []
    if not completion_ids:
        failures.append((SERVER_COUNT_MISMATCH, "the server returned no completion ids"))
    for name, ids, count in (
        ("prompt", prompt_ids, completion.prompt_tokens),
        ("completion", completion_ids, completion.completion_tokens),
    ):
        if count is not None and len(ids) != count:
            failures.append(
                (SERVER_COUNT_MISMATCH, f"{name} {len(ids)} server ids, usage says {count}")
            )
    if completion.finish_reason == "content_filter":
        failures.append((CONTENT_FILTER, "the provider filtered the completion"))
    return _verdict(failures, details)


def verify_logprob_ids(
    *,
    stored: StoredCompletion,
    profile: ModelProfile,
    prompt_ids: list[int],
    logprob_text: str,
    notes: list[str],
    special_text: str | None = None,
    completion_ids: list[int] | None = None,
) -> Verdict:
    """Ids from logprobs: the model's own tokens, whatever the text shows.

    From token bytes (``completion_ids`` None) they are the content's: the rest of the turn
    (reasoning, delimiters) is encoded from text, so the completion count must match (the caller
    only builds readings that do), and the logprob tokens must spell the delivered content (edge
    whitespace a provider stripped is restored by them, and reported). Named by id
    (``completion_ids``: vLLM's ``token_id:N``) they are every generated token: their count must
    be the provider's, and their text (``logprob_text``) must hold the reasoning and the content
    as delivered, in that order. The prompt count is checked either way.
    """
    completion = stored.completion
    details = list(notes) + _prompt_notes(stored, profile, special_text)
    failures: list[tuple[str, str]] = []
    if completion.prompt_tokens is None:
        failures.append((NO_USAGE, "the response carried no token counts to check against"))
    elif len(prompt_ids) != completion.prompt_tokens:
        failures.append(
            (
                PROMPT_COUNT_MISMATCH,
                f"prompt {len(prompt_ids)} ids, provider {completion.prompt_tokens}",
            )
        )
    content = profile.strip_end_of_turn(completion.content or "")
    if completion_ids is not None:
        failures += _whole_completion_failures(completion, completion_ids, logprob_text, content)
    # Logprobs cover every generated token of the content: markup a provider left in it too
    # (Kimi K3's closing segments before its end of turn), so the content as delivered matches.
    elif logprob_text not in (content, completion.content or ""):
        if logprob_text.strip() == content.strip():
            details.append("logprobs_restore_stripped_whitespace")
        else:
            failures.append((LOGPROB_TEXT_MISMATCH, "the logprob tokens do not spell the content"))
    if completion.finish_reason == "content_filter":
        failures.append((CONTENT_FILTER, "the provider filtered the completion"))
    return _verdict(failures, details)


def _whole_completion_failures(
    completion: Completion, completion_ids: list[int], logprob_text: str, content: str
) -> list[tuple[str, str]]:
    """The failures of ids the logprobs named for the whole completion: a count other than the
    provider's, or a text that does not hold the reasoning and then the content it delivered."""
    failures: list[tuple[str, str]] = []
    count = completion.completion_tokens
    if count is not None and len(completion_ids) != count:
        failures.append(
            (
                COMPLETION_COUNT_MISMATCH,
                f"completion {len(completion_ids)} ids from logprobs, provider {count}",
            )
        )
    at = 0
    for name, text in (("reasoning", completion.reasoning or ""), ("content", content)):
        found = logprob_text.find(text, at)
        if found < 0:
            failures.append(
                (LOGPROB_TEXT_MISMATCH, f"the logprob tokens do not spell the {name} returned")
            )
            break
        at = found + len(text)
    return failures


def with_doubts(verdict: Verdict, doubts: list[tuple[str, str]]) -> Verdict:
    """A verified verdict failed by doubts about the prompt the counts cannot settle."""
    if not doubts or not verdict.verified:
        return verdict
    detail = "; ".join(d for d in (verdict.detail, *(text for _, text in doubts)) if d)
    return Verdict(False, doubts[0][0], detail)


def special_text_in_prompt(messages: list[dict], profile: ModelProfile) -> str:
    """The first of the profile's delimiters typed literally in non-assistant data (legal, but
    worth reporting). ``reconstruct.token_tables.special_text_of_prompt`` looks for every added
    token of the tokenizer after these."""
    for message in messages:
        if message.get("role") == "assistant":
            continue
        content = message.get("content") or ""
        for text in profile.special_texts():
            if text in content:
                return text
    return ""


def _prompt_notes(
    stored: StoredCompletion, profile: ModelProfile, special: str | None = None
) -> list[str]:
    """The flag of special-token text in the prompt's data: ``special`` as the caller found it
    with the tokenizer, else the profile's delimiters looked for here."""
    if special is None:
        special = special_text_in_prompt(stored.messages, profile)
    return [f"{SPECIAL_TEXT_IN_PROMPT}={special}"] if special else []


def _verdict(failures: list[tuple[str, str]], details: list[str]) -> Verdict:
    """Verified if nothing failed; else the first failure is the reason, all go in the detail."""
    details = details + [text for _, text in failures]
    reason = failures[0][0] if failures else OK
    return Verdict(not failures, reason, "; ".join(details))

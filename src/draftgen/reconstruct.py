"""Reconstruct: the exact token ids of one generated turn, rebuilt from the text the API returned.

Prompt ids come from the tokenizer's own chat template over exactly the messages that were sent.
Completion ids come from ``reasoning + think_end + content + end_of_turn``, shaped by how the
prompt ends (``<think>`` already open, thinking closed, or the model opens it itself) and framed
as the profile says (harmony's channel headers, a tool-call turn's own end). Where the
text leaves a real ambiguity (a truncation right at ``</think>``, a model that skipped thinking),
every reading is encoded and the provider's ``completion_tokens`` picks the one it generated.
Structured ``tool_calls`` are rebuilt as the profile's markup after the content. Ids a server
returned (vLLM, SGLang) are the sample and logprob token bytes give the content's ids; the text
path still runs beside them and its agreement is ``TokenSample.text_check``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from draftgen import tokenizer as tok
from draftgen.profiles import SPECIAL_SHAPED, ModelProfile, ToolCallFormatError, ToolCallMarkup
from draftgen.records import Completion, StoredCompletion, TokenSample
from draftgen.verify import (
    TOOL_CALLS_REBUILT,
    TOOL_CALLS_UNREBUILT,
    verify_logprob_ids,
    verify_sample,
    verify_server_ids,
)

# ``TokenSample.text_check`` values besides a text-path reason code.
TEXT_AGREES = "agrees"
TEXT_IDS_DIFFER = "ids_differ"

COMPLETE_FINISH_REASONS = ("stop", "tool_calls")
# Whitespace a provider may strip from the edges of content (Kimi/DeepSeek parsers, ``str.strip``).
EDGE_WHITESPACE = ("", " ", "\n", "\n\n")


@dataclass
class CompletionReading:
    """The candidate texts of one completion (most likely first) and what was noticed on the way."""

    texts: list[str]
    notes: list[str] = field(default_factory=list)
    complete: bool = True
    # Notes that hold for one reading only (parallel to ``texts``; empty means none).
    text_notes: list[tuple[str, ...]] = field(default_factory=list)

    def notes_of(self, index: int) -> list[str]:
        extra = self.text_notes[index] if index < len(self.text_notes) else ()
        return [*self.notes, *extra]


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
    tool_turn = bool(completion.tool_calls)
    eot = profile.turn_end(tool_turn)
    leaked = {profile.end_of_turn, eot}
    if any(content.endswith(text) for text in leaked):
        # The provider failed to strip the end-of-turn text; the real one is appended below.
        while any(content.endswith(text) for text in leaked):
            content = content[: -len(next(t for t in leaked if content.endswith(t)))]
        notes.append("leaked_end_of_turn")
    complete = completion.finish_reason in COMPLETE_FINISH_REASONS
    suffix = eot if complete else ""
    mode = prompt_mode(prompt_text, profile)
    opened = profile.think_lead + profile.think_start if mode == "model_opens" else ""
    head, tail = profile.content_frame(content, tool_turn)
    framed = head + content + tail
    if mode == "closed":
        if reasoning:
            notes.append("reasoning_in_non_thinking_prompt")
        bodies = [framed]
    elif not reasoning and profile.think_end in content:
        # No reasoning split: the think markup is still inside content.
        notes.append("no_reasoning_split")
        if opened and content.startswith(opened):
            opened = ""
        elif opened and content.startswith(profile.think_start):
            opened = profile.think_lead
        # What closes the content before tool calls (harmony's <|end|>) is not content: the
        # provider dropped it with the calls it parsed.
        answer = content.partition(profile.think_end)[2]
        unsplit_tail = profile.content_frame(answer, tool_turn)[1]
        bodies = [opened + content + unsplit_tail]
        if mode == "open" and content.startswith(profile.think_start):
            # A provider that keeps the think block in content re-opens it there (MiniMax-M2
            # on vLLM), although the prompt already holds think_start; the count decides.
            bodies.insert(0, content[len(profile.think_start) :] + unsplit_tail)
    elif not complete and not content:
        # Truncated inside reasoning, or after think_end (or part of what follows it, when
        # that is several tokens, as harmony's channel header): the count decides.
        bodies = [opened + reasoning + cut for cut in delimiter_prefixes(profile, tool_turn)]
    else:
        bodies = [opened + reasoning + profile.think_end + framed]
        if opened and not reasoning:
            # A model that writes no think block at all; a content header starts with what the
            # prompt already holds (harmony's "<|start|>assistant"), which it does not repeat.
            bodies.append(_without_prompt_overlap(prompt_text, head) + content + tail)
    markups = [ToolCallMarkup("")]
    if completion.tool_calls:
        try:
            markups = profile.tool_call_markups(completion.tool_calls, content)
        except ToolCallFormatError as exc:
            notes.append(f"{TOOL_CALLS_UNREBUILT}: {exc}")
        else:
            notes.append(TOOL_CALLS_REBUILT)
    texts = [body + markup.text + suffix for body in bodies for markup in markups]
    text_notes = [markup.notes for _ in bodies for markup in markups]
    return CompletionReading(texts, notes, complete, text_notes)


def _without_prompt_overlap(prompt_text: str, head: str) -> str:
    """``head`` minus its longest beginning that the prompt already ends with."""
    for size in range(len(head), 0, -1):
        if prompt_text.endswith(head[:size]):
            return head[size:]
    return head


def delimiter_prefixes(profile: ModelProfile, tool_turn: bool) -> list[str]:
    """Where a cut can fall once reasoning is written: before think_end, or after any whole
    special token of ``think_end + content_start`` (one place when that is a single token)."""
    after = profile.think_end + ("" if tool_turn else profile.content_start)
    cuts = [""]
    position = 0
    for match in SPECIAL_SHAPED.finditer(after):
        if match.start() > position:
            cuts.append(after[: match.start()])
        position = match.end()
        cuts.append(after[:position])
    if after not in cuts:
        cuts.append(after)
    return cuts


def reconstruct_sample(
    stored: StoredCompletion, tokenizer: Any, profile: ModelProfile
) -> TokenSample:
    """The sample of one stored completion: the server's ids if it gave them, else the text's.

    With server ids the text reconstruction still runs; whether it agrees is ``text_check``.
    """
    text_sample = reconstruct_from_text(stored, tokenizer, profile)
    completion = stored.completion
    if completion.prompt_token_ids is None or completion.completion_token_ids is None:
        if completion.logprob_bytes is not None:
            return reconstruct_from_logprobs(stored, tokenizer, profile, text_sample)
        return text_sample
    prompt_ids = list(completion.prompt_token_ids)
    completion_ids = list(completion.completion_token_ids)
    server_ids = prompt_ids + completion_ids
    text_check = text_check_of(text_sample, server_ids)
    template_agrees = text_sample.input_ids[: text_sample.prompt_len] == prompt_ids
    verdict = verify_server_ids(
        stored=stored,
        profile=profile,
        prompt_ids=prompt_ids,
        completion_ids=completion_ids,
        template_agrees=template_agrees,
    )
    return TokenSample(
        key=stored.key,
        input_ids=server_ids,
        prompt_len=len(prompt_ids),
        verified=verdict.verified,
        reason=verdict.reason,
        detail=verdict.detail,
        truncated=completion.finish_reason not in COMPLETE_FINISH_REASONS,
        id_source="server",
        text_check=text_check,
    )


def text_check_of(text_sample: TokenSample, ids: list[int]) -> str:
    """How the text path fared against exact ids: agrees, ids_differ, or its own reason."""
    if not text_sample.verified:
        return text_sample.reason
    return TEXT_AGREES if text_sample.input_ids == ids else TEXT_IDS_DIFFER


def reconstruct_from_logprobs(
    stored: StoredCompletion, tokenizer: Any, profile: ModelProfile, text_sample: TokenSample
) -> TokenSample:
    """Content ids from logprob token bytes, the rest of the turn from text; else the text sample.

    Only the content is covered by logprobs, so the reading's text before the content (reasoning,
    think delimiters) and after it (end of turn) is encoded, and the provider's count picks the
    reading. Structured tool calls are left to the text path: their markup is not content.
    """
    completion = stored.completion

    def unusable(why: str) -> TokenSample:
        detail = "; ".join(d for d in (text_sample.detail, f"logprobs_unusable: {why}") if d)
        return replace(text_sample, detail=detail)

    if completion.tool_calls:
        return unusable("structured tool calls are rebuilt from text")
    table = token_bytes_table(tokenizer)
    logprob_ids = [table.get(token) for token in completion.logprob_bytes or ()]
    if None in logprob_ids:
        return unusable("a logprob token's bytes are not one token of this tokenizer")
    prompt_text, prompt_ids = rendered_prompt(stored, tokenizer)
    reading = read_completion(completion, prompt_text, profile)
    content = completion.content or ""
    while content.endswith(profile.end_of_turn):
        content = content[: -len(profile.end_of_turn)]
    suffix = profile.end_of_turn if reading.complete else ""
    tail = content + suffix
    expected = completion.completion_tokens
    for text in reading.texts:
        if not text.endswith(tail):
            continue
        head = tok.encode(tokenizer, text[: len(text) - len(tail)])
        for end in (tok.encode(tokenizer, suffix), []):
            ids = head + logprob_ids + end
            if expected is not None and len(ids) != expected:
                continue
            verdict = verify_logprob_ids(
                stored=stored,
                profile=profile,
                prompt_ids=prompt_ids,
                logprob_text=tok.decode(tokenizer, logprob_ids),
                notes=reading.notes,
            )
            return TokenSample(
                key=stored.key,
                input_ids=prompt_ids + ids,
                prompt_len=len(prompt_ids),
                verified=verdict.verified,
                reason=verdict.reason,
                detail=verdict.detail,
                truncated=not reading.complete,
                id_source="logprobs",
                text_check=text_check_of(text_sample, prompt_ids + ids),
            )
    return unusable("no reading with the logprob tokens matches the completion count")


_TOKEN_BYTES_TABLES: dict[int, tuple[Any, dict[bytes, int]]] = {}


def token_bytes_table(tokenizer: Any) -> dict[bytes, int]:
    """bytes -> id for every token (ordinary ones first; specials by their text), cached."""
    cached = _TOKEN_BYTES_TABLES.get(id(tokenizer))
    if cached is not None and cached[0] is tokenizer:
        return cached[1]
    decoder = _byte_decoder()
    special_ids = set(getattr(tokenizer, "added_tokens_decoder", {}) or {})
    table: dict[bytes, int] = {}
    specials: list[tuple[bytes, int]] = []
    for token, index in tokenizer.get_vocab().items():
        if index in special_ids:
            specials.append((token.encode("utf-8"), index))
            continue
        try:
            raw = bytes(decoder[ch] for ch in token)
        except KeyError:  # not a byte-level vocabulary entry
            raw = tok.decode(tokenizer, [index]).encode("utf-8")
        table.setdefault(raw, index)
    for raw, index in specials:
        table.setdefault(raw, index)
    _TOKEN_BYTES_TABLES[id(tokenizer)] = (tokenizer, table)
    return table


def _byte_decoder() -> dict[str, int]:
    """Inverse of GPT-2's bytes_to_unicode, the alphabet of byte-level BPE vocabularies."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    printable += range(ord("®"), ord("ÿ") + 1)
    mapping = {chr(b): b for b in printable}
    shifted = 0
    for b in range(256):
        if b not in printable:
            mapping[chr(256 + shifted)] = b
            shifted += 1
    return mapping


def rendered_prompt(stored: StoredCompletion, tokenizer: Any) -> tuple[str, list[int]]:
    """The prompt through the chat template, as text and as the ids the model was given."""
    text = tok.render_prompt(tokenizer, stored.messages, stored.tools)
    return text, tok.encode(tokenizer, text)


def reconstruct_from_text(
    stored: StoredCompletion, tokenizer: Any, profile: ModelProfile
) -> TokenSample:
    completion = stored.completion
    prompt_text, prompt_ids = rendered_prompt(stored, tokenizer)
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
        notes=reading.notes_of(chosen),
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
    # Both edges at once too: a strip takes leading and trailing whitespace together.
    return any(
        len(tok.encode(tokenizer, lead + content + trail)) == count
        for lead in EDGE_WHITESPACE
        for trail in EDGE_WHITESPACE
        if lead or trail
    )

"""Reconstruct: the exact token ids of one generated turn, rebuilt from the text the API returned.

Prompt ids come from the tokenizer's own chat template over exactly the messages that were sent.
Completion ids come from ``reasoning + think_end + content + end_of_turn``, shaped by how the
prompt ends (``<think>`` already open, thinking closed, or the model opens it itself) and framed
as the profile says (harmony's channel headers, a tool-call turn's own end). Where the
text leaves a real ambiguity (a truncation right at ``</think>``, a model that skipped thinking,
an answer returned as all reasoning that may have ended inside it), every reading is encoded and
the provider's ``completion_tokens`` picks the one it generated.
Structured ``tool_calls`` are rebuilt as the profile's markup after the content. Ids a server
returned (vLLM, SGLang) are the sample (proof ``ids``); logprobs that name each token's id give
the whole completion's, logprob token bytes the content's (proof ``logprobs``); the text path
still runs beside them and its agreement is ``TokenSample.text_check``.
"""

from __future__ import annotations

import bisect
import copy
import datetime as dt
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from draftgen.profiles import SPECIAL_SHAPED, ModelProfile, ToolCallFormatError, ToolCallMarkup
from draftgen.profiles.base import REASONING_UNCLOSED, Segment
from draftgen.reconstruct.reasons import (
    PROMPT_DATE_UNPROVEN,
    PROMPT_MODE_UNPROVEN,
    PROMPT_RENDER_FAILED,
    REASONING_END_UNPROVEN,
    REASONING_IN_NON_THINKING,
    TOOL_ARGUMENTS_COUNT_NEUTRAL,
)
from draftgen.reconstruct.token_tables import special_text_of_prompt, token_bytes_table
from draftgen.reconstruct.verify import (
    REPAIR_WOULD_MATCH,
    TOOL_CALLS_REBUILT,
    TOOL_CALLS_UNREBUILT,
    WHITESPACE_UNCHECKED,
    verify_logprob_ids,
    verify_sample,
    verify_server_ids,
    with_doubts,
)
from draftgen.records import (
    PROOF_IDS,
    PROOF_LOGPROBS,
    PROOF_TEXT,
    Completion,
    StoredCompletion,
    TokenSample,
)
from draftgen.tokens import long_text
from draftgen.tokens import tokenizer as tok
from draftgen.tokens.fast_encoder import special_pattern, splits_at_specials
from draftgen.tokens.rendering import ChatRenderer, RenderError

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
    # A family whose markup is encoded piece by piece (``ModelProfile.segmented``): each text's
    # segments, the (start, end) segments of its content, and the family's segment encoder.
    segments: list[tuple[Segment, ...]] = field(default_factory=list)
    content_spans: list[tuple[int, int]] = field(default_factory=list)
    encode_segments: Any = None
    # The tool calls' framing of each text (``ToolCallMarkup.lead_free``, parallel to
    # ``texts``): texts of one body and one framing differ only in the arguments' spelling.
    framings: list[tuple[int, bool]] = field(default_factory=list)

    def notes_of(self, index: int) -> list[str]:
        extra = self.text_notes[index] if index < len(self.text_notes) else ()
        return [*self.notes, *extra]

    def ids(self, tokenizer: Any, index: int) -> list[int]:
        """The ids of reading ``index``: its segments each encoded on its own, else its text."""
        if self.segments:
            return self.encode_segments(tokenizer, self.segments[index])
        return tok.encode(tokenizer, self.texts[index])


def read_completion(
    completion: Completion, prompt_text: str, profile: ModelProfile
) -> CompletionReading:
    """The candidate texts of ``completion`` after ``prompt_text`` (most likely first): each body
    (the text before any tool calls) with each reading of the calls, then the end of turn."""
    if profile.segmented is not None:
        return _segmented_reading(completion, prompt_text, profile)
    content = completion.content or ""
    notes: list[str] = []
    tool_turn = bool(completion.tool_calls)
    stripped = profile.strip_end_of_turn(content, tool_turn)
    if stripped != content:
        # The provider failed to strip the end-of-turn text; the real one is appended below.
        content = stripped
        notes.append("leaked_end_of_turn")
    eot = profile.turn_end(tool_turn, content)
    complete = completion.finish_reason in COMPLETE_FINISH_REASONS
    suffix = eot if complete else ""
    bodies = [
        (body, ()) for body in _bodies(completion, content, prompt_text, profile, complete, notes)
    ]
    unclosed = _unclosed_bodies(completion, content, prompt_text, profile, complete)
    bodies += [(body, (REASONING_UNCLOSED,)) for body in unclosed]
    markups = _tool_call_markups(completion, content, profile, notes)
    texts = [body + markup.text + suffix for body, _ in bodies for markup in markups]
    text_notes = [(*own, *markup.notes) for _, own in bodies for markup in markups]
    framings = [(b, markup.lead_free) for b in range(len(bodies)) for markup in markups]
    return CompletionReading(texts, notes, complete, text_notes, framings=framings)


def _bodies(
    completion: Completion,
    content: str,
    prompt_text: str,
    profile: ModelProfile,
    complete: bool,
    notes: list[str],
) -> list[str]:
    """The texts the model may have written before any tool calls (most likely first), by how
    the prompt ends: thinking closed, ``think_start`` already open, or the model opens it."""
    reasoning = completion.reasoning or ""
    tool_turn = bool(completion.tool_calls)
    mode = profile.prompt_mode(prompt_text)
    opened = profile.think_lead + profile.think_start if mode == "model_opens" else ""
    head, tail = profile.content_frame(content, tool_turn)
    framed = head + content + tail
    if mode == "closed":
        if reasoning:
            notes.append(REASONING_IN_NON_THINKING)
        return [framed]
    if not reasoning and profile.think_end in content:
        # No reasoning split: the think markup is still inside content.
        notes.append("no_reasoning_split")
        return _unsplit_bodies(content, mode, opened, profile, tool_turn)
    if not complete and not content:
        # Truncated inside reasoning, or after think_end (or part of what follows it, when
        # that is several tokens, as harmony's channel header): the count decides.
        bodies = [opened + reasoning + cut for cut in delimiter_prefixes(profile, tool_turn)]
        if opened and profile.bare_think_end and not reasoning:
            bodies.append(profile.think_end)
        return bodies
    bodies = [opened + reasoning + profile.think_end + framed]
    if opened and not reasoning:
        # A model that writes no think block at all; a content header starts with what the
        # prompt already holds (harmony's "<|start|>assistant"), which it does not repeat.
        bodies.append(_without_prompt_overlap(prompt_text, head) + content + tail)
        if profile.bare_think_end:
            bodies.insert(0, profile.think_end + framed)
    return bodies


def _unclosed_bodies(
    completion: Completion, content: str, prompt_text: str, profile: ModelProfile, complete: bool
) -> list[str]:
    """The bodies of a finished answer that ended inside its reasoning: no ``think_end`` (nor
    the ``content_start`` after it) was generated.

    vLLM returns such an answer as all reasoning and an empty content (the end of turn came
    before ``think_end``, or a tool call its parser takes as the end of reasoning, Qwen3.5's
    ``<tool_call>``), exactly as it returns one that closed its reasoning and wrote nothing
    after it: both are read, and the count takes the one without the close
    (``_reasoning_end_unproven`` never verifies a close the text does not show).
    After a prompt where the model opens the block itself, the model may also have written no
    block at all (vLLM's qwen3 and deepseek_r1 parsers call all of it reasoning then).
    """
    reasoning = completion.reasoning or ""
    if not (complete and reasoning and not content and profile.think_end):
        return []
    if completion.tool_calls and not profile.reasoning_ends_at_tool_calls:
        return []  # its parser finds no tool call in reasoning: the calls show think_end
    mode = profile.prompt_mode(prompt_text)
    if mode == "closed":
        return []
    if mode == "open":
        return [reasoning]
    return [profile.think_lead + profile.think_start + reasoning, reasoning]


def _unsplit_bodies(
    content: str, mode: str, opened: str, profile: ModelProfile, tool_turn: bool
) -> list[str]:
    """The bodies of a content that still holds the think markup (no reasoning split)."""
    if opened and content.startswith(opened):
        opened = ""
    elif opened and content.startswith(profile.think_start):
        opened = profile.think_lead
    # What closes the content before tool calls (harmony's <|end|>) is not content: the
    # provider dropped it with the calls it parsed.
    answer = content.partition(profile.think_end)[2]
    unsplit_tail = profile.content_frame(answer, tool_turn)[1]
    bodies = [opened + content + unsplit_tail]
    if opened and profile.bare_think_end and content.startswith(profile.think_end):
        # A model that decided not to think wrote think_end alone (MiniMax-M3, adaptive).
        bodies.insert(0, content + unsplit_tail)
    if mode == "open" and content.startswith(profile.think_start):
        # A provider that keeps the think block in content re-opens it there (MiniMax-M2
        # on vLLM), although the prompt already holds think_start; the count decides.
        bodies.insert(0, content[len(profile.think_start) :] + unsplit_tail)
    return bodies


def _tool_call_markups(
    completion: Completion, content: str, profile: ModelProfile, notes: list[str]
) -> list[ToolCallMarkup]:
    """The readings of the structured tool calls as the profile's markup (one empty markup for
    a turn without calls, or calls the profile cannot write)."""
    markups = [ToolCallMarkup("")]
    if completion.tool_calls:
        try:
            markups = profile.tool_call_markups(completion.tool_calls, content)
        except ToolCallFormatError as exc:
            notes.append(f"{TOOL_CALLS_UNREBUILT}: {exc}")
        else:
            notes.append(TOOL_CALLS_REBUILT)
    return markups


def _segmented_reading(
    completion: Completion, prompt_text: str, profile: ModelProfile
) -> CompletionReading:
    """The family's own readings (``ModelProfile.segmented``), as segments and their texts."""
    segmented = profile.segmented
    read = segmented.read(completion, prompt_text)
    return CompletionReading(
        texts=["".join(segment.text for segment in segments) for segments in read.readings],
        notes=list(read.notes),
        complete=read.complete,
        text_notes=list(read.reading_notes),
        segments=list(read.readings),
        content_spans=list(read.content_spans),
        encode_segments=segmented.encode,
    )


def batch_reading(
    completion: Completion, prompt_text: str, profile: ModelProfile, tokenizer: Any
) -> CompletionReading:
    """``read_completion``, read once for all the steps of a batch (``reconstruct.batch``)."""
    return _once_per_batch(tokenizer, read_completion, completion, prompt_text, profile)


def _once_per_batch(
    tokenizer: Any, work: Any, completion: Completion, prompt_text: str, *args: Any
) -> Any:
    """``work(completion, prompt_text, *args)``, kept in a batch tokenizer's ``memo`` for the
    batch's later steps (worked out anew for another completion or prompt)."""
    memo = getattr(tokenizer, "memo", None) if isinstance(tokenizer, tok.EncoderView) else None
    if memo is None:
        return work(completion, prompt_text, *args)
    key = (work, id(completion))
    entry = memo.get(key)
    if entry is not None and entry[0] is completion and entry[1] == prompt_text:
        return entry[2]
    result = work(completion, prompt_text, *args)
    memo[key] = (completion, prompt_text, result)
    return result


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
        if completion.logprob_ids is not None:
            return reconstruct_from_logprob_ids(stored, tokenizer, profile, text_sample)
        if completion.logprob_bytes is not None:
            return reconstruct_from_logprobs(stored, tokenizer, profile, text_sample)
        return text_sample
    prompt_ids = list(completion.prompt_token_ids)
    completion_ids = list(completion.completion_token_ids)
    server_ids = prompt_ids + completion_ids
    text_check = text_check_of(text_sample, server_ids)
    # A prompt draftgen could not render is no doubt about the server's own ids.
    template_agrees = text_sample.reason == PROMPT_RENDER_FAILED or (
        text_sample.input_ids[: text_sample.prompt_len] == prompt_ids
    )
    verdict = verify_server_ids(
        stored=stored,
        profile=profile,
        prompt_ids=prompt_ids,
        completion_ids=completion_ids,
        template_agrees=template_agrees,
        special_text=special_text_of_prompt(stored, tokenizer, profile, prompt_ids),
    )
    return TokenSample(
        key=stored.key,
        input_ids=server_ids,
        prompt_len=len(prompt_ids),
        verified=verdict.verified,
        reason=verdict.reason,
        detail=verdict.detail,
        truncated=completion.finish_reason not in COMPLETE_FINISH_REASONS,
        id_source=PROOF_IDS,
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
    if text_sample.reason == PROMPT_RENDER_FAILED:
        return text_sample
    table = token_bytes_table(tokenizer)
    logprob_ids = [table.get(token) for token in completion.logprob_bytes or ()]
    if None in logprob_ids:
        return unusable("a logprob token's bytes are not one token of this tokenizer")
    prompt_text, prompt_ids = recorded_prompt(stored, tokenizer, profile)
    reading = batch_reading(completion, prompt_text, profile, tokenizer)
    if any(REASONING_UNCLOSED in reading.notes_of(i) for i in range(len(reading.texts))):
        # The content's logprobs say nothing of whether the reasoning before it was closed.
        return unusable("the answer may have ended inside its reasoning")
    content = profile.strip_end_of_turn(completion.content or "")
    suffix = profile.turn_end(False, content) if reading.complete else ""
    tail = content + suffix
    expected = completion.completion_tokens
    for head, ends in _logprob_frames(reading, tokenizer, tail, suffix):
        if head is None:
            # The tokenizer changes this text (Qwen's normalise to NFC): not the generated ids.
            return unusable("the text before the content does not encode back to itself")
        for end in ends:
            ids = head + logprob_ids + end
            if expected is not None and len(ids) != expected:
                continue
            return _logprob_sample(
                stored,
                tokenizer,
                profile,
                text_sample,
                (prompt_text, prompt_ids),
                ids,
                logprob_text=tok.decode(tokenizer, logprob_ids),
                notes=reading.notes,
                complete=reading.complete,
            )
    return unusable("no reading with the logprob tokens matches the completion count")


def reconstruct_from_logprob_ids(
    stored: StoredCompletion, tokenizer: Any, profile: ModelProfile, text_sample: TokenSample
) -> TokenSample:
    """Every generated id from logprobs that name them (vLLM's ``token_id:N``, which cover the
    reasoning, the markup and the end of turn too), the prompt's from the recorded rendering,
    proven by the counts; else the text sample, saying why not.

    Logprobs that leave out the stop token (one short of the count, the answer complete) are
    completed with the template's end of turn, and the detail says so.
    """
    completion = stored.completion
    if text_sample.reason == PROMPT_RENDER_FAILED:
        return text_sample
    prompt_text, prompt_ids = recorded_prompt(stored, tokenizer, profile)
    ids = list(completion.logprob_ids or ())
    expected = completion.completion_tokens
    complete = completion.finish_reason in COMPLETE_FINISH_REASONS
    notes: list[str] = []
    if expected is not None and complete and len(ids) < expected:
        content = profile.strip_end_of_turn(completion.content or "")
        end = tok.encode(tokenizer, profile.turn_end(bool(completion.tool_calls), content))
        if end and len(ids) + len(end) == expected and ids[-len(end) :] != end:
            ids += end
            notes.append("end_of_turn_not_in_logprobs: the count says it ends the completion")
    if expected is not None and len(ids) != expected:
        detail = "; ".join(
            d
            for d in (
                text_sample.detail,
                f"logprobs_unusable: {len(ids)} ids from logprobs, provider {expected}",
            )
            if d
        )
        return replace(text_sample, detail=detail)
    return _logprob_sample(
        stored,
        tokenizer,
        profile,
        text_sample,
        (prompt_text, prompt_ids),
        ids,
        logprob_text=tok.decode(tokenizer, ids),
        notes=notes,
        complete=complete,
        whole=True,
    )


def _logprob_sample(
    stored: StoredCompletion,
    tokenizer: Any,
    profile: ModelProfile,
    text_sample: TokenSample,
    prompt: tuple[str, list[int]],
    ids: list[int],
    *,
    logprob_text: str,
    notes: list[str],
    complete: bool,
    whole: bool = False,
) -> TokenSample:
    """The sample of completion ``ids`` taken from logprobs (``whole``: all of them, else the
    content's within a reading), judged by ``verify_logprob_ids`` and the prompt's doubts."""
    prompt_text, prompt_ids = prompt
    verdict = verify_logprob_ids(
        stored=stored,
        profile=profile,
        prompt_ids=prompt_ids,
        logprob_text=logprob_text,
        notes=notes,
        special_text=special_text_of_prompt(stored, tokenizer, profile, prompt_ids),
        completion_ids=ids if whole else None,
    )
    if verdict.verified:
        doubts = prompt_doubts(stored, tokenizer, profile, prompt_text, prompt_ids)
        verdict = with_doubts(verdict, doubts)
    return TokenSample(
        key=stored.key,
        input_ids=prompt_ids + ids,
        prompt_len=len(prompt_ids),
        verified=verdict.verified,
        reason=verdict.reason,
        detail=verdict.detail,
        truncated=not complete,
        id_source=PROOF_LOGPROBS,
        text_check=text_check_of(text_sample, prompt_ids + ids),
    )


def _logprob_frames(reading: CompletionReading, tokenizer: Any, tail: str, suffix: str) -> Any:
    """(ids before the content, candidate ids after it) of each reading that holds the content;
    (None, ()) where the text before it does not encode back to itself. A segmented family's
    reading is cut at its content's segments, any other's text at ``tail``."""
    for index, text in enumerate(reading.texts):
        if reading.segments:
            start, stop = reading.content_spans[index]
            if start < 0:
                continue
            segments = reading.segments[index]
            head = reading.encode_segments(tokenizer, segments[:start])
            before = "".join(segment.text for segment in segments[:start])
            ends: tuple[list[int], ...] = (
                reading.encode_segments(tokenizer, segments[stop:]),
                [],
            )
        else:
            if not text.endswith(tail):
                continue
            before = text[: len(text) - len(tail)]
            head = tok.encode(tokenizer, before)
            ends = (tok.encode(tokenizer, suffix), [])
        if tok.decode(tokenizer, head) != before:
            yield None, ()
            return
        yield head, ends


def renderer_for(tokenizer: Any, profile: ModelProfile) -> ChatRenderer:
    """The renderer of a tokenizer (unwrapped from a batch cache) and profile, cached."""
    inner = getattr(tokenizer, "inner", tokenizer)
    key = (id(inner), profile.name)
    cached = _RENDERERS.get(key)
    if cached is None or cached.tokenizer is not inner:
        cached = _RENDERERS[key] = ChatRenderer(inner, profile)
    return cached


_RENDERERS: dict[tuple[int, str], ChatRenderer] = {}


def recorded_prompt(
    stored: StoredCompletion, tokenizer: Any, profile: ModelProfile
) -> tuple[str, list[int]]:
    """The prompt the request was built with, as text and as the ids the model was given.

    It is the rendering recorded with the request; a store from before renderings were recorded
    is rendered now with the template's defaults. Raises ``RenderError`` if rendering failed.
    """
    rendering = stored.rendering
    if rendering is None:
        rendering = renderer_for(tokenizer, profile).render(stored.messages, stored.tools)
    if rendering.error:
        raise RenderError(rendering.error)
    if rendering.ids is not None:
        return rendering.text, list(rendering.ids)
    # Not ChatRenderer.prompt_ids: ``tokenizer`` may be a batch's pre-encoded cache.
    return rendering.text, tok.encode(tokenizer, rendering.text)


def prompt_doubts(
    stored: StoredCompletion,
    tokenizer: Any,
    profile: ModelProfile,
    prompt_text: str,
    prompt_ids: list[int],
) -> list[tuple[str, str]]:
    """What the counts cannot prove about the prompt: its thinking mode, or its date."""
    doubts = []
    mode = _mode_doubt(stored, tokenizer, profile, prompt_text, prompt_ids)
    if mode:
        doubts.append((PROMPT_MODE_UNPROVEN, mode))
    date = _date_doubt(stored, tokenizer, profile, prompt_text)
    if date:
        doubts.append((PROMPT_DATE_UNPROVEN, date))
    return doubts


def _mode_doubt(
    stored: StoredCompletion,
    tokenizer: Any,
    profile: ModelProfile,
    prompt_text: str,
    prompt_ids: list[int],
) -> str:
    """Why the thinking mode of the prompt is unproven ("" if it is proven).

    The response shows the mode the server rendered: reasoning (or a closed think block in the
    content) a thinking prompt, none a non-thinking one. When it shows the recorded mode, that is
    proof. When it does not, the counts must rule out the other mode: a rendering with the
    thinking switch the other way that ends in the other mode, has the same token count, and
    after which the completion can also be read with the provider's count, is what the server
    may have rendered instead (``<think>`` and ``</think>`` are one token each).
    """
    variable = profile.thinking_variable
    if not variable:
        return ""
    mode = profile.prompt_mode(prompt_text)
    completion = stored.completion
    shows_thinking = bool(completion.reasoning) or profile.think_end in (completion.content or "")
    if shows_thinking == (mode != "closed"):
        return ""
    rendering = stored.rendering
    variables = dict(rendering.variables) if rendering is not None else {}
    instant = (rendering.instant if rendering is not None else None) or _recorded_or_now(stored)
    renderer = renderer_for(tokenizer, profile)
    for value in profile.thinking_values:
        if variables.get(variable) is value or (
            not isinstance(value, bool) and variables.get(variable) == value
        ):
            continue
        other = {**variables, variable: value}
        try:
            text = renderer.text(stored.messages, stored.tools, other, instant)
        except Exception:  # the other switch may not render at all: then it is no rival
            continue
        if text == prompt_text or profile.prompt_mode(text) == mode:
            continue
        if renderer.chat_ids:
            rival_ids = renderer.render(stored.messages, stored.tools, other, instant).ids or ()
            same = len(rival_ids) == len(prompt_ids)
        else:
            same = _same_count(tokenizer, prompt_text, len(prompt_ids), text)
        if same and _reading_fits(completion, text, tokenizer, profile):
            said = "returned reasoning" if shows_thinking else "returned no reasoning"
            return (
                f"the prompt rendered with {variable}={value} has the same token count and the "
                f"response {said}, so the {mode} thinking prompt is not proven"
            )
    return ""


def _reading_fits(
    completion: Completion, prompt_text: str, tokenizer: Any, profile: ModelProfile
) -> bool:
    """Whether some reading of the completion after this prompt has the provider's count."""
    expected = completion.completion_tokens
    reading = read_completion(completion, prompt_text, profile)
    return any(len(reading.ids(tokenizer, i)) == expected for i in range(len(reading.texts)))


def _date_doubt(
    stored: StoredCompletion, tokenizer: Any, profile: ModelProfile, prompt_text: str
) -> str:
    """Why the date in the prompt is unproven: the request spanned midnight (UTC) and the
    template renders another text on the later day ("" otherwise)."""
    rendering = stored.rendering
    if rendering is None or rendering.instant is None or stored.stored_at is None:
        return ""
    sent = rendering.instant
    received = dt.datetime.fromtimestamp(stored.stored_at, dt.UTC).replace(microsecond=0)
    if received.date() == sent.date():
        return ""
    renderer = renderer_for(tokenizer, profile)
    try:
        later = renderer.text(stored.messages, stored.tools, dict(rendering.variables), received)
    except Exception:
        return ""
    if later == prompt_text:
        return ""
    return (
        f"the template stamps the date and the request was in flight across midnight UTC "
        f"({sent.isoformat()} to {received.isoformat()}), so the server's date is unknown"
    )


def _recorded_or_now(stored: StoredCompletion) -> dt.datetime:
    if stored.stored_at is not None:
        return dt.datetime.fromtimestamp(stored.stored_at, dt.UTC).replace(microsecond=0)
    return dt.datetime.now(dt.UTC).replace(microsecond=0)


def _same_count(tokenizer: Any, text: str, count: int, other: str) -> bool:
    """Whether ``other`` encodes to ``count`` ids, as ``text`` does.

    Only what follows their common prefix is encoded, from the end of the last special token
    in it: ids never merge across a special token, so the prefix's ids are the same in both.
    """
    common = 0
    for a, b in zip(text, other, strict=False):
        if a != b:
            break
        common += 1
    cut = _last_special_end(tokenizer, text, common)
    if cut == 0:
        return len(tok.encode(tokenizer, other)) == count
    return len(tok.encode(tokenizer, text[cut:])) == len(tok.encode(tokenizer, other[cut:]))


# How far back from a divergence the last special token is looked for (then all is encoded).
_SPECIAL_WINDOW = 4096


def _last_special_end(tokenizer: Any, text: str, limit: int) -> int:
    pattern = special_pattern(getattr(tokenizer, "inner", tokenizer))
    start = max(0, limit - _SPECIAL_WINDOW)
    end = 0
    for match in pattern.finditer(text, start, limit) if pattern is not None else ():
        end = match.end()
    return end


def reconstruct_from_text(
    stored: StoredCompletion, tokenizer: Any, profile: ModelProfile
) -> TokenSample:
    completion = stored.completion
    try:
        prompt_text, prompt_ids = recorded_prompt(stored, tokenizer, profile)
    except RenderError as exc:
        return TokenSample(
            key=stored.key,
            input_ids=[],
            prompt_len=0,
            verified=False,
            reason=PROMPT_RENDER_FAILED,
            detail=f"the chat template could not render this prompt: {exc}",
            truncated=completion.finish_reason not in COMPLETE_FINISH_REASONS,
            id_source=PROOF_TEXT,
        )
    reading = batch_reading(completion, prompt_text, profile, tokenizer)
    encoded = [reading.ids(tokenizer, i) for i in range(len(reading.texts))]
    expected = completion.completion_tokens
    chosen = next((i for i, ids in enumerate(encoded) if len(ids) == expected), 0)
    completion_ids = encoded[chosen]
    unproven = _count_neutral_arguments(profile, reading, encoded, chosen, expected)
    unproven += _reasoning_end_unproven(
        reading, encoded, chosen, expected, bool(completion.tool_calls)
    )
    repair = unchecked = None
    if expected is not None and len(completion_ids) != expected:
        counts = [len(ids) for ids in encoded]
        repair, unchecked = _whitespace_repair(
            completion, prompt_text, profile, tokenizer, reading.texts, counts
        )
    verdict = verify_sample(
        stored=stored,
        profile=profile,
        prompt_ids=prompt_ids,
        completion_ids=completion_ids,
        completion_text=reading.texts[chosen],
        decoded_text=tok.decode(tokenizer, completion_ids),
        notes=reading.notes_of(chosen) + ([unchecked] if unchecked else []) + unproven,
        whitespace_repair=repair,
        special_text=special_text_of_prompt(stored, tokenizer, profile, prompt_ids),
    )
    if verdict.verified:
        verdict = with_doubts(
            verdict, prompt_doubts(stored, tokenizer, profile, prompt_text, prompt_ids)
        )
    return TokenSample(
        key=stored.key,
        input_ids=prompt_ids + completion_ids,
        prompt_len=len(prompt_ids),
        verified=verdict.verified,
        reason=verdict.reason,
        detail=verdict.detail,
        truncated=not reading.complete,
        id_source=PROOF_TEXT,
    )


def _reasoning_end_unproven(
    reading: CompletionReading,
    encoded: list[list[int]],
    chosen: int,
    expected: int | None,
    tool_turn: bool = False,
) -> list[str]:
    """``[REASONING_END_UNPROVEN]`` when the answer reads both as one that closed its reasoning
    and as one that ended inside it, and the count does not prove the chosen one: none was
    given; another reading on the other side has the chosen one's count; or, in a turn without
    tool calls, the count picks a close the text does not show. The close is one or more ids,
    so an answer that ended inside its reasoning and whose ids are not the canonical encoding of
    its text (a re-split adding ids, as often as not one) has the closed reading's count:
    ``think_end`` is never put in such a turn's ids unproven. A turn with tool calls and no
    content is closed as the family's way to call (Kimi writes ``</think>`` then its calls); a
    call inside unclosed reasoning with a re-split is the rare case the count cannot see there.
    (A re-split that removes ids is rare too: the unclosed reading is taken.)"""
    unclosed = [REASONING_UNCLOSED in reading.notes_of(i) for i in range(len(encoded))]
    if not any(unclosed):
        return []
    rivals = [i for i in range(len(encoded)) if unclosed[i] != unclosed[chosen]]
    if expected is None and rivals:
        return [REASONING_END_UNPROVEN]
    if len(encoded[chosen]) != expected or not rivals:
        return []
    if not tool_turn and not unclosed[chosen] and any(len(encoded[i]) < expected for i in rivals):
        return [REASONING_END_UNPROVEN]
    if any(len(encoded[i]) == expected and encoded[i] != encoded[chosen] for i in rivals):
        return [REASONING_END_UNPROVEN]
    return []


def _count_neutral_arguments(
    profile: ModelProfile,
    reading: CompletionReading,
    encoded: list[list[int]],
    chosen: int,
    expected: int | None,
) -> list[str]:
    """``[TOOL_ARGUMENTS_COUNT_NEUTRAL]`` when the engine dumps tool-call arguments
    (``ModelProfile.tool_arguments_parsed``: the returned text is its spelling, not the model's)
    and another spelling of the same calls has the chosen reading's count with other ids."""
    framings = reading.framings
    if not profile.tool_arguments_parsed or not framings or expected is None:
        return []
    if len(encoded[chosen]) != expected:
        return []
    if any(
        i != chosen
        and framings[i] == framings[chosen]
        and len(encoded[i]) == expected
        and encoded[i] != encoded[chosen]
        for i in range(len(encoded))
    ):
        return [TOOL_ARGUMENTS_COUNT_NEUTRAL]
    return []


def whitespace_repairs(
    completion: Completion, prompt_text: str, profile: ModelProfile
) -> list[tuple[str, str, list[str]]]:
    """(lead, trail, reading texts) for each edge whitespace a provider may have stripped, in
    the order ``whitespace_repair`` tries them."""
    return list(_repaired_readings(completion, prompt_text, profile))


def _repaired_readings(
    completion: Completion, prompt_text: str, profile: ModelProfile
) -> Iterator[tuple[str, str, list[str]]]:
    """``whitespace_repairs`` one repair at a time: a long answer's readings are full copies of
    it, so only one repair's are held at once."""
    for lead, trail in _EDGE_PAIRS:
        repaired = copy.copy(completion)  # not ``replace``: 15 of these a sample
        repaired.content = lead + (completion.content or "") + trail
        yield lead, trail, read_completion(repaired, prompt_text, profile).texts


# Whitespace restored before and after the content, in the order repairs are tried.
_EDGE_PAIRS = [
    (lead, trail) for lead in EDGE_WHITESPACE for trail in EDGE_WHITESPACE if lead or trail
]


def whitespace_repair(
    completion: Completion,
    prompt_text: str,
    profile: ModelProfile,
    tokenizer: Any,
    texts: list[str] | None = None,
    counts: list[int] | None = None,
) -> str | None:
    """If whitespace restored at the content's edges makes the count match, say which.

    ``texts`` are the readings of the completion as it came (their ids are at hand, ``counts``
    their lengths when given): a repaired reading is counted from one of them by encoding only
    what lies between the special tokens around the change, or for a long text only the pieces
    around its changed edges (``CountFrom``).
    """
    return _whitespace_repair(completion, prompt_text, profile, tokenizer, texts, counts)[0]


def _whitespace_repair(
    completion: Completion,
    prompt_text: str,
    profile: ModelProfile,
    tokenizer: Any,
    texts: list[str] | None = None,
    counts: list[int] | None = None,
) -> tuple[str | None, str | None]:
    """(``whitespace_repair``'s answer, a note when the repairs could not be counted): a long
    text whose repaired counts cannot be worked out from pieces is not encoded whole once per
    repair (15 full copies: 3 GB for a 15 MB answer), it is left unrepaired and says so."""
    expected = completion.completion_tokens
    known = texts or read_completion(completion, prompt_text, profile).texts
    if profile.segmented is not None:
        # Segments are encoded each on its own: count every repaired reading whole.
        if _is_long(known):
            return None, _unchecked(completion, "its family encodes it segment by segment")
        for lead, trail in _EDGE_PAIRS:
            content = lead + (completion.content or "") + trail
            reading = read_completion(replace(completion, content=content), prompt_text, profile)
            if any(len(reading.ids(tokenizer, i)) == expected for i in range(len(reading.texts))):
                return _repair_text(lead, trail), None
        return None, None
    known_counts = {id(text): (text, n) for text, n in zip(known, counts or (), strict=False)}
    for lead, trail, plan in _repair_plan(completion, prompt_text, profile, tokenizer, known):
        for pieces in plan:
            count = count_from(tokenizer, pieces, known_counts)
            if count is None:
                return None, _unchecked(
                    completion, "its count cannot be worked out from pieces around its edges"
                )
            if count == expected:
                return _repair_text(lead, trail), None
    return None, None


def _repair_text(lead: str, trail: str) -> str:
    return f"restoring {lead!r} before and {trail!r} {REPAIR_WOULD_MATCH}"


def _unchecked(completion: Completion, why: str) -> str:
    size = len(completion.content or "")
    return (
        f"{WHITESPACE_UNCHECKED}: the content is {size:,} characters and {why}, so no "
        "whitespace was restored at its edges (a whole encode of it for each of 15 repairs)"
    )


def _is_long(texts: list[str]) -> bool:
    return any(len(text) > long_text.LONG_TEXT_CHARS for text in texts)


def _repair_plan(
    completion: Completion,
    prompt_text: str,
    profile: ModelProfile,
    tokenizer: Any,
    known: list[str],
) -> list[tuple[str, str, list[tuple[str, ...]]]]:
    """Each repair with, for each of its readings, the texts its count is made of
    (``CountFrom.pieces``); worked out once per batch (``repair_texts`` lists them first)."""
    return _once_per_batch(
        tokenizer, _plan_repairs, completion, prompt_text, profile, tokenizer, known
    )


def _plan_repairs(
    completion: Completion,
    prompt_text: str,
    profile: ModelProfile,
    tokenizer: Any,
    known: list[str],
) -> list[tuple[str, str, list[tuple[str, ...]]]]:
    counter = CountFrom(tokenizer, known)
    plan = []
    for lead, trail, repaired in _repaired_readings(completion, prompt_text, profile):
        plan.append((lead, trail, [counter.pieces(text) for text in repaired]))
        if any(not pieces for pieces in plan[-1][2]):
            break  # a reading that cannot be counted: the repairs after it are not tried
    return plan


def count_from(
    tokenizer: Any, pieces: tuple[str, ...], known: dict[int, tuple[str, int]] | None = None
) -> int | None:
    """The count ``CountFrom.pieces`` stand for: a whole text's, or a known text's with pieces of
    it changed; None for no pieces (a text that cannot be counted so). ``known``: counts of known
    texts at hand, by ``id``."""
    if not pieces:
        return None
    if len(pieces) == 1:
        return tok.count(tokenizer, pieces[0])
    base = pieces[0]
    entry = (known or {}).get(id(base))
    total = entry[1] if entry is not None and entry[0] is base else tok.count(tokenizer, base)
    return total + _change(tokenizer, pieces)


def _change(tokenizer: Any, pieces: tuple[str, ...]) -> int:
    """How many ids ``pieces`` (a known text, then its changed pieces and theirs instead) add."""
    olds, news = pieces[1::2], pieces[2::2]
    return sum(
        tok.count(tokenizer, new) - tok.count(tokenizer, old)
        for old, new in zip(olds, news, strict=True)
    )


def repair_texts(stored: StoredCompletion, tokenizer: Any, profile: ModelProfile) -> list[str]:
    """What ``reconstruct_from_text`` will encode to try whitespace repairs on ``stored`` (none
    when a reading has the provider's count), so a batch can encode them all at once."""
    completion = stored.completion
    expected = completion.completion_tokens
    if expected is None or profile.segmented is not None:
        return []  # a segmented family's readings are not encoded as texts
    try:
        prompt_text, _ = recorded_prompt(stored, tokenizer, profile)
    except RenderError:
        return []
    texts = batch_reading(completion, prompt_text, profile, tokenizer).texts
    if any(tok.count(tokenizer, text) == expected for text in texts):
        return []
    plan = _repair_plan(completion, prompt_text, profile, tokenizer, texts)
    return [piece for _, _, counts in plan for pieces in counts for piece in pieces]


class CountFrom:
    """Token counts of texts that differ a little from texts whose ids are known.

    Ids never merge across a special token (checked per tokenizer by ``splits_at_specials``):
    then a text's count is a known text's count, less the ids of the known text between the last
    special token before the first difference and the first one after the last difference, plus
    the ids of the new text's span there. Without that proof the whole text is encoded. Where
    that span is long (a long answer with whitespace restored at both its edges), only the
    pieces around its changes are (``long_text.changed_pieces``), or the text is not counted.
    """

    def __init__(self, tokenizer: Any, known: list[str]) -> None:
        self.tokenizer = tokenizer
        inner = getattr(tokenizer, "inner", tokenizer)
        pattern = special_pattern(inner) if splits_at_specials(inner) else None
        self.proven = pattern is not None
        self.cutter = long_text.cutter(inner)
        # Each known text with where its special tokens start and end: positions, not slices
        # (a slice per special token of a long text would be a copy of it each).
        self.known: list[tuple[str, array, array]] = []
        for text in known:
            starts, ends = array("q"), array("q")
            for match in pattern.finditer(text) if pattern is not None else ():
                starts.append(match.start())
                ends.append(match.end())
            self.known.append((text, starts, ends))

    def pieces(self, text: str) -> tuple[str, ...]:
        """What the count of ``text`` is made of (``count_from``): ``(text,)``, or a known text
        and pairs of its pieces that change and what ``text`` has there instead; ``()`` for a
        long text that cannot be counted without encoding it whole."""
        windows = self._windows(text)
        if self.proven and windows:
            base, start, end = windows[0]
            if end - start <= long_text.LONG_TEXT_CHARS:
                return base, base[start:end], text[start : end + len(text) - len(base)]
        elif len(text) <= long_text.LONG_TEXT_CHARS:
            return (text,)
        if self.cutter is not None:
            for base, start, end in windows:
                changed = long_text.changed_pieces(self.cutter, base, text, start, end)
                if changed is not None:
                    return (base, *changed)
        return ()

    def count(self, text: str) -> int | None:
        return count_from(self.tokenizer, self.pieces(text))

    def _windows(self, text: str) -> list[tuple[str, int, int]]:
        """(known text, start, end) of each known text, the smallest span first: ``text`` begins
        as the known text up to ``start`` and ends as it from ``end``, both special tokens' edges
        (or the texts' ends); without proof of those, each known text whole.

        The span runs from the last special token's end within the texts' common beginning to
        the first special token's start within their common ending.
        """
        windows = []
        for base, starts, ends in self.known:
            if not self.proven:
                windows.append((base, 0, len(base)))
                continue
            same_start = long_text.common_prefix(base, text)
            same_end = long_text.common_suffix(base, text)
            at = bisect.bisect_right(ends, same_start)
            start = ends[at - 1] if at else 0
            tail = len(text) - len(base)  # where base[i:] would begin in text: i + tail
            least = max(start, start - tail, len(base) - same_end)
            at = bisect.bisect_left(starts, least)
            end = starts[at] if at < len(starts) else len(base)
            windows.append((base, start, end))
        return sorted(windows, key=lambda window: window[2] - window[1])


def strip_is_invisible(content: str, tokenizer: Any) -> bool:
    """Whether whitespace stripped from this content's edges would leave the token count as is.

    Such a strip cannot be seen in the counts, so content from a provider known to strip is
    unprovable whenever this holds (a leading space merges into the first word's token).
    """
    return strips_are_invisible([content], tokenizer)[0]


def strips_are_invisible(contents: list[str], tokenizer: Any, batch: int = 256) -> list[bool]:
    """``strip_is_invisible`` of each content, the texts encoded in batch calls; a long content
    counted from the pieces around its edges (``CountFrom``), or, where it cannot be, taken as
    invisible (unprovable) rather than encoded whole 16 times."""
    variants = len(EDGE_WHITESPACE) ** 2
    invisible: list[bool | None] = [
        _long_strip_is_invisible(content, tokenizer) if _is_long([content]) else None
        for content in contents
    ]
    short = [index for index, known in enumerate(invisible) if known is None]
    for start in range(0, len(short), batch):
        chunk = [contents[index] for index in short[start : start + batch]]
        texts = [
            lead + content + trail
            for content in chunk
            for lead in EDGE_WHITESPACE
            for trail in EDGE_WHITESPACE
        ]
        counts = [len(ids) for ids in tok.encode_batch(tokenizer, texts)]
        for offset, content in enumerate(chunk):
            # Both edges at once too: a strip takes leading and trailing whitespace together.
            own, *others = counts[offset * variants : (offset + 1) * variants]
            invisible[short[start + offset]] = bool(content) and own in others
    return [bool(hidden) for hidden in invisible]


def _long_strip_is_invisible(content: str, tokenizer: Any) -> bool:
    counter = CountFrom(tokenizer, [content])
    for lead, trail in _EDGE_PAIRS:
        pieces = counter.pieces(lead + content + trail)
        if len(pieces) < 3 or _change(tokenizer, pieces) == 0:
            return True  # not countable from pieces: unprovable, as an invisible strip is
    return False

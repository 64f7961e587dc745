"""Kimi K3 (Moonshot): XTML turns, the tokenizer encoding each piece of the markup on its own.

K3 ships no chat template: its tokenizer's ``apply_chat_template`` builds segments
(``encoding_k3.build_chat_segments``) and encodes them one by one, special tokens allowed only in
the four structural ones (``<|open|>``, ``<|close|>``, ``<|sep|>``, ``<|end_of_msg|>``). The model
generates the same layout after ``<|open|>message role="assistant"<|sep|><|open|>think<|sep|>``
(or ``<|open|>response<|sep|>`` with thinking off): reasoning, ``<|close|>think<|sep|>``, the
response channel, calls as ``call``/``argument`` elements with typed values, then
``<|close|>message<|sep|><|end_of_msg|>`` (``<|end_of_msg|>`` is the eos). Its ids follow the
segment boundaries, so a completion is rebuilt as segments too (``XtmlTurns``), and vLLM's K3
parsers show what reaches the text fields: the think channel is ``reasoning``, the response
channel ``content``, the calls ``tool_calls`` (arguments re-dumped from typed values).
"""

from __future__ import annotations

import json
import re
from typing import Any, NamedTuple

from draftgen.profiles.base import REASONING_UNCLOSED, ModelProfile, Segment, SegmentedReading

OPEN = "<|open|>"
CLOSE = "<|close|>"
SEP = "<|sep|>"
END_OF_MSG = "<|end_of_msg|>"
THINK_OPEN = f"{OPEN}think{SEP}"
THINK_CLOSE = f"{CLOSE}think{SEP}"
RESPONSE_OPEN = f"{OPEN}response{SEP}"
RESPONSE_CLOSE = f"{CLOSE}response{SEP}"
TOOLS_OPEN = f"{OPEN}tools{SEP}"
MESSAGE_CLOSE = f"{CLOSE}message{SEP}"

# The markup of K3's generated calls (``<|open|>tools<|sep|><|open|>call tool=... index=...``).
KIMI_K3_TOOL_CALLS = "kimi-k3"
COMPLETE_FINISH_REASONS = ("stop", "tool_calls")
NO_REASONING_SPLIT = "no_reasoning_split"
LEAKED_END_OF_TURN = "leaked_end_of_turn"


# -- segments ------------------------------------------------------------------------------------


def control(text: str) -> Segment:
    return Segment(text, True)


def plain(text: str) -> list[Segment]:
    """Text as one segment with special tokens disallowed (none when empty, as K3 drops them)."""
    return [Segment(text)] if text else []


def open_tag(tag: str, attributes: tuple[tuple[str, object], ...] = ()) -> list[Segment]:
    """``<|open|>tag key="value"...<|sep|>``: the tag, each `` key``, ``="``, value and ``"``
    are segments of their own; values escape ``&`` and ``"`` only."""
    segments = [control(OPEN), *plain(tag)]
    for key, value in attributes:
        escaped = str(value).replace("&", "&amp;").replace('"', "&quot;")
        segments += [*plain(f" {key}"), *plain('="'), *plain(escaped), *plain('"')]
    return [*segments, control(SEP)]


def close_tag(tag: str) -> list[Segment]:
    return [control(CLOSE), *plain(tag), control(SEP)]


# Between the reasoning and the answer: the think channel closes, the response channel opens.
THINK_RUN = (*close_tag("think"), *open_tag("response"))
# The end of every turn, after the response channel (and the calls).
MESSAGE_END = (*close_tag("message"), control(END_OF_MSG))

_CONTROLS = re.compile("|".join(re.escape(t) for t in (OPEN, CLOSE, SEP, END_OF_MSG)))
_ATTRIBUTE = re.compile(r'( [^="]*)(=")?([^"]*)(")?')


def segment_markup(text: str) -> list[Segment]:
    """Generated XTML text cut as K3's encoder cuts it: control tokens alone, a tag header into
    its name and each attribute's pieces, any other text whole. Cut-off headers are cut the same
    way as far as they go. Text holding a control token's spelling is taken for markup."""
    segments: list[Segment] = []
    state = ""
    position = 0
    for match in _CONTROLS.finditer(text):
        segments += _between(text[position : match.start()], state)
        segments.append(control(match.group()))
        state = match.group()
        position = match.end()
    return segments + _between(text[position:], state)


def _between(chunk: str, after: str) -> list[Segment]:
    if after != OPEN or not chunk:
        return plain(chunk)
    tag, space, rest = chunk.partition(" ")
    segments = plain(tag)
    rest = space + rest
    while rest:
        match = _ATTRIBUTE.match(rest)
        if match is None or not match.group(0):
            return segments + plain(rest)
        segments += [Segment(piece) for piece in match.groups() if piece]
        rest = rest[match.end() :]
    return segments


# -- tool calls ----------------------------------------------------------------------------------

# How a call's non-string argument values may have been spelled: as K3's encoder writes a
# parsed value (``json.dumps`` defaults, what the model was trained on), or compactly.
VALUE_STYLES = ("spaced", "compact")


def value_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "object" if isinstance(value, dict) else "array"


def value_text(value: Any, style: str = "spaced") -> str:
    if isinstance(value, str):
        return value
    separators = (",", ":") if style == "compact" else (", ", ": ")
    return json.dumps(value, ensure_ascii=False, separators=separators)


def call_parts(call: Any, index: int) -> tuple[str, dict | None, str]:
    """(name, arguments object or None, raw arguments text) of an OpenAI-style call."""
    if not isinstance(call, dict):
        raise ValueError(f"tool_calls[{index}] is not an object")
    function = call.get("function") if isinstance(call.get("function"), dict) else call
    name = function.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError(f"tool_calls[{index}] has no function name")
    raw = function.get("arguments")
    if isinstance(raw, dict):
        return name, raw, ""
    if not raw:
        return name, {}, ""
    try:
        parsed = json.loads(raw)
    except (TypeError, ValueError):
        parsed = None
    return name, parsed if isinstance(parsed, dict) else None, str(raw)


def calls_segments(calls: list, style: str = "spaced") -> list[Segment]:
    """``<|open|>tools<|sep|>`` + one ``call`` element per call (``index`` from 1), each argument
    an ``argument`` element typed by its JSON value; arguments that are not a JSON object go in a
    ``json`` element as they are. Raises ``ValueError`` for a call it cannot write."""
    segments = open_tag("tools")
    for index, call in enumerate(calls, 1):
        name, arguments, raw = call_parts(call, index - 1)
        segments += open_tag("call", (("tool", name), ("index", index)))
        if arguments is None:
            segments += [*open_tag("json", (("type", "object"),)), *plain(raw), *close_tag("json")]
        for key, value in (arguments or {}).items():
            segments += open_tag("argument", (("key", key), ("type", value_type(value))))
            segments += [*plain(value_text(value, style)), *close_tag("argument")]
        segments += close_tag("call")
    return segments + close_tag("tools")


def spellings_differ(calls: list) -> bool:
    """Whether some argument value reads differently in the two styles (the provider's JSON
    does not show which one the model wrote)."""
    for index, call in enumerate(calls):
        _, arguments, _ = call_parts(call, index)
        for value in (arguments or {}).values():
            if value_text(value, "spaced") != value_text(value, "compact"):
                return True
    return False


def write_tool_calls(
    parsed: list, arguments: list, content: str, lead_free: bool
) -> tuple[str, tuple[str, ...]]:
    """The calls' markup as text (the reading itself is rebuilt as segments by ``XtmlTurns``)."""
    calls = [{"function": {"name": name, "arguments": raw}} for name, _, raw in parsed]
    text = "".join(segment.text for segment in calls_segments(calls))
    return text, ()


# -- completions ---------------------------------------------------------------------------------


# What can end a text that markup follows: a whole end of message, or the start of a close cut
# off by ``max_tokens``.
_TRAILING_MARKUP = (
    END_OF_MSG,
    MESSAGE_CLOSE,
    f"{CLOSE}message",
    f"{CLOSE}response",
    f"{CLOSE}think",
    CLOSE,
)


def _markup_start(content: str) -> int:
    """Where markup the provider left in content begins (``len(content)`` if none): the response
    channel's close and all after it, or markup at the end."""
    found = content.find(RESPONSE_CLOSE)
    return found if found >= 0 else _trailing_start(content, _TRAILING_MARKUP)


def _trailing_start(content: str, trailing: tuple[str, ...]) -> int:
    """Where the run of ``trailing`` pieces that ends ``content`` begins."""
    end = len(content)
    while True:
        piece = next((p for p in trailing if content.endswith(p, 0, end)), None)
        if piece is None:
            return end
        end -= len(piece)


def _finished(segments: list[Segment]) -> list[Segment]:
    """Segments of generated markup completed with what a finished turn ends with."""
    if segments[-len(MESSAGE_END) :] == list(MESSAGE_END):
        return []
    if segments[-(len(MESSAGE_END) - 1) :] == list(MESSAGE_END[:-1]):
        return [control(END_OF_MSG)]
    return list(MESSAGE_END)


class XtmlTurns:
    """Kimi K3's generated turns as segments (``draftgen.profiles.base.SegmentedFormat``)."""

    def prompt_mode(self, prompt_text: str) -> str:
        if prompt_text.endswith(THINK_OPEN):
            return "open"
        if prompt_text.endswith(RESPONSE_OPEN):
            return "closed"
        return "model_opens"

    def encode(self, tokenizer: Any, segments: tuple[Segment, ...] | list[Segment]) -> list[int]:
        """K3's own ``_encode_chat_segments`` where the tokenizer has it (Moonshot's does, and
        vLLM calls it); else each segment through ``encode``, ordinary ones with special tokens
        split as text."""
        own = getattr(tokenizer, "_encode_chat_segments", None)
        if callable(own):
            return list(own(list(segments)))
        ids: list[int] = []
        for text, special in segments:
            if special:
                ids += tokenizer.encode(text, add_special_tokens=False)
            else:
                ids += tokenizer.encode(text, add_special_tokens=False, split_special_tokens=True)
        return ids

    def segment_text(self, text: str) -> list[Segment]:
        return segment_markup(text)

    def answer(self, reasoning: str, content: str) -> tuple[str, str]:
        if not reasoning and THINK_CLOSE in content:
            reasoning, _, content = content.partition(THINK_CLOSE)
        content = content.removeprefix(RESPONSE_OPEN)
        return reasoning, content[: _markup_start(content)]

    def generated(
        self, reasoning: str | None, content: str, call: dict | None
    ) -> list[tuple[str, list[Segment]]]:
        sections: list[tuple[str, list[Segment]]] = []
        if reasoning is not None:
            if reasoning:
                sections.append(("reasoning", plain(reasoning)))
            sections.append(("think_end", list(THINK_RUN)))
        sections.append(("content", plain(content)))
        if call is None:
            sections.append(("eot", [*close_tag("response"), *MESSAGE_END]))
        else:
            sections.append(("tool_calls", [*close_tag("response"), *calls_segments([call])]))
            sections.append(("eot", list(MESSAGE_END)))
        return sections

    def read(self, completion: Any, prompt_text: str) -> SegmentedReading:
        """Readings of the turn: the think channel from ``reasoning``, the response channel from
        ``content``, calls from ``tool_calls``; what a provider left unsplit or unstripped in
        content is read as the markup it is, and a cut turn has one reading per place the cut
        can fall in markup the text does not show (``max_tokens``: the count picks)."""
        complete = completion.finish_reason in COMPLETE_FINISH_REASONS
        thinking = self.prompt_mode(prompt_text) != "closed"
        notes: list[str] = []
        fields = _channels(completion, thinking, complete, notes)
        calls, styles = _rebuildable_calls(completion.tool_calls or [], notes)
        head = [*plain(fields.reasoning), *THINK_RUN] if thinking else []
        answer = plain(fields.content)
        left = fields.left
        readings: list[tuple[list[Segment], tuple[str, ...], tuple[int, int]]] = []
        for style in styles:
            extra = (f"tool_arguments_reserialised={style}",) if len(styles) > 1 else ()
            ending, first, last = _ending(left, calls, style, complete, notes)
            full = [*head, *answer, *ending]
            span = (len(head), len(head) + len(answer))
            if complete:
                readings.append((full, extra, span))
                continue
            shown = len(head) + len(answer) + first
            if not (answer or left):
                # Nothing of the answer came back: the cut fell in the reasoning or the markup.
                shown = len(plain(fields.reasoning)) if thinking else 0
            stop = len(head) + len(answer) + last
            for size in range(shown, stop + 1):
                readings.append((full[:size], extra, span if size >= span[1] else (-1, -1)))
        unsplit = fields.unsplit
        if thinking and complete and fields.reasoning and not (answer or left or calls):
            # All reasoning and no answer: the model may have ended inside its think channel,
            # with its end of message alone or the message's close (no think close, no
            # response channel). The count decides; a close it picks that the text does not
            # show is never verified (reconstruct.text._reasoning_end_unproven).
            for ending in ([control(END_OF_MSG)], list(MESSAGE_END)):
                readings.append(
                    ([*plain(fields.reasoning), *ending], (REASONING_UNCLOSED,), (-1, -1))
                )
        if thinking and not complete and not completion.reasoning and not unsplit and fields.raw:
            # A provider that does not split shows reasoning cut short as content.
            readings.append(([*plain(fields.content), *left], (), (-1, -1)))
        return SegmentedReading(
            readings=[tuple(segments) for segments, _, _ in readings],
            notes=notes,
            complete=complete,
            reading_notes=[extra for _, extra, _ in readings],
            content_spans=[span for _, _, span in readings],
        )


class _Channels(NamedTuple):
    """A turn's text fields read as K3's channels: the reasoning, the answer (markup gone), the
    markup the provider left at the answer's end (``left``, as segments), whether the think
    channel came unsplit in content, and the content as it was once split (``raw``)."""

    reasoning: str
    content: str
    left: list[Segment]
    unsplit: bool
    raw: str


def _channels(completion: Any, thinking: bool, complete: bool, notes: list[str]) -> _Channels:
    """The think and response channels of ``completion``'s fields (notes of what was off)."""
    reasoning = completion.reasoning or ""
    content = completion.content or ""
    if not thinking and reasoning:
        notes.append("reasoning_in_non_thinking_prompt")
        reasoning = ""
    unsplit = thinking and not reasoning and THINK_CLOSE in content
    if unsplit:
        notes.append(NO_REASONING_SPLIT)
        reasoning, _, content = content.partition(THINK_CLOSE)
    raw_content = content
    if not complete:
        # A parser hands back the start of a close it saw cut off (``<|close|>think``) with
        # the reasoning, and of the response's open with the content: markup the count
        # places, not text.
        reasoning = reasoning[: _trailing_start(reasoning, (f"{CLOSE}think", CLOSE))]
        if RESPONSE_OPEN.startswith(content):
            content = ""
    content = content.removeprefix(RESPONSE_OPEN)
    cut = _markup_start(content)
    return _Channels(reasoning, content[:cut], segment_markup(content[cut:]), unsplit, raw_content)


def _rebuildable_calls(calls: list, notes: list[str]) -> tuple[list, tuple[str, ...]]:
    """The calls as markup can be rebuilt from them (none if it cannot), and the spellings of
    their argument values to read them in (both where the provider's JSON does not tell)."""
    styles: tuple[str, ...] = ("spaced",)
    if calls:
        try:
            calls_segments(calls)
        except ValueError as exc:
            notes.append(f"tool_calls_not_rebuilt: {exc}")
            calls = []
        else:
            notes.append("tool_calls_rebuilt")
            if spellings_differ(calls):
                styles = VALUE_STYLES
    return calls, styles


def _ending(
    left: list[Segment], calls: list, style: str, complete: bool, notes: list[str]
) -> tuple[list[Segment], int, int]:
    """The markup after the answer for one spelling of the calls, and the first and last of its
    segments a cut turn can end after (``left``: the markup the text already shows)."""
    ending = [*close_tag("response"), *(calls_segments(calls, style) if calls else [])]
    ending += MESSAGE_END
    # Left markup found in the ending (a close not stripped, or what follows a close a
    # parser stripped) is the ending as the fields already hold it.
    at = _find(ending, left)
    if left and at < 0:
        # Markup the structured fields do not hold (a call the provider did not parse):
        # it is what the model wrote, as far as the text goes.
        _note(notes, "markup_in_content")
        ending = [*left, *_finished(left)]
        return ending, len(left), (len(ending) if complete else len(ending) - 1)
    if left and complete:
        _note(notes, LEAKED_END_OF_TURN)
    # A cut can fall anywhere after what the text shows: a parser drops a closed
    # channel's close with everything after it.
    return ending, (at + len(left) if left else 0), len(ending) - 1


def _find(segments: list[Segment], part: list[Segment]) -> int:
    """Where ``part`` first occurs in ``segments`` (-1 if nowhere; 0 for an empty part)."""
    for start in range(len(segments) - len(part) + 1):
        if segments[start : start + len(part)] == part:
            return start
    return -1


def _note(notes: list[str], note: str) -> None:
    if note not in notes:
        notes.append(note)


XTML_TURNS = XtmlTurns()

KIMI_K3 = ModelProfile(
    name="kimi-k3",
    think_start=THINK_OPEN,
    think_end=THINK_CLOSE,
    # The eos the model stops on; what comes before it in a turn is rebuilt by ``XtmlTurns``.
    end_of_turn=END_OF_MSG,
    marker_tokens=(OPEN, CLOSE, SEP, END_OF_MSG),
    reasoning_split_markers=(THINK_CLOSE,),
    content_start=RESPONSE_OPEN,
    tool_call_format=KIMI_K3_TOOL_CALLS,
    tool_call_writer=write_tool_calls,
    xml_arguments=True,
    thinking_variable="thinking",
    effort_variable="thinking_effort",
    # K3's encoder accepts these three (its own text also names `medium`, which it rejects).
    efforts=("low", "high", "max"),
    segmented=XTML_TURNS,
)

PROFILES = (KIMI_K3,)
ALIASES: dict[str, ModelProfile] = {}

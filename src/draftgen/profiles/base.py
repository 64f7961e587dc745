"""What every model profile is: ``ModelProfile`` and the rules all families share.

Each family's own knowledge (delimiters, tool-call markup, template variables, the simulator's
raw tool-call text) lives in its module beside this one; ``draftgen.profiles`` holds
the registry.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

# How a family writes the tool calls it generates (see ``ModelProfile.tool_call_markups``).
KIMI_TOOL_CALLS = "kimi"
DEEPSEEK_TOOL_CALLS = "deepseek"
QWEN3_TOOL_CALLS = "qwen3"
GLM_TOOL_CALLS = "glm"
MINIMAX_TOOL_CALLS = "minimax"
# DeepSeek V3.2's DSML markup: written from its published encoder's shape, details unconfirmed.
DSML_TOOL_CALLS = "dsml"
HARMONY_TOOL_CALLS = "harmony"
# The note on a reading of an answer as one that ended inside its reasoning: no ``think_end``
# was generated (vLLM returns such an answer as all reasoning and no content).
REASONING_UNCLOSED = "reasoning_unclosed"
# One special token's text inside a delimiter made of several (harmony's <|end|><|start|>...).
SPECIAL_SHAPED = re.compile(r"<\|[a-z_]+\|>")


class ToolCallFormatError(ValueError):
    """The profile has no tool-call format, or a structured call lacks what the markup needs."""


@dataclass(frozen=True)
class ToolCallMarkup:
    """One reading of structured tool calls as the model wrote them."""

    text: str
    notes: tuple[str, ...] = ()
    # Which framing of the calls this reading takes (the lead-free one or not): readings of one
    # framing differ only in how the arguments are spelled.
    lead_free: bool = False


# (parsed calls as (name, id, arguments), argument texts or XML parameters, content, lead-free
# reading) -> (markup, notes): how a family writes the calls it generates.
ToolCallWriter = Callable[[list, list, str, bool], tuple[str, tuple[str, ...]]]


class Segment(NamedTuple):
    """A piece of text encoded on its own; special tokens are recognised in it only if allowed."""

    text: str
    allow_special: bool = False


@dataclass(frozen=True)
class SegmentedReading:
    """The candidate segmentations of one generated turn (most likely first), for a family whose
    tokenizer encodes its markup piece by piece (``ModelProfile.segmented``)."""

    readings: list[tuple[Segment, ...]]
    notes: list[str]
    complete: bool
    # Per reading: notes that hold for it only, and the (start, end) segments holding the content.
    reading_notes: list[tuple[str, ...]]
    content_spans: list[tuple[int, int]]


class SegmentedFormat(Protocol):
    """A chat format whose ids are not those of its text encoded at once (Kimi K3 encodes each
    element of its markup separately): the family reads and encodes its generated turns itself."""

    def prompt_mode(self, prompt_text: str) -> str:
        """``open`` (thinking), ``closed`` (thinking off) or ``model_opens``."""

    def read(self, completion: Any, prompt_text: str) -> SegmentedReading:
        """The readings of a ``records.Completion`` after this prompt."""

    def encode(self, tokenizer: Any, segments: tuple[Segment, ...] | list[Segment]) -> list[int]:
        """The ids of segments, each encoded on its own as the family's tokenizer does."""

    def segment_text(self, text: str) -> list[Segment]:
        """Generated text cut into the segments the model's ids follow."""

    def answer(self, reasoning: str, content: str) -> tuple[str, str]:
        """The reasoning and the answer in delivered fields, markup a provider left removed."""

    def generated(
        self, reasoning: str | None, content: str, call: dict | None
    ) -> list[tuple[str, list[Segment]]]:
        """The simulator's sections of a turn: (kind, segments), reasoning None if thinking is
        off, ``call`` an OpenAI-style tool call or None."""


@dataclass(frozen=True)
class ModelProfile:
    """What reconstruction needs to know about a model family's generated text.

    ``end_of_turn`` comes from the chat template, never from ``tokenizer.eos_token``: Kimi's
    tokenizer names ``[EOS]`` as eos while its turns end with ``<|im_end|>``.
    """

    name: str
    think_start: str
    think_end: str
    end_of_turn: str
    # Tokens whose presence in the vocabulary identifies the family (all must be present).
    marker_tokens: tuple[str, ...]
    # Tokens that must also sit at these ids (GLM-5 names its specials as GLM-4.5 does, 3491 ids
    # further on): a vocabulary without ids cannot show them, so it does not match.
    marker_ids: tuple[tuple[str, int], ...] = ()
    # Special tokens the model emits as raw text inside ``content`` when no ``tools`` were sent.
    tool_call_tokens: tuple[str, ...] = ()
    # Where a provider splits reasoning from content: the first of these in the generated text.
    reasoning_split_markers: tuple[str, ...] = ()
    # Whether the engine's reasoning parser ends unclosed reasoning at a tool call the model
    # wrote inside it (vLLM's qwen3 parser at Qwen3.5's ``<tool_call>`` + ``<function=``): such
    # a turn comes back as reasoning, no content and tool calls, with no ``think_end`` generated.
    # A split marker other than ``think_end`` (Kimi's tool-call section) says so too.
    tool_call_ends_reasoning: bool = False
    # Markup format of generated tool calls; "" if draftgen cannot rebuild this family's calls.
    tool_call_format: str = ""
    # Writes structured calls as the family's markup (see ``ToolCallWriter``); None: no format.
    tool_call_writer: ToolCallWriter | None = None
    # Whether the markup holds arguments as one XML parameter per key (GLM, MiniMax, DSML)
    # instead of the JSON text.
    xml_arguments: bool = False
    # How the engine's tool parser (vLLM's) returns ``arguments``: "" the model's own JSON text
    # (Kimi, DeepSeek V3.1, Llama 3 JSON, Mistral v11+), "unicode" ``json.dumps(parsed,
    # ensure_ascii=False)`` of what it parsed (Qwen, DSML, GLM, MiniMax, Llama 4), "ascii"
    # ``json.dumps(parsed)`` (harmony). Dumped, the text is the engine's spelling and the
    # model's is one of the readings, which the sample's own count picks (docs/verification.md).
    tool_arguments_dump: str = ""
    # Why rebuilt tool-call markup cannot be proven even when the count matches ("" if it can):
    # the verification reason of such samples says so instead of passing them.
    tool_call_format_unconfirmed: str = ""
    # What the model writes before think_start when it opens the block itself (GLM: "\n").
    think_lead: str = ""
    # What the model writes between think_end and the content (harmony opens the final channel).
    content_start: str = ""
    # The same in a turn that makes tool calls, around non-empty content (None: content_start,
    # ""): harmony puts such content in a commentary message closed by <|end|>.
    tool_content_start: str | None = None
    tool_content_end: str = ""
    # End of a turn that makes tool calls when it is not end_of_turn (GLM stops at
    # <|observation|>, harmony at <|call|>).
    tool_call_end_of_turn: str = ""
    # The markup's last text, when content that ends with it (calls written as raw text, no
    # ``tools`` sent) means the turn ended as a tool-call turn does (GLM-5: ``</tool_call>``
    # then ``<|observation|>``); "" if raw calls end like any answer.
    raw_tool_call_close: str = ""
    # Whether a model that may open its think block itself writes think_end alone when it
    # decides not to think (MiniMax-M3's adaptive mode opens its answer with ``</mm:think>``).
    bare_think_end: bool = False
    # Whitespace the model writes around its reasoning and before its answer; only the simulator
    # needs it (reconstruction takes whitespace from the delivered text). The lead of the reasoning
    # is written only when the model opens the block itself.
    reasoning_pad: tuple[str, str] = ("", "")
    answer_lead: str = ""
    # The chat template's switch for thinking, which providers set from the request's reasoning
    # settings (Kimi K2.5 and DeepSeek: ``thinking``; Qwen3 and GLM: ``enable_thinking``); ""
    # if the family has none (it always thinks, or never).
    thinking_variable: str = ""
    # The values that variable takes for thinking on and off (MiniMax-M3's ``thinking_mode`` is
    # a string: ``adaptive``, as MiniMax's API turns thinking on, and ``disabled``).
    thinking_values: tuple[object, object] = (True, False)
    # The template variable that takes the reasoning effort (gpt-oss: ``reasoning_effort``).
    effort_variable: str = ""
    # The efforts that variable accepts, and what OpenRouter's other efforts become.
    efforts: tuple[str, ...] = ()
    # Efforts servers map otherwise than to the nearest accepted one, as (effort, accepted) pairs
    # (vLLM's DeepSeek-V4 wrapper sends ``xhigh`` as ``max``).
    effort_map: tuple[tuple[str, str], ...] = ()
    # Whether the engine refuses efforts outside ``efforts`` instead of mapping them (vLLM's
    # harmony path refuses "none" and "minimal"): they are passed as given, for the renderer to
    # refuse as the engine does, and the sample is never verified on a guessed mapping.
    efforts_strict: bool = False
    # What renders the prompt when it is not the tokenizer's chat template, encoder or class:
    # "harmony" (vLLM renders gpt-oss with openai-harmony, draftgen.tokens.harmony).
    prompt_renderer: str = ""
    # How vLLM's wrapper of the family's Python encoder joins a message's text parts (DeepSeek
    # V4.1's: a blank line; the others are given them joined by a newline).
    encoder_part_separator: str = "\n"
    # Python chat encoders (file names under the model's ``encoding/``) that identify the family
    # when its vocabulary does not (DeepSeek V3.2 shares V4's).
    encoder_files: tuple[str, ...] = ()
    # Whether the vocabulary's marker tokens identify the family (not so for DeepSeek V3.2,
    # whose vocabulary is V4's: its encoder identifies it).
    detect_by_vocab: bool = True
    # How servers call the family's Python chat encoder (vLLM's tokenizer wrapper for it): request
    # tools join a leading system message (V4) instead of a new system message put first (V3.2);
    # history reasoning is always asked to be dropped (V4, whose encoder keeps it when a message
    # carries tools) instead of only when the prompt ends with a user turn (V3.2).
    encoder_tools_join_system: bool = False
    encoder_always_drops_thinking: bool = False
    # V4.1's wrapper: request tools join the first system message wherever it is (a later one
    # when none leads), and thinking is on unless a variable turns it off.
    encoder_tools_join_first_system: bool = False
    encoder_thinks_by_default: bool = False
    # A family whose generated markup is encoded piece by piece (Kimi K3): it reads and encodes
    # completions itself, and reconstruction and the simulator defer to it. None for the others.
    segmented: SegmentedFormat | None = None
    # The generic profile's ``profiles.generic.DerivedLayout``: what its chat template showed
    # (None for a family's own profile). Kept for the run's store, log and status.
    derived: Any = None

    def template_variables(self, reasoning: dict | None) -> dict:
        """The template variables a provider sets from OpenRouter's ``reasoning`` object.

        No reasoning setting leaves the template's own default (which the provider may or may
        not change: verification proves the mode from the response instead of assuming it).
        """
        if not reasoning:
            return {}
        effort = reasoning.get("effort")
        enabled = reasoning.get("enabled")
        budget = reasoning.get("max_tokens")
        thinking = not (effort == "none" or enabled is False or budget == 0)
        variables: dict = {}
        if self.thinking_variable:
            variables[self.thinking_variable] = self.thinking_values[0 if thinking else 1]
        if self.effort_variable and self.efforts_strict and isinstance(effort, str):
            variables[self.effort_variable] = effort
        elif self.effort_variable and thinking and isinstance(effort, str):
            variables[self.effort_variable] = self.accepted_effort(effort)
        return variables

    def accepted_effort(self, effort: str) -> str:
        """The effort the template or encoder is given for a requested one, as servers map it."""
        return dict(self.effort_map).get(effort) or _nearest_effort(effort, self.efforts)

    def turn_end(self, tool_turn: bool, content: str = "") -> str:
        """The end-of-turn text of a turn with (or without) tool calls; ``content`` that ends
        with raw tool-call markup ends as a tool-call turn where the profile says so."""
        if self.raw_tool_call_close and content.rstrip().endswith(self.raw_tool_call_close):
            tool_turn = True
        return (
            self.tool_call_end_of_turn
            if tool_turn and self.tool_call_end_of_turn
            else (self.end_of_turn)
        )

    def strip_end_of_turn(self, content: str, tool_turn: bool = False) -> str:
        """``content`` without the end-of-turn text a provider left at its end (as often as it
        repeats): the turn's own end, and a tool-call turn's where the profile has one and the
        turn makes calls, or where raw tool-call markup in content ends the turn (GLM-5)."""
        ends = self._turn_ends[bool(tool_turn)]
        while content.endswith(ends):
            end = next(e for e in ends if content.endswith(e))
            content = content[: -len(end)]
        return content

    @functools.cached_property
    def _turn_ends(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """What ``strip_end_of_turn`` takes off a turn without and with tool calls (worked out
        once per profile, not for every completion)."""

        def ends(tool_turn: bool) -> tuple[str, ...]:
            texts = [self.end_of_turn, self.turn_end(tool_turn)]
            if self.raw_tool_call_close:
                texts.append(self.turn_end(True))
            return tuple(end for end in dict.fromkeys(texts) if end)

        return ends(False), ends(True)

    def prompt_mode(self, prompt_text: str) -> str:
        """Where a rendered prompt leaves the model: ``open`` (inside the think block it opened),
        ``closed`` (thinking off) or ``model_opens`` (the model opens the block itself, or not).
        Whitespace after the delimiter does not count (Qwen3-2507 opens with ``<think>\\n``)."""
        if self.segmented is not None:
            return self.segmented.prompt_mode(prompt_text)
        tail = prompt_text.rstrip()
        if tail.endswith(self.think_end):
            return "closed"
        if tail.endswith(self.think_start):
            return "open"
        return "model_opens"

    def matches_vocab(self, vocab: dict[str, int] | set[str]) -> bool:
        """Whether a vocabulary (token -> id, or a set of tokens) shows this family's markers."""
        if not all(token in vocab for token in self.marker_tokens):
            return False
        if not self.marker_ids:
            return True
        return isinstance(vocab, dict) and all(vocab.get(t) == i for t, i in self.marker_ids)

    def stop_texts(self) -> tuple[str, ...]:
        """Every text that ends a turn (a server's stop tokens): GLM and harmony have two."""
        return tuple(dict.fromkeys(t for t in (self.end_of_turn, self.tool_call_end_of_turn) if t))

    def content_frame(self, content: str, tool_turn: bool) -> tuple[str, str]:
        """What the model writes before and after the content, once reasoning is closed."""
        if not tool_turn:
            return self.content_start, ""
        if not content:
            return "", ""
        start = self.content_start if self.tool_content_start is None else self.tool_content_start
        return start, self.tool_content_end

    @property
    def reasoning_ends_at_tool_calls(self) -> bool:
        """Whether a tool call can end reasoning that ``think_end`` never closed
        (``tool_call_ends_reasoning``, or a split marker besides ``think_end``)."""
        return self.tool_call_ends_reasoning or any(
            marker != self.think_end for marker in self.reasoning_split_markers
        )

    @property
    def tool_arguments_parsed(self) -> bool:
        """Whether the engine's parser dumps the arguments it parsed (``tool_arguments_dump``)."""
        return bool(self.tool_arguments_dump)

    def engine_arguments(self, arguments: str) -> str:
        """A call's ``arguments`` as the engine's tool parser returns them, from the JSON text
        the model wrote (``tool_arguments_dump``)."""
        if not self.tool_arguments_dump:
            return arguments
        parsed = json.loads(arguments)
        return json.dumps(parsed, ensure_ascii=self.tool_arguments_dump == "ascii")

    @property
    def tool_call_ids_in_markup(self) -> bool:
        """Whether the generated markup holds each call's id (Kimi), so a renamed id matters."""
        return self.tool_call_format == KIMI_TOOL_CALLS

    def tool_call_markups(self, calls: list[dict], content: str) -> list[ToolCallMarkup]:
        """The markup the model generated for these structured ``message.tool_calls``.

        Several readings, most likely first: providers pass ``arguments`` through verbatim or
        re-serialise the JSON (spaced or compact); the token count picks the one generated.
        """
        if self.tool_call_writer is None:
            raise ToolCallFormatError(
                f"profile {self.name!r} cannot rebuild structured tool calls as markup"
            )
        parsed = [_call_parts(call, index) for index, call in enumerate(calls)]
        xml = self.xml_arguments
        if xml:
            parsed = [
                (n, i, _argument_object(raw, index)) for index, (n, i, raw) in enumerate(parsed)
            ]
            # XML parameters hold string values verbatim; only a container value's spelling
            # (spaced or compact JSON) is the provider's guess.
            spellings = {_xml_parameters(args, "spaced") for _, _, args in parsed}
            xml_uncertain = spellings != {_xml_parameters(args, "compact") for _, _, args in parsed}
        readings: list[ToolCallMarkup] = []
        seen: set[str] = set()
        # The alternative reading: no lead whitespace before the markup (Qwen, GLM, MiniMax,
        # DSML), or no "<|constrain|>json" in the call header (harmony). Content that already
        # ends with the lead is a parser handing it back (everything before the markup token):
        # the lead-free reading is then first, since "X.\n" + "\n" often has the same count.
        order = (False, True)
        if self.tool_call_format != HARMONY_TOOL_CALLS and content:
            probe = [
                _xml_parameters(args, "spaced") if xml else _arguments_text(args, "verbatim")
                for _, _, args in parsed
            ]
            led = self._markup(parsed, probe, content, False)[0]
            lead = led[: len(led) - len(led.lstrip())]
            if lead and content.endswith(lead):
                order = (True, False)
        for alternative in order:
            for style in ARGUMENT_STYLES:
                if xml:
                    style = "spaced" if style == "verbatim" else style
                    arguments = [_xml_parameters(args, style) for _, _, args in parsed]
                else:
                    arguments = [_arguments_text(raw, style) for _, _, raw in parsed]
                text, notes = self._markup(parsed, arguments, content, alternative)
                if (style != "verbatim" and not xml) or (xml and xml_uncertain):
                    notes = (*notes, f"tool_arguments_reserialised={style}")
                if text not in seen:
                    seen.add(text)
                    readings.append(ToolCallMarkup(text, notes, alternative))
        return readings

    def _markup(
        self,
        parsed: list[tuple[str, str, object]],
        arguments: list,
        content: str,
        lead_free: bool = False,
    ) -> tuple[str, tuple[str, ...]]:
        if self.tool_call_writer is None:
            raise ToolCallFormatError(f"profile {self.name!r} has no tool-call format")
        return self.tool_call_writer(parsed, arguments, content, lead_free)

    def raw_tool_call_text(self, call: dict) -> str:
        """The markup of ``call`` as the model writes it into content after text when no
        ``tools`` were sent ("" if it never does: harmony addresses calls to a channel, which a
        provider never shows as content)."""
        if not self.tool_call_format or self.tool_call_format == HARMONY_TOOL_CALLS:
            return ""
        return self.tool_call_markups([call], "x")[0].text

    def special_texts(self) -> tuple[str, ...]:
        """Every delimiter whose literal appearance in user data is worth reporting.

        Delimiters made of several special tokens (harmony's) count by each of their tokens.
        """
        return self._special_texts

    @functools.cached_property
    def _special_texts(self) -> tuple[str, ...]:
        # Worked out once: verification looks for them in every message of every sample.
        texts: list[str] = []
        delimiters = (
            self.think_start,
            self.think_end,
            self.end_of_turn,
            self.content_start,
            self.tool_call_end_of_turn,
            *self.tool_call_tokens,
        )
        for delimiter in delimiters:
            for text in (delimiter, *SPECIAL_SHAPED.findall(delimiter)):
                if text and text not in texts:
                    texts.append(text)
        return tuple(texts)


def split_reasoning(text: str, mode: str, profile: ModelProfile) -> tuple[str | None, str]:
    """(reasoning, content) of generated text, as a reasoning parser splits it.

    ``mode`` is ``ModelProfile.prompt_mode`` of the prompt: ``closed`` has no reasoning; ``open``
    starts inside the think block; ``model_opens`` has the model write ``think_start``, after
    the profile's ``think_lead`` (or no block at all). The block ends at the first split marker:
    ``think_end`` is dropped with the header that opens the answer (harmony's final or commentary
    channel), any other marker (Kimi's tool-call section) stays in the content. Without a marker
    all is reasoning.
    """
    if mode == "closed":
        return None, text
    if mode == "model_opens":
        opening = next(
            (
                o
                for o in (profile.think_lead + profile.think_start, profile.think_start)
                if text.startswith(o)
            ),
            None,
        )
        if opening is None:
            return None, text
        text = text[len(opening) :]
    found = [
        (index, marker)
        for marker in profile.reasoning_split_markers or (profile.think_end,)
        if (index := text.find(marker)) >= 0
    ]
    if not found:
        return text, ""
    index, marker = min(found)
    if marker != profile.think_end:
        return text[:index], text[index:]
    rest = text[index + len(marker) :]
    for header in (profile.content_start, profile.tool_content_start):
        if header and rest.startswith(header):
            return text[:index], rest[len(header) :]
    return text[:index], rest


# OpenRouter's efforts from least to most, to map them onto a family's fewer ones.
OPENROUTER_EFFORTS = ("minimal", "low", "medium", "high", "xhigh", "max")


def _nearest_effort(effort: str, accepted: tuple[str, ...]) -> str:
    """``effort`` if the template accepts it, else the nearest accepted one (minimal -> low)."""
    if effort in accepted or not accepted or effort not in OPENROUTER_EFFORTS:
        return effort
    rank = OPENROUTER_EFFORTS.index(effort)
    known = [
        (abs(OPENROUTER_EFFORTS.index(a) - rank), a) for a in accepted if a in OPENROUTER_EFFORTS
    ]
    return min(known)[1] if known else effort


# Ways a provider may have serialised a call's ``arguments``: as the model wrote them, or
# re-dumped as Python's json does (", " and ": ") or compactly.
ARGUMENT_STYLES = ("verbatim", "spaced", "compact")


def _call_parts(call: object, index: int) -> tuple[str, str, object]:
    """(name, id, arguments) of one OpenAI-style tool call."""
    if not isinstance(call, dict):
        raise ToolCallFormatError(f"tool_calls[{index}] is not an object")
    function = call.get("function") if isinstance(call.get("function"), dict) else call
    name = function.get("name")
    if not isinstance(name, str) or not name:
        raise ToolCallFormatError(f"tool_calls[{index}] has no function name")
    call_id = call.get("id") if isinstance(call.get("id"), str) else ""
    return name, call_id, function.get("arguments", "")


def _argument_object(raw: object, index: int) -> dict:
    """A call's arguments as the object whose keys become XML parameters."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            raise ToolCallFormatError(
                f"tool_calls[{index}] arguments are not valid JSON, so no XML parameters can be "
                "rebuilt from them"
            ) from None
    if not isinstance(raw, dict):
        raise ToolCallFormatError(f"tool_calls[{index}] arguments are not a JSON object")
    return raw


def _xml_parameters(arguments: dict, style: str) -> tuple[tuple[str, str, bool], ...]:
    """(key, value text, is a string) per parameter: strings verbatim, the rest as JSON."""
    separators = (", ", ": ") if style == "spaced" else (",", ":")
    return tuple(
        (
            str(key),
            value
            if isinstance(value, str)
            else json.dumps(value, ensure_ascii=False, separators=separators),
            isinstance(value, str),
        )
        for key, value in arguments.items()
    )


def _arguments_text(raw: object, style: str) -> str:
    if style == "verbatim":
        if isinstance(raw, str):
            return raw
        style = "spaced"  # a parsed object: the template's tojson would write it spaced
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return raw
    separators = (", ", ": ") if style == "spaced" else (",", ":")
    return json.dumps(raw, ensure_ascii=False, separators=separators)

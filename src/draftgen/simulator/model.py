"""The simulated model: deterministic completions as real token ids, plus their exact texts.

A completion is a list of sections (think_start, reasoning, think_end, content, eot) of ids laid
out the way the target family writes them after its generation prompt; texts are decoded from
the ids' bytes incrementally, so a multi-byte character is never split between stream deltas.
"""

from __future__ import annotations

import codecs
import functools
import random
from dataclasses import dataclass, field
from typing import Any

from draftgen.profiles import SPECIAL_SHAPED, ModelProfile
from draftgen.simulator.textpool import compose
from draftgen.tokens.tokenizer import byte_decoder, decode, encode

# Where the generation prompt leaves the model (decided from the rendered prompt's end).
FORCED = "forced"  # prompt ends with think_start: the model writes reasoning, then think_end
DISABLED = "disabled"  # prompt ends with think_end (+ whitespace): thinking is off
OPEN = "open"  # the model writes think_start itself
LAYOUTS = {"open": FORCED, "closed": DISABLED, "model_opens": OPEN}  # by ModelProfile.prompt_mode

# The call behind the raw tool-call text a model writes into content (built by its profile).
RAW_TEXT_CALL = {
    "id": "call_0",
    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
}


class TokenTable:
    """Per-tokenizer facts the simulator needs fast: each id's bytes, and bytes -> id."""

    def __init__(self, tokenizer: Any, profile: ModelProfile) -> None:
        self.tokenizer = tokenizer
        self.profile = profile
        vocab: dict[str, int] = tokenizer.get_vocab()
        special_ids = set(getattr(tokenizer, "added_tokens_decoder", {}) or {})
        decoder = byte_decoder()
        size = max(vocab.values()) + 1
        self.token_bytes: list[bytes] = [b""] * size
        self.special: list[bool] = [False] * size
        self.ordinary_by_bytes: dict[bytes, int] = {}
        for token, index in vocab.items():
            if index in special_ids:
                self.token_bytes[index] = token.encode("utf-8")
                self.special[index] = True
                continue
            try:
                raw = bytes(decoder[ch] for ch in token)
            except KeyError:  # not a byte-level vocabulary entry
                raw = decode(tokenizer, [index]).encode("utf-8")
            self.token_bytes[index] = raw
            self.ordinary_by_bytes.setdefault(raw, index)
        # Delimiters may be several tokens (harmony's channel headers); each special in them and
        # each single-token delimiter must be one token of this vocabulary.
        for text in (
            profile.think_start,
            profile.think_end,
            profile.end_of_turn,
            profile.tool_call_end_of_turn,
            profile.content_start,
        ):
            pieces = SPECIAL_SHAPED.findall(text) or ([text] if text else [])
            for piece in pieces:
                self._single_id(piece)
        self.end_of_turn = self._single_id(profile.end_of_turn)
        probe = "Tést 中文 👩‍💻  x\n\tend"
        if b"".join(self.token_bytes[i] for i in encode(tokenizer, probe)) != probe.encode():
            raise ValueError(
                "the simulator needs a byte-level BPE tokenizer (GPT-2 style vocabulary): "
                "token bytes do not reassemble the encoded text"
            )
        self._fragment_tokens: dict[str, int] = {}
        self._resplits: dict[tuple[int, int], bool] = {}

    def resplits(self, pair: tuple[int, int]) -> bool:
        """Whether the text of these two ordinary ids, alone, re-encodes to other ids (False
        when their joined bytes are not text)."""
        found = self._resplits.get(pair)
        if found is None:
            try:
                text = (self.token_bytes[pair[0]] + self.token_bytes[pair[1]]).decode("utf-8")
            except UnicodeDecodeError:
                found = False
            else:
                found = encode(self.tokenizer, text) != list(pair)
            self._resplits[pair] = found
        return found

    def _single_id(self, text: str) -> int:
        ids = encode(self.tokenizer, text)
        if len(ids) != 1:
            raise ValueError(
                f"profile {self.profile.name!r} needs {text!r} as one token, the tokenizer "
                f"encodes it as {ids}"
            )
        return ids[0]

    def fragment_tokens(self, fragment: str) -> int:
        count = self._fragment_tokens.get(fragment)
        if count is None:
            count = len(encode(self.tokenizer, fragment))
            self._fragment_tokens[fragment] = count
        return count

    def split_pair(self, token_id: int, rng: random.Random) -> tuple[int, int] | None:
        """Two ordinary ids whose bytes concatenate to ``token_id``'s bytes, if any exist."""
        if self.special[token_id]:
            return None
        raw = self.token_bytes[token_id]
        cuts = list(range(1, len(raw)))
        rng.shuffle(cuts)
        for cut in cuts:
            left = self.ordinary_by_bytes.get(raw[:cut])
            right = self.ordinary_by_bytes.get(raw[cut:])
            if left is not None and right is not None:
                return left, right
        return None

    def texts(self, ids: list[int]) -> list[str]:
        """One text per id, holding back incomplete UTF-8 until the character completes.

        The texts concatenate to the decoded ids; an incomplete character left at the end (a cut
        at max_tokens) decodes to U+FFFD, as a byte-level decoder does.
        """
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        pieces = [decoder.decode(self.token_bytes[i]) for i in ids]
        tail = decoder.decode(b"", final=True)
        if tail:
            pieces[-1] += tail
        return pieces


@functools.lru_cache(maxsize=8)
def token_table(tokenizer_spec: str, profile: ModelProfile) -> TokenTable:
    from draftgen.tokens.tokenizer import load_tokenizer

    return TokenTable(load_tokenizer(tokenizer_spec), profile)


def prompt_layout(prompt_text: str, profile: ModelProfile) -> str:
    """The layout ``generate`` writes after this prompt: the profile's ``prompt_mode`` of it."""
    return LAYOUTS[profile.prompt_mode(prompt_text)]


@dataclass
class Section:
    kind: str  # "think_start" | "reasoning" | "think_end" | "content" | "eot"
    ids: list[int]
    pieces: list[str] = field(default_factory=list)  # one text per id

    @property
    def text(self) -> str:
        return "".join(self.pieces)


@dataclass
class ModelOutput:
    """What the model generated: ground truth, before any provider touched it."""

    sections: list[Section]
    finish_reason: str  # "stop", "tool_calls" or "length"
    quirks: list[str]  # model-side quirks that shaped these ids (drift, empty_reasoning, ...)
    layout: str

    @property
    def ids(self) -> list[int]:
        return [i for s in self.sections for i in s.ids]

    def section(self, kind: str) -> Section | None:
        for s in self.sections:
            if s.kind == kind:
                return s
        return None

    @property
    def reasoning(self) -> str | None:
        """Text between the think tags; None when the layout has no reasoning at all."""
        if self.layout == DISABLED:
            return None
        s = self.section("reasoning")
        return s.text if s else ""

    @property
    def content(self) -> str:
        s = self.section("content")
        return s.text if s else ""

    @property
    def reasoning_token_count(self) -> int:
        s = self.section("reasoning")
        return len(s.ids) if s else 0


@dataclass
class Plan:
    """The random choices behind one completion, drawn before any id is produced."""

    total_tokens: int
    reasoning_share: float
    drift: bool = False
    # The model writes a pair of tokens whose joined text re-encodes to other ids (a re-split).
    resplit: bool = False
    empty_reasoning: bool = False
    unclosed_reasoning: bool = False
    tool_call_text: bool = False
    # A structured call the model makes when the request carried ``tools``:
    # {"id", "name", "arguments"} with arguments as the model writes the JSON.
    tool_call: dict | None = None
    pad_content: bool = False  # whitespace around the answer, so strip_whitespace really alters it


def generate(
    table: TokenTable,
    layout: str,
    plan: Plan,
    rng: random.Random,
    max_tokens: int | None,
) -> ModelOutput:
    quirks: list[str] = []
    reasoning, answer = _compose_texts(table, layout, plan, rng, quirks)
    sections = _turn_sections(table, layout, plan, reasoning, answer, quirks)

    drifted_at: int | None = None
    if plan.drift:
        drifted_at = _apply_drift(table, sections, rng)

    total = sum(len(s.ids) for s in sections)
    finish_reason = "stop"
    if max_tokens is not None and max_tokens < total:
        finish_reason = "length"
        sections = _truncate(sections, max_tokens)
    resplit_at: int | None = None
    if plan.resplit:
        resplit_at = _apply_resplit(table, sections, rng)
    if drifted_at is not None and drifted_at < sum(len(s.ids) for s in sections):
        quirks.insert(0, "drift")
    if resplit_at is not None and resplit_at + 1 < sum(len(s.ids) for s in sections):
        quirks.insert(0, "resplit")
    if finish_reason == "stop" and plan.tool_call is not None:
        finish_reason = "tool_calls"

    for s in sections:
        s.pieces = table.texts(s.ids)
    return ModelOutput(sections, finish_reason, quirks, layout)


def _compose_texts(
    table: TokenTable, layout: str, plan: Plan, rng: random.Random, quirks: list[str]
) -> tuple[str, str]:
    """The reasoning and the answer the model writes, before any markup frames them."""
    profile = table.profile
    reasoning_target = 0
    if layout != DISABLED and not plan.empty_reasoning:
        reasoning_target = max(1, round(plan.total_tokens * plan.reasoning_share))
    content_target = max(1, plan.total_tokens - reasoning_target - 3)

    # Both texts are drawn before any quirk-dependent choice, so the same seed gives the same
    # words whichever quirks are switched on.
    reasoning = compose(rng, reasoning_target, table.fragment_tokens) if reasoning_target else ""
    answer = compose(rng, content_target, table.fragment_tokens)
    raw_text = profile.raw_tool_call_text(RAW_TEXT_CALL) if plan.tool_call_text else ""
    if raw_text and profile.tool_call_tokens:
        answer = answer + raw_text
        quirks.append("tool_call_text")
    if plan.pad_content and plan.tool_call is None:
        answer = rng.choice(("\n", " ", "\n\n")) + answer + "\n"
    if layout in (OPEN, FORCED):
        answer = profile.answer_lead + answer  # Qwen3 writes "<think>\nR\n</think>\n\nA"
    return reasoning, answer


def _turn_sections(
    table: TokenTable, layout: str, plan: Plan, reasoning: str, answer: str, quirks: list[str]
) -> list[Section]:
    """The turn's ids section by section: think block, content, tool call, end of turn."""
    profile = table.profile
    tokenizer = table.tokenizer
    tool_turn = plan.tool_call is not None
    has_reasoning = layout != DISABLED
    # Everything the family writes around the texts comes from its profile: think_lead and
    # think_start when the model opens the block, its whitespace around the reasoning, and what
    # frames the content (harmony's final or commentary channel header).
    answer, markup = _tool_call_markup(profile, plan, answer)
    head, tail = profile.content_frame(answer, tool_turn)
    sections: list[Section] = []
    if has_reasoning:
        # A model that decides not to think may write think_end alone (MiniMax-M3, adaptive).
        bare = plan.empty_reasoning and profile.bare_think_end
        if layout == OPEN and not bare:
            opening = profile.think_lead + profile.think_start
            sections.append(Section("think_start", encode(tokenizer, opening)))
        if plan.empty_reasoning:
            quirks.append("empty_reasoning")
        else:
            # A forced prompt already wrote the lead ("<think>\n" of Qwen3-2507, MiniMax-M2).
            lead, trail = profile.reasoning_pad
            reasoning = (lead if layout == OPEN else "") + reasoning + trail
            sections.append(Section("reasoning", encode(tokenizer, reasoning)))
        if _ends_inside_reasoning(profile, plan):
            # No think_end and no answer: the end of turn, or the call, comes inside reasoning.
            quirks.append("unclosed_reasoning")
            if tool_turn:
                _, markup = _tool_call_markup(profile, plan, "")
                sections.append(Section("tool_calls", encode(tokenizer, markup)))
            sections.append(Section("eot", encode(tokenizer, profile.turn_end(tool_turn))))
            return sections
        sections.append(Section("think_end", encode(tokenizer, profile.think_end + head)))
    elif head:
        sections.append(Section("content_start", encode(tokenizer, head)))
    sections.append(Section("content", encode(tokenizer, answer)))
    if plan.tool_call is not None:
        sections.append(Section("tool_calls", encode(tokenizer, tail + markup)))
    # Raw tool-call text ends the turn as a call does where the family says so (GLM-5).
    sections.append(Section("eot", encode(tokenizer, profile.turn_end(tool_turn, answer))))
    if profile.segmented is not None:
        sections = _segmented_sections(profile, tokenizer, has_reasoning, plan, reasoning, answer)
    return sections


def _ends_inside_reasoning(profile: ModelProfile, plan: Plan) -> bool:
    """Whether the plan's turn ends inside its reasoning (``unclosed_reasoning``): only with
    reasoning written, and a tool call only where the engine's parser ends reasoning at it."""
    if not plan.unclosed_reasoning or plan.empty_reasoning or not profile.think_end:
        return False
    if profile.segmented is not None:
        return False
    return plan.tool_call is None or profile.reasoning_ends_at_tool_calls


def _tool_call_markup(profile: ModelProfile, plan: Plan, answer: str) -> tuple[str, str]:
    """The answer and the markup of the model's tool call ("" without one)."""
    if plan.tool_call is None:
        return answer, ""
    call = {
        "id": plan.tool_call["id"],
        "function": {"name": plan.tool_call["name"], "arguments": plan.tool_call["arguments"]},
    }
    markup = profile.tool_call_markups([call], answer)[0].text
    lead = markup[: len(markup) - len(markup.lstrip())]
    if lead and answer:
        # The model writes "text.\n" as the canonical tokens (BPE joins punctuation and the
        # newline); a parser hands that lead back with the content ("\n" before <tool_call>).
        answer, markup = answer + lead, markup[len(lead) :]
    return answer, markup


def _segmented_sections(
    profile: ModelProfile,
    tokenizer: Any,
    has_reasoning: bool,
    plan: Plan,
    reasoning: str,
    answer: str,
) -> list[Section]:
    """The turn of a family that encodes its markup piece by piece (Kimi K3), as it writes it."""
    call = None
    if plan.tool_call is not None:
        function = {"name": plan.tool_call["name"], "arguments": plan.tool_call["arguments"]}
        call = {"id": plan.tool_call["id"], "function": function}
    segmented = profile.segmented
    parts = segmented.generated(reasoning if has_reasoning else None, answer, call)
    return [Section(kind, segmented.encode(tokenizer, segments)) for kind, segments in parts]


def _apply_drift(table: TokenTable, sections: list[Section], rng: random.Random) -> int | None:
    """Resegment one token as two (same bytes); return the flat index of the first half."""
    candidates: list[tuple[int, int, int]] = []  # (section index, position, flat index)
    flat = 0
    for si, s in enumerate(sections):
        if s.kind in ("reasoning", "content"):
            for pos, token_id in enumerate(s.ids):
                if not table.special[token_id] and len(table.token_bytes[token_id]) >= 2:
                    candidates.append((si, pos, flat + pos))
        flat += len(s.ids)
    rng.shuffle(candidates)
    for si, pos, flat_index in candidates[:64]:
        pair = table.split_pair(sections[si].ids[pos], rng)
        if pair is not None:
            sections[si].ids[pos : pos + 1] = list(pair)
            return flat_index
    return None


# Draws of a token pair a re-split tries before it gives up (an answer of few or plain tokens).
RESPLIT_DRAWS = 400


def _apply_resplit(table: TokenTable, sections: list[Section], rng: random.Random) -> int | None:
    """Insert a token pair whose joined bytes re-encode to other ids inside the reasoning or
    the content; return the flat index of its first token.

    The pair is drawn from the answer's own tokens, each alone, as a model that picks its next
    token without regard to how the text will re-encode does: whether the re-split keeps the
    count (` is`+`the` read back as ` ist`+`he`) or changes it is the tokenizer's to say.
    """
    texts = [i for i, s in enumerate(sections) if s.kind in ("reasoning", "content") and s.ids]
    pool = [t for i in texts for t in sections[i].ids if not table.special[t]]
    if not pool:
        return None
    for _ in range(RESPLIT_DRAWS):
        pair = (rng.choice(pool), rng.choice(pool))
        if table.resplits(pair):
            break
    else:
        return None
    where = rng.choice(texts)
    section = sections[where]
    # Inside the section, never at its edges: whitespace there is what providers strip.
    position = rng.randint(1, len(section.ids) - 1) if len(section.ids) > 1 else 0
    section.ids[position:position] = list(pair)
    return sum(len(s.ids) for s in sections[:where]) + position


def _truncate(sections: list[Section], limit: int) -> list[Section]:
    kept: list[Section] = []
    left = limit
    for s in sections:
        if left <= 0:
            break
        kept.append(Section(s.kind, s.ids[:left]))
        left -= len(s.ids)
    return kept


def is_canonical(table: TokenTable, output: ModelOutput) -> bool:
    """Does re-encoding the generated text give back exactly these ids?"""
    ids = output.ids
    text = "".join(s.text for s in output.sections)
    segmented = table.profile.segmented
    if segmented is not None:
        return segmented.encode(table.tokenizer, segmented.segment_text(text)) == ids
    return encode(table.tokenizer, text) == ids

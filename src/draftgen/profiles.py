"""Model profiles: the one place that knows a model family's delimiters and end-of-turn.

A profile is chosen from the tokenizer's vocabulary (``detect_profile``) or forced by name.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

# How a family writes the tool calls it generates (see ``ModelProfile.tool_call_markups``).
KIMI_TOOL_CALLS = "kimi"
DEEPSEEK_TOOL_CALLS = "deepseek"
QWEN3_TOOL_CALLS = "qwen3"
# Kimi names each call ``functions.NAME:INDEX`` in the markup; providers may rename it.
KIMI_CALL_ID = re.compile(r"functions\.[^\s:]+:\d+")


class ToolCallFormatError(ValueError):
    """The profile has no tool-call format, or a structured call lacks what the markup needs."""


@dataclass(frozen=True)
class ToolCallMarkup:
    """One reading of structured tool calls as the model wrote them."""

    text: str
    notes: tuple[str, ...] = ()


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
    # Special tokens the model emits as raw text inside ``content`` when no ``tools`` were sent.
    tool_call_tokens: tuple[str, ...] = ()
    # Where a provider splits reasoning from content: the first of these in the generated text.
    reasoning_split_markers: tuple[str, ...] = ()
    # Markup format of generated tool calls; "" if draftgen cannot rebuild this family's calls.
    tool_call_format: str = ""

    @property
    def tool_call_ids_in_markup(self) -> bool:
        """Whether the generated markup holds each call's id (Kimi), so a renamed id matters."""
        return self.tool_call_format == KIMI_TOOL_CALLS

    def tool_call_markups(self, calls: list[dict], content: str) -> list[ToolCallMarkup]:
        """The markup the model generated for these structured ``message.tool_calls``.

        Several readings, most likely first: providers pass ``arguments`` through verbatim or
        re-serialise the JSON (spaced or compact); the token count picks the one generated.
        """
        if not self.tool_call_format:
            raise ToolCallFormatError(
                f"profile {self.name!r} cannot rebuild structured tool calls as markup"
            )
        parsed = [_call_parts(call, index) for index, call in enumerate(calls)]
        readings: list[ToolCallMarkup] = []
        seen: set[str] = set()
        for lead_free in (False, True):
            for style in ARGUMENT_STYLES:
                arguments = [_arguments_text(raw, style) for _, _, raw in parsed]
                text, notes = self._markup(parsed, arguments, content, lead_free)
                if style != "verbatim":
                    notes = (*notes, f"tool_arguments_reserialised={style}")
                if text not in seen:
                    seen.add(text)
                    readings.append(ToolCallMarkup(text, notes))
        return readings

    def _markup(
        self,
        parsed: list[tuple[str, str, object]],
        arguments: list[str],
        content: str,
        lead_free: bool = False,
    ) -> tuple[str, tuple[str, ...]]:
        notes: list[str] = []
        parts: list[str] = []
        if self.tool_call_format == KIMI_TOOL_CALLS:
            for index, ((name, call_id, _), args) in enumerate(zip(parsed, arguments, strict=True)):
                if not KIMI_CALL_ID.fullmatch(call_id):
                    call_id = f"functions.{name}:{index}"
                    if "tool_call_id_rebuilt" not in notes:
                        notes.append("tool_call_id_rebuilt")
                parts.append(
                    f"<|tool_call_begin|>{call_id}<|tool_call_argument_begin|>{args}<|tool_call_end|>"
                )
            text = "<|tool_calls_section_begin|>" + "".join(parts) + "<|tool_calls_section_end|>"
        elif self.tool_call_format == DEEPSEEK_TOOL_CALLS:
            for (name, _, _), args in zip(parsed, arguments, strict=True):
                parts.append(f"<｜tool▁call▁begin｜>{name}<｜tool▁sep｜>{args}<｜tool▁call▁end｜>")
            text = "<｜tool▁calls▁begin｜>" + "".join(parts) + "<｜tool▁calls▁end｜>"
        elif self.tool_call_format == QWEN3_TOOL_CALLS:
            for index, ((name, _, _), args) in enumerate(zip(parsed, arguments, strict=True)):
                # The template puts "\n" before a call after content; a parser that hands back
                # the "\n\n" after </think> as content makes that lead spurious (the count decides).
                lead = "\n" if index or (content and not lead_free) else ""
                parts.append(
                    f'{lead}<tool_call>\n{{"name": "{name}", "arguments": {args}}}\n</tool_call>'
                )
            text = "".join(parts)
        else:
            raise ToolCallFormatError(f"unknown tool-call format {self.tool_call_format!r}")
        return text, tuple(notes)

    def special_texts(self) -> tuple[str, ...]:
        """Every delimiter whose literal appearance in user data is worth reporting."""
        return (self.think_start, self.think_end, self.end_of_turn, *self.tool_call_tokens)


KIMI_K2 = ModelProfile(
    name="kimi-k2",
    think_start="<think>",
    think_end="</think>",
    end_of_turn="<|im_end|>",
    marker_tokens=("<|im_middle|>", "<|im_assistant|>", "<|im_end|>"),
    tool_call_tokens=(
        "<|tool_calls_section_begin|>",
        "<|tool_calls_section_end|>",
        "<|tool_call_begin|>",
        "<|tool_call_argument_begin|>",
        "<|tool_call_end|>",
    ),
    reasoning_split_markers=("</think>", "<|tool_calls_section_begin|>"),
    tool_call_format=KIMI_TOOL_CALLS,
)

DEEPSEEK_V3 = ModelProfile(
    name="deepseek-v3",
    think_start="<think>",
    think_end="</think>",
    end_of_turn="<｜end▁of▁sentence｜>",
    marker_tokens=("<｜User｜>", "<｜Assistant｜>", "<｜end▁of▁sentence｜>"),
    tool_call_tokens=(
        "<｜tool▁calls▁begin｜>",
        "<｜tool▁calls▁end｜>",
        "<｜tool▁call▁begin｜>",
        "<｜tool▁call▁end｜>",
        "<｜tool▁sep｜>",
    ),
    reasoning_split_markers=("</think>",),
    tool_call_format=DEEPSEEK_TOOL_CALLS,
)

QWEN3 = ModelProfile(
    name="qwen3",
    think_start="<think>",
    think_end="</think>",
    end_of_turn="<|im_end|>",
    marker_tokens=("<|im_start|>", "<|im_end|>", "<think>"),
    tool_call_tokens=("<tool_call>", "</tool_call>"),
    reasoning_split_markers=("</think>",),
    tool_call_format=QWEN3_TOOL_CALLS,
)

PROFILES: dict[str, ModelProfile] = {p.name: p for p in (KIMI_K2, DEEPSEEK_V3, QWEN3)}


class UnknownProfileError(ValueError):
    pass


def get_profile(name: str) -> ModelProfile:
    try:
        return PROFILES[name]
    except KeyError:
        known = ", ".join(sorted(PROFILES))
        raise UnknownProfileError(
            f"unknown profile {name!r}: use one of {known}, or omit --profile to detect it"
        ) from None


def detect_profile(vocab: dict[str, int] | set[str]) -> ModelProfile:
    """Pick the profile whose marker tokens are all in the vocabulary (specials included).

    Kimi is tried before Qwen3 because both use ``<|im_end|>``; only Kimi has ``<|im_middle|>``.
    """
    for profile in (KIMI_K2, DEEPSEEK_V3, QWEN3):
        if all(token in vocab for token in profile.marker_tokens):
            return profile
    known = ", ".join(sorted(PROFILES))
    raise UnknownProfileError(
        f"no model profile matches this tokenizer's special tokens: pass --profile ({known})"
    )


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

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
GLM_TOOL_CALLS = "glm"
MINIMAX_TOOL_CALLS = "minimax"
# DeepSeek V3.2's DSML markup: written from its published encoder's shape, details unconfirmed.
DSML_TOOL_CALLS = "dsml"
HARMONY_TOOL_CALLS = "harmony"
# Formats whose arguments are XML parameters (one per key), not a JSON text.
XML_ARGUMENT_FORMATS = (GLM_TOOL_CALLS, MINIMAX_TOOL_CALLS, DSML_TOOL_CALLS)
# Kimi names each call ``functions.NAME:INDEX`` in the markup; providers may rename it.
KIMI_CALL_ID = re.compile(r"functions\.[^\s:]+:\d+")
# One special token's text inside a delimiter made of several (harmony's <|end|><|start|>...).
SPECIAL_SHAPED = re.compile(r"<\|[a-z_]+\|>")


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
    # Whitespace the model writes around its reasoning and before its answer; only the simulator
    # needs it (reconstruction takes whitespace from the delivered text). The lead of the reasoning
    # is written only when the model opens the block itself.
    reasoning_pad: tuple[str, str] = ("", "")
    answer_lead: str = ""
    # The chat template's switch for thinking, which providers set from the request's reasoning
    # settings (Kimi K2.5 and DeepSeek: ``thinking``; Qwen3 and GLM: ``enable_thinking``); ""
    # if the family has none (it always thinks, or never).
    thinking_variable: str = ""
    # The template variable that takes the reasoning effort (gpt-oss: ``reasoning_effort``).
    effort_variable: str = ""
    # The efforts that variable accepts, and what OpenRouter's other efforts become.
    efforts: tuple[str, ...] = ()
    # Whether the template takes tool-call arguments as the JSON text (DeepSeek-V3.1 concatenates
    # it) instead of the parsed object vLLM and SGLang hand to every other family's template.
    tool_arguments_as_text: bool = False
    # Python chat encoders (file names under the model's ``encoding/``) that identify the family
    # when its vocabulary does not (DeepSeek V3.2 shares V4's).
    encoder_files: tuple[str, ...] = ()

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
            variables[self.thinking_variable] = thinking
        if self.effort_variable and thinking and isinstance(effort, str):
            variables[self.effort_variable] = _nearest_effort(effort, self.efforts)
        return variables

    def turn_end(self, tool_turn: bool) -> str:
        """The end-of-turn text of a turn with (or without) tool calls."""
        return (
            self.tool_call_end_of_turn
            if tool_turn and self.tool_call_end_of_turn
            else (self.end_of_turn)
        )

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
        xml = self.tool_call_format in XML_ARGUMENT_FORMATS
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
                    readings.append(ToolCallMarkup(text, notes))
        return readings

    def _markup(
        self,
        parsed: list[tuple[str, str, object]],
        arguments: list,
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
        elif self.tool_call_format == GLM_TOOL_CALLS:
            # GLM-4.5/4.6's template: "\n<tool_call>NAME" then one key/value pair per line.
            for index, ((name, _, _), params) in enumerate(zip(parsed, arguments, strict=True)):
                lead = "" if lead_free and index == 0 else "\n"
                pairs = "".join(
                    f"<arg_key>{key}</arg_key>\n<arg_value>{value}</arg_value>\n"
                    for key, value, _ in params
                )
                parts.append(f"{lead}<tool_call>{name}\n{pairs}</tool_call>")
            text = "".join(parts)
        elif self.tool_call_format == MINIMAX_TOOL_CALLS:
            for (name, _, _), params in zip(parsed, arguments, strict=True):
                values = "".join(
                    f'<parameter name="{key}">{value}</parameter>\n' for key, value, _ in params
                )
                parts.append(f'<invoke name="{name}">\n{values}</invoke>\n')
            lead = "" if lead_free else "\n"
            text = f"{lead}<minimax:tool_call>\n" + "".join(parts) + "</minimax:tool_call>"
        elif self.tool_call_format == DSML_TOOL_CALLS:
            for (name, _, _), params in zip(parsed, arguments, strict=True):
                values = "\n".join(
                    f'<｜DSML｜parameter name="{key}" string="{"true" if is_text else "false"}">'
                    f"{value}</｜DSML｜parameter>"
                    for key, value, is_text in params
                )
                parts.append(f'<｜DSML｜invoke name="{name}">\n{values}\n</｜DSML｜invoke>')
            lead = "" if lead_free else "\n\n"
            text = (
                f"{lead}<｜DSML｜function_calls>\n"
                + "\n".join(parts)
                + "\n</｜DSML｜function_calls>"
            )
        elif self.tool_call_format == HARMONY_TOOL_CALLS:
            # One commentary message per call, addressed to the function; the turn's own end
            # (<|call|>) closes the last one, so only the ones before it are closed here.
            constrain = "" if lead_free else " <|constrain|>json"
            for (name, _, _), args in zip(parsed, arguments, strict=True):
                parts.append(
                    f"<|start|>assistant<|channel|>commentary to=functions.{name}"
                    f"{constrain}<|message|>{args}"
                )
            text = "<|call|>".join(parts)
        else:
            raise ToolCallFormatError(f"unknown tool-call format {self.tool_call_format!r}")
        return text, tuple(notes)

    def special_texts(self) -> tuple[str, ...]:
        """Every delimiter whose literal appearance in user data is worth reporting.

        Delimiters made of several special tokens (harmony's) count by each of their tokens.
        """
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
    thinking_variable="thinking",
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
    thinking_variable="thinking",
    tool_arguments_as_text=True,
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
    thinking_variable="enable_thinking",
    # Qwen3 writes "<think>\nR\n</think>\n\nA".
    reasoning_pad=("\n", "\n"),
    answer_lead="\n\n",
)

# V3.2 chats like V3.1 (the deepseek-v3 profile) but writes tool calls in DSML. Its vocabulary
# cannot be told from V4's (both carry ｜DSML｜), so it is chosen by name only.
DEEPSEEK_V32 = ModelProfile(
    name="deepseek-v3.2",
    think_start="<think>",
    think_end="</think>",
    end_of_turn="<｜end▁of▁sentence｜>",
    marker_tokens=("<｜User｜>", "<｜Assistant｜>", "<｜end▁of▁sentence｜>", "｜DSML｜"),
    tool_call_tokens=("｜DSML｜",),
    reasoning_split_markers=("</think>",),
    tool_call_format=DSML_TOOL_CALLS,
    thinking_variable="thinking",
    # The published encoder json.loads the arguments itself (a parsed object makes it raise).
    tool_arguments_as_text=True,
    encoder_files=("encoding_dsv32.py",),
    tool_call_format_unconfirmed=(
        "DeepSeek V3.2's DSML tool-call markup is written from its encoder's published shape; "
        "its whitespace and parameter typing are unconfirmed"
    ),
)

# GLM-4.5/4.6: a turn ends where the model writes the next role token. vLLM and SGLang stop on
# generation_config's eos ids (<|endoftext|>, <|user|>, <|observation|>) and count the stop token
# in completion_tokens; draftgen assumes <|user|> after an answer and <|observation|> after tool
# calls (what the template renders next). A turn ended by <|endoftext|> has the same count, so
# only server ids can show it.
GLM = ModelProfile(
    name="glm-4.5",
    think_start="<think>",
    think_end="</think>",
    end_of_turn="<|user|>",
    marker_tokens=("[gMASK]", "<sop>", "<|assistant|>", "<|observation|>"),
    tool_call_tokens=(
        "<tool_call>",
        "</tool_call>",
        "<arg_key>",
        "</arg_key>",
        "<arg_value>",
        "</arg_value>",
        "<|observation|>",
    ),
    reasoning_split_markers=("</think>",),
    tool_call_format=GLM_TOOL_CALLS,
    thinking_variable="enable_thinking",
    think_lead="\n",
    tool_call_end_of_turn="<|observation|>",
    answer_lead="\n",
)

# MiniMax-M2: the prompt opens "<think>\n"; the model writes "R\n</think>\n\nA[e~[". Providers
# that keep the think block in content (vLLM's minimax_m2_append_think) prepend "<think>" to it.
MINIMAX_M2 = ModelProfile(
    name="minimax-m2",
    think_start="<think>",
    think_end="</think>",
    end_of_turn="[e~[",
    marker_tokens=("]~!b[", "]~b]", "[e~["),
    tool_call_tokens=("<minimax:tool_call>", "</minimax:tool_call>"),
    reasoning_split_markers=("</think>",),
    tool_call_format=MINIMAX_TOOL_CALLS,
    reasoning_pad=("\n", "\n"),
    answer_lead="\n\n",
)

# gpt-oss (harmony): reasoning is the analysis channel, the answer the final channel, so what
# lies between them is "<|end|><|start|>assistant<|channel|>final<|message|>", not </think>.
# The prompt ends "<|start|>assistant"; the model writes the channel header itself.
GPT_OSS = ModelProfile(
    name="gpt-oss",
    think_start="<|channel|>analysis<|message|>",
    think_end="<|end|>",
    end_of_turn="<|return|>",
    marker_tokens=("<|start|>", "<|channel|>", "<|message|>", "<|return|>"),
    tool_call_tokens=("<|constrain|>", "<|call|>"),
    reasoning_split_markers=("<|end|>",),
    tool_call_format=HARMONY_TOOL_CALLS,
    content_start="<|start|>assistant<|channel|>final<|message|>",
    tool_content_start="<|start|>assistant<|channel|>commentary<|message|>",
    tool_content_end="<|end|>",
    tool_call_end_of_turn="<|call|>",
    effort_variable="reasoning_effort",
    efforts=("low", "medium", "high"),
)

# Detection order: Kimi before Qwen3 (both use <|im_end|>; only Kimi has <|im_middle|>). The
# others share no marker with any family before them.
DETECTION_ORDER = (KIMI_K2, DEEPSEEK_V3, QWEN3, GLM, MINIMAX_M2, GPT_OSS)

PROFILES: dict[str, ModelProfile] = {
    p.name: p for p in (KIMI_K2, DEEPSEEK_V3, DEEPSEEK_V32, QWEN3, GLM, MINIMAX_M2, GPT_OSS)
}
# Names that are the same format as a profile above (forceable with --profile too).
PROFILES["deepseek-v3.1"] = DEEPSEEK_V3
PROFILES["glm-4.6"] = GLM


def split_reasoning(text: str, mode: str, profile: ModelProfile) -> tuple[str | None, str]:
    """(reasoning, content) of generated text, as a reasoning parser splits it.

    ``mode`` is ``reconstruct.prompt_mode`` of the prompt: ``closed`` has no reasoning; ``open``
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


def detect_profile(vocab: dict[str, int] | set[str], encoder_file: str = "") -> ModelProfile:
    """Pick the profile of the model's Python chat encoder (``encoder_file``, a file name under
    ``encoding/``), else the one whose marker tokens are all in the vocabulary (specials too).

    Kimi is tried before Qwen3 because both use ``<|im_end|>``; only Kimi has ``<|im_middle|>``.
    A DeepSeek vocabulary without an encoder gets deepseek-v3 (V3.1's markup).
    """
    for profile in PROFILES.values():
        if encoder_file and encoder_file in profile.encoder_files:
            return profile
    for profile in DETECTION_ORDER:
        if all(token in vocab for token in profile.marker_tokens):
            return profile
    known = ", ".join(sorted(PROFILES))
    raise UnknownProfileError(
        f"no model profile matches this tokenizer's special tokens: pass --profile ({known})"
    )


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

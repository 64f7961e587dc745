"""The generic profile's layout, derived from a chat template that no model profile claims.

A family module says what a model generates around its answer; a model draftgen has never seen
says it through its chat template. Probe conversations rendered through that template show:

- the generation prompt (a user turn rendered with and without it);
- the end of turn: the first special token the template writes after an answer, before the next
  user turn (``<|im_end|>``, ``<|eot_id|>``, ``<end_of_turn>``; GLM-style templates write none
  and the next header, which is what such a model generates to stop, is the first one);
- the think block: an answer with reasoning, under each key templates read it from, shows the
  markers and the whitespace around them; a generation prompt that already holds the opening
  marker means the model starts inside the block;
- the template variables it reads (a thinking switch such as ``enable_thinking``, an effort).

Everything a count cannot prove stays proven per sample: a wrong derivation fails the counts, it
never passes them. What cannot be derived (tool-call markup above all) is listed in the layout's
notes and leaves those samples unverified with their reason.
"""

from __future__ import annotations

import datetime as dt
import os
from typing import Any

from draftgen.errors import DraftgenError
from draftgen.profiles.generic import DerivedLayout
from draftgen.tokens.template_clock import template_clock

# Probe texts no template rewrites and no tokenizer merges with what surrounds them.
USER = "Zq7 probe question one"
SECOND_USER = "Zq7 probe question two"
REASONING = "Zq7 probe reasoning"
ANSWER = "Zq7 probe answer"
# Where templates read a message's reasoning: vLLM hands ``reasoning_content`` over as sent;
# some families' templates read ``reasoning`` or ``thinking``.
REASONING_KEYS = ("reasoning_content", "reasoning", "thinking")
# Template switches for thinking, by the names families use, and the effort's.
THINKING_SWITCHES = ("enable_thinking", "thinking")
EFFORT_VARIABLE = "reasoning_effort"
# Variables every template may read that say nothing of the generated turn's layout.
STANDARD_VARIABLES = frozenset(
    {
        "messages",
        "tools",
        "documents",
        "add_generation_prompt",
        "continue_final_message",
        "bos_token",
        "eos_token",
        "pad_token",
        "unk_token",
        "raise_exception",
        "strftime_now",
        "namespace",
        "range",
        "dict",
        "loop",
        "tool_choice",
        "custom_tools",
        "builtin_tools",
        "tools_in_user_message",
        "date_string",
    }
)
# A fixed instant: the probes are compared with each other, never with a request's rendering.
PROBE_INSTANT = dt.datetime(2026, 1, 15, 12, 0, tzinfo=dt.UTC)


class DerivationError(DraftgenError, ValueError):
    """The chat template does not show a generated turn's layout."""


def derive_layout(tokenizer: Any) -> DerivedLayout:
    """The layout the tokenizer's chat template shows (``DerivationError`` if it shows none)."""
    try:
        template = tokenizer.get_chat_template(None, None)
    except Exception:  # transformers raises ValueError when there is none
        template = None
    if not template:
        raise DerivationError(
            "no model profile matches this tokenizer and it has no chat template to derive the "
            "layout from: pass --profile, or use a tokenizer directory with a chat template"
        )
    variables = template_variables(template)
    switch = next((name for name in THINKING_SWITCHES if name in variables), "")
    thinking_on = {switch: True} if switch else {}
    probe = _Probe(tokenizer, thinking_on, _added_tokens(tokenizer))
    notes: list[str] = []

    user_only = probe.render([_user(USER)], False)
    prompted = probe.render([_user(USER)], True)
    if not prompted.startswith(user_only) or prompted == user_only:
        raise DerivationError(
            "the chat template's generation prompt is not text added after the conversation, so "
            "draftgen cannot derive this model's layout from it: pass --profile"
        )
    generation_prompt = prompted[len(user_only) :]
    end_of_turn = _end_of_turn(probe, tokenizer, notes)
    think = _think_block(probe, user_only, generation_prompt, notes)

    if "strftime_now" in template:
        notes.append(
            "the template stamps the date it renders (strftime_now): each prompt "
            "records its instant"
        )
    notes.append(
        "tool-call markup is not derived: samples with tool calls stay unverified "
        "(structured_tool_calls)"
    )
    effort = EFFORT_VARIABLE if EFFORT_VARIABLE in variables else ""
    others = sorted(variables - STANDARD_VARIABLES - {switch, effort})
    return DerivedLayout(
        generation_prompt=generation_prompt,
        end_of_turn=end_of_turn,
        thinking_variable=switch,
        effort_variable=effort,
        variables=tuple(others),
        notes=tuple(notes),
        **think,
    )


def template_variables(template: str) -> set[str]:
    """The variables a Jinja template reads that it does not set itself."""
    import jinja2
    from jinja2 import meta

    environment = jinja2.Environment(extensions=["jinja2.ext.loopcontrols", "jinja2.ext.do"])
    try:
        tree = environment.parse(template)
    except jinja2.TemplateError:
        return set()
    # Jinja counts a name set only inside a branch as undeclared; the template still sets it.
    assigned = {node.name for node in tree.find_all(jinja2.nodes.Name) if node.ctx == "store"}
    return set(meta.find_undeclared_variables(tree)) - assigned


class _Probe:
    """Renders plain messages through the template at a fixed instant."""

    def __init__(self, tokenizer: Any, variables: dict, added: tuple[str, ...]) -> None:
        self.tokenizer = tokenizer
        self.variables = variables
        self.added = added

    def render(self, messages: list[dict], generation_prompt: bool) -> str:
        with template_clock(self.tokenizer, None, PROBE_INSTANT):
            text = self.tokenizer.apply_chat_template(
                messages,
                tokenize=False,
                add_generation_prompt=generation_prompt,
                **self.variables,
            )
        if not isinstance(text, str):
            raise DerivationError(f"the chat template returned {type(text).__name__}, not text")
        return text

    def try_render(self, messages: list[dict]) -> str | None:
        try:
            return self.render(messages, False)
        except DerivationError:
            raise
        except Exception:  # templates raise on shapes they refuse: that shape shows nothing
            return None

    def first_special(self, text: str) -> tuple[int, str] | None:
        """(position, token) of the first added token in ``text``, longest first at a place."""
        for position in range(len(text)):
            for token in self.added:
                if text.startswith(token, position):
                    return position, token
        return None

    def ending_special(self, text: str) -> str:
        """The added token ``text`` ends with (whitespace after it aside), or ""."""
        tail = text.rstrip()
        return next((token for token in self.added if tail.endswith(token)), "")


def _end_of_turn(probe: _Probe, tokenizer: Any, notes: list[str]) -> str:
    answered = probe.try_render(
        [_user(USER), {"role": "assistant", "content": ANSWER}, _user(SECOND_USER)]
    )
    if answered is None or ANSWER not in answered or SECOND_USER not in answered:
        raise DerivationError(
            "the chat template does not render a conversation of user, assistant and user "
            "turns, so draftgen cannot derive this model's layout from it: pass --profile"
        )
    after = answered.index(ANSWER) + len(ANSWER)
    between = answered[after : answered.index(SECOND_USER, after)]
    found = probe.first_special(between)
    if found is not None:
        position, token = found
        if between[:position].strip():
            notes.append(
                f"the template writes {between[:position]!r} after an answer before "
                f"{token!r}: taken as text the model generates"
            )
            return between[: position + len(token)]
        return token
    eos = getattr(tokenizer, "eos_token", None)
    if isinstance(eos, str) and eos:
        notes.append(
            f"no special token follows an answer in the template: the end of turn is the "
            f"tokenizer's eos token {eos!r}"
        )
        return eos
    raise DerivationError(
        "the chat template writes no special token after an answer and the tokenizer names no "
        "eos token, so draftgen cannot tell where a turn ends: pass --profile"
    )


def _think_block(
    probe: _Probe, user_only: str, generation_prompt: str, notes: list[str]
) -> dict[str, Any]:
    for key in REASONING_KEYS:
        rendered = probe.try_render(
            [_user(USER), {"role": "assistant", "content": ANSWER, key: REASONING}]
        )
        if rendered is not None and REASONING in rendered[len(user_only) :]:
            block = _rendered_think_block(probe, rendered, user_only, generation_prompt)
            if block is not None:
                notes.append(f"think block from how the template renders {key!r}")
                return block
    pair = _vocabulary_think_pair(probe.added)
    if pair is not None:
        notes.append(
            "think markers from the vocabulary (the template renders no reasoning): the "
            "whitespace around them is taken from what providers deliver"
        )
        return {"think_start": pair[0], "think_end": pair[1]}
    notes.append(
        "no think block: the template renders no reasoning and the vocabulary has no think "
        "markers, so samples with reasoning stay unverified"
    )
    return {}


def _rendered_think_block(
    probe: _Probe, rendered: str, user_only: str, generation_prompt: str
) -> dict[str, Any] | None:
    start = rendered.index(REASONING, len(user_only))
    answer = rendered.find(ANSWER, start)
    if answer < 0:
        return None
    opening = rendered[len(user_only) : start]
    head = opening[len(os.path.commonprefix([generation_prompt, opening])) :]
    middle = rendered[start + len(REASONING) : answer]
    think_end = middle.strip()
    if not think_end:
        return None
    block: dict[str, Any] = {
        "think_end": think_end,
        "answer_lead": middle[len(middle.rstrip()) :],
    }
    pad_after = middle[: len(middle) - len(middle.lstrip())]
    if head.strip():
        block["think_start"] = head.strip()
        block["think_lead"] = head[: len(head) - len(head.lstrip())]
        block["reasoning_pad"] = (head[len(head.rstrip()) :], pad_after)
        return block
    # The generation prompt already holds the opening marker: the model starts inside the block.
    opened = probe.ending_special(generation_prompt)
    if not opened:
        return None
    block["think_start"] = opened
    # The whitespace after the marker is the prompt's; it is the model's own when it opens the
    # block itself (thinking switched on for a template that does not open it).
    after_opened = generation_prompt[generation_prompt.rindex(opened) + len(opened) :]
    block["reasoning_pad"] = (after_opened, pad_after)
    return block


def _vocabulary_think_pair(added: tuple[str, ...]) -> tuple[str, str] | None:
    """The one pair of added tokens spelled as an opening and closing think marker, if any."""
    present = set(added)
    pairs = []
    for token in added:
        if "think" not in token.lower() or "/" in token:
            continue
        for closing in (token.replace("<", "</", 1), token.replace("[", "[/", 1)):
            if closing != token and closing in present:
                pairs.append((token, closing))
    return pairs[0] if len(pairs) == 1 else None


def _added_tokens(tokenizer: Any) -> tuple[str, ...]:
    """The tokenizer's added tokens' texts, longest first (so a longer one wins at a place)."""
    try:
        texts = list(tokenizer.get_added_vocab())
    except Exception:  # a tokenizer class without added tokens
        texts = []
    return tuple(sorted((t for t in texts if t), key=len, reverse=True))


def _user(text: str) -> dict:
    return {"role": "user", "content": text}

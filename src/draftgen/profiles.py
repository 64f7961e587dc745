"""Model profiles: the one place that knows a model family's delimiters and end-of-turn.

A profile is chosen from the tokenizer's vocabulary (``detect_profile``) or forced by name.
"""

from __future__ import annotations

from dataclasses import dataclass


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
)

QWEN3 = ModelProfile(
    name="qwen3",
    think_start="<think>",
    think_end="</think>",
    end_of_turn="<|im_end|>",
    marker_tokens=("<|im_start|>", "<|im_end|>", "<think>"),
    tool_call_tokens=("<tool_call>", "</tool_call>"),
    reasoning_split_markers=("</think>",),
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

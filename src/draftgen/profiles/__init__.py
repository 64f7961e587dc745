"""Model profiles: the one place that knows each model family, one module per family.

A family module holds everything about it: its ``ModelProfile`` (delimiters, end-of-turn,
tool-call markup, template variables) and its name aliases; its offline test tokenizers are in
``draftgen_testing.families``. Adding a family is adding a module and its entry in ``FAMILIES``.
A profile is chosen from the tokenizer's vocabulary or chat encoder (``detect_profile``) or forced
by name (``get_profile``).
"""

from __future__ import annotations

import json

from draftgen.errors import DraftgenError
from draftgen.profiles import (
    deepseek,
    deepseek_v4,
    glm,
    glm5,
    gpt_oss,
    kimi,
    kimi_k3,
    llama,
    minimax,
    minimax_m3,
    mistral,
    qwen3,
    qwen3_5,
)
from draftgen.profiles.base import (
    DEEPSEEK_TOOL_CALLS,
    DSML_TOOL_CALLS,
    GLM_TOOL_CALLS,
    HARMONY_TOOL_CALLS,
    KIMI_TOOL_CALLS,
    MINIMAX_TOOL_CALLS,
    QWEN3_TOOL_CALLS,
    SPECIAL_SHAPED,
    ModelProfile,
    ToolCallFormatError,
    ToolCallMarkup,
    split_reasoning,
)
from draftgen.profiles.deepseek import DEEPSEEK_V3, DEEPSEEK_V32
from draftgen.profiles.deepseek_v4 import DEEPSEEK_V4, DEEPSEEK_V4_1
from draftgen.profiles.generic import GENERIC, DerivedLayout
from draftgen.profiles.glm import GLM
from draftgen.profiles.gpt_oss import GPT_OSS
from draftgen.profiles.kimi import KIMI_CALL_ID, KIMI_K2
from draftgen.profiles.minimax import MINIMAX_M2
from draftgen.profiles.qwen3 import QWEN3

# In detection order: Kimi before Qwen3 (both use <|im_end|>; only Kimi has <|im_middle|>), Qwen3.5
# before Qwen3 (its markers are Qwen3's and more), DeepSeek V4.1 before V3 (V3's markers and
# <｜System｜>), GLM-5 before GLM-4.5 (the same names, at its own ids), MiniMax-M3 before M2 (M2's
# markers and <mm:think>). The others share no marker with any family before them.
FAMILIES = (
    kimi,
    kimi_k3,
    deepseek_v4,
    deepseek,
    qwen3_5,
    qwen3,
    glm5,
    glm,
    minimax_m3,
    minimax,
    gpt_oss,
    mistral,
    llama,
)

PROFILES: dict[str, ModelProfile] = {}
for _family in FAMILIES:
    PROFILES.update({profile.name: profile for profile in _family.PROFILES})
# Names that are the same format as a profile (forceable with --profile too).
for _family in FAMILIES:
    PROFILES.update(_family.ALIASES)
DETECTION_ORDER: tuple[ModelProfile, ...] = tuple(
    profile for family in FAMILIES for profile in family.PROFILES if profile.detect_by_vocab
)


# The names ``--profile`` takes: every profile and alias, then the generic profile (the layout
# derived from the tokenizer's chat template, ``draftgen.tokens.derived_profile``).
PROFILE_NAMES: tuple[str, ...] = (*sorted(PROFILES), GENERIC)
# The run store's meta key holding the generic profile's layout (JSON), beside meta ``profile``.
DERIVED_LAYOUT = "derived_layout"


class UnknownProfileError(DraftgenError, ValueError):
    pass


def get_profile(name: str) -> ModelProfile:
    try:
        return PROFILES[name]
    except KeyError:
        known = ", ".join(sorted(PROFILES))
        raise UnknownProfileError(
            f"unknown profile {name!r}: use one of {known}, or omit --profile to detect it"
        ) from None


def run_profile_named(name: str, derived_layout: str | None = None) -> ModelProfile:
    """A run's profile by the name its store keeps (meta ``profile``); the generic one from the
    layout it stored as JSON (meta ``derived_layout``)."""
    if name == GENERIC:
        if not derived_layout:
            raise UnknownProfileError(
                "this run's profile is the generic one but its store holds no derived layout: "
                "run the same command again to derive it"
            )
        return DerivedLayout.from_json(json.loads(derived_layout)).profile()
    return get_profile(name)


def detect_profile(vocab: dict[str, int] | set[str], encoder_file: str = "") -> ModelProfile:
    """Pick the profile of the model's Python chat encoder (``encoder_file``, a file name under
    ``encoding/``) whose marker tokens the vocabulary has, else the first whose marker tokens are
    all in the vocabulary (specials too).

    A DeepSeek vocabulary without an encoder gets deepseek-v3 (V3.1's markup). An encoder a
    profile names in a vocabulary without that profile's markers is refused: V4.1's
    ``encoding.py`` is too plain a name to trust alone.
    """
    named = [p for p in PROFILES.values() if encoder_file and encoder_file in p.encoder_files]
    for profile in named:
        if profile.matches_vocab(vocab):
            return profile
    if named:
        missing = [t for t in named[0].marker_tokens if t not in vocab]
        raise UnknownProfileError(
            f"{encoder_file} is the chat encoder of {named[0].name}, but this tokenizer's "
            f"vocabulary lacks {', '.join(missing)}: pass --profile"
        )
    for profile in DETECTION_ORDER:
        if profile.matches_vocab(vocab):
            return profile
    known = ", ".join(sorted(PROFILES))
    raise UnknownProfileError(
        f"no model profile matches this tokenizer's special tokens: pass --profile ({known})"
    )


__all__ = [
    "DERIVED_LAYOUT",
    "GENERIC",
    "PROFILE_NAMES",
    "DerivedLayout",
    "run_profile_named",
    "DEEPSEEK_TOOL_CALLS",
    "DEEPSEEK_V3",
    "DEEPSEEK_V32",
    "DEEPSEEK_V4",
    "DEEPSEEK_V4_1",
    "DETECTION_ORDER",
    "DSML_TOOL_CALLS",
    "FAMILIES",
    "GLM",
    "GLM_TOOL_CALLS",
    "GPT_OSS",
    "HARMONY_TOOL_CALLS",
    "KIMI_CALL_ID",
    "KIMI_K2",
    "KIMI_TOOL_CALLS",
    "MINIMAX_M2",
    "MINIMAX_TOOL_CALLS",
    "PROFILES",
    "QWEN3",
    "QWEN3_TOOL_CALLS",
    "SPECIAL_SHAPED",
    "ModelProfile",
    "ToolCallFormatError",
    "ToolCallMarkup",
    "UnknownProfileError",
    "detect_profile",
    "get_profile",
    "split_reasoning",
]

"""Kimi K2 / K2-Thinking / K2.5 (Moonshot): ``<|im_*|>`` turns, ``<think>``, tool-call sections.

Turns end with ``<|im_end|>`` although the tokenizer names ``[EOS]`` as eos; K2.5's prompt opens
``<think>`` (or ``<think></think>`` with ``thinking=false``); K2-Thinking's model opens it itself.
"""

from __future__ import annotations

import re

from draftgen.profiles.base import KIMI_TOOL_CALLS, ModelProfile
from draftgen.profiles.fixture import QwenBpeFixture, RemoteCodeFixture

# Kimi names each call ``functions.NAME:INDEX`` in the markup; providers may rename it.
KIMI_CALL_ID = re.compile(r"functions\.[^\s:]+:\d+")


def write_tool_calls(
    parsed: list, arguments: list, content: str, lead_free: bool
) -> tuple[str, tuple[str, ...]]:
    """``<|tool_calls_section_begin|>`` + one ``<|tool_call_begin|>ID<|tool_call_argument_begin|>
    ARGS<|tool_call_end|>`` per call; an id that is not Kimi's own is rebuilt from the position."""
    notes: list[str] = []
    parts: list[str] = []
    for index, ((name, call_id, _), args) in enumerate(zip(parsed, arguments, strict=True)):
        if not KIMI_CALL_ID.fullmatch(call_id):
            call_id = f"functions.{name}:{index}"
            if "tool_call_id_rebuilt" not in notes:
                notes.append("tool_call_id_rebuilt")
        parts.append(
            f"<|tool_call_begin|>{call_id}<|tool_call_argument_begin|>{args}<|tool_call_end|>"
        )
    text = "<|tool_calls_section_begin|>" + "".join(parts) + "<|tool_calls_section_end|>"
    return text, tuple(notes)


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
    tool_call_writer=write_tool_calls,
    thinking_variable="thinking",
)

PROFILES = (KIMI_K2,)
ALIASES: dict[str, ModelProfile] = {}

# -- fixtures ----------------------------------------------------------------------------------

KIMI_SPECIAL_TOKENS: dict[int, str] = {
    163584: "[BOS]",
    163585: "[EOS]",
    163586: "<|im_end|>",
    163587: "<|im_user|>",
    163588: "<|im_assistant|>",
    163593: "[EOT]",
    163594: "<|im_system|>",
    163595: "<|tool_calls_section_begin|>",
    163596: "<|tool_calls_section_end|>",
    163597: "<|tool_call_begin|>",
    163598: "<|tool_call_argument_begin|>",
    163599: "<|tool_call_end|>",
    163601: "<|im_middle|>",
    163606: "<think>",
    163607: "</think>",
    # Kimi's tokenizer_config.json names these as unk/pad at the top of its vocabulary.
    163838: "[UNK]",
    163839: "[PAD]",
}
KIMI_VOCAB_SIZE = 163840
# As Kimi's tokenizer_config.json: eos is [EOS] although turns end with <|im_end|>.
KIMI_CONFIG = {
    "bos_token": "[BOS]",
    "eos_token": "[EOS]",
    "unk_token": "[UNK]",
    "pad_token": "[PAD]",
    "model_max_length": 262144,
}
# In K2.5's tokenizer_config.json the think and tool-call tokens are added tokens marked
# `special: false`: skip_special_tokens keeps them, and slow decoding treats them apart.
KIMI_K25_NON_SPECIAL = frozenset(
    {
        "<think>",
        "</think>",
        "<|tool_calls_section_begin|>",
        "<|tool_calls_section_end|>",
        "<|tool_call_begin|>",
        "<|tool_call_argument_begin|>",
        "<|tool_call_end|>",
    }
)

FIXTURES = {
    "kimi-k2.5": QwenBpeFixture(
        added_tokens=KIMI_SPECIAL_TOKENS, vocab_size=KIMI_VOCAB_SIZE, config=KIMI_CONFIG
    ),
    "kimi-k2-thinking": QwenBpeFixture(
        added_tokens=KIMI_SPECIAL_TOKENS, vocab_size=KIMI_VOCAB_SIZE, config=KIMI_CONFIG
    ),
    # K2.5 as its repository ships it: remote code (a slow tiktoken tokenizer) and the same ranks
    # and template as "kimi-k2.5", so both give the same prompt ids.
    "kimi-k2.5-remote": RemoteCodeFixture(
        added_tokens=KIMI_SPECIAL_TOKENS,
        vocab_size=KIMI_VOCAB_SIZE,
        code="tokenization_kimi_fixture.py",
        module="tokenization_kimi.py",
        class_name="TikTokenTokenizer",
        template="kimi-k2.5",
        non_special=KIMI_K25_NON_SPECIAL,
        config={
            **KIMI_CONFIG,
            "additional_special_tokens": [
                "<|im_end|>",
                "<|im_user|>",
                "<|im_assistant|>",
                "[EOT]",
                "<|im_system|>",
                "<|im_middle|>",
            ],
        },
    ),
}

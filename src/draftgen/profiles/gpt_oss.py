"""gpt-oss (OpenAI's harmony format): reasoning is the ``analysis`` channel, the answer the
``final`` channel, tool calls ``commentary`` messages addressed to ``functions.NAME``.

vLLM renders gpt-oss prompts with openai-harmony, not with the chat template
(``draftgen.tokens.harmony``); so does draftgen. The template is kept for the fixture only:
servers that do render it are caught by the prompt count where it differs.

What lies between reasoning and answer is ``<|end|><|start|>assistant<|channel|>final<|message|>``,
not ``</think>``. The prompt ends ``<|start|>assistant``; the model writes the channel header
itself. The system message carries ``reasoning_effort`` (low, medium or high: vLLM refuses any
other) and the conversation's start date.
"""

from __future__ import annotations

from draftgen.profiles.base import HARMONY_TOOL_CALLS, ModelProfile
from draftgen.profiles.fixture import QwenBpeFixture


def write_tool_calls(
    parsed: list, arguments: list, content: str, lead_free: bool
) -> tuple[str, tuple[str, ...]]:
    """One commentary message per call, addressed to the function; the turn's own end
    (``<|call|>``) closes the last one, so only the ones before it are closed here."""
    constrain = "" if lead_free else " <|constrain|>json"
    parts = [
        f"<|start|>assistant<|channel|>commentary to=functions.{name}{constrain}<|message|>{args}"
        for (name, _, _), args in zip(parsed, arguments, strict=True)
    ]
    return "<|call|>".join(parts), ()


GPT_OSS = ModelProfile(
    name="gpt-oss",
    think_start="<|channel|>analysis<|message|>",
    think_end="<|end|>",
    end_of_turn="<|return|>",
    marker_tokens=("<|start|>", "<|channel|>", "<|message|>", "<|return|>"),
    tool_call_tokens=("<|constrain|>", "<|call|>"),
    reasoning_split_markers=("<|end|>",),
    tool_call_format=HARMONY_TOOL_CALLS,
    tool_call_writer=write_tool_calls,
    content_start="<|start|>assistant<|channel|>final<|message|>",
    tool_content_start="<|start|>assistant<|channel|>commentary<|message|>",
    tool_content_end="<|end|>",
    tool_call_end_of_turn="<|call|>",
    effort_variable="reasoning_effort",
    efforts=("low", "medium", "high"),
    efforts_strict=True,
    prompt_renderer="harmony",
)

PROFILES = (GPT_OSS,)
ALIASES: dict[str, ModelProfile] = {}

# -- fixtures ----------------------------------------------------------------------------------

# gpt-oss's real vocabulary: o200k's ranks 0..199997 (quicktok-v1's data/o200k.vocab, the file
# tiktoken and openai-harmony pin: draftgen.tokens.o200k checks it), split by o200k's pattern,
# then o200k_harmony's added tokens from 199998 (data/o200k_harmony.special, which also names
# every reserved id, <|reserved_200000|> and on). The named ones, as the real ids:
GPT_OSS_SPECIAL_TOKENS: dict[int, str] = {
    199998: "<|startoftext|>",
    199999: "<|endoftext|>",
    200002: "<|return|>",
    200003: "<|constrain|>",
    200005: "<|channel|>",
    200006: "<|start|>",
    200007: "<|end|>",
    200008: "<|message|>",
    200012: "<|call|>",
    200018: "<|endofprompt|>",
}
GPT_OSS_VOCAB_SIZE = 201088
GPT_OSS_BASE_VOCAB = 199998
# tiktoken's o200k_base pat_str (tiktoken_ext/openai_public.py), the Split regex of gpt-oss's
# tokenizer.json: cased words with their contraction, digits in threes, "/" kept after punctuation.
O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)

FIXTURES = {
    "gpt-oss": QwenBpeFixture(
        added_tokens=GPT_OSS_SPECIAL_TOKENS,
        vocab_size=GPT_OSS_VOCAB_SIZE,
        config={
            "bos_token": "<|startoftext|>",
            "eos_token": "<|return|>",
            "pad_token": "<|endoftext|>",
            "unk_token": None,
            "model_max_length": 131072,
        },
        ranks="quicktok:o200k",
        base_vocab=GPT_OSS_BASE_VOCAB,
        pattern=O200K_PATTERN,
        # 200018 is both <|endofprompt|> and <|reserved_200018|> there: the named one is taken.
        specials="quicktok:o200k_harmony",
    ),
}

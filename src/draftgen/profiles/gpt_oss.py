"""gpt-oss (OpenAI's harmony format): reasoning is the ``analysis`` channel, the answer the
``final`` channel, tool calls ``commentary`` messages addressed to ``functions.NAME``.

What lies between reasoning and answer is ``<|end|><|start|>assistant<|channel|>final<|message|>``,
not ``</think>``. The prompt ends ``<|start|>assistant``; the model writes the channel header
itself. The template reads ``reasoning_effort`` and stamps the current date (``strftime_now``).
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
)

PROFILES = (GPT_OSS,)
ALIASES: dict[str, ModelProfile] = {}

# -- fixtures ----------------------------------------------------------------------------------

# gpt-oss's o200k_harmony specials at their real ids. tiktoken's o200k ranks are not cached on
# this machine, so the ordinary tokens are Qwen's (ids below 151643) and ids up to 199997, which
# are ordinary o200k tokens in the real vocabulary, are reserved placeholders here.
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
    ),
}

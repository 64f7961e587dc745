"""gpt-oss (OpenAI's harmony format): reasoning is the ``analysis`` channel, the answer the
``final`` channel, tool calls ``commentary`` messages addressed to ``functions.NAME``.

vLLM renders gpt-oss prompts with openai-harmony, not with the chat template
(``draftgen.tokens.harmony``); so does draftgen. The template is kept for the test fixture only:
servers that do render it are caught by the prompt count where it differs.

What lies between reasoning and answer is ``<|end|><|start|>assistant<|channel|>final<|message|>``,
not ``</think>``. The prompt ends ``<|start|>assistant``; the model writes the channel header
itself. The system message carries ``reasoning_effort`` (low, medium or high: vLLM refuses any
other) and the conversation's start date.
"""

from __future__ import annotations

from draftgen.profiles.base import HARMONY_TOOL_CALLS, ModelProfile


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
    tool_arguments_dump="ascii",
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

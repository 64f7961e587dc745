"""Mistral's instruct models (Mistral Large, Devstral) and Magistral, their reasoning models:
control tokens in square brackets, the turn ends with ``</s>``, prompts rendered by mistral-common.

vLLM renders these prompts with mistral-common, not a Jinja template (``draftgen.tokens.mistral``,
``prompt_renderer="mistral-common"``). The prompt ends ``[/INST]`` (or ``[/TOOL_RESULTS]``) and
the model writes everything after it, counted in ``completion_tokens`` up to ``</s>``:

- Magistral (tekken v13, ``[THINK]`` 34, ``[/THINK]`` 35): ``[THINK]R[/THINK]A</s>``, the think
  block written by the model itself (no prompt opens it; it may write none); tool calls one by
  one as ``[TOOL_CALLS]name[ARGS]{json}`` after the answer (``InstructTokenizerV13.
  _encode_tool_calls_in_assistant_message``: no call id since v13), then ``</s>``. vLLM's
  reasoning parser (``vllm/reasoning/mistral_reasoning_parser.py``) splits at ``[THINK]`` and
  ``[/THINK]``.
- Mistral Large 2411 / Devstral 2505 class (v7): no think tokens; tool calls
  ``[TOOL_CALLS][{"name": ..., "arguments": {...}}]`` (``InstructTokenizerV2``'s JSON list),
  the generated form unconfirmed (history adds each call's ``id``; the model's own output and
  vLLM's tool parser were not checked).

The reasoning effort reaches mistral-common only for tokenizer versions that take model settings
(v15 and later, ``none``/``high``); vLLM never passes ``chat_template_kwargs`` (it refuses them).
"""

from __future__ import annotations

from draftgen.profiles.base import ModelProfile

MISTRAL_V13_TOOL_CALLS = "mistral-v13"
MISTRAL_V7_TOOL_CALLS = "mistral-v7"


def write_v13_tool_calls(
    parsed: list, arguments: list, content: str, lead_free: bool
) -> tuple[str, tuple[str, ...]]:
    """``[TOOL_CALLS]name[ARGS]arguments`` per call, nothing between the calls."""
    return (
        "".join(
            f"[TOOL_CALLS]{name}[ARGS]{args}"
            for (name, _, _), args in zip(parsed, arguments, strict=True)
        ),
        (),
    )


def write_v7_tool_calls(
    parsed: list, arguments: list, content: str, lead_free: bool
) -> tuple[str, tuple[str, ...]]:
    """``[TOOL_CALLS]`` and one JSON list of ``{"name": ..., "arguments": ...}`` objects."""
    calls = ", ".join(
        f'{{"name": "{name}", "arguments": {args}}}'
        for (name, _, _), args in zip(parsed, arguments, strict=True)
    )
    return f"[TOOL_CALLS][{calls}]", ()


MAGISTRAL = ModelProfile(
    name="magistral",
    think_start="[THINK]",
    think_end="[/THINK]",
    end_of_turn="</s>",
    marker_tokens=("[INST]", "[/INST]", "[THINK]", "[/THINK]", "[ARGS]"),
    tool_call_tokens=("[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"),
    tool_call_format=MISTRAL_V13_TOOL_CALLS,
    tool_call_writer=write_v13_tool_calls,
    effort_variable="reasoning_effort",
    efforts=("none", "high"),
    prompt_renderer="mistral-common",
)

MISTRAL = ModelProfile(
    name="mistral",
    # No think tokens in this vocabulary: the names never match the model's text, so a turn is
    # always read as an answer.
    think_start="[THINK]",
    think_end="[/THINK]",
    end_of_turn="</s>",
    marker_tokens=("[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]"),
    tool_call_tokens=("[TOOL_CALLS]",),
    tool_call_format=MISTRAL_V7_TOOL_CALLS,
    tool_arguments_dump="unicode",
    tool_call_writer=write_v7_tool_calls,
    tool_call_format_unconfirmed=(
        "Mistral's v7 tool-call markup is written from mistral-common's history encoding; what "
        "the model generates (call ids, spacing) is unconfirmed"
    ),
    prompt_renderer="mistral-common",
)

# Magistral before Mistral: its markers are Mistral's and the think tokens.
PROFILES = (MAGISTRAL, MISTRAL)
ALIASES: dict[str, ModelProfile] = {"devstral": MISTRAL, "mistral-large": MISTRAL}

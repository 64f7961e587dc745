"""Qwen3.5 / Qwen3.6 / Qwen3.8: ``<|im_start|>`` turns, a prompt that opens ``<think>\\n``,
``enable_thinking``, XML tool calls (``<function=NAME>`` with one ``<parameter=KEY>`` per key),
tool results in a user turn, text normalised to NFC by the tokenizer.

The three write the same generated text; their templates differ in what they read (Qwen3.6 also
``preserve_thinking``, Qwen3.8 ``reasoning_effort`` and a kept history by default), which the
model's own template decides when the prompt is rendered. ``reasoning_effort`` is set from the
request's effort for all three: Qwen3.5's and Qwen3.6's templates ignore it.
"""

from __future__ import annotations

from draftgen.profiles.base import ModelProfile

# How Qwen3.5 writes its tool calls (Qwen3-Coder's XML shape inside <tool_call> tags).
QWEN3_5_TOOL_CALLS = "qwen3.5"
# Qwen3.5 and Qwen3.6 are seen writing Python's True/False (and None) for non-string parameters
# as well as JSON's true/false/null; one token either way, so a count cannot tell which.
SPELLED_TWO_WAYS = frozenset({"true", "false", "null"})
LITERAL_UNPROVEN = "tool_argument_literal_unproven"


def write_tool_calls(
    parsed: list, arguments: list, content: str, lead_free: bool
) -> tuple[str, tuple[str, ...]]:
    """``<tool_call>\\n<function=NAME>\\n`` + ``<parameter=KEY>\\nVALUE\\n</parameter>\\n`` per key
    + ``</function>\\n</tool_call>`` per call; "\\n\\n" before the first after text, "\\n" between.

    A string value is written as it is, any other as JSON (what Qwen3.6's and Qwen3.8's templates
    render; Qwen3.5's writes Python's ``str`` for scalars). A boolean or null value leaves a note:
    the model may have spelled it either way.
    """
    parts: list[str] = []
    notes: list[str] = []
    for index, ((name, _, _), params) in enumerate(zip(parsed, arguments, strict=True)):
        # The template checks the text after trimming it: a parser that hands back only the
        # "\n\n" after </think> leaves content that is no text, and no lead is written.
        if index:
            lead = "\n"
        else:
            lead = "\n\n" if content.strip() and not lead_free else ""
        body = "".join(f"<parameter={key}>\n{value}\n</parameter>\n" for key, value, _ in params)
        parts.append(f"{lead}<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>")
        for key, value, is_text in params:
            if not is_text and value in SPELLED_TWO_WAYS:
                notes.append(f"{LITERAL_UNPROVEN}={name}.{key}")
    return "".join(parts), tuple(dict.fromkeys(notes))


QWEN3_5 = ModelProfile(
    name="qwen3.5",
    think_start="<think>",
    think_end="</think>",
    end_of_turn="<|im_end|>",
    # Qwen3's markers and an ordinary token of Qwen3.5's own 248,044 BPE ranks that Qwen's 151,643
    # do not hold (its added tokens are all Qwen3's or Qwen3-Omni's, whose tool calls are JSON).
    marker_tokens=("<|im_start|>", "<|im_end|>", "<think>", "lebih"),
    tool_call_tokens=("<tool_call>", "</tool_call>"),
    reasoning_split_markers=("</think>",),
    # vLLM's qwen3 parser ends reasoning at "<tool_call>" then "<function=" when no </think> came.
    tool_call_ends_reasoning=True,
    tool_call_format=QWEN3_5_TOOL_CALLS,
    tool_arguments_dump="unicode",
    tool_call_writer=write_tool_calls,
    xml_arguments=True,
    thinking_variable="enable_thinking",
    # Qwen3.8's template: xhigh (its default) and low add a system line, medium none.
    effort_variable="reasoning_effort",
    efforts=("low", "medium", "xhigh"),
    # The prompt opens "<think>\n"; the model writes "R\n</think>\n\nA<|im_end|>".
    reasoning_pad=("\n", "\n"),
    answer_lead="\n\n",
)

PROFILES = (QWEN3_5,)
ALIASES = {"qwen3.6": QWEN3_5, "qwen3.8": QWEN3_5}

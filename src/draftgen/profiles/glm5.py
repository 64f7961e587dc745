"""GLM-5.x (Zhipu: GLM-5.1, 5.2, 5.3): GLM-4.5's role tokens without newlines, an effort line,
history reasoning (5.3 keeps it; 5.2 drops it before the last user turn unless
``clear_thinking`` is false), tool calls as ``<tool_call>NAME<arg_key>…`` on one line.

Every prompt opens ``[gMASK]<sop><|system|>Reasoning Effort: X`` (5.3: ``reasoning_effort``
``low``/``high`` give Low/High, anything else Max, always written; 5.2: only ``high`` gives High,
and the line is left out when ``enable_thinking`` is false) and ends ``<|assistant|><think>``
(5.2 with thinking off: ``<think></think>``; 5.3 has no switch). The model writes
``R</think>A`` and stops by generating the next role token, which vLLM and SGLang count in
``completion_tokens`` and return in ``token_ids``: ``<|user|>`` after an answer,
``<|observation|>`` after tool calls. Raw tool calls in content (no ``tools`` sent) end the same
way as structured ones (assumed: the template renders ``<|observation|>`` after any call).
"""

from __future__ import annotations

from draftgen.profiles.base import ModelProfile

GLM5_TOOL_CALLS = "glm5"


def write_tool_calls(
    parsed: list, arguments: list, content: str, lead_free: bool
) -> tuple[str, tuple[str, ...]]:
    """``<tool_call>NAME`` then ``<arg_key>K</arg_key><arg_value>V</arg_value>`` per key, per
    call, with nothing between them or before the first (the template's ``content.strip()`` is
    followed directly by the calls)."""
    parts = []
    for (name, _, _), params in zip(parsed, arguments, strict=True):
        pairs = "".join(
            f"<arg_key>{key}</arg_key><arg_value>{value}</arg_value>" for key, value, _ in params
        )
        parts.append(f"<tool_call>{name}{pairs}</tool_call>")
    return "".join(parts), ()


GLM5 = ModelProfile(
    name="glm-5",
    think_start="<think>",
    think_end="</think>",
    end_of_turn="<|user|>",
    marker_tokens=("[gMASK]", "<sop>", "<|assistant|>", "<|observation|>"),
    # GLM-4.5's names, each 3491 ids further on: the ids tell the two families apart.
    marker_ids=(("<|user|>", 154827), ("<|observation|>", 154829)),
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
    tool_call_format=GLM5_TOOL_CALLS,
    tool_arguments_dump="unicode",
    tool_call_writer=write_tool_calls,
    xml_arguments=True,
    tool_call_end_of_turn="<|observation|>",
    raw_tool_call_close="</tool_call>",
    # 5.2 reads it; 5.3's template ignores it (the prompt is the same either way).
    thinking_variable="enable_thinking",
    effort_variable="reasoning_effort",
    # What the templates tell apart (5.2 only high); minimal -> low, medium -> high, and xhigh,
    # OpenRouter's name for GLM's top rung, -> max. The template turns the rest into Max.
    efforts=("low", "high", "max"),
    effort_map=(("xhigh", "max"),),
)

PROFILES = (GLM5,)
ALIASES = {"glm-5.1": GLM5, "glm-5.2": GLM5, "glm-5.3": GLM5}

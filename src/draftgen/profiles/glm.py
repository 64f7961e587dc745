"""GLM-4.5 / 4.6 (Zhipu): ``[gMASK]<sop>``, role tokens that close turns, ``enable_thinking``,
tool calls as ``<tool_call>NAME`` with ``<arg_key>``/``<arg_value>`` pairs.

A turn ends where the model writes the next role token. vLLM and SGLang stop on
generation_config's eos ids (``<|endoftext|>``, ``<|user|>``, ``<|observation|>``) and count the
stop token in completion_tokens; draftgen assumes ``<|user|>`` after an answer and
``<|observation|>`` after tool calls (what the template renders next). A turn ended by
``<|endoftext|>`` has the same count, so only server ids can show it.
"""

from __future__ import annotations

from draftgen.profiles.base import GLM_TOOL_CALLS, ModelProfile


def write_tool_calls(
    parsed: list, arguments: list, content: str, lead_free: bool
) -> tuple[str, tuple[str, ...]]:
    """The template's ``"\\n<tool_call>NAME"`` then one key/value pair per line, per call."""
    parts = []
    for index, ((name, _, _), params) in enumerate(zip(parsed, arguments, strict=True)):
        lead = "" if lead_free and index == 0 else "\n"
        pairs = "".join(
            f"<arg_key>{key}</arg_key>\n<arg_value>{value}</arg_value>\n"
            for key, value, _ in params
        )
        parts.append(f"{lead}<tool_call>{name}\n{pairs}</tool_call>")
    return "".join(parts), ()


GLM = ModelProfile(
    name="glm-4.5",
    think_start="<think>",
    think_end="</think>",
    end_of_turn="<|user|>",
    marker_tokens=("[gMASK]", "<sop>", "<|assistant|>", "<|observation|>"),
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
    tool_call_format=GLM_TOOL_CALLS,
    tool_arguments_dump="unicode",
    tool_call_writer=write_tool_calls,
    xml_arguments=True,
    thinking_variable="enable_thinking",
    think_lead="\n",
    tool_call_end_of_turn="<|observation|>",
    answer_lead="\n",
)

PROFILES = (GLM,)
ALIASES = {"glm-4.6": GLM}

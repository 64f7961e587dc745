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
from draftgen.profiles.fixture import QwenBpeFixture


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
    tool_call_writer=write_tool_calls,
    xml_arguments=True,
    thinking_variable="enable_thinking",
    think_lead="\n",
    tool_call_end_of_turn="<|observation|>",
    answer_lead="\n",
)

PROFILES = (GLM,)
ALIASES = {"glm-4.6": GLM}

# -- fixtures ----------------------------------------------------------------------------------

# GLM-4.5/4.6's added tokens in their real order, the first at 151329. GLM's own BPE is not
# available offline and Qwen's 151643 ranks overlap those ids, so the fixture appends them after
# Qwen's ranks: each sits at its real id + 314 (151329 + 314 = 151643).
GLM_REAL_FIRST_ID = 151329
GLM_TOKENS: tuple[str, ...] = (
    "<|endoftext|>",
    "[MASK]",
    "[gMASK]",
    "[sMASK]",
    "<sop>",
    "<eop>",
    "<|system|>",
    "<|user|>",
    "<|assistant|>",
    "<|observation|>",
    "<|begin_of_image|>",
    "<|end_of_image|>",
    "<|begin_of_video|>",
    "<|end_of_video|>",
    "<|begin_of_audio|>",
    "<|end_of_audio|>",
    "<|begin_of_transcription|>",
    "<|end_of_transcription|>",
    "<|code_prefix|>",
    "<|code_middle|>",
    "<|code_suffix|>",
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<arg_key>",
    "</arg_key>",
    "<arg_value>",
    "</arg_value>",
    "/nothink",
)
GLM_SPECIAL_TOKENS: dict[int, str] = dict(enumerate(GLM_TOKENS, start=151643))
# GLM marks its think and tool tokens `special: false` like Qwen3 (*unconfirmed*: only whether
# skip_special_tokens keeps them depends on it).
GLM_NON_SPECIAL = frozenset(GLM_TOKENS[GLM_TOKENS.index("<think>") :])

FIXTURES = {
    "glm-4.6": QwenBpeFixture(
        added_tokens=GLM_SPECIAL_TOKENS,
        vocab_size=max(GLM_SPECIAL_TOKENS) + 1,
        non_special=GLM_NON_SPECIAL,
        config={
            "bos_token": None,
            "eos_token": "<|endoftext|>",
            "pad_token": "<|endoftext|>",
            "unk_token": None,
            "model_max_length": 202752,
        },
    ),
}

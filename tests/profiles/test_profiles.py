"""The rules every profile applies the same way (``draftgen.profiles.base.ModelProfile``)."""

from __future__ import annotations

import pytest

from draftgen.profiles import GLM, GPT_OSS, KIMI_K2, QWEN3
from draftgen.profiles.glm5 import GLM5
from draftgen.profiles.kimi_k3 import KIMI_K3

CALL = {"id": "call_0", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}


@pytest.mark.parametrize(
    "profile, content, tool_turn, stripped",
    [
        (QWEN3, "A<|im_end|>", False, "A"),
        # Repeated ends all go; an end inside the text stays.
        (QWEN3, "A<|im_end|><|im_end|>", False, "A"),
        (QWEN3, "A<|im_end|>B", False, "A<|im_end|>B"),
        (QWEN3, "A", False, "A"),
        (QWEN3, "", False, ""),
        (KIMI_K2, "A<|im_end|>", True, "A"),
        # GLM-4.5: <|observation|> ends a tool-call turn only.
        (GLM, "A<|user|>", False, "A"),
        (GLM, "A<|observation|>", False, "A<|observation|>"),
        (GLM, "A<|observation|>", True, "A"),
        (GLM, "A<|observation|><|user|>", True, "A"),
        # GLM-5: raw calls in content end the turn as calls do, so <|observation|> goes too.
        (GLM5, "A</tool_call><|observation|>", False, "A</tool_call>"),
        (GLM5, "A<|observation|>", False, "A"),
        # Harmony: <|call|> ends a tool-call turn, <|return|> any other.
        (GPT_OSS, "A<|return|>", False, "A"),
        (GPT_OSS, "A<|call|>", False, "A<|call|>"),
        (GPT_OSS, "A<|call|>", True, "A"),
        (KIMI_K3, "A<|end_of_msg|>", False, "A"),
    ],
)
def test_strip_end_of_turn(profile, content, tool_turn, stripped):
    assert profile.strip_end_of_turn(content, tool_turn) == stripped


def test_prompt_mode_ignores_trailing_whitespace_and_defers_to_a_segmented_family():
    assert QWEN3.prompt_mode("<|im_start|>assistant\n<think>\n") == "open"
    assert QWEN3.prompt_mode("<|im_start|>assistant\n<think>\n\n</think>\n\n") == "closed"
    assert QWEN3.prompt_mode("<|im_start|>assistant\n") == "model_opens"
    # Kimi K3 reads its own markup: trailing whitespace would be content there.
    assert KIMI_K3.prompt_mode("x<|open|>think<|sep|>") == "open"
    assert KIMI_K3.prompt_mode("x<|open|>response<|sep|>") == "closed"
    assert KIMI_K3.prompt_mode("x<|open|>think<|sep|>\n") == "model_opens"


def test_raw_tool_call_text():
    assert QWEN3.raw_tool_call_text(CALL) == (
        '\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    )
    assert GLM.raw_tool_call_text(CALL) == (
        "\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
        "</tool_call>"
    )
    assert GPT_OSS.raw_tool_call_text(CALL) == ""  # harmony calls go to a channel

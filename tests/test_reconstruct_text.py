"""Reading a completion's text into candidate generated texts (no tokenizer needed)."""

from __future__ import annotations

import pytest

from draftgen.profiles import DEEPSEEK_V3, KIMI_K2, QWEN3
from draftgen.reconstruct import prompt_mode, read_completion
from draftgen.records import Completion

K25_PROMPT = "<|im_user|>user<|im_middle|>hi<|im_end|><|im_assistant|>assistant<|im_middle|><think>"
K2T_PROMPT = "<|im_user|>user<|im_middle|>hi<|im_end|><|im_assistant|>assistant<|im_middle|>"
OFF_PROMPT = K25_PROMPT + "</think>"


def completion(reasoning, content, finish="stop", tool_calls=None):
    return Completion("gen", "p", "m", reasoning, content, tool_calls, finish, finish)


def test_prompt_modes():
    assert prompt_mode(K25_PROMPT, KIMI_K2) == "open"
    assert prompt_mode(K2T_PROMPT, KIMI_K2) == "model_opens"
    assert prompt_mode(OFF_PROMPT, KIMI_K2) == "closed"
    assert prompt_mode("<|im_start|>assistant\n<think>\n", QWEN3) == "open"
    assert prompt_mode("<｜Assistant｜></think>", DEEPSEEK_V3) == "closed"


@pytest.mark.parametrize(
    "prompt, reasoning, content, finish, texts, notes",
    [
        (K25_PROMPT, "R", "A", "stop", ["R</think>A<|im_end|>"], []),
        (K2T_PROMPT, "R", "A", "stop", ["<think>R</think>A<|im_end|>"], []),
        # Empty or missing reasoning: the model closed thinking at once.
        (K25_PROMPT, None, "A", "stop", ["</think>A<|im_end|>"], []),
        (K25_PROMPT, "", "A", "stop", ["</think>A<|im_end|>"], []),
        # The model that opens thinking itself may also skip it: both readings, count decides.
        (K2T_PROMPT, None, "A", "stop", ["<think></think>A<|im_end|>", "A<|im_end|>"], []),
        # No reasoning split by the provider: the markup is still in content.
        (K25_PROMPT, None, "R</think>A", "stop", ["R</think>A<|im_end|>"], ["no_reasoning_split"]),
        (
            K2T_PROMPT,
            None,
            "<think>R</think>A",
            "stop",
            ["<think>R</think>A<|im_end|>"],
            ["no_reasoning_split"],
        ),
        # Leaked end-of-turn text is stripped; never two.
        (K25_PROMPT, "R", "A<|im_end|>", "stop", ["R</think>A<|im_end|>"], ["leaked_end_of_turn"]),
        (
            K25_PROMPT,
            "R",
            "A<|im_end|><|im_end|>",
            "stop",
            ["R</think>A<|im_end|>"],
            ["leaked_end_of_turn"],
        ),
        # Truncation: no end-of-turn; cut inside reasoning is ambiguous at the think_end boundary.
        (K25_PROMPT, "R", "A", "length", ["R</think>A"], []),
        (K25_PROMPT, "R", "", "length", ["R", "R</think>"], []),
        # Thinking off: only the answer is generated.
        (OFF_PROMPT, None, "A", "stop", ["A<|im_end|>"], []),
        (OFF_PROMPT, "R", "A", "stop", ["A<|im_end|>"], ["reasoning_in_non_thinking_prompt"]),
        # Raw tool-call tokens in content are part of the text.
        (
            K25_PROMPT,
            "R",
            "x<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0"
            "<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>",
            "stop",
            [
                "R</think>x<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0"
                "<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|><|im_end|>"
            ],
            [],
        ),
    ],
)
def test_readings(prompt, reasoning, content, finish, texts, notes):
    reading = read_completion(completion(reasoning, content, finish), prompt, KIMI_K2)
    assert reading.texts == texts
    assert reading.notes == notes
    assert reading.complete == (finish == "stop")


def test_qwen3_layout_keeps_whitespace_verbatim():
    reading = read_completion(completion("\nR\n", "\n\nA"), "<|im_start|>assistant\n", QWEN3)
    assert reading.texts == ["<think>\nR\n</think>\n\nA<|im_end|>"]


def test_strip_invisible_on_both_edges_at_once():
    from draftgen.reconstruct import strip_is_invisible
    from draftgen.tokenizer import encode, load_tokenizer

    tokenizer = load_tokenizer("fixture:kimi-k2.5")
    stripped = "```\n$ ls -la\n```"
    original = " " + stripped + "\n"
    # The soak found this one: one edge alone changes the count, both together do not.
    assert len(encode(tokenizer, original)) == len(encode(tokenizer, stripped))
    assert strip_is_invisible(stripped, tokenizer)

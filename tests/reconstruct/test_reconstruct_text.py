"""Reading a completion's text into candidate generated texts (no tokenizer needed)."""

from __future__ import annotations

import pytest

from draftgen.profiles import DEEPSEEK_V3, GLM, GPT_OSS, KIMI_K2, MINIMAX_M2, QWEN3
from draftgen.reconstruct.text import delimiter_prefixes, read_completion
from draftgen.records import Completion

K25_PROMPT = "<|im_user|>user<|im_middle|>hi<|im_end|><|im_assistant|>assistant<|im_middle|><think>"
K2T_PROMPT = "<|im_user|>user<|im_middle|>hi<|im_end|><|im_assistant|>assistant<|im_middle|>"
OFF_PROMPT = K25_PROMPT + "</think>"


def completion(reasoning, content, finish="stop", tool_calls=None):
    return Completion("gen", "p", "m", reasoning, content, tool_calls, finish, finish)


def test_prompt_modes():
    assert KIMI_K2.prompt_mode(K25_PROMPT) == "open"
    assert KIMI_K2.prompt_mode(K2T_PROMPT) == "model_opens"
    assert KIMI_K2.prompt_mode(OFF_PROMPT) == "closed"
    assert QWEN3.prompt_mode("<|im_start|>assistant\n<think>\n") == "open"
    assert DEEPSEEK_V3.prompt_mode("<｜Assistant｜></think>") == "closed"


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
    from draftgen.reconstruct.text import strip_is_invisible
    from draftgen.tokens.tokenizer import encode, load_tokenizer

    tokenizer = load_tokenizer("fixture:kimi-k2.5")
    stripped = "```\n$ ls -la\n```"
    original = " " + stripped + "\n"
    # The soak found this one: one edge alone changes the count, both together do not.
    assert len(encode(tokenizer, original)) == len(encode(tokenizer, stripped))
    assert strip_is_invisible(stripped, tokenizer)


HARMONY_PROMPT = "<|start|>user<|message|>hi<|end|><|start|>assistant"
FINAL = "<|end|><|start|>assistant<|channel|>final<|message|>"
GLM_PROMPT = "[gMASK]<sop><|user|>\nhi<|assistant|>"
MINIMAX_PROMPT = "]~b]user\nhi[e~[\n]~b]ai\n<think>\n"
CALL = {"id": "c", "function": {"name": "f", "arguments": "{}"}}


def test_new_family_prompt_modes():
    assert GPT_OSS.prompt_mode(HARMONY_PROMPT) == "model_opens"
    assert GLM.prompt_mode(GLM_PROMPT) == "model_opens"
    assert GLM.prompt_mode(GLM_PROMPT + "\n<think></think>") == "closed"
    assert MINIMAX_M2.prompt_mode(MINIMAX_PROMPT) == "open"


@pytest.mark.parametrize(
    "profile, prompt, reasoning, content, finish, calls, texts",
    [
        # Harmony: the final channel's header lies between reasoning and answer.
        (
            GPT_OSS,
            HARMONY_PROMPT,
            "R",
            "A",
            "stop",
            None,
            ["<|channel|>analysis<|message|>R" + FINAL + "A<|return|>"],
        ),
        # A harmony tool-call turn: content is a commentary message, <|call|> ends the turn.
        (
            GPT_OSS,
            HARMONY_PROMPT,
            "R",
            "A",
            "tool_calls",
            [CALL],
            [
                "<|channel|>analysis<|message|>R<|end|><|start|>assistant<|channel|>commentary"
                "<|message|>A<|end|><|start|>assistant<|channel|>commentary to=functions.f "
                "<|constrain|>json<|message|>{}<|call|>",
                "<|channel|>analysis<|message|>R<|end|><|start|>assistant<|channel|>commentary"
                "<|message|>A<|end|><|start|>assistant<|channel|>commentary to=functions.f"
                "<|message|>{}<|call|>",
            ],
        ),
        # GLM: the model opens with "\n<think>"; a tool turn ends at <|observation|>.
        (GLM, GLM_PROMPT, "R", "\nA", "stop", None, ["\n<think>R</think>\nA<|user|>"]),
        (
            GLM,
            GLM_PROMPT,
            "R",
            "",
            "tool_calls",
            [CALL],
            [
                "\n<think>R</think>\n<tool_call>f\n</tool_call><|observation|>",
                "\n<think>R</think><tool_call>f\n</tool_call><|observation|>",
            ],
        ),
        # A leaked <|observation|> is stripped like any end of turn.
        (
            GLM,
            GLM_PROMPT,
            "R",
            "<|observation|>",
            "tool_calls",
            [CALL],
            [
                "\n<think>R</think>\n<tool_call>f\n</tool_call><|observation|>",
                "\n<think>R</think><tool_call>f\n</tool_call><|observation|>",
            ],
        ),
        # MiniMax-M2 with the think block kept in content, re-opened by the provider.
        (
            MINIMAX_M2,
            MINIMAX_PROMPT,
            None,
            "<think>R\n</think>\n\nA",
            "stop",
            None,
            ["R\n</think>\n\nA[e~[", "<think>R\n</think>\n\nA[e~["],
        ),
    ],
)
def test_new_family_readings(profile, prompt, reasoning, content, finish, calls, texts):
    reading = read_completion(completion(reasoning, content, finish, calls), prompt, profile)
    assert reading.texts == texts


def test_a_cut_can_fall_after_any_token_of_a_multi_token_delimiter():
    assert delimiter_prefixes(QWEN3, False) == ["", "</think>"]
    assert delimiter_prefixes(GPT_OSS, False) == [
        "",
        "<|end|>",
        "<|end|><|start|>",
        "<|end|><|start|>assistant",
        "<|end|><|start|>assistant<|channel|>",
        "<|end|><|start|>assistant<|channel|>final",
        FINAL,
    ]
    assert delimiter_prefixes(GPT_OSS, True) == ["", "<|end|>"]
    reading = read_completion(completion("R", "", "length"), HARMONY_PROMPT, GPT_OSS)
    assert reading.texts[:2] == [
        "<|channel|>analysis<|message|>R",
        "<|channel|>analysis<|message|>R<|end|>",
    ]
    assert len(reading.texts) == 7


def test_a_harmony_model_that_skips_the_analysis_channel_is_a_reading():
    reading = read_completion(completion("", "A"), HARMONY_PROMPT, GPT_OSS)
    assert reading.texts == [
        "<|channel|>analysis<|message|><|end|><|start|>assistant<|channel|>final<|message|>A<|return|>",
        "<|channel|>final<|message|>A<|return|>",
    ]

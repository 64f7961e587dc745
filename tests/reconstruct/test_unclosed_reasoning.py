"""An answer that ends inside its reasoning: read with and without the close, the count decides."""

from __future__ import annotations

import pytest

from draftgen.profiles import GPT_OSS, KIMI_K2, QWEN3
from draftgen.profiles.qwen3_5 import QWEN3_5
from draftgen.reconstruct.text import (
    REASONING_UNCLOSED,
    CompletionReading,
    _reasoning_end_unproven,
    read_completion,
    reconstruct_sample,
)
from draftgen.reconstruct.verify import DOUBT_REASONS, REASONING_END_UNPROVEN
from draftgen.records import Completion, StoredCompletion
from draftgen.tokens.rendering import render_prompt
from draftgen.tokens.tokenizer import encode, load_tokenizer

MESSAGES = [{"role": "user", "content": "hi"}]
QWEN3_PROMPT = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
QWEN3_5_PROMPT = QWEN3_PROMPT + "<think>\n"
K25_PROMPT = "<|im_user|>user<|im_middle|>hi<|im_end|><|im_assistant|>assistant<|im_middle|><think>"
CALL = {"id": "functions.f:0", "type": "function", "function": {"name": "f", "arguments": "{}"}}


def completion(reasoning, content, finish="stop", calls=None, generated=None, tokenizer=None):
    usage: dict = {}
    if generated is not None:
        prompt = encode(tokenizer, render_prompt(tokenizer, MESSAGES, None))
        usage = {
            "prompt_tokens": len(prompt),
            "completion_tokens": len(encode(tokenizer, generated)),
        }
    return Completion("g", "p", "m", reasoning, content, calls, finish, finish, usage)


def test_an_all_reasoning_answer_reads_with_and_without_the_close():
    reading = read_completion(completion("\nR", ""), QWEN3_PROMPT, QWEN3)
    # The model opens the block itself: it may also have written none (vLLM's parser then
    # calls all of it reasoning).
    assert reading.texts == [
        "<think>\nR</think><|im_end|>",
        "<think>\nR<|im_end|>",
        "\nR<|im_end|>",
    ]
    assert [reading.notes_of(i) for i in range(3)] == [
        [],
        [REASONING_UNCLOSED],
        [REASONING_UNCLOSED],
    ]
    # The prompt opened the block: the answer is the reasoning with or without the close.
    reading = read_completion(completion("R\n", ""), QWEN3_5_PROMPT, QWEN3_5)
    assert reading.texts == ["R\n</think><|im_end|>", "R\n<|im_end|>"]
    # Harmony's close is think_end and the final channel's header: both are left out.
    prompt = "<|start|>user<|message|>hi<|end|><|start|>assistant"
    reading = read_completion(completion("R", ""), prompt, GPT_OSS)
    assert reading.texts == [
        "<|channel|>analysis<|message|>R<|end|><|start|>assistant<|channel|>final<|message|>"
        "<|return|>",
        "<|channel|>analysis<|message|>R<|return|>",
        "R<|return|>",
    ]


def test_only_an_answer_with_no_content_and_a_finish_reads_unclosed():
    assert len(read_completion(completion("R", "A"), QWEN3_5_PROMPT, QWEN3_5).texts) == 1
    # A cut answer has its own readings (the cut before or after the close).
    cut = read_completion(completion("R", "", "length"), QWEN3_5_PROMPT, QWEN3_5)
    assert cut.texts == ["R", "R</think>"]
    assert not any(REASONING_UNCLOSED in cut.notes_of(i) for i in range(len(cut.texts)))


def test_a_tool_call_ends_unclosed_reasoning_only_where_the_parser_says_so():
    call = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    # Qwen3's hermes calls come after </think> (its parser finds no call inside reasoning).
    qwen3 = read_completion(completion("R", "", "tool_calls", [call]), QWEN3_PROMPT, QWEN3)
    assert not any(REASONING_UNCLOSED in qwen3.notes_of(i) for i in range(len(qwen3.texts)))
    # Qwen3.5's XML call ends reasoning in vLLM's qwen3 parser; Kimi's section is a split marker.
    qwen35 = read_completion(completion("R", "", "tool_calls", [call]), QWEN3_5_PROMPT, QWEN3_5)
    assert qwen35.texts == [
        "R</think><tool_call>\n<function=f>\n</function>\n</tool_call><|im_end|>",
        "R<tool_call>\n<function=f>\n</function>\n</tool_call><|im_end|>",
    ]
    assert qwen35.notes_of(1) == ["tool_calls_rebuilt", REASONING_UNCLOSED]
    kimi = read_completion(completion("R", "", "tool_calls", [CALL]), K25_PROMPT, KIMI_K2)
    assert (
        "R<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>"
        "{}<|tool_call_end|><|tool_calls_section_end|><|im_end|>"
    ) in kimi.texts


@pytest.fixture(scope="module")
def qwen3():
    return load_tokenizer("fixture:qwen3")


@pytest.mark.parametrize(
    "generated, reasoning",
    [
        # The end of turn came inside the reasoning: no </think> was generated.
        ("<think>\nHello there<|im_end|>", "\nHello there"),
        # The model opened no block at all; the parser called its answer reasoning.
        ("Hello there<|im_end|>", "Hello there"),
    ],
)
def test_the_count_proves_an_answer_that_ended_inside_its_reasoning(qwen3, generated, reasoning):
    done = completion(reasoning, "", generated=generated, tokenizer=qwen3)
    stored = StoredCompletion("k", "s", 0, MESSAGES, None, done)
    sample = reconstruct_sample(stored, qwen3, QWEN3)
    prompt = encode(qwen3, render_prompt(qwen3, MESSAGES, None))
    assert sample.input_ids == prompt + encode(qwen3, generated)
    assert sample.verified, sample.detail
    assert REASONING_UNCLOSED in sample.detail.split("; ")


def test_a_close_the_text_does_not_show_is_never_verified(qwen3):
    """The count of the reading with </think> is also that of an answer that ended inside its
    reasoning with one re-split id: the issue's verified-and-wrong rows."""
    prompt = encode(qwen3, render_prompt(qwen3, MESSAGES, None))
    closed = "<think>\nHello there</think><|im_end|>"
    done = completion("\nHello there", "", generated=closed, tokenizer=qwen3)
    sample = reconstruct_sample(StoredCompletion("k", "s", 0, MESSAGES, None, done), qwen3, QWEN3)
    assert (sample.verified, sample.reason) == (False, REASONING_END_UNPROVEN)
    assert sample.input_ids == prompt + encode(qwen3, closed)
    # What the model may as well have generated: no </think>, " there" as " the" + "re".
    resplit = [*encode(qwen3, "<think>\nHello"), *encode(qwen3, " the"), *encode(qwen3, "re")]
    resplit += encode(qwen3, "<|im_end|>")
    assert len(resplit) == len(encode(qwen3, closed))
    assert "re-split" in sample.detail


def test_without_a_count_an_all_reasoning_answer_is_never_verified(qwen3):
    stored = StoredCompletion("k", "s", 0, MESSAGES, None, completion("\nHello", ""))
    sample = reconstruct_sample(stored, qwen3, QWEN3)
    assert not sample.verified
    assert sample.reason == "no_usage"
    assert "reads both with and without </think>" in sample.detail


def test_a_tie_between_the_close_and_no_close_is_never_verified():
    reading = CompletionReading(
        ["R</think><|im_end|>", "R<|im_end|>", "X<|im_end|>"],
        text_notes=[(), (REASONING_UNCLOSED,), (REASONING_UNCLOSED,)],
    )
    # Another reading on the other side with the same count and other ids: unproven.
    assert _reasoning_end_unproven(reading, [[1, 2, 3], [1, 4, 3], [5]], 0, 3) == [
        REASONING_END_UNPROVEN
    ]
    assert _reasoning_end_unproven(reading, [[1, 2, 3], [1, 3], [5, 6, 7]], 0, 3) == [
        REASONING_END_UNPROVEN
    ]
    # The close picked by the count: an unclosed answer with a re-split has that count too.
    assert _reasoning_end_unproven(reading, [[1, 2, 3], [1, 3], [5]], 0, 3) == [
        REASONING_END_UNPROVEN
    ]
    # A turn with tool calls and no content closes its reasoning as the family's way to call:
    # the count's pick stands there, unless both sides have it.
    assert _reasoning_end_unproven(reading, [[1, 2, 3], [1, 3], [5]], 0, 3, True) == []
    assert _reasoning_end_unproven(reading, [[1, 2, 3], [1, 4, 3], [5]], 0, 3, True) == [
        REASONING_END_UNPROVEN
    ]
    # No close picked, and no other reading has the count: proven.
    assert _reasoning_end_unproven(reading, [[1, 2, 3], [1, 3], [5]], 1, 2) == []
    # No count: unproven; a count no reading has is another reason's failure.
    assert _reasoning_end_unproven(reading, [[1, 2, 3], [1, 3], [5]], 0, None) == [
        REASONING_END_UNPROVEN
    ]
    assert _reasoning_end_unproven(reading, [[1, 2, 3], [1, 3], [5]], 0, 9) == []
    assert REASONING_END_UNPROVEN in DOUBT_REASONS


def test_a_kimi_tool_call_inside_unclosed_reasoning_is_verified():
    kimi = load_tokenizer("fixture:kimi-k2.5")
    generated = (
        "Need it<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0"
        "<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|><|im_end|>"
    )
    done = completion("Need it", "", "tool_calls", [CALL], generated, kimi)
    sample = reconstruct_sample(StoredCompletion("k", "s", 0, MESSAGES, None, done), kimi, KIMI_K2)
    prompt = encode(kimi, render_prompt(kimi, MESSAGES, None))
    assert sample.verified, sample.detail
    assert sample.input_ids == prompt + encode(kimi, generated)


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Look a word up.",
            "parameters": {"type": "object", "properties": {"word": {"type": "string"}}},
        },
    }
]


@pytest.mark.parametrize("fixture", ["qwen3", "qwen3.5"])
def test_a_simulated_run_proves_answers_that_end_inside_their_reasoning(
    tmp_path, monkeypatch, fixture
):
    """vLLM's delivery (all reasoning, content "") of turns whose end of turn, or tool call,
    came before think_end: each is verified with the ids the model generated, no think_end."""
    from golden import run_rows

    rows = [
        {"id": f"r{i}", "messages": [{"role": "user", "content": f"Question {i}?"}]}
        | ({"tools": TOOLS} if i % 2 else {})
        for i in range(24)
    ]
    quirks = {"unclosed_reasoning": 0.5, "drift": 0.3}
    config = {"seed": 11, "tool_call_rate": 0.5, "quirks": quirks}
    truth, exported = run_rows(tmp_path, monkeypatch, fixture, rows, config)
    assert len(exported) == 24  # the truth also holds answers cut to nothing, asked again
    think_end = encode(load_tokenizer(f"fixture:{fixture}"), "</think>")
    unclosed = unclosed_calls = unproven = blind_calls = 0
    for row in exported:
        record = truth[row["generation_id"]]
        exact = row["input_ids"] == record["prompt_ids"] + record["completion_ids"]
        blind = "drift" in record["quirks"] and "unclosed_reasoning" in record["quirks"]
        if row["verified"] and not exact:
            # The one case a count cannot see: a call inside unclosed reasoning whose ids
            # re-split by one has the count of the family's usual turn, the close then the call.
            assert blind and record["tool_calls"], record["quirks"]
            blind_calls += 1
        elif "drift" in record["quirks"] and not row["verified"]:
            # A re-split: its count differs, or it is the count of the reading with </think>.
            assert row["verify_reason"] in ("completion_count_mismatch", "reasoning_end_unproven")
            unproven += row["verify_reason"] == "reasoning_end_unproven"
        elif not row["verified"]:
            raise AssertionError((row["verify_reason"], record["quirks"]))
        if "unclosed_reasoning" in record["quirks"]:
            unclosed += 1
            unclosed_calls += bool(record["tool_calls"])
            assert think_end[0] not in record["completion_ids"]
            assert record["delivered"]["content"] == "" and record["delivered"]["reasoning"]
            if not record["tool_calls"]:
                assert row["verified"] is ("drift" not in record["quirks"])
    assert unclosed >= 6 and unproven >= 1
    assert blind_calls <= 1, blind_calls
    # Qwen3's hermes calls never end reasoning (its parser finds none inside it); Qwen3.5's do.
    assert (unclosed_calls > 0) is (fixture == "qwen3.5")


def test_kimi_k3_reads_an_unclosed_think_channel_by_its_segments():
    from draftgen.profiles.kimi_k3 import KIMI_K3
    from draftgen.reconstruct.text import renderer_for

    k3 = load_tokenizer("fixture:kimi-k3")
    rendering = renderer_for(k3, KIMI_K3).render(MESSAGES, None)
    reading = read_completion(completion("Hmm.", ""), rendering.text, KIMI_K3)
    assert reading.texts == [
        "Hmm.<|close|>think<|sep|><|open|>response<|sep|><|close|>response<|sep|>"
        "<|close|>message<|sep|><|end_of_msg|>",
        "Hmm.<|end_of_msg|>",
        "Hmm.<|close|>message<|sep|><|end_of_msg|>",
    ]
    assert [reading.notes_of(i) for i in range(3)] == [
        [],
        [REASONING_UNCLOSED],
        [REASONING_UNCLOSED],
    ]
    counts = [len(reading.ids(k3, i)) for i in range(3)]
    assert counts == [15, 3, 6]
    # The model's end of message inside its think channel: that reading, proven by the count.
    usage = {"prompt_tokens": len(rendering.ids), "completion_tokens": 3}
    done = Completion("g", "p", "m", "Hmm.", "", None, "stop", "stop", usage)
    stored = StoredCompletion("k", "s", 0, MESSAGES, None, done, rendering=rendering)
    sample = reconstruct_sample(stored, k3, KIMI_K3)
    assert sample.verified, sample.detail
    assert sample.input_ids == list(rendering.ids) + reading.ids(k3, 1)

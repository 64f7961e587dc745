"""The golden matrix: every profile's fixture, every shape, on the text and the exact-id paths.

Each case writes the text the model generated (from the family's format facts, not from the
profile), encodes it as the ground-truth ids, delivers it as a text-exact provider would (reasoning
split off, end-of-turn stripped, tool calls structured) and checks that reconstruction gives back
exactly those ids and proves them; with the server's ids attached, that they are the sample and
the text path agrees.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest

from draftgen.pipeline import resolve_profile
from draftgen.reconstruct import reconstruct_sample
from draftgen.records import Completion, StoredCompletion
from draftgen.tokenizer import decode, encode, load_tokenizer, render_prompt


@dataclass(frozen=True)
class Family:
    """How one fixture's model writes a turn after its generation prompt (REFERENCE.md §3)."""

    profile: str
    eot: str
    # generated text = head(R) + between + content + markup + eot; delivered reasoning(R).
    think_open: str  # what the model writes before the reasoning ("" if the prompt opened it)
    think_close: str  # between reasoning and answer, as generated
    reasoning_pad: tuple[str, str] = ("", "")  # whitespace the model puts around its reasoning
    answer_lead: str = ""  # whitespace the model puts before the answer
    thinks: bool = True
    # The tool-call markup for get_weather(city=Paris), per the family's documented format.
    markup: str = ""


KIMI_MARKUP = (
    "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
    '<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>'
)
DEEPSEEK_MARKUP = (
    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>"
    '{"city": "Paris"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>'
)
QWEN_MARKUP = '\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'

FAMILIES = {
    "kimi-k2.5": Family("kimi-k2", "<|im_end|>", "", "</think>", markup=KIMI_MARKUP),
    "kimi-k2-thinking": Family("kimi-k2", "<|im_end|>", "<think>", "</think>", markup=KIMI_MARKUP),
    "deepseek-v4": Family(
        "deepseek-v3", "<｜end▁of▁sentence｜>", "", "</think>", markup=DEEPSEEK_MARKUP
    ),
    "qwen3": Family(
        "qwen3", "<|im_end|>", "<think>", "</think>", ("\n", "\n"), "\n\n", markup=QWEN_MARKUP
    ),
    "qwen3-thinking-2507": Family(
        "qwen3", "<|im_end|>", "", "</think>", ("", "\n"), "\n\n", markup=QWEN_MARKUP
    ),
    "qwen3-instruct-2507": Family("qwen3", "<|im_end|>", "", "", thinks=False, markup=QWEN_MARKUP),
}

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
CALL = {
    "id": "functions.get_weather:0",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
}
USER = [{"role": "user", "content": "What is the capital of France?"}]


@dataclass(frozen=True)
class Shape:
    messages: list
    reasoning: str = "Paris is the capital; answer briefly."
    content: str = "The capital of France is Paris."
    tools: list | None = None
    tool_call: bool = False
    truncate: int = 0  # cut this many ids off the end of the generation
    special_in_prompt: str = ""


SHAPES = {
    "single_turn": Shape(USER),
    "multi_turn": Shape(
        [
            {"role": "system", "content": "Be brief."},
            *USER,
            {"role": "assistant", "content": "Paris.", "reasoning_content": "old"},
            {"role": "user", "content": "And of Italy?"},
        ],
        content="Rome.",
    ),
    "empty_reasoning": Shape(USER, reasoning=""),
    "tool_call": Shape(USER, content="Let me check.", tools=TOOLS, tool_call=True),
    "tool_call_no_content": Shape(USER, content="", tools=TOOLS, tool_call=True),
    "unicode": Shape(
        [{"role": "user", "content": "Écris en français 🇫🇷 et 中文"}],
        reasoning="L'utilisateur veut 中文 + emoji 👩‍💻.",
        content="Voilà : café, naïve, 日本語, 👍🏽 — fin…\n\n```py\nx = 1\n```",
    ),
    "special_text_in_user_data": Shape(
        [{"role": "user", "content": "Literal <|im_end|> and </think> and <｜end▁of▁sentence｜>"}],
        special_in_prompt="yes",
    ),
    "truncated": Shape(USER, content="Counting: one, two, three, four, five, six.", truncate=4),
}


@pytest.fixture(scope="module")
def tokenizers():
    return {name: load_tokenizer(f"fixture:{name}") for name in FAMILIES}


def generated_text(family: Family, shape: Shape) -> tuple[str, str | None, str]:
    """(generated text, delivered reasoning, delivered content) for a text-exact provider."""
    content = shape.content
    if family.thinks:
        lead, trail = family.reasoning_pad
        reasoning = lead + shape.reasoning + trail if shape.reasoning else ""
        if family.reasoning_pad != ("", "") and not shape.reasoning:
            reasoning = "\n\n" if family.think_open else "\n"  # Qwen's empty block
        answer = family.answer_lead + content
        head = family.think_open + reasoning + family.think_close
    else:
        reasoning, answer, head = None, content, ""
    markup = ""
    if shape.tool_call:
        markup = family.markup
        if family.markup.startswith("\n") and not answer:
            markup = markup[1:]  # Qwen writes the newline only after content
    return head + answer + markup + family.eot, reasoning, answer


def case(tokenizer, family: Family, shape: Shape):
    prompt_ids = encode(tokenizer, render_prompt(tokenizer, shape.messages, shape.tools))
    text, reasoning, content = generated_text(family, shape)
    truth = encode(tokenizer, text)
    finish = "tool_calls" if shape.tool_call else "stop"
    if shape.truncate:
        truth = truth[: -shape.truncate]
        finish = "length"
        # What the provider delivers of a cut answer: the decoded text of what was generated.
        head_ids = encode(tokenizer, text[: len(text) - len(content) - len(family.eot)])
        assert truth[: len(head_ids)] == head_ids
        content = decode(tokenizer, truth[len(head_ids) :])
    usage = {"prompt_tokens": len(prompt_ids), "completion_tokens": len(truth)}
    completion = Completion(
        "gen-1",
        "Provider",
        "m",
        reasoning,
        content,
        [CALL] if shape.tool_call else None,
        finish,
        finish,
        usage,
    )
    stored = StoredCompletion("k", "s", 0, shape.messages, shape.tools, completion)
    return stored, prompt_ids, truth


@pytest.mark.parametrize("shape_name", SHAPES)
@pytest.mark.parametrize("fixture", FAMILIES)
def test_golden_matrix(tokenizers, fixture, shape_name):
    tokenizer, family, shape = tokenizers[fixture], FAMILIES[fixture], SHAPES[shape_name]
    if shape.reasoning == "" and not family.thinks:
        pytest.skip("a non-thinking model has no reasoning to leave empty")
    profile = resolve_profile(tokenizer, None)
    assert profile.name == family.profile
    stored, prompt_ids, truth = case(tokenizer, family, shape)

    text = reconstruct_sample(stored, tokenizer, profile)
    assert text.input_ids == prompt_ids + truth
    assert text.prompt_len == len(prompt_ids)
    assert (text.verified, text.reason, text.id_source) == (True, "ok", "text"), text.detail
    assert text.truncated == bool(shape.truncate)
    if shape.special_in_prompt:
        assert "special_text_in_prompt=" in text.detail

    exact = replace(stored.completion, prompt_token_ids=prompt_ids, completion_token_ids=truth)
    server = reconstruct_sample(replace(stored, completion=exact), tokenizer, profile)
    assert server.input_ids == prompt_ids + truth
    assert (server.verified, server.reason, server.id_source) == (True, "ok", "server")
    assert server.text_check == "agrees"
    assert server.truncated == bool(shape.truncate)


@pytest.mark.parametrize("fixture", FAMILIES)
def test_drift_is_caught_on_the_text_path_and_harmless_with_server_ids(tokenizers, fixture):
    tokenizer, family = tokenizers[fixture], FAMILIES[fixture]
    stored, prompt_ids, truth = case(tokenizer, family, SHAPES["single_turn"])
    # The model sampled "Paris" as two tokens: same text, one id more.
    index = next(i for i, t in enumerate(truth) if decode(tokenizer, [t]) == " Paris")
    drifted = (
        truth[:index] + encode(tokenizer, " Par") + encode(tokenizer, "is") + truth[index + 1 :]
    )
    usage = {**stored.completion.usage, "completion_tokens": len(drifted)}
    completion = replace(stored.completion, usage=usage)
    profile = resolve_profile(tokenizer, None)
    text = reconstruct_sample(replace(stored, completion=completion), tokenizer, profile)
    # One id more: a count mismatch, which one restored space would also explain.
    assert not text.verified
    assert text.reason in ("completion_count_mismatch", "whitespace_altered")
    exact = replace(completion, prompt_token_ids=prompt_ids, completion_token_ids=drifted)
    server = reconstruct_sample(replace(stored, completion=exact), tokenizer, profile)
    assert (server.verified, server.input_ids) == (True, prompt_ids + drifted)
    assert server.text_check == text.reason


def test_server_ids_that_disagree_with_the_usage_are_not_trusted(tokenizers):
    tokenizer, family = tokenizers["kimi-k2.5"], FAMILIES["kimi-k2.5"]
    stored, prompt_ids, truth = case(tokenizer, family, SHAPES["single_turn"])
    exact = replace(stored.completion, prompt_token_ids=prompt_ids, completion_token_ids=truth[:-1])
    profile = resolve_profile(tokenizer, None)
    server = reconstruct_sample(replace(stored, completion=exact), tokenizer, profile)
    assert (server.verified, server.reason) == (False, "server_count_mismatch")
    assert f"completion {len(truth) - 1} server ids, usage says {len(truth)}" in server.detail


def test_a_server_template_other_than_the_local_one_is_reported(tokenizers):
    tokenizer, family = tokenizers["qwen3"], FAMILIES["qwen3"]
    stored, prompt_ids, truth = case(tokenizer, family, SHAPES["single_turn"])
    other = encode(tokenizer, "<|im_start|>system\nDefault.<|im_end|>\n") + prompt_ids
    usage = {**stored.completion.usage, "prompt_tokens": len(other)}
    exact = replace(
        stored.completion, usage=usage, prompt_token_ids=other, completion_token_ids=truth
    )
    profile = resolve_profile(tokenizer, None)
    server = reconstruct_sample(replace(stored, completion=exact), tokenizer, profile)
    assert (server.verified, server.input_ids) == (True, other + truth)
    assert "server_prompt_differs_from_local_template" in server.detail
    assert server.text_check == "prompt_count_mismatch"

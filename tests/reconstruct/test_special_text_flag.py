"""Special-token text in a prompt's data is flagged on the sample, whatever the family: every
added token of the tokenizer counts (Kimi's ``<|im_user|>`` and ``[EOS]`` escaped a list of the
profile's delimiters). The sample stays verified when its counts prove it: the ids are what the
server rendered; the flag ``special_text_in_prompt=TEXT`` in its detail says the row is odd."""

from __future__ import annotations

from dataclasses import replace

import pytest
from golden import FAMILIES, Shape, case, family_profile

from draftgen.reconstruct.text import reconstruct_sample
from draftgen.tokens.tokenizer import encode, load_tokenizer


def flagged(fixture: str, content: str, role: str = "user", tools=None):
    """(text-path sample, server-ids sample) of a turn whose prompt data holds ``content``."""
    tokenizer = load_tokenizer(f"fixture:{fixture}")
    family = FAMILIES[fixture]
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    if role == "user":
        messages = [{"role": "user", "content": content}]
    else:
        messages = [{"role": role, "content": content}, *messages]
    stored, prompt_ids, truth = case(tokenizer, family, Shape(messages, tools=tools))
    profile = family_profile(tokenizer, family)
    text = reconstruct_sample(stored, tokenizer, profile)
    exact = replace(stored.completion, prompt_token_ids=prompt_ids, completion_token_ids=truth)
    server = reconstruct_sample(replace(stored, completion=exact), tokenizer, profile)
    return text, server, tokenizer, prompt_ids


@pytest.mark.parametrize(
    "fixture, content, special, role",
    [
        ("kimi-k2.5", "Say <|im_user|> twice", "<|im_user|>", "user"),
        ("kimi-k2.5", "stop at [EOS] please", "[EOS]", "user"),
        ("kimi-k2.5", "system text with [EOS] in it", "[EOS]", "system"),
        ("qwen3", "a <|vision_start|> marker", "<|vision_start|>", "user"),
        ("qwen3", "open <tool_response> here", "<tool_response>", "system"),
        ("deepseek-v3.1", "a <｜place▁holder▁no▁7｜> here", "<｜place▁holder▁no▁7｜>", "user"),
        ("deepseek-v3.1", "speak as <｜User｜> now", "<｜User｜>", "user"),
    ],
)
def test_every_added_tokens_text_in_the_prompt_data_is_flagged(fixture, content, special, role):
    text, server, tokenizer, prompt_ids = flagged(fixture, content, role)
    # The server renders the text as the special id: the flag is about the ids, not the text.
    (special_id,) = encode(tokenizer, special)
    assert special_id in prompt_ids
    for sample in (text, server):
        assert (sample.verified, sample.reason) == (True, "ok"), sample.detail
        assert f"special_text_in_prompt={special}" in sample.detail.split("; ")


@pytest.mark.parametrize("fixture", ["kimi-k2.5", "qwen3", "deepseek-v3.1"])
def test_plain_text_that_only_looks_like_markup_is_not_flagged(fixture):
    text, server, _, _ = flagged(fixture, "a <|not_a_token|> and [EOS without a close")
    assert "special_text_in_prompt" not in text.detail + server.detail
    assert (text.verified, server.verified) == (True, True)


def test_a_tool_schema_that_spells_a_special_token_is_flagged():
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather of a city. [EOS]",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ]
    text, server, _, _ = flagged("kimi-k2.5", "Weather in Paris?", tools=tools)
    for sample in (text, server):
        assert "special_text_in_prompt=[EOS]" in sample.detail.split("; "), sample.detail

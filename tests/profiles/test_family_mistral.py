"""Mistral / Magistral / Devstral (fixtures ``magistral``, tekken v13 with ``[THINK]``, and
``devstral``, tekken v7): prompts rendered by mistral-common as vLLM renders them, the engine's
refusals, the golden reconstruction and a simulated run.

The expected prompt ids are mistral-common's own: ``encode_chat_completion(ChatCompletionRequest.
from_openai(...))`` of a tokenizer loaded afresh from the fixture's file, on the messages as vLLM
hands them over (``reasoning`` popped, tool-call ids cut to their last 9 characters).
"""

from __future__ import annotations

import functools
from dataclasses import replace

import pytest
from golden import SHAPES, TOOLS, USER, Family, case, generated_text, plain_rows, run_rows
from mistral_common.protocol.instruct.request import ChatCompletionRequest
from mistral_common.tokens.tokenizers.mistral import MistralTokenizer

from draftgen.profiles import detect_profile, get_profile
from draftgen.reconstruct.text import reconstruct_sample
from draftgen.tokens.mistral import MistralCommonTokenizer, mistral_tokenizer_file
from draftgen.tokens.rendering import ChatRenderer, resolve_profile
from draftgen.tokens.tokenizer import decode, encode, full_vocab, load_tokenizer, tokenizer_digest

FIXTURES = ("magistral", "devstral", "mistral-large")
MARKUP = '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}'
MAGISTRAL = Family("magistral", "</s>", "[THINK]", "[/THINK]", markup=MARKUP)


@pytest.fixture(scope="module")
def tokenizers():
    return {name: load_tokenizer(f"fixture:{name}") for name in FIXTURES}


@functools.cache
def own_tokenizer(path: str) -> MistralTokenizer:
    """mistral-common's tokenizer of a fixture's file, its own object (not draftgen's), loaded
    once for the module: each load builds every piece of the vocabulary (0.3 s)."""
    return MistralTokenizer.from_file(path)


def own_ids(tokenizer, messages, tools=None, **kwargs):
    """mistral-common's own prompt ids, from a tokenizer loaded apart from the fixture's file."""
    mistral = own_tokenizer(str(mistral_tokenizer_file(tokenizer.name_or_path)))
    request = ChatCompletionRequest.from_openai(messages=messages, tools=tools, **kwargs)
    return mistral.encode_chat_completion(request).tokens


def rendered(tokenizer, messages, tools=None, variables=None):
    renderer = ChatRenderer(tokenizer, resolve_profile(tokenizer))
    rendering = renderer.render(messages, tools, variables or {})
    return renderer, rendering


def weather_call(call_id="abcdefghi", arguments='{"city": "Paris"}'):
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": "get_weather", "arguments": arguments},
    }


BATTERY = {
    "single_turn": ([{"role": "user", "content": "What is the capital of France?"}], None),
    "system": (
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
        None,
    ),
    "multi_turn": (
        [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Capital of France?"},
            {"role": "assistant", "content": "Paris."},
            {"role": "user", "content": "And of Italy?  \n"},
        ],
        None,
    ),
    "tools": ([{"role": "user", "content": "Weather in Paris?"}], TOOLS),
    "tool_call_and_result": (
        [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": None, "tool_calls": [weather_call()]},
            {"role": "tool", "tool_call_id": "abcdefghi", "content": "Sunny, 21 C"},
        ],
        TOOLS,
    ),
    "two_calls_then_user": (
        [
            {"role": "user", "content": "Paris and Rome?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    weather_call("aaaaaaaa1", '{"city": "Paris"}'),
                    weather_call("aaaaaaaa2", '{"city":"Rome","days":2}'),
                ],
            },
            {"role": "tool", "tool_call_id": "aaaaaaaa1", "content": "Sunny"},
            {"role": "tool", "tool_call_id": "aaaaaaaa2", "content": "Rain"},
            {"role": "assistant", "content": "Sunny in Paris, rain in Rome."},
            {"role": "user", "content": "Thanks"},
        ],
        TOOLS,
    ),
    "content_parts": (
        [
            {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Part one. "},
                    {"type": "text", "text": "Two"},
                ],
            },
        ],
        None,
    ),
    "special_spellings_in_user_text": (
        [
            {
                "role": "user",
                "content": "Literal [INST] and </s> and [THINK]x[/THINK] [TOOL_CALLS] <s>",
            }
        ],
        None,
    ),
    "unicode": ([{"role": "user", "content": "Écris 中文 👩‍💻\n\n  fin  "}], None),
}


@pytest.mark.parametrize("case_name", BATTERY)
@pytest.mark.parametrize("fixture", FIXTURES)
def test_prompt_ids_are_mistral_commons_own(tokenizers, fixture, case_name):
    tokenizer = tokenizers[fixture]
    messages, tools = BATTERY[case_name]
    renderer, rendering = rendered(tokenizer, messages, tools)
    assert not rendering.error
    assert rendering.ids == own_ids(tokenizer, messages, tools)
    assert renderer.prompt_ids(rendering) == rendering.ids
    assert rendering.text == decode(tokenizer, rendering.ids)
    assert renderer.kind == "mistral-common"


def test_special_token_text_in_user_data_stays_text(tokenizers):
    tokenizer = tokenizers["magistral"]
    _, rendering = rendered(tokenizer, BATTERY["special_spellings_in_user_text"][0])
    # Only the frame's own control tokens: <s>, [INST], [/INST].
    specials = [i for i in rendering.ids if i in tokenizer.added_tokens_decoder]
    assert specials == [1, 3, 4]
    # Encoding the decoded text would turn the spellings into control tokens: the ids are recorded.
    assert encode(tokenizer, rendering.text) != rendering.ids


def test_magistral_layout(tokenizers):
    tokenizer = tokenizers["magistral"]
    messages, tools = BATTERY["tool_call_and_result"]
    _, rendering = rendered(tokenizer, messages, tools)
    # v13: tools before the first user turn, calls as name[ARGS]json, results without the id.
    assert rendering.text.startswith("<s>[AVAILABLE_TOOLS][")
    assert rendering.text.endswith(
        "[/AVAILABLE_TOOLS][INST]Weather in Paris?[/INST]"
        '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}</s>[TOOL_RESULTS]Sunny, 21 C[/TOOL_RESULTS]'
    )
    _, rendering = rendered(tokenizer, BATTERY["system"][0])
    assert rendering.ids == [1, 17, 5934, 13426, 1046, 18, 3, 37133, 4]


def test_devstral_v7_layout_keeps_the_call_id(tokenizers):
    messages, tools = BATTERY["tool_call_and_result"]
    _, rendering = rendered(tokenizers["devstral"], messages, tools)
    assert rendering.text.endswith(
        '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "abcdefghi"}]'
        "</s>[TOOL_RESULTS]abcdefghi[TOOL_CONTENT]Sunny, 21 C[/TOOL_RESULTS]"
    )


def test_long_tool_call_ids_keep_their_last_nine_characters(tokenizers):
    """vLLM's truncate_tool_call_ids runs before mistral-common's validator (9 alphanumerics)."""
    tokenizer = tokenizers["devstral"]
    messages = [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": None, "tool_calls": [weather_call("call_0123456789")]},
        {"role": "tool", "tool_call_id": "call_0123456789", "content": "Sunny"},
    ]
    _, rendering = rendered(tokenizer, messages, TOOLS)
    cut = [
        messages[0],
        {**messages[1], "tool_calls": [weather_call("123456789")]},
        {**messages[2], "tool_call_id": "123456789"},
    ]
    assert rendering.ids == own_ids(tokenizer, cut, TOOLS)


def test_history_reasoning_never_reaches_the_prompt(tokenizers):
    """vLLM's request model turns ``reasoning_content`` into ``reasoning`` and its Mistral wrapper
    pops ``reasoning``: mistral-common would render a think chunk, vLLM sends none."""
    tokenizer = tokenizers["magistral"]
    with_reasoning = [
        {"role": "user", "content": "Capital of France?"},
        {"role": "assistant", "content": "Paris.", "reasoning_content": "Easy.\n"},
        {"role": "user", "content": "Italy?"},
    ]
    plain = [{k: v for k, v in m.items() if k != "reasoning_content"} for m in with_reasoning]
    for field in ("reasoning_content", "reasoning"):
        messages = [dict(m) for m in plain]
        messages[1][field] = "Easy.\n"
        _, rendering = rendered(tokenizer, messages)
        assert rendering.ids == own_ids(tokenizer, plain)
    assert 34 in own_ids(tokenizer, with_reasoning)  # what mistral-common alone would do


# --- refusals ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fixture", "messages", "tools", "variables", "error"),
    [
        (
            "magistral",
            USER,
            None,
            {"enable_thinking": True},
            "MistralRefused: chat_template is not supported for Mistral tokenizers.",
        ),
        (
            "magistral",
            [*USER, {"role": "assistant", "content": "Paris"}],
            None,
            {},
            "MistralRefused: Cannot set `add_generation_prompt` to True when the last message is "
            "from the assistant. Consider using `continue_final_message` instead.",
        ),
        (
            # v7 validates call ids (9 alphanumerics); v13 writes none and takes any.
            "devstral",
            [
                *USER,
                {"role": "assistant", "content": None, "tool_calls": [weather_call("a-b")]},
                {"role": "tool", "tool_call_id": "a-b", "content": "x"},
            ],
            TOOLS,
            {},
            "MistralRefused: Tool call id was a-b but must be a-z, A-Z, 0-9, with a length of 9.",
        ),
        (
            "magistral",
            USER,
            [{"type": "web_search"}],
            {},
            "MistralRefused: mistral-common only supports function tools.",
        ),
        (
            "magistral",
            [{"role": "critic", "content": "x"}],
            None,
            {},
            "MistralRefused: Unknown message role",
        ),
    ],
)
def test_the_engines_refusals_are_recorded(tokenizers, fixture, messages, tools, variables, error):
    renderer, rendering = rendered(tokenizers[fixture], messages, tools, variables)
    assert rendering.ids is None
    assert rendering.error.startswith(error)


def test_an_effort_is_not_passed_to_a_v13_tokenizer(tokenizers):
    """Before v15 no effort reaches mistral-common (its validator would refuse it: "... is not
    supported for this model"); the prompt is the one without."""
    tokenizer = tokenizers["magistral"]
    _, plain = rendered(tokenizer, USER)
    _, high = rendered(tokenizer, USER, variables={"reasoning_effort": "high"})
    assert high.ids == plain.ids and high.variables == {"reasoning_effort": "high"}
    with pytest.raises(Exception, match="is not supported for this model"):
        own_ids(tokenizer, USER, reasoning_effort="high")


# --- loading and detection -----------------------------------------------------------------------


def test_the_fixtures_load_through_mistral_common(tokenizers):
    magistral, devstral = tokenizers["magistral"], tokenizers["devstral"]
    assert isinstance(magistral, MistralCommonTokenizer) and magistral.chat_template is None
    assert (magistral.version, devstral.version) == ("v13", "v7")
    vocab = full_vocab(magistral)
    assert [vocab[t] for t in ("[ARGS]", "[CALL_ID]", "[THINK]", "[/THINK]")] == [32, 33, 34, 35]
    assert (vocab["</s>"], vocab["[TOOL_CALLS]"], vocab["ĠParis"]) == (2, 9, 6993)
    assert "[THINK]" not in full_vocab(devstral) and len(devstral) == 131072
    assert detect_profile(vocab).name == "magistral"
    assert detect_profile(full_vocab(devstral)).name == "mistral"
    assert get_profile("devstral") is get_profile("mistral")
    assert tokenizer_digest("fixture:magistral") != tokenizer_digest("fixture:devstral")


def test_encode_turns_special_spellings_into_their_ids(tokenizers):
    tokenizer = tokenizers["magistral"]
    text = "[THINK]Let me think.\n[/THINK]The answer.</s>"
    ids = encode(tokenizer, text)
    assert ids[0] == 34 and ids[-1] == 2 and 35 in ids
    assert decode(tokenizer, ids) == text
    assert ids[1:5] == tokenizer.raw.encode("Let me think.\n", bos=False, eos=False)


# --- the generated turn ------------------------------------------------------------------------


def test_generated_text_layout():
    text, reasoning, content = generated_text(MAGISTRAL, SHAPES["tool_call"])
    assert text == "[THINK]Paris is the capital; answer briefly.[/THINK]Let me check." + MARKUP + (
        "</s>"
    )
    assert (reasoning, content) == ("Paris is the capital; answer briefly.", "Let me check.")


@pytest.mark.parametrize(
    "shape_name", [s for s in SHAPES if s not in ("special_text_in_user_data", "empty_reasoning")]
)
def test_golden_shapes_rebuild_the_exact_ids(tokenizers, shape_name):
    tokenizer, shape = tokenizers["magistral"], SHAPES[shape_name]
    profile = get_profile("magistral")
    stored, prompt_ids, truth = case(tokenizer, MAGISTRAL, shape)
    # History reasoning is dropped on the way (vLLM pops it): mistral-common's ids without it.
    history = [{k: v for k, v in m.items() if k != "reasoning_content"} for m in shape.messages]
    assert prompt_ids == own_ids(tokenizer, history, shape.tools)
    if not shape.truncate:
        assert truth[-1] == 2  # </s>, counted in completion_tokens
    text = reconstruct_sample(stored, tokenizer, profile)
    assert text.input_ids == prompt_ids + truth
    assert (text.verified, text.reason, text.id_source) == (True, "ok", "text"), text.detail
    assert text.truncated == bool(shape.truncate)

    exact = replace(stored.completion, prompt_token_ids=prompt_ids, completion_token_ids=truth)
    server = reconstruct_sample(replace(stored, completion=exact), tokenizer, profile)
    assert server.input_ids == prompt_ids + truth
    assert (server.verified, server.reason, server.text_check) == (True, "ok", "agrees")


def test_the_assistant_turn_is_the_tokenizers_own_encoding(tokenizers):
    """The rebuilt generated ids are those mistral-common writes for the same assistant turn in
    history (a think chunk, the answer, a v13 call, ``</s>``)."""
    tokenizer = tokenizers["magistral"]
    stored, prompt_ids, truth = case(tokenizer, MAGISTRAL, SHAPES["tool_call"])
    turn = {
        "role": "assistant",
        "content": "Let me check.",
        "reasoning_content": "Paris is the capital; answer briefly.",
        "tool_calls": [weather_call()],
    }
    result = {"role": "tool", "tool_call_id": "abcdefghi", "content": "x"}
    history = own_ids(tokenizer, [*USER, turn, result], TOOLS)
    assert history[len(prompt_ids) : len(prompt_ids) + len(truth)] == truth


# --- simulated runs ----------------------------------------------------------------------------


def test_simulated_vllm_run_exports_ground_truth(tmp_path, monkeypatch):
    rows = plain_rows(8)
    for row in rows[::2]:
        row["tools"] = TOOLS
    config = {"dialect": "vllm", "tool_call_rate": 0.8, "max_tokens": 60}
    truth, exported = run_rows(tmp_path, monkeypatch, "magistral", rows, config, backend="vllm")
    tokenizer = load_tokenizer("fixture:magistral")
    assert len(exported) == len(truth) == 8
    thought = 0
    for row in exported:
        record = truth[row["generation_id"]]
        assert row["input_ids"] == record["prompt_ids"] + record["completion_ids"]
        assert (row["verified"], row["verify_reason"]) == (True, "ok"), row["verify_reason"]
        assert record["completion_ids"][-1] == 2
        thought += record["completion_ids"][0] == 34
        assert decode(tokenizer, record["prompt_ids"]).endswith(("[/INST]", "[/TOOL_RESULTS]"))
    assert thought >= 4


def test_simulated_openrouter_run_verifies_every_exact_sample(tmp_path, monkeypatch):
    rows = plain_rows(12)
    for row in rows[::2]:
        row["tools"] = TOOLS
    truth, exported = run_rows(tmp_path, monkeypatch, "magistral", rows, {"tool_call_rate": 0.6})
    assert len(exported) == 12
    verified = 0
    for row in exported:
        record = truth[row["generation_id"]]
        assert row["id_source"] == "text"
        if row["verified"]:
            verified += 1
            assert row["input_ids"] == record["prompt_ids"] + record["completion_ids"], record
        else:
            assert not record["text_exact"], (row["verify_reason"], record)
        if record["text_exact"]:
            assert row["verified"], row["verify_reason"]
    assert verified >= 10

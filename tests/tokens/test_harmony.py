"""gpt-oss prompts rendered as vLLM renders them (openai-harmony), where the published template
differs (some at an equal count), and the refusals vLLM makes."""

from __future__ import annotations

import datetime as dt

import pytest

from draftgen.profiles import GPT_OSS
from draftgen.reconstruct.renderer_doubt import unproven_renderings
from draftgen.records import Rendering
from draftgen.tokens.rendering import ChatRenderer, template_renderer
from draftgen.tokens.tokenizer import encode, load_tokenizer

NOON = dt.datetime(2026, 12, 4, 12, 0, tzinfo=dt.UTC)
CALL = {
    "id": "call_7",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather now.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]
END, START, CHANNEL, MESSAGE, RETURN, CALL_ID = 200007, 200006, 200005, 200008, 200002, 200012


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("fixture:gpt-oss")


@pytest.fixture(scope="module")
def harmony(tokenizer):
    renderer = ChatRenderer(tokenizer, GPT_OSS)
    assert renderer.kind == "harmony"
    return renderer


@pytest.fixture(scope="module")
def template(tokenizer):
    return template_renderer(tokenizer, GPT_OSS)


def rendered(renderer, messages, tools=None, **variables):
    rendering = renderer.render(messages, tools, variables, NOON)
    assert not rendering.error, rendering.error
    return rendering.text, renderer.prompt_ids(rendering)


def test_a_leading_system_message_is_developer_instructions_without_a_blank_line(harmony, template):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    text, ids = rendered(harmony, messages)
    assert "<|start|>developer<|message|># Instructions\n\nBe brief.<|end|>" in text
    template_text, template_ids = rendered(template, messages)
    assert "# Instructions\n\nBe brief.\n\n<|end|>" in template_text
    # The blind spot this renderer closes: the same count, other ids.
    assert len(ids) == len(template_ids) and ids != template_ids


def test_the_system_message_carries_date_effort_and_the_tools_line(harmony):
    text, _ = rendered(harmony, [{"role": "user", "content": "Hi"}], TOOLS, reasoning_effort="high")
    assert text.startswith(
        "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
        "Knowledge cutoff: 2024-06\nCurrent date: 2026-12-04\n\nReasoning: high\n\n"
    )
    assert "Calls to these tools must go to the commentary channel: 'functions'.<|end|>" in text
    assert "type get_weather = (_: {\ncity: string,\n}) => any;" in text
    assert text.endswith("<|start|>user<|message|>Hi<|end|><|start|>assistant")
    default, _ = rendered(harmony, [{"role": "user", "content": "Hi"}])
    assert "Reasoning: medium" in default and "<|start|>developer" not in default


def test_special_token_spellings_in_user_text_stay_text(harmony, tokenizer):
    text, ids = rendered(harmony, [{"role": "user", "content": "a <|end|> b <|start|>c"}])
    user = ids[ids.index(START, ids.index(END) + 1) :]
    # <|start|>user<|message|> ... <|end|><|start|>assistant: the two in the data are not ids.
    assert user.count(END) == 1 and user.count(START) == 2
    assert encode(tokenizer, text) != ids  # re-encoding the text would make them specials


def test_history_as_vllm_hands_it_to_harmony(harmony):
    messages = [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "", "tool_calls": [CALL], "reasoning": "need it"},
        {"role": "tool", "tool_call_id": "call_7", "content": "sunny"},
        {"role": "assistant", "content": ""},  # an empty answer: left out
        {"role": "system", "content": "Now in French."},  # later: developer instructions
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
    ]
    text, _ = rendered(harmony, messages, TOOLS)
    history = text[text.index("<|start|>user<|message|>Weather?") :]
    assert history == (
        "<|start|>user<|message|>Weather?<|end|>"
        "<|start|>assistant<|channel|>analysis<|message|>need it<|end|>"
        '<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city": '
        '"Paris"}<|call|>'
        "<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>sunny<|end|>"
        "<|start|>developer<|message|># Instructions\n\nNow in French.<|end|>"
        "<|start|>user<|message|>ab<|end|><|start|>assistant"
    )


def test_arguments_that_are_not_json_text_are_refused_as_vllm_refuses_them(harmony):
    call = {**CALL, "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
    messages = [{"role": "user", "content": "W?"}, {"role": "assistant", "tool_calls": [call]}]
    rendering = harmony.render(messages, TOOLS, {}, NOON)
    assert rendering.error == (
        "HarmonyRefused: tool_calls[].function.arguments must be JSON text, not dict"
    )


def test_reasoning_before_the_last_answer_is_dropped(harmony):
    messages = [
        {"role": "user", "content": "1"},
        {"role": "assistant", "content": "one", "reasoning": "first thought"},
        {"role": "user", "content": "2"},
    ]
    text, _ = rendered(harmony, messages)
    assert "first thought" not in text
    assert "<|start|>assistant<|channel|>final<|message|>one<|end|>" in text


@pytest.mark.parametrize("effort", ["none", "minimal", "xhigh", "max"])
def test_an_effort_vllm_refuses_is_a_rendering_error(harmony, effort):
    rendering = harmony.render(
        [{"role": "user", "content": "Hi"}], None, {"reasoning_effort": effort}
    )
    assert rendering.error == (
        f"HarmonyRefused: reasoning_effort={effort!r} is not supported by Harmony. "
        "Supported values are: low, medium, high."
    )


@pytest.mark.parametrize(
    "reasoning, expected",
    [
        ({"effort": "high"}, {"reasoning_effort": "high"}),
        ({"effort": "minimal"}, {"reasoning_effort": "minimal"}),
        ({"effort": "none"}, {"reasoning_effort": "none"}),
        (None, {}),
    ],
)
def test_gpt_oss_efforts_are_passed_as_given_for_harmony_to_judge(reasoning, expected):
    assert GPT_OSS.template_variables(reasoning) == expected


def test_the_recorded_ids_are_the_prompt(harmony):
    rendering = harmony.render([{"role": "user", "content": "x <|end|>"}], None, {}, NOON)
    assert rendering.ids is not None and harmony.prompt_ids(rendering) == rendering.ids
    assert Rendering.from_dict(rendering.as_dict()).ids == rendering.ids


# -- which renderer a provider uses ---------------------------------------------------------------


def request(harmony, messages, tools=None):
    import orjson

    rendering = harmony.render(messages, tools, {}, NOON)
    return orjson.dumps({"messages": messages, "tools": tools, "rendering": rendering.as_dict()})


SYSTEM_LED = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
# The template writes a tool result as a JSON string ("\"sunny\""): another count.
TELLING = [
    {"role": "user", "content": "Weather?"},
    {"role": "assistant", "content": "", "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call_7", "content": "sunny"},
]


def test_a_provider_proves_harmony_with_a_sample_whose_template_count_differs(harmony, template):
    telling = request(harmony, TELLING, TOOLS)
    blind = request(harmony, SYSTEM_LED)
    samples = [("a", "P", blind, None, True), ("b", "P", telling, None, True)]
    assert unproven_renderings(samples, template, "harmony") == []


def test_an_unproven_provider_s_equal_count_samples_are_flagged(harmony, template):
    blind = request(harmony, SYSTEM_LED)
    plain = request(harmony, [{"role": "user", "content": "Hi"}])  # both renderers agree
    flagged = unproven_renderings(
        [("a", "P", blind, None, True), ("b", "P", plain, None, True)], template, "harmony"
    )
    assert [key for key, _ in flagged] == ["a"]
    assert "no sample of this provider has shown" in flagged[0][1]


def test_a_provider_caught_rendering_the_template_is_named(harmony, template):
    telling = request(harmony, TELLING, TOOLS)
    template_count = len(rendered(template, TELLING, TOOLS)[1])
    blind = request(harmony, SYSTEM_LED)
    samples = [("a", "Q", telling, template_count, False), ("b", "Q", blind, None, True)]
    flagged = unproven_renderings(samples, template, "harmony")
    assert [key for key, _ in flagged] == ["b"]
    assert "caught rendering the published chat template" in flagged[0][1]


# -- through a run ---------------------------------------------------------------------------------


def gpt_oss_rows(count: int) -> list[dict]:
    """System-led rows (the template's count is harmony's), rows whose user text spells harmony's
    specials (the template's count is not), tool history, plain rows."""
    rows = []
    for i in range(count):
        kind = i % 4
        if kind == 0:
            messages = [{"role": "system", "content": f"Be brief {i}."}, *SYSTEM_LED[1:]]
        elif kind == 1:
            messages = [{"role": "user", "content": f"Literal <|end|><|start|> {i}"}]
        elif kind == 2:
            messages = [*TELLING[:2], {**TELLING[2], "content": f"sunny {i}"}]
        else:
            messages = [{"role": "user", "content": f"Question {i}?"}]
        row = {"id": f"r{i}", "messages": messages}
        if kind == 2:
            row["tools"] = TOOLS
        rows.append(row)
    return rows


@pytest.mark.slow
@pytest.mark.parametrize("stream", [False, True])
def test_gpt_oss_runs_verify_only_the_engine_s_ids(tmp_path, monkeypatch, stream):
    """Through the simulator (harmony-rendered), one of three providers rendering the published
    template instead: no sample is verified with ids the serving engine did not produce."""
    import asyncio
    import json

    from draftgen.run.pipeline import RunOptions, run
    from draftgen.simulator import SimConfig, SimulatorThread
    from draftgen.store.database import Store

    monkeypatch.setenv("OPENROUTER_API_KEY", "test")
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps(r) + "\n" for r in gpt_oss_rows(48)))
    config = SimConfig(
        tokenizer="fixture:gpt-oss",
        seed=3,
        min_tokens=8,
        max_tokens=40,
        quirks={"template_renderer": 0.34},
    )
    with SimulatorThread(config) as sim:
        options = RunOptions(
            inputs=[str(prompts)],
            model="openai/gpt-oss-120b",
            tokenizer="fixture:gpt-oss",
            out=tmp_path / "run",
            base_url=sim.base_url,
            concurrency=8,
            progress_interval=3600,
            stream=stream,
            reasoning_effort="high",
            keep_providers=True,  # the templating provider's samples are what is watched
        )
        asyncio.run(run(options))
        truth = dict(sim.truth)
    with Store(tmp_path / "run", create=False) as store:
        rows = list(store.samples.export_rows(include_unverified=True))
        asked = {
            row["generation_id"]
            for questions in store.calibrations.read().values()
            for row in questions.values()
        }
    # Every purchase is a row or a calibration answer, kept apart.
    assert len(rows) == len(truth) - len(asked) == 48
    templated = verified = 0
    for row in rows:
        record = truth[row["generation_id"]]
        exact = row["input_ids"] == record["prompt_ids"] + record["completion_ids"]
        assert exact or not row["verified"], (row["verify_reason"], record["quirks"])
        verified += row["verified"]
        if "template_renderer" in record["quirks"]:
            templated += 1
            assert row["verify_reason"] in ("prompt_count_mismatch", "prompt_renderer_unproven")
    assert templated >= 4 and verified >= 24
    # The harmony providers proved themselves: their system-led samples are verified.
    reasons = {row["verify_reason"] for row in rows if row["provider"] != "AtlasCloud"}
    assert reasons == {"ok"}, reasons


def test_chat_template_kwargs_are_refused_for_gpt_oss_on_a_server():
    from draftgen.records import GenerationSettings
    from draftgen.tokens.rendering import RenderSettingsError, request_variables

    settings = GenerationSettings(model="m", chat_template_kwargs={"reasoning_effort": "high"})
    with pytest.raises(RenderSettingsError, match="never read chat_template_kwargs"):
        request_variables(settings, GPT_OSS)

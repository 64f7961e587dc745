"""One rendering per request, recorded: template variables, server-side argument parsing, the
template's clock, tokenizer-level chat encoding, and what the counts cannot prove."""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import json

import pytest

from draftgen.profiles import DEEPSEEK_V3, GLM, GPT_OSS, KIMI_K2, QWEN3, get_profile
from draftgen.reconstruct.batch import reconstruct_batches
from draftgen.reconstruct.text import reconstruct_sample
from draftgen.records import Completion, GenerationSettings, Rendering, StoredCompletion
from draftgen.run.pipeline import RunError, RunOptions, run
from draftgen.simulator import SimConfig, SimulatorThread
from draftgen.store.database import Store, StoreError
from draftgen.tokens.rendering import (
    ChatRenderer,
    request_variables,
    resolve_profile,
    server_messages,
    tokenizer_encodes_chat,
)
from draftgen.tokens.tokenizer import encode, load_tokenizer

CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
}
HISTORY = [
    {"role": "user", "content": "Weather?"},
    {"role": "assistant", "content": "", "tool_calls": [CALL], "reasoning_content": "R"},
    {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
]
NOON = dt.datetime(2026, 12, 3, 12, 0, tzinfo=dt.UTC)


# -- template variables ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "profile, reasoning, expected",
    [
        (KIMI_K2, None, {}),
        (KIMI_K2, {"effort": "none"}, {"thinking": False}),
        (KIMI_K2, {"effort": "high"}, {"thinking": True}),
        (DEEPSEEK_V3, {"max_tokens": 2000}, {"thinking": True}),
        (DEEPSEEK_V3, {"enabled": False}, {"thinking": False}),
        (QWEN3, {"effort": "none"}, {"enable_thinking": False}),
        (GLM, {"effort": "low"}, {"enable_thinking": True}),
        # vLLM's harmony path refuses efforts other than low, medium and high: passed as given.
        (GPT_OSS, {"effort": "minimal"}, {"reasoning_effort": "minimal"}),
        (GPT_OSS, {"effort": "xhigh"}, {"reasoning_effort": "xhigh"}),
        (GPT_OSS, {"effort": "medium"}, {"reasoning_effort": "medium"}),
        (GPT_OSS, {"effort": "none"}, {"reasoning_effort": "none"}),
    ],
)
def test_reasoning_settings_map_onto_the_family_s_variable(profile, reasoning, expected):
    assert profile.template_variables(reasoning) == expected


def test_chat_template_kwargs_are_added_to_the_mapped_variables():
    settings = GenerationSettings(
        model="m", reasoning={"effort": "none"}, chat_template_kwargs={"preserve_thinking": True}
    )
    assert request_variables(settings, QWEN3) == {
        "enable_thinking": False,
        "preserve_thinking": True,
    }


def test_chat_template_kwargs_are_refused_through_openrouter(tmp_path):
    options = RunOptions(
        inputs=[], model="m", tokenizer="fixture:qwen3", out=tmp_path, chat_template_kwargs={"a": 1}
    )
    from draftgen.run.context import generation_settings

    with pytest.raises(RunError, match="--chat-template-kwargs is for vLLM/SGLang"):
        generation_settings(options)
    options.backend = "vllm"
    assert generation_settings(options).chat_template_kwargs == {"a": 1}


# -- history as servers hand it to templates -----------------------------------------------------


def test_arguments_become_objects_as_vllm_parses_them():
    messages = copy.deepcopy(HISTORY)
    messages[1]["tool_calls"] = [
        CALL,
        {"id": "c2", "function": {"name": "f", "arguments": ""}},
        {"id": "c3", "function": {"name": "f", "arguments": "{not json"}},
    ]
    prepared = server_messages(messages, QWEN3, "{{ messages }}")
    calls = prepared[1]["tool_calls"]
    # vLLM's _postprocess_messages: what is not a JSON object's text becomes {}.
    assert [c["function"]["arguments"] for c in calls] == [{"city": "Paris"}, {}, {}]
    assert prepared[1]["reasoning"] == prepared[1]["reasoning_content"] == "R"
    assert messages[1]["tool_calls"][0]["function"]["arguments"] == '{"city": "Paris"}'  # copy


def test_deepseek_v31_tool_history_is_refused_as_vllm_refuses_it():
    """vLLM parses arguments for every family; V3.1's template joins them as text and raises."""
    tokenizer = load_tokenizer("fixture:deepseek-v3.1")
    rendering = ChatRenderer(tokenizer, DEEPSEEK_V3).render(HISTORY, None, {}, NOON)
    assert rendering.error.startswith("TemplateError: DeepSeek-V3.1's chat template joins")


def test_python_encoders_are_given_the_parsed_arguments_as_json_text():
    prepared = server_messages(HISTORY, DEEPSEEK_V3, encoder=True)
    assert prepared[1]["tool_calls"][0]["function"]["arguments"] == '{"city": "Paris"}'


def test_parsed_arguments_render_as_the_template_writes_an_object():
    tokenizer = load_tokenizer("fixture:qwen3")
    text = ChatRenderer(tokenizer, QWEN3).render(HISTORY, None, {}, NOON).text
    assert '{"name": "get_weather", "arguments": {"city": "Paris"}}' in text


# -- the recorded rendering ----------------------------------------------------------------------


def test_rendering_records_variables_and_instant():
    tokenizer = load_tokenizer("fixture:kimi-k2.5")
    rendering = ChatRenderer(tokenizer, KIMI_K2).render(
        [{"role": "user", "content": "Hi"}], None, {"thinking": False}, NOON
    )
    assert rendering.text.endswith("<|im_assistant|>assistant<|im_middle|><think></think>")
    assert (rendering.variables, rendering.now, rendering.ids, rendering.error) == (
        {"thinking": False},
        "2026-12-03T12:00:00+00:00",
        None,
        "",
    )
    assert Rendering.from_dict(json.loads(json.dumps(rendering.as_dict()))) == rendering


def dated_tokenizer():
    """Qwen3's fixture with a template that stamps the date, as gpt-oss's does."""
    tokenizer = copy.copy(load_tokenizer("fixture:qwen3"))
    tokenizer.chat_template = (
        "{{ 'Today: ' ~ strftime_now('%Y-%m-%d') }}{% for m in messages %}"
        "<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
        "<|im_start|>assistant\n"
    )
    return tokenizer


def test_the_template_clock_is_the_recorded_instant():
    renderer = ChatRenderer(dated_tokenizer(), QWEN3)
    rendering = renderer.render([{"role": "user", "content": "Hi"}], None, {}, NOON)
    assert rendering.text.startswith("Today: 2026-12-03<|im_start|>user")


def test_a_template_error_is_recorded_not_raised():
    tokenizer = copy.copy(load_tokenizer("fixture:qwen3"))
    tokenizer.chat_template = "{{ raise_exception('only user turns, please') }}"
    rendering = ChatRenderer(tokenizer, QWEN3).render([{"role": "user", "content": "x"}], None)
    assert rendering.text == ""
    assert rendering.error == "TemplateError: only user turns, please"


def stored_of(tokenizer, profile, rendering, reasoning, content, *, at=None, finish="stop"):
    """A stored completion whose counts are those of exactly this prompt and answer."""
    renderer = ChatRenderer(tokenizer, profile)
    prompt_ids = renderer.prompt_ids(rendering) if not rendering.error else []
    generated = (reasoning + profile.think_end if reasoning is not None else "") + content
    usage = {
        "prompt_tokens": len(prompt_ids),
        "completion_tokens": len(encode(tokenizer, generated + profile.end_of_turn)),
    }
    completion = Completion("gen-1", "P", "m", reasoning, content, None, finish, finish, usage)
    return StoredCompletion(
        "k",
        "s",
        0,
        [{"role": "user", "content": "Hi"}],
        None,
        completion,
        rendering=rendering,
        stored_at=(at or NOON).timestamp(),
        latency=1.0,
    )


def test_a_failed_rendering_flags_its_sample_and_the_batch_goes_on():
    tokenizer = load_tokenizer("fixture:kimi-k2.5")
    renderer = ChatRenderer(tokenizer, KIMI_K2)
    good = renderer.render([{"role": "user", "content": "Hi"}], None, {}, NOON)
    bad = Rendering("", {}, NOON.isoformat(), None, "TypeError: can only concatenate str")
    batch = [
        stored_of(tokenizer, KIMI_K2, good, "Let me think.", "Hello!"),
        stored_of(tokenizer, KIMI_K2, bad, "Let me think.", "Hello!"),
    ]
    batch[1].key = "k2"
    samples = [s for b in reconstruct_batches([batch], tokenizer, KIMI_K2) for s in b]
    assert [(s.verified, s.reason) for s in samples] == [
        (True, "ok"),
        (False, "prompt_render_failed"),
    ]
    assert "TypeError: can only concatenate str" in samples[1].detail
    assert samples[1].input_ids == []


# -- the prompt's mode is proven, not assumed -----------------------------------------------------


@pytest.fixture(scope="module")
def v31():
    tokenizer = load_tokenizer("fixture:deepseek-v3.1")
    return tokenizer, ChatRenderer(tokenizer, DEEPSEEK_V3)


def test_deepseek_v31_thinking_and_default_prompts_have_the_same_count(v31):
    tokenizer, renderer = v31
    thinking = renderer.render([{"role": "user", "content": "Hi"}], None, {"thinking": True})
    default = renderer.render([{"role": "user", "content": "Hi"}], None, {})
    assert thinking.text.endswith("<｜Assistant｜><think>")
    assert default.text.endswith("<｜Assistant｜></think>")
    assert len(renderer.prompt_ids(thinking)) == len(renderer.prompt_ids(default))


def test_reasoning_returned_proves_a_thinking_prompt(v31):
    tokenizer, renderer = v31
    rendering = renderer.render([{"role": "user", "content": "Hi"}], None, {"thinking": True})
    sample = reconstruct_sample(
        stored_of(tokenizer, DEEPSEEK_V3, rendering, "Let me think.", "Hello!"),
        tokenizer,
        DEEPSEEK_V3,
    )
    assert (sample.verified, sample.reason) == (True, "ok"), sample.detail


def test_an_unsplit_think_block_after_a_non_thinking_prompt_is_not_verified(v31):
    """The provider kept "R</think>A" in content: the counts fit the recorded non-thinking
    prompt as well as a thinking one, and the response shows thinking."""
    tokenizer, renderer = v31
    rendering = renderer.render([{"role": "user", "content": "Hi"}], None, {})
    stored = stored_of(tokenizer, DEEPSEEK_V3, rendering, None, "Let me think.</think>Hello!")
    sample = reconstruct_sample(stored, tokenizer, DEEPSEEK_V3)
    assert (sample.verified, sample.reason) == (False, "prompt_mode_unproven")
    assert "thinking=True has the same token count" in sample.detail


def test_no_reasoning_after_a_non_thinking_prompt_is_verified(v31):
    tokenizer, renderer = v31
    rendering = renderer.render([{"role": "user", "content": "Hi"}], None, {"thinking": False})
    stored = stored_of(tokenizer, DEEPSEEK_V3, rendering, None, "Hello!")
    sample = reconstruct_sample(stored, tokenizer, DEEPSEEK_V3)
    assert (sample.verified, sample.reason) == (True, "ok"), sample.detail


def test_kimi_thinking_switch_changes_the_count_so_nothing_is_in_doubt():
    tokenizer = load_tokenizer("fixture:kimi-k2.5")
    renderer = ChatRenderer(tokenizer, KIMI_K2)
    off = renderer.render([{"role": "user", "content": "Hi"}], None, {"thinking": False})
    sample = reconstruct_sample(
        stored_of(tokenizer, KIMI_K2, off, None, "Hello!"), tokenizer, KIMI_K2
    )
    assert (sample.verified, sample.reason) == (True, "ok"), sample.detail


# -- the date -------------------------------------------------------------------------------------


def test_a_request_in_flight_across_midnight_is_not_verified_on_a_guess():
    tokenizer = dated_tokenizer()
    renderer = ChatRenderer(tokenizer, QWEN3)
    late = dt.datetime(2026, 12, 3, 23, 59, 58, tzinfo=dt.UTC)
    rendering = renderer.render([{"role": "user", "content": "Hi"}], None, {}, late)
    same_day = stored_of(tokenizer, QWEN3, rendering, None, "Hello!", at=late)
    next_day = stored_of(tokenizer, QWEN3, rendering, None, "Hello!", at=late + dt.timedelta(5))
    assert reconstruct_sample(same_day, tokenizer, QWEN3).reason == "ok"
    sample = reconstruct_sample(next_day, tokenizer, QWEN3)
    assert (sample.verified, sample.reason) == (False, "prompt_date_unproven")


def test_a_dateless_template_does_not_mind_midnight():
    tokenizer = load_tokenizer("fixture:qwen3")
    renderer = ChatRenderer(tokenizer, QWEN3)
    late = dt.datetime(2026, 12, 3, 23, 59, 58, tzinfo=dt.UTC)
    rendering = renderer.render([{"role": "user", "content": "Hi"}], None, {}, late)
    stored = stored_of(tokenizer, QWEN3, rendering, None, "Hello!", at=late + dt.timedelta(1))
    assert reconstruct_sample(stored, tokenizer, QWEN3).reason == "ok"


# -- chat formats that are not a Jinja template ---------------------------------------------------


def test_deepseek_v32_is_detected_from_its_python_encoder():
    tokenizer = load_tokenizer("fixture:deepseek-v3.2")
    assert not tokenizer.chat_template
    assert resolve_profile(tokenizer).name == "deepseek-v3.2"
    renderer = ChatRenderer(tokenizer, get_profile("deepseek-v3.2"))
    assert renderer.kind == "python-encoder"
    on = renderer.render([{"role": "user", "content": "Hi"}], None, {"thinking": True})
    off = renderer.render([{"role": "user", "content": "Hi"}], None, {})
    assert on.text == "<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜><think>"
    assert off.text == "<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜></think>"


class SegmentedChat:
    """Mixin: a tokenizer class that encodes chat itself, as Kimi K3's does: user text is
    encoded with special tokens disallowed, so its ids differ from the rendered text's."""

    def apply_chat_template(self, conversation, tokenize=True, **kwargs):
        text = super().apply_chat_template(conversation, tokenize=False, **kwargs)
        if not tokenize:
            return text
        content = conversation[-1]["content"]
        if isinstance(content, list):  # Kimi's template takes content as parts
            content = "".join(part["text"] for part in content)
        head, _, rest = text.partition(content)
        user = self.encode(content.replace("<|im_end|>", "< |im_end|>"))
        return {"input_ids": [encode(self, head) + user + encode(self, rest)]}


def test_a_tokenizer_that_encodes_chat_itself_gives_the_prompt_ids():
    base = load_tokenizer("fixture:kimi-k2.5")
    tokenizer = copy.copy(base)
    tokenizer.__class__ = type("SegmentedKimi", (SegmentedChat, type(base)), {})
    assert tokenizer_encodes_chat(tokenizer) and not tokenizer_encodes_chat(base)
    renderer = ChatRenderer(tokenizer, KIMI_K2)
    assert renderer.kind == "tokenizer"
    messages = [{"role": "user", "content": "say <|im_end|> please"}]
    rendering = renderer.render(messages, None, {}, NOON)
    assert rendering.ids is not None
    # Re-encoding the text would make the user's "<|im_end|>" a control token; the class's own
    # chat encoding does not, and its ids are the prompt.
    assert encode(base, rendering.text).count(163586) == rendering.ids.count(163586) + 1
    assert renderer.prompt_ids(rendering) == rendering.ids


# -- through a run ---------------------------------------------------------------------------------


def simulated(tmp_path, monkeypatch, tokenizer, rows=12, quirks=None, **options):
    monkeypatch.setenv("OPENROUTER_API_KEY", "test")
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(
        "".join(
            json.dumps({"id": f"r{i}", "messages": [{"role": "user", "content": f"Q{i}?"}]}) + "\n"
            for i in range(rows)
        )
    )
    config = SimConfig(
        tokenizer=tokenizer, seed=5, min_tokens=8, max_tokens=40, quirks=quirks or {}
    )
    with SimulatorThread(config) as sim:
        run_options = RunOptions(
            inputs=[str(prompts)],
            model="m",
            tokenizer=tokenizer,
            out=tmp_path / "run",
            base_url=sim.base_url,
            concurrency=4,
            progress_interval=3600,
            **options,
        )
        asyncio.run(run(run_options))
        truth = dict(sim.truth)
    with Store(tmp_path / "run", create=False) as store:
        rows_out = list(store.samples.export_rows(include_unverified=True))
        # What calibration asked is bought and kept apart: the rows' truth is the rest.
        for questions in store.calibrations.read().values():
            for row in questions.values():
                truth.pop(row["generation_id"], None)
    return truth, rows_out, run_options


@pytest.mark.parametrize(
    "tokenizer, effort",
    [
        ("fixture:kimi-k2.5", "none"),
        ("fixture:kimi-k2.5-remote", "none"),
        ("fixture:kimi-k2.5-remote", "high"),
        ("fixture:deepseek-v3.1", "high"),
        ("fixture:qwen3", "none"),
    ],
)
def test_the_thinking_switch_reaches_the_recorded_prompt(tmp_path, monkeypatch, tokenizer, effort):
    """Kimi-K2.5 with effort none and DeepSeek-V3.1 with effort high were 0 of N verified (or
    verified with a prompt the server never rendered) when the switch was ignored."""
    truth, rows, _ = simulated(tmp_path, monkeypatch, tokenizer, reasoning_effort=effort)
    assert len(rows) == len(truth) == 12
    for row in rows:
        record = truth[row["generation_id"]]
        assert row["input_ids"] == record["prompt_ids"] + record["completion_ids"]
        assert (row["verified"], row["verify_reason"]) == (True, "ok")


def test_a_provider_ignoring_the_switch_never_yields_a_verified_wrong_prompt(tmp_path, monkeypatch):
    truth, rows, _ = simulated(
        tmp_path,
        monkeypatch,
        "fixture:deepseek-v3.1",
        rows=24,
        quirks={"ignore_thinking_switch": 0.5, "no_split": 0.5},
        reasoning_effort="high",
    )
    wrong = 0
    for row in rows:
        record = truth[row["generation_id"]]
        exact = row["input_ids"] == record["prompt_ids"] + record["completion_ids"]
        assert exact or not row["verified"], row
        wrong += not exact
    assert wrong >= 4  # the quirk happened and was caught


def test_resuming_with_another_tokenizer_refuses(tmp_path, monkeypatch):
    _, _, options = simulated(tmp_path, monkeypatch, "fixture:qwen3", rows=2)
    other = RunOptions(**{**vars(options), "tokenizer": "fixture:qwen3-thinking-2507"})
    with pytest.raises(StoreError, match="was generated with another tokenizer"):
        asyncio.run(run(other))


def test_a_chat_encoder_no_profile_knows_is_refused(tmp_path):
    """A model directory whose Python encoder draftgen does not know (a DeepSeek V5's, say) is
    not rendered the way another family's is called: detection refuses in one sentence."""
    import shutil

    import transformers

    from draftgen.profiles import UnknownProfileError
    from draftgen_testing.fixtures import build_fixture

    copy_dir = tmp_path / "v5"
    shutil.copytree(build_fixture("deepseek-v3.2"), copy_dir)
    (copy_dir / "encoding" / "encoding_dsv32.py").rename(copy_dir / "encoding" / "encoding_dsv5.py")
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(copy_dir))
    with pytest.raises(UnknownProfileError, match="encoding_dsv5.py is a chat encoder no draftgen"):
        resolve_profile(tokenizer)
    assert resolve_profile(tokenizer, "deepseek-v3.2").name == "deepseek-v3.2"

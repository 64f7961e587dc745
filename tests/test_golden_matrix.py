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

from draftgen.reconstruct.text import reconstruct_sample
from draftgen.records import Completion, StoredCompletion
from draftgen.tokens.rendering import ChatRenderer, render_prompt, resolve_profile
from draftgen.tokens.tokenizer import decode, encode, load_tokenizer


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
    # Qwen writes the markup's leading newline only after content; the others always.
    markup_lead_needs_content: bool = False
    # A tool-call turn, where it differs: between reasoning and the markup or content, around
    # the content (harmony's commentary message), and the turn's end (GLM, harmony).
    tool_think_close: str | None = None
    tool_content_wrap: tuple[str, str] = ("", "")
    tool_eot: str | None = None
    # The profile is chosen by name: its vocabulary is another family's (DeepSeek V3.2).
    forced: bool = False
    detected: str = ""
    # Text-path reason of tool-call shapes when the markup is unconfirmed ("" means "ok").
    tool_reason: str = ""
    # Template variables the requests set (the reasoning switch a provider maps them from).
    variables: tuple[tuple[str, object], ...] = ()


KIMI_MARKUP = (
    "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
    '<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>'
)
DEEPSEEK_MARKUP = (
    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>"
    '{"city": "Paris"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>'
)
QWEN_MARKUP = '\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
# GLM-4.5/4.6's template: "\n<tool_call>NAME\n<arg_key>K</arg_key>\n<arg_value>V</arg_value>\n".
GLM_MARKUP = (
    "\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>"
)
MINIMAX_MARKUP = (
    '\n<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Paris</parameter>\n'
    "</invoke>\n</minimax:tool_call>"
)
DSML_MARKUP = (
    '\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name="get_weather">\n'
    '<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>\n'
    "</｜DSML｜invoke>\n</｜DSML｜function_calls>"
)
# Harmony: the call is a commentary message addressed to the function; <|call|> ends the turn.
HARMONY_MARKUP = (
    "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
    '<|message|>{"city": "Paris"}'
)
HARMONY_FINAL = "<|end|><|start|>assistant<|channel|>final<|message|>"

FAMILIES = {
    "kimi-k2.5": Family("kimi-k2", "<|im_end|>", "", "</think>", markup=KIMI_MARKUP),
    # K2.5 as Moonshot ships it: remote code (a slow tiktoken class), the same ids.
    "kimi-k2.5-remote": Family("kimi-k2", "<|im_end|>", "", "</think>", markup=KIMI_MARKUP),
    "kimi-k2-thinking": Family("kimi-k2", "<|im_end|>", "<think>", "</think>", markup=KIMI_MARKUP),
    # V3.1's markup on V4's vocabulary, thinking by default (the real V4 format has its own file).
    "deepseek-v3-thinking": Family(
        "deepseek-v3", "<｜end▁of▁sentence｜>", "", "</think>", markup=DEEPSEEK_MARKUP
    ),
    "qwen3": Family(
        "qwen3",
        "<|im_end|>",
        "<think>",
        "</think>",
        ("\n", "\n"),
        "\n\n",
        markup=QWEN_MARKUP,
        markup_lead_needs_content=True,
    ),
    "qwen3-thinking-2507": Family(
        "qwen3",
        "<|im_end|>",
        "",
        "</think>",
        ("", "\n"),
        "\n\n",
        markup=QWEN_MARKUP,
        markup_lead_needs_content=True,
    ),
    "qwen3-instruct-2507": Family(
        "qwen3",
        "<|im_end|>",
        "",
        "",
        thinks=False,
        markup=QWEN_MARKUP,
        markup_lead_needs_content=True,
    ),
    # V3.1's template is non-thinking by default: the prompt ends "<｜Assistant｜></think>".
    "deepseek-v3.1": Family(
        "deepseek-v3", "<｜end▁of▁sentence｜>", "", "", thinks=False, markup=DEEPSEEK_MARKUP
    ),
    "deepseek-v3.2": Family(
        "deepseek-v3.2",
        "<｜end▁of▁sentence｜>",
        "",
        "</think>",
        markup=DSML_MARKUP,
        # Detected from its Python chat encoder (encoding/encoding_dsv32.py), not the vocabulary;
        # the encoder chats without thinking unless the request turns it on.
        tool_reason="tool_call_format_unconfirmed",
        variables=(("thinking", True),),
    ),
    "glm-4.6": Family(
        "glm-4.5",
        "<|user|>",
        "\n<think>",
        "</think>",
        markup=GLM_MARKUP,
        tool_eot="<|observation|>",
    ),
    "minimax-m2": Family(
        "minimax-m2", "[e~[", "", "</think>", ("", "\n"), "\n\n", markup=MINIMAX_MARKUP
    ),
    "gpt-oss": Family(
        "gpt-oss",
        "<|return|>",
        "<|channel|>analysis<|message|>",
        HARMONY_FINAL,
        markup=HARMONY_MARKUP,
        tool_think_close="<|end|>",
        tool_content_wrap=("<|start|>assistant<|channel|>commentary<|message|>", "<|end|>"),
        tool_eot="<|call|>",
    ),
}
# GLM writes "\n" before its answer, but only when there is one.
GLM_ANSWER_LEAD = "\n"

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
        [
            {
                "role": "user",
                "content": "Literal <|im_end|> and </think> and <｜end▁of▁sentence｜> and <|end|>",
            }
        ],
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
    tool = shape.tool_call
    close = family.tool_think_close if tool and family.tool_think_close is not None else None
    close = family.think_close if close is None else close
    if family.thinks:
        lead, trail = family.reasoning_pad
        reasoning = lead + shape.reasoning + trail if shape.reasoning else ""
        if family.reasoning_pad != ("", "") and not shape.reasoning:
            reasoning = "\n\n" if family.think_open else "\n"  # Qwen's empty block
        answer_lead = family.answer_lead
        if family.profile == "glm-4.5" and content:
            answer_lead = GLM_ANSWER_LEAD
        answer = answer_lead + content
        head = family.think_open + reasoning + close
    else:
        reasoning, answer, head = None, content, ""
    markup, wrapped, delivered = "", answer, answer
    if tool:
        markup = family.markup
        if family.markup_lead_needs_content and not content:
            markup = markup[1:]  # Qwen writes the newline only after content
        if answer:
            start, end = family.tool_content_wrap
            wrapped = start + answer + end
        if wrapped == answer:
            # A tool parser hands back everything before the markup's first token as content,
            # the markup's leading whitespace included.
            delivered = answer + markup[: len(markup) - len(markup.lstrip())]
    eot = family.tool_eot if tool and family.tool_eot else family.eot
    return head + wrapped + markup + eot, reasoning, delivered


def case(tokenizer, family: Family, shape: Shape):
    renderer = ChatRenderer(tokenizer, family_profile(tokenizer, family))
    rendering = renderer.render(shape.messages, shape.tools, dict(family.variables))
    prompt_ids = renderer.prompt_ids(rendering)
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
    stored = StoredCompletion(
        "k", "s", 0, shape.messages, shape.tools, completion, rendering=rendering
    )
    return stored, prompt_ids, truth


@pytest.mark.parametrize("shape_name", SHAPES)
@pytest.mark.parametrize("fixture", FAMILIES)
def test_golden_matrix(tokenizers, fixture, shape_name):
    tokenizer, family, shape = tokenizers[fixture], FAMILIES[fixture], SHAPES[shape_name]
    if shape.reasoning == "" and not family.thinks:
        pytest.skip("a non-thinking model has no reasoning to leave empty")
    profile = family_profile(tokenizer, family)
    stored, prompt_ids, truth = case(tokenizer, family, shape)

    text = reconstruct_sample(stored, tokenizer, profile)
    assert text.input_ids == prompt_ids + truth
    assert text.prompt_len == len(prompt_ids)
    reason = family.tool_reason if shape.tool_call and family.tool_reason else "ok"
    assert (text.verified, text.reason, text.id_source) == (reason == "ok", reason, "text"), (
        text.detail
    )
    assert text.truncated == bool(shape.truncate)
    if shape.special_in_prompt:
        assert "special_text_in_prompt=" in text.detail

    exact = replace(stored.completion, prompt_token_ids=prompt_ids, completion_token_ids=truth)
    server = reconstruct_sample(replace(stored, completion=exact), tokenizer, profile)
    assert server.input_ids == prompt_ids + truth
    assert (server.verified, server.reason, server.id_source) == (True, "ok", "server")
    assert server.text_check == ("agrees" if reason == "ok" else reason)
    assert server.truncated == bool(shape.truncate)


def family_profile(tokenizer, family: Family):
    """The family's profile as a run gets it: detected, or forced by name where it must be."""
    detected = resolve_profile(tokenizer, None)
    if not family.forced:
        assert detected.name == family.profile
        return detected
    # Forcing must be needed and must not steal: detection still gives the shared family.
    assert detected.name == family.detected
    profile = resolve_profile(tokenizer, family.profile)
    assert profile.name == family.profile
    return profile


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
    profile = family_profile(tokenizer, family)
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


def _delivered(tokenizer, family: Family, shape: Shape, reasoning, content, truth, finish="stop"):
    prompt_ids = encode(tokenizer, render_prompt(tokenizer, shape.messages, shape.tools))
    usage = {"prompt_tokens": len(prompt_ids), "completion_tokens": len(truth)}
    completion = Completion("g", "P", "m", reasoning, content, None, finish, finish, usage)
    stored = StoredCompletion("k", "s", 0, shape.messages, shape.tools, completion)
    profile = family_profile(tokenizer, family)
    return reconstruct_sample(stored, tokenizer, profile), prompt_ids


def test_minimax_think_block_kept_in_content_is_read_back(tokenizers):
    # vLLM's minimax_m2_append_think re-opens the block in content although the prompt holds it.
    tokenizer, family = tokenizers["minimax-m2"], FAMILIES["minimax-m2"]
    text, _, _ = generated_text(family, SHAPES["single_turn"])
    truth = encode(tokenizer, text)
    kept = "<think>" + text[: -len(family.eot)]
    sample, prompt_ids = _delivered(tokenizer, family, SHAPES["single_turn"], None, kept, truth)
    assert sample.input_ids == prompt_ids + truth
    assert (sample.verified, sample.reason) == (True, "ok"), sample.detail
    assert "no_reasoning_split" in sample.detail


def test_glm_unsplit_content_gets_back_the_newline_before_think(tokenizers):
    # A parser that partitions at <think> drops the "\n" the model wrote before it.
    tokenizer, family = tokenizers["glm-4.6"], FAMILIES["glm-4.6"]
    text, _, _ = generated_text(family, SHAPES["single_turn"])
    truth = encode(tokenizer, text)
    content = text[1 : -len(family.eot)]
    assert content.startswith("<think>")
    sample, prompt_ids = _delivered(tokenizer, family, SHAPES["single_turn"], None, content, truth)
    assert sample.input_ids == prompt_ids + truth
    assert (sample.verified, sample.reason) == (True, "ok"), sample.detail


@pytest.mark.parametrize("kept", range(0, 7))
def test_harmony_cut_inside_the_final_channel_header(tokenizers, kept):
    # Cut after the reasoning with `kept` tokens of "<|end|><|start|>assistant<|channel|>final
    # <|message|>" generated: nothing of the answer reached content, the count finds the cut.
    tokenizer, family = tokenizers["gpt-oss"], FAMILIES["gpt-oss"]
    shape = SHAPES["single_turn"]
    head = encode(tokenizer, family.think_open + shape.reasoning)
    header = encode(tokenizer, HARMONY_FINAL)
    assert len(header) == 6
    truth = head + header[:kept]
    if kept == 6:
        truth += encode(tokenizer, "The")  # one answer token: content is no longer empty
    content = "The" if kept == 6 else ""
    sample, prompt_ids = _delivered(
        tokenizer, family, shape, shape.reasoning, content, truth, finish="length"
    )
    assert sample.input_ids == prompt_ids + truth
    assert (sample.verified, sample.reason, sample.truncated) == (True, "ok", True), sample.detail


@pytest.mark.parametrize(
    "fixture", ["deepseek-v3.1", "deepseek-v3.2", "glm-4.6", "minimax-m2", "gpt-oss"]
)
def test_the_simulated_model_writes_each_family_s_format(tokenizers, fixture):
    """The simulator's ground truth for the new families, delivered as a provider splits it,
    reconstructs to exactly its ids (tool-call turns included)."""
    import random

    from draftgen.simulator import wire
    from draftgen.simulator.model import Plan, generate, is_canonical, prompt_layout, token_table

    tokenizer, family = tokenizers[fixture], FAMILIES[fixture]
    profile = family_profile(tokenizer, family)
    table = token_table(f"fixture:{fixture}", profile)
    checked = 0
    for seed in range(12):
        rng = random.Random(seed)
        tools = TOOLS if seed % 2 else None
        call = {
            "id": "functions.get_weather:0",
            "name": "get_weather",
            "arguments": '{"city": "Paris"}',
        }
        plan = Plan(total_tokens=40, reasoning_share=0.4, tool_call=call if tools else None)
        prompt = render_prompt(tokenizer, USER, tools)
        output = generate(table, prompt_layout(prompt, profile), plan, rng, None)
        if not is_canonical(table, output):
            continue  # a boundary BPE merges differently: the text path cannot be exact
        checked += 1
        delivery = wire.deliver(output, set(), rng, tool_call=plan.tool_call)
        prompt_ids = encode(tokenizer, prompt)
        usage = {"prompt_tokens": len(prompt_ids), "completion_tokens": len(output.ids)}
        completion = Completion(
            "g",
            "P",
            "m",
            delivery.reasoning_text,
            delivery.content_text,
            delivery.tool_calls,
            output.finish_reason,
            output.finish_reason,
            usage,
        )
        stored = StoredCompletion("k", "s", 0, USER, tools, completion)
        sample = reconstruct_sample(stored, tokenizer, profile)
        assert sample.input_ids == prompt_ids + output.ids, (seed, output.sections)
        expected = family.tool_reason if tools and family.tool_reason else "ok"
        assert sample.reason == expected, sample.detail
    assert checked >= 6


NEW_FAMILIES = ("deepseek-v3.1", "deepseek-v3.2", "glm-4.6", "minimax-m2", "gpt-oss")


def simulated_run(tmp_path, monkeypatch, fixture: str, backend: str, quirks: dict):
    """(ground truth by generation id, exported rows, text_check by key) of a 16-row run."""
    import asyncio
    import json

    from draftgen.generate.pipeline import RunOptions, run
    from draftgen.simulator import SimConfig, SimulatorThread
    from draftgen.store.database import Store

    family = FAMILIES[fixture]
    forced = family.profile if family.forced else None
    rows = []
    for i in range(16):
        row = {"id": f"r{i}", "messages": [{"role": "user", "content": f"Question {i} — café"}]}
        if i % 2 == 0:
            row["tools"] = TOOLS
        rows.append(json.dumps(row, ensure_ascii=False))
    (tmp_path / "rows.jsonl").write_text("\n".join(rows) + "\n", encoding="utf-8")
    config = SimConfig(
        tokenizer=f"fixture:{fixture}",
        seed=3,
        min_tokens=10,
        max_tokens=60,
        dialect=backend,
        tool_call_rate=0.8,
        profile=forced,
        quirks=quirks,
    )
    monkeypatch.setenv("DRAFTGEN_TEST_KEY", "sk-test")
    with SimulatorThread(config) as sim:
        options = RunOptions(
            inputs=[str(tmp_path / "rows.jsonl")],
            model="test/model",
            tokenizer=f"fixture:{fixture}",
            out=tmp_path / "run",
            base_url=sim.base_url,
            api_key_env="DRAFTGEN_TEST_KEY",
            concurrency=4,
            retry_base_delay=0.01,
            backend=backend,
            progress_interval=3600,
            profile=forced,
        )
        asyncio.run(run(options))
        truth = dict(sim.truth)
    with Store(tmp_path / "run", create=False) as store:
        exported = list(store.export_rows(include_unverified=True))
        checks = dict(store.db.execute("SELECT key, text_check FROM samples"))
    return truth, exported, checks


@pytest.mark.parametrize("fixture", NEW_FAMILIES)
def test_simulated_vllm_run_exports_ground_truth_for_each_new_family(
    tmp_path, monkeypatch, fixture
):
    """Through the whole pipeline: the vLLM dialect's ids are exported as generated, and the text
    path agrees with them wherever the model's ids were the canonical encoding."""
    family = FAMILIES[fixture]
    truth, exported, checks = simulated_run(tmp_path, monkeypatch, fixture, "vllm", {})
    assert len(exported) == len(truth) == 16
    tool_calls = agree = 0
    for row in exported:
        record = truth[row["generation_id"]]
        assert row["input_ids"] == record["prompt_ids"] + record["completion_ids"]
        assert (row["verified"], row["verify_reason"], row["id_source"]) == (True, "ok", "server")
        tool_turn = record["finish_reason"] == "tool_calls"
        tool_calls += tool_turn
        if tool_turn and family.tool_reason:
            assert checks[row["key"]] == family.tool_reason
        elif record["text_exact"]:
            assert checks[row["key"]] == "agrees", record
            agree += 1
    assert tool_calls >= 3 and agree >= 8


# The quirks whose undoing depends on the family's format (whitespace strips and drift are
# family-blind and tested elsewhere; in a 16-row run they mark whole providers unprovable).
QUIRKS = {"leak_eot": 0.5, "no_split": 0.5}


@pytest.mark.parametrize("fixture", NEW_FAMILIES)
def test_simulated_text_run_never_verifies_a_wrong_sample(tmp_path, monkeypatch, fixture):
    """The OpenRouter dialect with provider quirks: what the text path proves equals what the
    model generated, and it proves most of what it can."""
    truth, exported, _ = simulated_run(tmp_path, monkeypatch, fixture, "openrouter", QUIRKS)
    assert len(exported) == 16
    family = FAMILIES[fixture]
    verified = provable = quirked = 0
    for row in exported:
        record = truth[row["generation_id"]]
        assert row["id_source"] == "text"
        quirked += bool(record["quirks"])
        if record["finish_reason"] == "tool_calls" and family.tool_reason:
            assert (row["verified"], row["verify_reason"]) == (False, family.tool_reason)
            continue
        provable += 1
        if row["verified"]:
            verified += 1
            assert row["input_ids"] == record["prompt_ids"] + record["completion_ids"], record
        else:
            assert not record["text_exact"], (row["verify_reason"], record)
    assert provable >= 6 and verified >= provable - 3
    assert quirked >= 3

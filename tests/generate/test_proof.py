"""The proof probe: what an endpoint offers beyond text, read from one answer; the fields the
default backend then sends; and runs of the default backend against the simulator's vLLM dialect
(proof ids, equal to the ground truth, streamed and not, thinking on and off) and OpenRouter's
(proof text).
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import replace

import orjson
import pytest

from draftgen import logs
from draftgen.backends import base
from draftgen.backends.proof import Offer, offer_fields, question_body, read_answer
from draftgen.generate.proof import (
    OFFER_META,
    asks_question,
    describe,
    openrouter_offer,
    recorded_offer,
)
from draftgen.reconstruct.text import reconstruct_sample
from draftgen.records import Completion, GenerationSettings, StoredCompletion
from draftgen.run.pipeline import RunOptions, run
from draftgen.run.probe import _engine_of
from draftgen.simulator import SimConfig, SimulatorThread
from draftgen.store.database import Store
from draftgen.tokens import tokenizer as tok
from draftgen.tokens.rendering import ChatRenderer, resolve_profile
from draftgen.tokens.tokenizer import load_tokenizer

SETTINGS = GenerationSettings(model="m", max_tokens=None, reasoning={"effort": "none"})
MESSAGES = [{"role": "user", "content": "hi"}]


def answer(**extra) -> bytes:
    choice = {"index": 0, "finish_reason": "length", "message": {"content": "", "reasoning": "R"}}
    choice.update(extra.pop("choice", {}))
    return orjson.dumps(
        {"id": "x", "choices": [choice], "usage": {"prompt_tokens": 3, "completion_tokens": 1}}
        | extra
    )


# --- reading an answer ------------------------------------------------------------------------


def test_an_answer_with_ids_offers_ids_and_names_vllm():
    completion = base.parse_completion(
        answer(prompt_token_ids=[1, 2, 3], choice={"token_ids": [7]})
    )
    assert (completion.prompt_token_ids, completion.completion_token_ids) == ([1, 2, 3], [7])
    offer = read_answer(completion, "openai-compatible")
    assert offer == Offer("vllm", "ids", "it returned the prompt's 3 ids and the completion's 1")


def test_sglang_ids_on_the_choice_and_in_meta_info_offer_ids():
    body = answer(choice={"prompt_token_ids": [1, 2], "meta_info": {"output_ids": [5, 6]}})
    completion = base.parse_completion(body)
    assert (completion.prompt_token_ids, completion.completion_token_ids) == ([1, 2], [5, 6])
    assert read_answer(completion, "sglang").server == "sglang"


def test_token_id_logprobs_offer_logprobs_and_bytes_alone_too():
    entries = [{"token": "token_id:151667", "logprob": -0.1, "bytes": [60]}]
    completion = base.parse_completion(answer(choice={"logprobs": {"content": entries}}))
    assert (completion.logprob_ids, completion.logprob_bytes) == ([151667], None)
    assert read_answer(completion, "openai-compatible") == Offer(
        "vllm", "logprobs", "its logprobs spell every token as its id"
    )
    entries = [{"token": "A", "logprob": -0.1, "bytes": [65]}]
    completion = base.parse_completion(answer(choice={"logprobs": {"content": entries}}))
    assert (completion.logprob_ids, completion.logprob_bytes) == (None, [b"A"])
    assert read_answer(completion, "openai-compatible").proof == "logprobs"


def test_a_text_only_answer_offers_text_and_malformed_ids_are_not_fatal():
    completion = base.parse_completion(answer(prompt_token_ids=[1, -2], choice={"token_ids": [7]}))
    assert completion.prompt_token_ids is None and completion.completion_token_ids is None
    assert read_answer(completion, "openai-compatible") == Offer(
        "openai-compatible", "text", "it returned neither ids nor logprobs"
    )
    # One id list without the other is no proof either: the text path reads the sample.
    completion = base.parse_completion(answer(choice={"token_ids": [7]}))
    assert completion.completion_token_ids is None


def test_a_stream_folds_the_ids_and_token_id_logprobs_without_being_the_vllm_backend():
    acc = base.StreamAccumulator()
    events = [
        {"prompt_token_ids": [1, 2], "choices": [{"delta": {"reasoning": "R"}, "token_ids": [5]}]},
        {
            "choices": [
                {
                    "delta": {"content": "A"},
                    "token_ids": [6, 7],
                    "logprobs": {"content": [{"token": "token_id:6"}, {"token": "token_id:7"}]},
                    "finish_reason": "stop",
                }
            ]
        },
        {"choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 3}},
    ]
    for event in events:
        acc.feed_line(b"data: " + orjson.dumps(event))
    acc.feed_line(b"data: [DONE]")
    completion = acc.finish()
    assert (completion.prompt_token_ids, completion.completion_token_ids) == ([1, 2], [5, 6, 7])
    assert completion.logprob_ids == [6, 7]
    assert completion.usage["completion_tokens"] == 3


def test_the_probe_names_the_engine_from_its_model_listing():
    listing = {"data": [{"id": "m", "object": "model", "owned_by": "vllm"}]}
    assert _engine_of(orjson.dumps(listing)) == "vllm"
    listing["data"][0]["owned_by"] = "sglang"
    assert _engine_of(orjson.dumps(listing)) == "sglang"
    listing["data"][0]["owned_by"] = "openai"
    assert _engine_of(orjson.dumps(listing)) is None
    assert _engine_of(b'{"data": []}') is None


# --- the fields sent ------------------------------------------------------------------------


def test_the_question_asks_every_proof_without_openrouters_reasoning():
    body = question_body(base.request_body(SETTINGS, MESSAGES, None, False))
    assert "reasoning" not in body
    assert {k: body[k] for k in ("return_token_ids", "logprobs", "return_tokens_as_token_ids")} == {
        "return_token_ids": True,
        "logprobs": True,
        "return_tokens_as_token_ids": True,
    }


def test_an_engine_gets_ids_asked_and_the_thinking_switch_as_template_kwargs():
    variables = {"enable_thinking": False}
    body = base.request_body(SETTINGS, MESSAGES, None, True)
    assert body["stream_options"] == {"include_usage": True}  # every stream asks for usage
    sent = offer_fields(dict(body), Offer("vllm", "ids"), variables)
    assert sent["return_token_ids"] is True and "reasoning" not in sent
    assert sent["chat_template_kwargs"] == {"enable_thinking": False}
    sent = offer_fields(dict(body), Offer("vllm", "logprobs"), variables)
    assert (sent["logprobs"], sent["return_tokens_as_token_ids"]) == (True, True)
    assert "return_token_ids" not in sent
    sent = offer_fields(dict(body), Offer("sglang", "ids"), {})
    assert (sent["return_prompt_token_ids"], sent["return_meta_info"]) == (True, True)
    assert "chat_template_kwargs" not in sent  # no variables: the template's own default


def test_openrouter_keeps_reasoning_and_gets_no_engine_fields():
    body = base.request_body(SETTINGS, MESSAGES, None, False)
    sent = offer_fields(dict(body), Offer("openrouter", "text"), {"enable_thinking": False})
    assert sent == body and sent["reasoning"] == {"effort": "none"}
    sent = offer_fields(dict(body), Offer("openrouter", "logprobs"), {"enable_thinking": False})
    assert sent == {**body, "logprobs": True}
    assert offer_fields(dict(body), None, {}) == body


def test_openrouter_offer_is_logprobs_only_where_asked_or_listed_for_every_provider():
    assert openrouter_offer("openrouter", True, []).proof == "logprobs"
    listed = openrouter_offer("openrouter", False, ["SiliconFlow", "Chutes"])
    assert (listed.proof, listed.detail) == (
        "logprobs",
        "the listing names logprobs for SiliconFlow, Chutes",
    )
    assert openrouter_offer("openrouter", False, []).proof == "text"
    assert not asks_question(("openrouter",)) and not asks_question(("simulator",))
    assert not asks_question(()) and asks_question(("vllm", "openai-compatible"))


def test_a_recorded_offer_is_reused_only_for_the_same_servers():
    stored = orjson.dumps({"server": "vllm", "proof": "ids", "detail": "d", "servers": ["vllm"]})
    assert recorded_offer(stored.decode(), ("vllm",)) == Offer("vllm", "ids", "d")
    assert recorded_offer(stored.decode(), ("vllm", "vllm")) is None
    assert recorded_offer(None, ("vllm",)) is None
    assert describe(Offer("vllm", "ids", "d")) == (
        "proof: the endpoint (vllm) offers the server's own token ids (proof ids): d; thinking "
        "switch sent as chat_template_kwargs"
    )


# --- reconstruction from ids the logprobs name ----------------------------------------------


def _qwen3_stored(logprob_ids, completion_tokens, content, reasoning, finish="stop"):
    tokenizer = load_tokenizer("fixture:qwen3")
    profile = resolve_profile(tokenizer, None)
    rendering = ChatRenderer(tokenizer, profile).render(MESSAGES, None, {})
    prompt_ids = tok.encode(tokenizer, rendering.text)
    completion = Completion(
        generation_id="g",
        provider=None,
        model="m",
        reasoning=reasoning,
        content=content,
        tool_calls=None,
        finish_reason=finish,
        native_finish_reason=finish,
        usage={"prompt_tokens": len(prompt_ids), "completion_tokens": completion_tokens},
        logprob_ids=logprob_ids,
    )
    stored = StoredCompletion("k", "s:0", 0, MESSAGES, None, completion, rendering)
    return stored, tokenizer, profile, prompt_ids


def test_logprob_ids_are_the_whole_completion_even_a_resplit_the_count_cannot_see():
    tokenizer = load_tokenizer("fixture:qwen3")
    generated = "\nthink\n</think>\n\nthe answer<|im_end|>"
    canonical = tok.encode(tokenizer, generated)
    # A re-split of "the": two ids whose bytes are the one token's, as the model may sample.
    the = tok.encode(tokenizer, "the")
    parts = [tok.encode(tokenizer, "t")[0], tok.encode(tokenizer, "he")[0]]
    assert len(the) == 1 and len(parts) == 2
    at = canonical.index(the[0])
    resplit = canonical[:at] + parts + canonical[at + 1 :]
    stored, tokenizer, profile, prompt_ids = _qwen3_stored(
        resplit, len(resplit), "the answer", "think\n"
    )
    sample = reconstruct_sample(stored, tokenizer, profile)
    assert (sample.id_source, sample.verified, sample.reason) == ("logprobs", True, "ok")
    assert sample.input_ids == prompt_ids + resplit
    assert sample.text_check != "agrees"  # the text path re-encodes to the canonical ids


def test_logprobs_without_the_stop_token_take_the_end_of_turn_the_count_asks_for():
    tokenizer = load_tokenizer("fixture:qwen3")
    ids = tok.encode(tokenizer, "\nthink\n</think>\n\nthe answer")
    eot = tok.encode(tokenizer, "<|im_end|>")
    stored, tokenizer, profile, prompt_ids = _qwen3_stored(
        ids, len(ids) + len(eot), "the answer", "think\n"
    )
    sample = reconstruct_sample(stored, tokenizer, profile)
    assert (sample.id_source, sample.verified) == ("logprobs", True)
    assert sample.input_ids == prompt_ids + ids + eot
    assert "end_of_turn_not_in_logprobs" in sample.detail


def test_logprob_ids_that_miss_the_count_fall_back_to_the_text_path_and_say_so():
    tokenizer = load_tokenizer("fixture:qwen3")
    ids = tok.encode(tokenizer, "\nthink\n</think>\n\nthe answer<|im_end|>")
    stored, tokenizer, profile, _ = _qwen3_stored(ids, len(ids) + 5, "the answer", "think\n")
    sample = reconstruct_sample(stored, tokenizer, profile)
    assert sample.id_source == "text"
    assert f"logprobs_unusable: {len(ids)} ids from logprobs, provider {len(ids) + 5}" in (
        sample.detail
    )


def test_logprob_ids_that_do_not_spell_the_content_are_not_verified():
    tokenizer = load_tokenizer("fixture:qwen3")
    ids = tok.encode(tokenizer, "\nthink\n</think>\n\nanother answer<|im_end|>")
    stored, tokenizer, profile, _ = _qwen3_stored(ids, len(ids), "the answer", "think\n")
    sample = reconstruct_sample(stored, tokenizer, profile)
    assert (sample.id_source, sample.verified, sample.reason) == (
        "logprobs",
        False,
        "logprob_text_mismatch",
    )


# --- runs of the default backend ------------------------------------------------------------


def proof_lines(caplog) -> list[str]:
    """The INFO lines of the proof probe, however an earlier test configured logging."""
    return [m for m in dict.fromkeys(caplog.messages) if m.startswith("proof:")]


def _rows(path, count):
    lines = [
        json.dumps({"id": f"r{i}", "messages": [{"role": "user", "content": f"Q{i} 🙂 café"}]})
        for i in range(count)
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _watch(caplog, monkeypatch) -> None:
    """caplog's handler on draftgen's logger itself, for this test only: a run's logging setup
    may stop it from propagating to the root, where caplog listens."""
    logger = logging.getLogger("draftgen")
    caplog.set_level(logging.INFO, logger="draftgen")
    monkeypatch.setattr(logger, "handlers", [*logger.handlers, caplog.handler])
    # Secrets an earlier test of this process registered (one used "simulator" as its key)
    # would mask words of these lines.
    monkeypatch.setattr(logs.REDACTOR, "secrets", set())


def default_backend_run(tmp_path, monkeypatch, dialect, stream, faults=None, **overrides):
    config = SimConfig(
        tokenizer="fixture:qwen3",
        seed=5,
        min_tokens=10,
        max_tokens=50,
        quirks={"drift": 0.2},
        faults={"server_error": 0.05} if faults is None else faults,
        dialect=dialect,
    )
    monkeypatch.setenv("DRAFTGEN_TEST_KEY", "sk-test")
    tmp_path.mkdir(parents=True, exist_ok=True)
    with SimulatorThread(config) as sim:
        options = RunOptions(
            inputs=[str(_rows(tmp_path / "rows.jsonl", 24))],
            model="test/model",
            tokenizer="fixture:qwen3",
            out=tmp_path / "run",
            base_url=sim.base_url,
            api_key_env="DRAFTGEN_TEST_KEY",
            concurrency=6,
            retry_base_delay=0.01,
            max_attempts=12,
            progress_interval=3600,
            stream=stream,
            **overrides,
        )
        summary = asyncio.run(run(options))
        truth = dict(sim.truth)
    store = Store(tmp_path / "run", create=False)
    try:
        rows = list(store.samples.export_rows(include_unverified=True))
        recorded = store.settings.meta(OFFER_META)
        offer = orjson.loads(recorded) if recorded else None
    finally:
        store.close()
    return summary, truth, rows, offer


@pytest.mark.parametrize(
    "stream, effort",
    [(False, None), (True, None), (False, "none"), (True, "none")],
)
def test_the_default_backend_takes_vllms_ids_streamed_or_not_thinking_on_or_off(
    tmp_path, monkeypatch, caplog, stream, effort
):
    _watch(caplog, monkeypatch)
    summary, truth, rows, offer = default_backend_run(
        tmp_path, monkeypatch, "vllm", stream, reasoning_effort=effort
    )
    assert (offer["server"], offer["proof"]) == ("vllm", "ids")
    assert len(rows) == 24 and len(truth) == 24 + 1  # the question is one answer more
    for row in rows:
        record = truth[row["generation_id"]]
        assert row["id_source"] == "ids"
        assert (row["verified"], row["verify_reason"]) == (True, "ok")
        assert row["input_ids"] == record["prompt_ids"] + record["completion_ids"]
        # The engine rendered with the switch sent: thinking off leaves no reasoning.
        assert (record["layout"] == "disabled") == (effort == "none"), record["layout"]
    assert sum("drift" in truth[r["generation_id"]]["quirks"] for r in rows) > 2
    assert proof_lines(caplog) == [
        "proof: the endpoint (vllm) offers the server's own token ids (proof ids): it returned "
        f"the prompt's {offer['detail'].split()[4]} ids and the completion's 1; thinking switch "
        "sent as chat_template_kwargs"
    ]


def test_a_resume_reuses_the_recorded_offer_without_asking_again(tmp_path, monkeypatch, caplog):
    _, first, _, _ = default_backend_run(tmp_path, monkeypatch, "vllm", False, faults={})
    assert len(first) == 24 + 1  # the rows and the question
    caplog.clear()  # the first run's line, where draftgen's logger propagates to caplog's root
    _watch(caplog, monkeypatch)
    summary, truth, rows, offer = default_backend_run(
        tmp_path, monkeypatch, "vllm", False, faults={}
    )
    assert truth == {}  # nothing asked: neither the question nor a stored turn
    assert proof_lines(caplog) == [
        "proof: the endpoint (vllm) offers the server's own token ids (proof ids): as recorded by "
        "an earlier run; thinking switch sent as chat_template_kwargs"
    ]


def test_the_question_is_paid_and_kept_with_calibrations_and_not_asked_without_calibration(
    tmp_path, monkeypatch
):
    summary, truth, rows, offer = default_backend_run(tmp_path, monkeypatch, "vllm", False)
    store = Store(tmp_path / "run", create=False)
    try:
        kept = store.calibrations.read()[""]["proof"]
    finally:
        store.close()
    asked = truth[kept["generation_id"]]
    assert (kept["completion_tokens"], kept["cost"]) == (1, asked["cost"]) and asked["cost"] > 0
    summary, truth, rows, offer = default_backend_run(
        tmp_path / "off", monkeypatch, "vllm", False, no_calibrate=True
    )
    assert offer is None and len(truth) == 24  # no question, nothing kept
    assert {r["id_source"] for r in rows} == {"text"}


def test_the_default_backend_against_openrouter_stays_text(tmp_path, monkeypatch):
    summary, truth, rows, offer = default_backend_run(tmp_path, monkeypatch, "openrouter", True)
    assert offer is None  # nothing was asked: the listing is read again on a resume
    assert len(rows) == 24 and {r["id_source"] for r in rows} == {"text"}
    for row in rows:
        record = truth[row["generation_id"]]
        if row["verified"]:
            assert row["input_ids"] == record["prompt_ids"] + record["completion_ids"] or (
                "drift" in record["quirks"]  # a re-split the count cannot see, text proof only
            )


# --- the simulator answers as vLLM does -----------------------------------------------------


def _post(base_url: str, body: dict) -> tuple[int, bytes]:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(
        base_url + "/chat/completions",
        data=orjson.dumps(body),
        headers={"Content-Type": "application/json", "Authorization": "Bearer k"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def _events(raw: bytes) -> list[dict]:
    lines = [line[6:] for line in raw.split(b"\n") if line.startswith(b"data: {")]
    return [orjson.loads(line) for line in lines]


def test_the_vllm_dialect_answers_as_vllm_does():
    config = SimConfig(tokenizer="fixture:qwen3", seed=3, min_tokens=5, max_tokens=20)
    with SimulatorThread(replace(config, dialect="vllm")) as sim:
        body = {"model": "m", "messages": MESSAGES, "stream": True}
        _, raw = _post(sim.base_url, body)
        assert not any("usage" in e and e["usage"] for e in _events(raw))  # not asked
        _, raw = _post(sim.base_url, {**body, "stream_options": {"include_usage": True}})
        assert [e["usage"]["prompt_tokens"] > 0 for e in _events(raw) if e.get("usage")] == [True]
        # OpenRouter's reasoning is ignored; chat_template_kwargs switches thinking off.
        plain = {"model": "m", "messages": MESSAGES, "return_token_ids": True}
        _, raw = _post(sim.base_url, {**plain, "reasoning": {"effort": "none"}})
        on = orjson.loads(raw)
        _, raw = _post(sim.base_url, {**plain, "chat_template_kwargs": {"enable_thinking": False}})
        off = orjson.loads(raw)
        assert len(off["prompt_token_ids"]) > len(on["prompt_token_ids"])  # the empty think block
        assert off["prompt_token_ids"][-4:] != on["prompt_token_ids"][-4:]
        # Token-id logprobs name every generated token, reasoning and end of turn too.
        asked = {**plain, "logprobs": True, "return_tokens_as_token_ids": True}
        _, raw = _post(sim.base_url, asked)
        choice = orjson.loads(raw)["choices"][0]
        named = [int(e["token"].split(":")[1]) for e in choice["logprobs"]["content"]]
        assert named == choice["token_ids"]
        # Tool-call arguments as an object: refused, as vLLM's request schema does.
        call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}
        history = [*MESSAGES, {"role": "assistant", "content": "", "tool_calls": [call]}]
        status, raw = _post(sim.base_url, {"model": "m", "messages": history})
        assert status == 400 and b"arguments: Input should be a valid string" in raw
    with SimulatorThread(config) as sim:  # OpenRouter: no ids whatever is asked
        _, raw = _post(sim.base_url, {"model": "m", "messages": MESSAGES, "return_token_ids": True})
        answered = orjson.loads(raw)
        assert "prompt_token_ids" not in answered and "token_ids" not in answered["choices"][0]


def test_openrouter_logprobs_are_asked_where_every_routed_provider_lists_them(
    tmp_path, monkeypatch, caplog
):
    _watch(caplog, monkeypatch)
    summary, truth, rows, offer = default_backend_run(
        tmp_path, monkeypatch, "openrouter", False, provider={"only": ["SiliconFlow"]}
    )
    assert proof_lines(caplog) == [
        "proof: the endpoint (simulator) offers logprobs that identify the tokens (proof "
        "logprobs): the listing names logprobs for SiliconFlow"
    ]
    by_proof = {r["id_source"] for r in rows}
    assert "logprobs" in by_proof
    for row in rows:
        record = truth[row["generation_id"]]
        if row["id_source"] == "logprobs" and row["verified"]:
            assert row["input_ids"] == record["prompt_ids"] + record["completion_ids"]

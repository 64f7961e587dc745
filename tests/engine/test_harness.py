"""The engine harness without the engine (default suite): the tiny model's chain, and the proxy's
two faces before a fake upstream answering in vLLM 0.32's measured shapes.
"""

from __future__ import annotations

import asyncio
import json
import random

import aiohttp
import pytest
from aiohttp import web
from conftest import start_app

from draftgen_testing.engine import model
from draftgen_testing.engine.proxy import PASSTHROUGH, TEXT, Recorder, prompt_seed, proxy_app

IM_END, THINK, END_THINK = 151645, 151667, 151668
PROMPT_IDS = [151644, 872, 198, 6023, 151645, 198, 151644, 77091, 198]
COMPLETION_IDS = [THINK, 1196, 624, END_THINK, 271, 9707, IM_END]


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from draftgen_testing.fixtures import build_fixture

    return AutoTokenizer.from_pretrained(str(build_fixture("qwen3")))


@pytest.fixture(scope="module")
def chain(tokenizer):
    special = {text: tokenizer.convert_tokens_to_ids(text) for text in ("<|im_end|>", "<think>")}
    special["</think>"] = tokenizer.convert_tokens_to_ids("</think>")
    return model.chain_ids(lambda text: tokenizer.encode(text, add_special_tokens=False), special)


def test_the_chain_is_made_of_single_qwen3_tokens(chain):
    states = list(model.STATES)
    assert chain["classes"][198] == states.index("start")  # "<|im_start|>assistant\n"
    assert chain["classes"][271] == states.index("answer_start")  # "</think>\n\n" or the prompt's
    assert chain["classes"][THINK] == states.index("think")
    assert chain["next"][states.index("start")][THINK] == pytest.approx(0.92)
    assert chain["next"][states.index("line")][END_THINK] == pytest.approx(0.6)
    assert chain["next"][states.index("end_think")] == {271: 1.0}
    for row in chain["next"]:
        assert sum(row.values()) == pytest.approx(1.0)
    # Every state fits the residual stream beside the constant dimension.
    assert len(chain["next"]) + 1 <= model.HIDDEN


def test_a_word_of_two_tokens_is_refused():
    def encode(text: str) -> list[int]:
        return [32313, 11] if text == "Okay" else [1]  # as if "Okay" were two tokens

    special = {"<|im_end|>": IM_END, "<think>": THINK, "</think>": END_THINK}
    with pytest.raises(ValueError, match="the tiny model's token 'Okay' is 2 Qwen3 tokens"):
        model.chain_ids(encode, special)


def test_the_chains_rates_drawn_offline(chain, tokenizer):
    """One answer with reasoning in ten re-encodes to other ids, nearly half at the same count;
    about one in eleven never closes its reasoning (seeded draws of the chain itself)."""
    rng = random.Random(0)
    draws = [model.sample_chain(chain, 198, rng, 128, IM_END) for _ in range(2000)]
    resplit = same_count = unclosed = 0
    for ids in draws:
        again = tokenizer.encode(tokenizer.decode(ids), add_special_tokens=False)
        if again != ids:
            resplit += 1
            same_count += len(again) == len(ids)
        unclosed += ids[0] == THINK and END_THINK not in ids
    assert 0.08 <= resplit / 2000 <= 0.13
    assert 0.35 <= same_count / resplit <= 0.6
    assert 0.06 <= unclosed / 2000 <= 0.12
    lengths = sorted(len(ids) for ids in draws)
    assert 25 <= lengths[1000] <= 45


def test_the_seed_is_the_prompts():
    body = {"messages": [{"role": "user", "content": "a"}], "seed": 1}
    assert prompt_seed(body) == prompt_seed(json.loads(json.dumps(body)))
    assert prompt_seed(body) != prompt_seed({**body, "seed": 2})
    other = {**body, "messages": [{"role": "user", "content": "b"}]}
    assert prompt_seed(body) != prompt_seed(other)
    off = {**body, "chat_template_kwargs": {"enable_thinking": False}}
    assert prompt_seed(body) != prompt_seed(off)


def _vllm_like(seen: list[dict]) -> web.Application:
    """Answers as vLLM 0.32 does with return_token_ids (streamed: an id-only chunk for each token
    without text, usage only when asked)."""

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        seen.append(body)
        usage = {"prompt_tokens": 9, "completion_tokens": 7, "total_tokens": 16}
        common = {"id": "chatcmpl-1", "model": "m", "system_fingerprint": "vllm-0.32.0-x"}
        if not body.get("stream"):
            choice = {
                "index": 0,
                "message": {"role": "assistant", "reasoning": " user.\n", "content": "\n\nHello"},
                "finish_reason": "stop",
                "stop_reason": None,
                "token_ids": COMPLETION_IDS,
                "logprobs": {"content": [{"token": "token_id:151667"}]},
            }
            return web.json_response(
                {**common, "choices": [choice], "usage": usage, "prompt_token_ids": PROMPT_IDS}
            )
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        deltas = [
            ({"role": "assistant", "content": ""}, [], None),
            ({}, [THINK], None),  # a token without text: sent only because ids were asked for
            ({"reasoning": " user"}, [1196], None),
            ({"reasoning": ".\n"}, [624], None),
            ({}, [END_THINK], None),
            ({"content": "\n\n"}, [271], None),
            ({"content": "Hello"}, [9707], None),
            ({"content": ""}, [IM_END], "stop"),
        ]
        for number, (delta, ids, finish) in enumerate(deltas):
            chunk = {**common, "choices": [{"index": 0, "delta": delta, "token_ids": ids}]}
            chunk["choices"][0]["finish_reason"] = finish
            if number == 0:
                chunk["prompt_token_ids"] = PROMPT_IDS
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
        if (body.get("stream_options") or {}).get("include_usage"):
            tail = {**common, "choices": [], "usage": usage}
            await response.write(f"data: {json.dumps(tail)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        return response

    async def models(request: web.Request) -> web.Response:
        listing = [{"id": "m", "owned_by": "vllm", "root": "/models/m", "max_model_len": 4096}]
        return web.json_response({"object": "list", "data": listing})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/v1/models", models)
    app.router.add_post("/tokenize", models)
    return app


async def _through_proxy(mode: str, requests: list[dict]) -> tuple[list, list[dict], Recorder]:
    seen: list[dict] = []
    recorder = Recorder()
    upstream, upstream_url = await start_app(_vllm_like(seen))
    proxy, proxy_url = await start_app(proxy_app(upstream_url.removesuffix("/v1"), mode, recorder))
    answers = []
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(proxy_url + "/models") as listing:
                answers.append(await listing.json())
            async with session.post(proxy_url.removesuffix("/v1") + "/tokenize") as other:
                answers.append(other.status)
            for body in requests:
                async with session.post(proxy_url + "/chat/completions", json=body) as response:
                    answers.append(await response.read())
    finally:
        await proxy.cleanup()
        await upstream.cleanup()
    return answers, seen, recorder


def _chunks(stream: bytes) -> list[dict]:
    lines = stream.decode().split("\n\n")
    return [json.loads(line[6:]) for line in lines if line.startswith("data: {")]


REQUESTS = [
    {"messages": [{"role": "user", "content": "hi"}], "reasoning": {"effort": "none"}},
    {"messages": [{"role": "user", "content": "hi"}], "stream": True},
    {
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
        "stream_options": {"include_usage": True},
    },
]


def test_the_text_face_is_a_text_only_provider():
    answers, seen, recorder = asyncio.run(_through_proxy(TEXT, REQUESTS))
    listing, tokenize, whole, plain, with_usage = answers
    assert listing["data"] == [{"id": "m", "owned_by": "draftgen-proxy"}]
    assert tokenize == 404
    # Every request asks the engine for its ids; OpenRouter's thinking switch becomes vLLM's.
    assert all(body["return_token_ids"] is True for body in seen)
    assert seen[0]["chat_template_kwargs"] == {"enable_thinking": False}
    assert "reasoning" not in seen[0]
    answer = json.loads(whole)
    assert set(answer) == {"id", "model", "choices", "usage"}
    assert answer["choices"][0] == {
        "index": 0,
        "message": {"role": "assistant", "reasoning": " user.\n", "content": "\n\nHello"},
        "finish_reason": "stop",
        "logprobs": None,
    }
    chunks = _chunks(plain)
    # The chunks of <think> and </think> (no text) are gone; no ids, no usage unasked.
    assert [c["choices"][0]["delta"] for c in chunks] == [
        {"role": "assistant", "content": ""},
        {"reasoning": " user"},
        {"reasoning": ".\n"},
        {"content": "\n\n"},
        {"content": "Hello"},
        {"content": ""},
    ]
    assert all("token_ids" not in c["choices"][0] and "prompt_token_ids" not in c for c in chunks)
    assert _chunks(with_usage)[-1]["usage"]["completion_tokens"] == 7
    truth = recorder.get("chatcmpl-1")
    assert (truth.prompt_ids, truth.completion_ids) == (PROMPT_IDS, COMPLETION_IDS)
    assert truth.stream and truth.finish_reason == "stop"


def test_the_passthrough_face_is_vllm_as_it_is():
    asked = {"messages": [{"role": "user", "content": "hi"}], "return_token_ids": True}
    unasked = {"messages": [{"role": "user", "content": "hi"}], "reasoning": {"effort": "none"}}
    answers, seen, recorder = asyncio.run(_through_proxy(PASSTHROUGH, [asked, unasked]))
    listing, tokenize, with_ids, without = answers
    assert listing["data"][0]["owned_by"] == "vllm"
    assert tokenize == 200
    assert json.loads(with_ids)["choices"][0]["token_ids"] == COMPLETION_IDS
    assert json.loads(with_ids)["prompt_token_ids"] == PROMPT_IDS
    # Ids the client did not ask for are not shown; the switch goes as the client sent it.
    assert "token_ids" not in json.loads(without)["choices"][0]
    assert seen[1]["reasoning"] == {"effort": "none"} and "chat_template_kwargs" not in seen[1]
    assert recorder.get("chatcmpl-1").completion_ids == COMPLETION_IDS

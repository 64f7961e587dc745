"""The OpenRouter simulator: ground-truth layouts, quirks, faults and wire shapes, on fixtures."""

from __future__ import annotations

import asyncio
import functools
import math

import aiohttp
import orjson
import pytest

from draftgen.profiles import detect_profile
from draftgen.simulator import FAULTS, QUIRKS, SimConfig, SimulatorThread, start_simulator
from draftgen.simulator.model import token_table
from draftgen.tokens.rendering import render_prompt
from draftgen.tokens.tokenizer import decode, encode, load_tokenizer

FIXTURES = ("kimi-k2.5", "kimi-k2-thinking", "qwen3", "deepseek-v3-thinking")
# (think_start, think_end, end_of_turn) ids and where the generation prompt leaves the model.
SPECIAL_IDS = {
    "kimi-k2.5": (163606, 163607, 163586),
    "kimi-k2-thinking": (163606, 163607, 163586),
    "qwen3": (151667, 151668, 151645),
    "deepseek-v3-thinking": (128821, 128822, 1),
}
LAYOUT = {
    "kimi-k2.5": "forced",
    "kimi-k2-thinking": "open",
    "qwen3": "open",
    "deepseek-v3-thinking": "forced",
}
MESSAGES = [
    {"role": "system", "content": "You answer briefly."},
    {"role": "user", "content": "What is the capital of France? Answer with café ☕ facts."},
]
AUTH = {"Authorization": "Bearer sk-test"}


def tok(name: str):
    return load_tokenizer(f"fixture:{name}")


@functools.cache
def profile_of(name: str):
    return detect_profile(tok(name).get_vocab())


def cfg(name: str, **kw) -> SimConfig:
    kw.setdefault("min_tokens", 30)
    kw.setdefault("max_tokens", 80)
    return SimConfig(tokenizer=f"fixture:{name}", **kw)


def run(config: SimConfig, scenario):
    async def main():
        server = await start_simulator(config)
        try:
            async with aiohttp.ClientSession() as session:
                return await scenario(server, session)
        finally:
            await server.close()

    return asyncio.run(main())


async def post(server, session, body=None, headers=AUTH, **extra):
    payload = {"model": "moonshotai/kimi-k2.5", "messages": MESSAGES, **(body or {})}
    async with session.post(
        server.base_url + "/chat/completions", json=payload, headers=headers, **extra
    ) as resp:
        return resp.status, resp.headers, await resp.read()


def sse_events(raw: bytes) -> list[bytes | dict]:
    """Comments as bytes, data events as dicts, b"[DONE]" as itself."""
    out: list = []
    for block in raw.split(b"\n\n"):
        if not block:
            continue
        assert block.count(b"\n") == 0, block
        if block.startswith(b":"):
            out.append(block)
        else:
            assert block.startswith(b"data: "), block
            data = block[6:]
            out.append(data if data == b"[DONE]" else orjson.loads(data))
    return out


def fold_stream(events: list) -> dict:
    reasoning: list[str] = []
    content: list[str] = []
    key = None
    for e in events:
        if not isinstance(e, dict):
            continue
        for choice in e["choices"]:
            delta = choice["delta"]
            for name in ("reasoning", "reasoning_content"):
                if isinstance(delta.get(name), str):
                    reasoning.append(delta[name])
                    key = name
            content.append(delta.get("content") or "")
    return {"reasoning": "".join(reasoning) if key else None, "content": "".join(content)}


def only_record(server) -> dict:
    assert len(server.truth) == 1
    return next(iter(server.truth.values()))


def reconstruct_candidates(name: str, layout: str, message: dict, finish: str) -> list[str]:
    """Texts a careful client could rebuild from one delivered message."""
    p = profile_of(name)
    reasoning = message.get("reasoning", message.get("reasoning_content"))
    content = message.get("content") or ""
    if content.endswith(p.end_of_turn):
        content = content[: -len(p.end_of_turn)]
    start = p.think_start if layout == "open" else ""
    r = reasoning or ""
    bodies = [content]
    if layout != "disabled":
        bodies.append(start + r + p.think_end + content)
        if not content:
            bodies.append(start + r)
    eot = p.end_of_turn if finish == "stop" else ""
    return [b + eot for b in bodies]


# -- layouts --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", FIXTURES)
def test_completion_layout_and_usage(name):
    t = tok(name)
    think_start, think_end, eot = SPECIAL_IDS[name]

    async def scenario(server, session):
        status, headers, raw = await post(server, session)
        return status, headers, orjson.loads(raw), only_record(server)

    status, headers, body, rec = run(cfg(name), scenario)
    assert status == 200
    assert headers["Content-Type"].startswith("application/json")
    prompt_text = render_prompt(t, MESSAGES, None)
    prompt_ids = encode(t, prompt_text)
    assert body["usage"]["prompt_tokens"] == len(prompt_ids)
    assert rec["prompt_ids"] == prompt_ids and rec["prompt_text"] == prompt_text
    assert body["id"].startswith("gen-") and headers["X-Generation-Id"] == body["id"]
    assert rec["generation_id"] == body["id"]
    assert body["provider"] in ("SiliconFlow", "Chutes", "AtlasCloud")
    assert body["model"] == "moonshotai/kimi-k2.5" and body["object"] == "chat.completion"

    ids = rec["completion_ids"]
    r, c = rec["reasoning"], rec["content"]
    assert ids.count(think_end) == 1 and ids[-1] == eot and ids.count(eot) == 1
    if LAYOUT[name] == "forced":
        assert prompt_text.endswith("<think>") and think_start not in ids
        assert decode(t, ids) == r + "</think>" + c + profile_of(name).end_of_turn
        assert ids == encode(t, r) + [think_end] + encode(t, c) + [eot]
    else:
        assert ids[0] == think_start
        assert decode(t, ids) == "<think>" + r + "</think>" + c + profile_of(name).end_of_turn
        assert ids == [think_start] + encode(t, r) + [think_end] + encode(t, c) + [eot]
    if name == "qwen3":
        assert r.startswith("\n") and r.endswith("\n") and c.startswith("\n\n")
        assert prompt_text.endswith("<|im_start|>assistant\n")
    assert r.strip() and c.strip()
    assert rec["text_exact"] is True and rec["quirks"] == [] and rec["finish_reason"] == "stop"

    choice = body["choices"][0]
    assert choice["finish_reason"] == "stop" and choice["native_finish_reason"] == "stop"
    msg = choice["message"]
    assert msg["role"] == "assistant" and msg["tool_calls"] is None
    assert msg["reasoning"] == r and msg["content"] == c
    usage = body["usage"]
    reasoning_ids = len(encode(t, r))
    assert usage["completion_tokens"] == len(ids)
    assert usage["total_tokens"] == len(ids) + len(prompt_ids)
    assert usage["completion_tokens_details"] == {"reasoning_tokens": reasoning_ids}
    assert usage["prompt_tokens_details"] == {"cached_tokens": 0}
    expected_cost = len(prompt_ids) * 0.0000006 + len(ids) * 0.0000025
    assert usage["cost"] == pytest.approx(expected_cost)
    assert usage["cost_details"]["upstream_inference_cost"] == pytest.approx(expected_cost)


@pytest.mark.parametrize("name", ["kimi-k2.5", "qwen3", "deepseek-v3-thinking"])
def test_thinking_disabled_renders_closed_block_and_answers_only(name):
    t = tok(name)
    _, think_end, eot = SPECIAL_IDS[name]

    async def scenario(server, session):
        status, _, raw = await post(server, session, {"reasoning": {"enabled": False}})
        return status, orjson.loads(raw), only_record(server)

    status, body, rec = run(cfg(name), scenario)
    assert status == 200
    assert rec["prompt_text"].rstrip().endswith("</think>")
    assert rec["layout"] == "disabled"
    ids = rec["completion_ids"]
    assert think_end not in ids and ids == encode(t, rec["content"]) + [eot]
    assert body["choices"][0]["message"]["reasoning"] is None
    assert body["usage"]["completion_tokens_details"]["reasoning_tokens"] == 0


def test_same_seed_is_deterministic_and_a_retry_differs():
    async def scenario(server, session):
        for _ in range(2):
            await post(server, session)
        return [r["completion_ids"] for r in server.truth.values()], list(server.truth.values())

    first, recs = run(cfg("kimi-k2.5", seed=7), scenario)
    again, _ = run(cfg("kimi-k2.5", seed=7), scenario)
    other, _ = run(cfg("kimi-k2.5", seed=8), scenario)
    assert first == again
    assert first[0] != first[1]  # the second attempt at the same prompt is a new sample
    assert [r["attempt"] for r in recs] == [0, 1]
    assert other != first


# -- streaming ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", FIXTURES)
def test_stream_deltas_concatenate_to_the_non_stream_texts(name):
    async def scenario(server, session):
        status, headers, raw = await post(server, session, {"stream": True})
        return status, headers, raw, only_record(server)

    async def plain(server, session):
        _, _, raw = await post(server, session)
        return orjson.loads(raw), only_record(server)

    status, headers, raw, rec = run(cfg(name), scenario)
    body, plain_rec = run(cfg(name), plain)  # a fresh server: the same first attempt
    assert status == 200 and headers["Content-Type"] == "text/event-stream"
    assert rec["completion_ids"] == plain_rec["completion_ids"] and rec["stream"] is True
    assert raw.startswith(b": OPENROUTER PROCESSING\n\n")
    events = sse_events(raw)
    assert events[-1] == b"[DONE]"
    data = [e for e in events if isinstance(e, dict)]
    usage_event = data[-1]
    assert usage_event["choices"] == [] and usage_event["usage"] == body["usage"]
    assert all("usage" not in e for e in data[:-1])
    finish = data[-2]["choices"][0]
    assert finish["finish_reason"] == "stop" and finish["native_finish_reason"] == "stop"
    assert all(e["choices"][0]["finish_reason"] is None for e in data[:-2])
    assert {e["id"] for e in data} == {rec["generation_id"]}
    assert headers["X-Generation-Id"] == rec["generation_id"]
    assert all(e["object"] == "chat.completion.chunk" for e in data)

    folded = fold_stream(events)
    msg = body["choices"][0]["message"]
    assert folded["reasoning"] == msg["reasoning"] == rec["reasoning"]
    assert folded["content"] == msg["content"] == rec["content"]
    # Reasoning deltas come first, then content; no delta carries a broken character.
    kinds = [
        "r" if e["choices"][0]["delta"].get("reasoning") else "c"
        for e in data[:-2]
        if e["choices"][0]["delta"].get("reasoning") or e["choices"][0]["delta"].get("content")
    ]
    assert kinds == sorted(kinds, reverse=True) and "r" in kinds and "c" in kinds
    for e in data[:-2]:
        delta = e["choices"][0]["delta"]
        assert "\ufffd" not in (delta.get("reasoning") or "") + (delta.get("content") or "")
    # One token per chunk: at most one delta per generated token.
    assert len(kinds) <= len(rec["completion_ids"])


def test_chunk_tokens_groups_tokens_per_delta():
    async def scenario(server, session):
        _, _, raw = await post(server, session, {"stream": True})
        return sse_events(raw), only_record(server)

    events, rec = run(cfg("qwen3", chunk_tokens=5, chunk_delay=0.001), scenario)
    t = tok("qwen3")
    deltas = [e["choices"][0]["delta"] for e in events if isinstance(e, dict) and e["choices"]]
    content_deltas = [d["content"] for d in deltas if d.get("content")]
    reasoning_deltas = [d["reasoning"] for d in deltas if d.get("reasoning")]
    assert "".join(content_deltas) == rec["content"]
    assert len(content_deltas) == math.ceil(len(encode(t, rec["content"])) / 5)
    assert len(reasoning_deltas) == math.ceil(len(encode(t, rec["reasoning"])) / 5)


def test_tokens_per_second_paces_a_stream_without_changing_it():
    """Paced, the same events come, each delta chunk_tokens / tokens_per_second after the one
    before (deadlines from the stream's start: load can delay them, never hasten them)."""

    async def scenario(server, session):
        started = asyncio.get_running_loop().time()
        _, _, raw = await post(server, session, {"stream": True})
        return asyncio.get_running_loop().time() - started, sse_events(raw)

    config = dict(min_tokens=40, max_tokens=40, chunk_tokens=4)
    took, paced = run(cfg("qwen3", tokens_per_second=200, **config), scenario)
    _, unpaced = run(cfg("qwen3", **config), scenario)
    # The same events but for the clock each carries ("created").
    same = [{**e, "created": 0} if isinstance(e, dict) else e for e in paced]
    assert same == [{**e, "created": 0} if isinstance(e, dict) else e for e in unpaced]
    data = [e for e in paced if isinstance(e, dict)]
    assert len(data) >= 10  # 40 tokens, 4 a delta, then the finish and usage events
    # Every data event after the first, and [DONE], is due 4 / 200 s after the one before.
    assert took / (len(data) * 4 / 200) >= 0.9


def test_negative_tokens_per_second_is_refused():
    with pytest.raises(ValueError, match="tokens_per_second must not be negative"):
        cfg("qwen3", tokens_per_second=-1).validate()


# -- truncation -----------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_max_tokens_truncates_the_same_completion(stream):
    name = "kimi-k2.5"
    t = tok(name)
    _, think_end, eot = SPECIAL_IDS[name]

    async def full(server, session):
        await post(server, session)
        return only_record(server)

    def truncated(limit):
        async def scenario(server, session):
            _, _, raw = await post(server, session, {"max_tokens": limit, "stream": stream})
            if stream:
                events = sse_events(raw)
                data = [e for e in events if isinstance(e, dict)]
                msg = fold_stream(events)
                finish = data[-2]["choices"][0]["finish_reason"]
                usage = data[-1]["usage"]
            else:
                body = orjson.loads(raw)
                msg = body["choices"][0]["message"]
                finish, usage = body["choices"][0]["finish_reason"], body["usage"]
            return msg, finish, usage, only_record(server)

        return run(cfg(name), scenario)

    whole = run(cfg(name), full)["completion_ids"]
    split = whole.index(think_end)

    # Cut inside the reasoning: no think_end, content "".
    msg, finish, usage, rec = truncated(split - 2)
    assert finish == "length" and rec["finish_reason"] == "length"
    assert rec["completion_ids"] == whole[: split - 2]
    assert usage["completion_tokens"] == split - 2
    assert msg["content"] == "" and rec["content"] == ""
    assert msg["reasoning"] == decode(t, whole[: split - 2]) == rec["reasoning"]

    # Cut inside the answer: no end-of-turn.
    limit = split + 3
    msg, finish, usage, rec = truncated(limit)
    assert finish == "length" and rec["completion_ids"] == whole[:limit]
    assert eot not in rec["completion_ids"]
    assert msg["reasoning"] == decode(t, whole[:split])
    assert msg["content"] == decode(t, whole[split + 1 : limit]) == rec["content"]
    assert usage["completion_tokens"] == limit


def test_truncation_right_after_the_model_opened_its_think_block():
    async def scenario(server, session):
        _, _, raw = await post(server, session, {"max_tokens": 1})
        return orjson.loads(raw), only_record(server)

    body, rec = run(cfg("kimi-k2-thinking"), scenario)
    assert rec["completion_ids"] == [163606]
    msg = body["choices"][0]["message"]
    assert msg["reasoning"] == "" and msg["content"] == ""
    assert body["usage"]["completion_tokens"] == 1


# -- quirks ---------------------------------------------------------------------------------------


def _quirk_case(name, quirk, stream=False):
    async def scenario(server, session):
        status, _, raw = await post(server, session, {"stream": stream})
        assert status == 200
        if stream:
            events = sse_events(raw)
            usage = [e for e in events if isinstance(e, dict)][-1]["usage"]
            return fold_stream(events), usage, only_record(server)
        body = orjson.loads(raw)
        return body["choices"][0]["message"], body["usage"], only_record(server)

    clean = run(cfg(name), scenario)
    quirky = run(cfg(name, quirks={quirk: 1.0}), scenario)
    return clean, quirky


@pytest.mark.parametrize("name", ["kimi-k2.5", "qwen3"])
@pytest.mark.parametrize("stream", [False, True])
def test_drift_adds_one_id_with_identical_text(name, stream):
    t = tok(name)
    table = token_table(f"fixture:{name}", profile_of(name))
    (clean_msg, clean_usage, clean), (msg, usage, rec) = _quirk_case(name, "drift", stream)
    a, b = clean["completion_ids"], rec["completion_ids"]
    assert len(b) == len(a) + 1 and usage["completion_tokens"] == len(a) + 1
    assert decode(t, b) == decode(t, a)
    assert encode(t, decode(t, b)) == a  # re-encoding gives the canonical ids back
    i = next(k for k in range(len(a)) if a[k] != b[k])
    assert b[:i] == a[:i] and b[i + 2 :] == a[i + 1 :]
    assert table.token_bytes[b[i]] + table.token_bytes[b[i + 1]] == table.token_bytes[a[i]]
    assert not table.special[b[i]] and not table.special[b[i + 1]]
    assert msg == clean_msg
    assert rec["quirks"] == ["drift"] and rec["text_exact"] is False


def test_strip_whitespace_really_strips():
    (_, _, clean), (msg, _, rec) = _quirk_case("kimi-k2.5", "strip_whitespace")
    assert rec["content"] != rec["content"].strip()
    assert msg["content"] == rec["content"].strip()
    assert msg["reasoning"] == rec["reasoning"]
    assert rec["quirks"] == ["strip_whitespace"] and rec["text_exact"] is False
    assert rec["reasoning"] == clean["reasoning"]  # only the answer's padding differs


@pytest.mark.parametrize("stream", [False, True])
def test_leak_eot_leaves_end_of_turn_in_content(stream):
    (_, _, clean), (msg, _, rec) = _quirk_case("qwen3", "leak_eot", stream)
    assert msg["content"] == rec["content"] + "<|im_end|>"
    assert rec["completion_ids"] == clean["completion_ids"]
    assert rec["quirks"] == ["leak_eot"] and rec["text_exact"] is True


@pytest.mark.parametrize("name", ["kimi-k2.5", "kimi-k2-thinking"])
@pytest.mark.parametrize("stream", [False, True])
def test_no_split_puts_everything_in_content(name, stream):
    (_, _, clean), (msg, _, rec) = _quirk_case(name, "no_split", stream)
    start = "<think>" if LAYOUT[name] == "open" else ""
    assert msg["content"] == start + rec["reasoning"] + "</think>" + rec["content"]
    assert msg.get("reasoning") is None and "reasoning_content" not in msg
    assert rec["completion_ids"] == clean["completion_ids"]
    assert rec["quirks"] == ["no_split"] and rec["text_exact"] is True


@pytest.mark.parametrize("name", ["kimi-k2.5", "kimi-k2-thinking", "qwen3"])
def test_empty_reasoning_closes_the_think_block_at_once(name):
    think_start, think_end, _ = SPECIAL_IDS[name]
    _, (msg, usage, rec) = _quirk_case(name, "empty_reasoning")
    ids = rec["completion_ids"]
    expected_head = [think_end] if LAYOUT[name] == "forced" else [think_start, think_end]
    assert ids[: len(expected_head)] == expected_head
    assert msg["reasoning"] in ("", None) and rec["reasoning"] == ""
    assert usage["completion_tokens_details"]["reasoning_tokens"] == 0
    assert rec["quirks"] == ["empty_reasoning"] and rec["text_exact"] is True


@pytest.mark.parametrize(
    ("name", "markup", "token_id"),
    [
        (
            "kimi-k2.5",
            "<|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>",
            163595,
        ),
        ("deepseek-v3-thinking", "<｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>", 128806),
        ("qwen3", '<tool_call>\n{"name": "get_weather"', 151657),
    ],
)
def test_tool_call_text_arrives_as_raw_markup(name, markup, token_id):
    _, (msg, _, rec) = _quirk_case(name, "tool_call_text")
    assert markup in msg["content"] and msg["tool_calls"] is None
    assert token_id in rec["completion_ids"]
    assert rec["quirks"] == ["tool_call_text"] and rec["text_exact"] is True


@pytest.mark.parametrize("stream", [False, True])
def test_reasoning_content_field_renames_the_field(stream):
    _, (msg, _, rec) = _quirk_case("deepseek-v3-thinking", "reasoning_content_field", stream)
    if stream:
        assert msg["reasoning"] == rec["reasoning"]  # folded under whichever name came
    else:
        assert msg["reasoning_content"] == rec["reasoning"] and "reasoning" not in msg
    assert rec["quirks"] == ["reasoning_content_field"] and rec["text_exact"] is True


def test_reasoning_content_field_in_stream_deltas():
    async def scenario(server, session):
        _, _, raw = await post(server, session, {"stream": True})
        return sse_events(raw)

    events = run(cfg("deepseek-v3-thinking", quirks={"reasoning_content_field": 1.0}), scenario)
    deltas = [e["choices"][0]["delta"] for e in events if isinstance(e, dict) and e["choices"]]
    assert any(d.get("reasoning_content") for d in deltas)
    assert not any("reasoning" in d for d in deltas)


def test_reasoning_exclude_hides_reasoning_but_bills_it():
    async def scenario(server, session):
        _, _, raw = await post(server, session, {"reasoning": {"exclude": True}})
        return orjson.loads(raw), only_record(server)

    body, rec = run(cfg("kimi-k2.5"), scenario)
    msg = body["choices"][0]["message"]
    assert "reasoning" not in msg and msg["content"] == rec["content"]
    assert body["usage"]["completion_tokens_details"]["reasoning_tokens"] > 0
    assert rec["quirks"] == ["reasoning_excluded"] and rec["text_exact"] is False


# -- faults ---------------------------------------------------------------------------------------

STATUS_FAULTS = {
    # fault: (status, error_type, has Retry-After)
    "rate_limit": (429, "rate_limit_exceeded", True),
    "rate_limit_no_header": (429, "rate_limit_exceeded", False),
    "overloaded": (503, "provider_overloaded", True),
    "bad_gateway": (502, "provider_unavailable", False),
    "server_error": (500, "server_error", False),
    "budget_in_flight": (402, "payment_required", True),
    "payment": (402, "payment_required", False),
    "auth": (401, "authentication", False),
}


@pytest.mark.parametrize("fault", sorted(STATUS_FAULTS))
def test_http_status_faults(fault):
    status, error_type, retry = STATUS_FAULTS[fault]

    async def scenario(server, session):
        results = [await post(server, session, {"stream": s}) for s in (False, True)]
        return results, dict(server.stats), dict(server.truth)

    results, stats, truth = run(cfg("qwen3", faults={fault: 1.0}, retry_after=1.5), scenario)
    for got_status, headers, raw in results:
        assert got_status == status
        body = orjson.loads(raw)
        assert body["error"]["code"] == status
        assert body["error"]["metadata"]["error_type"] == error_type
        assert isinstance(body["error"]["message"], str) and body["error"]["message"]
        assert headers.get("Retry-After") == ("1.5" if retry else None)
        if fault == "budget_in_flight":
            assert body["error"]["metadata"]["reason"] == "in_flight_budget_exhausted"
        else:
            assert "reason" not in body["error"]["metadata"]
    assert truth == {} and stats[fault] == 2 and stats["requests"] == 2
    assert "completions" not in stats


def test_retry_after_integer_format():
    async def scenario(server, session):
        return await post(server, session)

    _, headers, _ = run(cfg("qwen3", faults={"rate_limit": 1.0}, retry_after=2), scenario)
    assert headers["Retry-After"] == "2"


def test_missing_key_is_401():
    async def scenario(server, session):
        return [await post(server, session, headers=h) for h in ({}, {"Authorization": "Bearer "})]

    for status, _, raw in run(cfg("qwen3"), scenario):
        assert status == 401
        assert orjson.loads(raw) == {
            "error": {
                "code": 401,
                "message": "No auth credentials found",
                "metadata": {"error_type": "authentication"},
            }
        }


def test_fatal_faults_wait_for_fatal_after():
    async def scenario(server, session):
        return [(await post(server, session))[0] for _ in range(4)], len(server.truth)

    statuses, served = run(cfg("qwen3", faults={"payment": 1.0}, fatal_after=2), scenario)
    assert statuses == [200, 200, 402, 402] and served == 2


def test_error_200_body():
    async def scenario(server, session):
        return [await post(server, session, {"stream": s}) for s in (False, True)], server.truth

    (plain, streamed), truth = run(cfg("qwen3", faults={"error_200": 1.0}), scenario)
    assert plain[0] == 200
    assert orjson.loads(plain[2]) == {
        "error": {
            "code": 502,
            "message": "Provider returned error",
            "metadata": {"error_type": "provider_unavailable"},
        }
    }
    assert streamed[0] == 200
    events = [e for e in sse_events(streamed[2]) if isinstance(e, dict)]
    assert len(events) == 1 and events[0]["error"]["code"] == 502
    assert truth == {}


def test_finish_error_has_partial_content_and_no_usage():
    async def clean(server, session):
        await post(server, session)
        return only_record(server)

    async def scenario(server, session):
        status, _, raw = await post(server, session)
        return status, orjson.loads(raw), dict(server.truth)

    full = run(cfg("kimi-k2.5"), clean)
    status, body, truth = run(cfg("kimi-k2.5", faults={"finish_error": 1.0}), scenario)
    assert status == 200 and truth == {} and "usage" not in body
    choice = body["choices"][0]
    assert choice["finish_reason"] == "error"
    assert choice["error"]["code"] == 502
    assert choice["error"]["metadata"]["error_type"] == "provider_unavailable"
    partial = (choice["message"].get("reasoning") or "") + choice["message"]["content"]
    assert (full["reasoning"] + full["content"]).startswith(partial)


@pytest.mark.parametrize("stream", [False, True])
def test_empty_completion(stream):
    async def scenario(server, session):
        status, _, raw = await post(server, session, {"stream": stream})
        return status, raw, dict(server.truth)

    status, raw, truth = run(cfg("qwen3", faults={"empty": 1.0}), scenario)
    assert status == 200 and truth == {}
    if stream:
        events = sse_events(raw)
        assert events[-1] == b"[DONE]"
        data = [e for e in events if isinstance(e, dict)]
        assert fold_stream(events) == {"reasoning": None, "content": ""}
        assert all(c["finish_reason"] is None for e in data for c in e["choices"])
        usage = data[-1]["usage"]
    else:
        body = orjson.loads(raw)
        choice = body["choices"][0]
        assert choice["finish_reason"] is None and choice["native_finish_reason"] is None
        assert choice["message"]["content"] in ("", None)
        assert choice["message"]["reasoning"] is None
        usage = body["usage"]
    assert usage["completion_tokens"] == 0 and usage["cost"] == 0
    assert usage["prompt_tokens"] > 0


@pytest.mark.parametrize("stream", [False, True])
def test_drop_cuts_the_connection_and_is_not_billed(stream):
    async def scenario(server, session):
        payload = {"model": "m", "messages": MESSAGES, "stream": stream}
        async with session.post(
            server.base_url + "/chat/completions", json=payload, headers=AUTH
        ) as resp:
            assert resp.status == 200
            with pytest.raises(aiohttp.ClientPayloadError):
                await resp.read()
        return dict(server.truth), server.stats["drop"]

    truth, drops = run(cfg("qwen3", faults={"drop": 1.0}), scenario)
    assert truth == {} and drops == 1


def test_midstream_error_ends_the_stream_without_done():
    async def scenario(server, session):
        outs = []
        for _ in range(6):  # new attempts: some with deltas first, some with the error alone
            status, _, raw = await post(server, session, {"stream": True})
            outs.append((status, sse_events(raw)))
        return outs, dict(server.truth)

    outs, truth = run(cfg("kimi-k2.5", faults={"midstream_error": 1.0}), scenario)
    assert truth == {}
    lengths = set()
    for status, events in outs:
        assert status == 200 and b"[DONE]" not in events
        data = [e for e in events if isinstance(e, dict)]
        last = data[-1]
        assert last["error"]["code"] == 502
        assert last["error"]["metadata"]["error_type"] == "provider_unavailable"
        assert last["choices"][0]["finish_reason"] == "error"
        assert all("usage" not in e and "error" not in e for e in data[:-1])
        lengths.add(len(events) == 1)
    assert lengths == {True, False}


def test_midstream_error_without_stream_is_a_finish_error():
    async def scenario(server, session):
        _, _, raw = await post(server, session)
        return orjson.loads(raw)

    body = run(cfg("qwen3", faults={"midstream_error": 1.0}), scenario)
    assert body["choices"][0]["finish_reason"] == "error" and "error" in body["choices"][0]


@pytest.mark.parametrize("stream", [False, True])
def test_stall_is_caught_by_an_idle_timeout(stream):
    async def scenario(server, session):
        payload = {"model": "m", "messages": MESSAGES, "stream": stream}
        timeout = aiohttp.ClientTimeout(sock_read=0.3)
        async with session.post(
            server.base_url + "/chat/completions", json=payload, headers=AUTH, timeout=timeout
        ) as resp:
            assert resp.status == 200
            with pytest.raises((asyncio.TimeoutError, aiohttp.ServerTimeoutError)):
                await resp.read()
        return dict(server.truth)

    truth = run(cfg("qwen3", faults={"stall": 1.0}, stall_seconds=20), scenario)
    assert truth == {}


@pytest.mark.parametrize("stream", [False, True])
def test_malformed_json(stream):
    async def scenario(server, session):
        status, _, raw = await post(server, session, {"stream": stream})
        return status, raw, dict(server.truth)

    status, raw, truth = run(cfg("qwen3", faults={"malformed_json": 1.0}), scenario)
    assert status == 200 and truth == {}
    if not stream:
        with pytest.raises(orjson.JSONDecodeError):
            orjson.loads(raw)
        return
    blocks = [b for b in raw.split(b"\n\n") if b.startswith(b"data: ")]
    assert b"data: [DONE]" not in blocks
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(blocks[-1][6:])
    for block in blocks[:-1]:
        orjson.loads(block[6:])


def test_unknown_fault_or_quirk_is_refused():
    with pytest.raises(ValueError, match="unknown simulator fault 'nope'"):
        run(cfg("qwen3", faults={"nope": 0.1}), None)
    with pytest.raises(ValueError, match="unknown simulator quirk"):
        run(cfg("qwen3", quirks={"drift ": 0.1}), None)
    assert "drift" in QUIRKS and "stall" in FAULTS


# -- under load: text_exact means exactly what it says ---------------------------------------------


@pytest.mark.parametrize("name", ["kimi-k2.5", "qwen3"])
def test_concurrent_mixed_load_and_text_exact_is_truthful(name, tmp_path):
    t = tok(name)
    truth_path = tmp_path / "truth.jsonl"
    config = cfg(
        name,
        seed=3,
        min_tokens=5,
        max_tokens=120,
        chunk_tokens=2,
        truth_path=truth_path,
        faults={"rate_limit": 0.05, "drop": 0.05, "empty": 0.05, "midstream_error": 0.05},
        quirks={q: 0.15 for q in QUIRKS},
    )
    n = 300

    async def one(server, session, i):
        messages = [{"role": "user", "content": f"question {i}: {'héllo 🙂 ' * (i % 5)}"}]
        body = {"messages": messages, "stream": i % 2 == 0}
        if i % 7 == 0:
            body["max_tokens"] = 10 + i % 30
        try:
            status, headers, raw = await post(server, session, body)
        except aiohttp.ClientPayloadError:
            return None
        if status != 200:
            return None
        if body["stream"]:
            events = sse_events(raw)
            if b"[DONE]" not in events:
                return None
            data = [e for e in events if isinstance(e, dict)]
            if data[-1]["usage"]["completion_tokens"] == 0:
                return None
            folded = fold_stream(events)
            msg = {"content": folded["content"], "reasoning": folded["reasoning"]}
            return headers["X-Generation-Id"], msg, data[-2]["choices"][0]["finish_reason"]
        parsed = orjson.loads(raw)
        choice = parsed["choices"][0]
        if choice["finish_reason"] in (None, "error"):
            return None
        return parsed["id"], choice["message"], choice["finish_reason"]

    async def scenario(server, session):
        results = await asyncio.gather(*(one(server, session, i) for i in range(n)))
        return [r for r in results if r], dict(server.truth), dict(server.stats)

    results, truth, stats = run(config, scenario)
    assert len(results) == len(truth) == stats["completions"]
    assert 0.6 * n < len(results) < n
    exact = inexact = 0
    seen = "".join(r["reasoning"] or "" for r in truth.values()) + "".join(
        r["content"] for r in truth.values()
    )
    for gid, msg, finish in results:
        rec = truth[gid]
        assert rec["finish_reason"] == finish
        candidates = reconstruct_candidates(name, rec["layout"], msg, finish)
        matches = [c for c in candidates if encode(t, c) == rec["completion_ids"]]
        if rec["text_exact"]:
            exact += 1
            assert matches, (rec["quirks"], msg)
        else:
            inexact += 1
            assert not matches, (rec["quirks"], msg)
    assert exact > 50 and inexact > 20
    # The text pool reaches the awkward corners of byte-level BPE.
    for sample in ("中文", "🙂", "é", "    ", "\n\t", "```"):
        assert sample in seen
    lines = [orjson.loads(line) for line in truth_path.read_bytes().splitlines()]
    assert {r["generation_id"] for r in lines} == set(truth)
    assert all(stats[q] > 0 for q in QUIRKS)
    # Stripping is one provider's habit, not a coin every provider flips.
    stripped_by = {r["provider"] for r in truth.values() if "strip_whitespace" in r["quirks"]}
    assert stripped_by == {"Chutes"}


def test_providers_vary_and_follow_routing_preferences():
    async def scenario(server, session):
        free, ordered = set(), set()
        for i in range(30):
            messages = [{"role": "user", "content": f"q{i}"}]
            _, _, raw = await post(server, session, {"messages": messages})
            free.add(orjson.loads(raw)["provider"])
            body = {"messages": messages, "provider": {"order": ["atlascloud", "Chutes"]}}
            _, _, raw = await post(server, session, body)
            ordered.add(orjson.loads(raw)["provider"])
        only = {"messages": MESSAGES, "provider": {"only": ["Nobody"]}}
        status, _, raw = await post(server, session, only)
        return free, ordered, status, orjson.loads(raw)

    free, ordered, status, body = run(cfg("qwen3"), scenario)
    assert free == {"SiliconFlow", "Chutes", "AtlasCloud"} and ordered == {"AtlasCloud"}
    assert status == 404 and body["error"]["metadata"]["error_type"] == "no_endpoints"


# -- other endpoints and the thread helper --------------------------------------------------------


def test_models_listing_and_generation_lookup():
    async def scenario(server, session):
        _, _, raw = await post(server, session)
        gid = orjson.loads(raw)["id"]
        async with session.get(server.base_url + "/models") as resp:
            models = await resp.json()
        async with session.get(server.base_url + f"/generation?id={gid}", headers=AUTH) as resp:
            generation = await resp.json()
        async with session.get(server.base_url + "/generation?id=gen-x", headers=AUTH) as resp:
            missing = resp.status
        return models, generation, missing, only_record(server)

    models, generation, missing, rec = run(cfg("kimi-k2.5"), scenario)
    ids = {m["id"] for m in models["data"]}
    assert "moonshotai/kimi-k2.5" in ids
    pricing = models["data"][0]["pricing"]
    assert float(pricing["prompt"]) == 0.0000006 and float(pricing["completion"]) == 0.0000025
    assert generation["data"]["native_tokens_completion"] == len(rec["completion_ids"])
    assert missing == 404


def test_simulator_thread_serves_synchronous_callers():
    with SimulatorThread(cfg("qwen3")) as sim:
        assert sim.base_url.startswith("http://127.0.0.1:") and sim.base_url.endswith("/api/v1")

        async def call():
            async with aiohttp.ClientSession() as session:
                return await post(sim, session)

        status, _, raw = asyncio.run(call())
        assert status == 200
        assert orjson.loads(raw)["id"] in sim.truth
        assert sim.stats["completions"] == 1
    sim.stop()  # idempotent


# --- SGLang native /generate ----------------------------------------------------------------


async def post_generate(server, session, sampling=None, root=False, **body):
    prompt_ids = encode(server.tokenizer, render_prompt(server.tokenizer, MESSAGES, None))
    payload = {"input_ids": prompt_ids, **body}
    if sampling is not None:
        payload["sampling_params"] = sampling
    url = server.base_url + "/generate"
    if root:  # where SGLang serves it: the server's root, not the OpenAI prefix
        url = server.base_url.removesuffix("/api/v1") + "/generate"
    async with session.post(url, json=payload) as resp:
        return resp.status, await resp.read(), prompt_ids


@pytest.mark.parametrize("name", ["kimi-k2-thinking", "qwen3"])
def test_generate_keeps_the_stop_token_in_output_ids_and_trims_it_from_text(name):
    async def scenario(server, session):
        sampling = {"max_new_tokens": None, "skip_special_tokens": False}
        status, raw, prompt_ids = await post_generate(server, session, sampling, root=True)
        return status, orjson.loads(raw), prompt_ids, only_record(server)

    status, body, prompt_ids, record = run(cfg(name, dialect="sglang"), scenario)
    end_of_turn = SPECIAL_IDS[name][2]
    assert status == 200
    assert body["output_ids"] == record["completion_ids"] and body["output_ids"][-1] == end_of_turn
    assert body["text"] == decode(tok(name), body["output_ids"][:-1])
    meta = body["meta_info"]
    assert meta["finish_reason"] == {"type": "stop", "matched": end_of_turn}
    assert (meta["prompt_tokens"], meta["completion_tokens"]) == (
        len(prompt_ids),
        len(body["output_ids"]),
    )
    assert meta["id"] == record["generation_id"] and record["prompt_ids"] == prompt_ids
    assert record["layout"] == LAYOUT[name] and record["finish_reason"] == "stop"


def test_generate_defaults_to_128_new_tokens_and_skips_special_tokens_in_text():
    async def scenario(server, session):
        status, raw, _ = await post_generate(server, session)
        return status, orjson.loads(raw)

    status, body = run(
        cfg("kimi-k2-thinking", dialect="sglang", min_tokens=200, max_tokens=300), scenario
    )
    assert status == 200 and len(body["output_ids"]) == 128
    assert body["meta_info"]["finish_reason"] == {"type": "length", "length": 128}
    think_start = SPECIAL_IDS["kimi-k2-thinking"][0]
    assert body["output_ids"][0] == think_start and "<think>" not in body["text"]
    assert body["text"] == decode(tok("kimi-k2-thinking"), body["output_ids"][1:])


def test_generate_streams_cumulative_or_incremental_ids_ending_with_done():
    async def scenario(server, session):
        streams = []
        for i in range(12):
            messages = [{"role": "user", "content": f"Question {i}"}]
            ids = encode(server.tokenizer, render_prompt(server.tokenizer, messages, None))
            payload = {
                "input_ids": ids,
                "stream": True,
                "sampling_params": {"max_new_tokens": None, "skip_special_tokens": False},
            }
            async with session.post(server.base_url + "/generate", json=payload) as resp:
                assert resp.headers["Content-Type"].startswith("text/event-stream")
                streams.append(sse_events(await resp.read()))
        return streams, dict(server.truth)

    streams, truth = run(cfg("kimi-k2.5", dialect="sglang", chunk_tokens=3), scenario)
    modes = set()
    for events in streams:
        assert events[-1] == b"[DONE]"
        data = events[:-1]
        record = truth[data[0]["meta_info"]["id"]]
        ids = record["completion_ids"]
        assert [e["meta_info"]["finish_reason"] for e in data[:-1]] == [None] * (len(data) - 1)
        assert data[-1]["meta_info"]["finish_reason"]["type"] == "stop"
        assert [e["meta_info"]["completion_tokens"] for e in data] == [
            min(3 * (k + 1), len(ids)) for k in range(len(data))
        ]
        second = data[1]
        incremental = len(second["output_ids"]) < second["meta_info"]["completion_tokens"]
        if incremental:
            assert [i for e in data for i in e["output_ids"]] == ids
            assert "".join(e["text"] for e in data) == decode(tok("kimi-k2.5"), ids[:-1])
        else:
            assert all(e["output_ids"] == ids[: len(e["output_ids"])] for e in data)
            assert data[-1]["output_ids"] == ids
        modes.add(incremental)
    assert modes == {True, False}


@pytest.mark.parametrize(
    "body, message",
    [
        ({"input_ids": [-1]}, "input_ids must be token ids in 0.."),
        ({"input_ids": []}, "input_ids must be a non-empty array of token ids (or give text)"),
        (
            {"input_ids": [1], "sampling_params": {"max_new_tokens": 0}},
            "max_new_tokens must be a positive integer or null",
        ),
        (
            {"input_ids": [1], "sampling_params": {"skip_special_tokens": "no"}},
            "skip_special_tokens must be true or false",
        ),
        (
            {"input_ids": [1], "sampling_params": {"top_p": 0}},
            "top_p must be in (0, 1], got 0.",
        ),
    ],
)
def test_generate_rejects_bad_requests_as_sglang_does(body, message):
    async def scenario(server, session):
        async with session.post(server.base_url + "/generate", json=body) as resp:
            return resp.status, orjson.loads(await resp.read())

    status, answer = run(cfg("qwen3", dialect="sglang"), scenario)
    assert status == 400 and answer["error"]["message"].startswith(message)


def test_generate_is_sglang_only_and_its_faults_are_not_billed():
    async def not_found(server, session):
        status, raw, _ = await post_generate(server, session)
        return status, orjson.loads(raw)

    assert run(cfg("qwen3"), not_found) == (404, {"detail": "Not Found"})

    async def aborted(server, session):
        status, raw, _ = await post_generate(server, session, {"max_new_tokens": None})
        return status, orjson.loads(raw), dict(server.truth)

    config = cfg("qwen3", dialect="sglang", faults={"finish_error": 1.0})
    status, body, truth = run(config, aborted)
    assert status == 200 and truth == {}
    assert body["meta_info"]["finish_reason"]["type"] == "abort"
    assert body["meta_info"]["completion_tokens"] == len(body["output_ids"])

"""The simulator's providers behave as real ones do: a quirk bound to one provider (re-serialised
tool arguments, another template revision) shows on everything it serves and nowhere else, a slow
provider is slow, and the endpoints listing names them all."""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp
import orjson

from draftgen.simulator import SimConfig, start_simulator, wire
from draftgen.simulator.server import REVISION_SYSTEM_PROMPT
from draftgen.tokens.tokenizer import decode, load_tokenizer

AUTH = {"Authorization": "Bearer sk-test"}
# Properties out of alphabetical order, so sorting the keys shows.
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "forecast",
            "parameters": {
                "type": "object",
                "properties": {
                    "unit": {"type": "string"},
                    "city": {"type": "string"},
                    "date": {"type": "string"},
                },
            },
        },
    }
]
SCHEMA_ORDER = ["unit", "city", "date"]


def run(config: SimConfig, scenario):
    async def main():
        server = await start_simulator(config)
        try:
            async with aiohttp.ClientSession() as session:
                return await scenario(server, session)
        finally:
            await server.close()

    return asyncio.run(main())


async def chat(server, session, messages, **body) -> dict:
    payload = {"model": "moonshotai/kimi-k2.5", "messages": messages, **body}
    url = server.base_url + "/chat/completions"
    async with session.post(url, json=payload, headers=AUTH) as resp:
        assert resp.status == 200, await resp.text()
        return orjson.loads(await resp.read())


def question(i: int) -> list[dict]:
    return [{"role": "user", "content": f"Weather question {i}?"}]


def config(**kw) -> SimConfig:
    kw.setdefault("min_tokens", 20)
    kw.setdefault("max_tokens", 60)
    return SimConfig(tokenizer="fixture:kimi-k2.5", seed=11, **kw)


def test_only_the_reserialising_provider_rewrites_arguments_and_it_rewrites_every_call():
    async def scenario(server, session):
        for i in range(40):
            await chat(server, session, question(i), tools=TOOLS)
        for i in range(6):  # routed there by the request: it still rewrites
            only = {"only": [wire.RESERIALISING_PROVIDER]}
            await chat(server, session, question(100 + i), tools=TOOLS, provider=only)
        for i in range(6):  # kept away by the request: nobody rewrites
            ignore = {"ignore": [wire.RESERIALISING_PROVIDER]}
            await chat(server, session, question(200 + i), tools=TOOLS, provider=ignore)
        return list(server.truth.values())

    quirks = {"reserialize_arguments": 0.4}
    records = run(config(quirks=quirks, tool_call_rate=1.0), scenario)
    calls = [r for r in records if r["tool_calls"]]
    by_provider: dict[str, list] = {}
    for record in calls:
        by_provider.setdefault(record["provider"], []).append(record)
        arguments = record["tool_calls"][0]["function"]["arguments"]
        keys = list(json.loads(arguments))
        if record["provider"] == wire.RESERIALISING_PROVIDER:
            # Compact, keys sorted, as Go's encoding/json writes a map: never the model's text.
            assert arguments == wire.go_json(json.loads(arguments))
            assert keys == sorted(keys) != SCHEMA_ORDER
            assert "reserialize_arguments" in record["quirks"] and not record["text_exact"]
        else:
            assert keys == SCHEMA_ORDER and '", "' in arguments
            assert "reserialize_arguments" not in record["quirks"]
    assert len(by_provider.get(wire.RESERIALISING_PROVIDER, [])) >= 8
    assert len(by_provider) == len(wire.PROVIDERS)


def test_go_json_writes_as_a_go_gateway_does():
    value = {"b": "<x & y>", "a": "café", "c": [1, {"z": 1, "y": None}]}
    assert wire.go_json(value) == (
        '{"a":"café","b":"\\u003cx \\u0026 y\\u003e","c":[1,{"y":null,"z":1}]}'
    )
    assert json.loads(wire.go_json(value)) == value


def test_only_the_revision_provider_renders_another_template_revision():
    tokenizer = load_tokenizer("fixture:kimi-k2.5")

    async def scenario(server, session):
        for i in range(30):
            await chat(server, session, question(i))
        # The same prompt on the revision provider and on another: their counts differ.
        pinned = {}
        for name in (wire.REVISION_PROVIDER, "Chutes"):
            body = await chat(server, session, question(99), provider={"only": [name]})
            pinned[name] = body["usage"]["prompt_tokens"]
        # A request with its own system prompt renders alike in both revisions.
        system = [{"role": "system", "content": "Be brief."}, *question(7)]
        body = await chat(server, session, system, provider={"only": [wire.REVISION_PROVIDER]})
        return list(server.truth.values()), pinned, body["id"]

    records, pinned, own_system = run(config(quirks={"template_revision": 0.25}), scenario)
    assert pinned[wire.REVISION_PROVIDER] != pinned["Chutes"]
    revised = [r for r in records if "template_revision" in r["quirks"]]
    assert {r["provider"] for r in revised} == {wire.REVISION_PROVIDER}
    assert len(revised) >= 5
    for record in records:
        served_by_revision = record["provider"] == wire.REVISION_PROVIDER
        prompt = decode(tokenizer, record["prompt_ids"])
        if record["generation_id"] == own_system:
            assert served_by_revision and "template_revision" not in record["quirks"]
            assert REVISION_SYSTEM_PROMPT not in prompt and "Be brief." in prompt
            continue
        assert served_by_revision == ("template_revision" in record["quirks"])
        assert (REVISION_SYSTEM_PROMPT in prompt) == served_by_revision
        assert not (served_by_revision and record["text_exact"])
    assert {r["provider"] for r in records} == {*wire.PROVIDERS, wire.REVISION_PROVIDER}


def test_without_the_quirk_the_revision_provider_does_not_exist():
    async def scenario(server, session):
        url = server.base_url + "/models/moonshotai/kimi-k2.5/endpoints"
        async with session.get(url, headers=AUTH) as resp:
            listed = [e["provider_name"] for e in (await resp.json())["data"]["endpoints"]]
        payload = {"model": "m", "messages": question(1), "provider": {"only": ["Parasail"]}}
        async with session.post(
            server.base_url + "/chat/completions", json=payload, headers=AUTH
        ) as resp:
            return listed, resp.status

    listed, status = run(config(), scenario)
    assert listed == list(wire.PROVIDERS) and status == 404


def test_the_slow_provider_answers_later():
    slow = 0.2

    async def scenario(server, session):
        started = time.monotonic()
        body = await chat(server, session, question(1), provider={"only": [wire.SLOW_PROVIDER]})
        return body["provider"], time.monotonic() - started

    provider, elapsed = run(config(slow_provider=slow), scenario)
    assert provider == wire.SLOW_PROVIDER and elapsed >= slow


def test_the_endpoints_listing_has_one_entry_per_provider_in_openrouter_s_shape():
    async def scenario(server, session):
        url = server.base_url + "/models/moonshotai/kimi-k2.5/endpoints"
        async with session.get(url, headers=AUTH) as resp:
            listed = resp.status, await resp.json()
        async with session.get(url) as resp:
            return listed, resp.status

    settings = config(quirks={"template_revision": 0.25}, slow_provider=0.5, latency=0.0)
    (status, body), unauthorized = run(settings, scenario)
    assert status == 200 and unauthorized == 401
    data = body["data"]
    assert (data["id"], data["name"]) == ("moonshotai/kimi-k2.5", "moonshotai/kimi-k2.5")
    endpoints = data["endpoints"]
    names = [e["provider_name"] for e in endpoints]
    assert names == [*wire.PROVIDERS, wire.REVISION_PROVIDER]
    for entry in endpoints:
        provider = entry["provider_name"]
        assert entry["name"] == f"{provider} | moonshotai/kimi-k2.5"
        tag, quantization = wire.ENDPOINT_FACTS[provider]
        assert (entry["tag"], entry["quantization"]) == (tag, quantization)
        assert entry["pricing"]["prompt"] == "0.0000006"
        assert entry["pricing"]["completion"] == "0.0000025"
        assert entry["context_length"] == 262144 and entry["status"] == 0
        assert entry["uptime_last_30m"] == 100.0
        expected = 0.5 if provider == wire.SLOW_PROVIDER else 0.0
        assert entry["latency_last_30m"]["p50"] == expected
        assert ("logprobs" in entry["supported_parameters"]) == (provider in wire.LOGPROB_PROVIDERS)


def test_routing_preferences_name_a_provider_by_name_tag_or_slug():
    async def scenario(server, session):
        served = []
        for names in (["siliconflow/fp8"], ["CHUTES"], ["atlas-cloud"]):
            body = await chat(server, session, question(1), provider={"only": names})
            served.append(body["provider"])
        ignore = {"ignore": ["siliconflow", "chutes/int4"]}
        body = await chat(server, session, question(2), provider=ignore)
        return served, body["provider"]

    served, left = run(config(), scenario)
    assert served == ["SiliconFlow", "Chutes", "AtlasCloud"] and left == "AtlasCloud"

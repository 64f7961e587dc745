"""The simulator's hostile answers (``--hostile``), each against draftgen's client once."""

from __future__ import annotations

import asyncio
import re

import orjson
import pytest
from conftest import _simulator_config

from draftgen.generate.client import ChatClient, FatalApiError, GenerationFailed, RetryPolicy
from draftgen.simulator import SimConfig, SimulatorThread
from draftgen.simulator.config import SimConfigError
from draftgen.simulator.exchange import ChatRequest, RenderedPrompt
from draftgen.simulator.server import Simulator

TOKENIZER = "fixture:qwen3"


def test_the_flags_make_the_configuration():
    config, _, _ = _simulator_config(
        ["simulate", "--tokenizer", TOKENIZER, "--hostile", "oversized,bad-cost"]
        + ["--hostile", "redirect", "--hostile-share", "0.5", "--hostile-bytes", "1000"]
        + ["--trickle-rate", "2", "--keepalive-seconds", "0.5"]
    )
    assert config.hostile == ("oversized", "bad-cost", "redirect")
    assert (config.hostile_share, config.hostile_bytes) == (0.5, 1000)
    assert (config.trickle_rate, config.keepalive_seconds) == (2.0, 0.5)


@pytest.mark.parametrize(
    "settings, message",
    [
        (
            {"hostile": ("huge",)},
            "unknown hostile answer 'huge': use one of oversized, endless, keepalive, slowloris, "
            "bad-usage, bad-cost, redirect, held",
        ),
        ({"hostile_share": 1.5}, "hostile_share 1.5 is not within 0..1"),
        (
            {"trickle_rate": 0},
            "hostile_bytes, trickle_rate and keepalive_seconds must be above 0",
        ),
    ],
)
def test_settings_that_cannot_work_are_refused(settings, message):
    with pytest.raises(SimConfigError) as caught:
        SimConfig(tokenizer=TOKENIZER, **settings).validate()
    assert str(caught.value) == message


def test_the_share_is_drawn_per_prompt_and_attempt_and_repeats():
    def draws(seed: int) -> list[str | None]:
        simulator = Simulator(
            SimConfig(
                tokenizer=TOKENIZER, seed=seed, hostile=("endless", "redirect"), hostile_share=0.3
            )
        )
        prompts = [RenderedPrompt(f"p{i}", [], f"{i:064x}", "") for i in range(400)]
        return [
            simulator.hostile.choose(ChatRequest("m", prompt, False, None, False, {}, attempt, 1))
            for prompt in prompts
            for attempt in (0, 1)
        ]

    first = draws(0)
    assert first == draws(0) and first != draws(1)
    share = sum(d is not None for d in first) / len(first)
    assert 0.25 < share < 0.35
    assert {d for d in first if d} == {"endless", "redirect"}


async def _complete(base_url: str, stream: bool, number: int):
    async with ChatClient(
        base_url,
        "sk-test",
        concurrency=1,
        retry=RetryPolicy(1, base_delay=0.01),
        idle_timeout=0.3,
        attempt_timeout=0.6,
        max_response_bytes=1 << 20,
    ) as client:
        body = {"model": "a/b", "messages": [{"role": "user", "content": f"Hello {number}"}]}
        try:
            completion, _ = await client.complete(orjson.dumps({**body, "stream": stream}), stream)
        except GenerationFailed as exc:
            return exc.errors[0].kind, exc.errors[0].message
        except FatalApiError as exc:
            return "fatal", str(exc)
        return "stored", completion.cost


@pytest.mark.parametrize(
    "kind, expected",
    [
        ("oversized", ["response_too_large"] * 2),
        ("endless", ["response_too_large"] * 2),
        ("keepalive", ["timeout"] * 2),
        ("slowloris", ["timeout"] * 2),
        ("bad-usage", ["malformed_response"] * 2),
        ("bad-cost", ["malformed_response"] * 2),
        ("redirect", ["fatal"] * 2),
    ],
)
def test_each_hostile_answer_against_the_client(kind, expected):
    config = SimConfig(
        tokenizer=TOKENIZER,
        hostile=(kind,),
        hostile_share=1.0,
        hostile_bytes=64 << 20,
        keepalive_seconds=0.05,
        trickle_rate=40,
    )
    with SimulatorThread(config) as sim:
        outcomes = [asyncio.run(_complete(sim.base_url, stream, 1)) for stream in (False, True)]
        stats, truth = dict(sim.stats), list(sim.truth.values())
    assert [outcome[0] for outcome in outcomes] == expected, outcomes
    assert stats["hostile"] == stats[kind] == 2 and stats.get("redirect_followed", 0) == 0
    if kind in ("bad-usage", "bad-cost"):  # billed whole: in the truth, with what was wrong
        assert [t["hostile"] for t in truth] == [kind, kind]
        assert [t["hostile_detail"] for t in truth] == {
            "bad-usage": ["prompt_tokens=-5000", "completion_tokens=-1"],
            "bad-cost": ["cost negative", "cost string"],
        }[kind]
    else:  # nothing delivered whole: nothing billed
        assert truth == []
    if kind == "redirect":
        for _, message in outcomes:
            assert re.fullmatch(
                r"HTTP (30[1278]) redirected: the endpoint answered \1 with a redirect to "
                r"(http://198\.51\.100\.7|http://localhost:\d+/elsewhere)/api/v1/chat/"
                r"completions; draftgen does not follow redirects with a prompt body: use the "
                r"final URL as --base-url",
                message,
            ), message


def test_a_slow_loris_waited_for_is_a_good_completion_and_billed():
    config = SimConfig(tokenizer=TOKENIZER, hostile=("slowloris",), hostile_share=1.0)
    config.trickle_rate = 100_000  # the whole body in a few ticks

    async def patient():
        async with ChatClient(sim.base_url, "sk-test", concurrency=1) as client:
            body = {"model": "a/b", "messages": [{"role": "user", "content": "Hi"}]}
            return await client.complete(orjson.dumps(body), False)

    with SimulatorThread(config) as sim:
        completion, errors = asyncio.run(patient())
        truth = list(sim.truth.values())
    assert errors == [] and [t["hostile"] for t in truth] == ["slowloris"]
    assert completion.completion_tokens == truth[0]["completion_tokens"]

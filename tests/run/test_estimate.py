"""draftgen estimate: exact prompt tokens, output from max_tokens or a pilot, listed prices."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

import pytest

from draftgen.cli import main as cli
from draftgen.cli.present import format_estimate
from draftgen.run.estimate import EstimateError, EstimateOptions, estimate
from draftgen.simulator import SimConfig, SimulatorThread
from draftgen.tokens.rendering import render_prompt

TOKENIZER = "fixture:kimi-k2.5"
MODEL = "moonshotai/kimi-k2.5"  # the simulator lists this one with prices


def single_turn_prompts(path: Path, count: int) -> Path:
    rows = []
    for i in range(count):
        messages = [{"role": "user", "content": f"Explain item {i} — café {'x' * i}"}]
        if i % 3 == 0:
            messages.insert(0, {"role": "system", "content": "Be brief."})
        rows.append(json.dumps({"id": f"r{i}", "messages": messages}, ensure_ascii=False))
    rows.insert(2, "{broken")
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def options(tmp_path: Path, inputs: list[Path], **extra) -> EstimateOptions:
    return EstimateOptions(
        inputs=[str(p) for p in inputs],
        model=MODEL,
        tokenizer=TOKENIZER,
        api_key_env="DRAFTGEN_TEST_KEY",
        retry_base_delay=0.01,
        concurrency=4,
        **extra,
    )


@pytest.fixture
def sim():
    with SimulatorThread(SimConfig(tokenizer=TOKENIZER)) as running:
        yield running


def test_prompt_tokens_equal_what_the_server_counts(tmp_path, sim, monkeypatch):
    monkeypatch.setenv("DRAFTGEN_TEST_KEY", "k")
    inputs = [single_turn_prompts(tmp_path / "p.jsonl", 12)]
    result = asyncio.run(
        estimate(options(tmp_path, inputs, base_url=sim.base_url, max_tokens=500, samples=2))
    )
    assert (result.rows, result.rejected, result.turns, result.requests) == (13, 1, 12, 24)
    # The simulator renders and counts prompts independently: a real run bills exactly this.
    out = tmp_path / "run"
    argv = ["run", "--no-config", "--model", MODEL, "--tokenizer", TOKENIZER]
    argv += ["--input", str(inputs[0]), "--out", str(out), "--base-url", sim.base_url]
    argv += ["--api-key-env", "DRAFTGEN_TEST_KEY", "--retry-base-delay", "0.01"]
    argv += ["--completions-per-turn", "2"]
    assert cli.main(argv) == 0
    db = sqlite3.connect(out / "draftgen.sqlite")
    billed = db.execute("SELECT sum(prompt_tokens), count(*) FROM completions").fetchone()
    assert billed == (result.prompt_tokens, 24)
    assert result.output_source == "max_tokens"
    assert (result.output_low, result.output_high) == (0, 24 * 500)
    # Prices come from the simulator's listing (USD per token).
    config = SimConfig(tokenizer=TOKENIZER)
    assert result.price_source == "listing"
    assert (result.price_in, result.price_out) == (config.prompt_price, config.completion_price)
    prompt_cost = result.prompt_tokens * config.prompt_price
    assert result.cost_low == pytest.approx(prompt_cost)
    assert result.cost_high == pytest.approx(prompt_cost + 12000 * config.completion_price)
    assert result.seconds_high == pytest.approx(12000 / (30.0 * 4))


def test_pilot_measures_output_in_a_scratch_dir(tmp_path, sim, monkeypatch):
    monkeypatch.setenv("DRAFTGEN_TEST_KEY", "k")
    inputs = [single_turn_prompts(tmp_path / "p.jsonl", 9)]
    result = asyncio.run(estimate(options(tmp_path, inputs, base_url=sim.base_url, pilot=4)))
    served = list(sim.truth.values())
    # 4 rows of the input, the broken one among them: 3 completions, all the pilot measured.
    assert result.pilot["completions"] == len(served) == 3
    tokens = [t["completion_tokens"] for t in served]
    assert result.pilot["mean_completion_tokens"] == pytest.approx(sum(tokens) / 3)
    assert result.output_source == "pilot"
    assert result.output_low <= sum(tokens) / 3 * result.requests <= result.output_high
    assert result.tokens_per_second > 0 and result.seconds_high is not None
    assert list(tmp_path.iterdir()) == [tmp_path / "p.jsonl"]  # nothing left behind


def test_without_a_listing_the_flags_price_it(tmp_path):
    inputs = [single_turn_prompts(tmp_path / "p.jsonl", 3)]
    result = asyncio.run(
        estimate(
            options(
                tmp_path,
                inputs,
                base_url="http://127.0.0.1:9/api/v1",
                max_tokens=100,
                price_in=1.0,
                price_out=4.0,
            )
        )
    )
    assert result.price_source == "flags" and result.price_in == pytest.approx(1e-6)
    assert any(
        note.startswith("GET http://127.0.0.1:9/api/v1/models failed") for note in result.notes
    )
    assert result.cost_high == pytest.approx((result.prompt_tokens + 300 * 4) / 1e6)
    bare = asyncio.run(estimate(options(tmp_path, inputs)))
    assert bare.cost_low is None and bare.output_high is None
    assert "no prices: pass --price-in and --price-out (USD per million tokens)" in bare.notes


def test_multi_turn_rows_count_each_regenerated_turn(tmp_path):
    from draftgen.tokens import tokenizer as tok

    path = tmp_path / "m.jsonl"
    messages = [
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": "the row's own answer"},
        {"role": "user", "content": "q2"},
    ]
    path.write_text(json.dumps({"id": "m", "messages": messages}) + "\n")
    result = asyncio.run(estimate(options(tmp_path, [path])))
    tokenizer = tok.load_tokenizer(TOKENIZER)
    expected = sum(
        len(tok.encode(tokenizer, render_prompt(tokenizer, prefix, None)))
        for prefix in (messages[:1], messages)
    )
    assert (result.turns, result.prompt_tokens) == (2, expected)


def test_estimate_command_shares_runs_config_and_flags(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    single_turn_prompts(tmp_path / "p.jsonl", 5)
    (tmp_path / "draftgen.toml").write_text(
        f'model = "{MODEL}"\ntokenizer = "{TOKENIZER}"\nout = "run"\nmax_tokens = 10\n'
        '[[datasets]]\npath = "p.jsonl"\nname = "p"\n'
        "[estimate]\nprice_in = 2.0\nprice_out = 8.0\n"
    )
    assert cli.main(["estimate", "--json", "--completions-per-turn", "3"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert (printed["requests"], printed["output_high"], printed["price_source"]) == (
        15,
        150,
        "flags",
    )
    assert printed["cost_high"] == pytest.approx((printed["prompt_tokens"] * 2 + 150 * 8) / 1e6)
    assert cli.main(["estimate", "--reasoning-effort", "high", "--backend", "vllm"]) == 2
    assert "does not take them" in capsys.readouterr().err
    with pytest.raises(EstimateError, match="weight is a share"):
        from draftgen.inputs.mix import DatasetSpec

        asyncio.run(
            estimate(
                options(tmp_path, [], datasets=[DatasetSpec(str(tmp_path / "p.jsonl"), weight=2)])
            )
        )


def test_the_models_providers_are_listed_priced_and_judged_by_the_pilot(tmp_path, monkeypatch):
    monkeypatch.setenv("DRAFTGEN_TEST_KEY", "k")
    inputs = [single_turn_prompts(tmp_path / "p.jsonl", 24)]
    config = SimConfig(tokenizer=TOKENIZER, quirks={"template_revision": 0.25})
    with SimulatorThread(config) as running:
        result = asyncio.run(
            estimate(
                options(
                    tmp_path,
                    inputs,
                    base_url=running.base_url,
                    max_tokens=400,
                    pilot=24,
                    provider={"ignore": ["chutes"]},
                )
            )
        )
    rows = {p["provider"]: p for p in result.providers}
    assert sorted(rows) == ["AtlasCloud", "Chutes", "Parasail", "SiliconFlow"]
    assert [name for name, p in rows.items() if not p["routed"]] == ["Chutes"]
    atlas = rows["AtlasCloud"]
    # Every simulated provider lists the model's price: the run costs the same at each.
    assert (atlas["cost_low"], atlas["cost_high"]) == (result.cost_low, result.cost_high)
    assert atlas["route"] == "atlas-cloud/fp8" and atlas["quantization"] == "fp8"
    # The pilot's samples judge them: the provider of another template revision proves only
    # the prompts its revision renders alike (those with a system prompt of their own).
    parasail = rows["Parasail"]["pilot"]
    assert 0 <= parasail["verified"] < parasail["samples"]
    assert rows["Chutes"]["pilot"] is None  # it served nothing: the routing left it out
    text = format_estimate(result)
    assert "  providers          4 listed (draftgen providers MODEL --probe N)" in text
    assert next(line for line in text.splitlines() if "Chutes" in line).endswith(
        "(left out by [openrouter.provider])"
    )
    assert f"pilot: {parasail['verified']} of {parasail['samples']} verified" in text


def test_a_routing_that_allows_no_listed_provider_is_noted(tmp_path, sim, monkeypatch):
    monkeypatch.setenv("DRAFTGEN_TEST_KEY", "k")
    inputs = [single_turn_prompts(tmp_path / "p.jsonl", 4)]
    result = asyncio.run(
        estimate(
            options(
                tmp_path, inputs, base_url=sim.base_url, max_tokens=10, provider={"only": ["x"]}
            )
        )
    )
    assert not any(p["routed"] for p in result.providers)
    assert any("allows none of the listed providers" in note for note in result.notes)


def test_a_pilot_that_routing_stops_names_the_routing_and_no_scratch_directory(
    tmp_path, sim, monkeypatch
):
    monkeypatch.setenv("DRAFTGEN_TEST_KEY", "sk-estimate-test")  # "k" would be masked in "check"
    inputs = [single_turn_prompts(tmp_path / "p.jsonl", 4)]
    given = options(tmp_path, inputs, base_url=sim.base_url, pilot=3, provider={"only": ["x"]})
    with pytest.raises(EstimateError) as info:
        asyncio.run(estimate(given))
    # Before: "... check --base-url and --model; everything generated so far is stored in
    # /tmp/draftgen-estimate-... and the same command resumes", a directory already deleted.
    message = str(info.value)
    assert message.startswith("the pilot of 3 prompts stopped: HTTP 404 not_found: ")
    assert message.endswith(
        "check [openrouter.provider]: its only/ignore/order leave no provider of this model"
    )
    assert "draftgen-estimate-" not in message and "resumes" not in message


def test_the_time_is_at_least_one_request_s_generation(tmp_path):
    # Before: 3 requests of up to 2,048 tokens at 30 tokens/s and 64 in flight were "0 s .. 3 s"
    # (the tokens shared over 64 requests where there are 3).
    inputs = [single_turn_prompts(tmp_path / "p.jsonl", 3)]
    given = options(tmp_path, inputs, max_tokens=2048, tokens_per_second=30.0)
    given.concurrency = 64
    result = asyncio.run(estimate(given))
    assert result.requests == 3
    assert (result.seconds_low, result.seconds_high) == (0.0, pytest.approx(2048 / 30))
    assert "time               0 s .. 68 s at 64 in flight, 30.0 tokens/s each" in format_estimate(
        result
    )


def test_a_conversation_s_turns_are_timed_one_after_another(tmp_path):
    path = tmp_path / "m.jsonl"
    messages = [
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": "a1"},
        {"role": "user", "content": "q2"},
    ]
    path.write_text(json.dumps({"id": "m", "messages": messages}) + "\n")
    result = asyncio.run(estimate(options(tmp_path, [path], max_tokens=300)))
    # Two turns, 4 in flight: the second waits for the first's answer.
    assert result.requests == 2
    assert result.seconds_high == pytest.approx(2 * 300 / result.tokens_per_second)


def test_a_simulated_estimate_is_priced_as_a_simulated_run_is_charged(tmp_path):
    inputs = [single_turn_prompts(tmp_path / "p.jsonl", 3)]
    result = asyncio.run(estimate(options(tmp_path, inputs, simulate=True, max_tokens=100)))
    config = SimConfig(tokenizer=TOKENIZER)
    assert (result.price_in, result.price_out) == (config.prompt_price, config.completion_price)
    assert result.price_source == "the built-in simulator"
    assert result.cost_low == pytest.approx(result.prompt_tokens * config.prompt_price)
    assert result.cost_high == pytest.approx(
        result.prompt_tokens * config.prompt_price + 300 * config.completion_price
    )
    discount = config.batch_discount
    assert result.batch_price_in == pytest.approx(config.prompt_price * discount)
    assert result.batch_price_out == pytest.approx(config.completion_price * discount)
    assert not any("prices" in note for note in result.notes)


def test_a_pilot_without_an_endpoint_says_so_in_a_sentence(tmp_path):
    inputs = [single_turn_prompts(tmp_path / "p.jsonl", 3)]
    with pytest.raises(EstimateError) as info:
        asyncio.run(estimate(options(tmp_path, inputs, pilot=2)))
    # Before: "the pilot of 2 prompts no endpoint given: pass --base-url ...".
    assert str(info.value).startswith(
        "the pilot of 2 prompts could not run: no endpoint given: pass --base-url "
    )


def test_retries_add_the_slowest_requests_backoff():
    from draftgen.run.estimate import retry_seconds

    assert retry_seconds(200, 0.0, 0.5, 8) == (0.0, 0.0)
    # One retry a request: an attempt fails half the time; among 200 requests one needs about
    # log2(200) -> 8 retries, at most 7 (--max-attempts 8): 0.5 x (1 + 2 + ... + 64) = 63.5 s
    # of backoff at most, half of it on average, and 7 failed attempts of 2 s each.
    assert retry_seconds(200, 1.0, 0.5, 8, attempt_seconds=2.0) == (31.75, 63.5 + 14.0)
    # Few retries among few requests: the slowest needs one (0.5 s at most).
    assert retry_seconds(4, 0.1, 0.5, 8) == (0.25, 0.5)


def test_a_pilot_that_retried_counts_the_retries_in_the_time(tmp_path, monkeypatch):
    # Before: a pilot whose requests were retried timed the run as if none were, "1 s .. 2 s"
    # for a run that took 5.7 s.
    monkeypatch.setenv("DRAFTGEN_TEST_KEY", "k")
    inputs = [single_turn_prompts(tmp_path / "p.jsonl", 9)]
    config = SimConfig(tokenizer=TOKENIZER, faults={"server_error": 0.5}, seed=2)
    with SimulatorThread(config) as faulty:
        given = options(tmp_path, inputs, base_url=faulty.base_url, pilot=8, max_attempts=8)
        result = asyncio.run(estimate(given))
    retried = result.pilot["retried_attempts"]
    assert retried > 0 and result.retries_per_request == retried / 7  # 7 rows, 1 broken
    assert result.retry_seconds_high > result.retry_seconds_low > 0
    # The generation's own time, then the retries' on top.
    assert result.seconds_high - result.retry_seconds_high > 0
    line = next(x for x in format_estimate(result).splitlines() if x.startswith("  time"))
    assert f"retries and backoff included ({result.retries_per_request:.2f} retries a " in line


def test_without_a_pilot_the_time_says_it_leaves_retries_out(tmp_path):
    inputs = [single_turn_prompts(tmp_path / "p.jsonl", 3)]
    given = options(tmp_path, inputs, max_tokens=100)
    given.retry_base_delay = 0.5
    result = asyncio.run(estimate(given))
    assert (
        "the time leaves out retries and their backoff (up to 64 s for a request retried "
        "--max-attempts times): --pilot measures how often they happen"
    ) in result.notes

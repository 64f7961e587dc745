"""The probe before the first request: a dead endpoint, a refused key or a model the server lacks
stops a run in seconds with one sentence and exit 2; the simulator passes."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time

import pytest
from aiohttp import web
from conftest import draftgen, free_port, start_app, write_prompts

from draftgen.run.pipeline import RunError, RunOptions, run
from draftgen.run.probe import ProbeError, probe_endpoints
from draftgen.simulator import SimConfig, SimulatorThread

TOKENIZER = "fixture:kimi-k2.5"


def fake_server(routes: dict[str, tuple[int, dict]], seen: list, delay: float = 0.0):
    """An app answering GET ``path`` with (status, JSON body), else 404; requests go to ``seen``."""

    async def handle(request: web.Request) -> web.Response:
        seen.append((request.path, request.headers.get("Authorization", "")))
        if delay:
            await asyncio.sleep(delay)
        status, body = routes.get(request.path, (404, {"error": {"message": "Not Found"}}))
        return web.json_response(body, status=status)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    return app


def probe(routes, model, dialect, seen=None, delay=0.0, **kwargs):
    """``probe_endpoints`` against a fake server answering ``routes``."""

    async def go():
        runner, base = await start_app(fake_server(routes, [] if seen is None else seen, delay))
        try:
            return await probe_endpoints(base, "sk-test-key-123456", model, dialect, **kwargs)
        finally:
            await runner.cleanup()

    return asyncio.run(go())


def test_a_dead_endpoint_stops_the_run_in_seconds_with_exit_2(tmp_path):
    prompts = write_prompts(tmp_path / "p.jsonl", 300)
    dead = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    began = time.monotonic()
    result = draftgen(
        "run",
        "--no-config",
        "--input",
        str(prompts),
        "--model",
        "m",
        "--tokenizer",
        TOKENIZER,
        "--base-url",
        dead,
        "--api-key-env",
        "DRAFTGEN_TEST_KEY",
        "--out",
        str(tmp_path / "run"),
    )
    assert result.returncode == 2, result.stderr
    assert time.monotonic() - began < 20  # the run retried for 54 s
    assert result.stderr.splitlines() == [
        f"draftgen: cannot connect to {dead} (Connect call failed ('127.0.0.1', "
        f"{dead.split(':')[2].split('/')[0]})); check --base-url and that the server is up and "
        "reachable from here"
    ]
    # Nothing was sent, and the directory the run made for nothing is gone (issue #27).
    assert not (tmp_path / "run").exists()


def test_a_refused_key_is_one_sentence_naming_the_variable():
    routes = {"/v1/key": (401, {"error": {"code": 401, "message": "User not found."}})}
    with pytest.raises(ProbeError) as refused:
        probe(routes, "moonshotai/kimi-k2.5", "openrouter", key_variable="MY_KEY")
    assert str(refused.value).endswith(
        "refused the API key from $MY_KEY (HTTP 401: User not found.); check that the key is "
        "valid for this server"
    )
    assert "sk-test-key" not in str(refused.value)


def test_a_model_openrouter_does_not_have_is_named():
    routes = {
        "/v1/key": (200, {"data": {"label": "k", "usage": 0}}),
        "/v1/models/moonshotai/kimi-k2.5/endpoints": (200, {"data": {"endpoints": []}}),
    }
    seen = []
    results = probe(routes, "moonshotai/kimi-k2.5:nitro", "openrouter", seen)
    assert [(r.server, r.checked) for r in results] == [
        ("openrouter", "key accepted, model listed")
    ]
    assert [path for path, _ in seen] == [
        "/v1/key",
        "/v1/models/moonshotai/kimi-k2.5/endpoints",  # the variant suffix is not a model
    ]
    assert all(auth == "Bearer sk-test-key-123456" for _, auth in seen)
    with pytest.raises(ProbeError, match=r"has no model 'moonshotai/kimi-k2\.6' \(GET /models/"):
        probe(routes, "moonshotai/kimi-k2.6", "openrouter")


def test_an_openai_compatible_api_that_is_not_openrouter_is_checked_by_its_listing():
    with pytest.raises(ProbeError, match=r"refused the API key .*HTTP 401: invalid api key"):
        probe({"/v1/models": (401, {"error": "invalid api key"})}, "m", "openrouter")
    results = probe({"/v1/models": (200, {"data": [{"id": "m"}]})}, "m", "openrouter")
    assert results[0].server == "openai-compatible"


def test_vllm_must_serve_the_model_by_that_name():
    listing = {"object": "list", "data": [{"id": "kimi", "object": "model", "owned_by": "vllm"}]}
    routes = {"/v1/models": (200, listing)}
    with pytest.raises(ProbeError) as wrong:
        probe(routes, "moonshotai/Kimi-K2.5", "vllm")
    assert "serves 'kimi', not 'moonshotai/Kimi-K2.5'" in str(wrong.value)
    assert "pass --model kimi" in str(wrong.value)
    assert probe(routes, "kimi", "vllm")[0].checked.endswith("model listed")
    # SGLang serves its model under any name: reachability and the key are what count.
    sglang = {"data": [{"id": "kimi", "owned_by": "sglang"}]}
    assert probe({"/v1/models": (200, sglang)}, "x", "sglang")[0].server == "sglang"


def test_a_silent_endpoint_times_out_quickly():
    async def go():
        runner, base = await start_app(fake_server({}, [], delay=2.5))
        began = time.monotonic()
        try:
            with pytest.raises(ProbeError, match=r"did not answer within 0\.3 s"):
                await probe_endpoints(base, None, "m", "vllm", timeout=0.3)
            return time.monotonic() - began
        finally:
            await runner.shutdown()
            await runner.cleanup()

    assert asyncio.run(go()) < 2


def test_every_bad_endpoint_of_a_fleet_is_named_and_nothing_is_sent(tmp_path, monkeypatch):
    monkeypatch.setenv("DRAFTGEN_TEST_KEY", "sk-test")
    dead = f"http://127.0.0.1:{free_port()}/api/v1"
    with SimulatorThread(SimConfig(tokenizer=TOKENIZER)) as sim:
        options = RunOptions(
            inputs=[str(write_prompts(tmp_path / "p.jsonl", 5))],
            model="m",
            tokenizer=TOKENIZER,
            out=tmp_path / "run",
            base_url=[sim.base_url, dead],
            api_key_env="DRAFTGEN_TEST_KEY",
            progress_interval=3600,
        )
        with pytest.raises(RunError, match=rf"^1 of 2 endpoints cannot be used.*{dead}"):
            asyncio.run(run(options))
        assert sim.stats["requests"] == 0


@pytest.mark.parametrize("dialect", ["openrouter", "vllm", "sglang"])
def test_the_simulator_answers_what_the_probe_asks(dialect):
    with SimulatorThread(SimConfig(tokenizer=TOKENIZER, dialect=dialect)) as sim:
        results = asyncio.run(probe_endpoints(sim.base_url, "k", "any/model-name", dialect))
        assert sim.stats["requests"] == 0  # chat requests: none
    expected = "key accepted, model listed" if dialect == "openrouter" else "reachable"
    assert results[0].checked.startswith(expected)


def test_a_run_records_where_its_data_came_from(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_prompts(tmp_path / "p.jsonl", 4, invalid=False)
    argv = ["run", "--no-config", "--input", "p.jsonl", "--model", "m", "--tokenizer", TOKENIZER]
    result = draftgen(*argv, "--out", "run")
    assert result.returncode == 0, result.stderr
    assert "sending to the built-in simulator on loopback: the data is synthetic" in result.stderr
    db = sqlite3.connect(tmp_path / "run" / "draftgen.sqlite")
    sources = db.execute("SELECT value FROM meta WHERE name = 'sources'").fetchone()[0]
    assert json.loads(sources) == [{"endpoint": "built-in simulator", "server": "simulator"}]


def test_a_merge_keeps_every_source_of_its_shards(tmp_path, monkeypatch):
    from draftgen.cli import main as cli
    from draftgen.store.database import Store
    from draftgen.store.merge import merge_runs

    monkeypatch.chdir(tmp_path)
    write_prompts(tmp_path / "p.jsonl", 6, invalid=False)
    argv = ["run", "--no-config", "--input", "p.jsonl", "--model", "m", "--tokenizer", TOKENIZER]
    argv.append("--simulate")
    for index in (0, 1):
        assert cli.main([*argv, "--out", f"s{index}", "--shard", f"{index}/2"]) == 0
    other = [{"endpoint": "http://gpu1:30000/v1", "server": "vllm"}]
    with Store(tmp_path / "s1", create=False) as store:
        store.settings.set_meta("sources", json.dumps(other))
    merge_runs([tmp_path / "s0", tmp_path / "s1"], tmp_path / "merged")
    with Store(tmp_path / "merged", create=False) as store:
        assert json.loads(store.settings.meta("sources")) == [
            {"endpoint": "built-in simulator", "server": "simulator"},
            *other,
        ]

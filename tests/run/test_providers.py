"""draftgen providers: the endpoint listing parsed as untrusted input, and probes that rank the
simulator's providers (the whitespace-stripping one never first)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from listing_server import ListingServer

from draftgen.api import probe_providers, providers
from draftgen.backends.listing import ListingError, model_endpoints, parse_endpoint
from draftgen.options import RunOptions
from draftgen.run.providers import ProviderFigures, ProvidersError, rank
from draftgen.simulator import wire

TOKENIZER = "fixture:kimi-k2.5"
MODEL = "moonshotai/kimi-k2.5"

# The shape of OpenRouter's GET /models/{author}/{slug}/endpoints, as its documentation gives it.
RECORDED = {
    "data": {
        "id": MODEL,
        "name": "MoonshotAI: Kimi K2.5",
        "endpoints": [
            {
                "name": "DeepInfra | moonshotai/kimi-k2.5",
                "model_name": "MoonshotAI: Kimi K2.5",
                "context_length": 262144,
                "pricing": {"prompt": "0.00000045", "completion": "0.0000025", "request": "0"},
                "provider_name": "DeepInfra",
                "tag": "deepinfra/fp4",
                "quantization": "fp4",
                "max_completion_tokens": 16384,
                "max_prompt_tokens": None,
                "supported_parameters": ["tools", "reasoning"],
                "status": 0,
                "uptime_last_30m": 99.5,
            },
            {
                "name": "Moonshot AI | moonshotai/kimi-k2.5",
                "context_length": 262144,
                "pricing": {"prompt": "0.0000006", "completion": "0.000003"},
                "provider_name": "Moonshot AI",
                "tag": "moonshotai",
                "quantization": "int4",
                "status": -2,
            },
        ],
    }
}


@pytest.fixture
def listing():
    """A loopback listing server: (its base URL, its routes)."""
    with ListingServer() as server:
        yield server.base_url, server.routes


PATH = "/api/v1/models/moonshotai/kimi-k2.5/endpoints"


def test_a_recorded_listing_is_parsed(listing):
    base, routes = listing
    routes[PATH] = (200, "application/json", json.dumps(RECORDED).encode())
    first, second = asyncio.run(model_endpoints(base, MODEL, None))
    assert first.provider == "DeepInfra" and first.tag == "deepinfra/fp4"
    assert (first.prompt_price, first.completion_price) == (0.00000045, 0.0000025)
    assert (first.quantization, first.context_length, first.max_completion_tokens) == (
        "fp4",
        262144,
        16384,
    )
    assert (first.status, first.uptime, first.route) == (0, 99.5, "deepinfra/fp4")
    assert first.parameters == ("tools", "reasoning")  # supported_parameters, as listed
    assert (second.status, second.max_completion_tokens, second.route) == (-2, None, "moonshotai")


def test_missing_fields_are_none():
    endpoint = parse_endpoint({})
    assert endpoint.as_dict() == {
        "name": None,
        "provider": None,
        "tag": None,
        "prompt_price": None,
        "completion_price": None,
        "quantization": None,
        "context_length": None,
        "max_completion_tokens": None,
        "status": None,
        "uptime": None,
        "parameters": (),
        "route": None,
    }


@pytest.mark.parametrize(
    "value", ["abc", "-1", "nan", "inf", "1e400", True, None, [], {"x": 1}, 2.5, -0.001]
)
def test_bad_prices_are_none(value):
    endpoint = parse_endpoint({"pricing": {"prompt": value, "completion": value}})
    assert (endpoint.prompt_price, endpoint.completion_price) == (None, None)


@pytest.mark.parametrize("value", ["262144", 1.5, -1, True, float("nan"), 1e300])
def test_bad_counts_are_none(value):
    endpoint = parse_endpoint({"context_length": value, "max_completion_tokens": value})
    assert (endpoint.context_length, endpoint.max_completion_tokens) == (None, None)


def test_hostile_strings_are_kept_but_never_routed():
    endpoint = parse_endpoint(
        {"provider_name": "Evil\x1b[2J\x1b[31mCorp", "tag": "a" * 5000, "quantization": 8}
    )
    assert endpoint.provider == "Evil\x1b[2J\x1b[31mCorp"
    assert len(endpoint.tag) == 200  # a name, not a document
    assert endpoint.quantization is None
    assert endpoint.route is None  # neither is a provider slug: shown, not probed


def test_the_listing_errors_are_one_sentence(listing):
    base, routes = listing
    routes["/api/v1/models/a/b/endpoints"] = (200, "text/html", b"<html>login</html>")
    routes["/api/v1/models/a/moved/endpoints"] = (302, "text/plain", b"")
    routes["/api/v1/models/a/empty/endpoints"] = (200, "application/json", b'{"data": []}')
    with pytest.raises(ListingError, match=r"did not return a model's endpoint listing"):
        asyncio.run(model_endpoints(base, "a/b", None))
    with pytest.raises(ListingError, match=r"HTTP 302, a redirect that draftgen does not follow"):
        asyncio.run(model_endpoints(base, "a/moved", None))
    with pytest.raises(ListingError, match=r"did not return"):
        asyncio.run(model_endpoints(base, "a/empty", None))
    with pytest.raises(ListingError, match=r"there is no model 'a/none' at .* answered 404"):
        asyncio.run(model_endpoints(base, "a/none", None))
    with pytest.raises(ListingError, match=r"not a model id of the form author/slug"):
        asyncio.run(model_endpoints(base, "kimi", None))


def test_the_simulator_lists_its_providers():
    listed = providers(MODEL, simulate=True, tokenizer=TOKENIZER)
    assert [e.provider for e in listed] == list(wire.PROVIDERS)
    assert all(e.prompt_price == 0.0000006 and e.context_length for e in listed)


def figures(route: str, samples: int, verified: int, cost: float, **extra) -> ProviderFigures:
    return ProviderFigures(route, route, samples, verified, cost=cost, **extra)


def test_providers_rank_by_dollars_per_verified_sample():
    ranked = rank(
        [
            figures("cheap-but-bad", 10, 8, 0.01),  # 80% verified: excluded however cheap
            figures("dear", 10, 10, 0.05),
            figures("cheap", 10, 9, 0.02),
            figures("broken", 0, 0, 0.0, error="the key was refused"),
        ]
    )
    assert [(f.route, f.verdict) for f in ranked] == [
        ("cheap", "recommended"),
        ("dear", "recommended"),
        ("cheap-but-bad", "excluded"),
        ("broken", "excluded"),
    ]


def test_no_routing_when_every_provider_fails(tmp_path):
    from draftgen.run.providers import ProbeReport

    report = ProbeReport(MODEL, 1, rank([figures("a", 4, 1, 0.01), figures("b", 4, 0, 0.01)]))
    assert report.routing() is None and report.toml_block() is None
    assert report.as_dict()["toml"] is None


def test_the_probe_ranks_the_stripping_provider_last(tmp_path):
    options = RunOptions([], model=MODEL, tokenizer=TOKENIZER, simulate=True, concurrency=4)
    report = probe_providers(options, 2, tmp_path / "probes")
    ranked = [f.provider for f in report.providers]
    assert sorted(ranked) == sorted(wire.PROVIDERS)
    # Each is routed by its endpoint's tag, as OpenRouter's listing gives it.
    assert all(f.route == wire.ENDPOINT_FACTS[f.provider][0] for f in report.providers)
    stripping = next(f for f in report.providers if f.provider == wire.STRIPPING_PROVIDER)
    assert ranked[-1] == wire.STRIPPING_PROVIDER and stripping.verdict == "excluded"
    assert "provider_strips_whitespace" in stripping.caught
    # Six probe turns, twice each, every one served by the provider named.
    assert all(f.samples == 12 and f.cost > 0 for f in report.providers)
    assert stripping.route in report.ignore and report.order
    assert report.order == [f.route for f in report.providers if f.verdict == "recommended"]
    assert report.toml_block() == (
        "[openrouter.provider]\n"
        f"order = {json.dumps(report.order)}\n"
        f"ignore = {json.dumps(report.ignore)}"
    )
    for f in report.providers:
        assert Path(f.run_dir).is_dir() and Path(f.run_dir).parent == tmp_path / "probes"


def test_probe_needs_a_tokenizer():
    options = RunOptions([], model=MODEL, tokenizer=None, simulate=True)
    with pytest.raises(ProvidersError, match="--probe needs --tokenizer"):
        probe_providers(options, 1)

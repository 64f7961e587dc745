"""``draftgen providers``: a model's providers as OpenRouter lists them, and, probed, how each one
serves draftgen: a real run per provider (``provider.only``), judged from its store.

A probe is a normal run into a directory of its own, routed with ``{"only": [provider],
"allow_fallbacks": false}``: every sample it stores was served by that provider, so the run's own
verdicts (prompt parity, whitespace, tool calls) are the provider's. Providers are then ranked by
dollars per verified sample, and the ``[openrouter.provider]`` block that routes accordingly is
proposed.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import statistics
import tempfile
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from draftgen.backends.listing import ProviderEndpoint, model_endpoints
from draftgen.errors import DraftgenError
from draftgen.options import OPENROUTER_URL, RunOptions
from draftgen.run.pipeline import check_base_url, run
from draftgen.store.database import Store

_log = logging.getLogger("draftgen.providers")

GOOD_SHARE = 0.9  # a provider verifying fewer of its samples than this is not recommended
DEFAULT_PROBE_ROWS = 8  # rows of --input a probe takes when --limit does not say
PROBE_FILE = "probe-prompts.jsonl"
# Sample reasons that show what a provider does to prompts or answers, as opposed to what the
# model did (a non-canonical segmentation, a cut at max_tokens): reported per provider.
PROVIDER_REASONS = {
    "prompt": ("prompt_count_mismatch",),
    "whitespace": ("whitespace_altered", "provider_strips_whitespace"),
    "tool_calls": ("tool_arguments_reserialised", "structured_tool_calls", "tool_calls_inexact"),
}

_WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}
# The built-in probe set: plain chat, a system prompt, a multi-turn conversation, a tool call and
# a turn after a tool's result. Six turns, each answered N times by every provider.
PROBE_ROWS: tuple[dict, ...] = (
    {
        "id": "probe-chat",
        "messages": [
            {"role": "user", "content": "Explain how a hash map works in a few sentences."}
        ],
    },
    {
        "id": "probe-system",
        "messages": [
            {"role": "system", "content": "Answer in one short paragraph."},
            {"role": "user", "content": "Why is the sky blue?"},
        ],
    },
    {
        "id": "probe-multi-turn",
        "messages": [
            {"role": "user", "content": "Give me a name for a grey cat."},
            {"role": "assistant", "content": "How about Ash?"},
            {"role": "user", "content": "Another one, with two syllables."},
        ],
    },
    {
        "id": "probe-tool-call",
        "tools": [_WEATHER],
        "messages": [{"role": "user", "content": "What is the weather in Lisbon right now?"}],
    },
    {
        "id": "probe-tool-result",
        "tools": [_WEATHER],
        "messages": [
            {"role": "user", "content": "Is it warm in Oslo today?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": "call_0",
                        "type": "function",
                        "function": {
                            "name": "get_weather",
                            "arguments": '{"city": "Oslo", "unit": "celsius"}',
                        },
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_0", "content": '{"temperature": 14}'},
        ],
    },
)


class ProvidersError(DraftgenError, ValueError):
    """The providers cannot be listed or probed as asked; the message says what to pass."""


@dataclass
class ProviderFigures:
    """How one provider served its probe: counts from its run's store, and the verdict."""

    route: str  # what provider.only named it by
    provider: str | None  # the listed name
    samples: int = 0
    verified: int = 0
    reasons: dict[str, int] = field(default_factory=dict)  # unverified samples by reason
    failures: int = 0  # requests that finally failed
    cost: float = 0.0
    latency_p50: float | None = None  # seconds
    run_dir: str | None = None  # kept only with --out
    error: str | None = None  # the run could not be made (its sentence)
    verdict: str = "excluded"  # recommended (verified share >= GOOD_SHARE) | excluded
    # What the probe run's calibration asked it and proved: question -> its verdict.
    calibration: dict[str, str] = field(default_factory=dict)

    @property
    def verified_share(self) -> float | None:
        return self.verified / self.samples if self.samples else None

    @property
    def dollars_per_verified(self) -> float | None:
        return self.cost / self.verified if self.verified else None

    def share_of(self, kind: str) -> float | None:
        """Share of the samples failing for ``kind`` (a key of PROVIDER_REASONS)."""
        if not self.samples:
            return None
        return sum(self.reasons.get(r, 0) for r in PROVIDER_REASONS[kind]) / self.samples

    @property
    def caught(self) -> list[str]:
        """The provider behaviours its samples showed, by reason."""
        return [r for reasons in PROVIDER_REASONS.values() for r in reasons if self.reasons.get(r)]

    def as_dict(self) -> dict:
        return {
            **asdict(self),
            "verified_share": self.verified_share,
            "dollars_per_verified": self.dollars_per_verified,
            "prompt_mismatch_share": self.share_of("prompt"),
            "whitespace_share": self.share_of("whitespace"),
            "tool_call_share": self.share_of("tool_calls"),
            "caught": self.caught,
        }


@dataclass
class ProbeReport:
    """Every probed provider, best first, and the routing that follows from them."""

    model: str
    probes: int
    providers: list[ProviderFigures]

    @property
    def order(self) -> list[str]:
        return [f.route for f in self.providers if f.verdict == "recommended"]

    @property
    def ignore(self) -> list[str]:
        return [f.route for f in self.providers if f.verdict == "excluded"]

    def routing(self) -> dict | None:
        """The ``[openrouter.provider]`` table to use; None when no provider passed (ignoring
        every provider would leave the model no route)."""
        if not self.order:
            return None
        return {"order": self.order, **({"ignore": self.ignore} if self.ignore else {})}

    def toml_block(self) -> str | None:
        routing = self.routing()
        if routing is None:
            return None
        # JSON strings are valid TOML basic strings (routes are plain slugs, see listing.ROUTE).
        lines = [
            f"{key} = [{', '.join(json.dumps(r) for r in value)}]" for key, value in routing.items()
        ]
        return "\n".join(["[openrouter.provider]", *lines])

    def as_dict(self) -> dict:
        return {
            "model": self.model,
            "probes": self.probes,
            "providers": [f.as_dict() for f in self.providers],
            "routing": self.routing(),
            "toml": self.toml_block(),
        }


# -- listing -------------------------------------------------------------------------------------


async def list_providers(
    model: str,
    base_url: str | list[str] | None = None,
    api_key_env: str = "OPENROUTER_API_KEY",
    *,
    simulate: bool = False,
    tokenizer: str | None = None,
    profile: str | None = None,
    allow_insecure_http: bool = False,
) -> list[ProviderEndpoint]:
    """``model``'s providers from the listing at ``base_url`` (OpenRouter's by default), the key
    from ``api_key_env`` sent if set; with ``simulate``, from the built-in simulator's."""
    base_url = _one_url(base_url)
    if simulate:
        if base_url:
            raise ProvidersError(
                "--simulate lists the built-in simulator's providers and --base-url names a real "
                "endpoint; drop one of them"
            )
        return await _simulated_listing(model, tokenizer, profile)
    url = base_url or OPENROUTER_URL
    check_base_url(url, allow_insecure_http)
    return await model_endpoints(url, model, os.environ.get(api_key_env) or None)


async def _simulated_listing(
    model: str, tokenizer: str | None, profile: str | None
) -> list[ProviderEndpoint]:
    from draftgen.simulator import SimConfig, start_simulator

    if not tokenizer:
        raise ProvidersError(
            "--simulate needs --tokenizer: the simulator answers with the model's tokenizer "
            "(e.g. --tokenizer fixture:kimi-k2.5)"
        )
    simulator = await start_simulator(SimConfig(tokenizer=tokenizer, profile=profile))
    try:
        # Any bearer token passes the simulator.
        return await model_endpoints(simulator.base_url, model, "draftgen-embedded-simulator-key")
    finally:
        await simulator.close()


# -- probing -------------------------------------------------------------------------------------


async def probe_providers(
    options: RunOptions, probes: int, out: str | Path | None = None
) -> ProbeReport:
    """Send every provider of ``options.model`` the probe set ``probes`` times (the built-in set,
    or ``options``' inputs, at most ``limit`` or DEFAULT_PROBE_ROWS rows) through a run of its
    own into ``out/ROUTE`` (a temporary directory without ``out``), and rank them."""
    if probes < 1:
        raise ProvidersError(f"--probe {probes} is not a positive integer")
    if not options.tokenizer:
        raise ProvidersError(
            "--probe needs --tokenizer: each probe is a run, whose samples are rebuilt with the "
            "model's tokenizer"
        )
    base_url = _one_url(options.base_url)
    endpoints = await list_providers(
        options.model,
        base_url,
        options.api_key_env,
        simulate=options.simulate,
        tokenizer=options.tokenizer,
        profile=options.profile,
        allow_insecure_http=options.allow_insecure_http,
    )
    routes = _routes(endpoints)
    if not routes:
        raise ProvidersError(
            f"the listing of {options.model} names no provider that can be routed to, so "
            "nothing was probed"
        )
    with contextlib.ExitStack() as stack:
        if out is None:
            root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="draftgen-probe-")))
        else:
            root = Path(out)
            root.mkdir(parents=True, exist_ok=True)
        base = _probe_options(
            options, root, probes, base_url or (None if options.simulate else OPENROUTER_URL)
        )
        figures = []
        for (route, endpoint), name in zip(routes.items(), _dir_names(routes), strict=True):
            run_dir = root / name
            figures.append(await _probe_one(base, route, endpoint, run_dir, keep=out is not None))
    return ProbeReport(options.model, probes, rank(figures))


def _one_url(base_url: str | list[str] | None) -> str | None:
    if isinstance(base_url, list):
        if len(base_url) > 1:
            raise ProvidersError(
                "draftgen providers asks one endpoint for the listing: give --base-url once"
            )
        return base_url[0] if base_url else None
    return base_url


def _routes(endpoints: list[ProviderEndpoint]) -> dict[str, ProviderEndpoint]:
    """Each routable endpoint once, by the name provider.only takes (case does not matter)."""
    routes: dict[str, ProviderEndpoint] = {}
    for endpoint in endpoints:
        route = endpoint.route
        if route is not None and route.lower() not in {r.lower() for r in routes}:
            routes[route] = endpoint
    return routes


def _dir_names(routes: dict[str, ProviderEndpoint]) -> list[str]:
    """A directory name per route: lowercase, ``/`` and spaces as ``-``, unique."""
    names: list[str] = []
    for route in routes:
        name = re.sub(r"[^a-z0-9._-]+", "-", route.lower()).strip(".-") or "provider"
        while name in names:
            name += "_"
        names.append(name)
    return names


def _probe_options(
    options: RunOptions, root: Path, probes: int, base_url: str | None
) -> RunOptions:
    """The options every probe runs with; only ``out`` and ``provider`` differ between them."""
    given = bool(options.inputs or options.datasets)
    inputs = options.inputs
    if not given:
        path = root / PROBE_FILE
        path.write_text("".join(json.dumps(row) + "\n" for row in PROBE_ROWS), encoding="utf-8")
        inputs = [str(path)]
    return replace(
        options,
        inputs=inputs,
        base_url=base_url,
        endpoints=None,
        samples=probes,
        limit=options.limit or (DEFAULT_PROBE_ROWS if given else None),
        batch=False,
        shard=None,
        keep_providers=True,  # a probe judges one provider as it is: nothing left out or re-bought
    )


async def _probe_one(
    base: RunOptions, route: str, endpoint: ProviderEndpoint, run_dir: Path, keep: bool
) -> ProviderFigures:
    figures = ProviderFigures(route=route, provider=endpoint.provider)
    options = replace(base, out=run_dir, provider={"only": [route], "allow_fallbacks": False})
    _log.info("probing %s (provider.only, no fallbacks) into %s", route, run_dir)
    try:
        await run(options)
    except DraftgenError as exc:
        figures.error = str(exc)
        return figures
    with Store(run_dir, create=False) as store:
        read_figures(store, figures)
    figures.run_dir = str(run_dir) if keep else None
    return figures


def read_figures(store: Store, figures: ProviderFigures) -> None:
    """The probe's counts, cost and median latency from its run's store."""
    counts = store.tallies.counts()
    figures.samples = counts["samples"]
    figures.verified = counts["verified"]
    figures.reasons = {r: n for r, n in counts["reasons"].items() if r != "ok"}
    figures.failures = sum(counts["failures"].values())
    figures.cost = counts["cost"]
    latencies = [
        row["latency"] for row in store.tallies.report_rows() if row["latency"] is not None
    ]
    figures.latency_p50 = round(statistics.median(latencies), 3) if latencies else None
    # The probe routes to one provider: every question its calibration asked went there.
    figures.calibration = {
        question: row["verdict"]
        for questions in store.calibrations.read().values()
        for question, row in questions.items()
    }


def rank(figures: list[ProviderFigures]) -> list[ProviderFigures]:
    """Judge and order the providers: those verifying at least GOOD_SHARE of their samples by
    dollars per verified sample, then the excluded. A behaviour caught once already costs a
    provider its unprovable samples (verification distrusts it where a count cannot prove), so
    the share is the judgement; ``caught`` only says why."""
    for f in figures:
        good = f.error is None and (f.verified_share or 0) >= GOOD_SHARE
        f.verdict = "recommended" if good else "excluded"

    def key(f: ProviderFigures) -> tuple:
        price = f.dollars_per_verified
        excluded = f.verdict == "excluded"
        return (excluded, price is None, price or 0.0, -(f.verified_share or 0), f.route)

    return sorted(figures, key=key)

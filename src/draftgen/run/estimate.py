"""``draftgen estimate``: prompt tokens, cost and time of a run before it spends anything.

Prompts are counted with the target's tokenizer and chat template, row by row (memory stays
flat); output comes from ``max_tokens`` or a pilot run in a scratch directory; prices from the
endpoint's model listing (``GET /models``) or from ``--price-in/--price-out``.
"""

from __future__ import annotations

import math
import os
import statistics
import tempfile
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from draftgen.backends import get_backend
from draftgen.backends.listing import (  # noqa: F401
    LISTING_TIMEOUT,
    ListingError,
    listed_prices,
    model_endpoints,
)
from draftgen.errors import DraftgenError
from draftgen.generate.client import RetryPolicy
from draftgen.inputs.ingest import Rejection
from draftgen.inputs.mix import MixError, read_suite
from draftgen.inputs.plan import build_messages, original_answers, plan_turns
from draftgen.options import EstimateOptions
from draftgen.records import GenerationSettings
from draftgen.run.context import generation_settings
from draftgen.run.pipeline import RunError, RunOptions, check_base_url, run
from draftgen.store.database import Store
from draftgen.tokens import tokenizer as tok
from draftgen.tokens.rendering import ChatRenderer, request_variables, resolve_profile


class EstimateError(DraftgenError, RuntimeError):
    """An estimate that cannot be made as asked; the message says what to pass."""


@dataclass
class Estimate:
    rows: int = 0
    rejected: int = 0
    turns: int = 0  # turns the run regenerates (a request each, per sample)
    render_failures: int = 0  # turns whose prompt the chat template cannot render (not counted)
    requests: int = 0  # turns x samples
    prompt_tokens: int = 0  # over all requests
    # Completion tokens over all requests: low..high, and where the figures come from.
    output_low: int | None = None
    output_high: int | None = None
    output_source: str = "unknown"  # max_tokens | pilot | unknown
    price_in: float | None = None  # USD per token
    price_out: float | None = None
    price_source: str = "none"  # listing | flags | none
    cost_low: float | None = None
    cost_high: float | None = None
    seconds_low: float | None = None
    seconds_high: float | None = None
    tokens_per_second: float = 0.0  # per request
    # The pilot's retried attempts per request, and the seconds (low, high) that retries and
    # their backoff add to the run: its slowest request's chain of retries (``retry_seconds``).
    retries_per_request: float = 0.0
    retry_seconds_low: float = 0.0
    retry_seconds_high: float = 0.0
    concurrency: int = 0
    pilot: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # The same run through a batch API (run --batch): the ``MODEL:batch`` catalog price, and
    # the batch rounds it takes (a conversation advances one turn per round).
    batch_price_in: float | None = None  # USD per token
    batch_price_out: float | None = None
    batch_price_source: str = "none"  # listing | none
    batch_cost_low: float | None = None
    batch_cost_high: float | None = None
    batch_rounds: int = 0
    # The model's providers on OpenRouter (the endpoints listing), each with the run priced at
    # its prices, whether the run's [openrouter.provider] routing lets it serve, and with a
    # pilot, what its samples proved.
    providers: list[dict] = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)


async def estimate(options: RunOptions) -> Estimate:
    """Count, price and time the run ``options`` describes: ``EstimateOptions`` (a pilot sends
    ``pilot`` prompts, prices may be given), or a run's own ``RunOptions``."""
    if not isinstance(options, EstimateOptions):
        options = EstimateOptions(**_run_fields(options))
    # The pilot and the price listing go to the first endpoint of a fleet.
    urls = options.base_url or [spec.url for spec in options.endpoints or []] or None
    options = replace(options, base_url=urls, endpoints=None)
    try:
        settings = generation_settings(options)  # the run's own checks of the sampling settings
        suite = options.suite()
        suite.check()
    except (RunError, MixError) as exc:
        raise EstimateError(str(exc)) from None
    for url in _urls(options.base_url):
        check_base_url(url, options.allow_insecure_http)
    result = Estimate(concurrency=options.concurrency)
    count_prompts(options, settings, result)
    if options.pilot > 0:
        await run_pilot(options, result)
    elif options.max_tokens is not None:
        result.output_low = 0
        result.output_high = result.requests * options.max_tokens
        result.output_source = "max_tokens"
        result.tokens_per_second = options.tokens_per_second
    else:
        result.notes.append(
            "no --max-tokens and no --pilot: output length unknown, so cost covers prompts only"
        )
    await find_prices(options, result)
    _price_and_time(result)
    _add_retry_time(options, result)
    await find_providers(options, result)
    if options.max_cost is not None and (result.cost_high or 0) > options.max_cost:
        result.notes.append(
            f"the cost may pass --max-cost {options.max_cost:g}: the run would stop there"
        )
    return result


def count_prompts(options: RunOptions, settings: GenerationSettings, result: Estimate) -> None:
    """Prompt tokens of every turn the run regenerates, rendered as the run renders them.

    Later turns of a conversation follow answers not generated yet; the row's own answers
    stand in for them, so multi-turn totals are close rather than exact.
    """
    tokenizer = tok.load_tokenizer(options.tokenizer)
    profile = resolve_profile(tokenizer, options.profile)
    renderer = ChatRenderer(tokenizer, profile)
    variables = request_variables(settings, profile)
    multi_turn = False
    for item in read_suite(options.suite()):
        result.rows += 1
        if isinstance(item, Rejection):
            result.rejected += 1
            continue
        plans = plan_turns(item)
        answers = original_answers(item)
        multi_turn = multi_turn or len(plans) > 1
        result.batch_rounds = max(result.batch_rounds, len(plans))
        for plan in plans:
            result.turns += 1
            rendering = renderer.render(build_messages(plan, answers), plan.tools, variables)
            if rendering.error:
                result.render_failures += 1
                continue
            result.prompt_tokens += len(renderer.prompt_ids(rendering)) * options.samples
    result.requests = result.turns * options.samples
    if result.render_failures:
        result.notes.append(
            f"{result.render_failures} turns could not be rendered by the chat template and are "
            "not in the prompt tokens; their samples will be flagged prompt_render_failed"
        )
    if multi_turn:
        result.notes.append(
            "later turns of multi-turn rows were counted with the rows' own earlier answers"
        )
    result.notes.append(
        "identical turns are counted each time; the run requests them once, so a dataset with "
        "duplicates costs less"
    )


async def run_pilot(options: EstimateOptions, result: Estimate) -> None:
    """Send ``pilot`` prompts through a real run in a scratch directory and measure them."""
    with tempfile.TemporaryDirectory(prefix="draftgen-estimate-") as scratch:
        limit = options.pilot if options.limit is None else min(options.pilot, options.limit)
        # A pilot is live and whole: the flags about how a run proceeds are not its. It measures
        # every provider as it is, so it leaves none out and buys nothing again.
        pilot_options = replace(
            options,
            out=Path(scratch),
            limit=limit,
            samples=1,
            batch=False,
            shard=None,
            keep_providers=True,
            no_calibrate=True,  # the pilot measures answers; the run calibrates itself
        )
        try:
            summary = await run(_as_run_options(pilot_options))
        except RunError as exc:
            # The pilot's directory goes with it: no resume to promise, so the reason alone.
            said = (
                exc.reason if exc.reason.startswith("stopped: ") else f"could not run: {exc.reason}"
            )
            raise EstimateError(f"the pilot of {options.pilot} prompts {said}") from None
        with Store(Path(scratch), create=False) as store:
            rows = [
                (row["completion_tokens"], row["latency"])
                for row in store.tallies.report_rows()
                if row.get("completion_tokens") is not None
            ]
    if not rows:
        raise EstimateError(
            f"the pilot of {options.pilot} prompts stored no completion "
            f"({summary.counts.get('failures') or 'no answers'}); check --base-url and --model"
        )
    tokens = [t for t, _ in rows]
    latency = sum(lat for _, lat in rows if lat)
    mean = statistics.fmean(tokens)
    if len(tokens) > 1:
        # A 95% interval of the mean: the run's total is the mean times many requests.
        margin = 1.96 * statistics.stdev(tokens) / math.sqrt(len(tokens))
        low, high = max(0.0, mean - margin), mean + margin
    else:
        low = high = mean
    if options.max_tokens is not None:
        high = min(high, options.max_tokens)
    result.output_low = round(low * result.requests)
    result.output_high = round(high * result.requests)
    result.output_source = "pilot"
    speed = sum(tokens) / latency if latency > 0 else options.tokens_per_second
    result.tokens_per_second = speed
    sent = len(tokens) + sum((summary.counts.get("failures") or {}).values())
    retried = summary.counts.get("retried_attempts", 0)
    result.retries_per_request = retried / sent if sent else 0.0
    result.pilot = {
        "completions": len(tokens),
        "mean_completion_tokens": mean,
        "max_completion_tokens": max(tokens),
        "tokens_per_second": speed,
        "retried_attempts": retried,
        "cost": summary.counts.get("cost", 0.0),
        "providers": summary.counts.get("providers", {}),
    }


def _urls(base_url: str | list[str] | None) -> list[str]:
    # --base-url may be given several times (several endpoints): the first one is priced.
    if base_url is None:
        return []
    return [base_url] if isinstance(base_url, str) else list(base_url)


def _as_run_options(options: EstimateOptions) -> RunOptions:
    return RunOptions(**_run_fields(options))


def _run_fields(options: RunOptions) -> dict:
    return {name: getattr(options, name) for name in RunOptions.__dataclass_fields__}


async def find_prices(options: EstimateOptions, result: Estimate) -> None:
    """Prices per token from the endpoint's listing (the built-in simulator's own under
    ``--simulate``, which ``run --simulate`` is charged), else from the flags (USD per million)."""
    if options.simulate:
        simulator_prices(result)
        return
    if options.base_url is not None:
        listed = await listed_prices(
            _urls(options.base_url)[0], options.model, os.environ.get(options.api_key_env)
        )
        await find_batch_price(options, result)
        if isinstance(listed, tuple):
            result.price_in, result.price_out = listed
            result.price_source = "listing"
            return
        result.notes.append(listed)
    else:
        result.notes.append("no --base-url: prices come from --price-in/--price-out")
    if options.price_in is not None and options.price_out is not None:
        result.price_in = options.price_in / 1e6
        result.price_out = options.price_out / 1e6
        result.price_source = "flags"
    else:
        result.notes.append("no prices: pass --price-in and --price-out (USD per million tokens)")


def simulator_prices(result: Estimate) -> None:
    """The prices the built-in simulator lists and charges (its ``:batch`` entry at its batch
    discount), as ``run --simulate`` pays them."""
    from draftgen.simulator.config import SimConfig

    result.price_in, result.price_out = SimConfig.prompt_price, SimConfig.completion_price
    result.price_source = "the built-in simulator"
    result.batch_price_in = SimConfig.prompt_price * SimConfig.batch_discount
    result.batch_price_out = SimConfig.completion_price * SimConfig.batch_discount
    result.batch_price_source = "the built-in simulator"


async def find_batch_price(options: EstimateOptions, result: Estimate) -> None:
    """The ``MODEL:batch`` entry's prices from the listing, or a note that there is none."""
    variant = options.model if options.model.endswith(":batch") else options.model + ":batch"
    listed = await listed_prices(
        _urls(options.base_url)[0], variant, os.environ.get(options.api_key_env)
    )
    if isinstance(listed, tuple):
        result.batch_price_in, result.batch_price_out = listed
        result.batch_price_source = "listing"
    else:
        result.notes.append(f"no batch price: {listed} (the model may have no batch endpoint)")


async def find_providers(options: EstimateOptions, result: Estimate) -> None:
    """The model's providers from the endpoints listing, where the backend routes to providers
    (OpenRouter): the run priced at each one's prices, whether the run's routing allows it, and
    the pilot's figures of it; a note if the listing cannot be had or the routing allows none."""
    if options.base_url is None or get_backend(options.backend).route_around is None:
        return
    try:
        endpoints = await model_endpoints(
            _urls(options.base_url)[0], options.model, os.environ.get(options.api_key_env)
        )
    except ListingError as exc:
        result.notes.append(f"no provider listing: {exc}")
        return
    pilot = result.pilot.get("providers", {})
    for endpoint in endpoints:
        name = endpoint.provider or endpoint.name or "?"
        price_in, price_out = endpoint.prompt_price, endpoint.completion_price
        priced = price_in is not None and price_out is not None
        prompt_cost = result.prompt_tokens * price_in if priced else None
        figures = pilot.get(name)
        result.providers.append(
            {
                "provider": name,
                "route": endpoint.route,
                "quantization": endpoint.quantization,
                "status": endpoint.status,
                "price_in": price_in,
                "price_out": price_out,
                "cost_low": prompt_cost + (result.output_low or 0) * price_out if priced else None,
                "cost_high": prompt_cost + result.output_high * price_out
                if priced and result.output_high is not None
                else None,
                "routed": routed(options.provider, endpoint.provider, endpoint.tag),
                "pilot": {
                    "samples": figures["samples"],
                    "verified": figures["verified"],
                    "cost_per_verified": figures.get("cost_per_verified"),
                }
                if figures
                else None,
            }
        )
    if result.providers and not any(p["routed"] for p in result.providers):
        result.notes.append(
            "[openrouter.provider] allows none of the listed providers: every request would be "
            "refused (404 'No allowed providers'); fix its only/ignore lists"
        )


def routed(prefs: dict | None, provider: str | None, tag: str | None) -> bool:
    """Whether routing ``prefs`` (``only``, ``ignore``) lets the endpoint of ``provider`` (its
    ``tag``, "deepinfra/fp8") serve: each names an endpoint by its provider's name, its tag or
    the tag's provider slug, in any case."""
    names = {n.lower() for n in (provider, tag, (tag or "").partition("/")[0]) if n}
    listed = lambda key: {str(n).lower() for n in (prefs or {}).get(key) or []}  # noqa: E731
    only, ignore = listed("only"), listed("ignore")
    return (not only or bool(names & only)) and not names & ignore


def _price_and_time(result: Estimate) -> None:
    if result.price_in is not None and result.price_out is not None:
        prompt_cost = result.prompt_tokens * result.price_in
        result.cost_low = prompt_cost + (result.output_low or 0) * result.price_out
        if result.output_high is not None:
            result.cost_high = prompt_cost + result.output_high * result.price_out
    if result.batch_price_in is not None and result.batch_price_out is not None:
        prompt_cost = result.prompt_tokens * result.batch_price_in
        result.batch_cost_low = prompt_cost + (result.output_low or 0) * result.batch_price_out
        if result.output_high is not None:
            result.batch_cost_high = prompt_cost + result.output_high * result.batch_price_out
    if result.output_high is not None and result.tokens_per_second > 0 and result.requests:
        result.seconds_low = generation_seconds(result, result.output_low or 0)
        result.seconds_high = generation_seconds(result, result.output_high)


def _add_retry_time(options: RunOptions, result: Estimate) -> None:
    """The time the pilot's retries say the run's will add, in its time; without a pilot, a
    note that retries are not in it."""
    if result.seconds_high is None:
        return
    if not result.pilot:
        result.notes.append(
            "the time leaves out retries and their backoff (up to "
            f"{_backoff_total(options.retry_base_delay, options.max_attempts - 1):.0f} s for a "
            "request retried --max-attempts times): --pilot measures how often they happen"
        )
        return
    per_request = result.seconds_high / max(
        1, math.ceil(result.requests / max(result.concurrency, 1)), result.batch_rounds
    )
    low, high = retry_seconds(
        result.requests,
        result.retries_per_request,
        options.retry_base_delay,
        options.max_attempts,
        per_request,
    )
    result.retry_seconds_low, result.retry_seconds_high = low, high
    result.seconds_low = (result.seconds_low or 0.0) + low
    result.seconds_high += high


def retry_seconds(
    requests: int,
    retries_per_request: float,
    base_delay: float,
    max_attempts: int,
    attempt_seconds: float = 0.0,
) -> tuple[float, float]:
    """The seconds (low, high) retries add to a run of ``requests``: the run ends with its
    slowest request, the one that needs the most retries. At ``retries_per_request`` an attempt
    fails with p = r / (1 + r), so among ``requests`` the most retries one needs is about the k
    where requests x p**k falls to 1 (at most --max-attempts - 1). Each retry waits its
    backoff, full jitter in [0, base x 2**(k-1)] (``RetryPolicy``): half of it on average (low),
    all of it and a failed attempt as long as ``attempt_seconds`` each (high)."""
    if retries_per_request <= 0 or requests <= 0 or max_attempts <= 1:
        return 0.0, 0.0
    failing = retries_per_request / (1 + retries_per_request)
    most = max_attempts - 1
    if requests > 1 and failing < 1:
        most = min(most, max(1, math.ceil(math.log(requests) / math.log(1 / failing))))
    backoff = _backoff_total(base_delay, most)
    return backoff / 2, backoff + most * attempt_seconds


def _backoff_total(base_delay: float, retries: int) -> float:
    """The longest wait ``retries`` retries in a row may take (``RetryPolicy.backoff``)."""
    policy = RetryPolicy(base_delay=base_delay)
    return sum(min(policy.max_delay, base_delay * 2 ** (k - 1)) for k in range(1, retries + 1))


def generation_seconds(result: Estimate, output_tokens: int) -> float:
    """How long ``output_tokens`` over the run's requests take to generate: each request makes
    ``tokens_per_second``, at most ``concurrency`` at once, in waves of equal requests; a
    conversation's turns follow each other, so there are at least as many waves as its turns
    (a bound: rate limits and long prompts only slow it down)."""
    per_request = output_tokens / result.requests / result.tokens_per_second
    waves = max(math.ceil(result.requests / max(result.concurrency, 1)), result.batch_rounds)
    return waves * per_request

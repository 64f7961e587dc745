"""The run: ingest -> plan -> generate -> store, then reconstruct -> verify, resumable at any point.

A resume plans everything again from the inputs, finds each turn's key in the store and requests
only what is missing, so nothing stored is bought twice. The live requests are the engine's
(``engine.LiveGeneration``), batch mode's are ``batch.generate_batch``'s.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import urlparse

import orjson

from draftgen.backends import Backend, SettingsError, UnknownBackendError, get_backend
from draftgen.generate.client import default_response_bytes
from draftgen.generate.endpoints import EndpointSpec, HealthPolicy, endpoint_label, endpoint_specs
from draftgen.generate.engine import LiveGeneration
from draftgen.generate.errors import RunError
from draftgen.generate.progress import RunProgress
from draftgen.inputs.ingest import Rejection
from draftgen.inputs.mix import DatasetSpec, MixError, Suite, count_suite, read_suite
from draftgen.inputs.plan import PlanCount, count_plan
from draftgen.inputs.shard import ALL, Shard, shard_label
from draftgen.profiles import ModelProfile
from draftgen.reconstruct.background import BackgroundReconstruction
from draftgen.records import GenerationSettings
from draftgen.run.probe import ProbeError, ProbeResult, probe_endpoints
from draftgen.store.database import REJECTED_NAME, Store, StoreError
from draftgen.tokens.rendering import tokenizer_profile
from draftgen.tokens.tokenizer import tokenizer_digest

_log = logging.getLogger("draftgen.run")


@dataclass
class RunOptions:
    inputs: list[str]
    model: str
    tokenizer: str
    out: Path
    base_url: str | list[str] | None = None  # None: the built-in simulator; a list: several
    api_key_env: str = "OPENROUTER_API_KEY"
    concurrency: int = 64
    stream: bool = True
    max_tokens: int | None = None
    profile: str | None = None
    idle_timeout: float = 300.0  # seconds a stream may send no data event (0: no limit)
    # Seconds one attempt may take in all (0: no limit): what ends a trickle that never falls
    # idle. Generous, since an attempt cut short is still billed: a 32k-token answer at ~10
    # tokens a second takes 55 minutes.
    attempt_timeout: float = 3600.0
    # Bytes one response may send, body or stream; None: client.default_response_bytes of
    # max_tokens (16 MiB + 1 KiB per token; 64 MiB without max_tokens).
    max_response_bytes: int | None = None
    max_attempts: int = 8
    retry_base_delay: float = 0.5
    allow_insecure_http: bool = False
    progress_interval: float = 10.0
    max_cost: float | None = None  # dollars (credits) for the whole run directory
    max_retries: int | None = 20_000  # retries across the run, all requests together
    shutdown_grace: float = 30.0  # seconds in-flight responses get after Ctrl-C
    backend: str = "openrouter"  # wire format: openrouter (text) | vllm | sglang (server ids)
    logprobs: bool = False  # ask for logprobs: token bytes that give content ids exactly
    # Several datasets mixed into one run (draftgen.inputs.mix); None: ``inputs`` read in turn.
    datasets: list[DatasetSpec] | None = None
    limit: int | None = None  # rows taken from all inputs together, shared by weight
    samples: int = 1  # completions per turn, each stored as its own sample
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    reasoning_effort: str | None = None  # OpenRouter reasoning.effort
    reasoning_max_tokens: int | None = None  # OpenRouter reasoning.max_tokens (not with effort)
    provider: dict | None = None  # OpenRouter provider routing ([openrouter.provider])
    # Template variables (--chat-template-kwargs, [chat_template_kwargs]): sent to vLLM/SGLang
    # and used to render every prompt locally.
    chat_template_kwargs: dict | None = None
    # Several endpoints ([[backend.endpoints]]: url, optional concurrency); not with base_url.
    endpoints: list[EndpointSpec] | None = None
    endpoint_concurrency: int | None = None  # in-flight cap per endpoint (None: share the total)
    endpoint_health: HealthPolicy | None = None  # ejection and probing (None: the defaults)
    # ingest.INPUT_FORMATS; also the format of [[datasets]] that name none. None: "auto".
    input_format: str | None = None
    shard: Shard | None = None  # run only this part of the rows (draftgen.inputs.shard); None: all
    # Batch mode (draftgen.generate.batch, [batch] in draftgen.toml): the same plan and store,
    # generated through a batch API at the batch price instead of live requests.
    batch: bool = False
    batch_dialect: str = "openrouter"  # openrouter (inline requests) | openai-files (JSONL)
    batch_url: str | None = None  # the batch API's root (None: the --base-url)
    batch_model: str | None = None  # the model named in each create (None: --model)
    batch_size: int | None = None  # rows per batch (None: the dialect's limit)
    batch_detach: bool = False  # submit what is ready and exit; the same command collects
    batch_poll: float = 5.0  # first seconds between polls, growing to 60
    batch_retries: int = 3  # sends again of a row whose batch failed, expired, was cancelled
    batch_grace: float = 120.0  # seconds a lost create may stay unseen before it counts absent

    def suite(self) -> Suite:
        """The prompts this run reads: ``datasets`` if given, else the ``inputs`` files."""
        given = None if self.input_format in (None, "auto") else self.input_format
        if self.datasets:
            specs = (
                replace(spec, format=given) if spec.format is None and given else spec
                for spec in self.datasets
            )
            return Suite(tuple(specs), self.limit)
        return Suite.from_inputs(self.inputs, self.limit, format=given)

    def response_byte_cap(self) -> int:
        """Bytes one response may send: ``max_response_bytes``, else derived from max_tokens."""
        return self.max_response_bytes or default_response_bytes(self.max_tokens)


@dataclass
class RunSummary:
    progress: RunProgress
    counts: dict = field(default_factory=dict)
    stopped: str | None = None  # why the run ended early: "interrupted" or a budget sentence


def check_base_url(url: str, allow_insecure_http: bool) -> None:
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise RunError(
            f"--base-url {url!r} is not an http(s) URL like https://openrouter.ai/api/v1"
        )
    if parsed.scheme == "http" and not allow_insecure_http and not _is_loopback(parsed.hostname):
        raise RunError(
            f"--base-url {url} sends the API key unencrypted to a non-loopback host; use https, "
            "or pass --allow-insecure-http if this network is trusted"
        )


def run_endpoints(options: RunOptions) -> list[EndpointSpec] | None:
    """The endpoints a run sends to (``base_url``, one or a list, or ``endpoints``), checked;
    None for the built-in simulator."""
    if options.endpoints and options.base_url:
        raise RunError(
            "--base-url and [[backend.endpoints]] both name endpoints; list them in one place"
        )
    if options.endpoints:
        specs = list(options.endpoints)
    elif options.base_url:
        specs = endpoint_specs(options.base_url)
    else:
        return None
    seen: set[str] = set()
    for spec in specs:
        label = endpoint_label(spec.url)
        if label in seen:
            raise RunError(f"endpoint {label} is given twice; list each base URL once")
        seen.add(label)
        if spec.concurrency is not None and spec.concurrency < 1:
            raise RunError(f"endpoint {label} has concurrency {spec.concurrency}; use 1 or more")
    if options.endpoint_concurrency is not None and options.endpoint_concurrency < 1:
        raise RunError(f"--endpoint-concurrency {options.endpoint_concurrency} must be 1 or more")
    return specs


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def count_rows(inputs: list[str] | Suite) -> int:
    """Rows the run reads (conversations and rejected rows): what the suite's mix yields."""
    suite = inputs if isinstance(inputs, Suite) else Suite.from_inputs(inputs)
    try:
        return count_suite(suite)
    except MixError as exc:
        raise RunError(str(exc)) from None


def generation_settings(options: RunOptions) -> GenerationSettings:
    """What each request asks of the model, checked; a resume must ask the same."""
    if options.reasoning_effort is not None and options.reasoning_max_tokens is not None:
        raise RunError(
            "--reasoning-effort and --reasoning-max-tokens exclude each other (OpenRouter takes "
            "one of them); drop one"
        )
    try:
        # The backend says which of its request fields the run's options fill (reasoning,
        # provider routing, template variables) and refuses those its server does not take.
        fields = resolve_backend(options.backend).settings(options)
    except SettingsError as exc:
        raise RunError(str(exc)) from None
    if options.samples < 1:
        raise RunError(f"--completions-per-turn {options.samples} must be at least 1")
    return GenerationSettings(
        model=options.model,
        max_tokens=options.max_tokens,
        temperature=options.temperature,
        top_p=options.top_p,
        seed=options.seed,
        **fields,
    )


def check_shard(store: Store, shard: Shard | None, out: Path) -> None:
    """Record which shard a new run directory holds, or refuse a resume with another one."""
    wanted = shard_label(shard)
    # A store from before shards existed, already used, read every row.
    recorded = store.meta("shard") or (ALL if store.meta("settings") is not None else None)
    if recorded in (None, wanted):
        store.set_meta("shard", wanted)
        return
    if recorded == ALL:
        hint = "resume it without --shard, or choose a new --out directory"
    elif "," not in recorded:
        hint = f"resume it with --shard {recorded}, or choose a new --out directory"
    else:
        hint = "a merge of some shards cannot be resumed, so choose a new --out directory"
    given = f"--shard {wanted}" if shard is not None else "no --shard"
    raise RunError(f"{out} holds shard {recorded} of the rows but this run has {given}: {hint}")


SOURCES = "sources"  # store meta: JSON list of the endpoints (or simulator) that answered


async def before_first_request(
    options: RunOptions,
    store: Store,
    base_url: str | list[EndpointSpec],
    api_key: str | None,
    simulator=None,
) -> PlanCount:
    """Probe every endpoint, then count the plan: an endpoint that cannot be reached or refuses
    the key, a model it lacks, or an input with nothing to answer stops the run here, in
    seconds and before any request (``simulator``, if given, is closed then)."""
    try:
        probed = await probe_endpoints(
            base_url,
            api_key,
            options.model,
            resolve_backend(options.backend).dialect,
            key_variable=options.api_key_env,
            simulated=simulator is not None,
        )
        planned = plan_run(options)
    except BaseException as exc:
        if simulator is not None:
            await simulator.close()
        if isinstance(exc, ProbeError):
            raise RunError(str(exc)) from None
        raise
    store.set_meta(SOURCES, _merged_sources(store.meta(SOURCES), probed, simulator is not None))
    where = (
        "the built-in simulator on loopback: the data is synthetic (no --base-url given)"
        if simulator is not None
        else ", ".join(f"{r.endpoint} ({r.server}: {r.checked})" for r in probed)
    )
    _log.info("sending to %s", where)
    _log.info(describe_plan(planned, options.out / REJECTED_NAME), extra=_plan_fields(planned))
    return planned


def plan_run(options: RunOptions) -> PlanCount:
    """Count what the run will ask for, reading the inputs once, and list the rejected rows in
    ``RUN_DIR/rejected.jsonl``; a RunError if no row has anything to answer."""
    first: list[Rejection] = []

    def reject(rejection: Rejection) -> None:
        if not first:
            first.append(rejection)
        rejected.write(rejection.as_json() + b"\n")

    try:
        with open(options.out / REJECTED_NAME, "wb") as rejected:
            rows = read_suite(options.suite())
            planned = count_plan(rows, options.samples, options.shard, reject)
    except MixError as exc:
        raise RunError(str(exc)) from None
    if planned.rows == 0:
        inputs = ", ".join(str(s.path) for s in options.suite().datasets)
        raise RunError(f"nothing to generate: the input holds no rows ({inputs})")
    if planned.answerable == 0:
        example = (
            f" (the first, line {first[0].line} of {first[0].input}: {first[0].reason})"
            if first
            else ""
        )
        which = f"all {planned.rows} rows of the input were"
        if planned.rows == 1:
            which = "the only row of the input was"
        raise RunError(
            f"nothing to generate: {which} rejected{example}; every row's reason is in "
            f"{options.out / REJECTED_NAME}"
        )
    return planned


def describe_plan(planned: PlanCount, rejected_path: Path) -> str:
    per_turn = planned.completions_per_turn
    text = (
        f"planned {planned.requests} requests: {planned.turns} turns of {planned.shard_rows} "
        f"rows x {per_turn} completion{'s' if per_turn > 1 else ''} per turn"
    )
    if planned.rejected:
        text += f"; {planned.rejected} rows rejected (reasons in {rejected_path})"
    return text + "; identical turns are sent once, and turns already stored not again"


def _plan_fields(planned: PlanCount) -> dict:
    return {
        "planned_requests": planned.requests,
        "planned_turns": planned.turns,
        "planned_rows": planned.shard_rows,
        "rejected": planned.rejected,
    }


def _merged_sources(recorded: str | None, probed: list[ProbeResult], builtin: bool) -> str:
    """Every endpoint that answered this run directory, across resumes, in first-seen order."""
    sources = orjson.loads(recorded) if recorded else []
    for result in probed:
        # The built-in simulator listens on a new port each run: one source however often used.
        endpoint = "built-in simulator" if builtin else result.endpoint
        entry = {"endpoint": endpoint, "server": result.server}
        if entry not in sources:
            sources.append(entry)
    return orjson.dumps(sources).decode()


async def run(options: RunOptions) -> RunSummary:
    for path in options.inputs if not options.datasets else ():
        if not os.path.isfile(path):
            raise RunError(f"--input {path} does not exist or is not a file")
    try:
        options.suite().check()
    except MixError as exc:
        raise RunError(str(exc)) from None
    settings = generation_settings(options)
    if options.batch:  # refused before anything is recorded in the run directory
        from draftgen.generate.batch.generate import check_batch_options

        check_batch_options(options, settings)
    answer_chars = (options.max_tokens or TYPICAL_ANSWER_TOKENS) * 4
    expected_chars = count_rows(options.suite()) * options.samples * answer_chars
    reconstruction = BackgroundReconstruction(
        options.out, options.tokenizer, options.profile, expected_chars
    )
    try:
        return await _run(options, settings, reconstruction)
    finally:
        reconstruction.cancel()  # a run that stopped before its first request


async def _run(
    options: RunOptions, settings: GenerationSettings, reconstruction: BackgroundReconstruction
) -> RunSummary:
    """``run`` once its reconstruction is on its way."""
    profile = run_profile(options)
    # Locked against other runs, its files checked, what a lost store or a full disk left taken
    # back; closing the store lets go of the lock.
    store = Store.open_run(options.out)
    try:
        check_shard(store, options.shard, options.out)
        store.check_settings(settings.as_dict())
        store.check_identity(TOKENIZER_DIGEST, tokenizer_digest(options.tokenizer), "tokenizer")
        simulator = None
        base_url, api_key = run_endpoints(options), os.environ.get(options.api_key_env)
        if base_url is None:
            simulator = await _start_embedded_simulator(options)
            # Any bearer token passes; not a word that log redaction would then mask everywhere.
            base_url, api_key = simulator.base_url, "draftgen-embedded-simulator-key"
        else:
            for spec in base_url:
                check_base_url(spec.url, options.allow_insecure_http)
            if not api_key and resolve_backend(options.backend).needs_api_key:
                raise RunError(
                    f"environment variable {options.api_key_env} is not set; export your API key "
                    "in it or name another one with --api-key-env"
                )
        await before_first_request(options, store, base_url, api_key, simulator)
        store.set_meta("tokenizer", options.tokenizer)
        store.set_meta("profile", profile.name)
        if options.profile is None:
            store.set_meta(DETECTED_PROFILE, profile.name)
        try:
            generate = _generate
            if options.batch:  # the one place batch mode plugs in: the generation step
                from draftgen.generate.batch import generate_batch as generate
            progress = await generate(
                options,
                store,
                settings,
                profile,
                base_url,
                api_key,
                reconstruction.generation_started,
            )
        except BaseException:
            with contextlib.suppress(Exception):
                await reconstruction.finish(interrupted=True)
            raise
        finally:
            if simulator is not None:
                await simulator.close()
        await reconstruction.finish(interrupted=progress.stopped == "interrupted")
        # A store deleted after the last commit would otherwise end the run "done" with its rows
        # in a file nothing can open again.
        store.identity.check(store.db)
        return RunSummary(progress=progress, counts=store.counts(), stopped=progress.stopped)
    finally:
        store.close()


# What a reasoning answer runs to when the run sets no --max-tokens (about 4 characters a token):
# how much a run will encode, which decides how it is reconstructed.
TYPICAL_ANSWER_TOKENS = 2000
DETECTED_PROFILE = "detected_profile"  # store meta: the profile detected for meta "tokenizer"
TOKENIZER_DIGEST = "tokenizer_digest"  # store meta: tokenizer files and chat template, hashed


def run_profile(options: RunOptions) -> ModelProfile:
    """The run's model profile: ``options.profile``, or the one the tokenizer shows.

    The tokenizer is loaded here, before the first request, which is rendered with it: a bad
    tokenizer stops the run at once.
    """
    return tokenizer_profile(options.tokenizer, options.profile)


async def _start_embedded_simulator(options: RunOptions):
    from draftgen.simulator import SimConfig, start_simulator

    config = SimConfig(
        tokenizer=options.tokenizer,
        profile=options.profile,
        faults={"rate_limit": 0.02, "server_error": 0.02, "drop": 0.01, "empty": 0.02},
        quirks={"drift": 0.03, "leak_eot": 0.05, "no_split": 0.05, "strip_whitespace": 0.02},
        dialect=resolve_backend(options.backend).dialect,
        batch_faults=EMBEDDED_BATCH_FAULTS if options.batch else {},
    )
    return await start_simulator(config)


# Batch faults of the built-in simulator under --batch: every path of draftgen.generate.batch
# is taken.
EMBEDDED_BATCH_FAULTS = {"create_5xx": 0.05, "row_error": 0.02, "expire": 0.05, "get_5xx": 0.02}


def resolve_backend(name: str) -> Backend:
    try:
        return get_backend(name)
    except UnknownBackendError as exc:
        raise RunError(str(exc)) from None


async def _generate(
    options: RunOptions,
    store: Store,
    settings: GenerationSettings,
    profile: ModelProfile,
    base_url: str | list[EndpointSpec],
    api_key: str,
    started: threading.Event | None = None,
) -> RunProgress:
    """Generate every missing turn live (``engine.LiveGeneration``); ``started`` is set as the
    first request is sent. Batch mode's counterpart is ``batch.generate_batch``."""
    total_rows = count_rows(options.suite())
    engine = LiveGeneration(
        options, store, settings, profile, base_url, api_key, started, total_rows=total_rows
    )
    return await engine.run()


def open_existing(run_dir: Path) -> Store:
    try:
        return Store(run_dir, create=False)
    except StoreError as exc:
        raise RunError(str(exc)) from None

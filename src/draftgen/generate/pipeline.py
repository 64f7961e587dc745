"""The run: ingest -> plan -> generate -> store, then reconstruct -> verify, resumable at any point.

A resume plans everything again from the inputs, finds each turn's key in the store and requests
only what is missing, so nothing stored is bought twice. Conversations are worked as chains (turn
k+1 needs turn k's regenerated answer); identical turns in flight at once are requested once.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import urlparse

import orjson

from draftgen import __version__
from draftgen.backends import Backend, UnknownBackendError, get_backend
from draftgen.backends.openrouter import provider_problem
from draftgen.errors import DraftgenError
from draftgen.generate.budget import BudgetReached, SpendGuard
from draftgen.generate.client import (
    ChatClient,
    FatalApiError,
    GenerationFailed,
    RetryPolicy,
    RunStopped,
)
from draftgen.generate.endpoints import EndpointSpec, HealthPolicy, endpoint_label, endpoint_specs
from draftgen.generate.native_turn import native_turns
from draftgen.generate.probe import ProbeError, ProbeResult, probe_endpoints
from draftgen.generate.progress import ProgressDisplay, RunProgress
from draftgen.generate.resume import SourceIds, StoredTurns
from draftgen.inputs.ingest import Rejection
from draftgen.inputs.mix import DatasetSpec, MixError, Suite, count_suite, read_suite
from draftgen.inputs.plan import (
    NOTHING_TO_ANSWER,
    PlanCount,
    TurnPlan,
    build_messages,
    count_plan,
    plan_turns,
    sample_chains,
)
from draftgen.inputs.shard import ALL, Shard, shard_label
from draftgen.profiles import ModelProfile, get_profile
from draftgen.reconstruct.batch import reconstruct_batches
from draftgen.reconstruct.text import COMPLETE_FINISH_REASONS, strips_are_invisible
from draftgen.reconstruct.verify import PROVIDER_STRIPS_WHITESPACE, WHITESPACE_ALTERED
from draftgen.records import GenerationSettings
from draftgen.store.database import (
    REJECTED_NAME,
    CompletionWriter,
    RunLock,
    SampleTally,
    Store,
    StoreError,
)
from draftgen.tokens.rendering import ChatRenderer, request_variables, resolve_profile
from draftgen.tokens.tokenizer import load_tokenizer, tokenizer_digest

_log = logging.getLogger("draftgen.run")


class RunError(DraftgenError, RuntimeError):
    """A run that cannot start or must stop; the message says what to do."""


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
    idle_timeout: float = 300.0
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
    reasoning = None
    if options.reasoning_effort is not None:
        reasoning = {"effort": options.reasoning_effort}
    elif options.reasoning_max_tokens is not None:
        reasoning = {"max_tokens": options.reasoning_max_tokens}
    if options.backend != "openrouter" and (reasoning or options.provider):
        raise RunError(
            f"reasoning and [openrouter.provider] are OpenRouter request fields; --backend "
            f"{options.backend} does not take them, so drop them or use --backend openrouter"
        )
    if options.chat_template_kwargs and options.backend == "openrouter":
        raise RunError(
            "--chat-template-kwargs is for vLLM/SGLang (--backend vllm, sglang or "
            "sglang-generate); through OpenRouter the providers set the template's thinking "
            "switch from --reasoning-effort, so use that instead"
        )
    if options.samples < 1:
        raise RunError(f"--completions-per-turn {options.samples} must be at least 1")
    if options.provider is not None and (problem := provider_problem(options.provider)):
        raise RunError(f"openrouter.{problem}; fix [openrouter.provider]")
    return GenerationSettings(
        model=options.model,
        max_tokens=options.max_tokens,
        temperature=options.temperature,
        top_p=options.top_p,
        seed=options.seed,
        reasoning=reasoning,
        provider=options.provider,
        chat_template_kwargs=options.chat_template_kwargs or None,
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
    profile = run_profile(options)
    store = Store(options.out)
    lock = RunLock(options.out)
    lock.acquire()
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
        reconstruction = BackgroundReconstruction(options.out, options.tokenizer, profile)
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
        return RunSummary(progress=progress, counts=store.counts(), stopped=progress.stopped)
    finally:
        lock.release()
        store.close()


DETECTED_PROFILE = "detected_profile"  # store meta: the profile detected for meta "tokenizer"
TOKENIZER_DIGEST = "tokenizer_digest"  # store meta: tokenizer files and chat template, hashed


def run_profile(options: RunOptions) -> ModelProfile:
    """The run's model profile: ``options.profile``, or the one the tokenizer shows.

    The tokenizer is loaded here, before the first request, which is rendered with it: a bad
    tokenizer stops the run at once.
    """
    return resolve_profile(load_tokenizer(options.tokenizer), options.profile)


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
    """Generate every missing turn; ``started`` is set as the first request is sent."""
    progress = RunProgress(total_rows=count_rows(options.suite()))
    stored = StoredTurns(store)
    inflight: dict[str, asyncio.Future] = {}
    writer = CompletionWriter(store.path)
    queue: asyncio.Queue = asyncio.Queue(maxsize=max(16, options.concurrency))
    retry = RetryPolicy(max_attempts=options.max_attempts, base_delay=options.retry_base_delay)
    backend = resolve_backend(options.backend)
    stream = options.stream and backend.can_stream
    budget = None
    if options.max_cost is not None:
        counts = store.counts()
        budget = SpendGuard(options.max_cost, counts["cost"], counts["completions"])
    client = ChatClient(
        base_url,
        api_key,
        concurrency=options.concurrency,
        retry=retry,
        idle_timeout=options.idle_timeout,
        max_retries=options.max_retries,
        budget=budget,
        backend=backend,
        endpoint_concurrency=options.endpoint_concurrency,
        health=options.endpoint_health,
        on_endpoint_event=writer.note_endpoint_event,
    )
    stop = asyncio.Event()

    def request_stop(reason: str) -> None:
        if not stop.is_set():
            progress.stopped = reason
            client.stop(reason)
            stop.set()

    progress.watch(
        errors=client.stats.errors,
        retried=client.stats.retried,
        failures=writer.failure_reasons,
        in_flight=lambda: client.limiter.in_flight,
        tally=SampleTally(store.path),
    )
    tokenizer = load_tokenizer(options.tokenizer)
    renderer = ChatRenderer(tokenizer, profile)
    variables = request_variables(settings, profile)
    native = native_turns(options.tokenizer, options.profile) if backend.needs_prompt_ids else None
    # One thread renders prompts off the event loop, first come first served: requests leave in
    # the order they were built, so a run is repeatable (rendering holds the GIL anyway).
    render_pool = ThreadPoolExecutor(1, thread_name_prefix="draftgen-render")
    rejected = open(options.out / REJECTED_NAME, "wb")
    seen_ids = SourceIds()

    async def generate_turn(plan: TurnPlan, answers: list[str]) -> tuple[str, str | None]:
        messages = build_messages(plan, answers)
        # The prompt is rendered once, here, as the server will render it, and stored with the
        # completion: reconstruction and export read this record, never a new rendering.
        loop = asyncio.get_running_loop()
        rendering = await loop.run_in_executor(
            render_pool, renderer.render, messages, plan.tools, variables
        )
        prompt = None
        if native is not None:  # a server that generates from ids is sent this rendering's
            if rendering.error:
                reason = f"prompt_render_failed: {rendering.error}"
                await writer.add_failure(plan.key, plan.source_id, plan.turn, reason, 0, [])
                progress.turns_failed += 1
                raise GenerationFailed(reason, [])
            prompt = await loop.run_in_executor(render_pool, native.prompt, rendering)
        body = orjson.dumps(
            backend.request_body(
                settings.for_sample(plan.sample),
                messages,
                plan.tools,
                stream,
                options.logprobs,
                **({"prompt": prompt} if prompt else {}),
            )
        )
        request = orjson.dumps(
            {"messages": messages, "tools": plan.tools, "rendering": rendering.as_dict()}
        )
        if started is not None:
            started.set()
        began = time.monotonic()
        try:
            completion, errors = await client.complete(body, stream)
        except GenerationFailed as exc:
            attempts = len(exc.errors)
            await writer.add_failure(
                plan.key,
                plan.source_id,
                plan.turn,
                exc.reason,
                attempts,
                [e.as_dict() for e in exc.errors],
            )
            progress.turns_failed += 1
            raise
        if native is not None:
            completion = await asyncio.to_thread(native.read, completion, prompt)
        await writer.add_completion(
            plan.key,
            plan.source_id,
            plan.turn,
            request,
            completion,
            len(errors) + 1,
            [e.as_dict() for e in errors],
            time.monotonic() - began,
        )
        progress.record_completion(
            completion.prompt_tokens, completion.completion_tokens, completion.cost
        )
        return completion.content or "", completion.finish_reason

    async def answer(plan: TurnPlan, answers: list[str], history: bool) -> tuple[str, bool]:
        """The turn's content (read from the store only if ``history``) and whether the answer
        is a whole turn, generated unless stored or in flight."""
        if plan.key in stored:
            progress.count_stored_turn(stored.from_earlier_run(plan.key))
            return stored.content(plan.key) if history else "", stored.complete(plan.key)
        if plan.key in inflight:
            progress.turns_duplicate += 1
            return await asyncio.shield(inflight[plan.key])
        future = asyncio.get_running_loop().create_future()
        future.add_done_callback(lambda f: f.cancelled() or f.exception())
        inflight[plan.key] = future
        try:
            content, finish = await generate_turn(plan, answers)
        except BaseException as exc:
            if not future.done():
                future.set_exception(exc) if isinstance(exc, Exception) else future.cancel()
            raise
        finally:
            inflight.pop(plan.key, None)
        result = content, finish in COMPLETE_FINISH_REASONS
        stored.add(plan.key, result[1])
        future.set_result(result)
        return result

    async def work_chain(plans: list[TurnPlan]) -> None:
        if options.samples == 1:
            await work_sample(plans)
            return
        # The client's limiter bounds requests in flight, so a row's samples run side by side.
        await asyncio.gather(*(work_sample(c) for c in sample_chains(plans, options.samples)))

    async def work_sample(plans: list[TurnPlan]) -> None:
        answers: list[str] = []
        for index, plan in enumerate(plans):
            if stop.is_set():
                return
            try:
                content, complete = await answer(plan, answers, history=index + 1 < len(plans))
            except RunStopped:
                return
            except BudgetReached as exc:
                request_stop(str(exc))
                return
            except GenerationFailed:
                await _fail_rest(plans[index + 1 :], "earlier_turn_failed")
                return
            if not complete and index + 1 < len(plans):
                await _fail_rest(plans[index + 1 :], "earlier_turn_incomplete")
                return
            answers.append(content)

    async def _fail_rest(plans: list[TurnPlan], reason: str) -> None:
        for plan in plans:
            if plan.key not in stored:
                await writer.add_failure(plan.key, plan.source_id, plan.turn, reason, 0, [])
                progress.turns_failed += 1

    async def next_chain() -> list[TurnPlan] | None:
        if stop.is_set():
            return None
        try:
            return queue.get_nowait()  # the common case: no tasks to race against the stop
        except asyncio.QueueEmpty:
            pass
        getter = asyncio.ensure_future(queue.get())
        stopped = asyncio.ensure_future(stop.wait())
        await asyncio.wait((getter, stopped), return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        if getter.done():
            return getter.result()
        getter.cancel()
        return None

    async def worker() -> None:
        while (plans := await next_chain()) is not None:
            await work_chain(plans)
            if not stop.is_set():
                progress.row_worked()
            display.refresh()

    async def produce() -> None:
        for item in read_suite(options.suite()):
            if isinstance(item, Rejection):
                _reject(item)
                continue
            plans = plan_turns(item)
            # Checked on every row, whichever shard it is in, so each shard rejects the same.
            problem = seen_ids.duplicate_problem(item, plans) or (
                None if plans else NOTHING_TO_ANSWER
            )
            if problem:
                _reject(Rejection(item.input, item.line, problem))
                continue
            if options.shard is not None and not options.shard.holds_key(plans[0].key):
                progress.total_rows -= 1  # another shard's row
                continue
            chains = sample_chains(plans, options.samples)
            if all(_all_stored(c, stored) for c in chains):
                # A resume: what a worker would do with this chain is count it, so do it here
                # and reach the first missing turn without a queue round trip per stored row.
                progress.count_stored_turns(
                    stored.from_earlier_run(plan.key) for chain in chains for plan in chain
                )
                progress.rows_done += 1
                if progress.rows_done % 512 == 0:
                    await asyncio.sleep(0)  # let signals, workers and the display in
                    display.refresh()
                continue
            await queue.put(plans)
            display.refresh()
        for _ in range(options.concurrency):
            await queue.put(None)

    def _reject(rejection: Rejection) -> None:
        shard = options.shard
        if shard is not None and not shard.holds_line(rejection.input, rejection.line):
            progress.total_rows -= 1
            return
        rejected.write(rejection.as_json() + b"\n")
        progress.rejected += 1
        progress.rows_done += 1

    display = ProgressDisplay(progress, interval=options.progress_interval)
    loop = asyncio.get_running_loop()
    try:
        async with client:
            with display:
                tasks = [asyncio.create_task(worker()) for _ in range(options.concurrency)]
                producer = asyncio.create_task(produce())

                def abandon() -> None:
                    for task in tasks:
                        task.cancel()

                def on_interrupt() -> None:
                    if stop.is_set():
                        print("draftgen: abandoning the requests in flight", file=sys.stderr)
                        abandon()
                        return
                    request_stop("interrupted")
                    producer.cancel()
                    print(
                        f"draftgen: stopping; waiting up to {options.shutdown_grace:.0f} s for "
                        f"{client.limiter.in_flight} requests in flight (Ctrl-C again to abandon "
                        "them)",
                        file=sys.stderr,
                    )
                    loop.call_later(options.shutdown_grace, abandon)

                def on_producer_done(task: asyncio.Task) -> None:
                    if not task.cancelled() and task.exception() is not None:
                        abandon()  # an unreadable input: the workers would wait forever

                producer.add_done_callback(on_producer_done)
                for signum in (signal.SIGINT, signal.SIGTERM):
                    loop.add_signal_handler(signum, on_interrupt)
                try:
                    await asyncio.gather(*tasks)
                    if producer.done() and not producer.cancelled() and producer.exception():
                        raise producer.exception()
                except asyncio.CancelledError:
                    if producer.done() and not producer.cancelled() and producer.exception():
                        raise producer.exception() from None
                    if not stop.is_set():
                        raise
                except FatalApiError as exc:
                    raise RunError(
                        f"stopped: {exc}; everything generated so far is stored in {options.out} "
                        "and the same command resumes"
                    ) from None
                except StoreError as exc:
                    raise RunError(
                        f"{exc}; what was committed before is safe: fix the cause (disk space, "
                        "permissions) and rerun the same command to resume"
                    ) from None
                finally:
                    for signum in (signal.SIGINT, signal.SIGTERM):
                        loop.remove_signal_handler(signum)
                    for task in (producer, *tasks):
                        task.cancel()
                    await asyncio.gather(producer, *tasks, return_exceptions=True)
    finally:
        rejected.close()
        seen_ids.close()
        render_pool.shutdown(wait=False, cancel_futures=True)
        await asyncio.to_thread(writer.close)
    return progress


def _all_stored(plans: list[TurnPlan], stored: StoredTurns) -> bool:
    """Whether every turn is stored and all but the last complete (nothing left to do)."""
    last = len(plans) - 1
    return all(
        stored.complete(plan.key) if index < last else plan.key in stored
        for index, plan in enumerate(plans)
    )


def reconstruct_all(
    store: Store,
    tokenizer_spec: str,
    profile: ModelProfile,
    batch: int = 256,
    follow: threading.Event | None = None,
    stop: threading.Event | None = None,
) -> int:
    """Build and verify a sample for each completion without one (all, if the tokenizer changed).

    With ``follow``, completions a running generation stores are taken as they come, until
    ``follow`` is set; ``stop`` ends early (what is made is kept, the rest waits for a resume).
    """
    fingerprint = f"{tokenizer_spec}|{profile.name}|{__version__}"
    if store.meta("reconstruction") != fingerprint:
        store.clear_samples()
        store.set_meta("reconstruction", fingerprint)
    tokenizer = load_tokenizer(tokenizer_spec)
    made = 0
    # Batches are read, encoded on every core and written in turn: memory holds two batches.
    pending = store.pending_completions(batch, follow=follow, stop=stop)
    for samples in reconstruct_batches(pending, tokenizer, profile):
        store.add_samples(samples)
        made += len(samples)
    flag_invisible_strips(store, tokenizer, profile)
    return made


class BackgroundReconstruction:
    """``reconstruct_all`` in a thread of its own, following the completions a run stores.

    Its own connection reads what the writer commits; the Rust encoder releases the GIL, so
    reconstruction overlaps generation instead of waiting for it, and the event loop never
    runs tokenizer or SQLite work.
    """

    def __init__(self, run_dir: Path, tokenizer_spec: str, profile: ModelProfile) -> None:
        # Nothing is new to reconstruct before the first request, and waiting for it keeps the
        # tokenizer's load (GIL-bound imports) off a resume's way to its first missing turn.
        self.generation_started = threading.Event()
        self.generation_done = threading.Event()
        self.stop = threading.Event()
        self._task = asyncio.ensure_future(
            asyncio.to_thread(self._run, run_dir, tokenizer_spec, profile)
        )

    def _run(self, run_dir: Path, tokenizer_spec: str, profile: ModelProfile) -> int:
        self.generation_started.wait()
        store = Store(run_dir)
        try:
            return reconstruct_all(
                store, tokenizer_spec, profile, follow=self.generation_done, stop=self.stop
            )
        finally:
            store.close()

    async def finish(self, interrupted: bool = False) -> int:
        """Wait for the rest to be reconstructed (for the batch in hand only, if interrupted)."""
        if interrupted:
            self.stop.set()
        self.generation_done.set()
        self.generation_started.set()
        return await asyncio.shield(self._task)


def flag_invisible_strips(store: Store, tokenizer, profile: ModelProfile) -> int:
    """Unverify samples of providers seen stripping whitespace where a strip would not show.

    A provider is suspected when a count mismatch of its is explained by restored edge
    whitespace and it never returned content with edge whitespace. (A mismatch alone is weak
    evidence: a non-canonical segmentation can look the same.) Stripping is code, so it is a
    property of the provider, not of one response.
    """
    strippers = store.providers_with_reason(WHITESPACE_ALTERED)
    strippers -= store.providers_keeping_edge_whitespace()
    keys, contents = [], []
    for key, content in store.verified_contents(strippers):
        while content.endswith(profile.end_of_turn):
            content = content[: -len(profile.end_of_turn)]
        keys.append(key)
        contents.append(content)
    detail = "this provider strips whitespace and a strip here leaves the count unchanged"
    invisible = strips_are_invisible(contents, tokenizer)  # encoded in batches, not one by one
    flags = [
        (key, PROVIDER_STRIPS_WHITESPACE, detail)
        for key, hidden in zip(keys, invisible, strict=True)
        if hidden
    ]
    if flags:
        store.flag_samples(flags)
    return len(flags)


def reconstruct_pending(store: Store) -> int:
    """Reconstruct completions a run stored but did not reach (an interrupted run)."""
    spec, name = store.meta("tokenizer"), store.meta("profile")
    if not spec or not name or not store.counts()["unreconstructed"]:
        return 0
    return reconstruct_all(store, spec, get_profile(name))


def open_existing(run_dir: Path) -> Store:
    try:
        return Store(run_dir, create=False)
    except StoreError as exc:
        raise RunError(str(exc)) from None

"""The run: ingest -> plan -> generate -> store, then reconstruct -> verify, resumable at any point.

A resume plans everything again from the inputs, finds each turn's key in the store and requests
only what is missing, so nothing stored is bought twice. The options are resolved once into a
``RunContext``; the requests are the engine's (``generate.contract.Engine``: live or batch).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
from dataclasses import replace
from pathlib import Path
from urllib.parse import urlparse

import orjson

from draftgen.generate.contract import Destination, Engine
from draftgen.generate.endpoints import EndpointSpec, endpoint_label, endpoint_specs
from draftgen.generate.engine import Live
from draftgen.generate.errors import RunError
from draftgen.generate.progress import RunProgress
from draftgen.generate.signals import SignalStop
from draftgen.inputs.admission import count_plan
from draftgen.inputs.mix import MixError, read_suite
from draftgen.inputs.plan import PlanCount
from draftgen.inputs.shard import ALL, Shard, shard_label
from draftgen.options import NO_ENDPOINT, SIMULATE_AND_ENDPOINT, RunOptions
from draftgen.profiles import DERIVED_LAYOUT, ModelProfile
from draftgen.reconstruct.background import BackgroundReconstruction
from draftgen.reconstruct.resplits import proof_figures
from draftgen.run.context import RunContext
from draftgen.run.outcome import RunSummary
from draftgen.run.probe import ProbeError, ProbeResult, probe_endpoints
from draftgen.run.rebuy import rebuy_spoiled
from draftgen.store.database import DB_NAME, LOCK_NAME, REJECTED_NAME, Store
from draftgen.store.mapped import waiting_out_bus_errors
from draftgen.tokens.tokenizer import tokenizer_digest

_log = logging.getLogger("draftgen.run")


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
    None for the built-in simulator (``simulate``), which is chosen, never the default."""
    if options.endpoints and options.base_url:
        raise RunError(
            "--base-url and [[backend.endpoints]] both name endpoints; list them in one place"
        )
    if options.simulate and (options.endpoints or options.base_url):
        raise RunError(SIMULATE_AND_ENDPOINT)
    if options.simulate:
        return None
    if options.endpoints:
        specs = list(options.endpoints)
    elif options.base_url:
        specs = endpoint_specs(options.base_url)
    else:
        raise RunError(NO_ENDPOINT)
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


def check_shard(store: Store, shard: Shard | None, out: Path) -> None:
    """Record which shard a new run directory holds, or refuse a resume with another one."""
    wanted = shard_label(shard)
    # A store from before shards existed, already used, read every row.
    recorded = store.settings.meta("shard") or (
        ALL if store.settings.meta("settings") is not None else None
    )
    if recorded in (None, wanted):
        store.settings.set_meta("shard", wanted)
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
    ctx: RunContext, store: Store, destination: Destination, simulator=None
) -> tuple[PlanCount, list[ProbeResult]]:
    """Probe every endpoint, then count the plan: an endpoint that cannot be reached or refuses
    the key, a model it lacks, or an input with nothing to answer stops the run here, in
    seconds and before any request (``simulator``, if given, is closed then). The plan, and
    what answers at each endpoint."""
    options = ctx.options
    try:
        probed = await probe_endpoints(
            destination.base_url,
            destination.api_key,
            options.model,
            ctx.backend.dialect,
            key_variable=options.api_key_env,
            simulated=simulator is not None,
        )
        planned = plan_run(ctx)
    except BaseException as exc:
        if simulator is not None:
            await simulator.close()
        if isinstance(exc, ProbeError):
            raise RunError(str(exc)) from None
        raise
    store.settings.set_meta(
        SOURCES, _merged_sources(store.settings.meta(SOURCES), probed, simulator is not None)
    )
    if simulator is not None:
        # Status, the report and every export say the data is synthetic.
        store.settings.mark_simulated()
    where = (
        "the built-in simulator on loopback: the data is synthetic (--simulate)"
        if simulator is not None
        else ", ".join(f"{r.endpoint} ({r.server}: {r.checked})" for r in probed)
    )
    _log.info("sending to %s", where)
    stored = min(store.tables.row_count("completions"), planned.requests)
    _log.info(
        describe_plan(planned, options.out / REJECTED_NAME, stored),
        extra=_plan_fields(planned, stored),
    )
    return planned, probed


def plan_run(ctx: RunContext) -> PlanCount:
    """Count what the run will ask for, reading the inputs once, and list the rejected rows in
    ``RUN_DIR/rejected.jsonl``; a RunError if no row has anything to answer."""
    options = ctx.options
    try:
        rows = read_suite(ctx.suite)
        planned = count_plan(rows, options.samples, options.shard, options.out / REJECTED_NAME)
    except MixError as exc:
        raise RunError(str(exc)) from None
    if planned.rows == 0:
        inputs = ", ".join(str(s.path) for s in ctx.suite.datasets)
        raise RunError(f"nothing to generate: the input holds no rows ({inputs})")
    if planned.answerable == 0:
        first = planned.first_rejected
        example = (
            f" (the first, line {first.line} of {first.input}: {first.reason})" if first else ""
        )
        which = f"all {planned.rows} rows of the input were"
        if planned.rows == 1:
            which = "the only row of the input was"
        raise RunError(
            f"nothing to generate: {which} rejected{example}; every row's reason is in "
            f"{options.out / REJECTED_NAME}"
        )
    return planned


def describe_plan(planned: PlanCount, rejected_path: Path, stored: int = 0) -> str:
    """What the run will ask for; ``stored``: completions an earlier run left in the directory
    (a resume sends only the rest)."""
    per_turn = planned.completions_per_turn
    text = f"planned {planned.requests} requests"
    if stored:
        text += f", {stored} already stored, at most {planned.requests - stored} to send"
    text += (
        f": {planned.turns} turns of {planned.shard_rows} "
        f"rows x {per_turn} completion{'s' if per_turn > 1 else ''} per turn"
    )
    if planned.rejected:
        text += f"; {planned.rejected} rows rejected (reasons in {rejected_path})"
    return text + "; identical turns are sent once, and turns already stored not again"


def _plan_fields(planned: PlanCount, stored: int = 0) -> dict:
    return {
        "planned_requests": planned.requests,
        "already_stored": stored,
        "to_send": planned.requests - stored,
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
    if options.out is None:  # refused by the CLI before it gets here; a Python caller too
        raise RunError("no run directory given: pass out= (--out, or out = ... in draftgen.toml)")
    ctx = RunContext.build(options)
    reconstruction = BackgroundReconstruction(
        options.out, options.tokenizer, options.profile, ctx.expected_chars
    )
    try:
        # The store's -shm made immutable under the run: its writes wait, no SIGBUS kills it.
        with waiting_out_bus_errors(options.out):
            return await _run(ctx, reconstruction)
    finally:
        reconstruction.cancel()  # a run that stopped before its first request


async def _run(ctx: RunContext, reconstruction: BackgroundReconstruction) -> RunSummary:
    """``run`` once its reconstruction is on its way."""
    options = ctx.options
    # The tokenizer is loaded here, before the first request, which is rendered with it: a bad
    # tokenizer stops the run at once.
    profile = ctx.profile
    # The refusals that need no store come first: a run refused there makes no directory.
    base_url, api_key = _checked_destination(ctx)
    made = _first_missing(options.out)
    new_store = not (options.out / DB_NAME).exists()
    # Locked against other runs, its files checked, what a lost store or a full disk left taken
    # back; closing the store lets go of the lock.
    store = Store.open_run(options.out)
    refused = True  # until the first request: a refusal leaves no directory it made behind
    try:
        check_shard(store, options.shard, options.out)
        store.settings.check_settings(ctx.settings.as_dict())
        store.settings.check_identity(
            TOKENIZER_DIGEST, tokenizer_digest(options.tokenizer), "tokenizer"
        )
        simulator = None
        if base_url is None:
            simulator = await _start_embedded_simulator(ctx)
            # Any bearer token passes; not a word that log redaction would then mask everywhere.
            base_url, api_key = simulator.base_url, "draftgen-embedded-simulator-key"
        destination = Destination(base_url, api_key)
        _, probed = await before_first_request(ctx, store, destination, simulator)
        # The servers answering, for the engine's proof probe (``generate.proof``).
        destination = replace(destination, servers=tuple(r.server for r in probed))
        _record_tokenizer_and_profile(ctx, store, profile)
        refused = False
        try:
            progress, ending = await _generate(ctx, store, destination, reconstruction)
        finally:
            if simulator is not None:
                await simulator.close()
        # A store deleted after the last commit would otherwise end the run "done" with its rows
        # in a file nothing can open again.
        store.identity.check(store.db)
        counts = store.tallies.counts()
        counts["proofs"] = proof_figures(store)  # the run's last words are what status says
        return RunSummary(progress, counts, stopped=ending.stopped, signal=ending.signal)
    finally:
        if refused and new_store:
            _remove_unused(store, made)
        store.close()


def _checked_destination(ctx: RunContext) -> tuple[list[EndpointSpec] | None, str | None]:
    """The endpoints the run sends to (None: the built-in simulator) and the API key, refused
    before any store is made: a URL that is not http(s) or sends the key in clear, a key the
    backend needs that is not there."""
    options = ctx.options
    base_url, api_key = run_endpoints(options), os.environ.get(options.api_key_env)
    if base_url is not None:
        for spec in base_url:
            check_base_url(spec.url, options.allow_insecure_http)
        _warn_of_a_test_tokenizer(options.tokenizer, base_url)
        if not api_key and ctx.backend.needs_api_key:
            state = "is empty" if options.api_key_env in os.environ else "is not set"
            raise RunError(
                f"environment variable {options.api_key_env} {state}; export your API key "
                "in it or name another one with --api-key-env"
            )
    return base_url, api_key


def _warn_of_a_test_tokenizer(tokenizer: str, endpoints: list[EndpointSpec]) -> None:
    """A ``fixture:`` tokenizer (draftgen init's example, for --simulate) sent to a server off this
    machine: its vocabulary is a test stand-in, so the samples would be proven against ids the
    model does not have."""
    remote = [s.url for s in endpoints if not _is_loopback(urlparse(s.url).hostname or "")]
    if tokenizer.startswith("fixture:") and remote:
        _log.warning(
            "the tokenizer %s is a test fixture, not the model's own, and %s is not this machine: "
            "set tokenizer to the model's hub id or a downloaded copy (draftgen.toml's tokenizer, "
            "or --tokenizer) so the samples are the model's ids",
            tokenizer,
            endpoint_label(remote[0]),
        )


def _record_tokenizer_and_profile(ctx: RunContext, store: Store, profile: ModelProfile) -> None:
    """What a resume, an export and status read back: the tokenizer, the profile (and that it was
    detected, when no --profile was given), the generic profile's derived layout."""
    options = ctx.options
    store.settings.set_meta("tokenizer", options.tokenizer)
    store.settings.set_meta("profile", profile.name)
    if options.profile is None:
        store.settings.set_meta(DETECTED_PROFILE, profile.name)
    if profile.derived is not None:
        # The generic profile: a resume, an export and status read the layout kept here.
        store.settings.set_meta(DERIVED_LAYOUT, orjson.dumps(profile.derived.to_json()).decode())
        _log.info(
            "layout derived from the chat template (profile generic): %s",
            "; ".join(profile.derived.describe()),
        )


async def _generate(
    ctx: RunContext,
    store: Store,
    destination: Destination,
    reconstruction: BackgroundReconstruction,
) -> tuple[RunProgress, RunProgress]:
    """The requests (live or batch) with reconstruction finished behind them, then the re-buys
    of spoiled completions: the progress, and the progress of the stage that ended the run (the
    re-buys' if they stopped it), whose ``stopped`` and ``signal`` say why."""
    engine = choose_engine(ctx.options)
    tail = _RunTail(reconstruction)
    with SignalStop.afterwards(asyncio.get_running_loop(), tail.on_signal):
        try:
            progress = await engine.generate(
                ctx, store, destination, reconstruction.generation_started
            )
        except BaseException:
            with contextlib.suppress(Exception):
                await reconstruction.finish(interrupted=True)
            raise
        tail.hand_over(progress)
        await reconstruction.finish(interrupted=progress.stopped == "interrupted")
    _last_progress_line(progress)
    if progress.stopped is None and (
        bought := await rebuy_spoiled(ctx, store, destination, engine)
    ):
        return progress, bought[1]
    return progress, progress


def _last_progress_line(progress: RunProgress) -> None:
    """The progress line again once reconstruction is done, if its samples moved since the
    engine's last line (written as the requests ended, with the samples rebuilt by then): the
    last line then shows the figures the summary prints after it."""
    tally = progress.tally
    if tally is None:
        return
    before = (tally.samples, tally.verified)
    tally.recount()
    if (tally.samples, tally.verified) != before:
        logging.getLogger("draftgen.progress").info(progress.line(), extra=progress.fields())


class _RunTail:
    """A signal after the engine let go of them (its last rows written, the reconstruction's
    rest): answered at once; reconstruction stops after the text in hand (the encoder releases
    the loop, so the word is printed while it ends) and the run ends interrupted."""

    def __init__(self, reconstruction: BackgroundReconstruction) -> None:
        self.reconstruction = reconstruction
        self.progress: RunProgress | None = None
        self.signal: int | None = None

    def on_signal(self, signum: int) -> None:
        if self.signal is None:
            self.signal = signum
            self.reconstruction.stop()
            self.hand_over(self.progress)
        SignalStop.say(
            "draftgen: interrupted; reconstruction stops after the text in hand, every "
            "completion is stored and the same command reconstructs the rest"
        )

    def hand_over(self, progress: RunProgress | None) -> None:
        """The engine's progress, which an interrupt heard before or after marks interrupted."""
        self.progress = progress
        if progress is not None and self.signal is not None and progress.signal is None:
            progress.signal, progress.stopped = self.signal, "interrupted"


# The files a run's store makes in its directory (SQLite's beside its database).
STORE_FILES = frozenset(
    {LOCK_NAME, DB_NAME, *(DB_NAME + suffix for suffix in ("-wal", "-shm", "-journal"))}
)


def _first_missing(path: Path) -> Path | None:
    """The outermost of ``path`` and its parents that does not exist (None: ``path`` does)."""
    missing = None
    for directory in (path, *path.parents):
        if directory.exists():
            return missing
        missing = directory
    return missing


def _remove_unused(store: Store, made: Path | None) -> None:
    """After a refusal before the first request, what this run made for a store that holds
    nothing: the store's files (removed with the lock still held), then the directory and the
    parents made for it (``made``: the outermost; None if it existed), each only if empty. A
    ``rejected.jsonl`` keeps it all: the refusal names it."""
    run_dir = store.run_dir
    try:
        if not store.settings.holds_nothing() or (run_dir / REJECTED_NAME).exists():
            return
        store.db.close()
        for name in STORE_FILES - {LOCK_NAME}:
            (run_dir / name).unlink(missing_ok=True)
        if store.lock is not None and store.lock.made_file:
            (run_dir / LOCK_NAME).unlink(missing_ok=True)
    except Exception:  # a file left behind is the lesser harm
        return
    store.close()  # lets go of the lock: the directory may go
    if made is None:
        return
    for directory in (run_dir, *run_dir.parents):
        try:
            directory.rmdir()  # only ever an empty one
        except OSError:
            return
        if directory == made:
            return


def choose_engine(options: RunOptions) -> Engine:
    """The one place batch mode plugs in: the engine that generates (live, or batches)."""
    if options.batch:
        from draftgen.generate.batch import Batch

        return Batch()
    return Live()


DETECTED_PROFILE = "detected_profile"  # store meta: the profile detected for meta "tokenizer"
TOKENIZER_DIGEST = "tokenizer_digest"  # store meta: tokenizer files and chat template, hashed


async def _start_embedded_simulator(ctx: RunContext):
    from draftgen.simulator import SimConfig, start_simulator

    options = ctx.options
    config = SimConfig(
        tokenizer=options.tokenizer,
        profile=options.profile,
        faults={"rate_limit": 0.02, "server_error": 0.02, "drop": 0.01, "empty": 0.02},
        quirks={"drift": 0.03, "leak_eot": 0.05, "no_split": 0.05, "strip_whitespace": 0.02},
        dialect=ctx.backend.dialect,
        batch_faults=EMBEDDED_BATCH_FAULTS if options.batch else {},
    )
    return await start_simulator(config)


# Batch faults of the built-in simulator under --batch: every path of draftgen.generate.batch
# is taken.
EMBEDDED_BATCH_FAULTS = {"create_5xx": 0.05, "row_error": 0.02, "expire": 0.05, "get_5xx": 0.02}

"""Reconstruction of a run's completions into verified samples, while the run goes on.

``reconstruct_all`` turns every stored completion without a sample into one (the tokenizer's work
batched, ``reconstruct.batch``). ``BackgroundReconstruction`` runs it beside a live or batch
generation, following what the generation stores: in a thread for a small run, in a process of
its own for a big one. Reconstruction is Python that holds the GIL (reading the store, building
readings, verifying, writing samples), so in a thread it takes turns with the event loop, the
prompt rendering and the store's writer; in its own process it has a core of its own.
"""

from __future__ import annotations

import asyncio
import logging
import logging.handlers
import multiprocessing
import os
import pickle
import signal
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from draftgen import __version__
from draftgen.errors import DraftgenError
from draftgen.profiles import DERIVED_LAYOUT, ModelProfile, run_profile_named
from draftgen.reconstruct.batch import reconstruct_batches
from draftgen.reconstruct.reasons import (
    COMPLETION_COUNT_MISMATCH,
    PROMPT_RENDERER_UNPROVEN,
    PROVIDER_RESERIALISES_TOOL_ARGUMENTS,
    PROVIDER_STRIPS_WHITESPACE,
    TOOL_ARGUMENTS_RESERIALISED,
    WHITESPACE_ALTERED,
)
from draftgen.reconstruct.renderer_doubt import unproven_renderings
from draftgen.reconstruct.resplits import record_pairs, stored_pairs
from draftgen.reconstruct.text import strips_are_invisible
from draftgen.reconstruct.tool_rewrites import (
    ESCAPED_TEXT,
    KEY_ORDER_LIMIT,
    SORTED_KEYS,
    call_marks,
    inverse_calls,
    keeps_unsorted_keys,
    spellings_at_count,
)
from draftgen.reconstruct.verify import (
    REPAIR_WOULD_MATCH,
    RESPLIT_OR_ALTERED,
)
from draftgen.store.calibration import (
    RENDERER,
    RENDERS_AS_DRAFTGEN,
    RENDERS_OTHERWISE,
    REWRITES_ARGUMENTS,
    TOOL_ARGUMENTS,
    providers_with,
)
from draftgen.store.database import Store
from draftgen.store.mapped import waiting_out_bus_errors
from draftgen.tokens import fast_encoder
from draftgen.tokens.long_text import EncodingStopped
from draftgen.tokens.rendering import template_renderer, tokenizer_profile
from draftgen.tokens.tokenizer import load_tokenizer

# A run that will encode this many characters or more reconstructs in a process of its own: the
# process's start (an interpreter, transformers, the tokenizer: ~2 s of a core) is then a small
# part of what reconstruction costs (~0.5 ms of Python a sample, ~1,000 answers of 2,000 tokens).
PROCESS_FROM_CHARS = 8_000_000
# "thread" or "process" forces where a run reconstructs, whatever its size (tests, benchmarks).
WHERE_ENV = "DRAFTGEN_RECONSTRUCT"


class ReconstructionError(DraftgenError, RuntimeError):
    """The reconstruction process ended without a result (killed, out of memory)."""


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
    ``follow`` is set; ``stop`` ends early (what is made is kept, the rest waits for a resume),
    within a long text's encode too.
    """
    fingerprint = f"{tokenizer_spec}|{profile.name}|{__version__}"
    if store.settings.meta("reconstruction") != fingerprint:
        store.samples.restart_samples(fingerprint)
    tokenizer = load_tokenizer(tokenizer_spec)
    made = 0
    # Batches are read, encoded on every core, reconstructed and written in turn; a batch's
    # samples are written by a thread of their own while the next batch is reconstructed
    # (SQLite releases the GIL while it writes): memory holds four batches.
    pending = store.completions.pending_completions(batch, follow=follow, stop=stop)
    try:
        with SampleWriter(store.run_dir) as writer:
            for samples in reconstruct_batches(pending, tokenizer, profile, stop):
                writer.add(samples)
                made += len(samples)
    except EncodingStopped:
        return made  # stopped inside a long text: its batch is left unreconstructed
    flag_invisible_strips(store, tokenizer, profile)
    flag_unproven_renderers(store, tokenizer, profile)
    flag_reserialising_providers(store, tokenizer, profile)
    if made or stored_pairs(store) is None:
        measure_resplits(store, tokenizer)
    return made


def measure_resplits(store: Store, tokenizer) -> None:
    """Measure what a count cannot see, for status and the report (``resplits``): a figure of
    the run, never a reason for its reconstruction to fail."""
    try:
        record_pairs(store, tokenizer)
    except Exception as exc:  # an estimate, not the samples: say so and go on
        logging.getLogger("draftgen.reconstruct").warning(
            "the text proof's re-splits could not be measured (%s: %s); status shows them as "
            "not measured",
            type(exc).__name__,
            exc,
        )


class SampleWriter:
    """Writes batches of samples in a thread, on a connection of its own, one batch behind.

    A write's error is raised by the next ``add`` or on leaving the ``with`` block, which waits
    for the last batch to be written.
    """

    def __init__(self, run_dir: Path) -> None:
        self._store = Store(run_dir, create=False)
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="draftgen-samples")
        self._writing: Future | None = None

    def add(self, samples: list) -> None:
        self._wait()
        self._writing = self._pool.submit(self._store.samples.add_samples, samples)

    def _wait(self) -> None:
        if self._writing is not None:
            writing, self._writing = self._writing, None
            writing.result()

    def __enter__(self) -> SampleWriter:
        return self

    def __exit__(self, exc_type: type | None, *_: object) -> None:
        try:
            if exc_type is None:
                self._wait()
            elif self._writing is not None:
                self._writing.exception()  # written or not: the error on its way is the one
        finally:
            self._pool.shutdown()
            self._store.close()


def flag_invisible_strips(store: Store, tokenizer, profile: ModelProfile) -> int:
    """Name the strips of providers seen stripping whitespace, and unverify their samples where
    a strip would not show.

    A provider is suspected when a count mismatch of its is explained by restored edge
    whitespace and it never returned content with edge whitespace. (A mismatch alone is weak
    evidence: a non-canonical segmentation can look the same, and vLLM never strips.) Stripping
    is code, so it is a property of the provider, not of one response: its mismatches that a
    repair explains become ``whitespace_altered``, the others' stay count mismatches.
    """
    # Samples whose completion count differs and whose detail says restored edge whitespace
    # would match it (``verify.REPAIR_WOULD_MATCH``), by provider.
    explained = store.samples.details_by_provider(COMPLETION_COUNT_MISMATCH, REPAIR_WOULD_MATCH)
    strippers = store.samples.providers_with_reason(WHITESPACE_ALTERED) | set(explained)
    strippers -= store.samples.providers_keeping_edge_whitespace()
    named = [
        (key, WHITESPACE_ALTERED, detail.replace(f"{RESPLIT_OR_ALTERED}; ", "") + STRIPPER_EVIDENCE)
        for provider in sorted(strippers)
        for key, detail in explained.get(provider, ())
    ]
    if named:
        store.samples.flag_samples(named)
    keys, contents = [], []
    for key, content in store.samples.verified_contents(strippers):
        keys.append(key)
        contents.append(profile.strip_end_of_turn(content))
    detail = "this provider strips whitespace and a strip here leaves the count unchanged"
    invisible = strips_are_invisible(contents, tokenizer)  # encoded in batches, not one by one
    flags = [
        (key, PROVIDER_STRIPS_WHITESPACE, detail)
        for key, hidden in zip(keys, invisible, strict=True)
        if hidden
    ]
    if flags:
        store.samples.flag_samples(flags)
    return len(flags)


# Why a provider's repair-explained count mismatches are named strips.
STRIPPER_EVIDENCE = (
    "; this provider never returned content with whitespace at its edges, so it strips it"
)


@dataclass(frozen=True)
class ArgumentRewriter:
    """A provider caught rewriting tool-call arguments beyond the engine's parser: what it was
    caught doing (``evidence``), and which rewrites its samples are read back through."""

    evidence: str
    # May change the keys' order: caught sorting them, or never seen keeping an unsorted order.
    reorders: bool
    # Caught escaping text (``<>&``, or non-ASCII where the engine keeps it).
    escapes: bool


def argument_rewriters(store: Store, profile: ModelProfile) -> dict[str, ArgumentRewriter]:
    """provider -> what it was caught doing to tool-call arguments beyond the engine's parser.

    Caught: the calibration's forced call, or any answer it served, shows a mark the engine's
    parser never writes (``reconstruct.tool_rewrites``: escapes, keys sorted against the
    schema, a spelling other than the engine's dump where the engine dumps). Where the engine
    hands back the model's own text (Kimi, DeepSeek V3.1, gpt-oss), a sample whose count matched
    only a re-serialised reading (``tool_arguments_reserialised``) is a rewrite too; where the
    engine dumps what it parsed, that is the engine's own, judged by each sample's count.
    """
    evidence: dict[str, str] = {}
    marks: dict[str, set[str]] = {}
    keeps_order: set[str] = set()
    for provider, questions in store.calibrations.read().items():
        row = questions.get(TOOL_ARGUMENTS, {})
        if row.get("verdict") == REWRITES_ARGUMENTS:
            matched = row.get("matched") or ""
            evidence[provider] = f"calibration's forced call came back with {matched}"
            marks.setdefault(provider, set()).update(matched.split(","))
    for provider, calls, request in store.samples.tool_call_answers():
        found = call_marks(calls, request.get("tools"), profile)
        if found:
            marks.setdefault(provider, set()).update(found)
            evidence.setdefault(
                provider, f"an answer's arguments came back with {', '.join(found)}"
            )
        if keeps_unsorted_keys(calls):
            keeps_order.add(provider)
    if not profile.tool_arguments_parsed:
        for provider in store.samples.providers_with_reason(TOOL_ARGUMENTS_RESERIALISED) - set(
            evidence
        ):
            evidence[provider] = "a sample's count matched only a re-serialised reading"
    return {
        provider: ArgumentRewriter(
            evidence=what,
            reorders=SORTED_KEYS in marks.get(provider, ()) or provider not in keeps_order,
            escapes=ESCAPED_TEXT in marks.get(provider, ()),
        )
        for provider, what in evidence.items()
    }


def flag_reserialising_providers(store: Store, tokenizer, profile: ModelProfile) -> int:
    """Unverify the tool-call samples of providers caught rewriting tool-call arguments on top
    of the engine's parser (``argument_rewriters``) that their count does not single out.

    Such a rewrite is code, so it touches every call the provider delivers; where the verbatim
    reading of its rewrite happens to match the count, the sample was verified with the
    provider's key order and spacing, not the model's. A sample is kept when, of every spelling
    the provider's rewrites could have turned into the served one (``tool_rewrites.
    inverse_calls``: other key orders where it sorts them, other spacing, unescaped or escaped
    text where it escapes), only the one it was read with has its count. Calls without
    arguments (none, or ``{}``) read the same either way and are kept.
    """
    rewriters = argument_rewriters(store, profile)
    flags = []
    for provider, stored, completion_ids in store.samples.verified_tool_call_samples(
        set(rewriters)
    ):
        calls = stored.completion.tool_calls or []
        if not any(_has_arguments(call) for call in calls):
            continue
        rewriter = rewriters[provider]
        variants = inverse_calls(calls, rewriter.reorders, rewriter.escapes)
        sharing = None
        if variants is not None:
            sharing = spellings_at_count(stored, completion_ids, tokenizer, profile, variants)
        if sharing == 1:
            continue  # the only spelling at its count: proven despite the rewrite
        flags.append(
            (stored.key, PROVIDER_RESERIALISES_TOOL_ARGUMENTS, _doubt(rewriter, sharing, variants))
        )
    if flags:
        store.samples.flag_samples(flags)
    return len(flags)


def _doubt(rewriter: ArgumentRewriter, sharing: int | None, variants: list | None) -> str:
    """The detail of a sample its provider's rewrites leave unproven."""
    caught = (
        f"this provider rewrites tool-call arguments beyond the engine's parser "
        f"({rewriter.evidence})"
    )
    rewrites = "other key orders, spacing" if rewriter.reorders else "other spacing"
    if rewriter.escapes:
        rewrites += ", escapes"
    if variants is None:
        return (
            f"{caught}, and these calls have more key orders than draftgen reads "
            f"({KEY_ORDER_LIMIT}), so the model's cannot be told from the provider's"
        )
    if sharing is None:
        return (
            f"{caught}, and this sample's reading is not one draftgen can read back through "
            "that rewrite, so the count cannot tell the model's spelling from the provider's"
        )
    return (
        f"{caught}, and {sharing} spellings it would rewrite into this text ({rewrites}) share "
        "this sample's count, so the count cannot tell which one the model wrote"
    )


def _has_arguments(call: object) -> bool:
    """Whether a structured call's arguments hold anything a re-serialisation could rewrite."""
    function = call.get("function") if isinstance(call, dict) else None
    arguments = function.get("arguments") if isinstance(function, dict) else None
    if isinstance(arguments, str):
        return arguments.strip() not in ("", "{}")
    return bool(arguments)


def flag_unproven_renderers(store: Store, tokenizer, profile: ModelProfile) -> int:
    """Unverify samples whose prompt the published chat template renders to other ids at the
    same count, served by a provider not yet shown to render as the engine does (gpt-oss)."""
    template = template_renderer(tokenizer, profile)
    if template is None:
        return 0
    calibrations = store.calibrations.read()
    flags = [
        (key, PROMPT_RENDERER_UNPROVEN, detail)
        for key, detail in unproven_renderings(
            store.samples.text_path_prompts(),
            template,
            profile.prompt_renderer,
            providers_with(calibrations, RENDERER, RENDERS_AS_DRAFTGEN),
            providers_with(calibrations, RENDERER, RENDERS_OTHERWISE),
        )
    ]
    if flags:
        store.samples.flag_samples(flags)
    return len(flags)


def reconstruct_pending(store: Store) -> int:
    """Reconstruct completions a run stored but did not reach (an interrupted run)."""
    spec, name = store.settings.meta("tokenizer"), store.settings.meta("profile")
    if not spec or not name or not store.tallies.counts()["unreconstructed"]:
        return 0
    return reconstruct_all(
        store, spec, run_profile_named(name, store.settings.meta(DERIVED_LAYOUT))
    )


def _follow_run(
    run_dir: Path,
    tokenizer_spec: str,
    profile_name: str | None,
    expected_chars: int,
    started,
    done,
    stop,
) -> int:
    """``reconstruct_all`` over the run directory's store until ``done`` (``threading.Event``s).

    Nothing touches the run directory before ``started``: a run refused before its first
    request (a held lock, other settings) ends this unseen. The profile is the run's: named, or
    detected from the same tokenizer by the same code.
    """
    # A run this size pays for the fast encoder's slow load: it is done while the first answers
    # are awaited, not after them.
    fast_encoder.expect(load_tokenizer(tokenizer_spec), expected_chars)
    started.wait()
    profile = tokenizer_profile(tokenizer_spec, profile_name)
    # Never a new store: one deleted under the run before this opens is the run's to report,
    # and a file made here would stand in the way of the resume's rebuild.
    store = Store(run_dir, create=False)
    try:
        return reconstruct_all(store, tokenizer_spec, profile, follow=done, stop=stop)
    finally:
        store.close()


class BackgroundReconstruction:
    """``reconstruct_all`` beside a generation, following the completions it stores.

    Its own connection reads what the writer commits. ``expected_chars`` is about what the run
    will encode: from ``PROCESS_FROM_CHARS`` on, reconstruction runs in a process of its own
    (``WHERE_ENV`` overrides), else in a thread, where the Rust encoder still releases the GIL.
    ``profile_name`` is the run's ``--profile`` (None: detected from the tokenizer).

    Made as a run starts, the process loads the tokenizer and fastokens on a core the run's own
    start leaves idle; ``cancel`` ends it, unseen, if the run stops before its first request.
    """

    def __init__(
        self,
        run_dir: Path,
        tokenizer_spec: str,
        profile_name: str | None,
        expected_chars: int = 0,
    ) -> None:
        where = os.environ.get(WHERE_ENV) or (
            "process" if expected_chars >= PROCESS_FROM_CHARS else "thread"
        )
        args = (run_dir, tokenizer_spec, profile_name, expected_chars)
        if where == "process":
            self._worker: _ThreadWorker | _ProcessWorker = _ProcessWorker(*args)
        else:
            self._worker = _ThreadWorker(*args)
        # Set as the first request is sent: nothing is new to reconstruct before.
        self.generation_started = self._worker.started

    async def finish(self, interrupted: bool = False) -> int:
        """Wait for the rest to be reconstructed (for the batch in hand only, if interrupted);
        the samples made."""
        return await self._worker.finish(interrupted)

    def stop(self) -> None:
        """Stop after the text in hand (a signal while ``finish`` waits): what is made is kept,
        the rest waits for a resume."""
        self._worker.stop.set()

    def cancel(self) -> None:
        """End the reconstruction without a word if generation never started (nothing was
        touched); after ``finish``, nothing to do."""
        self._worker.cancel()


class _ThreadWorker:
    """The reconstruction in a thread of this process."""

    def __init__(self, run_dir, tokenizer_spec, profile_name, expected_chars) -> None:
        self.started = threading.Event()
        self.done = threading.Event()
        self.stop = threading.Event()
        self.cancelled = False
        self._task = asyncio.ensure_future(
            asyncio.to_thread(self._run, run_dir, tokenizer_spec, profile_name, expected_chars)
        )

    def _run(self, run_dir, tokenizer_spec, profile_name, expected_chars) -> int:
        # Waiting for the first request keeps the tokenizer's load (GIL-bound imports) off a
        # resume's way to its first missing turn.
        self.started.wait()
        if self.cancelled:
            return 0
        return _follow_run(
            run_dir,
            tokenizer_spec,
            profile_name,
            expected_chars,
            self.started,
            self.done,
            self.stop,
        )

    def cancel(self) -> None:
        if not self.started.is_set():
            self.cancelled = True
            self.started.set()

    async def finish(self, interrupted: bool) -> int:
        if interrupted:
            self.stop.set()
        self.done.set()
        self.started.set()
        return await asyncio.shield(self._task)


class _ProcessWorker:
    """The reconstruction in a process of its own (spawned: a fork would copy the event loop's
    and the tokenizer's threads mid-work).

    The child loads the tokenizer at once (another core does it while this process starts the
    run), sends its log records here to go through this process's handlers, ignores Ctrl-C
    (this process decides what an interrupt stops, through ``stop``) and exits if this process
    dies: what it committed is kept and a resume reconstructs the rest. Two one-way pipes join
    them, and nothing else: no semaphore a crash could leave to the resource tracker, and each
    side learns the other's death as the end of the pipe it reads.
    """

    def __init__(self, run_dir, tokenizer_spec, profile_name, expected_chars) -> None:
        context = multiprocessing.get_context("spawn")
        child_controls, self._controls = context.Pipe(duplex=False)
        self._reports, child_reports = context.Pipe(duplex=False)
        controls = _Sender(self._controls, on_broken=None)  # a dead child is finish()'s to say
        self.started = _SentEvent("started", controls)
        self.done = _SentEvent("done", controls)
        self.stop = _SentEvent("stop", controls)
        self._outcome: tuple[str, object] | None = None
        self._closed = False
        self._relay = threading.Thread(
            target=self._relay_reports, name="draftgen-reconstruct-reports", daemon=True
        )
        level = logging.getLogger("draftgen").getEffectiveLevel()
        self._process = context.Process(
            target=_child_main,
            args=(
                run_dir,
                tokenizer_spec,
                profile_name,
                expected_chars,
                child_controls,
                child_reports,
                level,
            ),
            name="draftgen-reconstruct",
            daemon=True,
        )
        self._process.start()
        # Only the child may hold its ends, or its death would not end what this process reads.
        child_controls.close()
        child_reports.close()
        self._relay.start()

    async def finish(self, interrupted: bool) -> int:
        if interrupted:
            self.stop.set()
        self.done.set()
        self.started.set()
        return await asyncio.to_thread(self._result)

    def _relay_reports(self) -> None:
        """Hand the child's log records to this process's loggers and keep its outcome, until
        the child's end of the pipe closes (it exited, or was killed)."""
        try:
            while True:
                kind, value = self._reports.recv()
                if kind == "log":
                    logger = logging.getLogger(value.name)
                    if logger.isEnabledFor(value.levelno):
                        logger.handle(value)
                else:
                    self._outcome = (kind, value)
        except EOFError:
            pass

    def _result(self) -> int:
        """The child's count of samples made, or the error it raised."""
        self._relay.join()
        self._process.join()
        exitcode = self._process.exitcode
        self._close()
        if self._outcome is None:
            raise ReconstructionError(
                f"the reconstruction process ended with exit code {exitcode} before it was "
                "done; every completion is stored, and `draftgen export` or the same run "
                "command reconstructs what it left"
            )
        kind, value = self._outcome
        if kind == "error":
            raise value
        return value

    def _close(self) -> None:
        # Closed only once the child is done: it takes the end of ``controls`` for this
        # process's death.
        self._controls.close()
        self._reports.close()
        self._process.close()
        self._closed = True

    def cancel(self) -> None:
        if self._closed or self.started.is_set():
            return  # finished, or finish()'s to end
        # It opened nothing of the run's: no need to wait for its imports to end.
        self._controls.close()
        self._process.kill()
        self._relay.join()
        self._process.join()
        self._reports.close()
        self._process.close()
        self._closed = True


class _Sender:
    """One end of a pipe that several threads send on."""

    def __init__(self, connection, on_broken) -> None:
        self._connection = connection
        self._on_broken = on_broken
        self._lock = threading.Lock()

    def send(self, message) -> None:
        """Send ``message``; if the reader is gone, call ``on_broken`` (None: drop it)."""
        try:
            with self._lock:
                self._connection.send(message)
        except OSError:  # a broken pipe, or this end already closed by finish()
            if self._on_broken is not None:
                self._on_broken()


class _SentEvent:
    """A flag set in this process and sent, once, to the reconstruction process."""

    def __init__(self, name: str, sender: _Sender) -> None:
        self._name = name
        self._sender = sender
        self._event = threading.Event()
        self._lock = threading.Lock()

    def set(self) -> None:
        with self._lock:
            if self._event.is_set():
                return
            self._event.set()
        self._sender.send(self._name)

    def is_set(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        return self._event.wait(timeout)


class _PipeLogHandler(logging.handlers.QueueHandler):
    """Log records, made picklable as for a queue, sent to the parent."""

    def __init__(self, sender: _Sender) -> None:
        super().__init__(None)
        self._sender = sender

    def enqueue(self, record: logging.LogRecord) -> None:
        self._sender.send(("log", record))


def _child_main(
    run_dir, tokenizer_spec, profile_name, expected_chars, controls, reports, level
) -> None:
    """The reconstruction process: ``_follow_run``, its result or error sent on ``reports``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    events = {name: threading.Event() for name in ("started", "done", "stop")}
    threading.Thread(target=_listen, args=(controls, events), daemon=True).start()
    sender = _Sender(reports, on_broken=_parent_gone)
    root = logging.getLogger("draftgen")
    root.handlers[:] = [_PipeLogHandler(sender)]
    root.setLevel(level)
    root.propagate = False
    try:
        # Its connections map the store's -shm too: a write to it while the directory is
        # immutable is waited out here as in the run's process (silently: this is the thread
        # that writes).
        with waiting_out_bus_errors(run_dir):
            made = _follow_run(run_dir, tokenizer_spec, profile_name, expected_chars, **events)
    except BaseException as exc:  # noqa: BLE001 - every error is the parent's to raise
        sender.send(("error", _picklable(exc)))
    else:
        sender.send(("made", made))


def _listen(controls, events: dict[str, threading.Event]) -> None:
    """Set the events the parent names, until its end of the pipe closes: only its death
    closes it before this process is done."""
    try:
        while True:
            events[controls.recv()].set()
    except (EOFError, OSError):
        _parent_gone()


def _parent_gone() -> None:
    """End this process at once: a kill -9 of the run leaves no one to wait for it, and SQLite
    has kept every committed batch."""
    os._exit(1)


def _picklable(exc: BaseException) -> BaseException:
    """``exc`` if it crosses to the parent intact, else a RuntimeError with its text."""
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")
    return exc

"""The library's front door: a run (``Run``), what can be done with its directory (``RunDir``),
``status``, ``merge_runs``, ``simulate``, and a model's providers (``providers``,
``probe_providers``).

Every command of the CLI is one call here; anything it does can be done from Python:

    from draftgen import Run, RunDir, RunOptions

    summary = Run(RunOptions(inputs="prompts.jsonl", model="moonshotai/kimi-k2.5",
                             tokenizer="fixture:kimi-k2.5", out="runs/demo",
                             simulate=True)).execute()
    run_dir = RunDir.open("runs/demo")
    run_dir.export("specforge", "runs/demo/specforge.jsonl")
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from draftgen.store.database import DB_NAME, REJECTED_NAME, RunLock, Store, StoreError

if TYPE_CHECKING:
    from draftgen.backends.listing import ProviderEndpoint
    from draftgen.options import RunOptions
    from draftgen.outputs.export import ExportOptions, ExportSummary
    from draftgen.run.estimate import Estimate
    from draftgen.run.outcome import RunSummary
    from draftgen.run.providers import ProbeReport
    from draftgen.simulator import SimConfig
    from draftgen.store.merge import MergeSummary

__all__ = [
    "REJECTED_NAME",
    "Run",
    "RunDir",
    "Snapshot",
    "merge_runs",
    "probe_providers",
    "providers",
    "simulate",
    "status",
]

# What a caller needs beside the calls, loaded on first use: reading a run directory (RunDir)
# needs none of the run's engine (its HTTP client, endpoints, progress display) nor the simulator.
_LAZY = {
    "RunOptions": "draftgen.options",
    "RunSummary": "draftgen.run.outcome",
    # A run that worked every turn and stored nothing but failures (Run.execute raises it).
    "NothingStored": "draftgen.run.outcome",
    "EstimateOptions": "draftgen.options",
    "Estimate": "draftgen.run.estimate",
    "MergeSummary": "draftgen.store.merge",
    "SimConfig": "draftgen.simulator",
    "SimConfigError": "draftgen.simulator.config",
    "ProbeReport": "draftgen.run.providers",
    "ProviderEndpoint": "draftgen.backends.listing",
    # What an export is asked for (draftgen export's flags), for RunDir.write_export.
    "ExportOptions": "draftgen.outputs.export",
    # A signal raised as Ctrl-C is, naming which (the CLI exits 128 + its number).
    "SignalInterrupt": "draftgen.signals",
    # The batch timing line status and the progress show (one wording for both).
    "timing_text": "draftgen.store.batch_timing",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'draftgen.api' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


class Run:
    """One run of ``options``: generate what the run directory lacks, reconstruct, verify.

    Running the same options again resumes; nothing stored is requested twice.

    How a run ends is decided here, the same for Python and the CLI (which only maps it to an
    exit code): ``execute`` returns a ``RunSummary`` whose ``outcome`` is ``"complete"``,
    ``"stopped"`` (``stopped`` says why, e.g. ``--max-cost``; exit 3) or ``"interrupted"``
    (``signal`` says which; exit 128 + its number), and raises a ``DraftgenError`` when the run
    failed: a ``RunError`` for a refusal or a stop (exit 2), ``NothingStored`` (a ``RunError``
    carrying the summary) when every turn failed and no completion was stored.
    """

    def __init__(self, options: RunOptions) -> None:
        if options.out is not None and not isinstance(options.out, Path):
            options.out = Path(options.out)
        options.check()  # the CLI's checks of every setting: OptionError with its sentence
        self.options = options

    def execute(self) -> RunSummary:
        return asyncio.run(self.execute_async())

    async def execute_async(self) -> RunSummary:
        from draftgen.run.outcome import finished
        from draftgen.run.pipeline import run

        return finished(await run(self.options))

    def estimate(self) -> Estimate:
        """Prompt tokens, cost and time of this run before it spends anything. ``out`` is not
        used; ``EstimateOptions`` add a pilot (prompts sent first, in a scratch directory) and
        prices; the first endpoint of several is the one priced."""
        from draftgen.run.estimate import estimate

        return asyncio.run(estimate(self.options))

    def on_ray(self, shards: int, address: str | None = None) -> RunSummary:
        """This run as ``shards`` Ray tasks (``--shard I/N`` each, into ``out/shards/I``), merged
        into ``out``. ``address`` joins a running cluster; None starts a local Ray and stops it
        after. Needs ``pip install 'draftgen[ray]'``."""
        from draftgen.run.outcome import finished
        from draftgen.run.ray_runner import run_on_ray

        return finished(run_on_ray(self.options, shards, address=address))


@dataclass(frozen=True)
class Snapshot:
    """How complete a run directory's samples are when read."""

    # Samples an interrupted run stored but had not reconstructed, reconstructed now.
    reconstructed: int = 0
    # While a run is active: who holds the directory, and the completions not yet reconstructed
    # (left out of what is read, since the run's own reconstruction is at work).
    active_run: str | None = None
    left_out: int = 0


class RunDir:
    """A run directory: its status, exports, report and draft vocabulary."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    @classmethod
    def open(cls, path: str | Path) -> RunDir:
        """The run in ``path`` (``StoreError`` if it holds none)."""
        with Store(Path(path), create=False):
            pass
        return cls(Path(path))

    @classmethod
    def runs_under(cls, path: str | Path) -> list[RunDir]:
        """The run directories directly inside ``path`` (a folder of runs), by name; empty when
        ``path`` is itself a run or holds none."""
        path = Path(path)
        if not path.is_dir() or (path / DB_NAME).exists():
            return []
        return [cls(child) for child in sorted(path.iterdir()) if (child / DB_NAME).is_file()]

    @property
    def tokenizer(self) -> str | None:
        """The tokenizer the run was made with, as it was given (a path, hub id or fixture)."""
        with Store(self.path, create=False) as store:
            return store.settings.meta("tokenizer")

    def status(self) -> dict:
        """Counts by outcome and reason, exactness, samples by proof (the text proof's hidden
        re-splits estimated), endpoints, rejected rows, the active run."""
        from draftgen.reconstruct.resplits import proof_figures
        from draftgen.reconstruct.verify import unproven_figures

        with Store(self.path, create=False) as store:
            counts = store.tallies.counts()
            # Samples by proof, and what the text proof's counts cannot see.
            counts["proofs"] = proof_figures(store)
        # Yield lost to doubt, its own line: samples the proof could not settle either way.
        counts["unproven"] = unproven_figures(counts["reasons"], counts["samples"])
        return counts

    def prepare(self) -> Snapshot:
        """Reconstruct what an interrupted run left unreconstructed, unless a run is active."""
        with Store(self.path, create=False) as store:
            return self._prepare(store)

    def export(
        self, fmt: str, out: str | Path, include_unverified: bool = False, force: bool = False
    ) -> tuple[int, Snapshot]:
        """Write ``fmt`` (``EXPORT_FORMATS``) to ``out``: (rows, snapshot).

        An existing file at ``out`` is replaced only if it is an earlier export of this run,
        or with ``force``."""
        from draftgen.outputs.export import export

        with Store(self.path, create=False) as store:
            snapshot = self._prepare(store)
            return export(store, fmt, Path(out), include_unverified, force), snapshot

    def write_export(
        self, fmt: str, out: str | Path, options: ExportOptions | None = None
    ) -> tuple[ExportSummary, Snapshot]:
        """``export`` with every option (``draftgen.outputs.export.ExportOptions``): (what was
        written, snapshot), what was written an ``ExportSummary``: the rows, how many are
        longer than the trainers' common limits and, for ``speculators``, the draft vocabulary
        written beside them."""
        from draftgen.outputs.export import ExportOptions, write_export

        with Store(self.path, create=False) as store:
            snapshot = self._prepare(store)
            summary = write_export(store, fmt, Path(out), options or ExportOptions())
            return summary, snapshot

    def report(self, out_dir: str | Path | None = None) -> tuple[Path, Path]:
        """Write ``report.json`` and ``report.html`` (into the run directory by default)."""
        from draftgen.outputs.report import write_report

        with Store(self.path, create=False) as store:
            return write_report(store, Path(out_dir) if out_dir else None)

    def vocab(
        self,
        size: int,
        out: str | Path,
        target_size: int | None = None,
        include_unverified: bool = False,
        trainers: Sequence[str] | None = None,
    ):
        """The draft vocabulary of ``size`` ids by SpecForge's rule, written to ``out`` as
        ``trainers`` load it (default: every one of ``VOCAB_TRAINERS``): (mapping, paths, the
        target vocabulary size used, snapshot). The target size defaults to the tokenizer's."""
        from draftgen.outputs.vocab import (
            TRAINERS,
            build_from_store,
            target_vocab_size,
            write_mapping,
        )

        with Store(self.path, create=False) as store:
            snapshot = self._prepare(store)
            target = target_size if target_size is not None else target_vocab_size(store)
            mapping = build_from_store(store, size, target, include_unverified)
        paths = write_mapping(mapping, Path(out), trainers or TRAINERS)
        return mapping, paths, target, snapshot

    def sample(self, sample_id: str) -> dict:
        """One sample (``draftgen show``): its export id (``SOURCE_ID:TURN``) or key, verdict,
        ids, and ``tokens``: each id's text as the run's tokenizer decodes it alone."""
        from draftgen.outputs.show import sample_tokens

        with Store(self.path, create=False) as store:
            self._prepare(store)
            record = sample_tokens(store, sample_id)
        if record is None:
            raise StoreError(
                f"{self.path} has no sample {sample_id!r}: give an id as exports write it "
                "(SOURCE_ID:TURN) or a sample key"
            )
        return record

    def cancel(self, api_key_env: str | None = None) -> list[str]:
        """Cancel the run's batches in flight (a ``run --batch``) where the API allows it: a
        sentence per batch on what became of it and what is still billed, in dollars (a
        repeated cancel says what the first did), and for several a last line with the total.
        The key is read from ``api_key_env``, else from the variable the run used."""
        from draftgen.run.cancel import cancel_batches

        return asyncio.run(cancel_batches(self.path, api_key_env))

    def _prepare(self, store: Store) -> Snapshot:
        holder = RunLock.holder(self.path)
        if holder is not None:
            return Snapshot(active_run=holder, left_out=store.tallies.unreconstructed())
        if not store.tallies.unreconstructed():
            return Snapshot()
        # Imported only when there is work: reconstruction loads tokenizers, which reading a
        # finished run does not need.
        from draftgen.reconstruct.background import reconstruct_pending

        return Snapshot(reconstructed=reconstruct_pending(store))


def status(path: str | Path) -> dict:
    """What ``draftgen status PATH`` shows, as data: a run's ``RunDir.status()``, or for a
    folder of runs ``{"runs": {path: status}}`` (``StoreError`` if ``path`` holds neither)."""
    runs = RunDir.runs_under(path)
    if runs:
        return {"runs": {str(run.path): run.status() for run in runs}}
    return RunDir.open(path).status()


def merge_runs(run_dirs: list[str | Path], out: str | Path) -> MergeSummary:
    """Merge the run directories ``run_dirs`` (shards, or runs of one suite with the same
    settings, tokenizer and profile) into the new run directory ``out``."""
    from draftgen.store.merge import merge_runs

    return merge_runs([Path(path) for path in run_dirs], Path(out))


def simulate(config: SimConfig, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Serve the simulator (an OpenAI-compatible server of synthetic answers, faults and quirks
    as ``config`` says) on ``host:port`` until SIGINT or SIGTERM; its base URL is printed first."""
    from draftgen.simulator import serve_forever

    serve_forever(config, host=host, port=port)


def providers(
    model: str,
    base_url: str | list[str] | None = None,
    api_key_env: str = "OPENROUTER_API_KEY",
    *,
    simulate: bool = False,
    tokenizer: str | None = None,
    allow_insecure_http: bool = False,
) -> list[ProviderEndpoint]:
    """``model``'s providers (``draftgen providers MODEL``): name, tag, prices, quantization,
    context and status from ``GET {base_url}/models/{author}/{slug}/endpoints`` (OpenRouter's
    by default; the key in ``api_key_env`` is sent if set). ``simulate`` lists the built-in
    simulator's providers, which needs ``tokenizer``."""
    from draftgen.run.providers import list_providers

    listing = list_providers(
        model,
        base_url,
        api_key_env,
        simulate=simulate,
        tokenizer=tokenizer,
        allow_insecure_http=allow_insecure_http,
    )
    return asyncio.run(listing)


def probe_providers(options: RunOptions, probes: int, out: str | Path | None = None) -> ProbeReport:
    """Probe every provider of ``options.model`` (``draftgen providers MODEL --probe N``): the
    probe set (built in, or ``options``' inputs) ``probes`` times each, one run per provider
    into ``out/ROUTE`` (a temporary directory without ``out``) with ``provider.only``; the
    providers ranked by dollars per verified sample and the ``[openrouter.provider]`` routing."""
    from draftgen.run.providers import probe_providers as probe

    options.check("providers")
    return asyncio.run(probe(options, probes, out))

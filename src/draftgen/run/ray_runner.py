"""The run on Ray: N shard tasks, each the ordinary pipeline run into RUN_DIR/shards/I, merged.

Each task is ``pipeline.run`` with ``--shard I/N``, so a Ray run resumes like any other (every
shard from its own store) and the merge is ``draftgen merge``. Ray is an optional dependency
(``pip install 'draftgen[ray]'``), imported only here.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import replace
from pathlib import Path

from draftgen.generate.progress import RunProgress
from draftgen.inputs.shard import Shard
from draftgen.reconstruct.resplits import proof_figures
from draftgen.run.outcome import RunSummary
from draftgen.run.pipeline import RunError, RunOptions, run
from draftgen.store.database import DB_NAME, Store
from draftgen.store.merge import merge_runs

SHARDS_DIR = "shards"


def run_on_ray(options: RunOptions, shards: int, address: str | None = None) -> RunSummary:
    """Run ``options`` as ``shards`` Ray tasks and merge them into ``options.out``.

    ``address`` joins a running cluster (``auto``, ``ray://head:10001``); None starts a local
    Ray on this machine and stops it afterwards. Every node must see the inputs and the run
    directory at the same paths (a shared filesystem).
    """
    ray = _import_ray()
    if options.shard is not None:
        raise RunError("--ray runs every shard itself; drop --shard (or drop --ray)")
    out = Path(options.out).absolute()
    shard_dirs = [out / SHARDS_DIR / str(index) for index in range(shards)]
    if (out / DB_NAME).exists() and not (out / SHARDS_DIR).is_dir():
        raise RunError(
            f"{out} holds a run made without --ray; choose a new --out directory for a Ray run"
        )
    existing = sorted(p.name for p in (out / SHARDS_DIR).glob("*") if p.is_dir())
    if existing and existing != sorted(str(i) for i in range(shards)):
        raise RunError(
            f"{out / SHARDS_DIR} holds shards {', '.join(existing)}, not 0..{shards - 1}; resume "
            f"with --ray {len(existing)} or choose a new --out directory"
        )
    started_here = not ray.is_initialized()
    if started_here:
        # A local Ray gets a CPU slot per shard, so all start at once: they mostly wait on the
        # endpoints. A cluster has its own resources.
        cpus = max(shards, os.cpu_count() or 1) if address is None else None
        ray.init(address=address, num_cpus=cpus, include_dashboard=False, log_to_driver=True)
    try:
        env = {name: os.environ[name] for name in (options.api_key_env,) if name in os.environ}
        task = ray.remote(num_cpus=1)(_run_shard)
        if env:  # a remote cluster's workers do not share this shell's environment
            task = task.options(runtime_env={"env_vars": env})
        pending = [
            task.remote(_shard_options(options, Shard(index, shards), shard_dirs[index]))
            for index in range(shards)
        ]
        try:
            results = ray.get(pending)
        except ray.exceptions.RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            # draftgen's own errors say what to do in one sentence; Ray's wrapper adds a traceback.
            if isinstance(cause, Exception) and type(cause).__module__.startswith("draftgen."):
                raise RunError(f"a shard task on Ray stopped: {cause}") from None
            raise
        except KeyboardInterrupt:
            for ref in pending:
                ray.cancel(ref)
            raise
    finally:
        if started_here:
            ray.shutdown()
    merge_runs(shard_dirs, out, replace=True)
    with Store(out, create=False) as store:
        counts = store.tallies.counts()
        counts["proofs"] = proof_figures(store)
    stopped = next((stop for _, stop in results if stop), None)
    return RunSummary(progress=RunProgress(), counts=counts, stopped=stopped)


def _shard_options(options: RunOptions, shard: Shard, out: Path) -> RunOptions:
    """The options of one shard task: absolute paths, since a Ray worker starts elsewhere."""
    inputs = [str(Path(path).absolute()) for path in options.inputs]
    datasets = (
        [replace(spec, path=str(Path(spec.path).absolute())) for spec in options.datasets]
        if options.datasets
        else options.datasets
    )
    tokenizer = options.tokenizer
    if os.path.exists(tokenizer):  # a local directory, not a hub id or fixture:NAME
        tokenizer = str(Path(tokenizer).absolute())
    return replace(
        options, inputs=inputs, datasets=datasets, tokenizer=tokenizer, shard=shard, out=out
    )


def _run_shard(options: RunOptions) -> tuple[dict, str | None]:
    summary = asyncio.run(run(options))
    return summary.counts, summary.stopped


def _import_ray():
    try:
        import ray
    except ImportError:
        raise RunError(
            "--ray needs the ray package; install it with pip install 'draftgen[ray]'"
        ) from None
    return ray

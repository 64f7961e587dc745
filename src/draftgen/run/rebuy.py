"""After a live run's requests: judge the providers on every sample (``generate.judge``), and buy
the spoiled samples of the providers left out again from the others, once, within the re-buy
budget (``--rebuy-budget``, a share of what the run's first purchases cost; ``--max-cost`` holds).

A resume comes here too: what was bought again is kept aside in the store (``replaced_completions``)
and never bought a third time; what was left (over budget, failed, interrupted) is tried again.
"""

from __future__ import annotations

import contextlib
import logging

from draftgen.generate.contract import Destination, Engine, Rebuys
from draftgen.generate.judge import judge
from draftgen.generate.progress import RunProgress
from draftgen.reconstruct.background import BackgroundReconstruction
from draftgen.run.context import RunContext
from draftgen.store.database import Store

_log = logging.getLogger("draftgen.run")


def rebuy_allowance(store: Store, share: float) -> float:
    """Dollars buying again may still spend: ``share`` of what the first purchases cost (every
    completion bought, re-buys aside), less what re-buys spent already."""
    again = store.providers.rebuy_figures()["rebuy_cost"]
    return share * (store.tallies.spent() - again) - again


def judge_all(store: Store) -> None:
    """Judge the providers on the run's every sample, as the live judge could not for lack of
    them (a short run, a resume), and record each one caught."""
    for exclusion in judge(
        store.providers.provider_figures(), set(store.providers.excluded_providers())
    ):
        store.providers.exclude_provider(exclusion.provider, exclusion.evidence)
        _log.warning(
            "left provider %s out of the run (provider.ignore): %s; --keep-providers keeps "
            "every provider",
            exclusion.provider,
            exclusion.evidence,
        )


async def rebuy_spoiled(
    ctx: RunContext, store: Store, destination: Destination, engine: Engine
) -> tuple[Rebuys, RunProgress] | None:
    """Judge, then buy the spoiled samples of the providers left out again through ``engine``
    (the run's); None when there is nothing to buy (no provider left out, nothing spoiled,
    --keep-providers, a backend that routes to no providers, or an engine that buys nothing
    again: batch mode, whose requests carry no routing of their own)."""
    options = ctx.options
    if options.keep_providers or ctx.backend.route_around is None:
        return None
    if engine.rebuy_not_offered is not None:
        _log.debug(engine.rebuy_not_offered)
        return None
    judge_all(store)
    spoiled = store.providers.spoiled_completions(list(store.providers.excluded_providers()))
    if not spoiled:
        return None
    allowance = rebuy_allowance(store, options.rebuy_budget)
    _log.info(
        "buying %d spoiled samples of %s again from the other providers (up to $%.4f, "
        "--rebuy-budget %g of the run's cost)",
        len(spoiled),
        ", ".join(store.providers.excluded_providers()),
        max(allowance, 0.0),
        options.rebuy_budget,
    )
    reconstruction = BackgroundReconstruction(options.out, options.tokenizer, options.profile)
    try:
        rebuys, progress = await engine.rebuy(
            ctx, store, destination, spoiled, allowance, reconstruction.generation_started
        )
    except BaseException:
        with contextlib.suppress(Exception):
            await reconstruction.finish(interrupted=True)
        raise
    finally:
        reconstruction.cancel()
    await reconstruction.finish(interrupted=progress.stopped == "interrupted")
    _log.info(
        "bought %d of %d spoiled samples again for $%.4f (%d failed, %d over the budget)",
        rebuys.bought,
        rebuys.wanted,
        rebuys.cost,
        rebuys.failed,
        rebuys.over_budget,
    )
    return rebuys, progress

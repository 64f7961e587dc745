"""Re-buying through the ``Engine`` contract (``generate.contract``): the run drives its own engine,
live or batch, and an engine that buys nothing again says so before any provider is judged.
"""

from __future__ import annotations

import asyncio
import inspect
from types import SimpleNamespace

import pytest

from draftgen.generate.batch import Batch
from draftgen.generate.contract import Engine, RebuyNotOffered
from draftgen.generate.engine import Live
from draftgen.run.rebuy import rebuy_spoiled


@pytest.mark.parametrize("engine", [Live, Batch])
@pytest.mark.parametrize("method", ["generate", "rebuy"])
def test_both_engines_keep_the_contracts_signatures(engine, method):
    assert inspect.signature(getattr(engine, method)).parameters.keys() == (
        inspect.signature(getattr(Engine, method)).parameters.keys()
    )


class UntouchedStore:
    """A store any read of which fails the test: nothing may be judged or listed."""

    def __getattr__(self, name):
        raise AssertionError(f"the store was read ({name}) for an engine that buys nothing again")


def test_batch_mode_buys_nothing_again_and_judges_no_provider():
    ctx = SimpleNamespace(
        options=SimpleNamespace(keep_providers=False, rebuy_budget=0.2),
        backend=SimpleNamespace(route_around=lambda provider, excluded: provider),
    )
    engine = Batch()
    assert asyncio.run(rebuy_spoiled(ctx, UntouchedStore(), None, engine)) is None
    with pytest.raises(RebuyNotOffered) as refused:
        asyncio.run(engine.rebuy(ctx, UntouchedStore(), None, [{"key": "k"}], 1.0))
    assert str(refused.value) == (
        "batch mode buys no spoiled sample again: its requests carry no routing of their own"
    )
    assert Live.rebuy_not_offered is None

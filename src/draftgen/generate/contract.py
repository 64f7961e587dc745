"""What an engine is given and what it does: the run's context and a destination in, every
missing turn requested and stored (or spoiled samples bought again), the progress out.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Protocol

from draftgen.backends import Backend
from draftgen.generate.endpoints import EndpointSpec
from draftgen.generate.errors import RunError
from draftgen.generate.progress import RunProgress
from draftgen.inputs.mix import Suite
from draftgen.profiles import ModelProfile
from draftgen.records import GenerationSettings
from draftgen.store.database import Store


class GenerationContext(Protocol):
    """The run's values an engine reads, resolved once by the run (``draftgen.run.context``)."""

    options: Any  # the run's RunOptions
    suite: Suite  # the prompts
    total_rows: int  # rows the suite yields (the progress display's total)
    backend: Backend
    settings: GenerationSettings
    tokenizer: Any  # loaded
    profile: ModelProfile


@dataclass(frozen=True)
class Destination:
    """Where the requests go: the run's checked endpoints, or the built-in simulator's URL."""

    base_url: str | list[EndpointSpec]
    api_key: str | None
    # What the probe found answering at each endpoint (``ProbeResult.server``: openrouter,
    # openai-compatible, vllm, sglang, simulator); () where no probe ran.
    servers: tuple[str, ...] = ()

    @property
    def simulated(self) -> bool:
        return isinstance(self.base_url, str)


@dataclass
class Rebuys:
    """What buying an excluded provider's spoiled samples again came to."""

    wanted: int = 0  # spoiled samples not bought again before
    bought: int = 0
    failed: int = 0  # the request failed: the spoiled completion stays, a resume tries again
    over_budget: int = 0  # left, since buying them would pass the re-buy budget
    cost: float = 0.0


class RebuyNotOffered(RunError):
    """An engine that cannot buy spoiled samples again was asked to; the message says why."""


class Engine(Protocol):
    """A way of generating: live requests (``engine.Live``) or a batch API (``batch.Batch``)."""

    async def generate(
        self,
        ctx: GenerationContext,
        store: Store,
        destination: Destination,
        started: threading.Event | None = None,
    ) -> RunProgress:
        """Request and store every turn the store lacks; ``started`` is set as the first
        request is sent. The progress says whether and why the run stopped early."""
        ...

    # Why this engine buys no spoiled sample again (one sentence), or None if it does: the run
    # reads it before judging the providers (``run.rebuy``).
    rebuy_not_offered: str | None

    async def rebuy(
        self,
        ctx: GenerationContext,
        store: Store,
        destination: Destination,
        spoiled: list[dict],
        allowance: float,
        started: threading.Event | None = None,
    ) -> tuple[Rebuys, RunProgress]:
        """Buy each of ``spoiled`` (``providers.spoiled_completions``) again, from providers other
        than the excluded ones, while what they cost stays within ``allowance`` dollars; each
        answer replaces its spoiled completion (kept aside, never lost) in one commit. An
        engine whose ``rebuy_not_offered`` says why raises ``RebuyNotOffered`` with it."""
        ...

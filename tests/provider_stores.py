"""A hand-made store served by several providers, with samples of several verdicts, and the
figures ``Store.providers.provider_figures`` gives of it (for the store, status, the report)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from draftgen.records import Completion, TokenSample
from draftgen.store.database import CompletionWriter, Store

# key: (provider, cost, latency, sample: (verified, reason, truncated) or None before it is made)
SERVED = {
    "a1": ("Alpha", 0.001, 1.0, (True, "ok", False)),
    "a2": ("Alpha", 0.001, 4.0, (True, "ok", False)),
    "a3": ("Alpha", 0.001, 2.0, (True, "ok", False)),
    "a4": ("Alpha", 0.003, 3.0, (False, "prompt_count_mismatch", False)),
    "b1": ("Beta", 0.002, 5.0, (True, "ok", False)),
    "b2": ("Beta", 0.002, 6.0, (True, "ok", True)),  # cut at max_tokens: not verified
    "b3": ("Beta", -0.5, 7.0, (False, "completion_count_mismatch", False)),  # a negative cost
    "c1": ("Gamma", 0.004, 0.5, (False, "prompt_count_mismatch", False)),
    "c2": ("Gamma", 0.004, 0.7, (False, "prompt_count_mismatch", False)),
    "c3": ("Gamma", 0.004, 0.9, (False, "provider_strips_whitespace", False)),
    "n1": (None, 0.0, 1.5, None),  # no provider named, not reconstructed yet
}


def completion(key: str, provider: str | None, cost: float) -> Completion:
    return Completion(
        generation_id=f"gen-{key}",
        provider=provider,
        model="m",
        reasoning=None,
        content=key,
        tool_calls=None,
        finish_reason="stop",
        native_finish_reason="stop",
        usage={"prompt_tokens": 3, "completion_tokens": 2, "cost": cost},
    )


def served_store(run_dir: Path, served: dict = SERVED) -> Path:
    """A store holding ``served``'s completions and samples, written as a run writes them."""

    async def write() -> None:
        writer = CompletionWriter(run_dir / "draftgen.sqlite")
        for key, (provider, cost, latency, _) in served.items():
            request = json.dumps({"messages": [{"role": "user", "content": key}]}).encode()
            await writer.add_completion(
                key, key, 0, request, completion(key, provider, cost), 1, [], latency
            )
        writer.close()

    Store(run_dir).close()
    asyncio.run(write())
    with Store(run_dir) as store:
        store.samples.add_samples(
            [
                TokenSample(key, [1, 2, 3], 1, verified, reason, truncated=truncated)
                for key, (_, _, _, sample) in served.items()
                if sample is not None
                for verified, reason, truncated in [sample]
            ]
        )
    return run_dir


EXPECTED = {
    "Alpha": {
        "completions": 4,
        "samples": 4,
        "verified": 3,
        "unverified": {"prompt_count_mismatch": 1},
        "truncated": 0,
        "cost": 0.006,
        "latency_p50": 2.0,
        "cost_per_verified": 0.002,
    },
    # Most completions first, then by name: Beta before Gamma.
    "Beta": {
        "completions": 3,
        "samples": 3,
        "verified": 1,
        "unverified": {"completion_count_mismatch": 1},
        "truncated": 1,
        "cost": 0.004,  # the negative cost counts 0, as in the run's cost
        "latency_p50": 6.0,
        "cost_per_verified": 0.004,
    },
    "Gamma": {
        "completions": 3,
        "samples": 3,
        "verified": 0,
        "unverified": {"prompt_count_mismatch": 2, "provider_strips_whitespace": 1},
        "truncated": 0,
        "cost": 0.012,
        "latency_p50": 0.7,
        "cost_per_verified": None,  # nothing verified: no price
    },
    "unknown": {
        "completions": 1,
        "samples": 0,
        "verified": 0,
        "unverified": {},
        "truncated": 0,
        "cost": 0.0,
        "latency_p50": 1.5,
        "cost_per_verified": None,
    },
}

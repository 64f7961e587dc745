"""``draftgen cancel RUN_DIR``: cancel a run's batches in flight where the API allows it, and say
what is still billed, in dollars.

A cancel is asked once per batch (repeating it is safe, and says what the first one did); the
batch may still end completed, failed or expired, and on OpenRouter a cancelled batch returns no
rows although the rows that had finished are charged (OpenRouter's Batch API reference, cancel).
The amount is what
the API reports the batch cost, else the finished rows priced at the listed ``:batch`` price (an
upper bound: each at its prompt plus ``max_tokens``). The next ``run --batch`` stores whatever the
batches returned and sends the rest again.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import orjson

from draftgen.generate.batch.dialects import BatchApiError, BatchHttp, BatchInfo, get_dialect
from draftgen.generate.batch.errors import BatchRunError
from draftgen.generate.batch.generate import BATCH_META
from draftgen.generate.batch.money import BatchPrices, find_batch_prices, row_worst
from draftgen.generate.batch.submit import BatchTarget, reconcile
from draftgen.redact import usd
from draftgen.store.batch_ledger import Intent, Ledger
from draftgen.store.database import CompletionWriter, Store


async def cancel_batches(run_dir: Path, api_key_env: str | None = None) -> list[str]:
    """Cancel every live batch of ``run_dir``; one line per batch saying what became of it and
    what it bills (and, for several, a last line with the total)."""
    store = Store(run_dir, create=False)
    try:
        recorded = store.settings.meta(BATCH_META)
        if recorded is None:
            raise BatchRunError(f"{run_dir} has no batches: it was not run with --batch")
        meta = orjson.loads(recorded)
        writer = CompletionWriter(store.path)
        try:
            ledger = Ledger(store, writer)
            live = ledger.intents(live_only=True)
            if not live:
                return [f"no batches in flight in {run_dir}: nothing to cancel"]
            if meta.get("simulated"):
                return [
                    f"the {len(live)} batches in flight were sent to the built-in simulator, "
                    "which stopped with the run that started it: nothing runs or is billed, and "
                    "the next run --batch sends their rows again"
                ]
            variable = api_key_env or meta.get("api_key_env") or "OPENROUTER_API_KEY"
            api_key = os.environ.get(variable)
            if not api_key:
                state = "is empty" if variable in os.environ else "is not set"
                raise BatchRunError(
                    f"environment variable {variable} {state}; export the key the run used "
                    "in it, or name another one with --api-key-env"
                )
            dialect = get_dialect(meta["dialect"])
            settings = orjson.loads(store.settings.meta("settings") or "{}")
            async with BatchHttp(meta["url"], api_key) as http:
                target = BatchTarget(
                    dialect, http, meta["url"], meta["model"], None, meta.get("grace", 120.0)
                )
                billing = Billing(target, api_key, settings.get("max_tokens"), store)
                lines = [await _cancel_one(target, ledger, intent, billing) for intent in live]
                if len(live) > 1 and billing.total is not None:
                    bound = "at most " if billing.bounded else ""
                    lines.append(f"billed in all: {bound}{usd(billing.total)}")
                return lines
        finally:
            await asyncio.to_thread(writer.close)
    finally:
        store.close()


class Billing:
    """What a batch's finished rows bill: the cost the API reports, else the rows priced at the
    listed ``:batch`` price (looked up once); ``total`` adds up what each line said."""

    def __init__(
        self, target: BatchTarget, api_key: str, max_tokens: int | None, store: Store
    ) -> None:
        self.target = target
        self.api_key = api_key
        self.max_tokens = max_tokens
        self.db = store.db
        self._prices: tuple[BatchPrices | None, str] | None = None
        self.total: float | None = 0.0  # None once a batch's amount is unknown
        self.bounded = False  # some of the total is an upper bound

    async def prices(self) -> BatchPrices | None:
        if self._prices is None:
            self._prices = await find_batch_prices(self.target.url, self.target.model, self.api_key)
        return self._prices[0]

    async def amount(self, intent: Intent, info: BatchInfo, finished: int) -> str:
        """``$0.00283 (as the API charged it)``, ``at most $0.00210 (…)``, or why unknown."""
        if info.cost is not None:
            self._add(info.cost, False)
            charged = "as the API charged it" if info.final else "so far, as the API reports it"
            return f"{usd(info.cost)} ({charged})"
        prices = await self.prices()
        usage = info.raw.get("usage") if isinstance(info.raw.get("usage"), dict) else {}
        tokens = (usage.get("prompt_tokens"), usage.get("completion_tokens"))
        if prices is not None and all(isinstance(n, int) for n in tokens):
            amount = tokens[0] * prices.prompt + tokens[1] * prices.completion
            self._add(amount, False)
            return (
                f"{usd(amount)} (their {tokens[0] + tokens[1]} tokens at the prices of "
                f"{prices.source})"
            )
        worst = self._worst_of(intent, finished, prices)
        if worst is not None:
            self._add(worst, True)
            return (
                f"at most {usd(worst)} (its {finished} dearest rows, each at its prompt and "
                f"max_tokens {self.max_tokens}, at the prices of {prices.source}; the API "
                "reports no cost yet)"
            )
        self.total = None
        if self.max_tokens is None:
            why = "the run set no --max-tokens"
        elif prices is None:
            why = "the listing has no batch price"
        else:
            why = "its rows were sent before draftgen counted their prompts"
        if self.target.dialect.name != "openrouter":  # it never reports a batch's cost
            return f"an amount the API does not report and draftgen cannot bound ({why})"
        return (
            f"an amount the API does not report yet and draftgen cannot bound ({why}); draftgen "
            "cancel again once it has ended says what the API charged"
        )

    def _worst_of(self, intent: Intent, finished: int, prices: BatchPrices | None) -> float | None:
        """The most ``finished`` of the intent's rows can have cost: its dearest rows, each at
        its prompt plus ``max_tokens``."""
        if prices is None or self.max_tokens is None:
            return None
        counted = [
            tokens
            for (tokens,) in self.db.execute(
                "SELECT prompt_tokens FROM batch_rows WHERE nonce = ?", (intent.nonce,)
            )
        ]
        if any(tokens is None for tokens in counted):
            return None
        dearest = sorted(counted, reverse=True)[:finished]
        return sum(row_worst(prices, self.max_tokens, tokens) for tokens in dearest)

    def _add(self, amount: float, bound: bool) -> None:
        if self.total is not None:
            self.total += amount
        self.bounded = self.bounded or bound


async def _cancel_one(target: BatchTarget, ledger: Ledger, intent: Intent, billing: Billing) -> str:
    if intent.state == "submitting":
        try:
            outcome = await reconcile(target, ledger, intent)
        except BatchApiError as exc:
            return f"intent {intent.nonce}: could not list the batches ({exc}); try again"
        if outcome == "absent":
            return (
                f"intent {intent.nonce}: its create never made a batch; nothing runs or is "
                "billed, and the next run sends its rows again"
            )
        if outcome == "unknown":
            return (
                f"intent {intent.nonce}: its create got no answer and no batch of its shape is "
                "listed yet; run draftgen cancel again in a minute"
            )
        intent = ledger.intent(intent.nonce)
    batch_id = intent.batch_id
    asked = (intent.detail or {}).get("cancel_requested_at")
    try:
        status, info, message = await target.dialect.cancel(target.http, batch_id)
        if status == 409:  # already final: what it ended as, and what it billed
            info = await target.dialect.get(target.http, batch_id)
    except BatchApiError as exc:
        return f"batch {batch_id}: the cancel failed ({exc}); try again"
    if status == 200 and info is not None:
        if asked is None:
            await ledger.note(intent.nonce, cancel_requested_at=time.time())
        await ledger.record_status(intent.nonce, info.status, info.counts(), info.cost)
        return f"batch {batch_id}: {await _what_became(target, intent, info, asked, billing)}"
    if status == 409:
        if info is None:
            return f"batch {batch_id}: already final ({message}); the next run stores its results"
        await ledger.record_status(intent.nonce, info.status, info.counts(), info.cost)
        return f"batch {batch_id}: {await _what_became(target, intent, info, asked, billing)}"
    if status == 403:
        return (
            f"batch {batch_id}: cancel refused (HTTP 403: {message}); only its organization can "
            "cancel it, so it runs to the end and is billed"
        )
    if status == 404:
        return (
            f"batch {batch_id}: the API cannot cancel it (HTTP 404: {message}); it runs to the "
            "end and is billed, and the next run stores its results"
        )
    return f"batch {batch_id}: the cancel answered HTTP {status} ({message}); try again"


async def _what_became(
    target: BatchTarget, intent: Intent, info: BatchInfo, asked: float | None, billing: Billing
) -> str:
    """The batch's state after this cancel (or an earlier one, asked at ``asked``), what its
    finished rows bill, and what the next run does with its rows."""
    earlier = f"the draftgen cancel of {_when(asked)}" if asked is not None else None
    rows = intent.rows
    if info.status == "completed":
        amount = await billing.amount(intent, info, info.completed or rows)
        before = f"before {earlier} took effect" if earlier else "before the cancel"
        return (
            f"completed {before}: its {rows} rows are billed {amount}, and the next run stores them"
        )
    finished = info.completed or 0
    if finished:
        amount = await billing.amount(intent, info, finished)
        billed = f"{finished} of {rows} rows had finished: they are billed {amount}"
    else:
        billed = f"none of its {rows} rows had finished: nothing is billed"
    if info.status == "cancelled":
        state = f"cancelled by {earlier}" if earlier else "cancelled"
    elif info.final:  # failed or expired before the cancel came
        return (
            f"already {info.status}; {billed}; the next run stores what it returned and sends "
            "the rest again"
        )
    else:
        since = f" since {earlier}" if earlier else ""
        state = f"{info.status}{since} (it may still end completed if the provider finishes first)"
    if target.dialect.cancelled_rows_return:
        then = (
            "the finished rows come back in its output file, which the next run stores, and "
            "it sends the others again"
        )
    else:
        then = (
            f"a cancelled OpenRouter batch returns no rows, so the next run --batch sends all "
            f"{rows} again"
        )
    return f"{state}; {billed}; {then}"


def _when(moment: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(moment))

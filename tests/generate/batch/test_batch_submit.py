"""Submitting, reconciling and ingesting batches, in process against the simulator: intents before
creates, lost creates found or proven absent, ambiguity settled by nonces, results stored once."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import orjson
import pytest

from draftgen.generate.batch.dialects import BatchHttp, get_dialect
from draftgen.generate.batch.ingest import ingest
from draftgen.generate.batch.submit import BatchTarget, nonce_of, reconcile, submit
from draftgen.simulator import SimConfig, start_simulator
from draftgen.store.batch_ledger import RESULTS_READ, Ledger, PlannedRow
from draftgen.store.database import CompletionWriter, Store

MODEL = "moonshotai/kimi-k2.5"


def cfg(**kw) -> SimConfig:
    kw.setdefault("min_tokens", 20)
    kw.setdefault("max_tokens", 50)
    kw.setdefault("batch_visible_after", 0.3)
    kw.setdefault("batch_validate_seconds", 0.05)
    kw.setdefault("batch_seconds", 0.3)
    kw.setdefault("batch_finalize_seconds", 0.05)
    return SimConfig(tokenizer="fixture:kimi-k2.5", **kw)


def planned(count: int, dialect: str = "openrouter", start: int = 0) -> list[PlannedRow]:
    rows = []
    for i in range(start, start + count):
        messages = [{"role": "user", "content": f"Tell me about the number {i}."}]
        body = {"messages": messages, "max_tokens": 64}
        if dialect == "openai-files":
            body["model"] = MODEL
        request = orjson.dumps({"messages": messages, "tools": None, "rendering": None})
        rows.append(PlannedRow(f"{i:032x}", f"row{i}", 0, request, orjson.dumps(body)))
    return rows


def scenario_run(tmp_path, config: SimConfig, scenario, dialect="openrouter", grace=0.5):
    async def main():
        server = await start_simulator(config)
        store = Store(tmp_path / "run")
        writer = CompletionWriter(store.path)
        url = server.base_url
        if dialect == "openai-files":
            url = url.removesuffix("/api/v1") + "/v1"
        try:
            async with BatchHttp(url, "sk-test", base_delay=0.01) as http:
                target = BatchTarget(get_dialect(dialect), http, url, MODEL, None, grace)
                return await scenario(server, target, Ledger(store, writer), store)
        finally:
            await asyncio.to_thread(writer.close)
            store.close()
            await server.close()

    return asyncio.run(main())


async def until_final(target, batch_id, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = await target.dialect.get(target.http, batch_id)
        if info is not None and info.final:
            return info
        await asyncio.sleep(0.05)
    raise AssertionError(f"batch {batch_id} did not end")


async def until(condition, timeout=20.0) -> None:
    """Wait for ``condition()`` (the simulator's state, read in process): a fixed sleep would
    race the simulator's clock on a loaded machine."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout} s for {condition.__doc__ or condition}")
        await asyncio.sleep(0.02)


def completions(store) -> dict:
    return dict(store.db.execute("SELECT key, generation_id FROM completions"))


@pytest.mark.parametrize("dialect", ["openrouter", "openai-files"])
def test_a_batch_is_submitted_ingested_and_stored_like_live_completions(tmp_path, dialect):
    async def scenario(server, target, ledger, store):
        rows = planned(5, dialect)
        intent = await submit(target, ledger, rows, None)
        assert intent.state == "submitted" and intent.batch_id
        assert ledger.live_keys() == {r.key for r in rows}
        info = await until_final(target, intent.batch_id)
        seen = []
        report = await ingest(
            target, ledger, ledger.intent(intent.nonce), info, lambda key, c: seen.append(key)
        )
        stored = completions(store)
        # Read again as after a crash: the cursor says every page is stored.
        again = await ingest(target, ledger, ledger.intent(intent.nonce), info)
        # And from the start, as a page read twice: nothing is stored twice.
        store.db.execute(
            "UPDATE batch_intents SET results_cursor = '' WHERE nonce = ?", (intent.nonce,)
        )
        twice = await ingest(target, ledger, ledger.intent(intent.nonce), info)
        row = store.db.execute(
            "SELECT request, cost, provider, finish_reason, attempts, endpoint FROM completions"
        ).fetchone()
        after = (completions(store), ledger.intent(intent.nonce), ledger.live_keys())
        return intent, report, again, twice, stored, seen, row, after, server

    intent, report, again, twice, stored, seen, row, after, server = scenario_run(
        tmp_path, cfg(), scenario, dialect
    )
    assert report.stored == 5 and len(seen) == 5 and report.unanswered == []
    assert again.stored == 0 and twice.stored == 0
    assert after[0] == stored and len(stored) == 5
    truth = server.truth
    assert {truth[g]["custom_id"] for g in stored.values()} == {
        f"{intent.nonce}-{i:05d}" for i in range(5)
    }
    assert all(nonce_of(truth[g]["custom_id"]) == intent.nonce for g in stored.values())
    request, cost, provider, finish, attempts, endpoint = row
    assert orjson.loads(request)["messages"][0]["content"].startswith("Tell me about")
    assert provider in ("SiliconFlow", "Chutes", "AtlasCloud") and finish in ("stop", "length")
    assert attempts == 1 and endpoint == target_url(server, dialect)
    # OpenRouter rows carry their cost; OpenAI-style rows carry tokens only.
    assert (cost > 0) == (dialect == "openrouter")
    final = after[1]
    assert final.state == "ingested" and final.results_cursor == RESULTS_READ
    assert after[2] == set()


def target_url(server, dialect):
    return server.base_url if dialect == "openrouter" else server.base_url[:-7] + "/v1"


def test_a_lost_create_is_unknown_while_the_batch_is_unseen_then_found(tmp_path):
    async def scenario(server, target, ledger, store):
        intent = await submit(target, ledger, planned(3), None)
        early = await reconcile(target, ledger, ledger.intent(intent.nonce))
        server.batches.config.batch_visible_after = 0  # past the seconds of 404 after the create
        later = await reconcile(target, ledger, ledger.intent(intent.nonce))
        made = [e["batch_id"] for e in server.batches.log if e["event"] == "create"]
        return intent, early, later, ledger.intent(intent.nonce), made, ledger.live_keys()

    # Unseen until the scenario says (a minute of 404s: the early look always falls in them).
    config = cfg(batch_faults={"create_lost": 1.0}, batch_visible_after=60)
    intent, early, later, found, made, live = scenario_run(tmp_path, config, scenario, grace=30)
    assert intent.state == "submitting" and intent.batch_id is None
    assert intent.detail["create_error"].startswith("the create got no answer")
    assert early == "unknown" and later == "found"
    assert found.state == "submitted" and [found.batch_id] == made
    assert len(live) == 3  # never free while the batch may answer them


def test_a_refused_create_is_proven_absent_only_after_the_grace(tmp_path):
    async def scenario(server, target, ledger, store):
        intent = await submit(target, ledger, planned(3), None)  # 503: nothing made
        early = await reconcile(target, ledger, ledger.intent(intent.nonce))
        live_early = ledger.live_keys()
        target.grace = 0  # the grace has passed (a minute's wait, without the minute)
        later = await reconcile(target, ledger, ledger.intent(intent.nonce))
        outcomes = {o for (o,) in ledger.db.execute("SELECT outcome FROM batch_rows")}
        settled = ledger.intent(intent.nonce)
        return early, live_early, later, settled, ledger.live_keys(), outcomes

    config = cfg(batch_faults={"create_refused": 1.0})
    early, live_early, later, settled, live, outcomes = scenario_run(
        tmp_path, config, scenario, grace=60
    )
    assert early == "unknown" and len(live_early) == 3
    assert later == "absent" and settled.state == "absent"
    assert live == set() and outcomes == {"absent"}


def test_two_lost_creates_of_one_shape_are_told_apart_by_the_nonces_in_their_results(tmp_path):
    async def scenario(server, target, ledger, store):
        first = await submit(target, ledger, planned(4), None)
        second = await submit(target, ledger, planned(4, start=10), None)
        # Another client of the workspace, same model, endpoint and size.
        foreign = [
            {"custom_id": f"other-{i}", "body": {"messages": [{"role": "user", "content": "x"}]}}
            for i in range(4)
        ]
        body = {"endpoint": "/v1/chat/completions", "model": MODEL, "requests": foreign}
        server.batches.config.batch_faults = {}
        async with aiohttp.ClientSession() as session:
            await session.post(
                server.base_url + "/batches", json=body, headers={"Authorization": "Bearer k"}
            )
        batches = server.batches
        batches.config.batch_visible_after = 0  # visible, no row done yet: nothing tells them apart
        undecided = await reconcile(target, ledger, ledger.intent(first.nonce))
        assert all(batch.produced == 0 for batch in batches.batches.values())
        batches.config.batch_seconds = 0  # rows done: their custom_ids name their intents

        def ended() -> bool:
            """every batch final"""
            return all(batch.terminal for batch in batches.batches.values())

        await until(ended)
        settled = await reconcile(target, ledger, ledger.intent(first.nonce))
        other = ledger.intent(second.nonce)
        made = {}
        for event in server.batches.log:
            if event["event"] == "create":
                made[event["batch_id"]] = nonce_of(event["rows"][0]["custom_id"])
        return undecided, settled, ledger.intent(first.nonce), other, made

    # The scenario moves the simulator's clock settings itself: a minute unseen, a minute a batch.
    config = cfg(batch_faults={"create_lost": 1.0}, batch_visible_after=60, batch_seconds=60)
    undecided, settled, first, second, made = scenario_run(tmp_path, config, scenario, grace=30)
    assert undecided == "unknown"
    assert settled == "found"
    # One reconciliation bound both intents, each to the batch holding its own custom_ids.
    assert made[first.batch_id] == first.nonce and made[second.batch_id] == second.nonce
    assert second.state == "submitted"


def test_a_lost_openai_create_is_found_by_its_metadata_and_an_unsent_one_is_absent(tmp_path):
    async def scenario(server, target, ledger, store):
        lost = await submit(target, ledger, planned(3, "openai-files"), None)
        found = await reconcile(target, ledger, ledger.intent(lost.nonce))
        # An intent that never got to upload (a kill before it): no create can have been sent.
        never = await submit(target, ledger, planned(2, "openai-files", start=5), None)
        store.db.execute(
            "UPDATE batch_intents SET state = 'submitting', batch_id = NULL, input_file_id = NULL"
            " WHERE nonce = ?",
            (never.nonce,),
        )
        absent = await reconcile(target, ledger, ledger.intent(never.nonce))
        return found, ledger.intent(lost.nonce), absent, server

    config = cfg(batch_faults={"create_5xx": 1.0})
    found, lost, absent, server = scenario_run(tmp_path, config, scenario, "openai-files", 30)
    assert found == "found" and lost.batch_id in server.batches.batches
    assert server.batches.batches[lost.batch_id].metadata == {"draftgen_nonce": lost.nonce}
    assert absent == "absent"


@pytest.mark.parametrize("dialect", ["openrouter", "openai-files"])
def test_failed_and_expired_batches_free_their_unanswered_rows(tmp_path, dialect):
    async def scenario(server, target, ledger, store):
        out = {}
        for fault in ("batch_failed", "expire"):
            server.batches.config.batch_faults = {fault: 1.0}
            intent = await submit(target, ledger, planned(8, dialect, start=len(out) * 8), None)
            info = await until_final(target, intent.batch_id)
            out[fault] = (info, await ingest(target, ledger, ledger.intent(intent.nonce), info))
        return out, ledger.live_keys()

    out, live = scenario_run(tmp_path, cfg(), scenario, dialect)
    info, report = out["batch_failed"]
    assert info.status == "failed" and report.stored == 0
    assert report.sentence.startswith(f"batch {info.id} failed: ")
    assert "invalid request body" in report.sentence
    assert report.sentence.endswith("its 8 rows go back to pending")
    assert {r.outcome for r in report.unanswered} == {"batch_failed"}
    info, report = out["expire"]
    assert info.status == "expired" and 0 < report.stored < 8
    assert len(report.unanswered) == 8 - report.stored
    assert {r.outcome for r in report.unanswered} == {"expired"}
    assert all(r.retryable for r in report.unanswered)
    assert live == set()


def test_row_errors_are_retryable_and_carry_the_live_error_shape(tmp_path):
    async def scenario(server, target, ledger, store):
        intent = await submit(target, ledger, planned(10), None)
        info = await until_final(target, intent.batch_id)
        report = await ingest(target, ledger, ledger.intent(intent.nonce), info)
        errors = ledger.earlier_errors([r.key for r in report.unanswered])
        return report, errors, target

    report, errors, target = scenario_run(
        tmp_path, cfg(batch_faults={"row_error": 0.5}, seed=4), scenario
    )
    assert report.unanswered and report.stored == 10 - len(report.unanswered)
    for row in report.unanswered:
        assert row.outcome == "failed" and row.retryable
        (error,) = errors[row.key]
        assert error["kind"] == "server_error" and error["message"] == "Upstream provider error"
        assert error["endpoint"] == target.url


@pytest.mark.parametrize("dialect", ["openrouter", "openai-files"])
def test_a_cancelled_batch_frees_its_rows_and_returns_the_finished_ones_where_the_api_does(
    tmp_path, dialect
):
    async def scenario(server, target, ledger, store):
        intent = await submit(target, ledger, planned(10, dialect), None)
        batch = server.batches.batches[intent.batch_id]

        def started() -> bool:
            """a row finished"""
            return batch.produced > 0

        server.batches.config.batch_visible_after = 0
        await until(started)  # a row a second: the cancel comes long before the last
        asked = await target.dialect.cancel(target.http, intent.batch_id)
        final = await until_final(target, intent.batch_id)
        report = await ingest(target, ledger, ledger.intent(intent.nonce), final)
        late = await target.dialect.cancel(target.http, intent.batch_id)
        billed = len(server.truth)
        return asked, final, report, late, billed, ledger.live_keys()

    config = cfg(batch_seconds=10.0, batch_cancel_seconds=0.1)
    asked, final, report, late, billed, live = scenario_run(tmp_path, config, scenario, dialect)
    status, info, _ = asked
    assert status == 200 and info.status == "cancelling"
    assert final.status == "cancelled" and 0 < billed < 10  # finished rows are charged
    # OpenRouter returns no rows of a cancelled batch; OpenAI returns the finished ones.
    assert report.stored == (0 if dialect == "openrouter" else billed)
    assert len(report.unanswered) == 10 - report.stored
    assert {r.outcome for r in report.unanswered} == {"cancelled"}
    assert late[0] == 409 and live == set()

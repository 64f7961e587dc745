"""The live engine's steps one by one (``draftgen.generate.engine``), with requests stubbed.

The end-to-end tests prove what a run stores; these pin what they cannot see: the history each
turn is asked with, which turns a broken chain fails and why, in-flight sharing, what a stop ends,
and what each signal does (SIGTERM included, which no subprocess test sends).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal

from draftgen.generate.budget import BudgetReached
from draftgen.generate.client import FatalApiError, GenerationFailed
from draftgen.generate.contract import Destination
from draftgen.generate.engine import LiveGeneration
from draftgen.generate.errors import RunError
from draftgen.generate.signals import SignalStop
from draftgen.inputs.ingest import Conversation, Rejection
from draftgen.inputs.plan import plan_turns, sample_chains
from draftgen.inputs.shard import Shard
from draftgen.run.context import RunContext
from draftgen.run.pipeline import RunOptions
from draftgen.store.database import Store, StoreError

TOKENIZER = "fixture:kimi-k2.5"
THREE_TURNS = (
    {"role": "user", "content": "a"},
    {"role": "assistant", "content": "old a"},
    {"role": "user", "content": "b"},
    {"role": "assistant", "content": "old b"},
    {"role": "user", "content": "c"},
)


def conversation(source_id: str = "r1", messages=THREE_TURNS, line: int = 1) -> Conversation:
    return Conversation(source_id, tuple(messages), None, "rows.jsonl", line)


def engine_for(tmp_path, **changes) -> LiveGeneration:
    """An engine over a fresh store whose endpoint is never reached (requests are stubbed)."""
    rows = tmp_path / "rows.jsonl"
    rows.touch()
    options = RunOptions(
        inputs=[str(rows)], model="m", tokenizer=TOKENIZER, out=tmp_path, **changes
    )
    ctx = dataclasses.replace(RunContext.build(options), total_rows=10)
    return LiveGeneration(ctx, Store(tmp_path), Destination("http://127.0.0.1:9/api/v1", "key"))


def run_with(tmp_path, body, **changes):
    """Run ``body(engine)`` in an event loop, then close the engine; its result and the store's
    failures as (turn, reason)."""

    async def main():
        engine = engine_for(tmp_path, **changes)
        try:
            result = await body(engine)
        finally:
            await engine.close()
            engine.store.close()
        with Store(tmp_path) as store:
            failures = [(row["turn"], row["reason"]) for row in store.tallies.failure_rows()]
        return engine, result, failures

    return asyncio.run(main())


def scripted(calls: list, finishes: dict | None = None, raises: dict | None = None):
    """A ``generate_turn`` that records (source id, turn, answers so far) and answers
    "<source id>:<turn>", finished as ``finishes`` says (default "stop")."""

    async def generate_turn(plan, answers):
        calls.append((plan.source_id, plan.turn, list(answers)))
        if raises and plan.turn in raises:
            raise raises[plan.turn]
        return f"{plan.source_id}:{plan.turn}", (finishes or {}).get(plan.turn, "stop")

    return generate_turn


def test_each_turn_is_asked_with_the_answers_before_it(tmp_path):
    calls = []

    async def body(engine):
        engine.chains.generate_turn = scripted(calls)
        await engine.chains.work_chain(plan_turns(conversation()))

    engine, _, failures = run_with(tmp_path, body)
    assert calls == [("r1", 0, []), ("r1", 1, ["r1:0"]), ("r1", 2, ["r1:0", "r1:1"])]
    assert failures == []
    assert engine.progress.turns_failed == 0


def test_each_sample_follows_its_own_answers(tmp_path):
    calls = []

    async def body(engine):
        engine.chains.generate_turn = scripted(calls)
        await engine.chains.work_chain(plan_turns(conversation()))

    run_with(tmp_path, body, samples=2)
    assert sorted(calls) == [
        ("r1", 0, []),
        ("r1", 1, ["r1:0"]),
        ("r1", 2, ["r1:0", "r1:1"]),
        ("r1#1", 0, []),
        ("r1#1", 1, ["r1#1:0"]),
        ("r1#1", 2, ["r1#1:0", "r1#1:1"]),
    ]


def test_an_unfinished_turn_fails_the_turns_after_it_but_not_the_last(tmp_path):
    calls = []

    async def body(engine):
        engine.chains.generate_turn = scripted(calls, finishes={1: "length"})
        await engine.chains.work_chain(plan_turns(conversation()))
        # The last turn may end unfinished: nothing comes after it.
        engine.chains.generate_turn = scripted(calls, finishes={0: "length"})
        await engine.chains.work_chain(
            plan_turns(conversation("r2", [{"role": "user", "content": "z"}]))
        )

    engine, _, failures = run_with(tmp_path, body)
    assert calls == [("r1", 0, []), ("r1", 1, ["r1:0"]), ("r2", 0, [])]
    assert failures == [(2, "earlier_turn_incomplete")]
    assert engine.progress.turns_failed == 1


def test_a_failed_turn_fails_the_turns_after_it(tmp_path):
    calls = []

    async def body(engine):
        failed = GenerationFailed("http_500", [])
        engine.chains.generate_turn = scripted(calls, raises={0: failed})
        await engine.chains.work_chain(plan_turns(conversation()))

    engine, _, failures = run_with(tmp_path, body)
    # The failed turn's own row is generate_turn's to write (stubbed here): the rest are failed.
    assert calls == [("r1", 0, [])]
    assert failures == [(1, "earlier_turn_failed"), (2, "earlier_turn_failed")]
    assert engine.progress.turns_failed == 2


def test_a_broken_chain_leaves_turns_stored_by_another_row_alone(tmp_path):
    async def body(engine):
        plans = plan_turns(conversation())
        engine.stored.add(plans[2].key, True)  # an identical turn of another row, answered
        engine.chains.generate_turn = scripted([], raises={0: GenerationFailed("http_500", [])})
        await engine.chains.work_chain(plans)

    _, _, failures = run_with(tmp_path, body)
    assert failures == [(1, "earlier_turn_failed")]


def test_a_budget_stop_ends_the_chain_without_failing_it(tmp_path):
    calls = []
    sentence = "--max-cost $1.00 reached: $0.99 spent"

    async def body(engine):
        engine.chains.generate_turn = scripted(calls, raises={1: BudgetReached(sentence)})
        await engine.chains.work_chain(plan_turns(conversation()))
        await engine.chains.work_chain(plan_turns(conversation("r2")))  # after the stop: nothing
        return engine.client.stop_reason

    engine, stop_reason, failures = run_with(tmp_path, body)
    assert calls == [("r1", 0, []), ("r1", 1, ["r1:0"])]
    assert failures == []
    assert (engine.progress.stopped, stop_reason) == (sentence, sentence)


def test_the_first_stop_reason_stays(tmp_path):
    async def body(engine):
        engine.stopping.request_stop("interrupted")
        engine.stopping.request_stop("--max-cost reached")
        return engine.client.stop_reason, engine.stop.is_set()

    engine, (stop_reason, stopped), _ = run_with(tmp_path, body)
    assert (engine.progress.stopped, stop_reason, stopped) == ("interrupted", "interrupted", True)


def test_identical_turns_in_flight_are_requested_once(tmp_path):
    calls = []

    async def body(engine):
        release = asyncio.Event()

        async def generate_turn(plan, answers):
            calls.append(plan.turn)
            await release.wait()
            return "shared", "stop"

        engine.chains.generate_turn = generate_turn
        plan = plan_turns(conversation())[0]
        first = asyncio.create_task(engine.chains.answer(plan, [], history=False))
        await asyncio.sleep(0)
        second = asyncio.create_task(engine.chains.answer(plan, [], history=False))
        await asyncio.sleep(0)
        duplicates_in_flight = engine.progress.turns_duplicate
        release.set()
        answers = [await first, await second]
        # Stored now: a third asks nothing and, without history, reads nothing.
        answers.append(await engine.chains.answer(plan, [], history=False))
        return duplicates_in_flight, answers, dict(engine.chains.inflight)

    engine, (in_flight, answers, inflight), _ = run_with(tmp_path, body)
    assert calls == [0]
    assert in_flight == 1
    assert answers == [("shared", True), ("shared", True), ("", True)]
    assert engine.progress.turns_duplicate == 2
    assert inflight == {}


def test_a_shared_turn_that_fails_fails_for_both(tmp_path):
    async def body(engine):
        release = asyncio.Event()
        failed = GenerationFailed("http_500", [])

        async def generate_turn(plan, answers):
            await release.wait()
            raise failed

        engine.chains.generate_turn = generate_turn
        plan = plan_turns(conversation())[0]
        tasks = [
            asyncio.create_task(engine.chains.answer(plan, [], history=False)) for _ in range(2)
        ]
        await asyncio.sleep(0)
        release.set()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        return [r is failed for r in results], plan.key in engine.stored

    _, (same, stored), _ = run_with(tmp_path, body)
    assert same == [True, True]
    assert stored is False


def test_next_chain_gives_queued_rows_until_the_end_mark_or_a_stop(tmp_path):
    async def body(engine):
        got = []
        await engine.queue.put(["row"])
        await engine.queue.put(None)
        got.append(await engine.chains.next_chain())
        got.append(await engine.chains.next_chain())
        waiting = asyncio.create_task(engine.chains.next_chain())  # an empty queue: it waits
        await asyncio.sleep(0)
        await engine.queue.put(["late row"])
        got.append(await waiting)
        waiting = asyncio.create_task(engine.chains.next_chain())
        await asyncio.sleep(0)
        engine.stopping.request_stop("interrupted")
        got.append(await waiting)
        await engine.queue.put(["after the stop"])
        got.append(await engine.chains.next_chain())
        return got, engine.queue.qsize()

    _, (got, left), _ = run_with(tmp_path, body)
    assert got == [["row"], None, ["late row"], None, None]
    assert left == 1


def test_produce_queues_rows_in_input_order_then_one_end_mark_per_worker(tmp_path):
    rows = tmp_path / "rows.jsonl"

    async def body(engine):
        rows.write_text(
            '{"id": "a", "messages": [{"role": "user", "content": "one"}]}\n'
            "not json\n"
            '{"id": "b", "messages": [{"role": "user", "content": "two"}]}\n'
        )
        await engine.rows.produce()
        queued = []
        while not engine.queue.empty():
            plans = engine.queue.get_nowait()
            queued.append(None if plans is None else [p.source_id for p in plans])
        return queued

    engine, queued, _ = run_with(tmp_path, body, concurrency=3)
    assert queued == [["a"], ["b"], None, None, None]
    # Counted here; the planner lists it (tests/inputs/test_admission.py), the engine writes none.
    assert (engine.progress.rejected, engine.progress.rows_done) == (1, 1)
    assert not (tmp_path / "rejected.jsonl").exists()


def test_admit_counts_rejections_and_skips_other_shards_rows(tmp_path):
    async def body(engine):
        results = [
            engine.rows.admit(Rejection("rows.jsonl", 1, "not JSON")),
            engine.rows.admit(conversation("s", ({"role": "system", "content": "only"},), line=2)),
            engine.rows.admit(conversation("r1", line=3)),
            engine.rows.admit(conversation("r1", THREE_TURNS[:1], line=4)),  # its id, other turns
        ]
        kept = [None if r is None else [p.turn for p in r] for r in results]
        totals = engine.progress.total_rows, engine.progress.rejected
        # Each row is one shard's: of two shards' engines exactly one admits it.
        admitted = []
        for index in (0, 1):
            engine.options.shard = Shard(index, 2)
            admitted.append(engine.rows.admit(conversation("r1", line=3)) is not None)
        return kept, totals, admitted, engine.progress.total_rows

    _, (kept, totals, admitted, total_after), _ = run_with(tmp_path, body)
    assert kept == [None, None, [0, 1, 2], None]
    assert totals == (10, 3)
    assert sorted(admitted) == [False, True]
    assert total_after == 9
    assert not (tmp_path / "rejected.jsonl").exists()  # the planner's to write


def test_a_chain_is_done_when_every_turn_but_the_last_is_complete(tmp_path):
    async def body(engine):
        first, second = plan_turns(conversation())[:2]
        stored = engine.stored
        seen = [stored.holds_chain([first, second])]
        stored.add(first.key, False)
        stored.add(second.key, False)
        seen.append(stored.holds_chain([first, second]))  # turn 0 unfinished: turn 1 is stale
        stored.add(first.key, True)
        seen.append(stored.holds_chain([first, second]))  # the last may be unfinished
        seen.append(stored.holds_chain(sample_chains([first, second], 2)[1]))
        return seen

    _, seen, _ = run_with(tmp_path, body)
    assert seen == [False, False, True, False]


def test_fatal_api_and_store_errors_stop_the_run_with_how_to_resume(tmp_path):
    (tmp_path / "rows.jsonl").write_text('{"messages": [{"role": "user", "content": "x"}]}\n')
    messages = []
    for error in (FatalApiError("401 the key was refused"), StoreError("disk I/O error")):

        async def body(engine, error=error):
            async def work_chain(plans):
                raise error

            engine.chains.work_chain = work_chain
            try:
                await engine._work(engine.rows.produce())
            except RunError as exc:
                messages.append(str(exc))

        run_with(tmp_path, body, concurrency=2)
    assert messages == [
        f"stopped: 401 the key was refused; everything generated so far is stored in {tmp_path} "
        "and the same command resumes",
        "disk I/O error; what was committed before is safe: fix the cause (disk space, "
        "permissions) and rerun the same command to resume",
    ]


def test_a_first_signal_stops_and_waits_a_second_abandons(tmp_path, capsys):
    async def body(engine):
        loop = asyncio.get_running_loop()
        engine.stopping.workers = [loop.create_task(asyncio.sleep(60)) for _ in range(2)]
        engine.stopping.producer = loop.create_task(asyncio.sleep(60))
        signals = SignalStop(engine.stopping, loop)
        signals.on_signal(signal.SIGTERM)
        await asyncio.sleep(0)
        after_first = (
            engine.progress.stopped,
            engine.progress.signal,
            engine.client.stop_reason,
            engine.stopping.producer.cancelled(),
            [w.cancelled() for w in engine.stopping.workers],
        )
        first_words = capsys.readouterr().err
        signals.on_signal(signal.SIGINT)
        await asyncio.sleep(0)
        after_second = [w.cancelled() for w in engine.stopping.workers]
        return after_first, first_words, after_second, capsys.readouterr().err

    _, (after_first, first, after_second, second), _ = run_with(tmp_path, body)
    # The first signal is the one kept (SIGTERM: exit 143); with none in flight no wait is named.
    assert after_first == ("interrupted", signal.SIGTERM, "interrupted", True, [False, False])
    assert first == "draftgen: stopping; no request is in flight, so there is nothing to wait for\n"
    assert after_second == [True, True]
    assert second == "draftgen: abandoning the requests in flight\n"


def test_sigterm_stops_like_ctrl_c_and_the_grace_abandons(tmp_path, capsys):
    async def body(engine):
        loop = asyncio.get_running_loop()
        engine.stopping.workers = [loop.create_task(asyncio.sleep(60))]
        engine.stopping.producer = loop.create_task(asyncio.sleep(60))
        signals = SignalStop(engine.stopping, loop)
        signals.install()
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            await asyncio.sleep(0.05)
            stopped = engine.progress.stopped, engine.stopping.workers[0].cancelled()
            await asyncio.sleep(0.3)  # the grace ends: the requests in flight are abandoned
            return stopped, engine.stopping.workers[0].cancelled()
        finally:
            signals.remove()

    _, (stopped, abandoned), _ = run_with(tmp_path, body, shutdown_grace=0.2)
    assert stopped == ("interrupted", False)
    assert abandoned is True
    assert capsys.readouterr().err == (
        "draftgen: stopping; no request is in flight, so there is nothing to wait for\n"
    )
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


def test_the_first_signal_names_the_requests_it_waits_for(tmp_path):
    async def body(engine):
        said = []
        for in_flight in (1, 3):
            engine.stop.clear()
            engine.client.limiter.in_flight = in_flight
            said.append(engine.stopping.on_first_signal())
        engine.client.limiter.in_flight = 0
        return said

    _, said, _ = run_with(tmp_path, body)
    assert said == [
        "draftgen: stopping; waiting up to 30 s for 1 request in flight (Ctrl-C again to "
        "abandon them)",
        "draftgen: stopping; waiting up to 30 s for 3 requests in flight (Ctrl-C again to "
        "abandon them)",
    ]


def test_a_row_the_stop_cuts_short_is_not_counted_as_worked(tmp_path):
    calls = []

    async def body(engine):
        normal = scripted(calls)

        async def generate_turn(plan, answers):
            if plan.source_id == "r3":
                engine.stopping.request_stop("interrupted")  # as Ctrl-C would, during the request
            return await normal(plan, answers)

        engine.chains.generate_turn = generate_turn
        for source_id in ("r1", "r2", "r3", "r4"):
            row = conversation(source_id, [{"role": "user", "content": source_id}])
            await engine.queue.put(plan_turns(row))
        await engine.chains.worker()
        return engine.progress.rows_worked, engine.queue.qsize()

    _, (worked, left), _ = run_with(tmp_path, body)
    assert worked == 2
    assert left == 1  # r4: never taken
    assert calls == [("r1", 0, []), ("r2", 0, []), ("r3", 0, [])]

"""The simulator's batch APIs, OpenRouter dialect: the wire facts of OpenRouter's Batch API
reference (docs/batch.md) and ground truth for every billed row."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import orjson
import pytest

from draftgen.simulator import SimConfig, start_simulator
from draftgen.simulator.batch import ORDER_ERROR, body_digest

AUTH = {"Authorization": "Bearer sk-test"}
MODEL = "moonshotai/kimi-k2.5"


def cfg(**kw) -> SimConfig:
    kw.setdefault("min_tokens", 20)
    kw.setdefault("max_tokens", 60)
    kw.setdefault("batch_visible_after", 0.3)
    kw.setdefault("batch_validate_seconds", 0.1)
    kw.setdefault("batch_seconds", 0.4)
    kw.setdefault("batch_finalize_seconds", 0.05)
    return SimConfig(tokenizer="fixture:kimi-k2.5", **kw)


def run(config: SimConfig, scenario):
    async def main():
        server = await start_simulator(config)
        try:
            async with aiohttp.ClientSession() as session:
                return await scenario(server, session)
        finally:
            await server.close()

    return asyncio.run(main())


def row(i: int, **body) -> dict:
    messages = [{"role": "user", "content": f"Question {i}: what is {i} squared?"}]
    return {"custom_id": f"dg0a1b2c3d4e-{i:05d}", "body": {"messages": messages, **body}}


def create_body(rows: list[dict], **extra) -> dict:
    # endpoint and model first: OpenRouter stream-parses the body.
    return {"endpoint": "/v1/chat/completions", "model": MODEL, **extra, "requests": rows}


def batches_url(server) -> str:
    return server.base_url + "/batches"


async def call(session, method, url, body=None):
    data = orjson.dumps(body) if body is not None else None
    async with session.request(method, url, data=data, headers=AUTH) as resp:
        raw = await resp.read()
        return resp.status, (orjson.loads(raw) if raw else None)


async def wait_final(server, session, batch_id, timeout=10.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status, body = await call(session, "GET", f"{batches_url(server)}/{batch_id}")
        if status == 200 and body["status"] in ("completed", "failed", "expired", "cancelled"):
            return body
        await asyncio.sleep(0.05)
    raise AssertionError(f"batch {batch_id} did not finish")


async def all_results(server, session, batch_id, limit) -> tuple[list[dict], list[str | None]]:
    rows, cursors, cursor = [], [], None
    while True:
        url = f"{batches_url(server)}/{batch_id}/results?limit={limit}"
        if cursor:
            url += f"&cursor={cursor}"
        status, page = await call(session, "GET", url)
        assert status == 200, page
        rows += page["data"]
        cursors.append(page["next_cursor"])
        if not page["has_more"]:
            assert page["next_cursor"] is None
            return rows, cursors
        cursor = page["next_cursor"]


def test_a_batch_is_202_validating_then_404_for_a_while_then_completes_with_paged_results():
    async def scenario(server, session):
        status, created = await call(
            session, "POST", batches_url(server), create_body([row(i) for i in range(5)])
        )
        assert status == 202
        assert created["status"] == "validating" and created["results"] is None
        assert created["request_counts"] == {"total": 5, "completed": 0, "failed": 0}
        # Right after the 202 the batch is not found, by id or in the listing.
        seen_early, _ = await call(session, "GET", f"{batches_url(server)}/{created['id']}")
        _, early_list = await call(session, "GET", batches_url(server))
        final = await wait_final(server, session, created["id"])
        rows, cursors = await all_results(server, session, created["id"], limit=2)
        again, _ = await all_results(server, session, created["id"], limit=2)
        return created, seen_early, early_list, final, rows, cursors, again, server

    created, seen_early, early_list, final, rows, cursors, again, server = run(cfg(), scenario)
    assert seen_early == 404 and early_list["data"] == []
    assert final["status"] == "completed" and final["error"] is None
    assert final["request_counts"] == {"total": 5, "completed": 5, "failed": 0}
    assert len(cursors) == 3 and cursors[-1] is None  # 2 + 2 + 1 rows
    assert rows == again, "pages are stable across reads"
    assert [r["custom_id"] for r in rows] == [f"dg0a1b2c3d4e-{i:05d}" for i in range(5)]
    assert final["results"] == rows  # a final batch carries its rows inline too
    truth = server.truth
    cost = 0.0
    for result in rows:
        assert result["error"] is None and result["response"]["status_code"] == 200
        body = result["response"]["body"]
        assert body["id"].startswith("gen-batch-")
        record = truth[body["id"]]
        assert record["custom_id"] == result["custom_id"] and record["batch_id"] == created["id"]
        usage = body["usage"]
        assert usage["completion_tokens"] == len(record["completion_ids"])
        assert usage["prompt_tokens"] == len(record["prompt_ids"])
        live = usage["prompt_tokens"] * 0.0000006 + usage["completion_tokens"] * 0.0000025
        assert usage["cost"] == pytest.approx(live / 2)  # the :batch price, half here
        assert record["cost"] == usage["cost"]
        cost += usage["cost"]
    assert final["usage"]["cost"] == pytest.approx(cost)
    assert final["provider"] in ("SiliconFlow", "Chutes", "AtlasCloud")
    assert {r["response"]["body"]["provider"] for r in rows} == {final["provider"]}


def test_create_refusals_are_synchronous_and_say_why():
    async def scenario(server, session):
        url = batches_url(server)
        out = {}
        # requests before model: the stream parser refuses it.
        out["order"] = await call(
            session,
            "POST",
            url,
            {"requests": [row(0)], "endpoint": "/v1/chat/completions", "model": MODEL},
        )
        out["duplicate"] = await call(session, "POST", url, create_body([row(1), row(1)]))
        long_id = {**row(2), "custom_id": "x" * 65}
        out["long"] = await call(session, "POST", url, create_body([long_id]))
        out["model"] = await call(session, "POST", url, create_body([row(3, model="other/m")]))
        out["empty"] = await call(session, "POST", url, create_body([]))
        out["window"] = await call(
            session, "POST", url, create_body([row(4)], completion_window="48h")
        )
        out["routing"] = await call(
            session, "POST", url, create_body([row(5)], provider={"order": ["chutes"]})
        )
        out["nobody"] = await call(
            session, "POST", url, create_body([row(6)], provider={"only": ["nobody"]})
        )
        async with session.post(url, json=create_body([row(7)])) as resp:
            out["auth"] = resp.status
        _, listing = await call(session, "GET", url)
        return out, listing

    out, listing = run(cfg(), scenario)
    assert out["order"] == (
        400,
        {
            "error": {
                "code": 400,
                "message": ORDER_ERROR,
                "metadata": {"error_type": "invalid_request"},
            }
        },
    )
    assert out["duplicate"][0] == 422
    assert "Duplicate custom_id 'dg0a1b2c3d4e-00001'" in out["duplicate"][1]["error"]["message"]
    assert out["long"][0] == 422 and "longer than 64" in out["long"][1]["error"]["message"]
    assert (
        out["model"][0] == 400
        and "must equal the batch model" in out["model"][1]["error"]["message"]
    )
    assert out["empty"][0] == 400 and out["window"][0] == 400 and out["routing"][0] == 400
    assert out["nobody"][0] == 404
    assert out["auth"] == 401
    assert listing["data"] == []  # none of them made a batch


def test_a_model_without_a_batch_endpoint_is_refused_and_the_listing_shows_batch_prices():
    async def scenario(server, session):
        body = {**create_body([row(0)]), "model": "other/model"}
        refused = await call(session, "POST", batches_url(server), body)
        _, listing = await call(session, "GET", server.base_url + "/models")
        return refused, listing

    refused, listing = run(cfg(batch_models=(MODEL,)), scenario)
    assert refused[0] == 400
    assert refused[1]["error"]["message"] == "Model 'other/model' does not have a :batch endpoint."
    prices = {m["id"]: m["pricing"] for m in listing["data"]}
    assert float(prices[MODEL]["prompt"]) == 0.0000006
    assert float(prices[MODEL + ":batch"]["prompt"]) == 0.0000003
    assert float(prices[MODEL + ":batch"]["completion"]) == 0.00000125


def test_one_bad_line_fails_the_whole_batch_after_the_202_and_nothing_is_billed():
    async def scenario(server, session):
        rows = [row(0), row(1, stream=True), row(2)]
        status, created = await call(session, "POST", batches_url(server), create_body(rows))
        final = await wait_final(server, session, created["id"])
        results, _ = await all_results(server, session, created["id"], limit=10)
        return status, final, results, server

    status, final, results, server = run(cfg(), scenario)
    assert status == 202
    assert final["status"] == "failed"
    assert final["error"]["message"] == (
        "Request dg0a1b2c3d4e-00001: stream is not supported in batch requests"
    )
    assert results == [] and server.truth == {}
    (end,) = [e for e in server.batches.log if e["event"] == "end"]
    assert end["status"] == "failed" and end["billed_rows"] == 0


def test_expiry_leaves_partial_results_billed_and_readable():
    async def scenario(server, session):
        rows = [row(i) for i in range(10)]
        _, created = await call(session, "POST", batches_url(server), create_body(rows))
        final = await wait_final(server, session, created["id"])
        results, _ = await all_results(server, session, created["id"], limit=100)
        return final, results, server

    final, results, server = run(cfg(batch_faults={"expire": 1.0}), scenario)
    assert final["status"] == "expired"
    assert 0 < len(results) < 10
    assert final["request_counts"]["completed"] == len(results)
    delivered = {r["response"]["body"]["id"] for r in results}
    assert delivered == set(server.truth), "every billed row is readable, and only those"
    assert final["usage"]["cost"] == pytest.approx(sum(t["cost"] for t in server.truth.values()))


def test_per_row_errors_in_a_completed_batch_are_not_billed():
    async def scenario(server, session):
        rows = [row(i) for i in range(12)]
        _, created = await call(session, "POST", batches_url(server), create_body(rows))
        final = await wait_final(server, session, created["id"])
        results, _ = await all_results(server, session, created["id"], limit=5)
        return final, results, server

    final, results, server = run(cfg(batch_faults={"row_error": 0.5}, seed=3), scenario)
    assert final["status"] == "completed"
    failed = [r for r in results if r["error"] is not None]
    ok = [r for r in results if r["error"] is None]
    assert failed and ok and len(results) == 12
    for result in failed:
        assert result["response"] is None and result["error"]["type"] == "server_error"
    assert final["request_counts"] == {"total": 12, "completed": len(ok), "failed": len(failed)}
    assert len(server.truth) == len(ok)


def test_cancel_gives_cancelling_then_cancelled_with_no_rows_and_a_final_batch_refuses():
    async def scenario(server, session):
        rows = [row(i) for i in range(20)]
        _, created = await call(session, "POST", batches_url(server), create_body(rows))
        url = f"{batches_url(server)}/{created['id']}"
        await asyncio.sleep(0.5)  # visible, validated, a few rows done
        first = await call(session, "POST", url + "/cancel")
        repeat = await call(session, "POST", url + "/cancel")
        final = await wait_final(server, session, created["id"])
        results, _ = await all_results(server, session, created["id"], limit=100)
        late = await call(session, "POST", url + "/cancel")
        deleted = await call(session, "DELETE", url)
        gone = await call(session, "GET", url)
        return first, repeat, final, results, late, deleted, gone, server

    config = cfg(batch_seconds=4.0, batch_cancel_seconds=0.2, batch_visible_after=0.1)
    first, repeat, final, results, late, deleted, gone, server = run(config, scenario)
    assert first[0] == 200 and first[1]["status"] == "cancelling"
    assert repeat[0] == 200  # repeat-safe
    assert final["status"] == "cancelled"
    assert results == [] and final["results"] == []
    # Finished rows are charged though no row comes back.
    assert 0 < len(server.truth) < 20
    assert final["usage"]["cost"] == pytest.approx(sum(t["cost"] for t in server.truth.values()))
    assert late[0] == 409 and deleted[0] == 200 and gone[0] == 404


def test_listing_is_newest_first_paged_and_filtered():
    async def scenario(server, session):
        url = batches_url(server)
        ids = []
        for i in range(3):
            _, created = await call(session, "POST", url, create_body([row(i)]))
            ids.append(created["id"])
        await asyncio.sleep(0.4)
        _, first = await call(session, "GET", url + "?limit=2")
        _, second = await call(session, "GET", url + f"?limit=2&after={first['last_id']}")
        _, later = await call(session, "GET", url + f"?created_after={int(time.time()) + 5}")
        final = await wait_final(server, session, ids[-1])
        _, done = await call(session, "GET", url + "?status=completed&status=failed")
        return ids, first, second, later, done, final

    ids, first, second, later, done, final = run(cfg(), scenario)
    assert [b["id"] for b in first["data"]] == ids[::-1][:2] and first["has_more"] is True
    assert [b["id"] for b in second["data"]] == ids[:1] and second["has_more"] is False
    assert all(b["results"] is None for b in first["data"])
    assert later["data"] == []
    assert ids[-1] in {b["id"] for b in done["data"]}


@pytest.mark.parametrize(
    ("fault", "status", "made"),
    [("create_5xx", 502, True), ("create_refused", 503, False), ("create_lost", None, True)],
)
def test_create_faults_leave_the_client_not_knowing_whether_a_batch_exists(fault, status, made):
    async def scenario(server, session):
        try:
            answer = (await call(session, "POST", batches_url(server), create_body([row(0)])))[0]
        except aiohttp.ClientError:
            answer = None
        await asyncio.sleep(0.4)
        _, listing = await call(session, "GET", batches_url(server))
        return answer, listing

    answer, listing = run(cfg(batch_faults={fault: 1.0}), scenario)
    assert answer == status
    assert len(listing["data"]) == (1 if made else 0)


def test_a_batch_row_is_the_completion_a_live_request_of_the_same_prompt_gets():
    """Rows are generated by the live model: ids, text and usage equal a live request's."""
    request = row(0)

    async def live(server, session):
        body = {"model": MODEL, **request["body"], "stream": False}
        async with session.post(
            server.base_url + "/chat/completions", json=body, headers=AUTH
        ) as r:
            return orjson.loads(await r.read()), server

    async def batched(server, session):
        _, created = await call(session, "POST", batches_url(server), create_body([request]))
        await wait_final(server, session, created["id"])
        results, _ = await all_results(server, session, created["id"], limit=10)
        return results[0]["response"]["body"], server

    live_body, live_server = run(cfg(), live)
    batch_body, batch_server = run(cfg(), batched)
    (live_truth,) = live_server.truth.values()
    (batch_truth,) = batch_server.truth.values()
    assert batch_truth["completion_ids"] == live_truth["completion_ids"]
    assert (
        batch_body["choices"][0]["message"]["content"]
        == live_body["choices"][0]["message"]["content"]
    )
    assert batch_body["usage"]["completion_tokens"] == live_body["usage"]["completion_tokens"]
    assert batch_body["usage"]["cost"] == pytest.approx(live_body["usage"]["cost"] / 2)
    (created,) = [e for e in batch_server.batches.log if e["event"] == "create"]
    assert created["rows"] == [
        {"custom_id": request["custom_id"], "body_sha256": body_digest(request["body"])}
    ]

"""Answers whose text passes ``--max-answer-bytes`` (issue #41, item 3): a stream no longer read as
it passes the cap, a whole body refused, each kept apart as billed and bought once more, the turn
failed ``answer_too_long`` on the second; a run keeps them in ``refused_answers``."""

from __future__ import annotations

import asyncio
import json
import sqlite3

import orjson
import pytest
from aiohttp import web
from conftest import start_app

from draftgen.generate.client import (
    ANSWER_CHECK_STEP,
    ChatClient,
    GenerationFailed,
    RetryPolicy,
)
from draftgen.run.pipeline import RunOptions, run

CAP = 64 * 1024  # --max-answer-bytes of these tests
LONG = 2 * 2**20  # the text a long answer would hold, sent as deltas
USAGE = {"prompt_tokens": 7, "completion_tokens": 40_000, "cost": 0.25}


def event(obj: dict) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


class LongServer:
    """Answers every request with ``text`` (a stream of 1 KiB deltas, or one body); counts the
    requests."""

    def __init__(self, text: str, stream: bool) -> None:
        self.text, self.stream = text, stream
        self.hits = 0

    async def start(self) -> str:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._answer)
        self.runner, base_url = await start_app(app)
        return base_url

    async def _answer(self, request: web.Request) -> web.StreamResponse:
        self.hits += 1
        await request.read()
        gid = f"gen-long-{self.hits}"
        if not self.stream:
            message = {"role": "assistant", "content": self.text}
            body = {"id": gid, "provider": "Acme", "usage": USAGE}
            body["choices"] = [{"index": 0, "finish_reason": "stop", "message": message}]
            return web.json_response(body)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        try:
            await response.write(event({"id": gid, "provider": "Acme", "choices": []}))
            for start in range(0, len(self.text), 1024):
                piece = self.text[start : start + 1024]
                await response.write(event({"choices": [{"delta": {"content": piece}}]}))
            await response.write(event({"choices": [{"delta": {}, "finish_reason": "stop"}]}))
            await response.write(event({"choices": [], "usage": USAGE}) + b"data: [DONE]\n\n")
        except ConnectionError:
            pass  # the client stopped reading
        return response


def complete(server: LongServer, attempts: int = 8):
    """``complete`` with a keeper of refused answers: (completion or GenerationFailed, kept)."""
    kept = []

    async def keep(billed, request_bytes):
        kept.append(billed)

    async def main():
        base_url = await server.start()
        try:
            async with ChatClient(
                base_url,
                "sk-test-key-123",
                concurrency=1,
                retry=RetryPolicy(attempts, base_delay=0.01),
                max_answer_bytes=CAP,
            ) as client:
                try:
                    completion, _ = await client.complete(b'{"model": "m"}', server.stream, keep)
                    return completion, kept
                except GenerationFailed as failed:
                    return failed, kept
        finally:
            await server.runner.cleanup()

    return asyncio.run(main())


def test_a_stream_is_no_longer_read_once_its_text_passes_the_cap():
    server = LongServer("é" * (LONG // 2), stream=True)  # 2 bytes a character
    failed, kept = complete(server)
    assert isinstance(failed, GenerationFailed) and failed.reason == "answer_too_long"
    assert [e.kind for e in failed.errors] == ["answer_too_long"] * 2 and server.hits == 2
    for billed in kept:
        # Cut within a check step of the cap (4 bytes a character at most), far short of the
        # answer: what was read is kept, named, and billed on its bytes (its usage never came).
        assert CAP < billed.answer_bytes <= CAP + 4 * ANSWER_CHECK_STEP + 2048
        answer = json.loads(billed.answer)
        assert len(answer["message"]["content"].encode()) == billed.answer_bytes
        assert answer["provider"] == "Acme" and billed.provider == "Acme"
        assert billed.completion_tokens is None and billed.usage == ""
        assert billed.reason.startswith(
            f"a streamed answer, no longer read, held {billed.answer_bytes:,} bytes of text, "
            "more than --max-answer-bytes 65,536"
        )
    assert [b.generation_id for b in kept] == ["gen-long-1", "gen-long-2"]


def test_a_whole_body_past_the_cap_is_kept_apart_on_its_usage():
    server = LongServer("x" * (CAP + 1), stream=False)
    failed, kept = complete(server)
    assert isinstance(failed, GenerationFailed) and failed.reason == "answer_too_long"
    assert server.hits == 2 and len(kept) == 2
    billed = kept[0]
    assert (billed.prompt_tokens, billed.completion_tokens, billed.cost) == (7, 40_000, 0.25)
    assert billed.answer_bytes == CAP + 1 and json.loads(billed.usage) == USAGE
    assert json.loads(billed.answer)["choices"][0]["message"]["content"] == "x" * (CAP + 1)
    assert billed.reason == (
        "an answer held 65,537 bytes of text, more than --max-answer-bytes 65,536; a "
        "--max-tokens bounds the answers, or a larger --max-answer-bytes takes them"
    )


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "body"])
def test_an_answer_of_exactly_the_cap_is_taken(stream):
    text = "é" * (CAP // 2)  # CAP bytes in UTF-8
    completion, kept = complete(LongServer(text, stream=stream))
    assert completion.content == text and kept == []


def test_a_run_keeps_too_long_answers_apart_and_fails_the_turn(tmp_path, monkeypatch):
    rows = tmp_path / "prompts.jsonl"
    rows.write_text(json.dumps({"id": "r0", "messages": [{"role": "user", "content": "Q"}]}))
    monkeypatch.setenv("DRAFTGEN_TEST_KEY", "sk-test")
    server = LongServer("y" * LONG, stream=True)

    async def main():
        base_url = await server.start()
        try:
            options = RunOptions(
                no_calibrate=True,
                inputs=[str(rows)],
                model="test/model",
                tokenizer="fixture:kimi-k2.5",
                out=tmp_path / "run",
                base_url=base_url,
                api_key_env="DRAFTGEN_TEST_KEY",
                stream=True,
                retry_base_delay=0.01,
                progress_interval=3600,
                max_answer_bytes=CAP,
            )
            return await run(options)
        finally:
            await server.runner.cleanup()

    summary = asyncio.run(main())
    assert summary.counts["completions"] == 0
    assert summary.counts["failures"] == {"answer_too_long": 1}
    db = sqlite3.connect(tmp_path / "run" / "draftgen.sqlite")
    kept = db.execute("SELECT source_id, generation_id, reason FROM refused_answers ORDER BY 2")
    assert [(s, g) for s, g, _ in kept.fetchall()] == [("r0", "gen-long-1"), ("r0", "gen-long-2")]
    assert server.hits == 2

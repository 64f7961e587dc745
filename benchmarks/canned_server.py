"""A local OpenRouter-shaped server that answers instantly with canned, pre-serialised responses.

It runs in its own process (started by ``bench.py``) so its CPU is not charged to the pipeline
under test. Responses carry exact ``usage`` counts (prompt counts per prompt, found by the
``[qNNNNNNN]`` tag in the request) so every pipeline reconstructs and verifies as against a real
provider. With ``--tokens-per-second`` a stream is paced as a provider's is: its delta events are
spread so the answer's tokens arrive at that rate (deadlines from the stream's start: a late write
sends all that is due at once).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import time
from array import array

import orjson
from common import ANSWER_MARK, ANSWER_OPENING, PROMPT_TAG

HTTP_CHUNK = 1 << 16


def plain_parts(answer: dict, variant: int) -> tuple[bytes, bytes]:
    """A non-streaming body split around the value of usage.prompt_tokens."""
    body = {
        "id": f"gen-bench-{variant}",
        "provider": "Bench",
        "model": "bench/kimi-k2.5",
        "object": "chat.completion",
        "created": 1767225600,
        "choices": [
            {
                "index": 0,
                "logprobs": None,
                "finish_reason": "stop",
                "native_finish_reason": "stop",
                "message": {
                    "role": "assistant",
                    "content": answer["content"],
                    "refusal": None,
                    "reasoning": answer["reasoning"],
                },
            }
        ],
        "usage": {
            "prompt_tokens": 777777777,
            "completion_tokens": answer["completion_tokens"],
            "total_tokens": 0,
            "cost": 0.001,
        },
    }
    head, tail = orjson.dumps(body).split(b"777777777")
    return head, tail


def stream_parts(answer: dict, variant: int, chunks: int) -> tuple[list[bytes], bytes, bytes]:
    """The SSE events of ``chunks`` deltas (a keep-alive comment first), and the last event split
    around its prompt_tokens."""
    text_r, text_c = answer["reasoning"], answer["content"]
    n_content = max(1, chunks // 10)
    n_reason = chunks - n_content
    # The opening (and its index mark) travels whole in the first event.
    opening = len(ANSWER_OPENING)
    pieces = [("reasoning", text_r[:opening])]
    pieces += [("reasoning", p) for p in _split(text_r[opening:], n_reason - 1)]
    pieces += [("content", p) for p in _split(text_c, n_content)]
    common = {
        "id": f"gen-bench-{variant}",
        "provider": "Bench",
        "model": "bench/kimi-k2.5",
        "object": "chat.completion.chunk",
        "created": 1767225600,
    }
    events = [b": OPENROUTER PROCESSING\n\n"]
    for name, piece in pieces:
        delta = {
            "role": "assistant",
            "content": piece if name == "content" else "",
            "reasoning": piece if name == "reasoning" else None,
        }
        event = {
            **common,
            "choices": [
                {
                    "index": 0,
                    "delta": delta,
                    "finish_reason": None,
                    "native_finish_reason": None,
                    "logprobs": None,
                }
            ],
        }
        events.append(b"data: " + orjson.dumps(event) + b"\n\n")
    final = {
        **common,
        "choices": [
            {
                "index": 0,
                "delta": {"role": "assistant", "content": ""},
                "finish_reason": "stop",
                "native_finish_reason": "stop",
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": 777777777,
            "completion_tokens": answer["completion_tokens"],
            "total_tokens": 0,
            "cost": 0.001,
        },
    }
    head, tail = (b"data: " + orjson.dumps(final) + b"\n\n").split(b"777777777")
    return events, head, tail + b"data: [DONE]\n\n"


def framed(data: bytes) -> bytes:
    """``data`` as HTTP/1.1 chunks of at most HTTP_CHUNK bytes."""
    return b"".join(
        b"%x\r\n" % len(data[i : i + HTTP_CHUNK]) + data[i : i + HTTP_CHUNK] + b"\r\n"
        for i in range(0, len(data), HTTP_CHUNK)
    )


def _split(text: str, parts: int) -> list[str]:
    size = max(1, -(-len(text) // parts))
    out = [text[i : i + size] for i in range(0, len(text), size)]
    return out + [""] * (parts - len(out))


MARK = ANSWER_MARK.encode()


def _mark(body: bytes, index: int) -> bytes:
    """The body with the prompt's index over the answer's first mark (same length)."""
    at = body.find(MARK)
    return body[:at] + b"%07d" % index + body[at + len(MARK) :]


class CannedProtocol(asyncio.Protocol):
    def __init__(self, server: CannedServer) -> None:
        self.server = server
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None
        # Paced replies go out from a task, one after another (HTTP/1.1 on one connection).
        self.replies: collections.deque = collections.deque()
        self.sender: asyncio.Task | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self.buffer[:end]).lower()
            length, at = 0, head.find(b"content-length:")
            if at >= 0:
                stop = head.find(b"\r\n", at)
                length = int(head[at + 15 : stop if stop >= 0 else len(head)])
            if len(self.buffer) < end + 4 + length:
                return
            body = bytes(self.buffer[end + 4 : end + 4 + length])
            del self.buffer[: end + 4 + length]
            reply = self.server.respond(head, body)
            if isinstance(reply, bytes) and self.sender is None:
                self.transport.write(reply)
                continue
            self.replies.append(reply)
            if self.sender is None:
                self.sender = asyncio.get_running_loop().create_task(self.send_replies())

    async def send_replies(self) -> None:
        """Write the queued replies; a paced one (parts, interval) sends part i at i * interval."""
        loop = asyncio.get_running_loop()
        while self.replies and self.transport is not None:
            reply = self.replies.popleft()
            if isinstance(reply, bytes):
                self.transport.write(reply)
                continue
            parts, interval = reply
            start, due = loop.time(), []
            for i, part in enumerate(parts):
                wait = start + i * interval - loop.time()
                if wait > 0 and due:
                    self.transport.write(b"".join(due))
                    due = []
                    await asyncio.sleep(wait)
                    if self.transport is None:
                        return
                due.append(part)
            self.transport.write(b"".join(due))
        self.sender = None

    def connection_lost(self, exc) -> None:
        self.transport = None


class CannedServer:
    def __init__(
        self, counts: array, answers: list[dict], chunks: int, tokens_per_second: float = 0.0
    ) -> None:
        self.counts = counts
        self.first_request: str | None = None  # write the time of the first POST here
        self.plain = [plain_parts(a, v) for v, a in enumerate(answers)]
        self.stream = [stream_parts(a, v, chunks) for v, a in enumerate(answers)] if chunks else []
        self.framed = [framed(b"".join(events)) for events, _, _ in self.stream]
        # Paced: seconds between delta events, so each answer's tokens come at the rate asked.
        pace = tokens_per_second
        self.intervals = [
            a["completion_tokens"] / pace / max(1, chunks - 1) if pace else 0.0 for a in answers
        ]

    def respond(self, head: bytes, body: bytes) -> bytes:
        if self.first_request and head.startswith(b"post"):
            # Written again whenever the file is removed: one server times several runs.
            if not os.path.exists(self.first_request):
                with open(self.first_request, "w") as handle:
                    handle.write(repr(time.time()))
        if not head.startswith(b"post"):
            payload = b'{"data": []}'
            return (
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                % (len(payload), payload)
            )
        at = body.find(PROMPT_TAG)
        index = int(body[at + 2 : at + 9]) if at >= 0 else 0
        variant = index % len(self.plain)
        prompt_tokens = b"%d" % (self.counts[index] if index < len(self.counts) else 0)
        streaming = b'"stream":true' in body or b'"stream": true' in body
        if streaming and self.stream:
            events, head_b, tail_b = self.stream[variant]
            last = head_b + prompt_tokens + tail_b
            headers = (
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n"
            )
            ending = b"%x\r\n" % len(last) + last + b"\r\n0\r\n\r\n"
            if self.intervals[variant]:
                # The keep-alive and the first delta (which holds the mark) go at once; the
                # finish, usage and [DONE] events with the last delta.
                parts = [headers + framed(events[0] + _mark(events[1], index))]
                parts += [framed(event) for event in events[2:]]
                parts[-1] += ending
                return parts, self.intervals[variant]
            return headers + _mark(self.framed[variant], index) + ending
        head_b, tail_b = self.plain[variant]
        payload_len = len(head_b) + len(prompt_tokens) + len(tail_b)
        return (
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
            % payload_len
            + _mark(head_b, index)
            + prompt_tokens
            + tail_b
        )


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--counts", required=True)
    parser.add_argument("--answers", required=True)
    parser.add_argument("--chunks", type=int, default=0)
    parser.add_argument("--first-request", help="write the time of the first POST to this file")
    parser.add_argument(
        "--tokens-per-second", type=float, default=0.0, help="pace streams (0: all at once)"
    )
    args = parser.parse_args()
    counts = array("i")
    with open(args.counts, "rb") as handle:
        counts.frombytes(handle.read())
    with open(args.answers, "rb") as handle:
        answers = orjson.loads(handle.read())
    server = CannedServer(counts, answers, args.chunks, args.tokens_per_second)
    server.first_request = args.first_request
    loop = asyncio.get_running_loop()
    listener = await loop.create_server(
        lambda: CannedProtocol(server), "127.0.0.1", args.port, backlog=4096
    )
    print("ready", flush=True)
    async with listener:
        await listener.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())

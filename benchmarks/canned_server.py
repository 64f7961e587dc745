"""A local OpenRouter-shaped server that answers instantly with canned, pre-serialised responses.

It runs in its own process (started by ``bench.py``) so its CPU is not charged to the pipeline
under test. Responses carry exact ``usage`` counts (prompt counts per prompt, found by the
``[qNNNNNNN]`` tag in the request) so every pipeline reconstructs and verifies as against a real
provider.
"""

from __future__ import annotations

import argparse
import asyncio
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


def stream_parts(answer: dict, variant: int, chunks: int) -> tuple[bytes, bytes, bytes]:
    """An SSE body of ``chunks`` delta events, split around its last event's prompt_tokens."""
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
    prefix = b"".join(events)
    framed = b"".join(
        b"%x\r\n" % len(prefix[i : i + HTTP_CHUNK]) + prefix[i : i + HTTP_CHUNK] + b"\r\n"
        for i in range(0, len(prefix), HTTP_CHUNK)
    )
    return framed, head, tail + b"data: [DONE]\n\n"


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
            self.transport.write(self.server.respond(head, body))

    def connection_lost(self, exc) -> None:
        self.transport = None


class CannedServer:
    def __init__(self, counts: array, answers: list[dict], chunks: int) -> None:
        self.counts = counts
        self.first_request: str | None = None  # write the time of the first POST here
        self.plain = [plain_parts(a, v) for v, a in enumerate(answers)]
        self.stream = [stream_parts(a, v, chunks) for v, a in enumerate(answers)] if chunks else []

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
            framed, head_b, tail_b = self.stream[variant]
            last = head_b + prompt_tokens + tail_b
            return (
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n"
                + _mark(framed, index)
                + b"%x\r\n" % len(last)
                + last
                + b"\r\n0\r\n\r\n"
            )
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
    args = parser.parse_args()
    counts = array("i")
    with open(args.counts, "rb") as handle:
        counts.frombytes(handle.read())
    with open(args.answers, "rb") as handle:
        answers = orjson.loads(handle.read())
    server = CannedServer(counts, answers, args.chunks)
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

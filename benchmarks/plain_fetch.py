"""The machine's HTTP limit: a bare aiohttp + orjson loop that fetches and parses every answer.

No storage, no tokenization, no retries: the least work that still reads each response.
"""

from __future__ import annotations

import argparse
import asyncio

import aiohttp
import orjson
from common import MODEL, read_prompts


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--input", required=True)
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--concurrency", type=int, default=2000)
    parser.add_argument("--stream", action="store_true")
    args = parser.parse_args()
    url = args.base_url.rstrip("/") + "/chat/completions"
    semaphore = asyncio.Semaphore(args.concurrency)
    total = 0

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

        async def one(row: dict) -> None:
            nonlocal total
            body = orjson.dumps(
                {"model": MODEL, "messages": row["messages"], "stream": args.stream}
            )
            # The canned server ignores the key; the simulator wants one, as OpenRouter does.
            headers = {"Authorization": "Bearer bench"}
            async with semaphore, session.post(url, data=body, headers=headers) as response:
                response.raise_for_status()
                if not args.stream:
                    obj = orjson.loads(await response.read())
                    total += len(obj["choices"][0]["message"]["content"])
                    return
                async for line in response.content:
                    if line.startswith(b"data: {"):
                        event = orjson.loads(line[6:])
                        if event["choices"]:
                            total += len(event["choices"][0]["delta"].get("content") or "")

        await asyncio.gather(*(one(row) for row in read_prompts(args.input)))
    print(total)


if __name__ == "__main__":
    asyncio.run(main())

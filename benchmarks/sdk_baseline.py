"""The baseline: the pipeline a user writes with the openai SDK (aiohttp transport) + tokenizer.

Prompts in, one SpecForge row per prompt out, tokenized right where each answer arrives: the
straightforward script, not a strawman (one client, a semaphore, the SDK's own aiohttp transport).
"""

from __future__ import annotations

import argparse
import asyncio

from common import MODEL, TOKENIZER, baseline_row, read_prompts
from openai import AsyncOpenAI, DefaultAioHttpClient


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--input", required=True)
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--concurrency", type=int, default=2000)
    parser.add_argument("--stream", action="store_true")
    args = parser.parse_args()

    from draftgen.tokens.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(TOKENIZER)
    semaphore = asyncio.Semaphore(args.concurrency)
    out = open(args.out, "wb")

    async with AsyncOpenAI(
        base_url=args.base_url, api_key="bench", http_client=DefaultAioHttpClient(), max_retries=3
    ) as client:

        async def one(row: dict) -> None:
            async with semaphore:
                if args.stream:
                    reasoning, content = [], []
                    stream = await client.chat.completions.create(
                        model=MODEL, messages=row["messages"], stream=True
                    )
                    async for chunk in stream:
                        if chunk.choices:
                            delta = chunk.choices[0].delta
                            if delta.content:
                                content.append(delta.content)
                            piece = (delta.model_extra or {}).get("reasoning")
                            if piece:
                                reasoning.append(piece)
                    reasoning_text, content_text = "".join(reasoning), "".join(content)
                else:
                    response = await client.chat.completions.create(
                        model=MODEL, messages=row["messages"]
                    )
                    message = response.choices[0].message
                    reasoning_text = (message.model_extra or {}).get("reasoning") or ""
                    content_text = message.content or ""
            prompt = tokenizer.apply_chat_template(
                row["messages"], tokenize=False, add_generation_prompt=True
            )
            prompt_ids = tokenizer.encode(prompt, add_special_tokens=False)
            completion_ids = tokenizer.encode(
                reasoning_text + "</think>" + content_text + "<|im_end|>", add_special_tokens=False
            )
            out.write(baseline_row(row["id"], prompt_ids, completion_ids))

        await asyncio.gather(*(one(row) for row in read_prompts(args.input)))
    out.close()


if __name__ == "__main__":
    asyncio.run(main())

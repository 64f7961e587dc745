"""The machine's tokenizer limit: batch-encode every prompt and answer text on all cores.

The Rust tokenizer releases the GIL in ``encode_batch(_fast)`` and spreads the batch over every core;
this is the least tokenization work any exact-ids pipeline has to do.
"""

from __future__ import annotations

import argparse

import orjson
from common import TOKENIZER, personalise, read_prompts


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--input", required=True)
    parser.add_argument("--answers", required=True)
    args = parser.parse_args()
    from draftgen.reconstruct_batch import batch_encoder
    from draftgen.rendering import render_prompt
    from draftgen.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(TOKENIZER)
    with open(args.answers, "rb") as handle:
        answers = orjson.loads(handle.read())
    texts = [a["reasoning"] + "</think>" + a["content"] + "<|im_end|>" for a in answers]
    batch: list[str] = []
    encoded = 0
    for index, row in enumerate(read_prompts(args.input)):
        batch.append(render_prompt(tokenizer, row["messages"], None))
        batch.append(personalise(texts[index % len(texts)], index))
        if len(batch) >= 512:
            encoded += sum(
                len(e.ids)
                for e in batch_encoder(tokenizer._tokenizer)(batch, add_special_tokens=False)
            )
            batch = []
    if batch:
        encoded += sum(
            len(e.ids) for e in batch_encoder(tokenizer._tokenizer)(batch, add_special_tokens=False)
        )
    print(encoded)


if __name__ == "__main__":
    main()

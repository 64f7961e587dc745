"""The machine's tokenizer limit: render every prompt and encode it and its answer, nothing else.

``--encoder fast``: what draftgen encodes with (``draftgen.tokens.tokenizer.encode_batch``): the
encoder proven on the first batch, fastokens from when the texts pay for its load; in batches on
every core, the least tokenization work an exact-ids pipeline has to do, so the machine's limit.
``--encoder reference``: the tokenizer's own ``encode(text, add_special_tokens=False)``, one text
at a time, as the SDK baseline (and draftgen before issue 16, for the remote-code Kimi) encodes.
``--encoder tokenizers``: the Rust ``tokenizers`` batch call, issue 3's limit (tokenizer.json only).
Prints the number of ids, and for ``fast`` ``encoder: NAME`` on stderr.
"""

from __future__ import annotations

import argparse
import sys
from functools import partial

import orjson
from common import TOKENIZER, personalise, prompt_renderer, read_prompts


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--input", required=True)
    parser.add_argument("--answers", required=True)
    parser.add_argument("--encoder", choices=("fast", "reference", "tokenizers"), default="fast")
    args = parser.parse_args()
    from draftgen.tokens import fast_encoder
    from draftgen.tokens.tokenizer import encode_batch as draftgen_encode_batch
    from draftgen.tokens.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(TOKENIZER)
    if args.encoder == "fast":
        encode_batch = partial(draftgen_encode_batch, tokenizer)
    elif args.encoder == "tokenizers":
        encode_batch = fast_encoder.TokenizersCodec(tokenizer._tokenizer).encode_batch
    else:
        encode_batch = fast_encoder.ReferenceCodec(tokenizer).encode_batch
    render = prompt_renderer(tokenizer)
    with open(args.answers, "rb") as handle:
        answers = orjson.loads(handle.read())
    texts = [a["reasoning"] + "</think>" + a["content"] + "<|im_end|>" for a in answers]
    batch: list[str] = []
    encoded = 0
    for index, row in enumerate(read_prompts(args.input)):
        batch.append(render(row["messages"]))
        batch.append(personalise(texts[index % len(texts)], index))
        if len(batch) >= 512:
            encoded += sum(map(len, encode_batch(batch)))
            batch = []
    if batch:
        encoded += sum(map(len, encode_batch(batch)))
    if args.encoder == "fast":
        upgrade = fast_encoder.choice_of(tokenizer).upgrade
        if upgrade is not None:
            upgrade.join()  # a load started near the end is part of the cost
        print(f"encoder: {fast_encoder.codec_for(tokenizer).name}", file=sys.stderr)
    print(encoded)


if __name__ == "__main__":
    main()

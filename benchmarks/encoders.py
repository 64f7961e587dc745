"""Every encoder draftgen may use for a tokenizer, side by side on the same texts, in one process.

    .venv/bin/python benchmarks/encoders.py                       # 8 MB of text per tokenizer
    .venv/bin/python benchmarks/encoders.py --mb 2 --tokenizer fixture:kimi-k2.5-remote

For each tokenizer: the tokenizer's own ``encode(text, add_special_tokens=False)`` one text at a
time (the reference, what the SDK baseline does), then each candidate
``draftgen.tokens.fast_encoder`` proves identical (the tiktoken encoding inside a remote-code class,
the Rust ``tokenizers`` batch
call, fastokens), each in batches of 512 texts. Every candidate's ids are compared with the
reference's; wall and CPU time (all threads) are measured around the encoding alone, after
loading. Only ratios within one run mean anything on a shared machine.
"""

from __future__ import annotations

import argparse
import os
import random
import time

TOKENIZERS = ("fixture:kimi-k2.5", "fixture:kimi-k2.5-remote", "fixture:deepseek-v4")


def texts_of(megabytes: float, seed: int = 0) -> list[str]:
    """Answers of ~10 KB, each composed on its own (the simulator's text pool, as the canned
    answers), every tenth word replaced by a random one so no word cache holds them all."""
    from draftgen.simulator.textpool import compose

    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyzéüßçøæåαβγдиж你好世界"
    texts, size = [], 0
    while size < megabytes * 1e6:
        words = compose(rng, 2800, lambda text: len(text) // 4).split(" ")
        for index in range(0, len(words), 10):
            words[index] = "".join(rng.choice(letters) for _ in range(rng.randint(2, 12)))
        text = " ".join(words) + "</think>Answer.<|im_end|>"
        texts.append(text)
        size += len(text)
    return texts


def timed(encode, texts: list[str]) -> tuple[float, float, list[list[int]]]:
    cpu, wall = time.process_time(), time.perf_counter()
    ids = []
    for start in range(0, len(texts), 512):
        ids.extend(encode(texts[start : start + 512]))
    return time.perf_counter() - wall, time.process_time() - cpu, ids


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tokenizer", action="append")
    parser.add_argument("--mb", type=float, default=8.0, help="megabytes of text per tokenizer")
    args = parser.parse_args()
    from draftgen.tokens import fast_encoder
    from draftgen.tokens.tokenizer import load_tokenizer

    print(f"{os.cpu_count()} cores, 1-minute load average {os.getloadavg()[0]:.2f}")
    for spec in args.tokenizer or TOKENIZERS:
        tokenizer = load_tokenizer(spec)
        texts = texts_of(args.mb)
        size = sum(map(len, texts)) / 1e6
        reference = fast_encoder.ReferenceCodec(tokenizer)
        wall, cpu, expected = timed(reference.encode_batch, texts)
        print(f"{spec}: {len(texts)} texts, {size:.1f} M characters")
        print(f"  {'encoder':<44}{'wall s':>8}{'cpu s':>8}{'MB/s':>8}{'x less CPU':>12}")
        print(
            f"  {'the tokenizer own encode (reference)':<44}{wall:>8.2f}{cpu:>8.2f}"
            f"{size / wall:>8.1f}{1.0:>12.1f}"
        )
        choice = fast_encoder.prove(tokenizer, texts[:64])
        for candidate in fast_encoder.candidate_codecs(tokenizer):
            codec, why = choice._try(candidate)
            if codec is None:
                print(f"  {candidate.name}: not used: {why}")
                continue
            fast_wall, fast_cpu, ids = timed(codec.encode_batch, texts)
            same = "" if ids == expected else "  IDS DIFFER"
            print(
                f"  {codec.name:<44}{fast_wall:>8.2f}{fast_cpu:>8.2f}"
                f"{size / fast_wall:>8.1f}{cpu / fast_cpu:>12.1f}{same}"
            )
            if same:
                raise SystemExit(f"{codec.name} gave other ids than the reference")


if __name__ == "__main__":
    main()

"""Inputs every pipeline of the benchmark shares: prompts, canned answers, the JSONL row shape.

Built once per benchmark run (outside any timing) so the SDK baseline, the plain-aiohttp limit and
draftgen read the same prompts and get the same answers from the canned server.
"""

from __future__ import annotations

import os
import random
import sys
from array import array
from pathlib import Path

import orjson

# Every process of one benchmark scenario reads the tokenizer from here (bench.py sets it): the
# fast fixture (tokenizer.json) or the remote-code one (Moonshot's shape: tiktoken inside).
TOKENIZER_ENV = "DRAFTGEN_BENCH_TOKENIZER"
TOKENIZER = os.environ.get(TOKENIZER_ENV, "fixture:kimi-k2.5")
MODEL = "bench/kimi-k2.5"
VARIANTS = 16  # distinct canned answers, so the tokenizer's word cache is not all hits
PROMPT_TAG = b"[q"  # user content starts "[q0000123] ": the server finds the prompt's index by it
# Every answer opens with this sentence; the server writes the prompt's index over the zeros, so
# no two answers are the same text (as with a real model) while the token count stays known.
ANSWER_MARK = "0000000"
ANSWER_OPENING = f"Request {ANSWER_MARK}. "


def personalise(text: str, index: int) -> str:
    return text.replace(ANSWER_MARK, f"{index:07d}", 1)


def prompt_text(index: int, rng: random.Random) -> str:
    from draftgen.simulator.textpool import FRAGMENTS

    words = " ".join(rng.choice(FRAGMENTS) for _ in range(3))
    return f"[q{index:07d}] Please answer carefully. {words}"


def write_prompts(path: Path, count: int, seed: int = 0, distinct: int | None = None) -> None:
    """``count`` OpenAI-format rows, streamed to disk (a 1M-row file is never held in memory).

    With ``distinct``, row i asks prompt ``i % distinct`` (under its own id): a long input whose
    answers are shared, to measure what the rows alone cost.
    """
    rng = random.Random(seed)
    texts: list[str] = []
    with open(path, "wb") as handle:
        for index in range(count):
            if distinct is None or index < distinct:
                text = prompt_text(index, rng)
                if distinct is not None:
                    texts.append(text)
            else:
                text = texts[index % distinct]
            row = {"id": f"p{index}", "messages": [{"role": "user", "content": text}]}
            handle.write(orjson.dumps(row) + b"\n")


def read_prompts(path: Path):
    with open(path, "rb") as handle:
        for line in handle:
            yield orjson.loads(line)


def prompt_token_counts(path: Path, count: int, spec: str | None = None) -> array:
    """The rendered-prompt length of every prompt, so the server's usage.prompt_tokens is right."""
    from draftgen.tokens.tokenizer import encode_batch, load_tokenizer

    tokenizer = load_tokenizer(spec or TOKENIZER)
    render = prompt_renderer(tokenizer)
    counts = array("i")
    batch: list[str] = []
    for row in read_prompts(path):
        batch.append(render(row["messages"]))
        if len(batch) >= 4096:
            counts.extend(len(ids) for ids in encode_batch(tokenizer, batch))
            batch = []
    if batch:
        counts.extend(len(ids) for ids in encode_batch(tokenizer, batch))
    assert len(counts) == count, (len(counts), count)
    return counts


def prompt_renderer(tokenizer):
    """messages -> the prompt text a server renders (one renderer, the profile detected once)."""
    from draftgen.tokens.rendering import ChatRenderer, resolve_profile, utc_now

    renderer = ChatRenderer(tokenizer, resolve_profile(tokenizer))
    now = utc_now()
    return lambda messages: renderer.text(messages, None, {}, now)


def canned_answers(target_tokens: int, seed: int = 1, spec: str | None = None) -> list[dict]:
    """VARIANTS answers of about ``target_tokens`` tokens (90% reasoning) and their exact count."""
    from draftgen.profiles import detect_profile
    from draftgen.simulator.textpool import compose
    from draftgen.tokens.tokenizer import encode, full_vocab, load_tokenizer

    tokenizer = load_tokenizer(spec or TOKENIZER)
    profile = detect_profile(full_vocab(tokenizer))
    rng = random.Random(seed)
    counted = lambda text: len(encode(tokenizer, text))  # noqa: E731
    answers = []
    for _ in range(VARIANTS):
        reasoning = ANSWER_OPENING + compose(rng, int(target_tokens * 0.9), counted)
        content = compose(rng, max(1, target_tokens - int(target_tokens * 0.9)), counted)
        # The fixture's generation prompt ends inside <think>: the model writes the rest.
        generated = reasoning + profile.think_end + content + profile.end_of_turn
        count = counted(generated)
        for index in rng.sample(range(10**7), 50):
            if counted(personalise(generated, index)) != count:
                raise SystemExit(f"the answer's token count changes with the index {index}")
        answers.append({"reasoning": reasoning, "content": content, "completion_tokens": count})
    return answers


def baseline_row(index: str, prompt_ids: list[int], completion_ids: list[int]) -> bytes:
    """The row every pipeline writes: SpecForge's pre-tokenized shape."""
    ids = prompt_ids + completion_ids
    mask = [0] * len(prompt_ids) + [1] * len(completion_ids)
    return orjson.dumps({"id": index, "input_ids": ids, "loss_mask": mask}) + b"\n"


def log(*parts: object) -> None:
    print(*parts, file=sys.stderr, flush=True)

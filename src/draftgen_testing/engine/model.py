"""The engine's tiny Qwen3 model: a Markov chain over real Qwen3 tokens, written as weights.

The residual stream carries only the last token's state (attention and MLP write exactly 0), so
``lm_head`` alone sets the next token's distribution: ``STATES`` below, sampled by vLLM itself.
"""

from __future__ import annotations

import json
import math
import random
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

# Bump when the chain, the config or the weights' layout change: the model directory is rebuilt.
MODEL_VERSION = 2
SERVED_NAME = "draftgen-tiny-qwen3"
VOCAB_ROWS = 151936  # Qwen3's embedding rows (the tokenizer has 151669 tokens; the rest pad)
HIDDEN = 64  # one head of 64: the CPU attention has no kernel for head_dim 16
# Every token outside a state's support gets this logit: 151936 * e^-40 of the mass, never drawn.
FLOOR_LOGIT = -40.0
IM_END, THINK, END_THINK = "<|im_end|>", "<think>", "</think>"

# Words of the reasoning and of the answer, disjoint so that the state knows where it is. Some
# pairs re-encode to other ids when their text is encoded at once: " is"+"the" -> " ist"+"he",
# "the"+"the" -> "th"+"ethe", "  "+"," -> " "+" ,", " "+"中文" -> " 中"+"文", " "+"😊" -> two
# other byte tokens (all keep the count); " "+"Okay" -> " Okay", ","+"," -> ",," (change it).
# The weights set the rates: about one answer in ten with reasoning re-encodes to other ids, close
# to half of those at the same count (docs/verification.md, "Against a real engine").
REASONING_WORDS = {
    "Okay": 4,
    ",": 1,
    " the": 8,
    " user": 5,
    " asks": 3,
    " Let": 3,
    " me": 3,
    " think": 3,
    " about": 3,
    " it": 4,
    "  ": 0.25,
    " ": 0.15,
    "中文": 2,
    "😊": 1,
}
ANSWER_WORDS = {
    "Hello": 3,
    " world": 5,
    " This": 4,
    " is": 5,
    " answer": 4,
    " cat": 4,
    "!": 1,
    "你好": 2,
    " question": 3,
    " good": 3,
    " and": 4,
    "🚀": 1,
    " you": 3,
    " we": 2,
    "the": 0.5,
    "he": 0.3,
}
# Each state: the tokens that put the model in it, and its next-token weights. "*R" / "*A" spread
# a weight over the reasoning / answer words by their own weights.
STATES: dict[str, tuple[tuple[str, ...], dict[str, float]]] = {
    # Any other token (a prompt never ends in one with Qwen3's template): end the turn.
    "other": ((), {IM_END: 1.0}),
    # "<|im_start|>assistant\n": open the reasoning, or (rarely) answer without it.
    "start": (("\n",), {THINK: 0.92, "Hello": 0.08}),
    "think": ((THINK,), {"*R": 1.0}),
    # Reasoning: words, a line's end, and now and then the turn ends inside the reasoning.
    "reasoning": (tuple(REASONING_WORDS), {"*R": 0.915, ".\n": 0.08, IM_END: 0.005}),
    # After a line's end, the reasoning closes more often than not.
    "line": ((".\n",), {END_THINK: 0.6, "*R": 0.4}),
    "end_think": ((END_THINK,), {"\n\n": 1.0}),
    # After "</think>\n\n", generated or (thinking off) the template's own.
    "answer_start": (("\n\n",), {"*A": 1.0}),
    "answer": (tuple(ANSWER_WORDS), {"*A": 0.95, IM_END: 0.05}),
}


def chain_ids(encode: Callable[[str], list[int]], special: dict[str, int]) -> dict:
    """The chain in token ids: ``{"classes": {id: state index}, "next": [{id: prob}, ...]}``."""

    def token(text: str) -> int:
        if text in special:
            return special[text]
        ids = encode(text)
        if len(ids) != 1:
            raise ValueError(f"the tiny model's token {text!r} is {len(ids)} Qwen3 tokens")
        return ids[0]

    classes: dict[int, int] = {}
    rows: list[dict[int, float]] = []
    for index, (_name, (members, weights)) in enumerate(STATES.items()):
        for text in members:
            classes[token(text)] = index
        row: dict[int, float] = {}
        for text, weight in weights.items():
            words = {"*R": REASONING_WORDS, "*A": ANSWER_WORDS}.get(text)
            spread = {text: 1.0} if words is None else _normalised(words)
            for word, share in spread.items():
                if share * weight > 0:
                    row[token(word)] = row.get(token(word), 0.0) + share * weight
        total = sum(row.values())
        rows.append({tid: p / total for tid, p in row.items()})
    return {"classes": classes, "next": rows, "other": 0}


def _normalised(weights: dict[str, float]) -> dict[str, float]:
    total = sum(weights.values())
    return {word: w / total for word, w in weights.items()}


def sample_chain(
    chain: dict, prompt_last: int, rng: random.Random, max_tokens: int, stop: int
) -> list[int]:
    """What the model generates after a prompt ending in ``prompt_last``, drawn here (to tune
    the rates offline; the tests take the engine's own draws)."""
    out: list[int] = []
    last = prompt_last
    while len(out) < max_tokens:
        row = chain["next"][chain["classes"].get(last, chain["other"])]
        ids, probs = zip(*row.items(), strict=True)
        last = rng.choices(ids, probs)[0]
        out.append(last)
        if last == stop:
            break
    return out


def model_config() -> dict:
    """config.json of the model (transformers' Qwen3Config, as vLLM reads it)."""
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "vocab_size": VOCAB_ROWS,
        "hidden_size": HIDDEN,
        "intermediate_size": HIDDEN,
        "num_hidden_layers": 1,
        "num_attention_heads": 1,
        "num_key_value_heads": 1,
        "head_dim": HIDDEN,
        "hidden_act": "silu",
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "rope_scaling": None,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "use_sliding_window": False,
        "sliding_window": None,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "bos_token_id": 151643,
        "eos_token_id": 151645,
    }


def build_model(tokenizer_dir: Path, engine_python: Path, root: Path) -> Path:
    """The model directory under ``root`` (tokenizer files, config, weights), built once per
    ``MODEL_VERSION`` and tokenizer; the weights are written by the engine env's torch."""
    from transformers import AutoTokenizer

    target = root / f"tiny-qwen3-v{MODEL_VERSION}-{Path(tokenizer_dir).name}"
    if (target / "model.safetensors").is_file():
        return target
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    special = {text: tokenizer.convert_tokens_to_ids(text) for text in (IM_END, THINK, END_THINK)}
    chain = chain_ids(lambda text: tokenizer.encode(text, add_special_tokens=False), special)
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    for item in Path(tokenizer_dir).iterdir():
        shutil.copy2(item, partial / item.name)
    (partial / "config.json").write_text(json.dumps(model_config(), indent=1))
    weights = {
        "hidden": HIDDEN,
        "vocab_rows": VOCAB_ROWS,
        "floor": FLOOR_LOGIT,
        "classes": {str(k): v for k, v in chain["classes"].items()},
        "other": chain["other"],
        "logits": [{str(k): math.log(p) for k, p in row.items()} for row in chain["next"]],
    }
    (partial / "chain.json").write_text(json.dumps(weights))
    script = Path(__file__).with_name("build_weights.py")
    done = subprocess.run(
        [str(engine_python), str(script), str(partial)], capture_output=True, text=True
    )
    if done.returncode != 0:
        raise RuntimeError(f"building the tiny model's weights failed: {done.stderr[-2000:]}")
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
    return target

"""Writes the tiny Qwen3 model's weights from its chain.json; run by the engine env's python.

Standalone (torch and safetensors, no draftgen): ``python build_weights.py MODEL_DIR``.
"""

import json
import math
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file


def main(model_dir: Path) -> None:
    spec = json.loads((model_dir / "chain.json").read_text())
    hidden, rows, floor = spec["hidden"], spec["vocab_rows"], spec["floor"]
    states = len(spec["logits"])
    if states + 1 > hidden:
        raise SystemExit(f"{states} states do not fit a residual stream of {hidden}")
    # Every token's embedding: a constant dimension 0 and its state's one-hot, both 1, so the
    # final RMSNorm gives every token the same scale, sqrt(hidden / 2) on both.
    embed = torch.zeros(rows, hidden)
    embed[:, 0] = 1.0
    embed[:, 1 + spec["other"]] = 1.0
    for token, state in spec["classes"].items():
        embed[int(token), 1 + spec["other"]] = 0.0
        embed[int(token), 1 + state] = 1.0
    scale = math.sqrt(hidden / 2)
    # logits = scale * (W[:, 0] + W[:, 1 + state]): the floor for every token through the
    # constant dimension, and each state's log-probabilities above it through its own.
    lm_head = torch.zeros(rows, hidden)
    lm_head[:, 0] = floor / scale
    for state, logits in enumerate(spec["logits"]):
        for token, logit in logits.items():
            lm_head[int(token), 1 + state] = (logit - floor) / scale
    # Attention and MLP write exactly 0 into the residual stream (o_proj and down_proj are 0);
    # their other weights are small and seeded, so the kernels run on ordinary numbers.
    generator = torch.Generator().manual_seed(0)

    def small(*shape):
        return torch.randn(*shape, generator=generator) * 0.02

    prefix = "model.layers.0."
    tensors = {
        "model.embed_tokens.weight": embed,
        "lm_head.weight": lm_head,
        "model.norm.weight": torch.ones(hidden),
        prefix + "input_layernorm.weight": torch.ones(hidden),
        prefix + "post_attention_layernorm.weight": torch.ones(hidden),
        prefix + "self_attn.q_proj.weight": small(hidden, hidden),
        prefix + "self_attn.k_proj.weight": small(hidden, hidden),
        prefix + "self_attn.v_proj.weight": small(hidden, hidden),
        prefix + "self_attn.o_proj.weight": torch.zeros(hidden, hidden),
        prefix + "self_attn.q_norm.weight": torch.ones(hidden),
        prefix + "self_attn.k_norm.weight": torch.ones(hidden),
        prefix + "mlp.gate_proj.weight": small(hidden, hidden),
        prefix + "mlp.up_proj.weight": small(hidden, hidden),
        prefix + "mlp.down_proj.weight": torch.zeros(hidden, hidden),
    }
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(model_dir / "model.safetensors"))


if __name__ == "__main__":
    main(Path(sys.argv[1]))

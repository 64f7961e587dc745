"""draftgen's simulator streaming at a provider's pace, in its own process (started by bench.py).

Every answer is ``--tokens`` tokens sent ``--tokens-per-second``, ``--chunk-tokens`` to an SSE
event; the ground truth of each completion goes to ``--truth``. Prints the base URL once it
listens.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from draftgen.simulator import SimConfig, serve_forever


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--tokens", type=int, required=True)
    parser.add_argument("--tokens-per-second", type=float, required=True)
    parser.add_argument("--chunk-tokens", type=int, required=True)
    parser.add_argument("--truth", type=Path, required=True)
    args = parser.parse_args()
    serve_forever(
        SimConfig(
            tokenizer=args.tokenizer,
            min_tokens=args.tokens,
            max_tokens=args.tokens,
            chunk_tokens=args.chunk_tokens,
            tokens_per_second=args.tokens_per_second,
            truth_path=args.truth,
        ),
        port=args.port,
    )


if __name__ == "__main__":
    main()

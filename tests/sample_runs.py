"""A small finished run with some of everything, for the export, vocab and report tests.

Tool-call rows, multi-turn rows, quirks that leave samples unverified, a low max_tokens that
truncates some, and faults with few attempts so that some requests finally fail.
"""

from __future__ import annotations

import json
from pathlib import Path

from conftest import SimProcess, draftgen, run_args, write_prompts

TOKENIZER = "fixture:kimi-k2.5"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


def write_inputs(path: Path, rows: int, invalid: bool = False) -> Path:
    write_prompts(path, rows, invalid=invalid)
    with open(path, "a", encoding="utf-8") as handle:
        for i in range(8):
            row = {
                "id": f"tool{i}",
                "tools": TOOLS,
                "messages": [{"role": "user", "content": f"Weather in city number {i}?"}],
            }
            handle.write(json.dumps(row) + "\n")
    return path


def make_run(tmp: Path, rows: int = 40, invalid: bool = False) -> Path:
    """Run ``draftgen run`` against a simulator in a subprocess; return the run directory
    (``invalid``: with three rows the run rejects)."""
    sim = SimProcess(
        tmp,
        TOKENIZER,
        faults=[("server_error", 0.12), ("rate_limit", 0.05)],
        quirks=[
            ("drift", 0.2),
            ("reasoning_content_field", 0.2),
            ("leak_eot", 0.1),
            ("no_split", 0.1),
        ],
        extra=["--latency", "0.01"],
    )
    try:
        inputs = write_inputs(tmp / "prompts.jsonl", rows, invalid)
        out = tmp / "run"
        result = draftgen(
            *run_args(
                sim,
                [inputs],
                out,
                TOKENIZER,
                "--concurrency",
                "8",
                "--max-attempts",
                "2",
                "--max-tokens",
                "180",
            )
        )
        # 4: a turn failed for good (the faults and --max-attempts 2 are meant to leave some).
        assert result.returncode in (0, 4), result.stderr
    finally:
        sim.stop()
    return out

"""Yield and purchases of a simulated run, as issue #33's trials measure them: what is verified,
what is verified and wrong (against the simulator's ground truth), and how many completions were
bought (rows, calibration's questions, anything bought twice).

    .venv/bin/python benchmarks/calibration_trial.py gpt-oss --rows 277
    .venv/bin/python benchmarks/calibration_trial.py gpt-oss --quirk template_renderer=0.25
    .venv/bin/python benchmarks/calibration_trial.py kimi-k2.5 --quirk template_revision=0.25
    .venv/bin/python benchmarks/calibration_trial.py qwen3.6 --tools --rows 200 \\
        --quirk reserialize_arguments=0.34 --keep-providers
    .venv/bin/python benchmarks/calibration_trial.py qwen3.6 --tools --rows 200 --one-key 0.5 \\
        --quirk reserialize_arguments=0.34 --keep-providers
    .venv/bin/python benchmarks/calibration_trial.py gpt-oss --no-calibrate   # the baseline

Rows are system-led one-turn conversations (where gpt-oss's harmony and template renderings
differ at an equal count), or without a system message (``--no-system``: where a template
revision that adds a default system prompt differs); ``--tools`` declares a tool whose
parameters are not in sorted order and has the model call it on 70% of the turns, half of its
calls written as compact JSON; ``--one-key SHARE`` gives that share of the rows a tool of one
parameter instead (a call whose only spelling a key-sorting gateway cannot reorder).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import tempfile
from pathlib import Path

from draftgen.options import RunOptions
from draftgen.run.pipeline import run
from draftgen.simulator import SimConfig, SimulatorThread
from draftgen.store.database import Store

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "forecast",
            "parameters": {
                "type": "object",
                "properties": {
                    "unit": {"type": "string"},
                    "city": {"type": "string"},
                    "date": {"type": "string"},
                },
            },
        },
    }
]


ONE_KEY_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


def rows(count: int, tools: bool, system: bool = True, one_key: float = 0.0) -> list[dict]:
    lead = [{"role": "system", "content": "Be brief."}] if system else []
    return [
        {
            "id": f"r{i}",
            "messages": [*lead, {"role": "user", "content": f"Question {i}: why?"}],
            # One-key rows spread evenly among the others.
            **({"tools": _tools_of(i, one_key)} if tools else {}),
        }
        for i in range(count)
    ]


def _tools_of(index: int, one_key: float) -> list[dict]:
    return ONE_KEY_TOOLS if int((index + 1) * one_key) > int(index * one_key) else TOOLS


def trial(args: argparse.Namespace, root: Path) -> dict:
    (root / "rows.jsonl").write_text(
        "".join(
            json.dumps(row) + "\n"
            for row in rows(args.rows, args.tools, not args.no_system, args.one_key)
        ),
        encoding="utf-8",
    )
    quirks = {name: float(rate) for name, _, rate in (q.partition("=") for q in args.quirk)}
    config = SimConfig(
        tokenizer=f"fixture:{args.fixture}",
        seed=5,
        min_tokens=10,
        max_tokens=60,
        quirks=quirks,
        **({"tool_call_rate": 0.7, "compact_tool_arguments": 0.5} if args.tools else {}),
    )
    os.environ["DRAFTGEN_TRIAL_KEY"] = "sk-trial"
    with SimulatorThread(config) as sim:
        options = RunOptions(
            inputs=[str(root / "rows.jsonl")],
            tokenizer=f"fixture:{args.fixture}",
            out=root / "run",
            base_url=sim.base_url,
            api_key_env="DRAFTGEN_TRIAL_KEY",
            model="trial/model",
            concurrency=4,
            retry_base_delay=0.01,
            progress_interval=3600,
            keep_providers=args.keep_providers,
            no_calibrate=args.no_calibrate,
        )
        asyncio.run(run(options))
        truth = dict(sim.truth)
    with Store(root / "run", create=False) as store:
        exported = list(store.samples.export_rows(include_unverified=True))
        asked = store.calibrations.read()
        excluded = store.providers.excluded_providers()
    wrong = sum(
        row["verified"]
        and row["input_ids"]
        != truth[row["generation_id"]]["prompt_ids"] + truth[row["generation_id"]]["completion_ids"]
        for row in exported
    )
    return {
        "rows": args.rows,
        "bought": len(truth),
        "questions": sum(len(questions) for questions in asked.values()),
        "samples": len(exported),
        "verified": sum(row["verified"] for row in exported),
        "verified_and_wrong": wrong,
        "by_provider_and_reason": {
            f"{provider} {reason}": count
            for (provider, reason), count in collections.Counter(
                (row["provider"], row["verify_reason"]) for row in exported
            ).most_common()
        },
        "calibration": {
            provider: {question: row["verdict"] for question, row in questions.items()}
            for provider, questions in asked.items()
        },
        "left_out": {provider: entry["evidence"] for provider, entry in excluded.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("fixture", help="a fixture tokenizer's name, e.g. gpt-oss")
    parser.add_argument("--rows", type=int, default=40)
    parser.add_argument("--quirk", action="append", default=[], metavar="NAME=RATE")
    parser.add_argument("--tools", action="store_true")
    parser.add_argument("--one-key", type=float, default=0.0, metavar="SHARE")
    parser.add_argument("--keep-providers", action="store_true")
    parser.add_argument("--no-calibrate", action="store_true")
    parser.add_argument("--no-system", action="store_true", help="rows without a system message")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="draftgen-trial-") as root:
        print(json.dumps(trial(args, Path(root)), indent=1))


if __name__ == "__main__":
    main()

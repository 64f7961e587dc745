"""draftgen against the real engine, mode by mode: every exported row against the engine's ids.

``python -m draftgen_testing.engine.measure`` starts the engine (``EngineHarness``), runs each
mode of ``MODES`` on ``engine_prompts()`` and prints the table of issue 40 (docs/verification.md).
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from draftgen_testing.engine.model import SERVED_NAME
from draftgen_testing.engine.proxy import PASSTHROUGH, TEXT, Recorder

KEY_ENV = "DRAFTGEN_ENGINE_KEY"  # vLLM is started without a key: any value is taken
NO_THINKING = '{"enable_thinking": false}'


@dataclass(frozen=True)
class Mode:
    """One way of pointing draftgen at the engine."""

    name: str
    proxy: str  # TEXT or PASSTHROUGH
    flags: tuple[str, ...] = ()
    thinking: bool = True


MODES: tuple[Mode, ...] = (
    Mode("text, streamed", TEXT),
    Mode("text, --no-stream", TEXT, ("--no-stream",)),
    Mode("text, thinking off", TEXT, ("--reasoning-effort", "none"), thinking=False),
    Mode("passthrough (default backend)", PASSTHROUGH),
    Mode("passthrough, --no-stream", PASSTHROUGH, ("--no-stream",)),
    Mode("passthrough, thinking off", PASSTHROUGH, ("--reasoning-effort", "none"), thinking=False),
    Mode("--backend vllm", PASSTHROUGH, ("--backend", "vllm")),
    Mode(
        "--backend vllm, thinking off",
        PASSTHROUGH,
        ("--backend", "vllm", "--chat-template-kwargs", NO_THINKING),
        thinking=False,
    ),
)

_WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
            "required": ["city"],
        },
    },
}
_TOPICS = ("cats", "rain", "tea", "maps", "clocks", "bridges", "bees", "salt", "kites", "ink")


def engine_prompts(count: int = 40) -> list[dict]:
    """``count`` rows of every shape the modes must carry: plain chat, system prompts, multi-turn
    history, tools offered, a tool call answered, and an assistant turn with its reasoning."""
    rows = []
    for i in range(count):
        topic = _TOPICS[i % len(_TOPICS)]
        shape = i % 6
        user = {"role": "user", "content": f"Tell me about {topic}, item {i}."}
        if shape == 0:
            messages = [user]
        elif shape == 1:
            messages = [{"role": "system", "content": f"You are terse. Case {i}."}, user]
        elif shape == 2:
            messages = [
                {"role": "user", "content": f"Hi, question {i}."},
                {"role": "assistant", "content": f"Hello! Ask about {topic}."},
                user,
            ]
        elif shape == 3:
            messages = [{"role": "user", "content": f"中文 and 😊 about {topic} {i}:  spaces."}]
        elif shape == 4:
            rows.append(
                {
                    "id": f"e{i}",
                    "messages": [{"role": "user", "content": f"Weather for {topic} town {i}?"}],
                    "tools": [_WEATHER_TOOL],
                }
            )
            continue
        else:
            # A tool call answered: Qwen3's template renders the reasoning of an assistant turn
            # after the last user message, so the prompt depends on reasoning_content being kept.
            call = {
                "id": f"call_{i}",
                "type": "function",
                "function": {"name": "get_weather", "arguments": json.dumps({"city": topic})},
            }
            messages = [
                {"role": "user", "content": f"Weather in {topic} {i}?"},
                {
                    "role": "assistant",
                    "content": "",
                    "reasoning_content": f"The user asks about {topic}.",
                    "tool_calls": [call],
                },
                {"role": "tool", "tool_call_id": f"call_{i}", "content": "sunny, 21 C"},
            ]
            rows.append({"id": f"e{i}", "messages": messages, "tools": [_WEATHER_TOOL]})
            continue
        rows.append({"id": f"e{i}", "messages": messages})
    return rows


@dataclass
class ModeResult:
    """One mode's figures: the issue's table row, and what the engine's answers were."""

    mode: str
    rows: int = 0
    verified: int = 0
    verified_wrong: int = 0
    exact: int = 0  # rows whose ids equal the engine's, verified or not
    flagged: Counter = field(default_factory=Counter)
    proofs: Counter = field(default_factory=Counter)  # verified rows by id_source
    wrong_by_proof: Counter = field(default_factory=Counter)
    failures: int = 0  # requests that ended without a completion (the store's failures)
    # The engine's own answers: how many re-encode (decoded text encoded at once) to other ids,
    # and how many of those keep the count (the re-splits a count cannot see).
    answers: int = 0
    resplit: int = 0
    resplit_same_count: int = 0
    status: dict = field(default_factory=dict)  # draftgen status --json
    wrong_examples: list = field(default_factory=list)
    engine_answers: list = field(default_factory=list)  # each row's engine completion ids
    # Each verified row that is not the engine's: its proof, and whether the count, the text
    # and the prompt ids still agree (a re-split a count cannot see) or not (a gross error).
    verified_differences: list = field(default_factory=list)

    def estimate(self) -> str:
        """The run's own estimate of its text proof's hidden re-splits (``draftgen status``)."""
        text = (self.status.get("proofs") or {}).get("text") or {}
        wrong = (text.get("resplits") or {}).get("estimated_wrong")
        return "-" if wrong is None else f"{wrong:g} (truth {self.wrong_by_proof['text']})"

    def table_row(self) -> str:
        flagged = ", ".join(f"{n} {reason}" for reason, n in self.flagged.most_common()) or "0"
        proofs = ", ".join(f"{n} {p}" for p, n in sorted(self.proofs.items())) or "-"
        return (
            f"| {self.mode} | {self.verified} of {self.rows} | {self.verified_wrong} | {flagged} "
            f"| {proofs} | {self.resplit} ({self.resplit_same_count} same count) of "
            f"{self.answers} | {self.estimate()} | {self.failures} |"
        )


TABLE_HEAD = (
    "| mode | verified | verified and wrong | flagged | proofs | engine re-splits "
    "| hidden re-splits estimated | failed |\n|---|---|---|---|---|---|---|---|"
)


def run_mode(
    mode: Mode,
    base_url: str,
    recorder: Recorder,
    prompts: Path,
    workdir: Path,
    draftgen: Callable[..., subprocess.CompletedProcess],
    encode: Callable[[str], list[int]],
    decode: Callable[[list[int]], str],
    seed: int = 1,
    max_tokens: int = 128,
) -> ModeResult:
    """Run ``mode`` end to end (run, export, status) and compare every row with the engine."""
    slug = "".join(c if c.isalnum() else "-" for c in mode.name).strip("-")
    out = workdir / slug
    args = [
        "run", "--input", str(prompts), "--out", str(out), "--no-config",
        "--base-url", base_url, "--model", SERVED_NAME, "--tokenizer", "fixture:qwen3",
        "--api-key-env", KEY_ENV, "--temperature", "1", "--seed", str(seed),
        "--max-tokens", str(max_tokens), "--concurrency", "8",
        "--retry-base-delay", "0.05", "--max-attempts", "3", *mode.flags,
    ]  # fmt: skip
    result = ModeResult(mode.name)
    ran = draftgen(*args)
    if ran.returncode not in (0, 3) and not (out / "draftgen.sqlite").exists():
        raise RuntimeError(f"draftgen run ({mode.name}) failed: {ran.stderr[-3000:]}")
    export = workdir / f"{slug}.jsonl"
    exported = draftgen(
        "export", str(out), "--format", "specforge", "--out", str(export), "--include-unverified"
    )
    if exported.returncode != 0:
        raise RuntimeError(f"export ({mode.name}) failed: {exported.stderr[-3000:]}")
    status = draftgen("status", str(out), "--json")
    if status.returncode == 0:
        try:
            result.status = json.loads(status.stdout)
        except json.JSONDecodeError:
            result.status = {}
    rows = [json.loads(line) for line in export.read_text().splitlines() if line]
    compare(rows, recorder, result, encode, decode)
    with sqlite3.connect(out / "draftgen.sqlite") as db:
        result.failures = db.execute("SELECT count(*) FROM failures").fetchone()[0]
    return result


def compare(
    rows: list[dict],
    recorder: Recorder,
    result: ModeResult,
    encode: Callable[[str], list[int]],
    decode: Callable[[list[int]], str],
) -> None:
    """Fill ``result`` from the exported ``rows`` and the engine's recorded answers."""
    for row in rows:
        truth = recorder.get(row["generation_id"], wait=0)  # the run is over: all recorded
        if truth is None:
            raise AssertionError(f"no engine answer recorded for {row['generation_id']!r}")
        engine_ids = truth.prompt_ids + truth.completion_ids
        equal = row["input_ids"] == engine_ids
        result.rows += 1
        result.exact += equal
        result.answers += 1
        result.engine_answers.append(truth.completion_ids)
        again = encode(decode(truth.completion_ids))
        if again != truth.completion_ids:
            result.resplit += 1
            result.resplit_same_count += len(again) == len(truth.completion_ids)
        if row["verified"]:
            result.verified += 1
            proof = row.get("id_source") or "?"
            result.proofs[proof] += 1
            if not equal:
                prompt = len(truth.prompt_ids)
                completion = row["input_ids"][prompt:]
                result.verified_differences.append(
                    {
                        "proof": proof,
                        "prompt_equal": row["input_ids"][:prompt] == truth.prompt_ids,
                        "same_count": len(completion) == len(truth.completion_ids),
                        "same_text": decode(completion) == decode(truth.completion_ids),
                        "exported": decode(completion),
                        "engine": decode(truth.completion_ids),
                    }
                )
                result.verified_wrong += 1
                result.wrong_by_proof[proof] += 1
                if len(result.wrong_examples) < 5:
                    result.wrong_examples.append(_difference(row["input_ids"], engine_ids, decode))
        else:
            result.flagged[row.get("verify_reason") or "?"] += 1


def _difference(got: list[int], want: list[int], decode) -> str:
    at = next((i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b), None)
    if at is None:
        at = min(len(got), len(want))
    return (
        f"at {at}: exported {got[at : at + 3]} {decode(got[at : at + 3])!r}, "
        f"engine {want[at : at + 3]} {decode(want[at : at + 3])!r} "
        f"(lengths {len(got)} / {len(want)})"
    )


def cli_runner(worktree_src: Path | None = None) -> Callable[..., subprocess.CompletedProcess]:
    """``draftgen ARGS`` in a process of its own, with this checkout's sources first."""
    environment = {**os.environ, KEY_ENV: "engine-test"}
    if worktree_src is not None:
        environment["PYTHONPATH"] = f"{worktree_src}{os.pathsep}{environment.get('PYTHONPATH', '')}"

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "draftgen.cli", *args],
            capture_output=True,
            text=True,
            env=environment,
            timeout=1800,
        )

    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=40, help="rows per mode (default 40)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--mode", action="append", help="only the modes whose name has this")
    parser.add_argument("--workdir", type=Path, help="keep the runs here (default: a temp dir)")
    parser.add_argument("--json", action="store_true", help="also print each mode as JSON")
    parser.add_argument(
        "--engine-url", help="a vLLM already serving the tiny model (http://127.0.0.1:PORT)"
    )
    options = parser.parse_args(argv)

    from transformers import AutoTokenizer

    from draftgen_testing.engine.server import EngineHarness
    from draftgen_testing.fixtures import build_fixture

    tokenizer_dir = build_fixture("qwen3")
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))

    def encode(text: str) -> list[int]:
        return tokenizer.encode(text, add_special_tokens=False)

    def decode(ids: list[int]) -> str:
        return tokenizer.decode(ids, skip_special_tokens=False)

    workdir = options.workdir or Path(tempfile.mkdtemp(prefix="draftgen-engine-"))
    workdir.mkdir(parents=True, exist_ok=True)
    prompts = workdir / "prompts.jsonl"
    prompts.write_text("".join(json.dumps(r) + "\n" for r in engine_prompts(options.prompts)))
    if options.engine_url:
        harness = EngineHarness.around(options.engine_url.rstrip("/"))
    else:
        harness = EngineHarness(workdir, tokenizer_dir)
    runner = cli_runner(Path(__file__).resolve().parents[2])
    try:
        print(TABLE_HEAD)
        for mode in MODES:
            if options.mode and not any(part in mode.name for part in options.mode):
                continue
            result = run_mode(
                mode, harness.base_url(mode.proxy), harness.recorder, prompts,
                workdir, runner, encode, decode, seed=options.seed,
            )  # fmt: skip
            print(result.table_row(), flush=True)
            for example in result.wrong_examples:
                print(f"    wrong: {example}", flush=True)
            if options.json:
                left_out = ("status", "wrong_examples", "engine_answers", "verified_differences")
                summary = {k: v for k, v in vars(result).items() if k not in left_out}
                summary["proofs_status"] = result.status.get("proofs")
                print("    " + json.dumps(summary))
    finally:
        harness.stop()
    print(f"(runs in {workdir})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

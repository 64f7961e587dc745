"""A run that stored nothing but failures never exits 0 (issue #27): it says why in one line."""

from __future__ import annotations

from conftest import SimProcess, draftgen, run_args, write_prompts

from draftgen.cli.main import nothing_stored


def test_a_run_whose_every_request_failed_exits_2(tmp_path, monkeypatch):
    monkeypatch.setenv("DRAFTGEN_TEST_KEY", "sk-test")
    prompts = write_prompts(tmp_path / "p.jsonl", 4, invalid=False)
    sim = SimProcess(tmp_path, "fixture:kimi-k2.5", faults=[("server_error", 1.0)])
    try:
        args = run_args(sim, [prompts], tmp_path / "run", "fixture:kimi-k2.5")
        args[args.index("--max-attempts") + 1] = "1"
        result = draftgen(*args)
    finally:
        sim.stop()
    assert result.returncode == 2, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "draftgen: no completion was stored: all 5 turns failed (gave_up_after_1_attempts 4, "
    )
    assert "the same command retries them" in last


def test_what_counts_as_nothing_stored():
    assert nothing_stored({"completions": 0, "failures": {}}) == ""  # nothing was asked
    assert nothing_stored({"completions": 3, "failures": {"server_error": 2}}) == ""
    said = nothing_stored({"completions": 0, "failures": {"server_error": 2, "\x1b[31mx": 1}})
    assert "all 3 turns failed (server_error 2, " in said and "\x1b" not in said

"""Logging: levels, JSON lines with extra fields, progress lines off a terminal, no API key."""

from __future__ import annotations

import io
import json
import logging

import pytest

from draftgen import logs
from draftgen.cli import main as cli
from draftgen.generate.progress import ProgressDisplay, RunProgress
from draftgen.simulator import SimConfig, SimulatorThread

TOKENIZER = "fixture:kimi-k2.5"
# Not shaped like any known key: only its registration can keep it out of the logs.
FAKE_KEY = "fake-key-7d1c0e5b9a2f4c6e8b3d"


@pytest.fixture(autouse=True)
def quiet_logging():
    yield
    logs.configure("info")  # later tests start from the CLI's default


def json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_json_lines_carry_level_logger_message_and_extra_fields(capsys):
    logs.configure("debug", json=True)
    logging.getLogger("draftgen.test").debug("sent %d requests", 3, extra={"endpoint": "a"})
    (line,) = json_lines(capsys.readouterr().err)
    assert set(line) == {"ts", "level", "logger", "message", "endpoint"}
    assert (line["level"], line["logger"], line["message"], line["endpoint"]) == (
        "debug",
        "draftgen.test",
        "sent 3 requests",
        "a",
    )
    assert line["ts"].endswith("+00:00") and "T" in line["ts"]


def test_the_level_filters_draftgen_and_other_libraries_stay_at_warning(capsys):
    logs.configure("warning")
    logging.getLogger("draftgen.test").info("not shown")
    logging.getLogger("draftgen.test").warning("shown")
    logs.configure("debug")
    logging.getLogger("aiohttp.client").info("third-party chatter")
    logging.getLogger("draftgen.test").debug("debug shown")
    err = capsys.readouterr().err
    assert "not shown" not in err and "third-party chatter" not in err
    assert " WARNING draftgen.test: shown" in err and " DEBUG draftgen.test: debug shown" in err
    with pytest.raises(ValueError, match="log level 'loud' is not one of debug, info"):
        logs.configure("loud")


def test_plain_progress_lines_off_a_terminal_go_through_logging(capsys):
    logs.configure("info", json=True)
    progress = RunProgress(total_rows=10, rows_done=4, turns_done=4, cost=0.5)
    not_a_tty = io.StringIO()
    with ProgressDisplay(progress, interval=0.0, stream=not_a_tty) as display:
        display.refresh()
    assert not_a_tty.getvalue() == ""  # the stream only decides between rich and lines
    lines = json_lines(capsys.readouterr().err)
    assert len(lines) == 2  # one refresh, one at the end
    assert lines[0]["logger"] == "draftgen.progress"
    assert lines[0]["message"].startswith("rows 4/10 | generated 4 (")
    assert (lines[0]["rows_done"], lines[0]["total_rows"], lines[0]["cost"]) == (4, 10, 0.5)


def test_registered_secrets_are_masked_in_messages_fields_and_tracebacks(capsys):
    logs.configure("debug", json=True)
    logs.add_secret(FAKE_KEY)
    log = logging.getLogger("draftgen.test")
    log.info("header Authorization: Bearer %s", FAKE_KEY, extra={"echo": f"key={FAKE_KEY}"})
    try:
        raise RuntimeError(f"server said {FAKE_KEY}")
    except RuntimeError:
        log.exception("failed")
    log.info("an unregistered sk-or-v1-0123456789abcdef key")
    err = capsys.readouterr().err
    assert FAKE_KEY not in err and "sk-or-v1-0123456789abcdef" not in err
    first, second, third = json_lines(err)
    assert first["message"] == "header Authorization: Bearer ***"
    assert first["echo"] == "key=***"
    assert "RuntimeError: server said ***" in second["exception"]
    assert third["message"] == "an unregistered *** key"


def test_a_debug_run_never_logs_the_api_key(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DRAFTGEN_FAKE_KEY", FAKE_KEY)
    prompts = tmp_path / "p.jsonl"
    rows = [{"id": f"r{i}", "messages": [{"role": "user", "content": f"q{i}"}]} for i in range(6)]
    prompts.write_text("".join(json.dumps(row) + "\n" for row in rows))
    faults = {"server_error": 0.3, "rate_limit": 0.2}
    with SimulatorThread(SimConfig(tokenizer=TOKENIZER, seed=3, faults=faults)) as sim:
        argv = ["--log-level", "debug", "--log-json", "run", "--no-config", "--input"]
        argv += [str(prompts), "--model", "m", "--tokenizer", TOKENIZER, "--out"]
        argv += [str(tmp_path / "out"), "--base-url", sim.base_url, "--api-key-env"]
        argv += ["DRAFTGEN_FAKE_KEY", "--retry-base-delay", "0.01", "--concurrency", "2"]
        assert cli.main(argv) == 0
    err = capsys.readouterr().err
    assert FAKE_KEY not in err
    records = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    attempts = [r for r in records if r["logger"] == "draftgen.client"]
    # Six rows, and the calibration questions that were answered (logged as any answer is).
    from draftgen.store.database import Store

    with Store(tmp_path / "out", create=False) as store:
        answered = sum(
            row["generation_id"] is not None
            for questions in store.calibrations.read().values()
            for row in questions.values()
        )
    assert sum("completion in" in r["message"] for r in attempts) == 6 + answered
    assert any("failed" in r["message"] for r in attempts)  # the faults were logged too
    assert all(r["level"] == "debug" and r["attempt"] >= 1 for r in attempts)


def test_global_options_go_before_or_after_the_command():
    args = cli.build_parser().parse_args(["--log-level", "error", "--log-json", "status", "x"])
    assert (args.log_level, args.log_json, args.command) == ("error", True, "status")
    args = cli.build_parser().parse_args(["status", "x", "--log-json", "--log-level", "error"])
    assert (args.log_level, args.log_json, args.command) == ("error", True, "status")


def test_a_value_put_into_a_line_cannot_start_a_line_of_its_own(capsys):
    """Issue #41: a provider named "X\\n<date> INFO draftgen.run: all 5000 verified" printed a
    forged line through the calibration INFO line."""
    logs.configure("info")
    forged = "Acme\n2026-12-07 21:00:00,000 INFO draftgen.run: all 5000 verified\x1b[2K\r"
    logging.getLogger("draftgen.calibrate").info("calibration: %s renders as draftgen", forged)
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1
    assert err.rstrip("\n").endswith(
        "calibration: Acme\\x0a2026-12-07 21:00:00,000 INFO draftgen.run: all 5000 verified"
        "\\x1b[2K\\x0d renders as draftgen"
    )

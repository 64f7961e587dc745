"""docs/first-run.md, run as written: its bash block in a fresh directory, then its Python block."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[1] / "docs" / "first-run.md"


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)


@pytest.mark.slow
def test_the_first_run_page_works_as_written(tmp_path):
    (script,) = blocks("bash")
    (snippet,) = blocks("python")
    bin_dir = str(Path(sys.executable).parent)  # the venv's draftgen
    env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")}
    env.pop("OPENROUTER_API_KEY", None)
    shell = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert shell.returncode == 0, shell.stderr
    run_dir = tmp_path / "runs" / "kimi-k2.5"
    assert "prompt tokens" in shell.stdout  # the estimate
    report = json.loads((run_dir / "report.json").read_text())
    assert (run_dir / "report.html").stat().st_size > 1000 and report
    loaded = subprocess.run(
        [sys.executable, "-c", snippet], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert loaded.returncode == 0, loaded.stderr
    rows, columns = loaded.stdout.split(" ", 1)
    assert 1 <= int(rows) <= 3  # the verified samples of three prompts
    assert "input_ids" in columns and "loss_mask" in columns

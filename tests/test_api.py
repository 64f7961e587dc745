"""The library API the CLI is built on: the README's Python example, run as written."""

from __future__ import annotations

import re
from pathlib import Path

import draftgen
from draftgen.errors import DraftgenError

README = Path(__file__).resolve().parent.parent / "README.md"


def readme_python_example() -> str:
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## From Python") :]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_readme_python_example_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    examples = Path(__file__).resolve().parent.parent / "examples"
    (tmp_path / "examples").symlink_to(examples)
    namespace: dict = {}
    exec(compile(readme_python_example(), "README.md", "exec"), namespace)
    rows = [line for line in (tmp_path / "runs/py/specforge.jsonl").read_text().splitlines()]
    assert rows and len(rows) == namespace["written"]
    status = namespace["status"]
    assert status["completions"] >= len(rows) > 0


def test_every_user_facing_error_is_a_draftgen_error(tmp_path):
    try:
        draftgen.RunDir.open(tmp_path / "nothing")
    except DraftgenError as exc:
        assert "holds no draftgen run" in str(exc)
    else:
        raise AssertionError("opening an empty directory must fail")

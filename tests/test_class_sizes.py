"""No class in the product holds more than one job's worth of code (issue 42): at most 400 lines
of methods and 25 methods, counted as written in the class (decorators included)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "draftgen"
MAX_METHOD_LINES = 400
MAX_METHODS = 25


def class_sizes(source: str) -> list[tuple[str, int, int]]:
    """Each class of ``source``: its name, its methods' lines and its number of methods."""
    sizes = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef):
            methods = [
                m for m in node.body if isinstance(m, ast.FunctionDef | ast.AsyncFunctionDef)
            ]
            lines = sum(
                m.end_lineno - (m.decorator_list[0].lineno if m.decorator_list else m.lineno) + 1
                for m in methods
            )
            sizes.append((node.name, lines, len(methods)))
    return sizes


def test_the_count_sees_a_big_class():
    body = "".join(f"    def m{i}(self):\n        return {i}\n\n" for i in range(30))
    assert class_sizes("class Big:\n" + body) == [("Big", 60, 30)]


def test_no_class_is_over_the_limits():
    over = [
        f"{path.relative_to(PACKAGE)}::{name} ({lines} lines, {count} methods)"
        for path in sorted(PACKAGE.rglob("*.py"))
        for name, lines, count in class_sizes(path.read_text())
        if lines > MAX_METHOD_LINES or count > MAX_METHODS
    ]
    assert over == []

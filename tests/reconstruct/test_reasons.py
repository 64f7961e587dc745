"""The reason codes' one registry: every code the code base gives a sample is in it, and the report,
the README and docs/verification.md say of each what it says.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

from draftgen.outputs.report import reason_meanings
from draftgen.reconstruct import reasons, verify
from draftgen.reconstruct.reasons import DOCS, PAGES, REASONS, reason_table, with_table

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "draftgen"
# Where a sample's reason is written: a failure or doubt appended as (reason, detail), a verdict
# or sample built with one, a flag (key, reason, detail) for ``samples.flag_samples``, a reason
# chosen (in reconstruct/, where samples get theirs: elsewhere ``reason`` names a turn's failure or
# a flagged row's kind) or compared, and SQL that reads one.
FAILURE_LISTS = {"failures", "doubts"}
VERDICTS = {"Verdict", "TokenSample"}
CHOOSERS = "draftgen.reconstruct"
SQL_REASON = re.compile(r"\breason\s*=\s*'(\w+)'")


def module_of(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def reason_expressions(tree: ast.AST, chooser: bool = True) -> list[ast.expr]:
    """The expressions in reason positions of a module (``chooser``: one of reconstruct/)."""
    found: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            if (
                isinstance(func, ast.Attribute)
                and func.attr == "append"
                and isinstance(func.value, ast.Name)
                and func.value.id in FAILURE_LISTS
                and node.args
                and isinstance(node.args[0], ast.Tuple)
            ):
                found.append(node.args[0].elts[0])
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
            if name == "Verdict" and len(node.args) > 1:
                found.append(node.args[1])
            if name in VERDICTS:
                found += [k.value for k in node.keywords if k.arg == "reason"]
        elif isinstance(node, ast.Tuple) and len(node.elts) == 3:
            first = node.elts[0]
            if (isinstance(first, ast.Name) and first.id == "key") or (
                isinstance(first, ast.Attribute) and first.attr == "key"
            ):
                found.append(node.elts[1])
        elif (
            chooser
            and isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "reason" for t in node.targets)
        ):
            found.append(node.value)
        elif isinstance(node, ast.Compare) and len(node.comparators) == 1:
            left = node.left
            if (isinstance(left, ast.Attribute) and left.attr == "reason") or (
                isinstance(left, ast.Name) and left.id == "reason"
            ):
                found.append(node.comparators[0])
    return found


def codes_in(expression: ast.expr, module) -> set[str]:
    """The codes an expression names: a string, a module constant, either branch of a choice;
    what comes from elsewhere (a variable, an item of a list) is passed on, not made here."""
    if isinstance(expression, ast.IfExp):
        return codes_in(expression.body, module) | codes_in(expression.orelse, module)
    if isinstance(expression, ast.Constant) and isinstance(expression.value, str):
        return {expression.value}
    if isinstance(expression, ast.Name) and isinstance(getattr(module, expression.id, None), str):
        return {getattr(module, expression.id)}
    return set()


def emitted_codes() -> dict[str, set[str]]:
    """Every code the package writes, compares or selects as a sample's reason, by module."""
    found: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        name = module_of(path)
        expressions = reason_expressions(tree, name.startswith(CHOOSERS))
        # A module's constants are read from the module itself (``__main__`` would run the CLI).
        module = importlib.import_module(name) if expressions else None
        codes: set[str] = set()
        for expression in expressions:
            codes |= codes_in(expression, module)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                codes.update(SQL_REASON.findall(node.value))
        if codes:
            found[name] = codes
    return found


def test_every_code_the_package_gives_a_sample_is_registered():
    emitted = emitted_codes()
    # The scan reads the emitters it is meant to: the verifier's checks, the reading's doubts,
    # the provider-level flags and the SQL that picks samples by reason.
    assert {"ok", "no_usage", "content_filter"} <= emitted["draftgen.reconstruct.verify"]
    assert {"prompt_mode_unproven", "prompt_render_failed"} <= emitted["draftgen.reconstruct.text"]
    assert "whitespace_altered" in emitted["draftgen.reconstruct.background"]
    stores = [codes for module, codes in emitted.items() if module.startswith("draftgen.store")]
    assert any("prompt_count_mismatch" in codes for codes in stores)
    unregistered = {
        module: sorted(codes - set(REASONS))
        for module, codes in emitted.items()
        if codes - set(REASONS)
    }
    assert unregistered == {}
    # And the registry holds no code nothing gives.
    assert sorted(set(REASONS) - set().union(*emitted.values())) == []


def test_the_scan_sees_an_unregistered_code(tmp_path):
    tree = ast.parse(
        "def check(failures, doubts):\n"
        "    failures.append(('made_up_reason', 'detail'))\n"
        "    doubts.append((OK, 'detail'))\n"
        "    return Verdict(False, 'another_one', '')\n"
    )
    codes = set().union(*(codes_in(e, reasons) for e in reason_expressions(tree)))
    assert codes == {"made_up_reason", "ok", "another_one"}


def test_the_verifier_and_the_report_read_the_registry():
    assert verify.TOOL_ARGUMENTS_COUNT_NEUTRAL == "tool_arguments_count_neutral"
    assert REASONS[verify.TOOL_ARGUMENTS_COUNT_NEUTRAL].doubt
    assert set(verify.DOUBT_REASONS) == {
        "prompt_renderer_unproven",
        "provider_reserialises_tool_arguments",
        "provider_strips_whitespace",
        "tool_arguments_count_neutral",
        "tool_arguments_reserialised",
        "tool_call_id_rebuilt",
        "tool_argument_literal_unproven",
        "tool_call_format_unconfirmed",
        "prompt_mode_unproven",
        "prompt_date_unproven",
        "reasoning_end_unproven",
    }
    meanings = reason_meanings({"tool_arguments_count_neutral": 3, "gone_from_draftgen": 1})
    assert meanings == {
        "tool_arguments_count_neutral": {
            "meaning": REASONS["tool_arguments_count_neutral"].meaning,
            "docs": f"{DOCS}#tool-arguments-the-engines-parser-and-rewrites-on-top-of-it",
        },
        "gone_from_draftgen": {
            "meaning": "see the docs",
            "docs": "docs/verification.md#the-checks",
        },
    }


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_anchor_is_a_section_of_the_docs():
    text = (ROOT / DOCS).read_text(encoding="utf-8")
    anchors = {
        github_anchor(line.lstrip("#")) for line in text.splitlines() if line.startswith("#")
    }
    assert "tool-arguments-the-engines-parser-and-rewrites-on-top-of-it" in anchors
    assert sorted({r.anchor for r in REASONS.values()} - anchors) == []


@pytest.mark.parametrize("page", sorted(PAGES))
def test_the_pages_tables_are_the_registrys(page):
    text = (ROOT / page).read_text(encoding="utf-8")
    # Regenerate with: python -m draftgen.reconstruct.reasons
    assert with_table(text, PAGES[page], page) == text
    listed = re.findall(r"^\| \[`(\w+)`\]\(([^)]*)\) \| (.*) \|$", reason_table(PAGES[page]), re.M)
    assert [code for code, _, _ in listed] == [code for code in REASONS if code != "ok"]
    for code, link, meaning in listed:
        assert link == PAGES[page] + REASONS[code].anchor and meaning == REASONS[code].meaning
        assert f"| [`{code}`]({link}) | {meaning} |" in text


def test_a_page_without_the_table_lines_is_named():
    with pytest.raises(ValueError, match="README.md has no"):
        with_table("no table here", "#", "README.md")

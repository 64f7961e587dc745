"""The README's lists of offline fixtures and of profiles name exactly what the registries hold:
a fixture or profile added without a word in the README, or a name left there after it went,
fails here."""

from __future__ import annotations

import re
from pathlib import Path

from draftgen.profiles import PROFILE_NAMES
from draftgen_testing.fixtures import FIXTURE_NAMES

README = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")


def paragraph(starts: str) -> str:
    """The README paragraph that begins with ``starts`` (up to the next blank line)."""
    begin = README.index(starts)
    end = README.find("\n\n", begin)
    return README[begin : end if end != -1 else None]


def test_the_readme_names_every_fixture_and_no_other():
    names = re.findall(r"`fixture:([\w.-]+)`", paragraph("Tokenizers: "))
    assert len(names) == len(set(names))  # each named once
    assert sorted(names) == sorted(FIXTURE_NAMES)


def test_the_readme_names_every_profile_and_no_other():
    text = paragraph("Profiles, detected from")
    text = text[: text.index("Every family's prompts")]  # the list, not the sentences after it
    names = set(re.findall(r"`([\w.-]+)`", text)) - {"--profile", "tekken.json"}
    names = {name for name in names if not name.startswith(("thinking", "enable_", "reasoning"))}
    assert names == set(PROFILE_NAMES)

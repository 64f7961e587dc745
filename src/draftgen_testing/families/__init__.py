"""Every family's offline test tokenizers, by fixture name: one module per family of
``draftgen.profiles``, of the same name, and ``generic`` for models no profile claims.
"""

from __future__ import annotations

import importlib

from draftgen import profiles
from draftgen_testing.families import generic
from draftgen_testing.specs import FixtureSpec

# The module of each family of draftgen.profiles (named as there, in its detection order): a
# family added there needs only its module here.
FAMILIES = tuple(
    importlib.import_module(f"{__name__}.{family.__name__.rpartition('.')[2]}")
    for family in profiles.FAMILIES
)

# Models no profile claims: the generic profile's test tokenizers.
UNCLAIMED = (generic,)

FIXTURES: dict[str, FixtureSpec] = {
    name: spec for family in (*FAMILIES, *UNCLAIMED) for name, spec in family.FIXTURES.items()
}

"""Every family's offline test tokenizers, by fixture name: one module per family of
``draftgen.profiles``, of the same name.
"""

from __future__ import annotations

from draftgen_testing.families import (
    deepseek,
    deepseek_v4,
    generic,
    glm,
    glm5,
    gpt_oss,
    kimi,
    kimi_k3,
    llama,
    minimax,
    minimax_m3,
    mistral,
    qwen3,
    qwen3_5,
)
from draftgen_testing.specs import FixtureSpec

FAMILIES = (
    kimi,
    kimi_k3,
    deepseek_v4,
    deepseek,
    qwen3_5,
    qwen3,
    glm5,
    glm,
    minimax_m3,
    minimax,
    gpt_oss,
    mistral,
    llama,
)

# Models no profile claims: the generic profile's test tokenizers.
UNCLAIMED = (generic,)

FIXTURES: dict[str, FixtureSpec] = {
    name: spec for family in (*FAMILIES, *UNCLAIMED) for name, spec in family.FIXTURES.items()
}

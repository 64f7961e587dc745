"""GLM-5.2's and 5.3's offline tokenizers: Qwen's ranks, GLM-5's added tokens at their real ids."""

from __future__ import annotations

from draftgen_testing.families.glm import GLM_TOKENS
from draftgen_testing.specs import QwenBpeFixture

# GLM-5's added tokens start at 154820, right after its 154,820 BPE ranks (its tiktoken.model),
# in a 154,880-id vocabulary. Confirmed ids: <|endoftext|> 154820, <|user|> 154827 and
# <|observation|> 154829 (generation_config's eos ids); they sit where GLM-4.5's list puts them
# (151329, 151336, 151338, plus 3491), so the rest of GLM-4.5's list is assumed to follow in the
# same order (*unconfirmed*: the full added_tokens_decoder of GLM-5 was not available). GLM's own
# ranks are not available offline: the fixture uses Qwen's 151,643 ranks, reserves 151643..154819
# and puts GLM-5's specials at their real ids, so special ids are real and ordinary ids are not.
GLM5_FIRST_ID = 154820
# The same added tokens, in the same order, as GLM-4.5/4.6 (only their first id moved).
GLM5_TOKENS: tuple[str, ...] = GLM_TOKENS
GLM5_SPECIAL_TOKENS: dict[int, str] = dict(enumerate(GLM5_TOKENS, start=GLM5_FIRST_ID))
# As GLM-4.5's fixture: think and tool tokens are added with `special: false` (*unconfirmed*).
GLM5_NON_SPECIAL = frozenset(GLM5_TOKENS[GLM5_TOKENS.index("<think>") :])


def _fixture(template: str) -> QwenBpeFixture:
    return QwenBpeFixture(
        added_tokens=GLM5_SPECIAL_TOKENS,
        vocab_size=154880,
        non_special=GLM5_NON_SPECIAL,
        config={
            "bos_token": None,
            "eos_token": "<|endoftext|>",
            "pad_token": "<|endoftext|>",
            "unk_token": None,
            "model_max_length": 202752,
        },
        template=template,
    )


# The two published templates differ in the effort line and the thinking switch (see the
# templates' headers); the tokenizer is the same.
FIXTURES = {"glm-5.2": _fixture("glm-5.2"), "glm-5.3": _fixture("glm-5.3")}

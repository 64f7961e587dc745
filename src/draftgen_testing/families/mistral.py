"""Magistral's and Devstral's offline tokenizers: mistral-common's tekken file as v13 and v7."""

from __future__ import annotations

from draftgen_testing.specs import MistralCommonFixture

# Magistral's special tokens after the 20 every tekken file starts with (rank -> text), as
# Magistral-Small-2509's tekken.json has them; the other ranks below 1000 are <SPECIAL_i>.
# mistral-common's pinned v13 test case (tests/data/expected/chat-v13-released-system-think)
# encodes "<s>[SYSTEM_PROMPT][THINK]Hi[/THINK]..." as 1, 17, 34, 37133, 35: the same ids.
MAGISTRAL_SPECIAL_TOKENS = {32: "[ARGS]", 33: "[CALL_ID]", 34: "[THINK]", 35: "[/THINK]"}

FIXTURES = {
    # tekken_240911.json's ranks (Pixtral-12B-2409's, Mistral-Nemo's tekken) as a v13 tokenizer.
    "magistral": MistralCommonFixture(
        source="tekken_240911.json",
        target="tekken.json",
        version="v13",
        special_tokens=MAGISTRAL_SPECIAL_TOKENS,
    ),
    # The same ranks as a v7 tokenizer, Devstral-Small-2505's and Mistral-Small-3.1's version:
    # the 20 specials every tekken file starts with ([SYSTEM_PROMPT] 17), no think tokens.
    "devstral": MistralCommonFixture(
        source="tekken_240911.json",
        target="tekken.json",
        version="v7",
    ),
    # The package's SentencePiece v7 file, Mistral-Large-2411's (read with sentencepiece, part
    # of the fixtures extra), under the name Mistral-Large-Instruct-2411's repository gives it.
    "mistral-large": MistralCommonFixture(
        source="mistral_instruct_tokenizer_241114.model.v7",
        target="tokenizer.model.v7",
    ),
}

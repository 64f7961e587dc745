"""fixture:gpt-oss on the real o200k vocabulary: the pinned rank file, and ids equal to tiktoken's
and openai-harmony's on thousands of varied strings."""

from __future__ import annotations

import hashlib
import random

import pytest
import tiktoken
import tiktoken.load
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tiktoken_ext import openai_public

from draftgen.tokens import o200k
from draftgen.tokens.tokenizer import decode, encode, load_tokenizer
from draftgen_testing.families.gpt_oss import GPT_OSS_SPECIAL_TOKENS, O200K_PATTERN

# tiktoken_ext.openai_public's o200k_base and openai-harmony's pin of o200k_base.tiktoken.
PIN = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"


@pytest.fixture(scope="module")
def rank_path(tmp_path_factory):
    return o200k.write_o200k_base(tmp_path_factory.mktemp("o200k"))


@pytest.fixture(scope="module")
def tiktoken_harmony(rank_path):
    """tiktoken's o200k_harmony: pattern and specials from the installed tiktoken_ext, ranks from
    the rebuilt file (the constructor's download is replaced by it)."""
    # expected_hash also drops a stale copy from tiktoken's path-keyed cache of local files.
    ranks = tiktoken.load.load_tiktoken_bpe(str(rank_path), expected_hash=PIN)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(openai_public, "load_tiktoken_bpe", lambda *args, **kwargs: ranks)
        spec = openai_public.o200k_harmony()
    return tiktoken.Encoding(
        name="o200k_base",
        pat_str=spec["pat_str"],
        mergeable_ranks=ranks,
        special_tokens=spec["special_tokens"],
    )


@pytest.fixture(scope="module")
def fixture():
    return load_tokenizer("fixture:gpt-oss")


@pytest.fixture(scope="module")
def harmony(tmp_path_factory):
    from openai_harmony import HarmonyEncodingName, load_harmony_encoding

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DRAFTGEN_CACHE", str(tmp_path_factory.mktemp("cache")))
        patch.setenv("TIKTOKEN_ENCODINGS_BASE", str(o200k.harmony_encodings_dir()))
        return load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)


@pytest.fixture(scope="module")
def added(fixture):
    """Every added id of the fixture (199998..201087) and its text."""
    return {token_id: fixture.convert_ids_to_tokens(token_id) for token_id in range(199998, 201088)}


# --- the rank file --------------------------------------------------------------------------


def test_rebuilt_rank_file_has_the_pinned_hash(rank_path):
    assert rank_path.name == "o200k_base.tiktoken"
    assert hashlib.sha256(rank_path.read_bytes()).hexdigest() == PIN == o200k.O200K_SHA256


def test_ranks_from_a_loaded_tokenizer_give_the_same_file(fixture, rank_path):
    assert o200k.rank_file(o200k.tokenizer_ranks(fixture)) == rank_path.read_bytes()


def test_without_quicktok_the_tokenizer_is_used_or_asked_for(fixture, tmp_path, monkeypatch):
    monkeypatch.setattr(o200k, "_quicktok_installed", lambda: False)
    with pytest.raises(o200k.O200kRanksError, match="install quicktok-v1"):
        o200k.write_o200k_base(tmp_path)
    path = o200k.write_o200k_base(tmp_path, tokenizer=fixture)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == PIN


def test_wrong_ranks_raise_and_write_nothing(tmp_path, monkeypatch):
    ranks = o200k.quicktok_ranks()
    ranks[b"hello"], ranks[b"world"] = ranks[b"world"], ranks[b"hello"]
    monkeypatch.setattr(o200k, "quicktok_ranks", lambda name="o200k": ranks)
    with pytest.raises(o200k.O200kRanksError, match="not gpt-oss's vocabulary"):
        o200k.write_o200k_base(tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_harmony_dir_is_cached_and_repaired(tmp_path, monkeypatch):
    monkeypatch.setenv("DRAFTGEN_CACHE", str(tmp_path))
    directory = o200k.harmony_encodings_dir()
    assert directory == tmp_path / "o200k"
    path = directory / "o200k_base.tiktoken"
    assert [p.name for p in directory.iterdir()] == [path.name]
    mtime = path.stat().st_mtime_ns
    assert o200k.harmony_encodings_dir() == directory and path.stat().st_mtime_ns == mtime
    path.write_bytes(path.read_bytes()[:-10])  # a damaged file is written again
    assert o200k.harmony_encodings_dir() == directory
    assert hashlib.sha256(path.read_bytes()).hexdigest() == PIN


def test_quicktok_specials_are_o200k_harmony(tiktoken_harmony):
    # Both texts of 200018 are there, as in tiktoken: <|endofprompt|> and <|reserved_200018|>.
    specials = o200k.quicktok_specials()
    assert {text: token_id for token_id, text in specials} == tiktoken_harmony._special_tokens
    assert len(specials) == 1091


# --- the fixture against tiktoken and openai-harmony ----------------------------------------


def test_fixture_splits_with_o200k_pattern(tiktoken_harmony):
    assert O200K_PATTERN == tiktoken_harmony._pat_str


FRAGMENTS = [
    *(" " * n for n in (1, 2, 3, 4, 7, 8, 16)),
    *("\n" * n for n in (1, 2, 3, 4)),
    "\r\n", "\r", "\t", "  \t", "\t\t", " \n", "\n ", "\u00a0", "\u3000", "\u2009", "\x0b", "\x0c",
    "\x85", "\u2028", "\u200b", "\ufeff",
    "a", "A", "the", "The", "THE", "hello", "World", "HTTPServer", "camelCase", "snake_case",
    "'s", "'S", "'t", "'re", "'ve", "'m", "'ll", "'LL", "'d", "'D", "don't", "I'LL", "it's", "'",
    "0", "7", "12", "123", "1234", "1234567", "3.14159", "1,000,000", "2024-06-01", "0x1F",
    "中", "文", "中文字符", "日本語の", "かな", "カタカナ", "한국어", "русский", "Ελληνικά",
    "العربية", "עברית", "हिन्दी", "ภาษาไทย", "١٢٣", "１２３", "Ⅻ", "½",
    "é", "e\u0301", "a\u0308\u0301", "\u0301", "n\u0303", "ǅ", "ʰ", "ß", "İ", "ﬁ",
    "😀", "👍🏽", "👨‍👩‍👧", "🇫🇷", "❤️", "\u200d", "\ufe0f", "🧑‍💻",
    ".", ",", "!", "?", "...", "—", "–", "«", "»", "“", "”", "(", ")", "[", "]", "{", "}",
    "/", "//", "\\", "::", "->", "=>", "==", "!=", "<=", "**", "#", "@", "$", "%", "&", "|", "~",
    # Pieces of special tokens, never a whole one ("|>" is left out): this text is all ordinary.
    "<|", "<|end", "<|endoftext", "|", "<think>",
    "https://example.com/a/b?c=1&d=%20#frag", "user@example.org",
    '{"key": "value", "n": [1, 2.5, null, true]}', '"\\u00e9\\n"',
    "def f(x):\n    return x ** 2  # ok\n", "    if a and not b:\n        pass\n",
    "for (int i = 0; i < n; ++i) {", "import os, sys", "SELECT * FROM t WHERE id = 42;",
    "<div class=\"x\">", "</div>", "$ ls -la | grep py", "λx.x", "∀x∈ℝ: x² ≥ 0",
]  # fmt: skip
ADVERSARIAL = [
    "",
    "\n\n\n",
    "  \t",
    "1234567",
    "'s 'LL",
    "He's, they'LL, we'VE, I'D",
    "https://github.com/openai/harmony/blob/main/src/tiktoken_ext/public_encodings.rs",
    '{\n  "a": [1, 2, 3],\n  "b": {"c": null}\n}\n',
    "class A:\n\tdef __init__(self):\n\t\tself.x = 1\n\n\n\nprint(A().x)\n",
    "   leading and trailing   ",
    "tabs\tand\t\ttabs\t",
    "windows\r\nline\r\n\r\nends\r\n",
    " \n \n\n   \n\t\n",
    "3.14159265358979323846264338327950288419716939937510",
    "ALLCAPS lowerCamel UpperCamel MiXeD",
    "中文字符和标点，还有日本語のかな",
    "emoji 😀 family 👨‍👩‍👧 flag 🇫🇷 skin 👍🏽",
    "cafe\u0301 nai\u0308ve Ærø ß",
    "zero\u200bwidth and nbsp\u00a0here",
]


def varied_strings() -> list[str]:
    """The adversarial list, runs of whitespace and digits, and thousands of seeded mixtures of
    fragments and random characters from many scripts."""
    rng = random.Random(20250805)
    texts = list(ADVERSARIAL)
    for n in range(1, 41):
        texts += [" " * n, "\n" * n, "\t" * n, " \n" * n, "x" + " " * n + "y", "a" + "\n" * n]
        texts += ["".join(rng.choice("0123456789") for _ in range(n))]
    alphabet = [chr(c) for c in range(0x20, 0x7F)] + [f for f in FRAGMENTS if len(f) == 1]
    blocks = [(0x00A0, 0x024F), (0x0300, 0x036F), (0x0370, 0x052F), (0x0590, 0x06FF),
              (0x0900, 0x097F), (0x0E00, 0x0E7F), (0x3040, 0x30FF), (0x4E00, 0x9FFF),
              (0xAC00, 0xD7A3), (0x1F300, 0x1FAFF), (0x2000, 0x206F), (0xFF00, 0xFFEF)]  # fmt: skip
    # A few long documents of fragments (BPE over long pre-tokens, many pre-tokens).
    texts += ["".join(rng.choice(FRAGMENTS) for _ in range(400)) for _ in range(20)]
    while len(texts) < 10000:
        draw = rng.random()
        if draw < 0.5:
            texts.append("".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(1, 14))))
        elif draw < 0.6:  # any code point but a surrogate, unassigned ones and all planes too
            points = (rng.randrange(0x110000) for _ in range(rng.randint(1, 20)))
            texts.append("".join(chr(c) for c in points if not 0xD800 <= c <= 0xDFFF))
        else:
            chars = []
            for _ in range(rng.randint(1, 40)):
                if rng.random() < 0.5:
                    chars.append(rng.choice(alphabet))
                else:
                    low, high = rng.choice(blocks)
                    chars.append(chr(rng.randint(low, high)))
            texts.append("".join(chars))
    return texts


def test_fixture_equals_tiktoken_and_harmony_on_thousands_of_strings(
    fixture, tiktoken_harmony, harmony, added
):
    texts = varied_strings()
    assert len(texts) == 10000
    assert not any(special in text for text in texts for special in added.values())
    for text in texts:
        ids = fixture.encode(text, add_special_tokens=False)
        assert ids == tiktoken_harmony.encode_ordinary(text), text
        assert ids == harmony.encode(text, allowed_special=set(), disallowed_special=()), text
        assert fixture.decode(ids) == text
        assert harmony.decode_utf8(ids) == text
    # draftgen's own encode and decode (a faster encoder where one is proven) agree too.
    for text in texts[:500]:
        ids = tiktoken_harmony.encode_ordinary(text)
        assert encode(fixture, text) == ids
        assert decode(fixture, ids) == text


TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=200)
MIXED = st.lists(st.sampled_from(FRAGMENTS), max_size=30).map("".join)


@settings(
    max_examples=500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=st.one_of(TEXT, MIXED))
def test_fixture_equals_tiktoken_on_any_text(fixture, tiktoken_harmony, added, text):
    ids = fixture.encode(text, add_special_tokens=False)
    # Hypothesis also tries string constants it finds, special tokens' texts among them: those
    # are the fixture's added tokens (<|reserved_200018|> is not one: ordinary text).
    assert ids == tiktoken_harmony.encode(
        text, allowed_special=set(added.values()), disallowed_special=()
    )
    if not any(special in text for special in added.values()):
        assert ids == tiktoken_harmony.encode_ordinary(text)
    assert fixture.decode(ids) == text


NAMED = sorted(set(GPT_OSS_SPECIAL_TOKENS.values()))
WITH_SPECIALS = st.lists(st.sampled_from([*FRAGMENTS[:60], *NAMED]), max_size=30).map("".join)


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=WITH_SPECIALS)
def test_specials_inside_text_are_single_ids(fixture, tiktoken_harmony, added, text):
    ids = fixture.encode(text, add_special_tokens=False)
    assert ids == tiktoken_harmony.encode(
        text, allowed_special=set(added.values()), disallowed_special=()
    )
    assert fixture.decode(ids) == text


def test_every_added_token_is_its_single_id(fixture, tiktoken_harmony, added):
    assert len(fixture) == 201088
    assert {added[token_id] for token_id in GPT_OSS_SPECIAL_TOKENS} == set(NAMED)
    for token_id, text in GPT_OSS_SPECIAL_TOKENS.items():
        assert added[token_id] == text
    # The reserved ids carry o200k_harmony's names, as in gpt-oss's tokenizer.
    assert added[200000] == "<|reserved_200000|>"
    assert added[201087] == "<|reserved_201087|>"
    for token_id, text in added.items():
        assert fixture.encode(text, add_special_tokens=False) == [token_id], text
        assert tiktoken_harmony.encode(text, allowed_special="all") == [token_id], text
        assert fixture.decode([token_id]) == text


def test_harmony_specials_are_the_fixture_ids(harmony, added):
    ids = {text: token_id for token_id, text in added.items()}
    texts = harmony.special_tokens_set
    # harmony names 200018 <|reserved_200018|> (not <|endofprompt|>, which it encodes as text)
    # and has one more reserved id, 201088, past gpt-oss's 201088 embeddings.
    assert texts - set(ids) == {"<|reserved_200018|>", "<|reserved_201088|>"}
    assert set(ids) - texts == {"<|endofprompt|>"}
    for text in texts & set(ids):
        assert harmony.encode(text, allowed_special="all") == [ids[text]], text
    assert sorted(harmony.stop_tokens()) == [200002, 200007, 200012]

"""Long texts encoded in pieces: the joined ids are the whole text's, on every cuttable fixture,
with cuts every few characters; and encoding a long answer costs memory in proportion to it."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from draftgen.tokens import long_text
from draftgen.tokens.fast_encoder import ReferenceCodec, TokenizersCodec, reference_encode
from draftgen.tokens.tokenizer import load_tokenizer

CUTTABLE = (
    "qwen3",
    "qwen3.5",
    "kimi-k2.5",
    "deepseek-v4",
    "glm-4.6",
    "minimax-m2",
    "llama-3.3",
    "llama-4",
    "gpt-oss",
)
# Kimi's remote code (a slow tiktoken class: it cuts its own texts), mistral-common's tekken.
WHOLE = ("kimi-k2.5-remote", "magistral")

# Pieces that meet at every kind of place a cut could fall: letters, digits, contractions,
# combining marks (NFC), CJK, whitespace runs, newlines, punctuation, special-token spellings.
WORDS = st.sampled_from(
    [
        "alpha",
        "Beta",
        "x",
        "42",
        "1234",
        "café",
        "e\u0301",
        "naïve",
        "don't",
        "'s",
        "日本語",
        "\n",
        "\n\n",
        "  ",
        "\t",
        "...",
        "!?",
        "<|im_end|>",
        "<think>",
        "[INST]",
        "A",
        "z9",
        "ÅB",
        "\u00a0",
        "🙂",
    ]
)
TEXTS = st.lists(
    st.tuples(WORDS, st.sampled_from(["", " ", " ", "\n", "  "])), min_size=1, max_size=80
).map(lambda pairs: "".join(word + gap for word, gap in pairs))


@pytest.fixture(scope="module", params=CUTTABLE)
def tokenizer(request):
    return load_tokenizer(f"fixture:{request.param}")


@settings(max_examples=150, deadline=None)
@given(text=TEXTS, size=st.integers(min_value=1, max_value=24))
def test_joined_pieces_are_the_whole_texts_ids(tokenizer, text, size):
    parts = list(long_text.pieces(tokenizer, text, size))
    assert "".join(parts) == text
    joined = [i for part in parts for i in reference_encode(tokenizer, part)]
    assert joined == reference_encode(tokenizer, text)


def test_the_fixtures_cut_as_expected(tokenizer):
    text = "word " * 200
    assert len(list(long_text.pieces(tokenizer, text, 50))) > 10


@pytest.mark.parametrize("name", WHOLE)
def test_tokenizers_that_cannot_be_cut_encode_whole(name):
    tokenizer = load_tokenizer(f"fixture:{name}")
    assert list(long_text.pieces(tokenizer, "word " * 200, 50)) == ["word " * 200]


def test_text_without_a_safe_cut_stays_whole():
    tokenizer = load_tokenizer("fixture:qwen3")
    text = "日本語" * 100 + " abc"
    assert list(long_text.pieces(tokenizer, text, 20)) == [text]


def test_codecs_join_pieces_beyond_the_threshold(monkeypatch):
    tokenizer = load_tokenizer("fixture:qwen3")
    text = "The quick brown fox, naïve café 42 times.\n" * 50
    whole = reference_encode(tokenizer, text)
    monkeypatch.setattr(long_text, "LONG_TEXT_CHARS", 64)
    assert len(list(long_text.pieces(tokenizer, text))) > 10
    assert ReferenceCodec(tokenizer).encode(text) == whole
    codec = TokenizersCodec(tokenizer.backend_tokenizer, lambda t: long_text.pieces(tokenizer, t))
    assert codec.encode(text) == whole
    assert codec.encode_batch([text, "short"])[0] == whole


MEMORY_PROBE = """
import random, resource, sys
from draftgen.tokens.tokenizer import encode, load_tokenizer
tokenizer = load_tokenizer("fixture:qwen3")
encode(tokenizer, "warm up")
rng = random.Random(0)
words = ["alpha", "beta", "gamma", "café", "naïve", "\\n", "1234", "x"]
text = " ".join(rng.choice(words) for _ in range(int(sys.argv[1])))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
ids = encode(tokenizer, text)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(len(text), len(ids), (after - before) * 1024)
"""


@pytest.mark.long
def test_a_long_answer_costs_memory_in_proportion_to_its_size():
    # ~8 MB of text: whole, the tokenizers library kept ~500 bytes per token (gigabytes).
    out = subprocess.run(
        [sys.executable, "-c", MEMORY_PROBE, "1600000"],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    chars, tokens, grown = map(int, out.stdout.split())
    assert tokens > 1_000_000
    # The ids as a Python list take ~36 bytes each; the pieces' encodings come and go.
    assert grown < 120 * tokens, (chars, tokens, grown)


def test_long_texts_are_encoded_a_group_at_a_time_and_stop_between_groups(monkeypatch):
    import threading

    monkeypatch.setattr(long_text, "GROUP_CHARS", 10)
    calls: list[list[str]] = []

    def encode_flat(texts: list[str]) -> list[list[int]]:
        calls.append(texts)
        return [[len(text)] for text in texts]

    pieces = ["abcd", "efgh", "ijkl", "mnop", "qr"]
    assert long_text.encode_grouped(pieces, encode_flat) == [[4], [4], [4], [4], [2]]
    assert calls == [["abcd", "efgh", "ijkl"], ["mnop", "qr"]]

    stop, outcome = threading.Event(), []

    def stopped_after_one_group(texts):
        stop.set()  # as Ctrl-C would, while the first group is being encoded
        return encode_flat(texts)

    def helper():  # the reconstruction's encoder thread
        long_text.obey(stop)
        try:
            long_text.encode_grouped(pieces, stopped_after_one_group)
        except long_text.EncodingStopped as exc:
            outcome.append(str(exc))

    calls.clear()
    thread = threading.Thread(target=helper)
    thread.start()
    thread.join()
    assert outcome == ["the encoding was stopped between two groups of pieces"]
    assert calls == [["abcd", "efgh", "ijkl"]]
    # A thread that obeys no stop encodes on.
    assert long_text.encode_grouped(pieces, encode_flat) == [[4], [4], [4], [4], [2]]


def test_leaving_a_stopping_block_by_an_exception_sets_its_stop():
    with pytest.raises(KeyboardInterrupt), long_text.stopping() as stop:
        assert not stop.is_set()
        raise KeyboardInterrupt
    assert stop.is_set()
    with long_text.stopping() as calm:
        pass
    assert not calm.is_set()
    long_text.check_stop()  # this thread obeys nothing once the blocks are left


# -- comparing long texts, and the pieces where one changes another ------------------------------


def naive_prefix(a: str, b: str) -> int:
    size = 0
    while size < min(len(a), len(b)) and a[size] == b[size]:
        size += 1
    return size


SIMILAR = st.tuples(
    st.text(alphabet="ab \n", max_size=3000),
    st.text(alphabet="ab \n", max_size=40),
    st.text(alphabet="ab \n", max_size=40),
    st.text(alphabet="ab \n", max_size=40),
)


@settings(max_examples=200, deadline=None)
@given(parts=SIMILAR, start=st.integers(min_value=0, max_value=50))
def test_common_prefix_and_suffix_are_the_naive_ones(parts, start):
    shared, head, other_head, end = parts
    a, b = head + shared + end, other_head + shared
    start = min(start, naive_prefix(a, b))
    assert long_text.common_prefix(a, b, start) == naive_prefix(a, b) - start
    backwards = naive_prefix(a[::-1], b[::-1])
    start = min(start, backwards)
    assert long_text.common_suffix(a, b, start) == backwards - start


@pytest.mark.parametrize("trail", ["", " "])
@pytest.mark.parametrize("where", [40, 3000, 6600])
def test_changed_pieces_never_take_a_changed_middle_for_the_same(monkeypatch, where, trail):
    tokenizer = load_tokenizer("fixture:qwen3")
    monkeypatch.setattr(long_text, "LONG_TEXT_CHARS", 1500)
    base = " ".join(("alpha", "beta", "café", "42")[i % 4] for i in range(1400))
    text = "\n" + base[:where] + "X" + base[where + 1 :] + trail
    pieces = long_text.changed_pieces(long_text.cutter(tokenizer), base, text)
    # A third change far from both edges is in no piece: not counted so.
    assert (pieces is None) == (trail != "" and where == 3000)
    if pieces is not None:
        olds, news = pieces[::2], pieces[1::2]
        assert max(map(len, pieces)) < 1500
        count = len(reference_encode(tokenizer, base)) + sum(
            len(reference_encode(tokenizer, new)) - len(reference_encode(tokenizer, old))
            for old, new in zip(olds, news, strict=True)
        )
        assert count == len(reference_encode(tokenizer, text))

"""Fast encoders proven exact: the tokenizer's own ids and text, from a faster implementation.

The reference is the tokenizer's own ``encode(text, add_special_tokens=False)`` and ``decode``. A
fast encoder (fastokens; the tiktoken ``Encoding`` inside a remote-code class such as Kimi's; the
Rust ``tokenizers`` batch call) serves a tokenizer only after a differential check on the run's own
texts and adversarial ones gave exactly the reference's ids and text (``prove``, once per process
and tokenizer); any difference leaves that encoder out, and without one the tokenizer's own code
encodes.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import operator
import os
import re
import sys
import threading
import unicodedata
from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from draftgen.tokens import long_text

_log = logging.getLogger("draftgen.encoder")

# Moonshot's ``tokenization_kimi.py`` (after Meta's Llama 3 tokenizer) hands tiktoken at most
# 400,000 characters at a time and cuts runs of more than 25,000 whitespace or non-whitespace
# characters, because tiktoken panics or slows down beyond; the cuts move token boundaries.
TIKTOKEN_MAX_ENCODE_CHARS = 400_000
MAX_RUN_CHARS = 25_000
# Anchored at the start of a run: unanchored, a failed match is retried at every character of a
# shorter run. ``\s`` matches exactly the characters ``str.isspace`` accepts.
_LONG_RUN = re.compile(rf"(?<!\s)\s{{{MAX_RUN_CHARS + 1},}}|(?<!\S)\S{{{MAX_RUN_CHARS + 1},}}")

# How many of a run's own texts the check takes (spread over the first batch).
SAMPLE_TEXTS = 8


def reference_encode(tokenizer: Any, text: str) -> list[int]:
    """The judge: ids as servers tokenize a rendered template (specials as text, no BOS)."""
    return tokenizer.encode(text, add_special_tokens=False)


def reference_decode(tokenizer: Any, ids: Sequence[int]) -> str:
    # Slow tokenizers under transformers 4 (Kimi's remote code) put a space around every added
    # token that is not special (K2.5's <think> and tool-call tokens) unless told not to.
    return tokenizer.decode(
        list(ids),
        skip_special_tokens=False,
        clean_up_tokenization_spaces=False,
        spaces_between_special_tokens=False,
    )


def kimi_pieces(text: str) -> Iterator[str]:
    """The pieces Moonshot's ``encode`` hands tiktoken, joined back they are ``text``.

    Every 400,000 characters, then wherever a run of whitespace or of non-whitespace passes
    25,000 characters (the run goes on in the next piece). A regex finds the long runs, so text
    without one costs one scan in C instead of a Python loop over every character.
    """
    if len(text) <= MAX_RUN_CHARS:
        yield text
        return
    for offset in range(0, len(text), TIKTOKEN_MAX_ENCODE_CHARS):
        chunk = text[offset : offset + TIKTOKEN_MAX_ENCODE_CHARS]
        start = 0
        for run in _LONG_RUN.finditer(chunk):
            cut = run.start() + MAX_RUN_CHARS
            while cut < run.end():
                yield chunk[start:cut]
                start = cut
                cut += MAX_RUN_CHARS
        yield chunk[start:]


Splitter = Callable[[str], Iterator[str]]


class Codec:
    """One way to turn texts into a tokenizer's ids and back, many texts at a time."""

    name = "reference"

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        raise NotImplementedError

    def decode_batch(self, batch: list[list[int]]) -> list[str]:
        raise NotImplementedError

    def encode(self, text: str) -> list[int]:
        return self.encode_batch([text])[0]

    def decode(self, ids: Sequence[int]) -> str:
        return self.decode_batch([list(ids)])[0]


class ReferenceCodec(Codec):
    """The tokenizer's own code, one text at a time."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [self.encode(text) for text in texts]

    def decode_batch(self, batch: list[list[int]]) -> list[str]:
        return [reference_decode(self.tokenizer, ids) for ids in batch]

    def encode(self, text: str) -> list[int]:
        parts = list(long_text.pieces(self.tokenizer, text))
        if len(parts) == 1:
            return reference_encode(self.tokenizer, text)
        out: list[int] = []
        for part in parts:
            long_text.check_stop()
            out += reference_encode(self.tokenizer, part)
        return out

    def decode(self, ids: Sequence[int]) -> str:
        return reference_decode(self.tokenizer, ids)


def _joined(
    texts: list[str], splitter: Splitter | None, encode_flat: Callable[[list[str]], list[list[int]]]
) -> list[list[int]]:
    """Encode ``texts`` cut into pieces by ``splitter``, each text's ids joined back."""
    if splitter is None:
        return long_text.encode_grouped(texts, encode_flat)
    pieces: list[str] = []
    ends: list[int] = []
    for text in texts:
        pieces.extend(splitter(text))
        ends.append(len(pieces))
    encoded = long_text.encode_grouped(pieces, encode_flat)
    out: list[list[int]] = []
    start = 0
    for end in ends:
        if end == start + 1:
            out.append(encoded[start])
        else:
            out.append([i for ids in encoded[start:end] for i in ids])
        start = end
    return out


class ByteTable:
    """Decoding where every id stands for fixed bytes (a byte-level BPE vocabulary, a tiktoken
    file): the ids' bytes joined and read as UTF-8, a broken sequence replaced as ``tokenizers``'
    ByteLevel decoder and tiktoken do (``str(..., errors="replace")``).

    Verification decodes every id a run makes. fastokens' own decode holds the GIL and ran ~3x
    slower than this table here (7.6 M ids: 0.57 s against 0.20 s); the table is proven with
    the codec that uses it, as any decode is.
    """

    def __init__(self, table: list[bytes | None]) -> None:
        self._table = table

    def decode(self, ids: Sequence[int]) -> str:
        # An id the table lacks is None: join raises, and the caller decodes natively.
        # itemgetter looks every id up in one C call: a quarter quicker than map() (16 against
        # 22 ns an id here); it hands back the item itself, not a tuple, for one id.
        if len(ids) > 1:
            pieces = operator.itemgetter(*ids)(self._table)
        else:
            pieces = [self._table[i] for i in ids]
        return b"".join(pieces).decode("utf-8", "replace")


def _byte_level_chars() -> dict[str, int]:
    """The character GPT-2's byte-level alphabet writes for each byte: printable Latin-1 stands
    for itself, every other byte for a character from U+0100 on, in byte order."""
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars = {chr(b): b for b in printable}
    extra = 0
    for b in range(256):
        if b not in printable:
            chars[chr(0x100 + extra)] = b
            extra += 1
    return chars


def byte_table_of(raw: Any) -> ByteTable | None:
    """The ``ByteTable`` of a ``tokenizers`` object whose decoder is ByteLevel (None otherwise).

    As that decoder does, a token all of whose characters are in the byte-level alphabet stands
    for their bytes; any other (an added token such as ``<｜User｜>``) for its own UTF-8.
    """
    if type(getattr(raw, "decoder", None)).__name__ != "ByteLevel":
        return None
    chars = _byte_level_chars()
    vocab = raw.get_vocab(with_added_tokens=True)
    table: list[bytes | None] = [None] * (max(vocab.values(), default=-1) + 1)
    for token, index in vocab.items():
        try:
            table[index] = bytes(chars[c] for c in token)
        except KeyError:
            table[index] = token.encode("utf-8")
    return ByteTable(table)


def tiktoken_byte_table(encoding: Any) -> ByteTable:
    """The ``ByteTable`` of a tiktoken ``Encoding``: each rank's bytes, each special's UTF-8."""
    table: list[bytes | None] = [None] * encoding.n_vocab
    for piece, rank in encoding._mergeable_ranks.items():
        table[rank] = piece
    for text, index in encoding._special_tokens.items():
        table[index] = text.encode("utf-8")
    return ByteTable(table)


class FastokensCodec(Codec):
    """fastokens (Rust BPE, GIL released, every core), loaded from the tokenizer's own files;
    decoding by ``table`` where the vocabulary has one."""

    def __init__(
        self,
        native: Any,
        name: str,
        splitter: Splitter | None = None,
        table: ByteTable | None = None,
    ) -> None:
        self.native = native
        self.name = name
        self.splitter = splitter
        self.table = table

    def _encode_flat(self, texts: list[str]) -> list[list[int]]:
        if not texts:
            return []
        # One buffer of little-endian uint32 ids and one of offsets: no Python object per token.
        flat, offsets = self.native.encode_batch_flat(texts)
        ids = array("I")
        ids.frombytes(flat)
        ends = array("Q")
        ends.frombytes(offsets)
        if sys.byteorder != "little":
            ids.byteswap()
            ends.byteswap()
        return [ids[ends[i] : ends[i + 1]].tolist() for i in range(len(texts))]

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return _joined(texts, self.splitter, self._encode_flat)

    def encode(self, text: str) -> list[int]:
        if self.splitter is None or len(text) <= MAX_RUN_CHARS:
            return list(self.native.encode(text).ids)
        return self.encode_batch([text])[0]

    def decode_batch(self, batch: list[list[int]]) -> list[str]:
        if self.table is not None:
            try:
                return [self.table.decode(ids) for ids in batch]
            except (TypeError, IndexError):
                pass
        return self.native.decode_batch(batch, skip_special_tokens=False)

    def decode(self, ids: Sequence[int]) -> str:
        return self.decode_batch([list(ids)])[0]


class TiktokenCodec(Codec):
    """A remote-code class's tiktoken ``Encoding``, driven directly with every special allowed
    (as Kimi's ``encode`` does), its batch calls on a thread per core."""

    def __init__(self, encoding: Any, splitter: Splitter | None) -> None:
        self.encoding = encoding
        self.splitter = splitter
        self.name = "tiktoken" + (" (cut as Kimi's encode cuts)" if splitter else "")
        self.threads = max(2, os.cpu_count() or 1)

    def _encode_flat(self, texts: list[str]) -> list[list[int]]:
        return self.encoding.encode_batch(
            texts, allowed_special="all", disallowed_special=(), num_threads=self.threads
        )

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return _joined(texts, self.splitter, self._encode_flat)

    def encode(self, text: str) -> list[int]:
        pieces = self.splitter(text) if self.splitter else (text,)
        out: list[int] = []
        for piece in pieces:
            long_text.check_stop()
            out.extend(self.encoding.encode(piece, allowed_special="all", disallowed_special=()))
        return out

    def decode_batch(self, batch: list[list[int]]) -> list[str]:
        return self.encoding.decode_batch(batch, num_threads=self.threads)

    def decode(self, ids: Sequence[int]) -> str:
        return self.encoding.decode(list(ids))


class TokenizersCodec(Codec):
    """The Rust ``tokenizers`` object inside a fast ``transformers`` tokenizer, in batches."""

    def __init__(self, raw: Any, splitter: Splitter | None = None) -> None:
        self.raw = raw
        # encode_batch_fast (tokenizers >= 0.20) skips the character offsets nothing here reads.
        self._batch = getattr(raw, "encode_batch_fast", None) or raw.encode_batch
        self.name = "tokenizers " + self._batch.__name__
        self.splitter = splitter

    def _encode_flat(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self._batch(texts, add_special_tokens=False)]

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return _joined(texts, self.splitter, self._encode_flat)

    def encode(self, text: str) -> list[int]:
        if self.splitter is None or len(text) <= long_text.LONG_TEXT_CHARS:
            return self.raw.encode(text, add_special_tokens=False).ids
        return self.encode_batch([text])[0]

    def decode_batch(self, batch: list[list[int]]) -> list[str]:
        return self.raw.decode_batch(batch, skip_special_tokens=False)

    def decode(self, ids: Sequence[int]) -> str:
        return self.raw.decode(list(ids), skip_special_tokens=False)


def tiktoken_encoding_of(tokenizer: Any) -> Any:
    """The tiktoken ``Encoding`` a remote-code tokenizer class holds (Kimi's ``model``), if any."""
    tiktoken = sys.modules.get("tiktoken")
    if tiktoken is None:
        return None
    candidates = [getattr(tokenizer, "model", None), *vars(tokenizer).values()]
    return next((c for c in candidates if isinstance(c, tiktoken.Encoding)), None)


@dataclass
class Candidate:
    """A fast codec not built yet; ``slow`` ones take seconds to load (fastokens)."""

    name: str
    build: Callable[[], Codec]
    # Characters a run encodes before this one is loaded (0: built at once); about where its
    # load is won back, measured here: fastokens reads Kimi's tokenizer.json in ~2.5 s of one
    # core and encodes ~10x faster than ``tokenizers`` (~5 MB a second a core); its tiktoken
    # file loads in ~1 s, against tiktoken's ~3 MB a second.
    after_chars: int = 0

    @property
    def slow(self) -> bool:
        return self.after_chars > 0


def candidate_codecs(tokenizer: Any) -> list[Candidate]:
    """Fast codecs for ``tokenizer``, fastest first (none with ``DRAFTGEN_ENCODER=reference``)."""
    if os.environ.get(ENCODER_ENV, "auto") == "reference":
        return []
    raw = getattr(tokenizer, "_tokenizer", None)
    encoding = tiktoken_encoding_of(tokenizer)
    fastokens_here = importlib.util.find_spec("fastokens") is not None
    found: list[Candidate] = []
    if fastokens_here and raw is not None and hasattr(raw, "to_str"):

        def from_json() -> Codec:
            import fastokens

            # The directory's file when there is one (~20% quicker to load than the loaded
            # tokenizer serialised again); the check decides either way.
            path = os.path.join(str(getattr(tokenizer, "name_or_path", "")), "tokenizer.json")
            if os.path.isfile(path):
                native = fastokens.Tokenizer.from_file(path)
            else:
                native = fastokens.Tokenizer.from_json_str(raw.to_str())
            return FastokensCodec(
                native, "fastokens", long_text_splitter(tokenizer), byte_table_of(raw)
            )

        found.append(Candidate("fastokens", from_json, after_chars=12_000_000))
    if encoding is not None:
        vocab_file = getattr(tokenizer, "vocab_file", None)
        if fastokens_here and vocab_file and os.path.isfile(vocab_file):
            for splitter in (kimi_pieces, None):
                name = "fastokens (tiktoken file" + (", cut as Kimi's)" if splitter else ")")

                def from_tiktoken(name: str = name, splitter: Splitter | None = splitter) -> Codec:
                    import fastokens

                    native = fastokens.Tokenizer.from_tiktoken(
                        str(vocab_file),
                        pattern=encoding._pat_str,
                        special_tokens=dict(encoding._special_tokens),
                    )
                    return FastokensCodec(native, name, splitter, tiktoken_byte_table(encoding))

                found.append(Candidate(name, from_tiktoken, after_chars=3_000_000))
        for splitter in (kimi_pieces, None):
            codec = TiktokenCodec(encoding, splitter)
            found.append(Candidate(codec.name, lambda codec=codec: codec))
    if raw is not None and hasattr(raw, "encode_batch"):
        codec = TokenizersCodec(raw, long_text_splitter(tokenizer))
        found.append(Candidate(codec.name, lambda codec=codec: codec))
    return found


def long_text_splitter(tokenizer: Any) -> Splitter:
    """Cuts a text longer than ``long_text.LONG_TEXT_CHARS`` where its ids cannot change."""
    return functools.partial(long_text.pieces, tokenizer)


def _short(exc: BaseException) -> str:
    text = (str(exc).strip().splitlines() or [""])[0][:160]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# -- the differential check ----------------------------------------------------------------------


def adversarial_texts(tokenizer: Any) -> list[str]:
    """Texts where encoders part ways: long runs, scripts, emoji, specials, normal forms and
    escapes."""
    specials = _named_first(_special_spellings(tokenizer))
    named = specials[:64]
    words = "".join(f"abcdefgh{i % 10}," for i in range(3000))  # no whitespace, ~33k characters
    texts = [
        "",
        " ",
        "\n",
        "Hello world",
        " leading space",
        "trailing spaces   ",
        "  \n\n  \t mixed\r\n whitespace \u00a0\u2009\u3000 kinds \u200b\ufeff\n",
        " " * 30_000,
        "\n" * 30_001 + "x",
        "x" + " " * 25_003 + "y" + "\t\n" * 13_000,
        words,
        "a" * 26_000,
        "你好，世界。这是一个测试：分词器必须给出完全相同的编号。"
        "これは日本語のテキストです。한국어 텍스트도 있습니다.",
        "👩‍👩‍👧‍👦 family 🏳️‍🌈 flag 👍🏽 thumbs 😀😃😄 🇺🇳 ❤️ ✈︎ #️⃣ 🧑🏿‍🚀",
        "caf\u00e9 cafe\u0301 \u00c5ngstr\u00f6m A\u030angstro\u0308m "
        "\u1100\u1161\u11a8 \uac01 \ufb01 \u2126",
        unicodedata.normalize(
            "NFD", "Ťhé qüíck bröwn fóx jümps övér thé lázy dög: Ελληνικά, Русский"
        ),
        '{"emoji": "\\ud83d\\ude00", "lone": "\\ud83d", "low": "\\udc00", "bmp": "\\u00e9"}',
        "a lone-surrogate escape \\ud83d in text, and \\uDFFF, \\\\ud800 and \\u0000 too",
        "\x00\x01\x02\x1b[31mred\x1b[0m\x7f\u2028\u2029 \U0001d54f\U0001f9ea \u202eRTL\u202c",
        "مرحبا بالعالم — שלום עולם — नमस्ते दुनिया — สวัสดีชาวโลก",
        "12345678901234567890 3.14159 -42 0x1F 1e-9 ٣٤٥ ①②③",
        "def f(x):\n\treturn x ** 2  # comment\n\n\n    if x:\n        pass\n",
        "'s 't 're 've 'm 'll 'd 'S 'LL don't I'M",
    ]
    if named:
        texts += [
            "".join(named),
            " ".join(named),
            "\n".join(f" {s} " for s in named),
            "".join(f"x{s}y" for s in named),
            "".join(f"\n\n{s}\n\n" for s in named),
            "".join(f"{s[:-1]} {s[1:]} {s[: len(s) // 2]}" for s in named),
        ]
        first = named[0]
        texts.append(f"answer{first}{first}  {first}\t{first}\n")
    if len(specials) > len(named):  # placeholders: a spread of them (Kimi has ~12,000)
        rest = specials[len(named) :]
        texts.append(" ".join(rest[:: max(1, len(rest) // 64)]))
    # Longer than tiktoken is given at once by Moonshot's encode, the cut inside a word.
    texts.append("lorem ipsum dolor sit amet, " * 14_286)
    return texts


def _named_first(spellings: set[str]) -> list[str]:
    """Special-token spellings, those with a name first (reserved placeholders last)."""

    def placeholder(text: str) -> bool:
        return "reserved" in text or "place" in text or any(c.isdigit() for c in text)

    return sorted(spellings, key=lambda text: (placeholder(text), len(text), text))


def _special_spellings(tokenizer: Any) -> set[str]:
    spellings = {str(t) for t in (getattr(tokenizer, "added_tokens_decoder", {}) or {}).values()}
    encoding = tiktoken_encoding_of(tokenizer)
    if encoding is not None:
        spellings.update(getattr(encoding, "_special_tokens", {}) or {})
    return {s for s in spellings if s}


def _decode_probes(ids_lists: list[list[int]]) -> list[list[int]]:
    """Ids to decode: each text's, and cuts through multi-byte characters and specials."""
    probes = [list(ids) for ids in ids_lists]
    for ids in ids_lists:
        if 2 < len(ids) <= 400:
            probes += [ids[k:] for k in range(1, 4)] + [ids[:-k] for k in range(1, 4)]
    return probes


def first_difference(codec: Codec, tokenizer: Any, texts: list[str], expected: dict) -> str | None:
    """Where ``codec`` departs from the reference on ``texts`` (None: nowhere)."""
    try:
        batch = codec.encode_batch(texts)
        single = [codec.encode(text) for text in texts]
    except Exception as exc:
        return f"raised {_short(exc)}"
    for text, ids, one in zip(texts, batch, single, strict=True):
        reference = expected["ids"][text]
        for got in (ids, one):
            if list(got) != reference:
                return f"other ids for {_excerpt(text)} ({_id_difference(got, reference)})"
    probes = expected["probes"]
    try:
        decoded = codec.decode_batch(probes)
        single_decoded = [codec.decode(ids) for ids in probes]
    except Exception as exc:
        return f"raised on decode {_short(exc)}"
    for ids, text, one, reference in zip(
        probes, decoded, single_decoded, expected["decoded"], strict=True
    ):
        if text != reference or one != reference:
            return f"another text for ids {ids[:8]}...: {_excerpt(text)} vs {_excerpt(reference)}"
    return None


def _excerpt(text: str) -> str:
    return repr(text[:40] + ("..." if len(text) > 40 else "")) + (
        f" ({len(text)} characters)" if len(text) > 40 else ""
    )


def _id_difference(got: Sequence[int], reference: list[int]) -> str:
    for index, (a, b) in enumerate(zip(got, reference, strict=False)):
        if a != b:
            return f"token {index}: {a} vs {b}"
    return f"{len(got)} ids vs {len(reference)}"


def expected_results(
    tokenizer: Any, sample: list[str], adversarial: dict[str, list[int]] | None = None
) -> dict:
    """The reference's ids and texts for ``sample`` + the adversarial texts (a text the
    tokenizer itself cannot take proves nothing either way and is left out); ``adversarial``:
    the reference's ids of those, worked out before (``reference_ids``)."""
    if adversarial is None:
        adversarial = reference_ids(tokenizer, adversarial_texts(tokenizer))
    ids = reference_ids(tokenizer, [t for t in dict.fromkeys(sample) if t not in adversarial])
    ids.update(adversarial)
    probes = _decode_probes(list(ids.values()))
    decoded = [reference_decode(tokenizer, p) for p in probes]
    return {"ids": ids, "probes": probes, "decoded": decoded, "sample": len(sample)}


def reference_ids(tokenizer: Any, texts: list[str]) -> dict[str, list[int]]:
    """The reference's ids of each text it can take."""
    ids: dict[str, list[int]] = {}
    for text in dict.fromkeys(texts):
        long_text.check_stop()
        try:
            ids[text] = reference_encode(tokenizer, text)
        except Exception:
            continue
    return ids


# -- special tokens as cuts ----------------------------------------------------------------------

_SPECIAL_PATTERNS: dict[int, tuple[Any, re.Pattern | None]] = {}
_SPLITS: dict[int, tuple[Any, bool]] = {}


def special_pattern(tokenizer: Any) -> re.Pattern | None:
    """Every added token of the tokenizer as one pattern that takes the longest at a place
    (cached); those that take neighbouring whitespace (``lstrip``/``rstrip``) are left out: no
    clean cut there."""
    cached = _SPECIAL_PATTERNS.get(id(tokenizer))
    if cached is not None and cached[0] is tokenizer:
        return cached[1]
    decoder = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    texts = {
        str(token)
        for token in decoder.values()
        if str(token)
        and not getattr(token, "lstrip", False)
        and not getattr(token, "rstrip", False)
    }
    pattern = re.compile(trie_pattern(texts)) if texts else None
    _SPECIAL_PATTERNS[id(tokenizer)] = (tokenizer, pattern)
    return pattern


def trie_pattern(words: set[str]) -> str:
    """A regex matching any of ``words``, the longest where several start at one place.

    Built as a trie (shared beginnings written once), so a place is tried in the length of a
    word, not once per word: Kimi has ~12,000 added tokens, and the plain alternation of them all
    scans text ~200 times slower.
    """
    trie: dict = {}
    for word in words:
        node = trie
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}

    def build(node: dict) -> str:
        branches = [re.escape(char) + build(child) for char, child in sorted(node.items()) if char]
        if not branches:
            return ""
        body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
        # A word ending here is tried after every longer one through here (greedy ``?``).
        return f"(?:{body})?" if "" in node else body

    return build(trie)


def splits_at_specials(tokenizer: Any) -> bool:
    """Whether ids never merge across a special token: the ids of a text are the ids of its
    pieces between special tokens and of the special tokens, each encoded alone.

    Checked once per process on texts that put specials against whitespace, words and each
    other; ``reconstruct.CountFrom`` counts only the changed piece of a text when it holds.
    """
    cached = _SPLITS.get(id(tokenizer))
    if cached is not None and cached[0] is tokenizer:
        return cached[1]
    pattern = special_pattern(tokenizer)
    holds = False
    if pattern is not None:
        named = _named_first(_special_spellings(tokenizer))[:16]
        texts = [
            "reasoning, step by step.\n</think>\n\n The answer is 42.  <|im_end|>",
            " ".join(named),
            "".join(f"x{s}y" for s in named),
            "".join(f"\n\n{s}\n \t" for s in named),
            "".join(f"caf\u00e9 {s}\u65e5\u672c\U0001f600 {s}{s} " for s in named),
        ]
        holds = all(_pieces_add_up(tokenizer, pattern, text) for text in texts)
    with _LOCK:
        _SPLITS[id(tokenizer)] = (tokenizer, holds)
    return holds


def _pieces_add_up(tokenizer: Any, pattern: re.Pattern, text: str) -> bool:
    try:
        whole = reference_encode(tokenizer, text)
        pieces: list[int] = []
        position = 0
        for match in pattern.finditer(text):
            pieces += reference_encode(tokenizer, text[position : match.start()])
            pieces += reference_encode(tokenizer, match.group())
            position = match.end()
        pieces += reference_encode(tokenizer, text[position:])
    except Exception:
        return False
    return pieces == whole


# -- the process's choice per tokenizer -----------------------------------------------------------


class EncoderChoice:
    """The codec one tokenizer encodes with in this process, and how it was proven.

    The first batch of texts proves the candidates that cost nothing to build (tiktoken inside
    the class, the tokenizer's own Rust object), fastest first, and the first identical one is
    used. fastokens takes seconds to load, which a short run would never win back: once the run
    has encoded about what wins it back (``Candidate.after_chars``), it is loaded and checked on
    the same texts in a thread of its own, and used from then on if identical.
    """

    def __init__(self, tokenizer: Any, label: str) -> None:
        self.tokenizer = tokenizer
        self.label = label
        self.codec: Codec | None = None
        self.lines: list[str] = []
        self.expected: dict | None = None
        self.slow: list[Candidate] = []
        self.chars = 0
        self.upgrade: threading.Thread | None = None
        self.prepared: Preparation | None = None

    def prove(self, sample: list[str], prepared: Preparation | None = None) -> None:
        self.prepared = prepared
        known = prepared.adversarial if prepared is not None else None
        self.expected = expected_results(self.tokenizer, sample, known)
        rejected: list[str] = []
        tried: set[str] = set()
        candidates = candidate_codecs(self.tokenizer)
        for position, candidate in enumerate(candidates):
            if candidate.slow and not (prepared and candidate.name in prepared.built):
                continue
            codec, why = self._try(candidate)
            if codec is not None:
                self.codec = codec
                # Only the slow candidates preferred to it, and not tried yet, are worth
                # loading later.
                self.slow = [c for c in candidates[:position] if c.slow and c.name not in tried]
                break
            rejected.append(why)
            tried.add(candidate.name)
        else:
            self.slow = [c for c in candidates if c.slow and c.name not in tried]
        self._say(rejected, self.codec)

    def _try(self, candidate: Candidate) -> tuple[Codec | None, str]:
        try:
            built = self.prepared.built.get(candidate.name) if self.prepared else None
            codec = built or candidate.build()
        except Exception as exc:  # fastokens does not implement every component
            return None, f"{candidate.name} cannot load this tokenizer ({_short(exc)})"
        assert self.expected is not None
        difference = first_difference(
            codec, self.tokenizer, list(self.expected["ids"]), self.expected
        )
        if difference is not None:
            return None, f"{candidate.name} differs from the tokenizer's own code: {difference}"
        return codec, ""

    def _say(self, rejected: list[str], codec: Codec | None) -> None:
        assert self.expected is not None
        where = f"tokenizer {self.label}" if self.label else "tokenizer"
        tried = f"{len(self.expected['ids'])} texts, {self.expected['sample']} of them this run's"
        if codec is None:
            reasons = "; ".join(rejected) or "no fast encoder for it"
            line = f"{where}: {reasons}; this run encodes with the tokenizer's own code"
        else:
            line = "; ".join(
                [
                    *rejected,
                    f"{where}: encoding with {codec.name}, identical to the tokenizer's "
                    f"own encode and decode on {tried}",
                ]
            )
        self.lines.append(line)
        (_log.warning if rejected else _log.info)(line)

    def encoded(self, chars: int) -> None:
        """Count what went through batch calls; start loading fastokens once it pays."""
        self.chars += chars
        if self.slow and self.upgrade is None and self.chars >= self.slow[0].after_chars:
            self.start_upgrade()

    def start_upgrade(self) -> threading.Thread | None:
        with _LOCK:
            if self.upgrade is None and self.slow:
                # Not a daemon: one ended at exit while fastokens loads aborts the process
                # ("exception not rethrown", unwinding through Rust); exit waits for the load.
                self.upgrade = threading.Thread(target=self._upgrade, name="draftgen-fastokens")
                self.upgrade.start()
        return self.upgrade

    def _upgrade(self) -> None:
        rejected = []
        for candidate in self.slow:
            codec, why = self._try(candidate)
            if codec is not None:
                self.codec = codec
                self._say(rejected, codec)
                return
            rejected.append(why)
        if rejected:
            kept = self.codec.name if self.codec else "the tokenizer's own code"
            line = f"tokenizer {self.label}: {'; '.join(rejected)}; encoding stays with {kept}"
            self.lines.append(line)
            _log.warning(line)


class Preparation:
    """What a run that expects much text does while it waits for its first answers: load the
    slow candidates it would load later anyway (fastokens) and work out the reference's ids of
    the adversarial texts, in a thread of its own.

    Nothing here is trusted: the first batch's proof checks every candidate, these included,
    on the run's own texts too. A streaming run whose answers all end together otherwise loads
    fastokens after its last answer, or encodes everything with the slower codec.
    """

    def __init__(self, tokenizer: Any, slow: list[Candidate]) -> None:
        self.tokenizer = tokenizer
        self.slow = slow
        self.built: dict[str, Codec] = {}
        self.adversarial: dict[str, list[int]] | None = None
        # Not a daemon, as the upgrade: exit waits for a fastokens load instead of aborting it.
        self.thread = threading.Thread(target=self._run, name="draftgen-encoder-prepare")
        self.thread.start()

    def _run(self) -> None:
        self.adversarial = reference_ids(self.tokenizer, adversarial_texts(self.tokenizer))
        for candidate in self.slow:
            try:
                self.built[candidate.name] = candidate.build()
            except Exception:  # the proof tries it again and says why
                continue


_PREPARED: dict[int, Preparation] = {}


def expect(tokenizer: Any, chars: int) -> None:
    """Tell the encoder a run will encode about ``chars`` characters: when that pays for a
    slow candidate's load, prepare it now (``Preparation``), before the first batch."""
    with _LOCK:
        if choice_of(tokenizer) is not None or id(tokenizer) in _PREPARED:
            return
        slow = [c for c in candidate_codecs(tokenizer) if c.slow and c.after_chars <= chars]
        if slow:
            _PREPARED[id(tokenizer)] = Preparation(tokenizer, slow)


def _prepared(tokenizer: Any) -> Preparation | None:
    prepared = _PREPARED.get(id(tokenizer))
    return prepared if prepared is not None and prepared.tokenizer is tokenizer else None


ENCODER_ENV = "DRAFTGEN_ENCODER"

_LOCK = threading.RLock()
_CHOICES: dict[int, EncoderChoice] = {}


def choice_of(tokenizer: Any) -> EncoderChoice | None:
    choice = _CHOICES.get(id(tokenizer))
    return choice if choice is not None and choice.tokenizer is tokenizer else None


def proven_codec(tokenizer: Any) -> Codec | None:
    """The codec proven for ``tokenizer`` in this process (None: unproven or none agreed)."""
    choice = choice_of(tokenizer)
    return choice.codec if choice is not None else None


def prove(
    tokenizer: Any, sample: Sequence[str] = (), label: str = "", upgrade: bool = False
) -> EncoderChoice:
    """Check the fast codecs against ``tokenizer``'s own code, once per process and tokenizer.

    ``sample`` is texts of the run (a few are taken, spread over it); the adversarial set is
    added. The verdict is logged as one line, a warning when a codec differed. With
    ``upgrade``, fastokens is loaded and checked now (before returning) instead of when the
    run has encoded enough to pay for it.
    """
    with _LOCK:
        choice = choice_of(tokenizer)
        if choice is None:
            choice = EncoderChoice(tokenizer, label or _label(tokenizer))
            # A long text's beginning: its whole, encoded by the tokenizer's own code at once,
            # cost a 15 MB answer 28 s and 2.8 GB, none of it interruptible.
            texts = list(dict.fromkeys(text[: long_text.LONG_TEXT_CHARS] for text in sample))
            step = max(1, len(texts) // SAMPLE_TEXTS)
            prepared = _prepared(tokenizer)
            if prepared is not None:
                prepared.thread.join()
            choice.prove(texts[::step][:SAMPLE_TEXTS], prepared)
            _CHOICES[id(tokenizer)] = choice
    if upgrade:
        thread = choice.start_upgrade()
        if thread is not None:
            thread.join()
    return choice


def forget(tokenizer: Any) -> None:
    """Drop the choice for ``tokenizer``, so the next batch proves again (tests)."""
    with _LOCK:
        _CHOICES.pop(id(tokenizer), None)
        prepared = _PREPARED.pop(id(tokenizer), None)
    if prepared is not None:
        prepared.thread.join()


def _label(tokenizer: Any) -> str:
    return (
        os.path.basename(str(getattr(tokenizer, "name_or_path", "") or ""))
        or type(tokenizer).__name__
    )


def codec_for(tokenizer: Any) -> Codec:
    """The proven codec for ``tokenizer``, else its own code."""
    return proven_codec(tokenizer) or ReferenceCodec(tokenizer)

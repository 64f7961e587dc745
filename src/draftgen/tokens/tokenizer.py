"""Loading the target's tokenizer and rendering prompts through its own chat template.

``fixture:NAME`` names an offline test tokenizer, built by the package that provides it
(``draftgen.tokens.sources``); anything else is a local directory or hub id for ``transformers``
(``trust_remote_code`` on, as Kimi needs).
"""

from __future__ import annotations

import functools
import os
import re
import weakref
from typing import Any

from draftgen.collector import not_collecting
from draftgen.errors import DraftgenError
from draftgen.tokens import fast_encoder
from draftgen.tokens.mistral import load_mistral_tokenizer, mistral_tokenizer_file
from draftgen.tokens.sources import sourced_directory
from draftgen.tokens.tokenizer_cache import cached_load

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")


class TokenizerLoadError(DraftgenError, RuntimeError):
    pass


@functools.lru_cache(maxsize=8)
def load_tokenizer(spec: str) -> Any:
    """Return a ``transformers`` tokenizer for ``spec`` (cached per process)."""
    import transformers

    from draftgen.logs import adopt_third_party

    transformers.logging.set_verbosity_error()
    adopt_third_party()  # huggingface_hub's own handler, added on import, would print raw lines
    directory = _checked_directory(spec)
    if directory is not None and mistral_tokenizer_file(directory) is not None:
        # vLLM serves a directory holding tekken.json or tokenizer.model.v* with mistral-common
        # (tokenizer_mode "auto" picks it: vllm/tokenizers/registry.py), which also renders the
        # prompt (draftgen.tokens.mistral): no chat template is needed or read.
        return _load_mistral(spec, directory)
    tokenizer = _load_transformers(spec, directory, transformers)
    if not getattr(tokenizer, "chat_template", None) and not _has_own_chat_encoding(tokenizer):
        raise TokenizerLoadError(
            f"tokenizer {spec!r} has no chat template: prompt ids must come from the target's own "
            "template, so use a tokenizer directory whose tokenizer_config.json has chat_template "
            "(or the model's encoding/encoding_*.py chat encoder beside it)"
        )
    return tokenizer


def _checked_directory(spec: str) -> str | None:
    """The local directory ``spec`` names, or None for what may be a hub id; a path that is no
    directory, or a value that cannot be a hub id, is refused here."""
    directory = tokenizer_directory(spec)
    if directory is None and (
        spec.startswith(("/", ".", "~")) or spec.count("/") > 1 or os.path.exists(spec)
    ):
        # A path, not a hub id (ORG/NAME): say so instead of the hub's complaint about its form.
        raise TokenizerLoadError(
            f"tokenizer {spec!r} is not a directory; pass the directory holding the target's "
            "tokenizer_config.json, a hub id (ORG/NAME), or fixture:NAME"
        )
    if directory is None:
        refuse_opaque(spec)
    return directory


def _load_mistral(spec: str, directory: str) -> Any:
    """The mistral-common tokenizer of ``directory``; its failures as one sentence."""
    try:
        return load_mistral_tokenizer(directory)
    except Exception as exc:  # mistral-common raises asserts and its own errors
        first_line = (str(exc).strip().splitlines() or [""])[0]
        raise TokenizerLoadError(
            f"cannot load the mistral-common tokenizer of {spec!r} "
            f"({exc.__class__.__name__}: {first_line})"
        ) from exc


def _load_transformers(spec: str, directory: str | None, transformers: Any) -> Any:
    """The ``transformers`` tokenizer of ``directory`` (kept for the next process), or of hub id
    ``spec`` when there is none; any failure as one sentence saying what to pass instead."""

    def load() -> Any:
        if directory is None:
            return _load_from_hub(spec, transformers)
        return transformers.AutoTokenizer.from_pretrained(directory, trust_remote_code=True)

    try:
        # Millions of short-lived objects (tokenizer.json read whole): collecting them as they
        # age would cost a tenth of a second and find nothing.
        with not_collecting():
            # A local directory's tokenizer is kept for the next process (``tokenizer_cache``).
            return load() if directory is None else cached_load(directory, load)
    except TokenizerLoadError:
        raise
    except Exception as exc:  # transformers raises many types; the user needs one sentence
        if _is_removed_bytes_to_unicode(exc):
            raise TokenizerLoadError(
                f"cannot load tokenizer {spec!r}: its remote code imports bytes_to_unicode from "
                f"transformers.models.gpt2.tokenization_gpt2, which transformers "
                f"{transformers.__version__} no longer has; update the model's tokenizer files as "
                "Moonshot did upstream (import bytes_to_unicode from "
                "transformers.convert_slow_tokenizer), or install transformers<5"
            ) from exc
        first_line = (str(exc).strip().splitlines() or [""])[0]
        raise TokenizerLoadError(
            f"cannot load tokenizer {spec!r} ({exc.__class__.__name__}: {first_line}); pass a "
            "local tokenizer directory, a hub id reachable from this machine, or fixture:NAME"
        ) from exc


# How long the one request that tells whether the hub answers may take; a hub id is then loaded
# with huggingface_hub's retries only when it does (they take 48 s to give up on a network that
# is not there), and from the local cache alone when it does not.
HUB_PROBE_SECONDS = 5.0
OFFLINE_HINT = "pass a local directory (a downloaded model folder) with --tokenizer"
# A hub id is ORG/NAME (or a legacy NAME, short); no part is longer than 96 characters.
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]{0,95}(/[\w.-]{1,96})?")
LEGACY_NAME_CHARS = 32


def refuse_opaque(spec: str) -> None:
    """TokenizerLoadError, naming ``spec`` by its length only, when it cannot be a hub id and may
    be a key (key-shaped, or a long value with no ORG/): it is neither sent to the hub nor shown."""
    from draftgen.redact import redact

    if redact(spec) != spec or ("/" not in spec and len(spec) >= LEGACY_NAME_CHARS):
        raise TokenizerLoadError(
            f"the tokenizer given is a {len(spec)}-character value that is no directory, hub id "
            "or fixture and may be a key (not shown, not sent to the hub); pass a local "
            "directory (a downloaded model folder), a hub id (ORG/NAME) or fixture:NAME"
        )
    if not _HUB_ID.fullmatch(spec):
        raise TokenizerLoadError(
            f"tokenizer {spec!r} is neither a directory nor a hub id (ORG/NAME); pass a local "
            "directory (a downloaded model folder), a hub id or fixture:NAME"
        )


def _load_from_hub(spec: str, transformers) -> Any:
    """The tokenizer of hub id ``spec``: downloaded (or revalidated) when the hub answers, else
    from the local Hugging Face cache, else one sentence saying what to pass instead."""
    from huggingface_hub import constants

    def load(**kwargs) -> Any:
        return transformers.AutoTokenizer.from_pretrained(spec, trust_remote_code=True, **kwargs)

    offline = constants.HF_HUB_OFFLINE
    if not offline and _hub_answers(constants.ENDPOINT):
        return load()
    try:
        return load(local_files_only=True)
    except OSError:  # transformers' "couldn't find them in the cached files"
        why = (
            "HF_HUB_OFFLINE is set"
            if offline
            else f"the hub ({constants.ENDPOINT}) cannot be reached from this machine"
        )
        raise TokenizerLoadError(
            f"cannot load tokenizer {spec!r}: {why} and it is not in the local Hugging Face "
            f"cache; {OFFLINE_HINT}"
        ) from None


def _hub_answers(endpoint: str) -> bool:
    """Whether ``endpoint`` answers one request at all (any status) within HUB_PROBE_SECONDS."""
    from huggingface_hub.utils import get_session

    try:
        get_session().head(endpoint, timeout=HUB_PROBE_SECONDS)
    except Exception:  # httpx2's connect, timeout and proxy errors: the hub is out of reach
        return False
    return True


def tokenizer_directory(spec: str) -> str | None:
    """The local directory ``spec`` names (a fixture's, or another source's, is built first); None
    for a hub id or anything that is not a directory."""
    try:
        sourced = sourced_directory(spec)
    except ValueError as exc:  # an unknown name (the message lists the fixtures) or no source
        raise TokenizerLoadError(str(exc)) from None
    if sourced is not None:
        return sourced
    return spec if os.path.isdir(spec) else None


def _is_removed_bytes_to_unicode(exc: BaseException) -> bool:
    """Whether loading failed on the import transformers 5 removed, which older copies of Kimi's
    ``tokenization_kimi.py`` make (transformers issue #43726)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ImportError) and "bytes_to_unicode" in str(current):
            return True
        current = current.__cause__ or current.__context__
    return False


# Where a model repository keeps a Python chat encoder instead of a Jinja template
# (DeepSeek-V3.2: encoding/encoding_dsv32.py; DeepSeek-V4: encoding/encoding_dsv4.py;
# DeepSeek-V4.1: encoding/encoding.py).
ENCODER_GLOB = "encoding/encoding*.py"


def encoder_path(directory: str | os.PathLike) -> Any:
    """The Python chat encoder a model directory ships, if any (the first by name)."""
    from pathlib import Path

    found = sorted(Path(directory).glob(ENCODER_GLOB))
    return found[0] if found else None


def tokenizer_encodes_chat(tokenizer: Any) -> bool:
    """Whether the tokenizer's class brings its own ``apply_chat_template`` (Kimi's do)."""
    from transformers import PreTrainedTokenizerBase

    own = getattr(type(tokenizer), "apply_chat_template", None)
    return own is not None and own is not PreTrainedTokenizerBase.apply_chat_template


def _has_own_chat_encoding(tokenizer: Any) -> bool:
    """A Python chat encoder in the directory, or a class that encodes chat itself."""
    directory = getattr(tokenizer, "name_or_path", "") or ""
    if directory and os.path.isdir(directory) and encoder_path(directory) is not None:
        return True
    return tokenizer_encodes_chat(tokenizer)


def full_vocab(tokenizer: Any) -> dict[str, int]:
    """The vocabulary including added special tokens; shared, never to be changed by a caller.

    transformers builds a new dict of every token on each ``get_vocab`` (0.1-0.3 s for 150k
    tokens), and a profile is resolved per prompt rendered apart: one copy per tokenizer object,
    made again if tokens were added to it since."""
    added = len(getattr(tokenizer, "added_tokens_decoder", ()))
    try:
        cached = _VOCABS.get(tokenizer)
    except TypeError:  # an object that cannot be weakly referenced: not kept
        return tokenizer.get_vocab()
    if cached is None or cached[0] != added:
        cached = _VOCABS[tokenizer] = (added, tokenizer.get_vocab())
    return cached[1]


_VOCABS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def encode(tokenizer: Any, text: str) -> list[int]:
    """Ids of ``text`` as servers tokenize a rendered template: specials as text, no BOS added.

    The tokenizer's own ``encode(text, add_special_tokens=False)`` decides; a faster encoder
    gives them once ``draftgen.tokens.fast_encoder.prove`` found it identical for this tokenizer.
    """
    if isinstance(tokenizer, EncoderView):
        return tokenizer.encode_text(text)
    return fast_encoder.codec_for(tokenizer).encode(text)


def decode(tokenizer: Any, ids: list[int]) -> str:
    """The text of ``ids``, special tokens spelled out, as the tokenizer's own decode gives it."""
    if isinstance(tokenizer, EncoderView):
        return tokenizer.decode_ids(ids)
    return fast_encoder.codec_for(tokenizer).decode(ids)


def count(tokenizer: Any, text: str) -> int:
    """``len(encode(tokenizer, text))``, without copying ids a batch already holds."""
    if isinstance(tokenizer, EncoderView):
        return tokenizer.count_text(text)
    return len(fast_encoder.codec_for(tokenizer).encode(text))


def encode_batch(tokenizer: Any, texts: list[str]) -> list[list[int]]:
    """``encode`` of every text, on every core where a fast encoder is proven.

    The first batch of a process for a tokenizer proves one (``fast_encoder.prove``) with its
    texts as the sample. A batch the fast encoder refuses (text it cannot take) goes text by
    text through the tokenizer's own code, which raises as it always did.
    """
    if isinstance(tokenizer, EncoderView):
        return [tokenizer.encode_text(text) for text in texts]
    if not texts:
        return []
    choice = fast_encoder.prove(tokenizer, texts)
    choice.encoded(sum(map(len, texts)))
    codec = fast_encoder.codec_for(tokenizer)
    try:
        return codec.encode_batch(texts)
    except Exception:
        return [fast_encoder.reference_encode(tokenizer, text) for text in texts]


def decode_batch(tokenizer: Any, batch: list[list[int]]) -> list[str]:
    if isinstance(tokenizer, EncoderView):
        return [tokenizer.decode_ids(ids) for ids in batch]
    return fast_encoder.codec_for(tokenizer).decode_batch(batch)


class EncoderView:
    """A stand-in for a tokenizer that answers ``encode``/``decode`` itself (a batch's results).

    ``memo`` keeps what a batch worked out once for a later step of the same batch.
    """

    memo: dict

    def encode_text(self, text: str) -> list[int]:
        raise NotImplementedError

    def count_text(self, text: str) -> int:
        return len(self.encode_text(text))

    def decode_ids(self, ids: list[int]) -> str:
        raise NotImplementedError


# Files of a tokenizer directory that decide ids or the chat format (weights and configs of
# the model itself are not read).
_IDENTITY_PATTERNS = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template.jinja",
    "chat_template.json",
    "vocab.json",
    "merges.txt",
    "*.tiktoken",
    "*.model",
    "tiktoken.model",
    "tekken.json",  # mistral-common's tokenizers (draftgen.tokens.mistral)
    "tokenizer.model.v*",
    "tokenization_*.py",
    "tool_declaration*.py",
    "encoding/*.py",
    "encoding_*.py",  # Kimi K3's chat segments, imported by its tokenizer class
)


@functools.lru_cache(maxsize=8)
def tokenizer_digest(spec: str) -> str:
    """A digest of what decides a run's ids: the tokenizer's files and chat template (or encoder).

    A local directory (a fixture's too) is hashed file by file; a hub id by what the loaded
    tokenizer holds (class, vocabulary, added tokens, chat template).
    """
    import hashlib

    digest = hashlib.sha256()
    tokenizer = load_tokenizer(spec)
    directory = getattr(tokenizer, "name_or_path", "") or ""
    if os.path.isdir(directory):
        from pathlib import Path

        root = Path(directory)
        files = sorted({p for pattern in _IDENTITY_PATTERNS for p in root.glob(pattern)})
        for path in files:
            if path.is_file():
                digest.update(str(path.relative_to(root)).encode() + b"\0")
                digest.update(path.read_bytes() + b"\0")
        return digest.hexdigest()
    import orjson

    added = {i: str(t) for i, t in (getattr(tokenizer, "added_tokens_decoder", {}) or {}).items()}
    digest.update(type(tokenizer).__name__.encode())
    digest.update(orjson.dumps(sorted(full_vocab(tokenizer).items())))
    digest.update(orjson.dumps(sorted(added.items())))
    digest.update(orjson.dumps(getattr(tokenizer, "chat_template", None)))
    return digest.hexdigest()


@functools.cache
def byte_decoder() -> dict[str, int]:
    """Inverse of GPT-2's ``bytes_to_unicode``: the byte of each character of a byte-level BPE
    vocabulary's token strings."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    return {char: byte for byte, char in bytes_to_unicode().items()}

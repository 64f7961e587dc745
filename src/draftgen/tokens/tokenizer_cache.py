"""Loaded tokenizers kept on disk between processes, pickled.

``transformers``' ``from_pretrained`` spends most of a second of Python on a big tokenizer (the
Kimi fixture: 1.0 s; it reads tokenizer.json in Python, deep-copies the added tokens, builds the
Rust tokenizer), and every draftgen process loads it: a run, its reconstruction process, each
export and resume. Unpickling the object it built takes a third of that (0.38 s), and it is the
same object: its class, its Rust tokenizer (pickled as its own JSON), its template, its added
tokens. The tokenizer stays the judge of every id; this only skips building it again.

An entry is keyed by the directory's path (as given, and real), every file under it (relative
path, size, modification time), the Python, ``transformers``, ``tokenizers`` and ``tiktoken``
versions: any change loads afresh and replaces the entry. Only local directories are kept (a
fixture, a model directory); a hub id loads as before. Anything wrong with an entry (unreadable,
from another key, failing to unpickle) also loads afresh. ``DRAFTGEN_TOKENIZER_CACHE=off`` turns
the cache off. The entries are the user's own files under ``$DRAFTGEN_CACHE``
(``~/.cache/draftgen``), as trusted as the tokenizer's own code, which ``trust_remote_code`` runs
anyway.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import logging
import os
import pickle
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

_log = logging.getLogger("draftgen.tokenizer")

CACHE_ENV = "DRAFTGEN_TOKENIZER_CACHE"
FORMAT = b"draftgen-tokenizer-cache 1"
# Packages whose version changes what a pickled tokenizer is or how it loads.
PACKAGES = ("transformers", "tokenizers", "tiktoken")
# A directory with more files than this is not a tokenizer's (or a model's): not kept.
MAX_FILES = 2000


def cache_root() -> Path:
    """``$DRAFTGEN_CACHE`` or ``~/.cache/draftgen``: draftgen's own files (fixtures, tokenizers)."""
    base = os.environ.get("DRAFTGEN_CACHE")
    return Path(base) if base else Path.home() / ".cache" / "draftgen"


def cached_load(directory: str, load: Callable[[], Any]) -> Any:
    """``load()`` (a tokenizer from ``directory``), or the object it returned last time when
    nothing it depends on has changed since."""
    if os.environ.get(CACHE_ENV, "on") == "off":
        return load()
    try:
        key = directory_key(directory)
    except OSError:
        return load()
    entry = cache_root() / "tokenizers" / f"{_hash(os.path.realpath(directory))}.pickle"
    header = FORMAT + b" " + key + b"\n"
    tokenizer = _read(entry, header)
    if tokenizer is not None and _same_remote_code(tokenizer, directory):
        return tokenizer
    tokenizer = load()
    _write(entry, header, tokenizer)
    return tokenizer


def directory_key(directory: str) -> bytes:
    """What a tokenizer loaded from ``directory`` depends on, hashed (hex). The path as given
    is part of it: the tokenizer keeps it (``name_or_path``, which draftgen reads its files by),
    so another spelling of the same directory loads afresh."""
    versions = [f"{p}={_version(p)}" for p in PACKAGES]
    parts = [sys.version, *versions, directory, os.path.realpath(directory)]
    for root, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))  # .git, .cache: not read
        if len(parts) + len(files) > MAX_FILES:
            raise OSError(f"{directory} holds more than {MAX_FILES} files")
        for name in sorted(files):
            path = os.path.join(root, name)
            info = os.stat(path)  # through a symlink (a hub snapshot's files are links)
            relative = os.path.relpath(path, directory)
            parts.append(f"{relative}\0{info.st_size}\0{info.st_mtime_ns}")
    return _hash("\n".join(parts)).encode()


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "-"


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _read(entry: Path, header: bytes) -> Any:
    try:
        data = entry.read_bytes()
    except OSError:
        return None
    if not data.startswith(header):
        return None  # another key: the directory or a package changed
    try:
        # A remote-code class lives in transformers' modules directory, which a new process
        # puts on sys.path only when it loads remote code itself.
        from transformers.dynamic_module_utils import init_hf_modules

        init_hf_modules()
        return pickle.loads(memoryview(data)[len(header) :])
    except Exception as exc:  # noqa: BLE001 - any bad entry is loaded afresh and replaced
        _log.debug("tokenizer cache entry %s not used: %s", entry, exc)
        return None


def _same_remote_code(tokenizer: Any, directory: str) -> bool:
    """Whether an unpickled remote-code class is the directory's own code: ``transformers``
    copies it into its modules directory, under the directory's name (and, in recent releases,
    a hash of the code), where another directory of the same name may have put other code."""
    module = sys.modules.get(type(tokenizer).__module__)
    if module is None or not module.__name__.startswith("transformers_modules."):
        return True
    try:
        copied = Path(module.__file__)
        return copied.read_bytes() == (Path(directory) / copied.name).read_bytes()
    except (OSError, TypeError):
        return False


def _write(entry: Path, header: bytes, tokenizer: Any) -> None:
    """Keep ``tokenizer`` for the next process (best effort: a failure only costs the next
    process a full load). Written beside the entry and renamed: readers see a whole file."""
    try:
        data = pickle.dumps(tokenizer, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # noqa: BLE001 - a class that cannot be pickled is not kept
        _log.debug("tokenizer %s not kept: %s", type(tokenizer).__name__, exc)
        return
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        fd, staging = tempfile.mkstemp(prefix=f".{entry.name}.", dir=entry.parent)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(header)
                out.write(data)
            os.replace(staging, entry)
        except BaseException:
            os.unlink(staging)
            raise
    except OSError as exc:
        _log.debug("tokenizer cache entry %s not written: %s", entry, exc)

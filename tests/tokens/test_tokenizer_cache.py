"""A tokenizer kept on disk is the tokenizer loaded afresh: the same ids, text, specials and
prompts; any change to its directory or a bad entry loads it afresh."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import transformers

from draftgen.reconstruct.text import renderer_for
from draftgen.tokens import tokenizer_cache
from draftgen.tokens.fast_encoder import adversarial_texts
from draftgen.tokens.rendering import resolve_profile
from draftgen.tokens.tokenizer_cache import cached_load
from draftgen_testing.fixtures import build_fixture

CONVERSATION = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Why is the sky blue? 空は なぜ 青い 🌈"},
    {"role": "assistant", "content": "Rayleigh scattering."},
    {"role": "user", "content": "  and at sunset?\n\n"},
]

SMALL = "deepseek-v3.1"  # the quickest fixture to load (0.5 s), for the cache's own workings


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """Tokenizers kept under ``tmp_path`` (the fixtures stay built where they are)."""
    monkeypatch.setattr(tokenizer_cache, "cache_root", lambda: tmp_path / "cache")
    monkeypatch.delenv(tokenizer_cache.CACHE_ENV, raising=False)
    return tmp_path / "cache" / "tokenizers"


class Loads:
    """``from_pretrained`` of one directory, counted."""

    def __init__(self, directory: Path) -> None:
        self.directory = str(directory)
        self.count = 0

    def __call__(self):
        self.count += 1
        return transformers.AutoTokenizer.from_pretrained(self.directory, trust_remote_code=True)


def behaviour(tokenizer) -> dict:
    """What draftgen reads of a tokenizer: ids and text of hard texts, its specials, prompts."""
    texts = adversarial_texts(tokenizer)
    ids = [tokenizer.encode(t, add_special_tokens=False) for t in texts]
    profile = resolve_profile(tokenizer, None)
    rendering = renderer_for(tokenizer, profile).render(CONVERSATION, None)
    return {
        "class": type(tokenizer).__name__,
        "ids": ids,
        "text": [tokenizer.decode(i) for i in ids],
        "specials": {i: str(t) for i, t in tokenizer.added_tokens_decoder.items()},
        "vocab": len(tokenizer),
        "template": tokenizer.chat_template,
        "profile": profile.name,
        "prompt": (rendering.text, rendering.ids),
    }


@pytest.mark.parametrize("name", ["kimi-k2.5", "kimi-k2.5-remote", "deepseek-v4"])
def test_a_kept_tokenizer_behaves_as_the_one_loaded_afresh(cache, name):
    load = Loads(build_fixture(name))
    fresh = cached_load(load.directory, load)
    kept = cached_load(load.directory, load)
    assert load.count == 1 and kept is not fresh
    assert len(list(cache.iterdir())) == 1
    assert behaviour(kept) == behaviour(fresh)


def test_a_new_process_takes_a_remote_code_tokenizer_from_the_cache(cache, tmp_path):
    """Kimi's class lives in transformers' modules directory, which a new process has to put on
    its path before unpickling; the second process loads nothing."""
    directory = build_fixture("kimi-k2.5-remote")  # built here: the processes only load it
    script = (
        "import transformers\n"
        "from draftgen.tokens.tokenizer import load_tokenizer\n"
        "calls = []\n"
        "real = transformers.AutoTokenizer.from_pretrained\n"
        "def counted(*a, **k):\n"
        "    calls.append(1)\n"
        "    return real(*a, **k)\n"
        "transformers.AutoTokenizer.from_pretrained = counted\n"
        f"t = load_tokenizer({str(directory)!r})\n"
        "ids = t.encode('<|im_end|> 空 🌈  x', add_special_tokens=False)\n"
        "print(type(t).__name__, len(calls), ids)\n"
    )
    env = {**os.environ, "DRAFTGEN_CACHE": str(cache.parent)}
    first, second = (
        subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
        ).stdout.split(" ", 2)
        for _ in range(2)
    )
    assert first[0] == second[0] == "TikTokenTokenizer"
    assert (first[1], second[1]) == ("1", "0")
    assert first[2] == second[2]


def test_a_changed_directory_is_loaded_afresh(cache, tmp_path):
    directory = tmp_path / "tokenizer"
    shutil.copytree(build_fixture(SMALL), directory)
    load = Loads(directory)
    cached_load(str(directory), load)
    config_path = directory / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["chat_template"] += "{# changed #}"
    config_path.write_text(json.dumps(config))
    changed = cached_load(str(directory), load)
    assert load.count == 2
    assert changed.chat_template.endswith("{# changed #}")
    assert cached_load(str(directory), load).chat_template == changed.chat_template
    assert load.count == 2  # the entry was replaced, not added beside
    assert len(list(cache.iterdir())) == 1


def test_another_spelling_of_the_directory_is_loaded_afresh(cache, tmp_path, monkeypatch):
    """The tokenizer keeps the path it was loaded from (``name_or_path``), which draftgen reads
    its files by: a kept one is used only for the same spelling."""
    directory = tmp_path / "tokenizer"
    shutil.copytree(build_fixture(SMALL), directory)
    monkeypatch.chdir(tmp_path)
    load = Loads(directory)
    assert cached_load(str(directory), load).name_or_path == str(directory)
    load.directory = "tokenizer"
    assert cached_load("tokenizer", load).name_or_path == "tokenizer"
    assert load.count == 2
    assert cached_load("tokenizer", load).name_or_path == "tokenizer"
    assert load.count == 2


def test_a_bad_entry_is_loaded_afresh_and_replaced(cache):
    load = Loads(build_fixture(SMALL))
    cached_load(load.directory, load)
    (entry,) = cache.iterdir()
    header = entry.read_bytes().split(b"\n", 1)[0] + b"\n"
    entry.write_bytes(header + b"not a pickle")
    assert cached_load(load.directory, load).encode("hi", add_special_tokens=False)
    assert load.count == 2
    assert cached_load(load.directory, load) is not None and load.count == 2


def test_the_cache_can_be_off_or_unwritable(cache, monkeypatch):
    load = Loads(build_fixture(SMALL))
    monkeypatch.setenv(tokenizer_cache.CACHE_ENV, "off")
    cached_load(load.directory, load)
    cached_load(load.directory, load)
    assert load.count == 2 and not cache.exists()
    monkeypatch.delenv(tokenizer_cache.CACHE_ENV)
    cache.parent.mkdir(parents=True)
    cache.write_text("a file where the directory goes")
    assert cached_load(load.directory, load) is not None
    assert load.count == 3


def test_remote_code_of_another_directory_is_not_taken_for_this_ones(cache, tmp_path, monkeypatch):
    """transformers copies a directory's code under the directory's name: a kept Kimi class is
    used only while that copy is the directory's own code."""
    load = Loads(build_fixture("kimi-k2.5-remote"))
    fresh = cached_load(load.directory, load)
    module_file = Path(sys.modules[type(fresh).__module__].__file__)
    assert (Path(load.directory) / module_file.name).read_bytes() == module_file.read_bytes()
    assert cached_load(load.directory, load) is not fresh and load.count == 1
    monkeypatch.setattr(Path, "read_bytes", _other_code_at(module_file))
    cached_load(load.directory, load)
    assert load.count == 2


def _other_code_at(path: Path):
    real = Path.read_bytes

    def read_bytes(self: Path) -> bytes:
        data = real(self)
        return data + b"# another directory's code\n" if self == path else data

    return read_bytes

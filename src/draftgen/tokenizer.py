"""Loading the target's tokenizer and rendering prompts through its own chat template.

``fixture:NAME`` names an offline test tokenizer built by ``draftgen.fixtures``; anything else
is a local directory or hub id for ``transformers`` (``trust_remote_code`` on, as Kimi needs).
"""

from __future__ import annotations

import functools
import os
from typing import Any

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")

FIXTURE_PREFIX = "fixture:"


class TokenizerLoadError(RuntimeError):
    pass


@functools.lru_cache(maxsize=8)
def load_tokenizer(spec: str) -> Any:
    """Return a ``transformers`` tokenizer for ``spec`` (cached per process)."""
    import transformers

    transformers.logging.set_verbosity_error()
    path = spec
    if spec.startswith(FIXTURE_PREFIX):
        from draftgen.fixtures import build_fixture

        path = str(build_fixture(spec[len(FIXTURE_PREFIX) :]))
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(path, trust_remote_code=True)
    except Exception as exc:  # transformers raises many types; the user needs one sentence
        raise TokenizerLoadError(
            f"cannot load tokenizer {spec!r} ({exc.__class__.__name__}: {exc}); pass a local "
            "tokenizer directory, a hub id reachable from this machine, or fixture:NAME"
        ) from exc
    if not getattr(tokenizer, "chat_template", None):
        raise TokenizerLoadError(
            f"tokenizer {spec!r} has no chat template: prompt ids must come from the target's own "
            "template, so use a tokenizer directory whose tokenizer_config.json has chat_template"
        )
    return tokenizer


def full_vocab(tokenizer: Any) -> dict[str, int]:
    """The vocabulary including added special tokens."""
    return tokenizer.get_vocab()


def render_prompt(tokenizer: Any, messages: list[dict], tools: list[dict] | None) -> str:
    """The prompt text exactly as an inference server renders it for these messages."""
    kwargs: dict[str, Any] = {"tokenize": False, "add_generation_prompt": True}
    if tools:
        kwargs["tools"] = tools
    return tokenizer.apply_chat_template(messages, **kwargs)


def encode(tokenizer: Any, text: str) -> list[int]:
    """Ids of ``text`` as servers tokenize a rendered template: specials as text, no BOS added."""
    return tokenizer.encode(text, add_special_tokens=False)


def decode(tokenizer: Any, ids: list[int]) -> str:
    return tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)

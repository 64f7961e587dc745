"""The tokenizer's tables that reading a completion needs: every added token's text (to flag
special-token text in a prompt's data) and every token's bytes (to map logprob bytes to ids),
each built once per tokenizer and cached.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from draftgen.profiles import ModelProfile
from draftgen.reconstruct.verify import special_text_in_prompt
from draftgen.records import StoredCompletion
from draftgen.tokens import tokenizer as tok
from draftgen.tokens.fast_encoder import trie_pattern


def special_text_of_prompt(
    stored: StoredCompletion, tokenizer: Any, profile: ModelProfile, prompt_ids: list[int]
) -> str:
    """The first special token spelled in the prompt's data, or "": the profile's delimiters
    first (harmony's span several tokens), then every added token of the tokenizer whose id the
    prompt holds, found in a non-assistant message or a tool schema.

    Servers render such text as the token's id, so the ids are what the model saw; the flag
    (``special_text_in_prompt=TEXT`` in the detail) says the row is suspicious, not wrong. Looking
    at the tokenizer's whole list, not the profile's few delimiters, is what catches Kimi's
    ``<|im_user|>`` or ``[EOS]`` and every other family's markup alike.
    """
    found = special_text_in_prompt(stored.messages, profile)
    if found:
        return found
    texts = [m.get("content") for m in stored.messages if m.get("role") != "assistant"] + (
        [orjson.dumps(stored.tools).decode()] if stored.tools else []
    )
    texts = [text for text in texts if isinstance(text, str) and text]
    firsts = _added_token_firsts(tokenizer)
    if not any(char in text for text in texts for char in firsts):
        return ""  # no text can hold one: the pattern (~0.7 s to build for Kimi) is not needed
    pattern, ids_of = _added_tokens(tokenizer)
    if pattern is None:
        return ""
    in_prompt = set(prompt_ids)
    for text in texts:
        for match in pattern.finditer(text):
            if ids_of[match.group()] in in_prompt:
                return match.group()
    return ""


_ADDED_TOKENS: dict[int, tuple[Any, Any, dict[str, int]]] = {}
_ADDED_FIRSTS: dict[int, tuple[Any, frozenset[str]]] = {}


def _added_token_firsts(tokenizer: Any) -> frozenset[str]:
    """The first characters of the tokenizer's added tokens (cached per tokenizer): a text with
    none of them spells no added token."""
    inner = getattr(tokenizer, "inner", tokenizer)
    cached = _ADDED_FIRSTS.get(id(inner))
    if cached is not None and cached[0] is inner:
        return cached[1]
    decoder = getattr(inner, "added_tokens_decoder", None) or {}
    firsts = frozenset(str(token)[0] for token in decoder.values() if str(token))
    _ADDED_FIRSTS[id(inner)] = (inner, firsts)
    return firsts


def _added_tokens(tokenizer: Any) -> tuple[Any, dict[str, int]]:
    """(a pattern of every added token's text, text -> id), cached per tokenizer; (None, {})
    for a tokenizer without added tokens."""
    # Keyed by the tokenizer itself, not a batch's pre-encoded wrapper of it: a pattern of
    # Kimi's 12,197 added tokens is worth building once per process, not once per batch.
    inner = getattr(tokenizer, "inner", tokenizer)
    cached = _ADDED_TOKENS.get(id(inner))
    if cached is not None and cached[0] is inner:
        return cached[1], cached[2]
    decoder = getattr(inner, "added_tokens_decoder", None) or {}
    ids_of = {str(token): index for index, token in decoder.items() if str(token)}
    pattern = re.compile(trie_pattern(set(ids_of))) if ids_of else None
    _ADDED_TOKENS[id(inner)] = (inner, pattern, ids_of)
    return pattern, ids_of


_TOKEN_BYTES_TABLES: dict[int, tuple[Any, dict[bytes, int]]] = {}


def token_bytes_table(tokenizer: Any) -> dict[bytes, int]:
    """bytes -> id for every token (ordinary ones first; specials by their text), cached."""
    cached = _TOKEN_BYTES_TABLES.get(id(tokenizer))
    if cached is not None and cached[0] is tokenizer:
        return cached[1]
    decoder = tok.byte_decoder()
    special_ids = set(getattr(tokenizer, "added_tokens_decoder", {}) or {})
    table: dict[bytes, int] = {}
    specials: list[tuple[bytes, int]] = []
    for token, index in tokenizer.get_vocab().items():
        if index in special_ids:
            specials.append((token.encode("utf-8"), index))
            continue
        try:
            raw = bytes(decoder[ch] for ch in token)
        except KeyError:  # not a byte-level vocabulary entry
            raw = tok.decode(tokenizer, [index]).encode("utf-8")
        table.setdefault(raw, index)
    for raw, index in specials:
        table.setdefault(raw, index)
    _TOKEN_BYTES_TABLES[id(tokenizer)] = (tokenizer, table)
    return table

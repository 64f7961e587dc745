"""A Kimi-K3-style remote-code tokenizer: tiktoken ranks inside a slow ``transformers`` tokenizer,
whose ``apply_chat_template`` encodes the chat segment by segment.

Written for draftgen to behave as Moonshot's ``tokenization_kimi.py`` in ``moonshotai/Kimi-K3``
does (as vLLM's ``vllm/tokenizers/kimi_k3.py`` wraps it: ``tokenize=False`` gives the joined text,
``tokenize=True`` the ids of ``_encode_chat_segments``); the ``kimi-k3`` test fixture ships it as
``tokenization_kimi.py`` beside ``encoding_k3.py`` (the segments) and ``tiktoken.model``.
Structural segments are encoded with every special token allowed, all others with none, each on
its own: ``<|open|>`` typed by a user stays ordinary text. Defaults as K3's: thinking on,
``thinking_effort="max"``, the generation prompt added. Not confirmed: the default of ``tokenize``
(False here, as vLLM's wrapper); Moonshot's own split pattern (Qwen's ranks need Qwen's).
Standalone: it imports tiktoken, transformers and its sibling ``encoding_k3`` only.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator
from pathlib import Path
from shutil import copyfile
from typing import Any

import tiktoken
from transformers import BatchEncoding, PreTrainedTokenizer
from transformers.convert_slow_tokenizer import bytes_to_unicode

from .encoding_k3 import build_chat_segments

VOCAB_FILES_NAMES = {"vocab_file": "tiktoken.model"}

# tiktoken panics on very long inputs and slows down on very long runs of one character class,
# so every segment is cut into pieces first, as Moonshot's encoder does (whitespace as
# ``str.isspace`` sees it).
_MAX_ENCODE_CHARS = 400_000
_MAX_RUN_CHARS = 25_000

# Keyword arguments of the base class's apply_chat_template that mean nothing to K3's encoder.
_TEMPLATE_ONLY = ("chat_template", "continue_final_message", "documents", "tokenizer_kwargs")


def load_ranks(path: str | os.PathLike) -> dict[bytes, int]:
    """A tiktoken model file (one ``base64(token) rank`` per line) as mergeable ranks."""
    ranks: dict[bytes, int] = {}
    for line in Path(path).read_bytes().splitlines():
        if line.strip():
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


class TikTokenTokenizer(PreTrainedTokenizer):
    """K3's tokenizer shape: tiktoken does the work, ``transformers`` sees byte-level tokens.

    ``encode`` without keywords goes straight to tiktoken (specials allowed unless
    ``allow_special_tokens=False``); with any keyword it takes the slow base-class path. Ids from
    the ordinary ranks up to the largest id in ``added_tokens_decoder`` are tiktoken special
    tokens; ids the config does not name are ``<|reserved_token_N|>``.
    """

    vocab_files_names = VOCAB_FILES_NAMES
    model_input_names = ["input_ids", "attention_mask"]

    # Qwen's split, the one its ranks were trained with (draftgen.fixtures.QWEN_PATTERN).
    pat_str = (
        r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
        r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
    )

    def __init__(
        self,
        vocab_file: str,
        bos_token: Any = "[BOS]",
        eos_token: Any = "[EOS]",
        unk_token: Any = None,
        pad_token: Any = None,
        additional_special_tokens: list[str] | None = None,
        added_tokens_decoder: dict | None = None,
        **kwargs: Any,
    ) -> None:
        if not os.path.isfile(vocab_file):
            raise FileNotFoundError(f"tiktoken model file not found: {vocab_file}")
        self.vocab_file = vocab_file
        ranks = load_ranks(vocab_file)
        named = {int(i): str(token) for i, token in (added_tokens_decoder or {}).items()}
        first_special = len(ranks)
        self.special_tokens = {
            named.get(i, f"<|reserved_token_{i}|>"): i
            for i in range(first_special, max(named, default=first_special - 1) + 1)
        }
        self.model = tiktoken.Encoding(
            name=Path(vocab_file).name,
            pat_str=self.pat_str,
            mergeable_ranks=ranks,
            special_tokens=self.special_tokens,
        )
        self.n_words: int = self.model.n_vocab
        self.bos_id = self.special_tokens[str(bos_token)]
        self.eos_id = self.special_tokens[str(eos_token)]
        self.unk_id = self.special_tokens.get(str(unk_token)) if unk_token is not None else None
        byte_encoder = bytes_to_unicode()
        self.byte_decoder = {char: byte for byte, char in byte_encoder.items()}
        self.decoder: dict[int, str] = {
            i: "".join(byte_encoder[b] for b in self.model.decode_single_token_bytes(i))
            for i in range(self.n_words)
        }
        self.encoder: dict[str, int] = {text: i for i, text in self.decoder.items()}
        if additional_special_tokens is None:
            additional_special_tokens = [t for t in ("<|end_of_msg|>",) if t in self.special_tokens]
        super().__init__(
            bos_token=bos_token,
            eos_token=eos_token,
            unk_token=unk_token,
            pad_token=pad_token,
            additional_special_tokens=additional_special_tokens,
            added_tokens_decoder=added_tokens_decoder,
            **kwargs,
        )

    # -- encoding and decoding -------------------------------------------------------------------

    def encode(self, text: str, allow_special_tokens: bool = True, **kwargs: Any) -> list[int]:
        """Ids of ``text``; any keyword hands the call to the slow base class."""
        if kwargs:
            return super().encode(text, **kwargs)
        return self._encode_text_piece(text, allow_special_tokens)

    def _encode_text_piece(self, text: str, allow_special_tokens: bool = True) -> list[int]:
        if type(text) is not str:
            raise TypeError(f"encode takes text, not {type(text).__name__}")
        options: dict[str, Any] = (
            {"allowed_special": "all"} if allow_special_tokens else {"disallowed_special": ()}
        )
        ids: list[int] = []
        for start in range(0, len(text), _MAX_ENCODE_CHARS):
            for piece in _split_long_runs(text[start : start + _MAX_ENCODE_CHARS], _MAX_RUN_CHARS):
                ids.extend(self.model.encode(piece, **options))
        return ids

    def _encode_chat_segments(self, segments: Any) -> list[int]:
        """Each segment encoded on its own: specials only where the segment allows them."""
        ids: list[int] = []
        for segment in segments:
            ids.extend(self._encode_text_piece(segment.text, bool(segment.allow_special)))
        return ids

    def decode(self, token_ids: int | list[int], **kwargs: Any) -> str:
        if kwargs:
            return super().decode(token_ids, **kwargs)
        if isinstance(token_ids, int):
            token_ids = [token_ids]
        return self.model.decode(list(token_ids))

    # -- what PreTrainedTokenizer needs --------------------------------------------------------

    @property
    def vocab_size(self) -> int:
        return self.n_words

    def get_vocab(self) -> dict[str, int]:
        return self.encoder

    def _tokenize(self, text: str, **kwargs: Any) -> list[str]:
        return [self.decoder[i] for i in self._encode_text_piece(text)]

    def _convert_token_to_id(self, token: str) -> int | None:
        return self.encoder.get(token, self.unk_id)

    def _convert_id_to_token(self, index: int) -> str | None:
        return self.decoder.get(index)

    @staticmethod
    def clean_up_tokenization(out_string: str) -> str:
        return out_string

    def convert_tokens_to_string(self, tokens: list[str]) -> str:
        raw = bytes(self.byte_decoder[char] for char in "".join(tokens))
        return raw.decode("utf-8", "replace")

    def save_vocabulary(
        self, save_directory: str, filename_prefix: str | None = None
    ) -> tuple[str]:
        if not os.path.isdir(save_directory):
            raise ValueError(f"vocabulary path ({save_directory}) should be a directory")
        prefix = f"{filename_prefix}-" if filename_prefix else ""
        target = os.path.join(save_directory, prefix + VOCAB_FILES_NAMES["vocab_file"])
        if os.path.abspath(self.vocab_file) != os.path.abspath(target):
            copyfile(self.vocab_file, target)
        return (target,)

    # -- chat ----------------------------------------------------------------------------------

    def apply_chat_template(
        self,
        conversation: Any,
        tools: list[dict] | None = None,
        tokenize: bool = False,
        add_generation_prompt: bool = True,
        thinking: bool = True,
        return_dict: bool = False,
        **kwargs: Any,
    ) -> Any:
        """The joined text of K3's segments, or (``tokenize=True``) their ids, encoded one
        segment at a time. A list of conversations gives a list of results."""
        for name in _TEMPLATE_ONLY:
            kwargs.pop(name, None)
        kwargs.setdefault("thinking_effort", "max")
        batched = bool(conversation) and isinstance(conversation[0], list)
        results = []
        for messages in conversation if batched else [conversation]:
            segments = build_chat_segments(
                messages,
                tools,
                add_generation_prompt=add_generation_prompt,
                thinking=True if thinking is None else bool(thinking),
                **kwargs,
            )
            if tokenize:
                results.append(self._encode_chat_segments(segments))
            else:
                results.append("".join(segment.text for segment in segments))
        if tokenize and return_dict:
            return BatchEncoding({"input_ids": results if batched else results[0]})
        return results if batched else results[0]


def _split_long_runs(text: str, limit: int) -> Iterator[str]:
    """``text`` cut so that no piece holds more than ``limit`` consecutive whitespace characters
    or consecutive non-whitespace characters (pieces join back to ``text``)."""
    start = 0
    run = 0
    in_space = text[:1].isspace()
    for i, char in enumerate(text):
        space = char.isspace()
        if space != in_space:
            in_space = space
            run = 1
            continue
        run += 1
        if run > limit:
            yield text[start:i]
            start = i
            run = 1
    yield text[start:]

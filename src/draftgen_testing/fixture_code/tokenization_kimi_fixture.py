"""A Kimi-style remote-code tokenizer: tiktoken ranks inside a slow ``transformers`` tokenizer.

Written for draftgen to behave as Moonshot's ``tokenization_kimi.py`` (Kimi K2.5) and its
``tool_declaration_ts.py`` do; the ``kimi-k2.5-remote`` test fixture ships it as
``tokenization_kimi.py`` beside ``tiktoken.model`` and loads it with ``trust_remote_code``.
Standalone: it imports tiktoken and transformers only, never draftgen.
"""

from __future__ import annotations

import base64
import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from shutil import copyfile
from typing import Any

import tiktoken
from transformers import PreTrainedTokenizer

# transformers 5 removed bytes_to_unicode from models.gpt2.tokenization_gpt2; this module has it
# in 4.x and 5.x (the import Moonshot moved to upstream).
from transformers.convert_slow_tokenizer import bytes_to_unicode

logger = logging.getLogger(__name__)

VOCAB_FILES_NAMES = {"vocab_file": "tiktoken.model"}

# tiktoken panics on very long inputs and slows down on very long runs of one character class,
# so text is cut into pieces first, as Moonshot's encode does; the cuts can change ids only in
# texts with such runs.
_MAX_ENCODE_CHARS = 400_000
_MAX_RUN_CHARS = 25_000

_ROLE_TOKENS = (
    "<|im_end|>",
    "<|im_user|>",
    "<|im_assistant|>",
    "[EOT]",
    "<|im_system|>",
    "<|im_middle|>",
)


def load_ranks(path: str | os.PathLike) -> dict[bytes, int]:
    """A tiktoken model file (one ``base64(token) rank`` per line) as mergeable ranks.

    Read directly, not through ``tiktoken.load``, which keeps a path-keyed copy in the temp dir.
    """
    ranks: dict[bytes, int] = {}
    for line in Path(path).read_bytes().splitlines():
        if line.strip():
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


class TikTokenTokenizer(PreTrainedTokenizer):
    """Kimi's tokenizer shape: tiktoken does the work, ``transformers`` sees byte-level tokens.

    ``encode`` without keywords goes straight to tiktoken with every special token allowed (so
    special-token text in user data becomes the special id); with any keyword it takes the slow
    base-class path, which splits on added tokens and calls ``_tokenize`` (tiktoken again) on the
    rest. ``get_vocab`` maps GPT-2 byte-level strings to ids. Ids from the ordinary ranks up to the
    largest id in ``added_tokens_decoder`` are tiktoken special tokens; ids the config does not
    name are ``<|reserved_token_N|>``.
    """

    vocab_files_names = VOCAB_FILES_NAMES
    model_input_names = ["input_ids", "attention_mask"]

    # Qwen's split, the one its ranks were trained with (draftgen.fixtures.QWEN_PATTERN); Kimi's
    # own file holds Kimi's split here.
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
        last_special = max(named, default=first_special - 1)
        self.special_tokens = {
            named.get(i, f"<|reserved_token_{i}|>"): i
            for i in range(first_special, last_special + 1)
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
        self.pad_id = self.special_tokens.get(str(pad_token)) if pad_token is not None else None

        self.byte_encoder = bytes_to_unicode()
        self.byte_decoder = {char: byte for byte, char in self.byte_encoder.items()}
        # Every id, special ones included, as the byte-level spelling of its bytes.
        self.decoder: dict[int, str] = {
            i: "".join(self.byte_encoder[b] for b in self.model.decode_single_token_bytes(i))
            for i in range(self.n_words)
        }
        self.encoder: dict[str, int] = {text: i for i, text in self.decoder.items()}

        if additional_special_tokens is None:
            # Only tokens of the vocabulary: any other would be appended as a new id.
            additional_special_tokens = [t for t in _ROLE_TOKENS if t in self.special_tokens]
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
        """Ids of ``text``; any keyword hands the call to the slow base class, as Kimi's does."""
        if kwargs:
            return super().encode(text, **kwargs)
        if type(text) is not str:
            raise TypeError(f"encode takes text, not {type(text).__name__}")
        if allow_special_tokens:
            options: dict[str, Any] = {"allowed_special": "all"}
        else:
            options = {"disallowed_special": ()}
        ids: list[int] = []
        for piece in self._pieces(text):
            ids.extend(self.model.encode(piece, **options))
        return ids

    def decode(self, token_ids: int | list[int], **kwargs: Any) -> str:
        """Text of ``token_ids``; any keyword hands the call to the slow base class."""
        if kwargs:
            return super().decode(token_ids, **kwargs)
        if isinstance(token_ids, int):
            token_ids = [token_ids]
        return self.model.decode(list(token_ids))

    @staticmethod
    def _pieces(text: str) -> Iterator[str]:
        for start in range(0, len(text), _MAX_ENCODE_CHARS):
            yield from _split_long_runs(text[start : start + _MAX_ENCODE_CHARS], _MAX_RUN_CHARS)

    # -- what PreTrainedTokenizer needs --------------------------------------------------------

    @property
    def vocab_size(self) -> int:
        return self.n_words

    def get_vocab(self) -> dict[str, int]:
        return self.encoder

    def _tokenize(self, text: str, **kwargs: Any) -> list[str]:
        return [self.decoder[i] for i in self.encode(text)]

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
        **kwargs: Any,
    ) -> Any:
        """The base class's rendering, after Kimi's two tool steps: every tool dict's keys are
        sorted (deeply), and ``tools_ts_str`` (TypeScript-style declarations) is handed to the
        template; a schema the encoder cannot read leaves it out, and the template falls back
        to JSON. Defaults as K2.5's: text, with the generation prompt."""
        tools = deep_sort_dict(tools)
        if tools:
            try:
                kwargs["tools_ts_str"] = encode_tools_to_typescript_style(tools)
            except Exception as exc:  # as Kimi's: any failure means the JSON declaration
                logger.warning("tools not converted to TypeScript style: %s", exc)
        return super().apply_chat_template(
            conversation,
            tools=tools,
            tokenize=tokenize,
            add_generation_prompt=add_generation_prompt,
            **kwargs,
        )


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


def deep_sort_dict(value: Any) -> Any:
    """``value`` with every dict's keys in sorted order, at any depth (lists keep their order)."""
    if isinstance(value, dict):
        return {key: deep_sort_dict(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [deep_sort_dict(item) for item in value]
    return value


# -- TypeScript-style tool declarations (K2.5's tools_ts_str) --------------------------------------
#
# The text K2.5 was trained to read tools in:
#
#   # Tools
#
#   ## functions
#   namespace functions {
#   // description
#   type NAME = (_: {
#     // parameter description
#     required_param: string,
#     optional_param?: number
#   }) => any;
#   }
#
# Required parameters come first, each group sorted by name; descriptions and some JSON-schema
# constraints become `//` comments; `$defs` become `interface` declarations before the type.

_INDENT = "  "
_FIELD_SEPARATOR = ",\n"
_CONSTRAINT_KEYS = {
    "string": ("maxLength", "minLength", "pattern"),
    "number": ("maximum", "minimum"),
    "integer": ("maximum", "minimum"),
}
_UNION_NAMES = {
    "string": "string",
    "number": "number",
    "integer": "number",
    "boolean": "boolean",
    "null": "null",
    "object": "{}",
    "array": "Array<any>",
}


def encode_tools_to_typescript_style(tools: list[dict[str, Any]]) -> str:
    """OpenAI-style tools (``{"type": "function", "function": {...}}``) as K2.5's declaration
    text; other tool types are skipped, and no function at all gives ``""``. Raises
    ``ValueError`` (or ``KeyError``) on a schema it cannot express."""
    functions = [
        _function_declaration(tool["function"])
        for tool in tools or ()
        if tool.get("type") == "function" and tool.get("function")
    ]
    if not functions:
        return ""
    return "# Tools\n\n## functions\nnamespace functions {\n" + "\n".join(functions) + "\n}\n"


def _comment(text: str, indent: str = "") -> str:
    return "\n".join(f"{indent}// {line}" if line else "" for line in text.split("\n"))


class _Definitions:
    """``$defs`` seen so far, and whether the schema refers to itself (``"$ref": "#"``)."""

    def __init__(self) -> None:
        self.schemas: dict[str, Any] = {}
        self.refers_to_root = False

    def name_of(self, ref: str) -> str:
        if ref == "#":
            self.refers_to_root = True
            return "parameters"
        if ref.startswith("#/$defs/"):
            name = ref.split("/")[-1]
            if name not in self.schemas:
                raise ValueError(f"Reference not found: {ref}")
            return name
        raise ValueError(f"Unsupported reference format: {ref}")


class _Type:
    """One JSON-schema node: its TypeScript text and the comment lines written above it."""

    def __init__(self, schema: dict[str, Any], constraint_keys: tuple[str, ...] = ()) -> None:
        self.description = schema.get("description", "")
        self.constraints = {k: v for k, v in schema.items() if k in constraint_keys}

    def text(self, indent: str = "") -> str:
        raise NotImplementedError

    def comments(self, indent: str) -> str:
        lines = []
        if self.description:
            lines.append(_comment(self.description, indent))
        if self.constraints:
            listed = ", ".join(f"{k}: {v}" for k, v in sorted(self.constraints.items()))
            lines.append(f"{indent}// {listed}")
        return "".join(line + "\n" for line in lines)


class _Named(_Type):
    """A scalar (``integer`` reads ``number``), ``any``, or a ``$ref`` by name."""

    def __init__(self, name: str, schema: dict[str, Any] | None = None, keys: tuple = ()) -> None:
        super().__init__(schema or {}, keys)
        self.name = "number" if name == "integer" else name

    def text(self, indent: str = "") -> str:
        return self.name


class _Alternatives(_Type):
    """``a | b``: an enum's literals, a list of type names, or ``anyOf`` members."""

    def __init__(self, schema: dict[str, Any], members: list[_Type] | list[str]) -> None:
        super().__init__(schema)
        self.members = members

    def text(self, indent: str = "") -> str:
        return " | ".join(m if isinstance(m, str) else m.text(indent) for m in self.members)


class _Array(_Type):
    def __init__(self, schema: dict[str, Any], defs: _Definitions) -> None:
        super().__init__(schema, ("minItems", "maxItems"))
        items = schema.get("items")
        self.item = _parse(items, defs) if items else _Named("any")

    def text(self, indent: str = "") -> str:
        inner = indent + _INDENT
        notes = self.item.comments(inner)
        if not notes:
            return f"Array<{self.item.text(indent)}>"
        return f"Array<\n{notes}{inner}{self.item.text(inner)}\n{indent}>"


class _Field:
    def __init__(self, name: str, kind: _Type, optional: bool, default: Any) -> None:
        self.name, self.kind, self.optional, self.default = name, kind, optional, default

    def text(self, indent: str) -> str:
        notes = self.kind.comments(indent)
        if self.default is not None:
            if isinstance(self.default, (int, float, bool)):
                shown = repr(self.default)
            else:
                shown = json.dumps(self.default, ensure_ascii=False)
            notes += f"{indent}// Default: {shown}\n"
        mark = "?" if self.optional else ""
        return f"{notes}{indent}{self.name}{mark}: {self.kind.text(indent)}"


class _Object(_Type):
    def __init__(self, schema: dict[str, Any], defs: _Definitions) -> None:
        super().__init__(schema)
        self.fields: list[_Field] = []
        self.extra: Any = None
        if not schema:
            return
        if "$defs" in schema:
            defs.schemas.update(schema["$defs"] or {})
        self.extra = schema.get("additionalProperties")
        if isinstance(self.extra, dict):
            self.extra = _parse(self.extra, defs)
        if "properties" not in schema:
            return
        properties = schema["properties"]
        required = set(schema.get("required", []))
        self.fields = [
            _Field(
                name,
                _parse(prop, defs),
                name not in required,
                prop.get("default") if isinstance(prop, dict) else None,
            )
            for name, prop in properties.items()
        ]

    def text(self, indent: str = "") -> str:
        inner = indent + _INDENT
        ordered = sorted(self.fields, key=lambda f: (f.optional, f.name))
        lines = [f.text(inner) for f in ordered]
        if self.extra is not None:
            if self.extra is True:
                value = "any"
            elif self.extra is False:
                value = "never"
            elif isinstance(self.extra, _Type):
                value = self.extra.text(inner)
            else:
                raise ValueError(f"Unknown additionalProperties: {self.extra}")
            lines.append(f"{inner}[k: string]: {value}")
        if not lines:
            return "{}"
        return "{\n" + _FIELD_SEPARATOR.join(lines) + f"\n{indent}}}"


def _enum(schema: dict[str, Any]) -> _Alternatives:
    values = schema["enum"]
    declared = schema.get("type")
    if isinstance(declared, list):
        if len(declared) == 1:
            declared = declared[0]
        elif len(declared) == 2 and "null" in declared:
            declared = declared[0] if declared[0] != "null" else declared[1]
        else:
            raise ValueError(f"Enum type {declared} is not supported")
    checks = {
        "string": lambda v: isinstance(v, str),
        "number": lambda v: isinstance(v, (int, float)),
        "integer": lambda v: isinstance(v, int),
        "boolean": lambda v: isinstance(v, bool),
    }
    check = checks.get(declared) if isinstance(declared, str) else None
    for value in values:
        if value is not None and check is not None and not check(value):
            raise ValueError(f"Enum value {value} is not a {declared}")
    literals = [f'"{v}"' if isinstance(v, str) else str(v) for v in values]
    return _Alternatives(schema, literals)


def _parse(schema: Any, defs: _Definitions) -> _Type:
    if isinstance(schema, bool):
        # `true` accepts anything; `false` accepts nothing, which K2.5 writes as null.
        return _Named("any" if schema else "null")
    if "$ref" in schema:
        return _Named(defs.name_of(schema["$ref"]), schema)
    if "anyOf" in schema:
        return _Alternatives(schema, [_parse(member, defs) for member in schema["anyOf"]])
    if "enum" in schema:
        return _enum(schema)
    if "type" in schema:
        kind = schema["type"]
        if isinstance(kind, list):
            return _Alternatives(schema, [_UNION_NAMES[name] for name in kind])
        if kind == "object":
            return _Object(schema, defs)
        if kind == "array":
            return _Array(schema, defs)
        return _Named(kind, schema, _CONSTRAINT_KEYS.get(kind, ()) if isinstance(kind, str) else ())
    if schema == {}:
        return _Named("any")
    raise ValueError(f"Invalid JSON Schema object: {schema}")


def _function_declaration(function: dict[str, Any]) -> str:
    defs = _Definitions()
    parameters = _Object(function.get("parameters") or {}, defs)
    blocks = []
    if defs.refers_to_root:
        # A schema that refers to itself is declared once as `interface parameters`, its fields
        # in their given order.
        fields = _FIELD_SEPARATOR.join(f.text(_INDENT) for f in parameters.fields)
        blocks.append("interface parameters {" + (f"\n{fields}\n" if fields else "") + "}")
    for name, schema in dict(defs.schemas).items():
        body = _parse(schema, defs).text()
        note = schema.get("description", "")
        blocks.append((_comment(note) + "\n" if note else "") + f"interface {name} {body}")
    name = function.get("name", "function")
    argument = "parameters" if defs.refers_to_root else parameters.text()
    description = function.get("description")
    parts = [
        "\n".join(blocks),
        _comment(description) if description else "",
        f"type {name} = (_: {argument}) => any;",
    ]
    return "\n".join(part for part in parts if part)

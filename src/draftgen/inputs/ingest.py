"""Ingest: prompt files (JSONL, JSON arrays, Parquet, Hugging Face datasets) to conversations.

Rows are OpenAI ``messages``, ShareGPT ``conversations`` or glaive ``system`` + ``chat`` objects.
Rows stream one at a time (a JSON array file is the exception: that format is one value, read
whole). Invalid rows become ``Rejection`` values carrying the file, the 1-based line (the row
number for formats without lines) and a sentence a person can act on.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson

from draftgen.errors import DraftgenError

OPENAI_ROLES = frozenset({"system", "user", "assistant", "tool"})
SHAREGPT_ROLES = {"system": "system", "human": "user", "user": "user", "gpt": "assistant"}
# One row larger than this is refused without being held in memory whole: a 20 MB message cost
# 5.1 GB on its way through rendering and tokenizing, and no context window holds 8 MiB of text.
MAX_ROW_BYTES = 8 << 20
# Levels of lists and objects one field of a row may nest (a tool schema uses under 20): deeper
# values overflow orjson's serializer (254 levels) and Python's recursion downstream.
MAX_ROW_DEPTH = 64


@dataclass(frozen=True)
class Conversation:
    source_id: str
    messages: tuple[dict, ...]
    tools: tuple[dict, ...] | None
    input: str
    line: int


@dataclass(frozen=True)
class Rejection:
    input: str
    line: int
    reason: str

    def as_json(self) -> bytes:
        return orjson.dumps({"input": self.input, "line": self.line, "reason": self.reason})


class RowError(ValueError):
    """A row that cannot be used; the message is the sentence written to rejected.jsonl."""


class InputError(DraftgenError, ValueError):
    """A whole input that cannot be read as asked; the message names the file and the fix."""


def read_conversations(
    paths: list[str], format: str | None = None
) -> Iterator[Conversation | Rejection]:
    """Yield every row of every input in order, as a conversation or a rejection.

    ``format`` is one of ``INPUT_FORMATS``; None or "auto" picks it from each path. A file that
    cannot be read in that format at all raises ``InputError``.
    """
    for path in paths:
        yield from _read_input(path, format)


def _read_input(path: str, format: str | None) -> Iterator[Conversation | Rejection]:
    container, glaive = resolve_format(path, format)
    if container == "jsonl":
        yield from _read_file(path, glaive)
        return
    label = os.path.basename(path.rstrip("/\\"))
    for number, row in enumerate(_records(path, container), start=1):
        try:
            yield parse_record(row, label=label, input=path, line=number, glaive=glaive)
        except RowError as exc:
            yield Rejection(input=path, line=number, reason=str(exc))


INPUT_FORMATS = ("auto", "jsonl", "json", "parquet", "hf", "glaive")
# Marker files of a datasets.save_to_disk directory (a Dataset, or a DatasetDict of splits).
HF_DATASET_FILES = ("state.json", "dataset_dict.json")
_HF_BATCH_ROWS = 256
CSV_SUFFIXES = (".csv", ".tsv")


def resolve_format(path: str, format: str | None) -> tuple[str, bool]:
    """The container to read ``path`` as (jsonl, json, parquet, hf), and whether its rows are
    glaive rows whatever keys they have (``glaive`` picks the container from the path)."""
    if format not in (None, *INPUT_FORMATS):
        raise InputError(
            f"{path}: input format {format!r} is unknown; use one of {', '.join(INPUT_FORMATS)}"
        )
    glaive = format == "glaive"
    if format == "jsonl":
        _refuse_json_array(path, "pass --input-format json")
    if format in ("jsonl", "json", "parquet", "hf"):
        return format, glaive
    if os.path.isdir(path):
        if any(os.path.isfile(os.path.join(path, name)) for name in HF_DATASET_FILES):
            return "hf", glaive
        raise InputError(
            f"{path} is a directory but not a datasets.save_to_disk one (no state.json); "
            "give a file, or the directory save_to_disk wrote"
        )
    suffix = Path(path).suffix.lower()
    if suffix == ".parquet":
        return "parquet", glaive
    if suffix in CSV_SUFFIXES:  # else read as JSON lines: every line "not valid JSON", no more
        raise InputError(
            f"{path} is CSV, which draftgen does not read (it reads JSONL, a .json array, "
            ".parquet or a datasets.save_to_disk directory): convert it to JSONL, one object "
            "with 'messages' per line, or read glaive 'system' and 'chat' columns from it with "
            "--input-format hf"
        )
    if suffix == ".json" and _first_byte(path) == b"[":
        return "json", glaive
    # .jsonl, .ndjson, and .json files of one object per line
    _refuse_json_array(path, "name it .json" if glaive else "pass --input-format json")
    return "jsonl", glaive


def _refuse_json_array(path: str, fix: str) -> None:
    """InputError for a JSON array of rows (a JSON lines row is never an array) read as JSON
    lines: one sentence for the file, not one rejection for each of its lines. Only a file
    that is one whole array of objects is taken for one; anything else is read line by line."""
    try:
        if _first_byte(path) != b"[":
            return
        with open(path, "rb") as handle:
            value = orjson.loads(_without_bom(handle.read()))
    except (OSError, orjson.JSONDecodeError):
        return  # reading it line by line says what is wrong with each line
    if isinstance(value, list) and value and isinstance(value[0], dict):
        raise InputError(f"{path} holds a JSON array, not JSON lines: {fix}")


# The UTF-8 byte order mark some editors put at the start of a file: not part of its first row.
BOM = b"\xef\xbb\xbf"


def _without_bom(data: bytes) -> bytes:
    return data[len(BOM) :] if data.startswith(BOM) else data


def _first_byte(path: str) -> bytes:
    with open(path, "rb") as handle:
        first = True
        while chunk := handle.read(4096):
            stripped = (_without_bom(chunk) if first else chunk).lstrip()
            first = False
            if stripped:
                return stripped[:1]
    return b""


def count_rows(path: str, format: str | None = None) -> int | None:
    """Rows ``read_conversations`` yields for ``path`` when metadata tells it without reading
    them (Parquet, datasets directories); None for line formats, which must be read."""
    container, _ = resolve_format(path, format)
    if container == "parquet" and os.path.isfile(path):
        return _parquet_file(path).metadata.num_rows
    if container == "hf" and os.path.isdir(path):
        return len(_hf_dataset(path))
    return None


def _records(path: str, container: str) -> Iterator[object]:
    if container == "json":
        yield from _json_array(path)
    elif container == "parquet":
        for batch in _parquet_file(path).iter_batches(batch_size=_HF_BATCH_ROWS):
            yield from map(_without_nulls, batch.to_pylist())
    elif os.path.isdir(path):
        yield from map(_without_nulls, _hf_rows(_hf_dataset(path)))
    else:
        yield from map(_without_nulls, _hf_file_rows(path))


def _json_array(path: str) -> list:
    # A JSON array is one value: parsing it at all means holding it, so it is read whole.
    with open(path, "rb") as handle:
        data = _without_bom(handle.read())
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise InputError(
            f"{path} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}); "
            "fix it, or give one object per line as JSONL"
        ) from None
    if not isinstance(value, list):
        raise InputError(
            f"{path} holds a JSON {_json_kind(value)}, not an array of rows; give a "
            "top-level list of row objects, or one object per line as JSONL"
        )
    return value


def _json_kind(value: object) -> str:
    kinds = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}
    return kinds.get(type(value), "number" if isinstance(value, (int, float)) else "value")


def _parquet_file(path: str):
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(path)
    except Exception as exc:  # pyarrow raises ArrowInvalid, OSError and others
        raise InputError(
            f"{path} cannot be read as Parquet ({exc}); check the file, or pass the right "
            "--input-format"
        ) from None


def _hf_dataset(path: str):
    import datasets

    try:
        loaded = datasets.load_from_disk(path)
    except Exception as exc:  # datasets raises FileNotFoundError, ValueError and others
        raise InputError(f"{path} cannot be loaded with datasets.load_from_disk ({exc})") from None
    if isinstance(loaded, datasets.DatasetDict):
        splits = list(loaded)
        if len(splits) != 1:
            raise InputError(
                f"{path} holds the splits {', '.join(splits)}; give one split's directory, "
                f"e.g. {os.path.join(path, splits[0])}"
            )
        loaded = loaded[splits[0]]
    return loaded


def _hf_rows(dataset) -> Iterator[dict]:
    for batch in dataset.iter(batch_size=_HF_BATCH_ROWS):
        columns = list(batch)
        for values in zip(*(batch[name] for name in columns), strict=True):
            yield dict(zip(columns, values, strict=True))


def _hf_file_rows(path: str) -> Iterator[dict]:
    """A local file through ``datasets.load_dataset`` streaming (no cache written)."""
    import datasets

    builder = {".parquet": "parquet", ".csv": "csv"}.get(Path(path).suffix.lower(), "json")
    try:
        stream = datasets.load_dataset(builder, data_files=path, split="train", streaming=True)
        yield from stream
    except Exception as exc:  # datasets raises DatasetGenerationError, ValueError and others
        raise InputError(
            f"{path} cannot be read with datasets.load_dataset({builder!r}) ({exc}); check the "
            "file, or pass the right --input-format"
        ) from None


class PositionalRows:
    """Rows of a JSON array or a datasets directory, read by position (for a seeded shuffle)."""

    def __init__(self, path: str, rows, glaive: bool) -> None:
        self.path = path
        self.rows = rows  # a list (JSON array) or a memory-mapped datasets.Dataset
        self.glaive = glaive
        self.label = os.path.basename(path.rstrip("/\\"))

    def __len__(self) -> int:
        return len(self.rows)

    def parse(self, number: int) -> Conversation | Rejection:
        try:
            return parse_record(
                _without_nulls(self.rows[number - 1]),
                label=self.label,
                input=self.path,
                line=number,
                glaive=self.glaive,
            )
        except RowError as exc:
            return Rejection(input=self.path, line=number, reason=str(exc))


def positional_rows(path: str, format: str | None) -> PositionalRows:
    """``path`` as rows by position; InputError for containers read only in order."""
    container, glaive = resolve_format(path, format)
    if container == "json":
        return PositionalRows(path, _json_array(path), glaive)
    if container == "hf" and os.path.isdir(path):
        return PositionalRows(path, _hf_dataset(path), glaive)
    raise InputError(
        f"{path}: a {container} input is read only in order, so shuffle cannot pick rows by "
        "position; convert it to JSONL (or a datasets.save_to_disk directory) or drop shuffle"
    )


def _read_file(path: str, glaive: bool = False) -> Iterator[Conversation | Rejection]:
    label = os.path.basename(path)
    with open(path, "rb") as handle:
        line_no = 0
        while raw := handle.readline(MAX_ROW_BYTES + 1):
            line_no += 1
            if len(raw) > MAX_ROW_BYTES and not raw.endswith(b"\n"):
                size = len(raw) + _skip_rest_of_line(handle)
                yield Rejection(
                    input=path,
                    line=line_no,
                    reason=f"row is {size / 2**20:.0f} MiB, over the {MAX_ROW_BYTES >> 20} MiB "
                    "limit of one row; split or shorten it",
                )
                continue
            if line_no == 1:
                raw = _without_bom(raw)
            if not raw.strip():
                continue
            try:
                yield parse_row(raw, label=label, input=path, line=line_no, glaive=glaive)
            except RowError as exc:
                yield Rejection(input=path, line=line_no, reason=str(exc))


def _skip_rest_of_line(handle) -> int:
    skipped = 0
    while chunk := handle.readline(1 << 20):
        skipped += len(chunk)
        if chunk.endswith(b"\n"):
            break
    return skipped


def parse_row(
    raw: bytes, *, label: str, input: str, line: int, glaive: bool = False
) -> Conversation:
    try:
        row = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as bad:
            # orjson calls every encoding error "surrogates not allowed": say what it is.
            raise RowError(
                f"line {line} is not valid UTF-8 (byte 0x{raw[bad.start]:02x} at offset "
                f"{bad.start}); re-encode the file as UTF-8 or remove the row"
            ) from None
        raise RowError(f"line is not valid JSON ({exc}); fix or remove it") from None
    if not isinstance(row, dict):
        raise RowError("row is not a JSON object; each line must be one object with 'messages'")
    return parse_record(row, label=label, input=input, line=line, glaive=glaive)


def parse_record(
    row: object, *, label: str, input: str, line: int, glaive: bool = False
) -> Conversation:
    """One decoded row (a dict) to a conversation; RowError says why it cannot be used."""
    if not isinstance(row, dict):
        raise RowError(f"row is a {_json_kind(row)}, not an object with 'messages'")
    check_row_limits(row)
    tools = row.get("tools")
    if isinstance(tools, str):  # Parquet and datasets columns often hold the schemas as JSON text
        tools = _json_text(tools, "'tools'")
        if tools is _NOT_JSON:
            raise RowError(
                "'tools' must be a list of objects (OpenAI function schemas) or absent, not a "
                "string that is not JSON"
            )
    if glaive or ("chat" in row and "messages" not in row and "conversations" not in row):
        messages, glaive_tools = glaive_messages(row)
        tools = glaive_tools if tools is None else tools
    elif "messages" in row:
        messages = _openai_messages(row["messages"])
    elif "conversations" in row:
        messages = _sharegpt_messages(row["conversations"])
    else:
        raise RowError(
            "row has no messages: give an OpenAI 'messages' list or ShareGPT 'conversations' "
            "(or a glaive 'chat')"
        )
    if not any(m["role"] == "user" for m in messages):
        raise RowError("row has no user turn, so there is nothing for the model to answer")
    if tools is not None and not (
        isinstance(tools, list) and all(isinstance(t, dict) for t in tools)
    ):
        raise RowError("'tools' must be a list of objects (OpenAI function schemas) or absent")
    source_id = _row_id(row.get("id"), label, _canonical(messages, tools))
    return Conversation(
        source_id=source_id,
        messages=tuple(messages),
        tools=tuple(tools) if tools else None,
        input=input,
        line=line,
    )


def check_row_limits(row: dict) -> None:
    """RowError if a field of ``row`` nests deeper than ``MAX_ROW_DEPTH`` or the row holds more
    than ``MAX_ROW_BYTES`` of text (rows read whole, not from lines): checked before anything
    else reads the row, so no later stage meets a value it cannot serialize or afford."""
    text = 0
    for key, value in row.items():
        depth, chars = _shape(value)
        text += len(key) + chars
        if depth > MAX_ROW_DEPTH:
            raise RowError(_too_deep(f"'{key}'", depth))
    if text > MAX_ROW_BYTES:
        raise RowError(
            f"row holds {text / 2**20:.0f} MiB of text, over the {MAX_ROW_BYTES >> 20} MiB limit "
            "of one row; split or shorten it"
        )


def _too_deep(what: str, depth: int | str) -> str:
    return (
        f"{what} nests {depth} levels deep; draftgen takes at most {MAX_ROW_DEPTH}: fix or "
        "remove the row"
    )


def _shape(value: object) -> tuple[int, int]:
    """(levels of lists and objects, characters of text) of a decoded JSON value, walked a level
    at a time: no recursion, so no depth can overflow the walk itself."""
    depth = chars = 0
    level = [value]
    while level:
        inner: list = []
        nested = False
        for item in level:
            if isinstance(item, str):
                chars += len(item)
            elif isinstance(item, dict):
                nested = True
                chars += sum(len(key) for key in item if isinstance(key, str))
                inner.extend(item.values())
            elif isinstance(item, (list, tuple)):
                nested = True
                inner.extend(item)
        if not nested:
            break
        depth += 1
        level = inner
    return depth, chars


_NOT_JSON = object()


def _json_text(text: str, what: str) -> object:
    """A field that holds JSON as text, decoded and held to the depth limit; ``_NOT_JSON`` if it
    is not JSON (None for blank text)."""
    if not text.strip():
        return None
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        if str(exc).startswith("depth limit exceeded"):  # orjson stops at 1024 levels
            raise RowError(_too_deep(what, "over 1024")) from None
        return _NOT_JSON
    depth = _shape(value)[0]
    if depth > MAX_ROW_DEPTH:
        raise RowError(_too_deep(what, depth))
    return value


def _check_arguments_depth(tool_calls: list, where: str) -> None:
    # Arguments are JSON text that profiles parse (with Python's recursive json) to rebuild
    # markup: held to the same limit as the row's own values.
    for index, call in enumerate(tool_calls):
        function = call.get("function") if isinstance(call, dict) else None
        arguments = function.get("arguments") if isinstance(function, dict) else None
        if isinstance(arguments, str) and arguments.lstrip()[:1] in ("{", "["):
            _json_text(arguments, f"{where}.tool_calls[{index}].function.arguments")


def _without_nulls(row: object) -> object:
    """A column-based row (Parquet, datasets) as its JSON form: Arrow gives every row every
    column, and every message every field of the struct, the absent ones as None."""
    if not isinstance(row, dict):
        return row
    out = {}
    for key, value in row.items():
        if value is None:
            continue
        if key in ("messages", "conversations") and isinstance(value, list):
            value = [
                {k: v for k, v in item.items() if v is not None} if isinstance(item, dict) else item
                for item in value
            ]
        out[key] = value
    return out


GLAIVE_SPEAKERS = {"USER": "user", "ASSISTANT": "assistant", "FUNCTION RESPONSE": "tool"}
_GLAIVE_TURN = re.compile(r"(?m)^(USER|ASSISTANT|FUNCTION RESPONSE):[ \t]?")
_GLAIVE_CALL = re.compile(
    r'^\{\s*"name"\s*:\s*"(?P<name>[^"]+)"\s*,\s*"arguments"\s*:\s*\'(?P<args>.*)\'\s*\}$', re.S
)
_GLAIVE_END = "<|endoftext|>"


def glaive_messages(row: dict) -> tuple[list[dict], list[dict] | None]:
    """A glaive function-calling row (``system`` + ``chat`` transcript) as OpenAI messages.

    The system text's JSON objects become ``tools``; ``<functioncall> {...}`` becomes an
    assistant ``tool_calls`` entry and ``FUNCTION RESPONSE:`` a ``tool`` message answering it.
    """
    system, chat = row.get("system", ""), row.get("chat")
    if not isinstance(chat, str) or not chat.strip():
        raise RowError("glaive row has no 'chat' transcript text (USER: ... ASSISTANT: ...)")
    if not isinstance(system, str):
        raise RowError(f"glaive 'system' is a {_json_kind(system)}, not a string")
    messages: list[dict] = []
    prose, tools = _glaive_system(system)
    if prose:
        messages.append({"role": "system", "content": prose})
    parts = _GLAIVE_TURN.split(chat)
    if parts[0].strip():
        raise RowError(
            "glaive 'chat' must start with a USER:, ASSISTANT: or FUNCTION RESPONSE: turn, "
            f"not {parts[0].strip()[:40]!r}"
        )
    calls = 0
    for speaker, text in zip(parts[1::2], parts[2::2], strict=True):
        role = GLAIVE_SPEAKERS[speaker]
        text = text.replace(_GLAIVE_END, "").strip()
        if role == "assistant" and "<functioncall>" in text:
            before, _, payload = text.partition("<functioncall>")
            calls += 1
            call_id = f"call_{calls}"
            name, arguments = _glaive_call(payload.strip(), len(messages))
            messages.append(
                {
                    "role": "assistant",
                    "content": before.strip(),
                    "tool_calls": [
                        {
                            "id": call_id,
                            "type": "function",
                            "function": {"name": name, "arguments": arguments},
                        }
                    ],
                }
            )
        elif role == "tool":
            message = {"role": "tool", "content": text}
            if calls:
                message["tool_call_id"] = f"call_{calls}"
            messages.append(message)
        else:
            messages.append({"role": role, "content": text})
    return messages, tools


def _glaive_system(system: str) -> tuple[str, list[dict] | None]:
    text = system.strip()
    if text.startswith("SYSTEM:"):
        text = text[len("SYSTEM:") :].strip()
    start = text.find("{")
    if start < 0:
        return text, None
    decoder = json.JSONDecoder()
    tools, rest = [], text[start:]
    while rest:
        try:
            function, end = decoder.raw_decode(rest)
        except RecursionError:
            raise RowError("glaive 'system' has a function definition nested too deeply") from None
        except json.JSONDecodeError as exc:
            raise RowError(
                f"glaive 'system' has a function definition that is not JSON ({exc.msg} at "
                f"character {start + exc.pos}); fix or remove the row"
            ) from None
        if not isinstance(function, dict) or "name" not in function:
            raise RowError("glaive 'system' has a JSON value that is not a function with a name")
        tools.append({"type": "function", "function": function})
        rest = rest[end:].lstrip()
    return text[:start].strip(), tools


def _glaive_call(payload: str, index: int) -> tuple[str, str]:
    """Name and JSON arguments of a ``<functioncall>``: glaive quotes the arguments object in
    single quotes, which is not JSON, so a strict parse is tried first and then that shape."""
    try:
        call = json.loads(payload)
    except RecursionError:
        raise RowError(f"glaive turn {index} has a <functioncall> nested too deeply") from None
    except json.JSONDecodeError:
        match = _GLAIVE_CALL.match(payload)
        if match is None:
            raise RowError(
                f"glaive turn {index} has a <functioncall> that is not "
                '{"name": ..., "arguments": ...}; fix or remove the row'
            ) from None
        return match["name"], match["args"]
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        raise RowError(f"glaive turn {index} has a <functioncall> without a function name")
    arguments = call.get("arguments", {})
    if not isinstance(arguments, str):
        arguments = _arguments_text(arguments, f"glaive turn {index}'s <functioncall> arguments")
    return call["name"], arguments


def _openai_messages(value: object) -> list[dict]:
    if not isinstance(value, list) or not value:
        raise RowError("'messages' is empty or not a list; give at least one user message")
    out = []
    for index, message in enumerate(value):
        where = f"messages[{index}]"
        if not isinstance(message, dict):
            raise RowError(f"{where} is not an object with 'role' and 'content'")
        role = message.get("role")
        if not isinstance(role, str):  # a list or an object is no role (nor hashable)
            given = "no role" if role is None else f"a role that is a JSON {_json_kind(role)}"
            raise RowError(f"{where} has {given}; use one of system, user, assistant, tool")
        if role not in OPENAI_ROLES:
            raise RowError(
                f"{where} has unknown role {role[:40]!r}; use one of system, user, assistant, tool"
            )
        content = message.get("content")
        tool_calls = message.get("tool_calls")
        if role == "assistant" and content is None and tool_calls:
            content = ""
        if not isinstance(content, str):
            raise RowError(
                f"{where}.content is {type(content).__name__}, not a string; "
                "flatten multi-part content to text"
            )
        clean: dict = {"role": role, "content": content}
        if role == "assistant":
            clean.update(_kept_reasoning(message, where))
        if role == "assistant" and tool_calls:
            if not isinstance(tool_calls, list):
                raise RowError(f"{where}.tool_calls must be a list")
            tool_calls = _sendable_calls(tool_calls, where)
            _check_arguments_depth(tool_calls, where)
            clean["tool_calls"] = tool_calls
        if role == "tool" and "tool_call_id" in message:
            clean["tool_call_id"] = message["tool_call_id"]
        if isinstance(message.get("name"), str):
            clean["name"] = message["name"]
        out.append(clean)
    return out


# An assistant message's reasoning fields, kept and sent: templates render them (Qwen3's after
# the last user turn, GLM-5.3's on every turn, ...), and vLLM accepts both on a request's
# assistant messages (``reasoning_content`` becomes ``reasoning`` unless that is set).
REASONING_FIELDS = ("reasoning_content", "reasoning")


def _kept_reasoning(message: dict, where: str) -> dict:
    """The reasoning fields of an assistant message that are text (RowError for another kind)."""
    kept = {}
    for name in REASONING_FIELDS:
        value = message.get(name)
        if value is None:
            continue
        if not isinstance(value, str):
            raise RowError(
                f"{where}.{name} is a JSON {_json_kind(value)}, not text; give the reasoning as "
                "a string or leave the field out"
            )
        kept[name] = value
    return kept


def _sendable_calls(tool_calls: list, where: str) -> list:
    """The calls as the engine's request schema takes them: ``arguments`` is text, so arguments
    given as an object are sent as ``json.dumps(obj, ensure_ascii=False)`` (vLLM answers an
    object with HTTP 400; it parses the text back into the same object before the template
    renders). RowError for arguments that are neither text nor an object. The row is not changed.
    """
    calls = []
    for index, call in enumerate(tool_calls):
        at = f"{where}.tool_calls[{index}]"
        if not isinstance(call, dict):
            raise RowError(
                f"{at} is a JSON {_json_kind(call)}, not an object with 'function': 'name' "
                "and 'arguments'; fix or remove the row"
            )
        nested = isinstance(call.get("function"), dict)
        function = call["function"] if nested else call
        arguments = function.get("arguments")
        if isinstance(arguments, dict):
            field = "function.arguments" if nested else "arguments"
            function = {**function, "arguments": _arguments_text(arguments, f"{at}.{field}")}
            call = {**call, "function": function} if nested else function
        elif arguments is not None and not isinstance(arguments, str):
            field = "function.arguments" if nested else "arguments"
            raise RowError(
                f"{at}.{field} is a JSON {_json_kind(arguments)}; give the arguments as JSON "
                "text or as an object"
            )
        calls.append(call)
    return calls


def _arguments_text(arguments: dict, where: str) -> str:
    """An object of tool-call arguments as the JSON text the engine's request schema takes; a
    value JSON cannot hold (bytes, a decimal, NaN: a Parquet row's) refuses the row."""
    try:
        return json.dumps(arguments, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError):
        raise RowError(
            f"{where} holds a value JSON cannot hold (bytes, a decimal or NaN); give the "
            "arguments as JSON text or as an object of JSON values"
        ) from None


def _sharegpt_messages(value: object) -> list[dict]:
    if not isinstance(value, list) or not value:
        raise RowError("'conversations' is empty or not a list; give at least one human turn")
    out = []
    for index, turn in enumerate(value):
        where = f"conversations[{index}]"
        if not isinstance(turn, dict):
            raise RowError(f"{where} is not an object with 'from' and 'value'")
        speaker = turn.get("from")
        role = SHAREGPT_ROLES.get(speaker) if isinstance(speaker, str) else None
        if role is None:
            raise RowError(f"{where} has unknown speaker {speaker!r}; use human, gpt or system")
        text = turn.get("value")
        if not isinstance(text, str):
            raise RowError(f"{where}.value is {type(text).__name__}, not a string")
        out.append({"role": role, "content": text})
    return out


def _canonical(messages: list[dict], tools: list | None) -> bytes:
    """The row's messages and tools as sorted JSON (its id where it names none). RowError for a
    value JSON has no form for, which a Parquet or datasets column can hold (bytes, a decimal):
    every later stage sends or keys the row as JSON."""
    try:
        return orjson.dumps({"m": messages, "t": tools}, option=orjson.OPT_SORT_KEYS)
    except TypeError as exc:  # orjson.JSONEncodeError
        raise RowError(
            f"row holds a value JSON cannot hold ({exc}); make that column text or numbers, or "
            "remove the row"
        ) from None


def _row_id(explicit: object, label: str, canonical: bytes) -> str:
    if isinstance(explicit, str) and explicit:
        return explicit
    if isinstance(explicit, int) and not isinstance(explicit, bool):
        return str(explicit)
    return f"{Path(label).stem}-{hashlib.sha256(canonical).hexdigest()[:16]}"

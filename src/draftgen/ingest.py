"""Ingest: JSONL prompt files (OpenAI or ShareGPT rows) to validated conversations.

Rows stream one at a time, so an input of any size is never held in memory. Invalid rows become
``Rejection`` values carrying the file, the 1-based line and a sentence a person can act on.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson

OPENAI_ROLES = frozenset({"system", "user", "assistant", "tool"})
SHAREGPT_ROLES = {"system": "system", "human": "user", "user": "user", "gpt": "assistant"}
# One row larger than this is refused without being held in memory whole.
MAX_ROW_BYTES = 64 << 20


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


def read_conversations(paths: list[str]) -> Iterator[Conversation | Rejection]:
    """Yield every row of every input in order, as a conversation or a rejection."""
    for path in paths:
        yield from _read_file(path)


def _read_file(path: str) -> Iterator[Conversation | Rejection]:
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
            if not raw.strip():
                continue
            try:
                yield parse_row(raw, label=label, input=path, line=line_no)
            except RowError as exc:
                yield Rejection(input=path, line=line_no, reason=str(exc))


def _skip_rest_of_line(handle) -> int:
    skipped = 0
    while chunk := handle.readline(1 << 20):
        skipped += len(chunk)
        if chunk.endswith(b"\n"):
            break
    return skipped


def parse_row(raw: bytes, *, label: str, input: str, line: int) -> Conversation:
    try:
        row = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise RowError(f"line is not valid JSON ({exc}); fix or remove it") from None
    if not isinstance(row, dict):
        raise RowError("row is not a JSON object; each line must be one object with 'messages'")
    if "messages" in row:
        messages = _openai_messages(row["messages"])
    elif "conversations" in row:
        messages = _sharegpt_messages(row["conversations"])
    else:
        raise RowError(
            "row has no messages: give an OpenAI 'messages' list or ShareGPT 'conversations'"
        )
    if not any(m["role"] == "user" for m in messages):
        raise RowError("row has no user turn, so there is nothing for the model to answer")
    tools = row.get("tools")
    if tools is not None and not (
        isinstance(tools, list) and all(isinstance(t, dict) for t in tools)
    ):
        raise RowError("'tools' must be a list of objects (OpenAI function schemas) or absent")
    source_id = _row_id(row.get("id"), label, messages, tools)
    return Conversation(
        source_id=source_id,
        messages=tuple(messages),
        tools=tuple(tools) if tools else None,
        input=input,
        line=line,
    )


def _openai_messages(value: object) -> list[dict]:
    if not isinstance(value, list) or not value:
        raise RowError("'messages' is empty or not a list; give at least one user message")
    out = []
    for index, message in enumerate(value):
        where = f"messages[{index}]"
        if not isinstance(message, dict):
            raise RowError(f"{where} is not an object with 'role' and 'content'")
        role = message.get("role")
        if role not in OPENAI_ROLES:
            raise RowError(
                f"{where} has unknown role {role!r}; use one of system, user, assistant, tool"
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
        if role == "assistant" and tool_calls:
            if not isinstance(tool_calls, list):
                raise RowError(f"{where}.tool_calls must be a list")
            clean["tool_calls"] = tool_calls
        if role == "tool" and "tool_call_id" in message:
            clean["tool_call_id"] = message["tool_call_id"]
        if isinstance(message.get("name"), str):
            clean["name"] = message["name"]
        out.append(clean)
    return out


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


def _row_id(explicit: object, label: str, messages: list[dict], tools: list | None) -> str:
    if isinstance(explicit, str) and explicit:
        return explicit
    if isinstance(explicit, int) and not isinstance(explicit, bool):
        return str(explicit)
    digest = hashlib.sha256(
        orjson.dumps({"m": messages, "t": tools}, option=orjson.OPT_SORT_KEYS)
    ).hexdigest()
    return f"{Path(label).stem}-{digest[:16]}"

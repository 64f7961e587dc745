"""A completion in the store's rows and back: the statements that store one
(``completion_statements``), its raw message packed so each text is kept once, and the reads of
stored completions (``Completions``, the store's part), streamed or a batch at a time.
"""

from __future__ import annotations

import collections
import threading
import time
from array import array
from collections.abc import Iterator

import orjson

from draftgen.records import Completion, Rendering, StoredCompletion
from draftgen.store.schema import (
    INSERT_COMPLETION,
    INSERT_LOGPROB_TOKENS,
    INSERT_SERVER_IDS,
    SELECT_COMPLETIONS,
    StorePart,
)


class Completions(StorePart):
    """``Store.completions``: the reads of stored completions (the writes are the writer's)."""

    def stored_finishes(self) -> Iterator[tuple[str, str | None]]:
        """(key, finish_reason) of every stored completion, streamed: what a resume skips."""
        yield from self.db.execute("SELECT key, finish_reason FROM completions")

    def answer(self, key: str) -> tuple[str, str | None] | None:
        """(content, finish_reason) of the completion stored under ``key``, or None."""
        row = self.db.execute(
            "SELECT content, finish_reason FROM completions WHERE key = ?", (key,)
        ).fetchone()
        return None if row is None else (row[0] or "", row[1])

    def read(self, without_sample: bool = False) -> Iterator[StoredCompletion]:
        """Every stored completion (those without a sample yet, ``without_sample``), in
        (source_id, turn) order."""
        sql = SELECT_COMPLETIONS
        if without_sample:
            sql += " WHERE c.key NOT IN (SELECT key FROM samples)"
        cursor = self.db.execute(sql + " ORDER BY source_id, turn")
        names = [d[0] for d in cursor.description]
        for values in cursor:
            yield _stored_completion(dict(zip(names, values, strict=True)))

    def pending_completions(
        self,
        batch: int = 256,
        follow: threading.Event | None = None,
        stop: threading.Event | None = None,
        poll: float = 0.05,
    ) -> Iterator[list[StoredCompletion]]:
        """Completions without a sample, ``batch`` at a time, in storage order.

        No cursor stays open between batches, so samples can be written in between, and only
        one batch is in memory however many completions the store holds. With ``follow``, keep
        waiting for completions another connection stores until it is set, then take the rest
        (from the start again: nothing committed meanwhile is missed). ``stop`` ends at once.
        """
        sql = (
            SELECT_COMPLETIONS.replace("SELECT ", "SELECT c.rowid AS store_rowid, ", 1)
            + " WHERE c.rowid > ? AND c.key NOT IN (SELECT key FROM samples)"
            " ORDER BY c.rowid LIMIT ?"
        )
        after = 0
        # Keys of the last batches handed out: their samples may not be written yet when the
        # last pass starts over, and must not be handed out twice (``reconstruct_all`` holds up
        # to three unwritten: one being encoded, one reconstructed, one being written).
        recent: collections.deque[set[str]] = collections.deque(maxlen=4)
        last_pass = False
        while stop is None or not stop.is_set():
            following = follow is not None and not follow.is_set()
            cursor = self.db.execute(sql, (after, batch))
            names = [d[0] for d in cursor.description]
            rows = [dict(zip(names, values, strict=True)) for values in cursor.fetchall()]
            if not rows:
                if not following:
                    if follow is None or after == 0:
                        return
                    follow, after, last_pass = None, 0, True  # the last pass, from the start
                    continue
                follow.wait(poll)
                continue
            after = rows[-1].pop("store_rowid")
            if last_pass:
                rows = [row for row in rows if not any(row["key"] in keys for keys in recent)]
            else:
                recent.append({row["key"] for row in rows})
            for row in rows:
                row.pop("store_rowid", None)
            if rows:
                yield [_stored_completion(row) for row in rows]


def completion_statements(
    key: str,
    source_id: str,
    turn: int,
    request: bytes,
    completion: Completion,
    attempts: int,
    errors: list[dict],
    latency: float,
) -> list[tuple[str, tuple]]:
    """The statements that store one completion (and clear a failure of its key); a completion
    already stored under ``key`` is kept, so storing one twice changes nothing."""
    row = (
        key,
        source_id,
        turn,
        request,
        completion.generation_id,
        completion.provider,
        completion.model,
        completion.reasoning,
        completion.content,
        _json_or_none(completion.tool_calls),
        completion.finish_reason,
        completion.native_finish_reason,
        completion.prompt_tokens,
        completion.completion_tokens,
        completion.reasoning_tokens,
        completion.cost,
        _json_or_none(completion.usage),
        _json_or_none(pack_message(completion)),
        attempts,
        _json_or_none(errors),
        latency,
        time.time(),
        completion.endpoint,
        completion.endpoint_latency,
    )
    statements = [(INSERT_COMPLETION, row), ("DELETE FROM failures WHERE key = ?", (key,))]
    if completion.prompt_token_ids is not None and completion.completion_token_ids is not None:
        ids = (
            key,
            array("i", completion.prompt_token_ids).tobytes(),
            array("i", completion.completion_token_ids).tobytes(),
        )
        statements.append((INSERT_SERVER_IDS, ids))
    if completion.logprob_ids is not None:
        # Ids the logprobs named (``token_id:N``) share the table with token bytes: an object,
        # where bytes are a list.
        packed = orjson.dumps({"ids": completion.logprob_ids})
        statements.append((INSERT_LOGPROB_TOKENS, (key, packed)))
    elif completion.logprob_bytes is not None:
        packed = orjson.dumps([token.hex() for token in completion.logprob_bytes])
        statements.append((INSERT_LOGPROB_TOKENS, (key, packed)))
    return statements


def _stored_completion(row: dict) -> StoredCompletion:
    request = orjson.loads(row["request"])
    completion = Completion(
        generation_id=row["generation_id"],
        provider=row["provider"],
        model=row["model"],
        reasoning=row["reasoning"],
        content=row["content"],
        tool_calls=orjson.loads(row["tool_calls"]) if row["tool_calls"] else None,
        finish_reason=row["finish_reason"],
        native_finish_reason=row["native_finish_reason"],
        usage=orjson.loads(row["usage"]) if row["usage"] else {},
        raw_message=unpack_message(row["raw_message"], row["reasoning"], row["content"]),
        prompt_token_ids=_ids_or_none(row.get("server_prompt_ids")),
        completion_token_ids=_ids_or_none(row.get("server_completion_ids")),
    )
    if row.get("logprob_token_bytes") is not None:
        packed = orjson.loads(row["logprob_token_bytes"])
        if isinstance(packed, dict):
            completion.logprob_ids = list(packed.get("ids") or ()) or None
        else:
            completion.logprob_bytes = [bytes.fromhex(t) for t in packed]
    return StoredCompletion(
        key=row["key"],
        source_id=row["source_id"],
        turn=row["turn"],
        messages=request["messages"],
        tools=request.get("tools"),
        completion=completion,
        rendering=(
            Rendering.from_dict(request["rendering"])
            if isinstance(request.get("rendering"), dict)
            else None
        ),
        stored_at=row.get("created_at"),
        latency=row.get("latency"),
    )


def _ids_or_none(blob: bytes | None) -> list[int] | None:
    if blob is None:
        return None
    ids = array("i")
    ids.frombytes(blob)
    return ids.tolist()


# In a stored raw message, a text that is the completion's reasoning or content (OpenRouter sends
# the reasoning twice: ``reasoning`` and ``reasoning_details[].text``) is this one-key object
# naming the column that holds it, so the store keeps each text once.
SAME_AS = "\u0000same_as"
_SAME_AS_JSON = orjson.dumps(SAME_AS).decode()  # the key as it appears in the stored text
_SHARED_MIN = 64  # shorter texts are cheaper to keep than to point at


def pack_message(completion: Completion) -> object:
    """``completion.raw_message`` with its copies of the reasoning and content made references."""
    content, reasoning = completion.content, completion.reasoning
    content = content if content and len(content) >= _SHARED_MIN else None
    reasoning = reasoning if reasoning and len(reasoning) >= _SHARED_MIN else None
    if content is None and reasoning is None:
        return completion.raw_message

    def pack(value: object) -> object:
        # Compared, not looked up: hashing a fresh answer's texts costs more than comparing
        # them (a copy is usually the same object, and texts of other lengths differ at once).
        if isinstance(value, str):
            if value == reasoning:  # a text that is both is stored as the reasoning
                return {SAME_AS: "reasoning"}
            return {SAME_AS: "content"} if value == content else value
        if isinstance(value, dict):
            return {k: pack(v) for k, v in value.items()}
        if isinstance(value, list):
            return [pack(v) for v in value]
        return value

    return pack(completion.raw_message)


def unpack_message(text: str | None, reasoning: str | None, content: str | None) -> dict:
    """The raw message as the API sent it, from what ``pack_message`` stored."""
    if not text:
        return {}
    message = orjson.loads(text)
    if _SAME_AS_JSON not in text:
        return message
    columns = {"reasoning": reasoning, "content": content}

    def unpack(value: object) -> object:
        if isinstance(value, dict):
            if len(value) == 1 and SAME_AS in value:
                return columns[value[SAME_AS]]
            return {k: unpack(v) for k, v in value.items()}
        if isinstance(value, list):
            return [unpack(v) for v in value]
        return value

    return unpack(message)


def _json_or_none(value: object) -> str | None:
    return orjson.dumps(value).decode() if value else None

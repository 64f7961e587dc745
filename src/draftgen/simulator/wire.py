"""What the simulated provider puts on the wire: OpenRouter bodies, SSE chunks and error shapes.

The provider side of the simulation lives here: splitting reasoning from content, the provider
quirks (whitespace stripping, leaked end-of-turn, no split, older field names, re-serialised tool
arguments), and which provider each quirk that is code rather than chance belongs to.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

import orjson

from draftgen.simulator.model import DISABLED, ModelOutput

PROVIDERS: tuple[str, ...] = ("SiliconFlow", "Chutes", "AtlasCloud")
# The one provider whose parser strips edge whitespace from content (quirk strip_whitespace).
STRIPPING_PROVIDER = "Chutes"
# The one provider that renders gpt-oss prompts with the chat template (quirk template_renderer).
TEMPLATE_PROVIDER = "AtlasCloud"
# The one provider whose tool-call parser re-serialises arguments as a Go gateway writes JSON
# (quirk reserialize_arguments): compact, keys sorted, HTML characters escaped.
RESERIALISING_PROVIDER = "SiliconFlow"
# A provider rendering prompts with another revision of the chat template (quirk
# template_revision); it joins the simulated providers only while that quirk is configured.
REVISION_PROVIDER = "Parasail"
# The provider that answers ``SimConfig.slow_provider`` seconds later than the others.
SLOW_PROVIDER = "AtlasCloud"
# Quirks that are code of one provider, not chance of one response: attempts that draw one go
# to its provider, the others elsewhere, and that provider shows it on everything it serves.
BOUND_QUIRKS: dict[str, str] = {
    "strip_whitespace": STRIPPING_PROVIDER,
    "template_renderer": TEMPLATE_PROVIDER,
    "reserialize_arguments": RESERIALISING_PROVIDER,
    "template_revision": REVISION_PROVIDER,
}
# Providers that honour ``logprobs`` (with token bytes); the others send ``logprobs: null``.
LOGPROB_PROVIDERS: tuple[str, ...] = ("SiliconFlow", "Chutes")
# What the endpoints listing says of each provider: its tag and quantization.
ENDPOINT_FACTS: dict[str, tuple[str, str]] = {
    "SiliconFlow": ("siliconflow/fp8", "fp8"),
    "Chutes": ("chutes/int4", "int4"),
    "AtlasCloud": ("atlas-cloud/fp8", "fp8"),
    "Parasail": ("parasail/int4", "int4"),
}


def routing_names(provider: str) -> set[str]:
    """What ``provider.only/ignore/order`` may name ``provider`` by, lower case: its name, its
    endpoint's tag ("siliconflow/fp8") and the tag's provider slug ("siliconflow")."""
    tag = ENDPOINT_FACTS.get(provider, (provider.lower(), ""))[0]
    return {provider.lower(), tag, tag.partition("/")[0]}


@dataclass
class Delivery:
    """The texts as the provider sends them, kept as per-token pieces for streaming."""

    reasoning: list[str] | None  # None: the reasoning field is null (or absent)
    content: list[str]
    reasoning_key: str = "reasoning"  # or "reasoning_content"
    reasoning_absent: bool = False  # leave the key out instead of sending null
    applied: tuple[str, ...] = ()  # provider quirks that really changed something
    tool_calls: list[dict] | None = None  # structured calls parsed out of the generated markup
    # The sections whose tokens make up ``content``, in order (what logprobs would cover).
    content_kinds: tuple[str, ...] = ()

    @property
    def reasoning_text(self) -> str | None:
        return None if self.reasoning is None else "".join(self.reasoning)

    @property
    def content_text(self) -> str:
        return "".join(self.content)


def deliver(
    output: ModelOutput,
    quirks: set[str],
    rng: random.Random,
    exclude_reasoning: bool = False,
    tool_call: dict | None = None,
) -> Delivery:
    """Split the model's text into fields the way providers do, then apply provider quirks.

    ``tool_call`` is the call the model made ({"id", "name", "arguments"}); a provider parses
    complete markup into ``tool_calls`` and leaves a cut-off one as text in content.
    """
    applied: list[str] = []
    pieces = {s.kind: list(s.pieces) for s in output.sections}
    has_reasoning = output.layout != DISABLED
    content = list(pieces.get("content", []))
    kinds = ["content"]
    tool_calls = None
    if "tool_calls" in pieces:
        if tool_call is not None and output.finish_reason == "tool_calls":
            tool_calls = [_structured_call(tool_call, quirks, applied, rng)]
        else:
            content += pieces["tool_calls"]
            kinds.append("tool_calls")
    if "leak_eot" in quirks and "eot" in pieces:
        content += pieces["eot"]
        kinds.append("eot")
        applied.append("leak_eot")
    reasoning: list[str] | None = None
    absent = False
    if has_reasoning and "no_split" in quirks:
        content = (
            pieces.get("think_start", [])
            + pieces.get("reasoning", [])
            + pieces.get("think_end", [])
            + content
        )
        kinds = ["think_start", "reasoning", "think_end", *kinds]
        absent = rng.random() < 0.5
        applied.append("no_split")
    elif has_reasoning:
        reasoning = pieces.get("reasoning", [])
        if "empty_reasoning" in output.quirks and rng.random() < 0.5:
            reasoning = None  # some providers send null for an empty think block
    if "strip_whitespace" in quirks:
        stripped = _strip_pieces(content)
        if "".join(stripped) != "".join(content):
            content = stripped
            applied.append("strip_whitespace")
    key = "reasoning"
    if "reasoning_content_field" in quirks and has_reasoning and reasoning is not None:
        key = "reasoning_content"
        applied.append("reasoning_content_field")
    if exclude_reasoning and reasoning is not None:
        reasoning = None
        absent = True
        applied.append("reasoning_excluded")
    return Delivery(reasoning, content, key, absent, tuple(applied), tool_calls, tuple(kinds))


def logprobs_content(output: ModelOutput, delivery: Delivery, token_bytes: list[bytes]) -> list:
    """OpenAI-style ``logprobs.content`` entries for the generated tokens of the content."""
    entries = []
    for kind in delivery.content_kinds:
        section = output.section(kind)
        for token_id, piece in zip(section.ids, section.pieces, strict=True) if section else ():
            raw = token_bytes[token_id]
            entries.append(
                {"token": piece, "logprob": -0.01, "bytes": list(raw), "top_logprobs": []}
            )
    return entries


def token_id_logprobs(output: ModelOutput, token_bytes: list[bytes]) -> list:
    """vLLM's ``logprobs.content`` with ``return_tokens_as_token_ids``: an entry for every
    generated token (reasoning, markup, end of turn), spelled ``token_id:N``."""
    return [
        {
            "token": f"token_id:{token_id}",
            "logprob": -0.01,
            "bytes": list(token_bytes[token_id]),
            "top_logprobs": [],
        }
        for token_id in output.ids
    ]


def attach_stream_token_logprobs(chunks: list[dict], entries: list) -> None:
    """Spread every-token ``entries`` over all the chunks in order, as ``token_ids`` are."""
    count = len(chunks)
    for i, chunk in enumerate(chunks):
        start, end = len(entries) * i // count, len(entries) * (i + 1) // count
        for choice in chunk.get("choices") or ():
            choice["logprobs"] = {"content": entries[start:end], "refusal": None}


def attach_stream_logprobs(chunks: list[dict], entries: list) -> None:
    """Spread ``entries`` over the chunks that carry content (the last chunk if none does)."""
    carriers = [c for c in chunks if c["choices"] and c["choices"][0]["delta"].get("content")]
    carriers = carriers or chunks[-1:]
    count = len(carriers)
    for i, chunk in enumerate(carriers):
        start, end = len(entries) * i // count, len(entries) * (i + 1) // count
        chunk["choices"][0]["logprobs"] = {"content": entries[start:end], "refusal": None}


def _structured_call(call: dict, quirks: set[str], applied: list[str], rng: random.Random) -> dict:
    # The engine's parser first (the same at every provider), then the provider's own rewrite.
    arguments = call.get("returned", call["arguments"])
    if "reserialize_arguments" in quirks:
        written = go_json(json.loads(arguments))
        if written != arguments:
            arguments = written
            applied.append("reserialize_arguments")
    call_id = call["id"]
    if "rename_tool_call_id" in quirks:
        call_id = f"call_{rng.getrandbits(64):016x}"
        applied.append("rename_tool_call_id")
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": call["name"], "arguments": arguments},
    }


def go_json(value: object) -> str:
    """``value`` as Go's ``json.Marshal`` writes it: compact, map keys sorted, non-ASCII kept,
    and <, >, & escaped (they only occur inside strings, so replacing them is safe)."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    for char, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026")):
        text = text.replace(char, escaped)
    return text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def _strip_pieces(pieces: list[str]) -> list[str]:
    out = list(pieces)
    for i, piece in enumerate(out):
        stripped = piece.lstrip()
        out[i] = stripped
        if stripped:
            break
    for i in range(len(out) - 1, -1, -1):
        stripped = out[i].rstrip()
        out[i] = stripped
        if stripped:
            break
    return out


def usage(
    prompt_tokens: int, completion_tokens: int, reasoning_tokens: int, prices: tuple[float, float]
) -> dict:
    cost = round(prompt_tokens * prices[0] + completion_tokens * prices[1], 12)
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens_details": {"reasoning_tokens": reasoning_tokens},
        "prompt_tokens_details": {"cached_tokens": 0},
        "cost": cost,
        "is_byok": False,
        "cost_details": {"upstream_inference_cost": cost},
    }


def message(delivery: Delivery) -> dict:
    msg: dict = {"role": "assistant", "content": delivery.content_text}
    reasoning = delivery.reasoning_text
    if not (reasoning is None and delivery.reasoning_absent):
        msg[delivery.reasoning_key] = reasoning
    if delivery.reasoning_key == "reasoning" and reasoning:
        msg["reasoning_details"] = [
            {"type": "reasoning.text", "text": reasoning, "format": "unknown", "index": 0}
        ]
    msg["tool_calls"] = delivery.tool_calls
    msg["refusal"] = None
    return msg


def completion_body(
    head: dict,
    delivery: Delivery | None,
    finish_reason: str | None,
    usage_obj: dict | None,
    error: dict | None = None,
    content_null: bool = False,
) -> dict:
    """A non-streaming ``chat.completion`` body. ``head`` holds id, provider, model, created."""
    if delivery is None:  # cold start: nothing generated
        msg = {"role": "assistant", "content": None if content_null else "", "reasoning": None}
        msg["tool_calls"] = None
    else:
        msg = message(delivery)
    choice: dict = {
        "index": 0,
        "logprobs": None,
        "finish_reason": finish_reason,
        "native_finish_reason": finish_reason,
        "message": msg,
    }
    if error is not None:
        choice["error"] = error
    body = {**head, "object": "chat.completion", "choices": [choice]}
    if usage_obj is not None:
        body["usage"] = usage_obj
    return body


def error_object(code: int, message_text: str, error_type: str, **extra: object) -> dict:
    return {"code": code, "message": message_text, "metadata": {"error_type": error_type, **extra}}


def error_body(code: int, message_text: str, error_type: str, **extra: object) -> bytes:
    return orjson.dumps({"error": error_object(code, message_text, error_type, **extra)})


def upstream_error() -> dict:
    """The error an upstream failure carries in a 200 answer or a stream's last chunk."""
    return error_object(502, "Upstream error: connection reset", "provider_unavailable")


def huge_reasoning_detail() -> dict:
    """An encrypted reasoning item of about 4 MB, as OpenRouter may attach to long reasoning."""
    return {"type": "reasoning.encrypted", "data": "QUJD" * 1_000_000, "format": "unknown"}


def sse(obj: dict) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


KEEPALIVE = b": OPENROUTER PROCESSING\n\n"
DONE = b"data: [DONE]\n\n"


def delta_chunks(head: dict, delivery: Delivery, chunk_tokens: int) -> list[dict]:
    """Reasoning deltas first, then content deltas, ``chunk_tokens`` token pieces each."""
    chunks: list[dict] = []
    key = delivery.reasoning_key
    if delivery.reasoning:
        for text in _group(delivery.reasoning, chunk_tokens):
            delta: dict = {"role": "assistant", "content": "", key: text}
            if key == "reasoning":
                delta["reasoning_details"] = [
                    {"type": "reasoning.text", "text": text, "format": "unknown", "index": 0}
                ]
            chunks.append(_chunk(head, delta, None))
    for text in _group(delivery.content, chunk_tokens):
        delta = {"role": "assistant", "content": text}
        if key == "reasoning":
            delta["reasoning"] = None
        chunks.append(_chunk(head, delta, None))
    for index, call in enumerate(delivery.tool_calls or ()):
        # As OpenAI-style servers stream calls: id and name first, then argument fragments.
        opening = {"index": index, "id": call["id"], "type": "function"}
        opening["function"] = {"name": call["function"]["name"], "arguments": ""}
        chunks.append(_chunk(head, {"role": "assistant", "tool_calls": [opening]}, None))
        arguments = call["function"]["arguments"]
        half = len(arguments) // 2
        for fragment in (arguments[:half], arguments[half:]):
            piece = {"index": index, "function": {"arguments": fragment}}
            chunks.append(_chunk(head, {"role": "assistant", "tool_calls": [piece]}, None))
    return chunks


def attach_stream_ids(chunks: list[dict], prompt_ids: list[int], ids: list[int]) -> None:
    """vLLM's streamed ids: ``prompt_token_ids`` on the first chunk, ``token_ids`` on each.

    The ids are spread over the chunks in order (the last chunk, the finish, gets the rest);
    a client needs only their concatenation, which is exactly the generated ids.
    """
    if not chunks:
        return
    chunks[0]["prompt_token_ids"] = prompt_ids
    count = len(chunks)
    for i, chunk in enumerate(chunks):
        start, end = len(ids) * i // count, len(ids) * (i + 1) // count
        for choice in chunk.get("choices") or ():
            choice["token_ids"] = ids[start:end]


def finish_chunk(head: dict, finish_reason: str | None, error: dict | None = None) -> dict:
    chunk = _chunk(head, {"role": "assistant", "content": ""}, finish_reason)
    if error is not None:
        chunk["choices"][0]["error"] = error
    return chunk


def usage_chunk(head: dict, usage_obj: dict) -> dict:
    return {**head, "object": "chat.completion.chunk", "choices": [], "usage": usage_obj}


def _chunk(head: dict, delta: dict, finish_reason: str | None) -> dict:
    return {
        **head,
        "object": "chat.completion.chunk",
        "choices": [
            {
                "index": 0,
                "delta": delta,
                "finish_reason": finish_reason,
                "native_finish_reason": finish_reason,
                "logprobs": None,
            }
        ],
    }


def _group(pieces: list[str], size: int) -> list[str]:
    texts = ("".join(pieces[i : i + size]) for i in range(0, len(pieces), size))
    return [t for t in texts if t]

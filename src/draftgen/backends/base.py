"""The OpenAI-compatible chat completions every backend speaks: request bodies, responses, SSE
events and errors (as OpenRouter documents them); a backend module adds only what its server does
differently.

It turns every failure shape -- HTTP errors, errors inside HTTP 200 bodies, ``finish_reason:
"error"``, mid-stream error events, empty cold-start completions, ``usage`` counts or costs that
cannot be true -- into an ``ApiError`` that says whether to retry, slow down or stop.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace

import orjson

from draftgen.backends import RunSettings, SettingsError
from draftgen.records import Completion, GenerationSettings

# Fields under which servers return reasoning text: OpenRouter and new vLLM say "reasoning",
# older vLLM/SGLang/DeepSeek "reasoning_content".
REASONING_FIELDS = ("reasoning", "reasoning_content")


@dataclass(frozen=True)
class TokenPrompt:
    """A prompt as ids, for a server that generates from ids (``Backend.needs_prompt_ids``);
    the pipeline renders it (``draftgen.generate.native_turn``), the backend only sends it."""

    text: str
    ids: list[int]
    # The end-of-turn tokens: the server must stop there whatever eos its config names (Kimi's
    # tokenizer says ``[EOS]`` while its turns end with ``<|im_end|>``; GLM's tool turns end
    # with ``<|observation|>``, harmony's with ``<|call|>``).
    stop_ids: list[int]


@dataclass(frozen=True)
class Billed:
    """What an answer refused for its ``usage`` is still billed on (its counts and ``cost`` where
    they are believable, and the bytes of the answer, which bound its tokens where they are
    not), and what is kept of it: why it was refused, its ``usage`` as sent (JSON) and the
    answer itself (the body, or a stream's folded message, as JSON)."""

    prompt_tokens: int | None
    completion_tokens: int | None
    answer_bytes: int
    cost: float = 0.0  # its usage.cost where that is a finite number of dollars from 0 up
    reason: str = ""
    usage: str = ""
    answer: bytes = b""
    generation_id: str | None = None
    provider: str | None = None


@dataclass
class ApiError(Exception):
    kind: str
    message: str
    retryable: bool = True
    fatal: bool = False
    pushback: bool = False  # the server asked us to slow down
    retry_after: float | None = None
    status: int | None = None
    # An answer refused for its usage (a false cost, a count out of range) that the server has
    # delivered, so billed: ``--max-cost`` counts it all the same.
    billed: Billed | None = None

    def __str__(self) -> str:
        status = f"HTTP {self.status} " if self.status else ""
        return f"{status}{self.kind}: {self.message}"


def request_body(
    settings: GenerationSettings,
    messages: list[dict],
    tools: list | None,
    stream: bool,
    logprobs: bool = False,
) -> dict:
    """The chat completions body: every field of ``settings`` that is set (which ones, the
    backend's ``settings`` hook decided)."""
    body: dict = {"model": settings.model, "messages": messages, "stream": stream}
    if stream:
        # vLLM sends usage in a stream only when asked; OpenRouter accepts the field.
        body["stream_options"] = {"include_usage": True}
    if tools:
        body["tools"] = list(tools)
    if settings.max_tokens is not None:
        body["max_tokens"] = settings.max_tokens
    for name in ("temperature", "top_p", "seed", "reasoning", "provider", "chat_template_kwargs"):
        value = getattr(settings, name)
        if value is not None:
            body[name] = value
    if logprobs:
        # Providers without support answer with logprobs null, silently (OpenRouter documents it).
        body["logprobs"] = True
    return body


def server_settings(options: RunSettings, backend: str) -> dict:
    """The ``settings`` hook of a self-hosted server (vLLM, SGLang): template variables are sent,
    OpenRouter's ``reasoning`` and ``provider`` fields are refused."""
    given = options.reasoning_effort is not None or options.reasoning_max_tokens is not None
    if given or options.provider:
        raise SettingsError(
            f"reasoning and [openrouter.provider] are OpenRouter request fields; --backend "
            f"{backend} does not take them, so drop them or use --backend openrouter"
        )
    return {"chat_template_kwargs": options.chat_template_kwargs or None}


def parse_retry_after(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None  # an HTTP date: rare from these APIs, fall back to backoff
    return max(0.0, min(seconds, 600.0))


def error_from_status(status: int, retry_after_header: str | None, body: bytes) -> ApiError:
    """Classify a non-200 response."""
    error = _error_object(body)
    message = _short(error.get("message") or body[:200].decode("utf-8", "replace"))
    metadata = error.get("metadata") if isinstance(error.get("metadata"), dict) else {}
    error_type = metadata.get("error_type") or ""
    retry_after = parse_retry_after(retry_after_header)
    if status == 401 or error_type == "authentication":
        return ApiError("auth", f"the API rejected the key ({message})", False, True, status=status)
    if status == 402:
        transient = metadata.get("reason") == "in_flight_budget_exhausted" or (
            retry_after is not None and metadata.get("reason") != "weight_exceeds_budget"
        )
        if transient:
            return ApiError("budget_in_flight", message, True, False, True, retry_after, status)
        return ApiError(
            "payment", f"out of credits or over budget ({message})", False, True, status=status
        )
    if status == 429:
        return ApiError("rate_limited", message, True, False, True, retry_after, status)
    if status == 503:
        return ApiError("overloaded", message, True, False, True, retry_after, status)
    if status == 404:
        # OpenRouter's 404 for routing that leaves no provider: "No endpoints found matching
        # your provider preferences", "No allowed providers are available ...".
        routing = "provider" in message.lower()
        hint = (
            "check [openrouter.provider]: its only/ignore/order leave no provider of this model"
            if routing
            else "check --base-url and --model"
        )
        return ApiError("not_found", f"{message}; {hint}", False, True, status=status)
    if status in (408, 409, 425) or status >= 500:
        return ApiError("server_error", message, True, False, False, retry_after, status)
    # 400 (bad request, context length), 403 (moderation), 413, 422: this prompt will not work.
    kind = "context_length_exceeded" if error_type == "context_length_exceeded" else "rejected"
    return ApiError(kind, message, False, False, status=status)


def parse_completion(body: bytes) -> Completion:
    """Parse a non-streaming HTTP 200 body."""
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ApiError("malformed_response", f"response body is not JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise ApiError("malformed_response", "response body is not a JSON object")
    if obj.get("error"):
        raise _body_error(obj["error"])
    choices = obj.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ApiError("malformed_response", "response has no choices")
    choice = choices[0]
    message = choice.get("message") if isinstance(choice.get("message"), dict) else {}
    completion = Completion(
        generation_id=_str_or_none(obj.get("id")),
        provider=_str_or_none(obj.get("provider")),
        model=_str_or_none(obj.get("model")),
        reasoning=_reasoning_of(message),
        content=_str_or_none(message.get("content")),
        tool_calls=message.get("tool_calls")
        if isinstance(message.get("tool_calls"), list)
        else None,
        finish_reason=_str_or_none(choice.get("finish_reason")),
        native_finish_reason=_str_or_none(choice.get("native_finish_reason")),
        usage=_usage_of(obj, body, len(body)),
        raw_message=message,
    )
    _add_logprobs(completion, [choice.get("logprobs")])
    completion.prompt_token_ids, completion.completion_token_ids = offered_ids(obj, choice)
    if completion.finish_reason == "error":
        raise _body_error(
            choice.get("error") or {"message": "finish_reason is error"}, "finish_error"
        )
    _reject_empty(completion)
    return completion


class StreamAccumulator:
    """Folds SSE ``data:`` events into one ``Completion``."""

    def __init__(self) -> None:
        self.reasoning: list[str] = []
        self.content: list[str] = []
        self.tool_calls: list = []
        self.logprobs: list = []  # the choice's ``logprobs`` block of each chunk that had one
        self.finish_reason: str | None = None
        self.native_finish_reason: str | None = None
        self.usage: dict = {}
        self.generation_id: str | None = None
        self.provider: str | None = None
        self.model: str | None = None
        self.done = False
        # The finish reason came, and a usage object with it or after it (the last chunk): the
        # answer is whole although ``[DONE]`` has not come (``complete``).
        self.complete = False
        self.reasoning_field: str | None = None
        # The ids a server sends when asked (vLLM ``return_token_ids``): the prompt's in the
        # first chunk, the generated ones a few per chunk.
        self.prompt_ids: list[int] | None = None
        self.completion_ids: list[int] = []
        self.saw_ids = False
        self.bad_ids = False  # a chunk's ids were no list of ids: none are taken
        self._partial: list[bytes] = []  # the unfinished last line, in pieces
        self._partial_size = 0
        self._held = 0  # characters of the texts and tool calls, bytes of logprob entries
        self._loose = {"content": 0, "reasoning": 0}  # pieces not yet joined, of each text

    def answer_bytes(self) -> int:
        """The bytes of the texts and tool calls received so far."""
        texts = sum(len(t.encode("utf-8", "surrogatepass")) for t in self.content + self.reasoning)
        return texts + (len(orjson.dumps(self.tool_calls)) if self.tool_calls else 0)

    def text_chars(self) -> int:
        """About the characters of the texts and tool calls so far, at no cost (the unfinished
        line not among them): ``answer_bytes`` is at most 4 times as many."""
        return self._held

    def held_bytes(self) -> int:
        """About what the answer holds in memory so far (what the run's memory budget charges):
        its texts, a str's overhead for each of their pieces, its unfinished line."""
        pieces = len(self.content) + len(self.reasoning)
        return self._held + PIECE_OVERHEAD * pieces + self._partial_size

    def feed_bytes(self, data: bytes) -> None:
        """Consume raw bytes as they arrive; lines may be split anywhere and be of any length
        (an encrypted ``reasoning_details`` item can make one event several megabytes). Nothing
        after ``[DONE]`` or a ``complete`` answer's last event is read."""
        if b"\n" not in data:
            self._partial.append(data)  # pieces, not concatenation: a long line stays linear
            self._partial_size += len(data)
            return
        self._partial.append(data)
        lines = b"".join(self._partial).split(b"\n")
        self._partial = [lines.pop()]
        self._partial_size = len(self._partial[0])
        for line in lines:
            self.feed_line(line)
            if self.done or self.complete:
                return

    def feed_line(self, line: bytes) -> None:
        """Consume one line of the event stream (comments and blank lines are skipped)."""
        line = line.strip()
        if not line or line.startswith(b":"):
            return
        if not line.startswith(b"data:"):
            return  # "event:", "id:", "retry:" fields carry nothing we use
        data = line[5:].strip()
        if data == b"[DONE]":
            self.done = True
            return
        try:
            event = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise ApiError("malformed_response", f"stream event is not JSON ({exc})") from None
        if not isinstance(event, dict):
            raise ApiError("malformed_response", "stream event is not a JSON object")
        self.feed(event)

    def feed(self, event: dict) -> None:
        if event.get("error"):
            raise _body_error(event["error"], "midstream_error")
        self.generation_id = self.generation_id or _str_or_none(event.get("id"))
        self.provider = self.provider or _str_or_none(event.get("provider"))
        self.model = self.model or _str_or_none(event.get("model"))
        with_usage = isinstance(event.get("usage"), dict)
        if with_usage:
            self.usage = event["usage"]
        self._take_prompt_ids(event)
        choices = event.get("choices")
        for choice in choices if isinstance(choices, list) else ():
            if not isinstance(choice, dict):
                continue
            self._take_ids(choice)
            delta = choice.get("delta") if isinstance(choice.get("delta"), dict) else {}
            for name in REASONING_FIELDS:
                piece = delta.get(name)
                if isinstance(piece, str):
                    # Some servers repeat the delta under both names: take the first only.
                    self._add_text("reasoning", self.reasoning, piece)
                    self.reasoning_field = self.reasoning_field or name
                    break
            piece = delta.get("content")
            if isinstance(piece, str):
                self._add_text("content", self.content, piece)
            if isinstance(delta.get("tool_calls"), list):
                for piece in delta["tool_calls"]:
                    merge_tool_call_delta(self.tool_calls, piece)
                self._held += len(delta["tool_calls"]) * PIECE_OVERHEAD
            if isinstance(choice.get("logprobs"), dict):
                self.logprobs.append(choice["logprobs"])
                entries = choice["logprobs"].get("content")
                self._held += LOGPROB_ENTRY * (len(entries) if isinstance(entries, list) else 1)
            finish = _str_or_none(choice.get("finish_reason"))
            if finish:
                self.finish_reason = finish
                if finish == "error":
                    raise _body_error(choice.get("error") or {}, "midstream_error")
            native = _str_or_none(choice.get("native_finish_reason"))
            if native:
                self.native_finish_reason = native
        # OpenAI-compatible servers end with the usage chunk: after it comes only ``[DONE]``, so a
        # server that holds the connection open instead has delivered all it will.
        self.complete = self.complete or (with_usage and self.finish_reason is not None)

    def _take_prompt_ids(self, holder: dict) -> None:
        if self.prompt_ids is None and holder.get("prompt_token_ids") is not None:
            self.prompt_ids = _lenient_ids(holder["prompt_token_ids"])
            self.bad_ids = self.bad_ids or self.prompt_ids is None

    def _take_ids(self, choice: dict) -> None:
        self._take_prompt_ids(choice)
        if choice.get("token_ids") is not None:
            ids = _lenient_ids(choice["token_ids"])
            self.bad_ids = self.bad_ids or ids is None
            self.completion_ids.extend(ids or ())
            self.saw_ids = True

    def stream_ids(self) -> tuple[list[int] | None, list[int] | None]:
        """(prompt ids, completion ids) the stream carried; (None, None) if it carried none or
        a chunk's were malformed."""
        if self.bad_ids or self.prompt_ids is None or not self.saw_ids:
            return None, None
        return self.prompt_ids, self.completion_ids

    def _add_text(self, which: str, pieces: list[str], piece: str) -> None:
        """Append ``piece``; every ``LOOSE_PIECES`` pieces are joined into one: a small str
        costs ~50 bytes beyond its text, so a long answer's thousands of deltas would hold
        ten times its text."""
        pieces.append(piece)
        self._held += len(piece)
        self._loose[which] += 1
        if self._loose[which] == LOOSE_PIECES:
            pieces[-LOOSE_PIECES:] = ["".join(pieces[-LOOSE_PIECES:])]
            self._loose[which] = 0

    def finish(self) -> Completion:
        rest, self._partial = b"".join(self._partial), []
        if rest and not (self.done or self.complete):
            self.feed_line(rest)
        if not self.done and self.finish_reason is None:
            raise ApiError("connection_dropped", "the stream ended before its last event")
        message: dict = {"role": "assistant", "content": "".join(self.content)}
        if self.reasoning_field:
            message[self.reasoning_field] = "".join(self.reasoning)
        if self.tool_calls:
            message["tool_calls"] = self.tool_calls
        completion = Completion(
            generation_id=self.generation_id,
            provider=self.provider,
            model=self.model,
            reasoning="".join(self.reasoning) if self.reasoning_field else None,
            content="".join(self.content) if self.content else None,
            tool_calls=self.tool_calls or None,
            finish_reason=self.finish_reason,
            native_finish_reason=self.native_finish_reason,
            usage=self._checked_usage(message),
            raw_message=message,
        )
        if self.logprobs:
            _add_logprobs(completion, self.logprobs)
        completion.prompt_token_ids, completion.completion_token_ids = self.stream_ids()
        _reject_empty(completion)
        return completion

    def _checked_usage(self, message: dict) -> dict:
        """``checked_usage`` of the stream's usage; a refusal keeps the folded answer."""
        answer = {
            "id": self.generation_id,
            "provider": self.provider,
            "model": self.model,
            "finish_reason": self.finish_reason,
            "message": message,
            "usage": self.usage,
        }
        return _usage_of(answer, None, self.answer_bytes())


def _usage_of(answer: dict, body: bytes | None, answer_bytes: int) -> dict:
    """``checked_usage`` of ``answer``'s usage; a refusal's ``Billed`` keeps the answer (``body``
    as received, else ``answer`` as JSON), its id and provider."""
    try:
        return checked_usage(answer.get("usage"), answer_bytes)
    except ApiError as error:
        if error.billed is not None:
            error.billed = replace(
                error.billed,
                answer=body if body is not None else _json_text(answer).encode(),
                generation_id=_str_or_none(answer.get("id")),
                provider=_str_or_none(answer.get("provider")),
            )
        raise


# What a stream's answer holds beyond its text (``StreamAccumulator.held_bytes``): a str's header
# for each piece (its deltas are joined ``LOOSE_PIECES`` at a time), a logprob entry's dict.
PIECE_OVERHEAD = 56
LOOSE_PIECES = 1024
LOGPROB_ENTRY = 256

# The counts a completion is stored with: SQLite's INTEGER holds 64 bits, but an answer's id
# arrays are packed as 32-bit ints, so no real count comes near 2**31 and a bigger one is a lie
# (2**63 once killed the store's writer).
USAGE_COUNTS = (
    ("prompt_tokens",),
    ("completion_tokens",),
    ("completion_tokens_details", "reasoning_tokens"),
)
MAX_COUNT = 2**31 - 1


def checked_usage(usage: object, answer_bytes: int = 0) -> dict:
    """``usage`` if its counts and cost can be stored and summed, else an ``ApiError``
    (retried, like a malformed body) naming the field and its value, and what the answer is
    billed on (``Billed``: its valid counts, else ``answer_bytes``); a body without ``usage``
    has ``{}``.

    A missing or null count or ``cost`` is allowed (many servers send none: ``--max-cost``
    then counts the completion at listed prices); a count that is not an int from 0 to
    2**31-1, or a cost that is not a finite number of dollars from 0 up, is refused.
    """
    if not isinstance(usage, dict):
        return {}
    try:
        return _checked_usage(usage)
    except ApiError as error:
        cost = usage.get("cost")
        believable = isinstance(cost, (int, float)) and not isinstance(cost, bool)
        error.billed = Billed(
            _count_or_none(usage, ("prompt_tokens",)),
            _count_or_none(usage, ("completion_tokens",)),
            answer_bytes,
            float(cost) if believable and math.isfinite(cost) and cost >= 0 else 0.0,
            error.message,
            _json_text(usage),
        )
        raise


def _json_text(value: object) -> str:
    """``value`` as JSON whatever a server put in it (ints past 64 bits, NaN, lone surrogates):
    kept as sent."""
    return json.dumps(value, default=str)


def _count_or_none(usage: dict, path: tuple[str, ...]) -> int | None:
    value = usage.get(path[0])
    is_int = isinstance(value, int) and not isinstance(value, bool)
    return value if is_int and 0 <= value <= MAX_COUNT else None


def _checked_usage(usage: dict) -> dict:
    for path in USAGE_COUNTS:
        value = _usage_field(usage, path)
        is_int = isinstance(value, int) and not isinstance(value, bool)
        if value is not None and not (is_int and 0 <= value <= MAX_COUNT):
            raise _bad_usage(path, value, f"not a count from 0 to {MAX_COUNT}")
    cost = usage.get("cost")
    is_number = isinstance(cost, (int, float)) and not isinstance(cost, bool)
    if cost is not None and not (is_number and math.isfinite(cost) and cost >= 0):
        raise _bad_usage(("cost",), cost, "not a finite number of dollars from 0 up")
    return usage


def _usage_field(usage: dict, path: tuple[str, ...]) -> object:
    value: object = usage
    for index, name in enumerate(path):
        if value is None:
            return None
        if not isinstance(value, dict):
            # reasoning_tokens is read from inside: a details field that is no object is a lie.
            raise _bad_usage(path[:index], value, "not an object")
        value = value.get(name)
    return value


def _bad_usage(path: tuple[str, ...], value: object, expected: str) -> ApiError:
    shown = repr(value)
    shown = shown if len(shown) <= 40 else shown[:39] + "…"
    return ApiError("malformed_response", f"usage.{'.'.join(path)} is {shown}, {expected}")


def logprob_bytes_of(blocks: list) -> list[bytes] | None:
    """The bytes of each content token in ``logprobs`` blocks (one per choice or chunk).

    None unless every token carries its ``bytes``: a token's text alone cannot say which bytes
    of a character split across tokens it held.
    """
    tokens: list[bytes] = []
    seen = False
    for block in blocks:
        if not isinstance(block, dict) or not isinstance(block.get("content"), list):
            continue
        seen = True
        for entry in block["content"]:
            raw = entry.get("bytes") if isinstance(entry, dict) else None
            if not isinstance(raw, list) or not all(
                isinstance(b, int) and 0 <= b < 256 for b in raw
            ):
                return None
            tokens.append(bytes(raw))
    return tokens if seen else None


def _add_logprobs(completion: Completion, blocks: list) -> None:
    """The ids the logprobs name (``token_id:N``), else the bytes of their content tokens."""
    completion.logprob_ids = logprob_ids_of(blocks)
    if completion.logprob_ids is None:
        completion.logprob_bytes = logprob_bytes_of(blocks)


TOKEN_ID_SPELLING = "token_id:"


def logprob_ids_of(blocks: list) -> list[int] | None:
    """The id of each token of ``logprobs`` blocks that spell every token ``token_id:N`` (vLLM's
    ``return_tokens_as_token_ids``; its logprobs cover every generated token); None unless
    each one does."""
    ids: list[int] = []
    for block in blocks:
        if not isinstance(block, dict) or not isinstance(block.get("content"), list):
            continue
        for entry in block["content"]:
            token = entry.get("token") if isinstance(entry, dict) else None
            if not isinstance(token, str) or not token.startswith(TOKEN_ID_SPELLING):
                return None
            number = token[len(TOKEN_ID_SPELLING) :]
            if not number.isascii() or not number.isdigit():
                return None
            ids.append(int(number))
    return ids or None


def offered_ids(obj: dict, choice: dict) -> tuple[list[int] | None, list[int] | None]:
    """(prompt ids, completion ids) a server put in an answer it was asked for them in: vLLM's
    top-level ``prompt_token_ids`` and ``choices[0].token_ids``, SGLang's on the choice and in
    ``meta_info.output_ids``; (None, None) unless both are there and are lists of ids (a
    text-only answer is read from its text, not refused)."""
    meta = choice.get("meta_info") if isinstance(choice.get("meta_info"), dict) else {}
    prompt = obj.get("prompt_token_ids", choice.get("prompt_token_ids"))
    generated = next(
        (v for v in (choice.get("token_ids"), meta.get("output_ids")) if v is not None), None
    )
    prompt_ids, completion_ids = _lenient_ids(prompt), _lenient_ids(generated)
    if prompt_ids is None or completion_ids is None:
        return None, None
    return prompt_ids, completion_ids


def _lenient_ids(value: object) -> list[int] | None:
    try:
        return token_ids_of(value)
    except ApiError:
        return None


def token_ids_of(value: object) -> list[int] | None:
    """``value`` as token ids (None if absent); an ``ApiError`` if it is not a list of ids."""
    if value is None:
        return None
    if not isinstance(value, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in value
    ):
        raise ApiError("malformed_response", "token ids are not a list of non-negative ints")
    return value


def with_ids(
    completion: Completion,
    prompt_ids: list[int] | None,
    completion_ids: list[int] | None,
    server: str,
    hint: str,
) -> Completion:
    """``completion`` with the ids the server returned; a fatal ``ApiError`` naming what is
    missing (and ``hint``: how to get it) if either is: exactness is the contract."""
    missing = [
        name
        for name, ids in (("prompt", prompt_ids), ("completion", completion_ids))
        if ids is None
    ]
    if missing:
        raise ApiError(
            "no_token_ids",
            f"the {server} server returned no {' and no '.join(missing)} token ids; {hint}",
            retryable=False,
            fatal=True,
        )
    completion.prompt_token_ids = prompt_ids
    completion.completion_token_ids = completion_ids
    return completion


def merge_tool_call_delta(calls: list, piece: object) -> None:
    """Fold one streamed tool-call delta into ``calls``: the first delta of an ``index`` opens a
    call (id, name), later ones append ``function.arguments`` fragments to it."""
    if not isinstance(piece, dict):
        return
    index = piece.get("index")
    index = index if isinstance(index, int) and not isinstance(index, bool) else len(calls)
    while len(calls) <= index:
        calls.append({"id": None, "type": "function", "function": {"name": "", "arguments": ""}})
    call = calls[index]
    if isinstance(piece.get("id"), str):
        call["id"] = piece["id"]
    if isinstance(piece.get("type"), str):
        call["type"] = piece["type"]
    function = piece.get("function") if isinstance(piece.get("function"), dict) else {}
    if isinstance(function.get("name"), str):
        call["function"]["name"] += function["name"]
    if isinstance(function.get("arguments"), str):
        call["function"]["arguments"] += function["arguments"]


def _reject_empty(completion: Completion) -> None:
    # Cold starts answer 200 with nothing in it; they are not billed, so ask again.
    if completion.finish_reason is None and not (
        completion.content or completion.reasoning or completion.tool_calls
    ):
        raise ApiError("empty_completion", "the provider returned an empty completion")
    if completion.finish_reason is None:
        raise ApiError("malformed_response", "the completion has no finish_reason")


def _body_error(error: object, kind: str = "error_in_body") -> ApiError:
    error = error if isinstance(error, dict) else {"message": str(error)}
    code = error.get("code")
    metadata = error.get("metadata") if isinstance(error.get("metadata"), dict) else {}
    message = _short(str(error.get("message") or "no message"))
    if code == 401 or metadata.get("error_type") == "authentication":
        return ApiError("auth", f"the API rejected the key ({message})", False, True, status=401)
    if code == 402 and metadata.get("reason") != "in_flight_budget_exhausted":
        return ApiError("payment", f"out of credits ({message})", False, True, status=402)
    pushback = code in (402, 429, 503)
    return ApiError(kind, message, True, False, pushback)


def _error_object(body: bytes) -> dict:
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        return {}
    error = obj.get("error") if isinstance(obj, dict) else None
    if isinstance(error, dict):
        return error
    if isinstance(error, str):
        return {"message": error}
    return {}


def _reasoning_of(message: dict) -> str | None:
    for name in REASONING_FIELDS:
        if isinstance(message.get(name), str):
            return message[name]
    details = message.get("reasoning_details")
    if isinstance(details, list):
        texts = [
            d.get("text")
            for d in details
            if isinstance(d, dict) and d.get("type") == "reasoning.text"
        ]
        if texts and all(isinstance(t, str) for t in texts):
            return "".join(texts)
    return None


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _short(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"

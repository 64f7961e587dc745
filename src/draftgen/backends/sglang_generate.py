"""SGLang's native ``/generate``: draftgen sends the prompt ids it rendered, the server returns
the ids it generated (``output_ids``) and ``meta_info`` with its counts and finish reason.

What the real server does (sgl-project/sglang, ``managers/schedule_batch.py`` ``check_finished``
and ``managers/detokenizer_manager.py`` ``trim_matched_stop``): the scheduler appends each token to
``output_ids`` before it checks for a stop, so a stop token is **kept** in ``output_ids`` and
counted in ``completion_tokens``; ``meta_info.finish_reason`` is ``{"type": "stop", "matched":
<that id>}``; only ``text`` has it trimmed (unless ``no_stop_trim``). A length cut is ``{"type":
"length", "length": n}``, a server-side abort ``{"type": "abort", "message": ...}``. Omitting
``max_new_tokens`` means 128; sending null means up to the context length. Streams send
``data: {"text", "output_ids", "meta_info"}`` events and ``data: [DONE]``; ``output_ids`` are
cumulative by default and deltas on servers started with incremental streaming output, and
``meta_info.completion_tokens`` (always the running total) tells the two apart. Errors come as
``{"error": {"message": ...}}``: an HTTP 400 body, or a stream event.

The server returns no prompt ids and no reasoning split: the pipeline fills both in
(``draftgen.generate.native_turn``), so this module knows the wire and nothing of tokenizers.
"""

from __future__ import annotations

from functools import partial

import orjson

from draftgen.backends import Backend, base
from draftgen.backends.base import TokenPrompt, token_ids_of
from draftgen.records import Completion, GenerationSettings

MISSING_IDS_HINT = (
    "use an SGLang release whose /generate returns output_ids, or --backend sglang for its chat "
    "completions"
)


def request_body(
    settings: GenerationSettings,
    messages: list[dict],
    tools: list | None,
    stream: bool,
    logprobs: bool = False,
    *,
    prompt: TokenPrompt,
) -> dict:
    """The ``/generate`` body; ``messages`` and ``tools`` are already rendered into ``prompt``.

    ``logprobs`` is not asked for: the ids themselves are exact.
    """
    sampling: dict = {
        # Null, not absent: absent means 128 tokens, null means up to the context length.
        "max_new_tokens": settings.max_tokens,
        # Tool-call markup is made of special tokens; the text must keep them to be readable.
        "skip_special_tokens": False,
        "spaces_between_special_tokens": False,
    }
    if prompt.stop_ids:
        sampling["stop_token_ids"] = list(prompt.stop_ids)
    for name, field in (
        ("temperature", "temperature"),
        ("top_p", "top_p"),
        ("seed", "sampling_seed"),
    ):
        value = getattr(settings, name)
        if value is not None:
            sampling[field] = value
    return {"input_ids": list(prompt.ids), "sampling_params": sampling, "stream": stream}


def parse_completion(body: bytes) -> Completion:
    """Parse a non-streaming HTTP 200 body."""
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise base.ApiError("malformed_response", f"response body is not JSON ({exc})") from None
    if isinstance(obj, list) and len(obj) == 1:
        obj = obj[0]  # a batch of one, as some proxies answer
    if not isinstance(obj, dict):
        raise base.ApiError("malformed_response", "response body is not a JSON object")
    if obj.get("error"):
        raise _error(obj["error"], "error_in_body")
    return completion_of(obj.get("output_ids"), obj.get("meta_info"))


def completion_of(output_ids: object, meta: object) -> Completion:
    """The completion of a finished generation's ids and ``meta_info``."""
    if not isinstance(meta, dict):
        raise base.ApiError("malformed_response", "the response has no meta_info object")
    ids = token_ids_of(output_ids)
    finish = meta.get("finish_reason")
    if finish is None and not ids:
        raise base.ApiError("empty_completion", "the server returned an empty completion")
    if not isinstance(finish, dict) or not isinstance(finish.get("type"), str):
        raise base.ApiError("malformed_response", "meta_info.finish_reason has no type")
    kind = finish["type"]
    if kind == "abort":
        message = base._short(str(finish.get("message") or "no message"))
        status = finish.get("status_code")
        if isinstance(status, int) and 400 <= status < 500 and status not in (408, 429):
            # The request itself is refused (prompt longer than the context, bad parameter).
            raise base.ApiError("rejected", message, retryable=False, status=status)
        raise base.ApiError("finish_error", f"the server aborted the generation ({message})")
    if kind not in ("stop", "length"):
        raise base.ApiError("malformed_response", f"unknown finish_reason type {kind!r}")
    if ids is None:
        raise base.ApiError(
            "no_token_ids",
            f"the SGLang server returned no output_ids; {MISSING_IDS_HINT}",
            retryable=False,
            fatal=True,
        )
    usage: dict = {}
    for name in ("prompt_tokens", "completion_tokens"):
        if isinstance(meta.get(name), int):
            usage[name] = meta[name]
    if len(usage) == 2:
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
    if isinstance(meta.get("cached_tokens"), int):
        usage["prompt_tokens_details"] = {"cached_tokens": meta["cached_tokens"]}
    return Completion(
        generation_id=base._str_or_none(meta.get("id")),
        provider=None,
        model=None,
        reasoning=None,  # split from the ids by draftgen.generate.native_turn
        content=None,
        tool_calls=None,  # /generate parses nothing: tool-call markup stays in the text
        finish_reason=kind,
        native_finish_reason=kind,
        usage=base.checked_usage(usage),
        raw_message={"finish_reason": finish},
        completion_token_ids=ids,
    )


class StreamAccumulator(base.StreamAccumulator):
    """Folds ``/generate`` SSE events into one ``Completion`` (cumulative or delta ids).

    The base class gives the SSE framing (split lines, comments, ``[DONE]``); events differ.
    """

    def __init__(self) -> None:
        super().__init__()
        self.ids: list[int] = []
        self.meta: dict | None = None

    def feed(self, event: dict) -> None:
        if event.get("error"):
            raise _error(event["error"], "midstream_error")
        meta = event.get("meta_info")
        if not isinstance(meta, dict):
            raise base.ApiError("malformed_response", "a stream event has no meta_info object")
        ids = token_ids_of(event.get("output_ids")) or []
        total = meta.get("completion_tokens")
        if not isinstance(total, int):
            raise base.ApiError("malformed_response", "a stream event has no completion_tokens")
        # completion_tokens is the running total: it says whether these ids are all so far
        # (the default) or only the new ones (incremental streaming output).
        if len(self.ids) + len(ids) == total:
            self.ids.extend(ids)
        elif len(ids) == total and ids[: len(self.ids)] == self.ids:
            self.ids = list(ids)
        else:
            raise base.ApiError(
                "malformed_response",
                f"stream ids do not add up: {len(self.ids)} so far, {len(ids)} in this event, "
                f"completion_tokens {total}",
            )
        self.meta = meta

    def finish(self) -> Completion:
        rest, self._partial = b"".join(self._partial), []
        if rest and not self.done:
            self.feed_line(rest)
        if self.meta is None or self.meta.get("finish_reason") is None:
            if self.done and not self.ids:
                raise base.ApiError("empty_completion", "the server returned an empty completion")
            raise base.ApiError("connection_dropped", "the stream ended before its last event")
        return completion_of(self.ids, self.meta)


def _error(error: object, kind: str) -> base.ApiError:
    message = error.get("message") if isinstance(error, dict) else error
    return base.ApiError(kind, base._short(str(message or "no message")))


BACKEND = Backend(
    name="sglang-generate",
    id_source="ids",
    can_stream=True,
    request_body=request_body,
    parse_completion=parse_completion,
    stream_accumulator=StreamAccumulator,
    settings=partial(base.server_settings, backend="sglang-generate"),
    path="/generate",
    needs_api_key=False,
    needs_prompt_ids=True,
    server="sglang",
    help="SGLang's native /generate, sent draftgen's prompt ids (--base-url is the server root)",
)

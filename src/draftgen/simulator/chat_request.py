"""How the simulator reads a chat request: the body checked as the provider checks it, the prompt
rendered with the template variables the request sets, and the ``ChatRequest`` numbered.
"""

from __future__ import annotations

import contextlib
import hashlib
from typing import Any

import orjson

from draftgen.simulator.exchange import ChatRequest, RequestProblem
from draftgen.simulator.exchange import seeded_rng as _rng

# The default system prompt the template_revision provider's revision puts first.
REVISION_SYSTEM_PROMPT = "You are a helpful assistant."


class ChatRequestReader:
    """Mixed into ``Simulator`` through ``chat.ChatRoute``: a request body as the chat route, the
    batch rows and ``/generate`` read it (``chat_request``, ``_parse``)."""

    def _parse(self, body: Any) -> tuple[dict, str | None]:
        if not isinstance(body, dict):
            return {}, "request body must be a JSON object"
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return {}, "messages must be a non-empty array"
        if not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages):
            return {}, "every message must be an object with a role"
        tools = body.get("tools")
        if tools is not None and not isinstance(tools, list):
            return {}, "tools must be an array"
        if self.config.dialect != "openrouter" and (problem := _arguments_problem(messages)):
            return {}, problem
        max_tokens = body.get("max_tokens", body.get("max_completion_tokens"))
        if max_tokens is not None and (
            isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1
        ):
            return {}, "max_tokens must be a positive integer"
        model = body.get("model")
        if not isinstance(model, str) or not model:
            return {}, "model is required"
        problem = _sampling_problem(body)
        if problem:
            return {}, problem
        return body, None

    def chat_request(self, body: Any) -> ChatRequest:
        """A valid chat request from its body, rendered, numbered and counted as an attempt of
        its prompt (live requests and batch rows alike); ``RequestProblem`` says what is wrong."""
        body, problem = self._parse(body)
        if problem:
            raise RequestProblem(problem)
        reasoning_opts = body.get("reasoning") if isinstance(body.get("reasoning"), dict) else {}
        template_kwargs = self._template_kwargs(body, reasoning_opts)
        try:
            prompt = self.render(body["messages"], body.get("tools"), template_kwargs or None)
        except Exception as exc:  # template errors come in many types
            raise RequestProblem(f"cannot render the chat template: {exc}") from None
        self._valid_requests += 1
        req = ChatRequest(
            model=body["model"],
            prompt=prompt,
            stream=bool(body.get("stream")),
            max_tokens=body.get("max_tokens", body.get("max_completion_tokens")),
            exclude_reasoning=reasoning_opts.get("exclude") is True,
            provider_prefs=body.get("provider") if isinstance(body.get("provider"), dict) else {},
            attempt=self.attempts[prompt.sha256],
            number=self._valid_requests,
        )
        self._other_prompts(req, body, template_kwargs)
        forced = body.get("tool_choice") not in (None, "auto", "none")
        req.tool_call = self.tool_call_for(body.get("tools"), prompt, req.attempt, forced)
        req.want_logprobs = body.get("logprobs") is True
        dialect = self.config.dialect
        if dialect == "vllm":
            req.want_prompt_ids = req.want_completion_ids = body.get("return_token_ids") is True
            req.want_token_id_logprobs = body.get("return_tokens_as_token_ids") is True
            options = body.get("stream_options")
            asked = isinstance(options, dict) and options.get("include_usage") is True
            req.want_stream_usage = asked  # vLLM streams usage only when asked
        elif dialect == "sglang" and not req.stream:  # SGLang returns ids only unstreamed
            req.want_prompt_ids = body.get("return_prompt_token_ids") is True
            req.want_completion_ids = body.get("return_meta_info") is True
        self.attempts[prompt.sha256] += 1
        self.models_seen.setdefault(req.model, None)
        return req

    def _template_kwargs(self, body: dict, reasoning_opts: dict) -> dict:
        """The template variables the request sets, as the provider renders the prompt."""
        # A provider maps the reasoning settings onto the family's template variables (one
        # with the ignore_thinking_switch quirk renders the template's default instead); a
        # self-hosted engine ignores OpenRouter's ``reasoning`` and reads chat_template_kwargs.
        template_kwargs = (
            self.profile.template_variables(reasoning_opts)
            if self.config.dialect == "openrouter"
            else {}
        )
        if template_kwargs and self._ignores_switch(body["messages"]):
            self.stats["ignore_thinking_switch"] += 1
            template_kwargs = {}
        if self.profile.prompt_renderer == "harmony":
            # vLLM's harmony path reads the effort from the request, never chat_template_kwargs.
            if self.config.dialect != "openrouter" and body.get("reasoning_effort") is not None:
                template_kwargs["reasoning_effort"] = body["reasoning_effort"]
        elif isinstance(body.get("chat_template_kwargs"), dict):
            template_kwargs.update(body["chat_template_kwargs"])
        return template_kwargs

    def _other_prompts(self, req: ChatRequest, body: dict, template_kwargs: dict) -> None:
        """The prompt as the template_renderer and template_revision providers render it, where
        those quirks are on (``serve_with`` hands it to the provider that serves the attempt)."""
        if self.template_renderer is not None:
            with contextlib.suppress(Exception):  # a prompt the template refuses: harmony's
                req.template_prompt = self.render(
                    body["messages"],
                    body.get("tools"),
                    template_kwargs or None,
                    self.template_renderer,
                )
        if "template_revision" in self._bound:
            revised = self._revised_messages(body["messages"])
            if revised is not None:
                with contextlib.suppress(Exception):
                    req.revision_prompt = self.render(
                        revised, body.get("tools"), template_kwargs or None
                    )

    @staticmethod
    def _revised_messages(messages: list) -> list | None:
        """The messages as the other template revision sees them: a default system prompt
        first when the request has none (None: it has one, so both revisions agree)."""
        if messages[0].get("role") in ("system", "developer"):
            return None
        return [{"role": "system", "content": REVISION_SYSTEM_PROMPT}, *messages]

    def _ignores_switch(self, messages: list) -> bool:
        rate = self.config.quirks.get("ignore_thinking_switch", 0)
        if rate <= 0:
            return False
        digest = hashlib.blake2b(orjson.dumps(messages), digest_size=8).hexdigest()
        return _rng(self.config.seed, digest, "ignore_thinking_switch").random() < rate


def _arguments_problem(messages: list) -> str | None:
    """Why a self-hosted engine refuses the request's tool-call history: vLLM's request schema
    takes ``arguments`` as a string and answers an object with HTTP 400."""
    for index, message in enumerate(messages):
        calls = message.get("tool_calls")
        for number, call in enumerate(calls if isinstance(calls, list) else ()):
            function = call.get("function") if isinstance(call, dict) else None
            arguments = function.get("arguments") if isinstance(function, dict) else None
            if arguments is not None and not isinstance(arguments, str):
                return (
                    f"messages.{index}.tool_calls.{number}.function.arguments: "
                    "Input should be a valid string"
                )
    return None


def _sampling_problem(body: dict) -> str | None:
    """Why the sampling, reasoning or routing fields are malformed, as OpenRouter refuses them."""
    from draftgen.backends.openrouter import provider_problem, reasoning_problem

    def number(name: str) -> object:
        value = body.get(name)
        return None if isinstance(value, bool) else value

    temperature, top_p, seed = number("temperature"), number("top_p"), body.get("seed")
    if "temperature" in body and not (
        isinstance(temperature, (int, float)) and 0 <= temperature <= 2
    ):
        return "temperature must be a number from 0 to 2"
    if "top_p" in body and not (isinstance(top_p, (int, float)) and 0 < top_p <= 1):
        return "top_p must be a number above 0 and at most 1"
    if "seed" in body and (isinstance(seed, bool) or not isinstance(seed, int)):
        return "seed must be an integer"
    if "reasoning" in body and (problem := reasoning_problem(body["reasoning"])):
        return problem
    if "provider" in body and (problem := provider_problem(body["provider"])):
        return problem
    return None

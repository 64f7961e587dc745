"""Before the first request: does each endpoint answer, take the key, and serve the model?

A few short GETs per endpoint, all endpoints at once, so a wrong URL, a dead server or a refused
key stops a run in seconds with one sentence, instead of minutes of retries. An endpoint that
dies later in the run is what the retry and ejection logic (``draftgen.generate.endpoints``) is for.

What is asked is what the backends of the server family (``Backend.dialect``) declare as their
``probe`` (``draftgen.backends``), one of ``PROBE_CHECKS``:

- ``openrouter``: ``GET /key`` (401/403: the key is refused; 404: not OpenRouter itself, so
  ``GET /models`` stands in, and names vLLM or SGLang where its entries are ``owned_by`` one),
  then ``GET /models/{author}/{slug}/endpoints`` (404: no such model).
- ``listed-models`` (vLLM): ``GET /models``; vLLM answers only the names it serves (``owned_by:
  "vllm"``), so a model missing from that listing would fail every request.
- ``reachable`` (SGLang): ``GET /models`` for reachability and the key; SGLang serves its one
  model whatever name a request gives, so the name is not checked.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial
from urllib.parse import quote

import aiohttp
import orjson

from draftgen.backends import probe_of
from draftgen.generate.endpoints import EndpointSpec, endpoint_label, endpoint_specs
from draftgen.logs import add_secret
from draftgen.redact import redact

_log = logging.getLogger("draftgen.probe")
PROBE_TIMEOUT = 10.0  # seconds for each endpoint's checks together: a healthy server takes ms
AUTH_REFUSED = (401, 403)


class ProbeError(RuntimeError):
    """An endpoint cannot be used as given; the message is one sentence saying what to fix."""


@dataclass(frozen=True)
class ProbeResult:
    """What was learned of one endpoint: its URL as shown, what answers there, what was proven."""

    endpoint: str
    server: str  # openrouter | openai-compatible | vllm | sglang | simulator
    checked: str  # e.g. "key accepted, model listed"

    def as_dict(self) -> dict:
        return {"endpoint": self.endpoint, "server": self.server, "checked": self.checked}


async def probe_endpoints(
    base_url: str | Sequence[str | EndpointSpec],
    api_key: str | None,
    model: str,
    dialect: str,
    *,
    key_variable: str = "OPENROUTER_API_KEY",
    simulated: bool = False,
    timeout: float = PROBE_TIMEOUT,
) -> list[ProbeResult]:
    """Check every endpoint at once; raise ``ProbeError`` naming each one that cannot be used.

    ``dialect`` is the server family (``Backend.dialect``); ``key_variable`` names where the key
    came from, for the message; ``simulated`` marks the built-in simulator.
    """
    specs = endpoint_specs(base_url)
    add_secret(api_key)
    headers = {"User-Agent": "draftgen/0.1"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    checker = _Checker(api_key, model, dialect, key_variable, timeout)
    async with aiohttp.ClientSession(headers=headers) as session:
        outcomes = await asyncio.gather(
            *(checker.check(session, spec) for spec in specs), return_exceptions=True
        )
    problems = [str(o) for o in outcomes if isinstance(o, ProbeError)]
    for outcome in outcomes:
        if isinstance(outcome, BaseException) and not isinstance(outcome, ProbeError):
            raise outcome
    if problems:
        if len(specs) == 1:
            raise ProbeError(problems[0])
        shown = "; ".join(problems[:3]) + (
            f"; and {len(problems) - 3} more" if len(problems) > 3 else ""
        )
        raise ProbeError(
            f"{len(problems)} of {len(specs)} endpoints cannot be used, so nothing was sent "
            f"(remove or fix them): {shown}"
        )
    results = [o for o in outcomes if isinstance(o, ProbeResult)]
    if simulated:
        results = [ProbeResult(r.endpoint, "simulator", r.checked) for r in results]
    return results


class _Checker:
    def __init__(
        self, api_key: str | None, model: str, dialect: str, key_variable: str, timeout: float
    ) -> None:
        self.api_key = api_key
        self.model = model
        self.dialect = dialect
        self.key_variable = key_variable
        self.timeout = timeout

    async def check(self, session: aiohttp.ClientSession, spec: EndpointSpec) -> ProbeResult:
        base = spec.url.strip().rstrip("/")
        label = endpoint_label(spec.url)
        try:
            async with asyncio.timeout(self.timeout):
                checks = PROBE_CHECKS[probe_of(self.dialect)]
                return await checks(self, session, base, label)
        except TimeoutError:
            raise ProbeError(
                f"{label} did not answer within {self.timeout:g} s; check --base-url and that "
                "the server is up and reachable from here"
            ) from None
        except aiohttp.ClientConnectorError as exc:
            reason = exc.os_error.strerror or str(exc.os_error) if exc.os_error else str(exc)
            raise ProbeError(
                f"cannot connect to {label} ({redact(str(reason))}); check --base-url and that "
                "the server is up and reachable from here"
            ) from None
        except aiohttp.ClientError as exc:
            raise ProbeError(
                f"{label} broke off the connection ({exc.__class__.__name__}); check --base-url "
                "(http or https) and that the server is up"
            ) from None

    async def _get(self, session: aiohttp.ClientSession, url: str) -> tuple[int, bytes]:
        # Not followed: the run's POSTs never follow a redirect (they would carry the prompt
        # elsewhere), so a base URL that redirects is refused here, before the first request.
        async with session.get(url, allow_redirects=False) as response:
            if 300 <= response.status < 400:
                target = endpoint_label(response.headers.get("Location", "") or "?")
                raise ProbeError(
                    f"{endpoint_label(url)} answered HTTP {response.status} with a redirect to "
                    f"{target}; draftgen does not follow redirects, so use the final URL as "
                    "--base-url"
                )
            body = await response.read()
            kind = response.headers.get("Content-Type", "").split(";")[0] or "no content type"
            page = response.status < 300 or kind == "text/html"
            if page and body.strip() and not _is_json(body):
                # An HTML login page or a static file server answers everything: it is not the
                # API, and every request would fail as a dropped connection or a server error.
                # (A plain-text 404 is a route the API lacks, as aiohttp answers one.)
                raise ProbeError(
                    f"GET {endpoint_label(url)} answered HTTP {response.status} with {kind} "
                    f"({_start(body)}), not JSON: this is not an OpenAI-compatible API; check "
                    "--base-url (it usually ends in /v1, or /api/v1 for OpenRouter)"
                )
            return response.status, body

    def _refused(self, label: str, status: int, body: bytes) -> ProbeError:
        if not self.api_key:
            return ProbeError(
                f"{label} wants an API key (HTTP {status}) and none was given: export it in an "
                "environment variable and name that variable with --api-key-env"
            )
        return ProbeError(
            f"{label} refused the API key from ${self.key_variable} (HTTP {status}"
            f"{_said(body)}); check that the key is valid for this server"
        )

    async def _openrouter(
        self, session: aiohttp.ClientSession, base: str, label: str
    ) -> ProbeResult:
        status, body = await self._get(session, base + "/key")
        if status in AUTH_REFUSED:
            raise self._refused(label, status, body)
        if status in (404, 405):
            # An OpenAI-compatible API that is not OpenRouter: its listing still proves the key.
            status, body = await self._get(session, base + "/models")
            if status in AUTH_REFUSED:
                raise self._refused(label, status, body)
            # vLLM and SGLang name themselves in the listing: the proof probe then knows the
            # engine (``generate.proof``), and sends the thinking switch as it reads it.
            server = _engine_of(body) if status == 200 else None
            return ProbeResult(label, server or "openai-compatible", _answered(status))
        if status != 200:
            _log.warning(
                "%s answered GET /key with HTTP %d; going on, the requests will tell", label, status
            )
            return ProbeResult(label, "openrouter", _answered(status))
        # ``draftgen simulate`` names its key so: its data is synthetic, and reports say so.
        server = "simulator" if _key_label(body).startswith("draftgen simulator") else "openrouter"
        author, slash, slug = self.model.partition(":")[0].partition("/")
        if not slash or not author or not slug:
            return ProbeResult(label, server, "key accepted")
        path = f"/models/{quote(author, safe='')}/{quote(slug, safe='.-_')}/endpoints"
        status, body = await self._get(session, base + path)
        if status == 404:
            raise ProbeError(
                f"{label} has no model {self.model!r} (GET {path} answered 404); check --model "
                "against the ids at https://openrouter.ai/models"
            )
        if status == 200:
            return ProbeResult(label, server, "key accepted, model listed")
        return ProbeResult(label, server, "key accepted")

    async def _self_hosted(
        self,
        session: aiohttp.ClientSession,
        base: str,
        label: str,
        *,
        serves_listed_only: bool = False,
    ) -> ProbeResult:
        status, body = await self._get(session, base + "/models")
        if status in AUTH_REFUSED:
            raise self._refused(label, status, body)
        if status >= 500:
            _log.warning(
                "%s answered GET /models with HTTP %d; going on, the requests will tell",
                label,
                status,
            )
        if status != 200:
            return ProbeResult(label, self.dialect, _answered(status))
        served = _vllm_models(body) if serves_listed_only else None
        if served is None:
            return ProbeResult(label, self.dialect, "reachable, key accepted")
        if self.model not in served:
            names = ", ".join(repr(name) for name in served[:5])
            raise ProbeError(
                f"{label} serves {names}, not {self.model!r}: vLLM answers only the names it "
                f"serves, so pass --model {served[0]} (or start vLLM with --served-model-name "
                f"{self.model})"
            )
        return ProbeResult(label, "vllm", "reachable, key accepted, model listed")


# The checks a backend may name as its ``probe`` (``draftgen.backends.Backend.probe``).
PROBE_CHECKS: dict[str, Callable[..., Awaitable[ProbeResult]]] = {
    "openrouter": _Checker._openrouter,
    "listed-models": partial(_Checker._self_hosted, serves_listed_only=True),
    "reachable": _Checker._self_hosted,
}


def _vllm_models(body: bytes) -> list[str] | None:
    """The model names of a vLLM ``/v1/models`` listing; None if it is not vLLM's own."""
    try:
        data = orjson.loads(body).get("data")
    except (orjson.JSONDecodeError, AttributeError):
        return None
    if not isinstance(data, list) or not data:
        return None
    if not all(isinstance(m, dict) and m.get("owned_by") == "vllm" for m in data):
        return None  # another server's listing: whether it enforces the names is unknown
    return [str(m.get("id")) for m in data]


# What a self-hosted engine's ``/v1/models`` entries say in ``owned_by`` (SGLang's *unconfirmed*
# beyond its ``ModelCard`` default).
ENGINE_OWNERS = ("vllm", "sglang")


def _engine_of(body: bytes) -> str | None:
    """The engine a ``/models`` listing is from (every entry ``owned_by`` it), else None."""
    try:
        data = orjson.loads(body).get("data")
    except (orjson.JSONDecodeError, AttributeError):
        return None
    if not isinstance(data, list) or not data or not all(isinstance(m, dict) for m in data):
        return None
    owners = {m.get("owned_by") for m in data}
    owner = owners.pop() if len(owners) == 1 else None
    return owner if owner in ENGINE_OWNERS else None


def _key_label(body: bytes) -> str:
    try:
        label = orjson.loads(body)["data"]["label"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return ""
    return label if isinstance(label, str) else ""


def _is_json(body: bytes) -> bool:
    try:
        orjson.loads(body)
    except orjson.JSONDecodeError:
        return False
    return True


def _start(body: bytes) -> str:
    """The first characters of a body, on one line, redacted: enough to recognise a page."""
    text = " ".join(body[:200].decode("utf-8", "replace").split())
    return repr(redact(text[:60] + ("..." if len(text) > 60 else "")))


def _answered(status: int) -> str:
    return f"reachable (GET answered HTTP {status})"


def _said(body: bytes) -> str:
    """The server's own error message, short and redacted, for the sentence."""
    try:
        error = orjson.loads(body).get("error")
        message = error.get("message") if isinstance(error, dict) else error
    except (orjson.JSONDecodeError, AttributeError):
        message = None
    if not isinstance(message, str) or not message.strip():
        return ""
    message = " ".join(message.split())
    return ": " + redact(message[:120])

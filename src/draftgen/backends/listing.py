"""The model listings of an API, OpenRouter's shape: prices from ``GET {base_url}/models`` (what
``estimate`` prices a run with and ``run --batch`` counts ``--max-cost`` with), and a model's
providers from ``GET {base_url}/models/{author}/{slug}/endpoints`` (``draftgen providers``).
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from urllib.parse import quote

import aiohttp
import orjson

from draftgen.errors import DraftgenError
from draftgen.logs import add_secret

LISTING_TIMEOUT = 15.0  # seconds for GET /models; a slow listing is no reason to wait long


class ListingError(DraftgenError, RuntimeError):
    """A listing that cannot be read; the message is one sentence saying what to check."""


async def _get(url: str, api_key: str | None, follow_redirects: bool = True) -> tuple[int, bytes]:
    """(status, body) of ``GET url``, the key sent if there is one; aiohttp's errors raised."""
    add_secret(api_key)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    timeout = aiohttp.ClientTimeout(total=LISTING_TIMEOUT)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        async with session.get(url, headers=headers, allow_redirects=follow_redirects) as response:
            return response.status, await response.read()


async def listed_prices(
    base_url: str, model: str, api_key: str | None
) -> tuple[float, float] | str:
    """(prompt, completion) USD per token from ``GET {base_url}/models``, or why not."""
    entry = await listed_model(base_url, model, api_key)
    return entry if isinstance(entry, str) else prices_of(entry, model)


async def listed_model(base_url: str, model: str, api_key: str | None) -> dict | str:
    """``model``'s entry in ``GET {base_url}/models``, or why there are no listed prices."""
    url = base_url.rstrip("/") + "/models"
    try:
        status, body = await _get(url, api_key)
    except (aiohttp.ClientError, TimeoutError) as exc:
        return f"GET {url} failed ({exc.__class__.__name__}): no listed prices"
    if status != 200:
        return f"GET {url} answered HTTP {status}: no listed prices"
    try:
        data = orjson.loads(body).get("data")
    except (orjson.JSONDecodeError, AttributeError):
        return f"GET {url} did not return a model listing: no listed prices"
    for entry in data if isinstance(data, list) else ():
        if isinstance(entry, dict) and entry.get("id") == model:
            return entry
    return f"{model} is not in the listing at {url}: no listed prices"


def prices_of(entry: dict, model: str) -> tuple[float, float] | str:
    """(prompt, completion) USD per token of a listing's entry, or why not."""
    pricing = entry.get("pricing") if isinstance(entry.get("pricing"), dict) else {}
    try:
        # OpenRouter sends prices as decimal strings, USD per token.
        return float(pricing["prompt"]), float(pricing["completion"])
    except (KeyError, TypeError, ValueError):
        return f"the listing of {model} has no prompt/completion pricing"


def completion_limit(entry: dict) -> int | None:
    """The most tokens one answer of a listing's entry can have: its top provider's
    ``max_completion_tokens``, else its context length (None if the listing names neither)."""
    top = entry.get("top_provider") if isinstance(entry.get("top_provider"), dict) else {}
    for value in (top.get("max_completion_tokens"), top.get("context_length")):
        if (count := _count(value)) is not None and count > 0:
            return count
    count = _count(entry.get("context_length"))
    return count if count else None


# -- a model's providers -------------------------------------------------------------------------

TEXT_LIMIT = 200  # characters kept of a listed string: a name, not a document
# What OpenRouter's ``provider.only``/``order``/``ignore`` take: a provider's slug ("deepinfra",
# "deepinfra/fp8") or name. A listed tag or name of other characters is shown, never routed to.
ROUTE = re.compile(r"[A-Za-z0-9][A-Za-z0-9 ._/-]{0,99}")


@dataclass(frozen=True)
class ProviderEndpoint:
    """One provider serving a model, as the listing says; any field the listing got wrong or left
    out is None (prices in USD per token)."""

    name: str | None
    provider: str | None
    tag: str | None
    prompt_price: float | None
    completion_price: float | None
    quantization: str | None
    context_length: int | None
    max_completion_tokens: int | None
    status: int | str | None
    uptime: float | None  # percent of the last 30 minutes
    # The request fields this provider honours (``supported_parameters``: "logprobs", ...);
    # () where the listing gives none.
    parameters: tuple[str, ...] = ()

    @property
    def route(self) -> str | None:
        """What ``provider.only`` names this endpoint by: its tag, else its provider's name."""
        for text in (self.tag, self.provider):
            if text is not None and ROUTE.fullmatch(text):
                return text
        return None

    def as_dict(self) -> dict:
        return {**asdict(self), "route": self.route}


def model_path(model: str) -> str:
    """``/models/{author}/{slug}/endpoints`` of ``model`` (a ``:variant`` is not part of it)."""
    author, slash, slug = model.partition(":")[0].partition("/")
    if not slash or not author or not slug:
        raise ListingError(
            f"{model!r} is not a model id of the form author/slug, e.g. moonshotai/kimi-k2.5"
        )
    return f"/models/{quote(author, safe='')}/{quote(slug, safe='.-_')}/endpoints"


async def model_endpoints(base_url: str, model: str, api_key: str | None) -> list[ProviderEndpoint]:
    """The providers of ``model`` from ``GET {base_url}/models/{author}/{slug}/endpoints``;
    ``ListingError`` with one sentence if the listing cannot be had. Redirects are not followed
    (the key would go with them)."""
    url = base_url.rstrip("/") + model_path(model)
    try:
        status, body = await _get(url, api_key, follow_redirects=False)
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        raise ListingError(
            f"GET {url} failed ({exc.__class__.__name__}); check --base-url and that the server "
            "is up and reachable from here"
        ) from None
    if status == 404:
        raise ListingError(
            f"there is no model {model!r} at {base_url} (GET {url} answered 404); check the id "
            "against https://openrouter.ai/models"
        )
    if status != 200:
        raise ListingError(
            f"GET {url} answered HTTP {status}"
            + (", a redirect that draftgen does not follow" if 300 <= status < 400 else "")
            + "; check --base-url (and the key in --api-key-env)"
        )
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError:
        document = None
    data = document.get("data") if isinstance(document, dict) else None
    endpoints = data.get("endpoints") if isinstance(data, dict) else None
    if not isinstance(endpoints, list):
        raise ListingError(
            f"GET {url} did not return a model's endpoint listing (JSON with data.endpoints); "
            "check --base-url (OpenRouter's is https://openrouter.ai/api/v1)"
        )
    return [parse_endpoint(entry) for entry in endpoints if isinstance(entry, dict)]


def parse_endpoint(entry: dict) -> ProviderEndpoint:
    """One entry of ``data.endpoints``, every field checked: what is not what it must be is None."""
    pricing = entry.get("pricing") if isinstance(entry.get("pricing"), dict) else {}
    return ProviderEndpoint(
        name=_text(entry.get("name")),
        provider=_text(entry.get("provider_name")),
        tag=_text(entry.get("tag")),
        prompt_price=_price(pricing.get("prompt")),
        completion_price=_price(pricing.get("completion")),
        quantization=_text(entry.get("quantization")),
        context_length=_count(entry.get("context_length")),
        max_completion_tokens=_count(entry.get("max_completion_tokens")),
        status=_status(entry.get("status")),
        uptime=_number(entry.get("uptime_last_30m"), 0, 100),
        parameters=_names(entry.get("supported_parameters")),
    )


def _names(value: object) -> tuple[str, ...]:
    if not isinstance(value, list):
        return ()
    return tuple(v[:TEXT_LIMIT] for v in value if isinstance(v, str) and v)


def _status(value: object) -> int | str | None:
    # OpenRouter's is a number (0: up, below 0: degraded); its documentation shows words.
    return _text(value) if isinstance(value, str) else _count(value, signed=True)


def _text(value: object) -> str | None:
    return value[:TEXT_LIMIT] if isinstance(value, str) and value else None


def _number(value: object, low: float, high: float) -> float | None:
    """A finite number within low..high (a decimal string counts: OpenRouter sends prices so)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return number if math.isfinite(number) and low <= number <= high else None


def _price(value: object) -> float | None:
    # USD per token; OpenRouter lists "-1" for a price it cannot state.
    return _number(value, 0.0, 1.0)


def _count(value: object, signed: bool = False) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if not math.isfinite(value) or value != int(value) or (value < 0 and not signed):
        return None
    return int(value) if abs(value) < 2**53 else None

"""Prices from an API's model listing (``GET {base_url}/models``), OpenRouter's shape: what
``estimate`` prices a run with and ``run --batch`` counts ``--max-cost`` with.
"""

from __future__ import annotations

import aiohttp
import orjson

from draftgen.logs import add_secret

LISTING_TIMEOUT = 15.0  # seconds for GET /models; a slow listing is no reason to wait long


async def listed_prices(
    base_url: str, model: str, api_key: str | None
) -> tuple[float, float] | str:
    """(prompt, completion) USD per token from ``GET {base_url}/models``, or why not."""
    url = base_url.rstrip("/") + "/models"
    add_secret(api_key)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        timeout = aiohttp.ClientTimeout(total=LISTING_TIMEOUT)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            async with session.get(url, headers=headers) as response:
                if response.status != 200:
                    return f"GET {url} answered HTTP {response.status}: no listed prices"
                body = await response.read()
    except (aiohttp.ClientError, TimeoutError) as exc:
        return f"GET {url} failed ({exc.__class__.__name__}): no listed prices"
    try:
        data = orjson.loads(body).get("data")
    except (orjson.JSONDecodeError, AttributeError):
        return f"GET {url} did not return a model listing: no listed prices"
    for entry in data if isinstance(data, list) else ():
        if isinstance(entry, dict) and entry.get("id") == model:
            pricing = entry.get("pricing") if isinstance(entry.get("pricing"), dict) else {}
            try:
                # OpenRouter sends prices as decimal strings, USD per token.
                return float(pricing["prompt"]), float(pricing["completion"])
            except (KeyError, TypeError, ValueError):
                return f"the listing of {model} has no prompt/completion pricing"
    return f"{model} is not in the listing at {url}: no listed prices"

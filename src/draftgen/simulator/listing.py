"""The simulator's lookups: the model list and a model's endpoints (with prices), the key, and a
generation's record, in OpenRouter's shapes.
"""

from __future__ import annotations

import time

import orjson
from aiohttp import web

from draftgen.simulator import wire

SIMULATOR_KEY_LABEL = "draftgen simulator (synthetic data)"


class ListingRoutes:
    """The lookup routes of ``Simulator``, mixed into it: they read its settings, the models it
    has seen, its providers and its ground truth."""

    async def handle_models(self, request: web.Request) -> web.Response:
        if self._down(self.stats["requests"]):
            return self._json(500, wire.error_body(500, "simulated outage", "server_error"))
        now = int(time.time())
        data = [
            {
                "id": model,
                "canonical_slug": model,
                "name": model,
                "created": now,
                "context_length": 262144,
                "architecture": {
                    "modality": "text->text",
                    "input_modalities": ["text"],
                    "output_modalities": ["text"],
                    "tokenizer": "Other",
                },
                "pricing": {
                    "prompt": wire_price(self.config.prompt_price),
                    "completion": wire_price(self.config.completion_price),
                    "request": "0",
                    "image": "0",
                },
                "top_provider": {"context_length": 262144, "is_moderated": False},
                "supported_parameters": [
                    "max_tokens",
                    "temperature",
                    "seed",
                    "reasoning",
                    "include_reasoning",
                    "tools",
                    "stop",
                ],
            }
            for model in self.models_seen
        ]
        # Models with a batch endpoint have a ``:batch`` variant with its own (lower) price.
        batch_models = self.config.batch_models
        for entry in list(data):
            if batch_models is None or entry["id"] in batch_models:
                prices = self.batch.prices
                pricing = {**entry["pricing"], "prompt": wire_price(prices[0])}
                pricing["completion"] = wire_price(prices[1])
                batch_id = entry["id"] + ":batch"
                data.append({**entry, "id": batch_id, "canonical_slug": batch_id})
                data[-1]["pricing"] = pricing
        return self._json(200, orjson.dumps({"data": data}))

    async def handle_model_endpoints(self, request: web.Request) -> web.Response:
        """OpenRouter's ``GET /models/{author}/{slug}/endpoints``: the simulator serves whatever
        model it is asked for, so every model has one endpoint per simulated provider."""
        if not self._authorized(request):
            return self._unauthorized()
        if self._down(self.stats["requests"]):
            return self._json(500, wire.error_body(500, "simulated outage", "server_error"))
        model = f"{request.match_info['author']}/{request.match_info['slug']}"
        self.models_seen.setdefault(model.removesuffix(":batch"), None)
        body = {
            "data": {
                "id": model,
                "name": model,
                "created": 1767225600,
                "description": "A model served by the draftgen simulator (synthetic data).",
                "architecture": {
                    "modality": "text->text",
                    "input_modalities": ["text"],
                    "output_modalities": ["text"],
                    "tokenizer": "Other",
                    "instruct_type": None,
                },
                "endpoints": [self._endpoint(model, p) for p in self.providers],
            }
        }
        return self._json(200, orjson.dumps(body))

    def _endpoint(self, model: str, provider: str) -> dict:
        """One provider's entry of the endpoints listing, as OpenRouter shapes it."""
        tag, quantization = wire.ENDPOINT_FACTS.get(provider, (provider.lower(), "unknown"))
        latency = self.config.latency + (
            self.config.slow_provider if provider == wire.SLOW_PROVIDER else 0.0
        )
        parameters = ["max_tokens", "temperature", "top_p", "seed", "reasoning", "tools", "stop"]
        if provider in wire.LOGPROB_PROVIDERS:
            parameters.append("logprobs")
        return {
            "name": f"{provider} | {model}",
            "model_name": model,
            "provider_name": provider,
            "tag": tag,
            "context_length": 262144,
            "pricing": {
                "prompt": wire_price(self.config.prompt_price),
                "completion": wire_price(self.config.completion_price),
                "request": "0",
                "image": "0",
            },
            "quantization": quantization,
            "max_completion_tokens": 65536,
            "max_prompt_tokens": None,
            "supported_parameters": parameters,
            "status": 0,
            "uptime_last_30m": 100.0,
            "supports_implicit_caching": False,
            # Seconds to the first token; the simulator's own pace is its configured delay.
            "latency_last_30m": {"p50": latency, "p75": latency, "p90": latency, "p99": latency},
        }

    async def handle_key(self, request: web.Request) -> web.Response:
        if self.config.dialect != "openrouter":
            # A self-hosted server has no /key: the probe then reads its model listing.
            return web.Response(status=404, text="404: Not Found")
        if not self._authorized(request):
            return self._unauthorized()
        usage = sum(r["cost"] for r in self.truth.values())
        body = {
            "data": {
                "label": SIMULATOR_KEY_LABEL,  # how the probe tells the simulator's data apart
                "limit": None,
                "usage": usage,
                "limit_remaining": None,
                "is_free_tier": False,
            }
        }
        return self._json(200, orjson.dumps(body))

    async def handle_generation(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return self._unauthorized()
        record = self.truth.get(request.query.get("id", ""))
        if record is None:
            return self._json(404, wire.error_body(404, "Generation not found", "not_found"))
        body = {
            "data": {
                "id": record["generation_id"],
                "model": record["model"],
                "provider_name": record["provider"],
                "streamed": record["stream"],
                "tokens_prompt": record["prompt_tokens"],
                "tokens_completion": record["completion_tokens"],
                "native_tokens_prompt": record["prompt_tokens"],
                "native_tokens_completion": record["completion_tokens"],
                "native_tokens_reasoning": record["reasoning_tokens"],
                "finish_reason": record["finish_reason"],
                "native_finish_reason": record["finish_reason"],
                "total_cost": record["cost"],
            }
        }
        return self._json(200, orjson.dumps(body))


def wire_price(value: float) -> str:
    return f"{value:.12f}".rstrip("0").rstrip(".") or "0"

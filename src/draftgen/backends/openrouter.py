"""OpenRouter: what it takes beyond OpenAI-compatible chat completions (``draftgen.backends.base``)
and checks before anything is sent: the ``reasoning`` object, ``provider`` routing (the
``[openrouter]`` table of draftgen.toml), and no template variables.
"""

from __future__ import annotations

from draftgen.backends import Backend, ConfigTable, RunSettings, SettingsError, base

# OpenRouter's ``provider`` routing object: field -> (what it must be, allowed values or None).
PROVIDER_FIELDS: dict[str, tuple[str, tuple[str, ...] | None]] = {
    "order": ("list of provider slugs", None),
    "only": ("list of provider slugs", None),
    "ignore": ("list of provider slugs", None),
    "allow_fallbacks": ("true or false", None),
    "require_parameters": ("true or false", None),
    "zdr": ("true or false", None),
    "enforce_distillable_text": ("true or false", None),
    "data_collection": ("one of", ("allow", "deny")),
    "quantizations": (
        "list of",
        ("int4", "int8", "fp4", "fp6", "fp8", "fp16", "bf16", "fp32", "unknown"),
    ),
    "sort": ("one of", ("price", "throughput", "latency")),
    "max_price": ("table of USD per million tokens: prompt, completion, request, image", None),
}
REASONING_EFFORTS: tuple[str, ...] = ("none", "minimal", "low", "medium", "high", "xhigh", "max")
MAX_PRICE_FIELDS: tuple[str, ...] = ("prompt", "completion", "request", "image")


def provider_problem(prefs: object) -> str | None:
    """Why ``prefs`` is not a valid ``provider`` object (a sentence), or None if it is."""
    if not isinstance(prefs, dict):
        return "provider must be an object of routing preferences"
    for name, value in prefs.items():
        if name not in PROVIDER_FIELDS:
            return (
                f"provider.{name} is not a routing field; use one of {', '.join(PROVIDER_FIELDS)}"
            )
        expected, allowed = PROVIDER_FIELDS[name]
        if expected == "true or false":
            ok = isinstance(value, bool)
        elif expected == "one of":
            ok = value in allowed
        elif expected == "list of":
            ok = isinstance(value, list) and all(v in allowed for v in value)
        elif name == "max_price":
            ok = isinstance(value, dict) and all(
                k in MAX_PRICE_FIELDS and _is_number(v) and v >= 0 for k, v in value.items()
            )
        else:
            ok = isinstance(value, list) and all(isinstance(v, str) and v for v in value)
        if not ok:
            detail = f"{expected} {', '.join(allowed)}" if allowed else expected
            return f"provider.{name} must be a {detail}, not {value!r}"
    return None


def reasoning_problem(reasoning: object) -> str | None:
    """Why ``reasoning`` is not a valid ``reasoning`` object (a sentence), or None if it is."""
    if not isinstance(reasoning, dict):
        return "reasoning must be an object with effort or max_tokens"
    if "effort" in reasoning and "max_tokens" in reasoning:
        return "reasoning takes effort or max_tokens, not both"
    for name, value in reasoning.items():
        if name == "effort" and value not in REASONING_EFFORTS:
            return f"reasoning.effort must be one of {', '.join(REASONING_EFFORTS)}, not {value!r}"
        if name == "max_tokens" and not (
            isinstance(value, int) and not isinstance(value, bool) and value > 0
        ):
            return f"reasoning.max_tokens must be a positive integer, not {value!r}"
        if name in ("exclude", "enabled") and not isinstance(value, bool):
            return f"reasoning.{name} must be true or false, not {value!r}"
        if name not in ("effort", "max_tokens", "exclude", "enabled"):
            return f"reasoning.{name} is not a field; use effort, max_tokens, exclude or enabled"
    return None


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def settings(options: RunSettings) -> dict:
    """The ``settings`` hook: ``reasoning`` from the effort or token flags (the run has refused
    both at once), ``provider`` routing checked, and no ``chat_template_kwargs``: the providers
    set the template's thinking switch from ``reasoning`` themselves."""
    reasoning = None
    if options.reasoning_effort is not None:
        reasoning = {"effort": options.reasoning_effort}
    elif options.reasoning_max_tokens is not None:
        reasoning = {"max_tokens": options.reasoning_max_tokens}
    if options.chat_template_kwargs:
        raise SettingsError(
            "--chat-template-kwargs is for vLLM/SGLang (--backend vllm, sglang or "
            "sglang-generate); through OpenRouter the providers set the template's thinking "
            "switch from --reasoning-effort, so use that instead"
        )
    if options.provider is not None and (problem := provider_problem(options.provider)):
        raise SettingsError(f"openrouter.{problem}; fix [openrouter.provider]")
    return {"reasoning": reasoning, "provider": options.provider}


def read_config_table(table: dict) -> dict:
    """``[openrouter]`` of draftgen.toml: its ``provider`` table as the run's ``provider``."""
    provider = table.get("provider")
    if not provider:
        return {"provider": None}  # an empty table asks for nothing: the same as none
    problem = provider_problem(provider)
    if problem:
        raise SettingsError(f"openrouter.{problem}")
    return {"provider": provider}


def route_around(prefs: dict | None, providers: list[str]) -> dict:
    """``prefs`` with ``providers`` added to ``provider.ignore`` (the user's own entries kept
    first, none twice); ``only``, ``order`` and every other field as the user set them: OpenRouter
    applies ``ignore`` after them, so an ordered or allowed provider left out is skipped."""
    routed = dict(prefs or {})
    ignore = list(routed.get("ignore") or [])
    known = {name.lower() for name in ignore}
    for provider in providers:
        if provider.lower() not in known:
            ignore.append(provider)
            known.add(provider.lower())
    routed["ignore"] = ignore
    return routed


def pin_provider(prefs: dict | None, route: str) -> dict:
    """``prefs`` sending to ``route`` alone, with no fallback (a calibration question): the
    user's filters (quantizations, data collection, prices) kept, their choice of providers
    replaced."""
    kept = {
        name: value
        for name, value in (prefs or {}).items()
        if name not in ("only", "order", "ignore", "allow_fallbacks", "sort")
    }
    return {**kept, "only": [route], "allow_fallbacks": False}


def routes_to(prefs: dict | None, names: set[str]) -> bool:
    """Whether routing ``prefs`` may send to a provider known by ``names`` (its name, its
    endpoint's tag, the tag's slug): ``only`` names it (when given) and ``ignore`` does not."""
    lower = {name.lower() for name in names if name}
    only, ignore = (prefs or {}).get("only"), (prefs or {}).get("ignore")
    if isinstance(only, list) and only and not lower & {str(n).lower() for n in only}:
        return False
    return not (isinstance(ignore, list) and lower & {str(n).lower() for n in ignore})


BACKEND = Backend(
    name="openrouter",
    id_source="text",
    can_stream=True,
    request_body=base.request_body,
    parse_completion=base.parse_completion,
    stream_accumulator=base.StreamAccumulator,
    settings=settings,
    config_table=ConfigTable(
        name="openrouter",
        keys=("provider",),
        shape="[openrouter.provider]",
        read=read_config_table,
        options=("provider",),
    ),
    server="openrouter",
    probe="openrouter",
    batch_dialects=("openrouter", "openai-files"),
    help="OpenRouter or any OpenAI-compatible API, text only (ids rebuilt and verified)",
    route_around=route_around,
    pin_provider=pin_provider,
    routes_to=routes_to,
)

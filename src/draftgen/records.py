"""Plain values passed between stages: generation settings, completions, token samples."""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass, field, replace


@dataclass(frozen=True)
class GenerationSettings:
    """Everything that changes what the model is asked; a resume must not mix two of these."""

    model: str
    max_tokens: int | None = None
    # Added later: None means "not sent", so stores made before them resume unchanged.
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None  # sample k of a prompt is sent seed + k
    reasoning: dict | None = None  # OpenRouter ``reasoning``: {"effort": ...} or {"max_tokens": n}
    provider: dict | None = None  # OpenRouter ``provider`` routing preferences
    # Template variables sent to vLLM/SGLang as ``chat_template_kwargs`` and used locally.
    chat_template_kwargs: dict | None = None

    def as_dict(self) -> dict:
        return asdict(self)

    def for_sample(self, sample: int) -> GenerationSettings:
        """The settings sent for sample ``sample`` of a prompt: its own seed, if one is set."""
        if sample == 0 or self.seed is None:
            return self
        return replace(self, seed=self.seed + sample)


@dataclass
class Completion:
    """One successful answer as the API returned it (text, not ids)."""

    generation_id: str | None
    provider: str | None
    model: str | None
    reasoning: str | None
    content: str | None
    tool_calls: list | None
    finish_reason: str | None
    native_finish_reason: str | None
    usage: dict = field(default_factory=dict)
    raw_message: dict = field(default_factory=dict)
    # Exact ids from a server that returns them (vLLM, SGLang); None from text-only APIs.
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    # The bytes of each content token, from ``logprobs`` (None if not asked or not returned).
    logprob_bytes: list[bytes] | None = None
    # The id of every generated token, from ``logprobs`` spelled ``token_id:N`` (vLLM's
    # ``return_tokens_as_token_ids``: reasoning, markup and end of turn too); None otherwise.
    logprob_ids: list[int] | None = None
    # Which base URL served it and how long that attempt took (set by the client, not the API).
    endpoint: str | None = None
    endpoint_latency: float | None = None

    @property
    def prompt_tokens(self) -> int | None:
        return _int_or_none(self.usage.get("prompt_tokens"))

    @property
    def completion_tokens(self) -> int | None:
        return _int_or_none(self.usage.get("completion_tokens"))

    @property
    def reasoning_tokens(self) -> int | None:
        details = self.usage.get("completion_tokens_details") or {}
        return _int_or_none(details.get("reasoning_tokens"))

    @property
    def cost(self) -> float:
        value = self.usage.get("cost")
        return float(value) if isinstance(value, (int, float)) else 0.0


@dataclass(frozen=True)
class Rendering:
    """The prompt of one request as the server was expected to render it.

    ``ids`` is set when the tokenizer encodes chat itself (its ``apply_chat_template`` is its
    own code): those ids, not the text re-encoded, are the prompt. ``error`` is the template's
    own message when rendering failed (then ``text`` is empty).
    """

    text: str
    variables: dict = field(default_factory=dict)
    now: str = ""  # ISO-8601 UTC instant the template's clock (strftime_now) was set to
    ids: list[int] | None = None
    error: str = ""

    def as_dict(self) -> dict:
        record: dict = {"text": self.text, "variables": self.variables, "now": self.now}
        if self.ids is not None:
            record["ids"] = self.ids
        if self.error:
            record["error"] = self.error
        return record

    @classmethod
    def from_dict(cls, record: dict) -> Rendering:
        return cls(
            text=record.get("text") or "",
            variables=dict(record.get("variables") or {}),
            now=record.get("now") or "",
            ids=record.get("ids"),
            error=record.get("error") or "",
        )

    @property
    def instant(self) -> dt.datetime | None:
        return dt.datetime.fromisoformat(self.now) if self.now else None


@dataclass
class StoredCompletion:
    """A completion as read back from the store, with the exact request that produced it."""

    key: str
    source_id: str
    turn: int
    messages: list[dict]
    tools: list[dict] | None
    completion: Completion
    # The prompt as rendered when the request was built (None: a store from before renderings
    # were recorded, rendered again with the template's defaults).
    rendering: Rendering | None = None
    # When the completion was stored (seconds since the epoch) and how long its request took:
    # together with ``rendering.now`` they bound the provider's clock while it rendered.
    stored_at: float | None = None
    latency: float | None = None


@dataclass
class TokenSample:
    """Reconstructed ids for one generated turn and the verdict of the checks."""

    key: str
    input_ids: list[int]
    prompt_len: int
    verified: bool
    reason: str
    detail: str = ""
    truncated: bool = False
    # The sample's proof (``PROOFS``): the server's own ids, ids from logprobs, or text.
    id_source: str = "text"
    # With server ids: "agrees" if the text path rebuilt the same ids and proved them, else the
    # text path's reason (or "ids_differ"); "" when the text path is the only one.
    text_check: str = ""

    @property
    def loss_mask(self) -> list[int]:
        return [0] * self.prompt_len + [1] * (len(self.input_ids) - self.prompt_len)


# What a sample's ids are proven by (``TokenSample.id_source``, the export's ``id_source``): the
# server's own ids, the ids its logprobs name (the prompt's checked by its count), or text
# re-encoded and checked by the counts. Stores written before these names say "server" for "ids".
PROOF_IDS = "ids"
PROOF_LOGPROBS = "logprobs"
PROOF_TEXT = "text"
PROOFS: tuple[str, ...] = (PROOF_IDS, PROOF_LOGPROBS, PROOF_TEXT)
OLD_PROOF_NAMES = {"server": PROOF_IDS}


def proof_name(stored: str) -> str:
    """The proof a stored ``id_source`` names, in today's words (``server`` is now ``ids``)."""
    return OLD_PROOF_NAMES.get(stored, stored)


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None

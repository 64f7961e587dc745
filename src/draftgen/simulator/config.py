"""The simulator's settings and the names of every fault and quirk it can inject.

Faults are decided once per request and make it fail (never billed); quirks are decided per
completion and change what the model produced or how the provider delivered it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from draftgen.backends import all_backends, server_families
from draftgen.declaration import setting
from draftgen.errors import DraftgenError

# Request-level failures, each with the wire shape OpenRouter documents for its errors (the
# ``{"error": {"code", "message", "metadata"}}`` body, ``metadata.error_type``, errors inside
# HTTP 200 bodies and mid-stream; its API reference, "Errors").
FAULTS: tuple[str, ...] = (
    "rate_limit",  # 429 + Retry-After, error_type rate_limit_exceeded
    "rate_limit_no_header",  # 429 without Retry-After
    "overloaded",  # 503 + Retry-After, error_type provider_overloaded
    "bad_gateway",  # 502, error_type provider_unavailable
    "server_error",  # 500, error_type server_error
    "budget_in_flight",  # 402 + Retry-After, metadata.reason in_flight_budget_exhausted
    "payment",  # 402 without Retry-After, error_type payment_required (fatal)
    "auth",  # 401, error_type authentication (fatal)
    "error_200",  # HTTP 200 whose body is an error object
    "finish_error",  # HTTP 200, finish_reason "error", choices[0].error, partial content
    "empty",  # HTTP 200, no content, no finish_reason, completion_tokens 0
    "drop",  # headers and part of the body, then the connection is closed
    "midstream_error",  # stream: error event after some chunks (non-stream: finish_error)
    "stall",  # headers (and a keep-alive comment), then silence for stall_seconds
    "malformed_json",  # invalid JSON body / invalid data: line
    "huge_body",  # a good completion carrying ~4 MB of encrypted reasoning_details (one SSE event)
)

# Faults after which the completion is still delivered whole (and billed).
DELIVERING_FAULTS: frozenset[str] = frozenset({"huge_body"})

# Faults that only count once more than ``fatal_after`` requests have arrived.
FATAL_FAULTS: frozenset[str] = frozenset({"auth", "payment"})

# Hostile answers (``SimConfig.hostile``): what a broken or malicious server does that no provider
# means to, decided per request for ``hostile_share`` of them (simulator/hostile.py). Only
# bad-usage, bad-cost and held deliver a whole completion (recorded in the truth with its kind);
# the others deliver none, and a slow-loris only if the client waits for its last byte.
HOSTILE: tuple[str, ...] = (
    "oversized",  # a body, or one SSE event, of hostile_bytes (Content-Length declared or not)
    "endless",  # SSE deltas that never end (unstreamed: a JSON body that never ends)
    "keepalive",  # only keep-alive comments, forever (unstreamed: blank lines before the JSON)
    "slowloris",  # a good completion at trickle_rate bytes a second
    "bad-usage",  # usage token counts of 2**63 or negative
    "bad-cost",  # usage.cost missing, a string, negative or 1e-9
    "redirect",  # 301/302/307/308 to plain http off loopback, or to another host name of this one
    # A whole answer, finish reason and usage included, then silence with the connection open
    # (stream: no ``data: [DONE]``; unstreamed: no Content-Length and no last chunk) for
    # stall_seconds, then the connection cut.
    "held",
)

# Per-completion alterations. Ground truth always keeps the ids the model really produced.
QUIRKS: tuple[str, ...] = (
    "drift",  # one token replaced by two ids with the same bytes (non-canonical segmentation)
    # The model writes two of its tokens whose joined text re-encodes to other ids: some keep
    # the count (` is`+`the` read back as ` ist`+`he`), which a count cannot see.
    "resplit",
    "strip_whitespace",  # provider strips leading/trailing whitespace from content
    "leak_eot",  # provider leaves the end-of-turn text at the end of content
    "no_split",  # provider does not split: everything in content, reasoning null/absent
    "empty_reasoning",  # model closes the think block at once
    # The model ends inside its reasoning: its end of turn (or a tool call its engine's parser
    # takes as the end of reasoning) before think_end, no answer; delivered as vLLM does, all
    # reasoning and content "" (tool_calls parsed).
    "unclosed_reasoning",
    "tool_call_text",  # raw tool-call markup inside content, tool_calls null
    "reasoning_content_field",  # reasoning delivered as "reasoning_content"
)
# Quirks of how the provider renders the prompt, drawn per request before rendering.
REQUEST_QUIRKS: tuple[str, ...] = (
    # It ignores the request's reasoning switch and renders the template's default: the prompt
    # is not the one the client rendered (only requests that send a reasoning setting).
    "ignore_thinking_switch",
    # One provider (wire.TEMPLATE_PROVIDER) renders the published chat template where the engine
    # renders otherwise (gpt-oss: harmony); requests that draw it are routed there.
    "template_renderer",
    # One provider (wire.REVISION_PROVIDER, added to the providers while this is configured)
    # renders another revision of the template: a default system prompt first when the request
    # has none, so its prompt counts differ from the client's rendering.
    "template_revision",
)
# Quirks of structured tool calls: they apply only when the request carried ``tools`` and the
# model made a call (``tool_call_rate``). A reading recovers both, but cannot prove it.
TOOL_CALL_QUIRKS: tuple[str, ...] = (
    # One provider (wire.RESERIALISING_PROVIDER) re-dumps every call's arguments as Go does:
    # compact, keys sorted.
    "reserialize_arguments",
    "rename_tool_call_id",  # provider replaces the model's call id with its own "call_..."
)

# Batch faults (simulator/batch/), each with the shape OpenRouter's Batch API reference and
# OpenAI's Batch API give (docs/batch.md, "Unconfirmed, and left out"); decided once
# per create (the create faults), per batch or per row (row_error), or per request (the 5xx).
BATCH_FAULTS: tuple[str, ...] = (
    "create_lost",  # the batch is created, then the connection closes before any answer
    "create_5xx",  # the batch is created, then the answer is HTTP 502
    "create_refused",  # HTTP 503 and no batch is created
    "batch_failed",  # one line is refused after the 202: the whole batch fails, error.message says
    "expire",  # the batch expires part-way: only the rows finished by then are readable
    "row_error",  # a row ends with an error object instead of a response (not billed)
    "results_5xx",  # a results page (or file content) answers HTTP 500
    "get_5xx",  # a batch lookup or listing answers HTTP 502
)
# The batch wire formats the backends declare (``Backend.batch_dialects``): OpenRouter's inline
# requests (/api/v1/batches, /api/beta/batches) and OpenAI's uploaded JSONL files (/v1/files,
# /v1/batches).
BATCH_DIALECTS: tuple[str, ...] = tuple(
    dict.fromkeys(name for backend in all_backends() for name in backend.batch_dialects)
)

# Wire formats the simulator answers in, the server families of the backends (``Backend.server``):
# OpenRouter (text only), or a self-hosted server that returns the generated ids (vLLM
# ``return_token_ids``; SGLang ``return_prompt_token_ids`` + ``return_meta_info``, non-streaming
# only, and its native /generate).
DIALECTS: tuple[str, ...] = server_families()

# Quirks after which the generated ids cannot be rebuilt exactly from the delivered text.
INEXACT_QUIRKS: frozenset[str] = frozenset(
    {
        "drift",
        "strip_whitespace",
        "reasoning_excluded",
        # Recovered by a reading the count picks, but not provable (key order, call index).
        "reserialize_arguments",
        "rename_tool_call_id",
        # The provider rendered the published template, not the prompt the engine renders.
        "template_renderer",
        "template_revision",
    }
)


class SimConfigError(DraftgenError, ValueError):
    """A simulator setting that cannot work; the message names it."""


def declared(default: object, help: str, **how: object) -> object:
    """A SimConfig field that ``draftgen simulate`` takes: a ``Setting`` as the run's are (its
    flag, its key of draftgen.toml's ``[simulator]`` table: the field's name)."""
    return setting(
        default,
        help=help,
        group="simulator",
        table="simulator",
        commands=("simulate",),
        **how,
    )


@dataclass
class SimConfig:
    """The simulator's settings: each field that ``draftgen simulate`` takes declares its flag
    here (``declared``), and the flags, ``[simulator]`` keys and docs/cli.md are made from it."""

    tokenizer: str = declared(
        "",
        "the simulated model's tokenizer: local directory, hub id or fixture:NAME (required)",
        metavar="DIR_OR_ID",
        required=("simulate",),
    )
    profile: str | None = declared(
        None,
        "force the simulated model's profile (default: detected from the tokenizer)",
        metavar="NAME",
    )
    seed: int = declared(
        0, "seed of the simulated answers, faults and quirks", metavar="N", kind=int
    )
    faults: dict[str, float] = declared(
        dict,
        "inject a fault at a rate, e.g. rate_limit=0.1; repeatable",
        metavar="NAME=RATE",
        flag="--fault",
        shape="rates",
    )
    quirks: dict[str, float] = declared(
        dict,
        "apply a provider quirk at a rate, e.g. drift=0.05; repeatable",
        metavar="NAME=RATE",
        flag="--quirk",
        shape="rates",
    )
    retry_after: float = declared(
        0.0,
        "Retry-After sent with rate-limit and overload faults; 0 sends none",
        metavar="SECONDS",
        kind=float,
    )
    min_tokens: int = declared(
        20, "shortest simulated completion, in tokens", metavar="N", kind=int
    )
    max_tokens: int = declared(
        200,
        "longest simulated completion, in tokens; a request's max_tokens cuts it shorter",
        metavar="N",
        kind=int,
    )
    chunk_tokens: int = 1  # tokens per SSE chunk when streaming
    latency: float = declared(
        0.0, "wait before answering each request", metavar="SECONDS", kind=float
    )
    slow_provider: float = declared(
        0.0,
        "one provider (AtlasCloud) waits this much longer before answering",
        metavar="SECONDS",
        kind=float,
    )
    chunk_delay: float = declared(
        0.0, "wait between streamed chunks", metavar="SECONDS", kind=float
    )
    # A provider's pace when streaming (0: as fast as the socket takes it). Each event of
    # ``chunk_tokens`` tokens is due chunk_tokens / tokens_per_second after the one before,
    # counted from the stream's start: a late writer catches up, as generation does not wait.
    tokens_per_second: float = 0.0
    truth_path: Path | None = declared(
        None,
        "append the ground truth of every served completion here (JSONL)",
        metavar="FILE",
        flag="--truth",
        kind=Path,
    )
    fatal_after: int | None = declared(
        None,
        "the auth and payment faults start only after N requests (default: from the first)",
        metavar="N",
        kind=int,
    )
    stall_seconds: float = declared(
        30.0, "how long the stall fault sends nothing", metavar="SECONDS", kind=float
    )
    model: str = "moonshotai/kimi-k2.5"  # listed by GET /models besides any model requested
    prompt_price: float = 0.0000006  # dollars (credits) per prompt token
    completion_price: float = 0.0000025  # dollars (credits) per completion token
    dialect: str = declared(
        "openrouter",
        "answer as OpenRouter (text only) or as a vllm / sglang server with token ids",
        choices=server_families,
    )
    tool_call_rate: float = 0.5  # chance the model calls a tool when the request has ``tools``
    # Share of calls whose arguments the model writes as compact JSON (else as json.dumps does).
    compact_tool_arguments: float = 0.0
    # An endpoint going down: chat requests after the N-th, and GET /models, answer HTTP 500.
    fail_after: int | None = declared(
        None,
        "an outage: every chat request after the N-th (and GET /models) answers HTTP 500 "
        "(default: no outage)",
        metavar="N",
        kind=int,
    )
    # Batches: faults by name (BATCH_FAULTS) and the timeline in seconds. OpenRouter's GET and
    # listing do not show a batch for ``batch_visible_after`` seconds after its 202; its rows
    # finish evenly over ``batch_seconds`` once validated.
    batch_faults: dict[str, float] = declared(
        dict,
        "inject a batch fault at a rate, e.g. expire=0.1; repeatable",
        metavar="NAME=RATE",
        flag="--batch-fault",
        shape="rates",
    )
    batch_visible_after: float = declared(
        1.0,
        "OpenRouter batches answer 404 (and are not listed) this long after their 202",
        metavar="SECONDS",
        kind=float,
    )
    batch_validate_seconds: float = 0.2
    batch_seconds: float = declared(
        1.0,
        "how long a batch's rows take once validated, spread evenly",
        metavar="SECONDS",
        kind=float,
    )
    batch_finalize_seconds: float = 0.1
    batch_cancel_seconds: float = 0.3  # cancelling, then cancelled (unless it finished first)
    batch_discount: float = 0.5  # the ``:batch`` catalog price is the live price times this
    batch_models: tuple[str, ...] | None = None  # models with a ``:batch`` entry (None: all)
    batch_log_path: Path | None = declared(
        None,
        "append one JSON line per batch created (its custom_ids and body hashes) and per "
        "batch ended (status, rows delivered, cost)",
        metavar="FILE",
        flag="--batch-log",
        kind=Path,
    )
    # Hostile answers: the kinds (HOSTILE) drawn among, and the share of chat requests answered
    # with one of them (seeded per prompt and attempt, so a retry may draw a good answer).
    hostile: tuple[str, ...] = declared(
        (),
        "answer a share of chat requests as a hostile server would: "
        + ", ".join(HOSTILE)
        + "; repeatable",
        metavar="KIND[,KIND]",
        shape="kinds",
    )
    hostile_share: float = declared(
        0.25,
        "share of chat requests given a hostile answer, drawn per prompt and attempt",
        metavar="RATE",
        kind=float,
    )
    hostile_bytes: int = declared(
        256 * 2**20, "bytes of an oversized answer", metavar="N", kind=int
    )
    trickle_rate: float = declared(
        4.0, "bytes a second of a slowloris answer", metavar="BYTES", kind=float
    )
    keepalive_seconds: float = declared(
        1.0,
        "seconds between the comments of a keepalive answer",
        metavar="SECONDS",
        kind=float,
    )

    def validate(self) -> None:
        """Raise ``SimConfigError`` naming the first setting that cannot work."""
        if not self.tokenizer:
            raise SimConfigError(
                "the simulator needs a tokenizer: give --tokenizer (e.g. fixture:kimi-k2.5)"
            )
        self._validate_rates()
        if self.min_tokens < 1 or self.max_tokens < self.min_tokens:
            raise SimConfigError(
                f"token range {self.min_tokens}..{self.max_tokens} is empty: need "
                "1 <= min_tokens <= max_tokens"
            )
        if self.dialect not in DIALECTS:
            raise SimConfigError(
                f"unknown simulator dialect {self.dialect!r}: use one of {', '.join(DIALECTS)}"
            )
        for name in ("tool_call_rate", "compact_tool_arguments"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise SimConfigError(f"{name} {getattr(self, name)} is not within 0..1")
        self._validate_hostile()
        if self.chunk_tokens < 1:
            raise SimConfigError("chunk_tokens must be at least 1")
        delays = (self.retry_after, self.latency, self.slow_provider, self.chunk_delay)
        if min(*delays, self.tokens_per_second) < 0:
            raise SimConfigError(
                "retry_after, latency, slow_provider, chunk_delay and tokens_per_second must "
                "not be negative"
            )
        if self.truth_path is not None:
            self.truth_path = Path(self.truth_path)
        if self.batch_log_path is not None:
            self.batch_log_path = Path(self.batch_log_path)
        self._validate_batch_timeline()

    def _validate_rates(self) -> None:
        """Every fault, quirk and batch fault known, and its probability within 0..1."""
        for kind, rates, known in (
            ("fault", self.faults, FAULTS),
            ("quirk", self.quirks, QUIRKS + TOOL_CALL_QUIRKS + REQUEST_QUIRKS),
            ("batch fault", self.batch_faults, BATCH_FAULTS),
        ):
            for name, rate in rates.items():
                if name not in known:
                    raise SimConfigError(
                        f"unknown simulator {kind} {name!r}: use one of {', '.join(known)}"
                    )
                if not 0.0 <= float(rate) <= 1.0:
                    raise SimConfigError(f"{kind} {name!r} probability {rate} is not within 0..1")

    def _validate_hostile(self) -> None:
        self.hostile = tuple(self.hostile)
        for kind in self.hostile:
            if kind not in HOSTILE:
                raise SimConfigError(
                    f"unknown hostile answer {kind!r}: use one of {', '.join(HOSTILE)}"
                )
        if not 0.0 <= self.hostile_share <= 1.0:
            raise SimConfigError(f"hostile_share {self.hostile_share} is not within 0..1")
        if self.hostile_bytes < 1 or self.trickle_rate <= 0 or self.keepalive_seconds <= 0:
            raise SimConfigError(
                "hostile_bytes, trickle_rate and keepalive_seconds must be above 0"
            )

    def _validate_batch_timeline(self) -> None:
        timeline = (
            self.batch_visible_after,
            self.batch_validate_seconds,
            self.batch_seconds,
            self.batch_finalize_seconds,
            self.batch_cancel_seconds,
        )
        if min(timeline) < 0 or not 0 < self.batch_discount <= 1:
            raise SimConfigError(
                "batch timings must not be negative and batch_discount must be within 0 < d <= 1"
            )


def format_retry_after(seconds: float) -> str:
    """``Retry-After`` as delta-seconds: "0", "2", or a plain decimal such as "0.25"."""
    if float(seconds).is_integer():
        return str(int(seconds))
    return f"{seconds:.6f}".rstrip("0").rstrip(".")

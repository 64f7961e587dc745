"""Reason codes: every verdict a sample can get, said once (code, meaning, docs section, doubt).

The verifier's constants, the report's meanings and the tables of README.md and docs/verification.md
are read from ``REASONS``; ``python -m draftgen.reconstruct.reasons`` rewrites those two tables.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

# The page whose sections the anchors name, from the repository's root.
DOCS = "docs/verification.md"


@dataclass(frozen=True)
class Reason:
    code: str
    # What the code tells a user, in plain words (the report prints it as text, the tables as is).
    meaning: str
    # The section of docs/verification.md that says more (a GitHub heading anchor).
    anchor: str
    # The sample may well be exact but the proof could not settle it (a count two readings share,
    # a provider's habit that would not show): yield lost to doubt, which a calibration question
    # or a server that returns ids can win back. Other reasons are samples shown to differ from
    # what was generated, or that cannot be rebuilt.
    doubt: bool = False


REASONS: dict[str, Reason] = {}


def _reason(code: str, meaning: str, anchor: str, *, doubt: bool = False) -> str:
    """Register ``code`` and give it back, for the verifier's constant of the same name."""
    if code in REASONS:
        raise ValueError(f"reason code {code!r} is registered twice")
    REASONS[code] = Reason(code, meaning, anchor, doubt)
    return code


# In the order the tables list them: the pass, then counts, whitespace, prompts, tool calls and
# the other proofs.
OK = _reason(
    "ok", "the ids decode to the text and both token counts match the provider's", "the-checks"
)
COMPLETION_COUNT_MISMATCH = _reason(
    "completion_count_mismatch",
    "the provider counted a different number of generated tokens: a non-canonical segmentation "
    "(retokenization drift) or text altered by the provider; the detail names any whitespace "
    "repair that would also match the count, which alone is no evidence of a strip",
    "the-checks",
)
PROMPT_COUNT_MISMATCH = _reason(
    "prompt_count_mismatch",
    "the provider's prompt differs from draftgen's render of the chat template",
    "prompt-ids",
)
DECODE_MISMATCH = _reason(
    "decode_mismatch", "decoding the ids does not give back the text", "the-checks"
)
# A completion count that whitespace restored at the content's edges would match, from a provider
# known to strip (it never returned content with edge whitespace): set after all samples are read
# (``reconstruct.background.flag_invisible_strips``); a sample alone only says the repair would
# match (``COMPLETION_COUNT_MISMATCH``, with the repair in its detail).
WHITESPACE_ALTERED = _reason(
    "whitespace_altered",
    "the count matches once whitespace is restored at the content's edges, and this provider "
    "never returned content with edge whitespace: it strips it",
    "whitespace-a-provider-strips",
)
# Set after all samples are read: this provider strips whitespace somewhere, and a strip here
# would not change the count, so the sample cannot be proven from text.
PROVIDER_STRIPS_WHITESPACE = _reason(
    "provider_strips_whitespace",
    "this provider was caught stripping whitespace and never returns edge whitespace, and a "
    "strip in this sample would not change the count, so it cannot be proven",
    "whitespace-a-provider-strips",
    doubt=True,
)
# The prompt could not be rendered (the template or encoder raised): its message is the detail.
PROMPT_RENDER_FAILED = _reason(
    "prompt_render_failed",
    "the chat template (or the model's Python encoder, or openai-harmony) raised on this prompt, "
    "or the engine refuses it (gpt-oss: an effort other than low, medium or high); the detail "
    "holds the message",
    "prompt-ids",
)
# Set after all samples are read: the published chat template renders this prompt to other ids
# at the same count as the engine's renderer (gpt-oss: harmony), and this provider has not shown
# which of the two it renders with (or was caught rendering the template).
PROMPT_RENDERER_UNPROVEN = _reason(
    "prompt_renderer_unproven",
    "the published chat template renders this prompt to other ids at the same count as the "
    "engine's renderer (gpt-oss: harmony), and this provider has not shown which one it uses",
    "renderer-parity",
    doubt=True,
)
# An answer returned as all reasoning and no content reads both as one that closed its
# reasoning (``think_end`` generated, nothing after it) and as one that ended inside it (the end
# of turn before ``think_end``: vLLM returns both so), and the count does not prove which: none
# was given, both readings have it, or it is the closed reading's (which an unclosed answer with
# a re-split has too). ``think_end`` is never put in the ids unproven.
REASONING_END_UNPROVEN = _reason(
    "reasoning_end_unproven",
    "the answer came back as all reasoning and no content, which reads with think_end and without "
    "it (an answer that ended inside its reasoning), and the count does not prove which: none was "
    "given, both readings have it, or it is the count of the reading with think_end, which an "
    "unclosed answer with one re-split id has too; no think_end is put in the ids unproven",
    "proof-ids-logprobs-or-text",
    doubt=True,
)
# A rendering with the thinking switch the other way has the same token count, and the response
# does not show which one the server used (reasoning returned <-> a thinking prompt).
PROMPT_MODE_UNPROVEN = _reason(
    "prompt_mode_unproven",
    "the prompt with the thinking switch the other way has the same token count, and the "
    "response does not show which one the server rendered",
    "template-variables-and-what-is-proven",
    doubt=True,
)
# The template stamps the date and the request was in flight across midnight (UTC): which day
# the server rendered cannot be told from a count.
PROMPT_DATE_UNPROVEN = _reason(
    "prompt_date_unproven",
    "the template stamps the date and the request was in flight across midnight UTC",
    "template-variables-and-what-is-proven",
    doubt=True,
)
NO_USAGE = _reason(
    "no_usage", "the response carried no token counts, so nothing could be proven", "the-checks"
)
STRUCTURED_TOOL_CALLS = _reason(
    "structured_tool_calls",
    "the API returned message.tool_calls and this profile has no tool-call format to rebuild "
    "them in",
    "completion-ids",
)
# Structured tool calls were rebuilt as markup, but the count shows they are not what was generated
# (the provider re-serialised the arguments in a way no reading reproduces, or renamed a call).
TOOL_CALLS_INEXACT = _reason(
    "tool_calls_inexact",
    "the tool-call markup rebuilt from message.tool_calls does not match the count in any reading",
    "completion-ids",
)
# The count picked a reading of the tool calls other than the provider's own text: arguments
# re-serialised (key order and spacing cannot be proven by a count) or a call id rebuilt (Kimi's
# ``functions.NAME:IDX`` index is not always the position). The ids are likely, not proven.
TOOL_ARGUMENTS_RESERIALISED = _reason(
    "tool_arguments_reserialised",
    "the count matches only a re-serialised reading of the arguments (compact or spaced JSON): "
    "likely, but key order and spacing cannot be proven by a count",
    "completion-ids",
    doubt=True,
)
# Where the engine's parser dumps the arguments it parsed (``tool_arguments_parsed``), the
# model's spelling is one of the readings: this one's count is also another spelling's, with
# other ids, so the count does not say which one the model wrote.
TOOL_ARGUMENTS_COUNT_NEUTRAL = _reason(
    "tool_arguments_count_neutral",
    "the engine's parser rewrote the tool-call arguments and another spelling of them has the "
    "same count with other ids, so the count cannot say which one the model wrote",
    "tool-arguments-the-engines-parser-and-rewrites-on-top-of-it",
    doubt=True,
)
# Set after all samples are read: this provider was caught re-serialising tool-call arguments,
# and a re-serialisation (key order, spacing) can keep the count, so its tool-call samples whose
# count matched cannot be proven from text.
PROVIDER_RESERIALISES_TOOL_ARGUMENTS = _reason(
    "provider_reserialises_tool_arguments",
    "this provider was caught re-serialising tool-call arguments (tool_arguments_reserialised on "
    "another sample), and a re-serialisation in this sample's calls would not change the count, "
    "so it cannot be proven",
    "tool-arguments-the-engines-parser-and-rewrites-on-top-of-it",
    doubt=True,
)
TOOL_CALL_ID_REBUILT = _reason(
    "tool_call_id_rebuilt",
    "the provider renamed Kimi's functions.NAME:IDX call ids; rebuilt ones cannot be proven",
    "completion-ids",
    doubt=True,
)
# A rebuilt XML parameter holds a boolean or null, which the model may have spelled either way
# (Qwen3.5's true or True, null or None): one token each, so a count cannot tell.
TOOL_ARGUMENT_LITERAL_UNPROVEN = _reason(
    "tool_argument_literal_unproven",
    "a rebuilt XML tool argument is a boolean or null, which Qwen3.5/3.6 spell two ways (true or "
    "True) that a count cannot tell apart",
    "completion-ids",
    doubt=True,
)
# The profile's tool-call markup is not confirmed (DeepSeek V3.2's DSML): a matching count does
# not prove the rebuilt ids, so such samples never pass on the text path.
TOOL_CALL_FORMAT_UNCONFIRMED = _reason(
    "tool_call_format_unconfirmed",
    "the profile's tool-call markup is not confirmed (DeepSeek V3.2's DSML), so rebuilt calls are "
    "never proven from text; use server ids",
    "models",
    doubt=True,
)
# Server ids (vLLM, SGLang) whose length disagrees with the server's own usage counts.
SERVER_COUNT_MISMATCH = _reason(
    "server_count_mismatch",
    "ids returned by a vLLM / SGLang server disagree with its own usage counts",
    "the-checks",
)
# Logprob token bytes that do not spell the delivered content (misaligned or another choice's).
LOGPROB_TEXT_MISMATCH = _reason(
    "logprob_text_mismatch", "logprob token bytes do not spell the returned content", "the-checks"
)
REASONING_IN_NON_THINKING = _reason(
    "reasoning_in_non_thinking_prompt",
    "reasoning came back although the prompt turned thinking off",
    "the-checks",
)
CONTENT_FILTER = _reason("content_filter", "the provider filtered the answer", "the-checks")

DOUBT_REASONS: tuple[str, ...] = tuple(code for code, r in REASONS.items() if r.doubt)

# What a code no longer registered (a store from an older draftgen) is said to mean.
UNKNOWN = ("see the docs", "the-checks")


def meaning_of(code: str) -> tuple[str, str]:
    """The meaning of ``code`` and the anchor of its section in docs/verification.md."""
    found = REASONS.get(code)
    return (found.meaning, found.anchor) if found else UNKNOWN


# -- the tables of README.md and docs/verification.md ---------------------------------------------

BEGIN = "<!-- reason codes: generated by python -m draftgen.reconstruct.reasons -->"
END = "<!-- end of reason codes -->"
# Each page's table links the codes to docs/verification.md's sections, from where the page sits.
PAGES = {"README.md": f"{DOCS}#", DOCS: "#"}


def reason_table(link: str) -> str:
    """Every code but the pass, linked to its section (``link`` + anchor), with its meaning."""
    failing = [r for r in REASONS.values() if r.code != OK]
    rows = [f"| [`{r.code}`]({link}{r.anchor}) | {r.meaning} |" for r in failing]
    return "\n".join(["| reason | meaning |", "|---|---|", *rows])


def with_table(text: str, link: str, name: str) -> str:
    """``text`` with the generated table between its ``BEGIN`` and ``END`` lines."""
    pattern = re.compile(re.escape(BEGIN) + r"\n.*?" + re.escape(END), re.DOTALL)
    if not pattern.search(text):
        raise ValueError(f"{name} has no {BEGIN!r} ... {END!r} lines to hold the reason table")
    return pattern.sub(lambda _: f"{BEGIN}\n{reason_table(link)}\n{END}", text, count=1)


def write_tables(root: Path) -> list[str]:
    """Rewrite the tables of ``PAGES`` under ``root``; the pages that changed."""
    changed = []
    for name, link in PAGES.items():
        path = root / name
        text = path.read_text(encoding="utf-8")
        new = with_table(text, link, name)
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(name)
    return changed


if __name__ == "__main__":
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path.cwd()
    for name in write_tables(root):
        print(f"rewrote the reason table of {name}")

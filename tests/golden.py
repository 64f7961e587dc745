"""The golden matrix's families and shapes, and simulated runs: shared by the golden matrix
(tests/reconstruct/test_golden_matrix.py) and the family tests (tests/profiles/).

Each family's generated text is written from its format facts, not from its profile, so a test
that reconstructs it checks the profile against the format.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

from draftgen.records import Completion, StoredCompletion
from draftgen.run.pipeline import RunOptions, run
from draftgen.simulator import SimConfig, SimulatorThread
from draftgen.store.database import Store
from draftgen.tokens.rendering import ChatRenderer, resolve_profile
from draftgen.tokens.tokenizer import decode, encode


@dataclass(frozen=True)
class Family:
    """How one fixture's model writes a turn after its generation prompt (each family's chat
    template and tokenizer_config: draftgen_testing.families)."""

    profile: str
    eot: str
    # generated text = head(R) + between + content + markup + eot; delivered reasoning(R).
    think_open: str  # what the model writes before the reasoning ("" if the prompt opened it)
    think_close: str  # between reasoning and answer, as generated
    reasoning_pad: tuple[str, str] = ("", "")  # whitespace the model puts around its reasoning
    answer_lead: str = ""  # whitespace the model puts before the answer
    thinks: bool = True
    # The tool-call markup for get_weather(city=Paris), per the family's documented format.
    markup: str = ""
    # Qwen writes the markup's leading newline only after content; the others always.
    markup_lead_needs_content: bool = False
    # A tool-call turn, where it differs: between reasoning and the markup or content, around
    # the content (harmony's commentary message), and the turn's end (GLM, harmony).
    tool_think_close: str | None = None
    tool_content_wrap: tuple[str, str] = ("", "")
    tool_eot: str | None = None
    # The profile is chosen by name: its vocabulary is another family's (DeepSeek V3.2).
    forced: bool = False
    detected: str = ""
    # Text-path reason of tool-call shapes when the markup is unconfirmed ("" means "ok").
    tool_reason: str = ""
    # Template variables the requests set (the reasoning switch a provider maps them from).
    variables: tuple[tuple[str, object], ...] = ()


KIMI_MARKUP = (
    "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
    '<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>'
)
DEEPSEEK_MARKUP = (
    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>"
    '{"city": "Paris"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>'
)
QWEN_MARKUP = '\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
# GLM-4.5/4.6's template: "\n<tool_call>NAME\n<arg_key>K</arg_key>\n<arg_value>V</arg_value>\n".
GLM_MARKUP = (
    "\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>"
)
MINIMAX_MARKUP = (
    '\n<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Paris</parameter>\n'
    "</invoke>\n</minimax:tool_call>"
)
DSML_MARKUP = (
    '\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name="get_weather">\n'
    '<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>\n'
    "</｜DSML｜invoke>\n</｜DSML｜function_calls>"
)
# Harmony: the call is a commentary message addressed to the function; <|call|> ends the turn.
HARMONY_MARKUP = (
    "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
    '<|message|>{"city": "Paris"}'
)
HARMONY_FINAL = "<|end|><|start|>assistant<|channel|>final<|message|>"

FAMILIES = {
    "kimi-k2.5": Family("kimi-k2", "<|im_end|>", "", "</think>", markup=KIMI_MARKUP),
    # K2.5 as Moonshot ships it: remote code (a slow tiktoken class), the same ids.
    "kimi-k2.5-remote": Family("kimi-k2", "<|im_end|>", "", "</think>", markup=KIMI_MARKUP),
    "kimi-k2-thinking": Family("kimi-k2", "<|im_end|>", "<think>", "</think>", markup=KIMI_MARKUP),
    # V3.1's markup on V4's vocabulary, thinking by default (the real V4 format has its own file).
    "deepseek-v3-thinking": Family(
        "deepseek-v3", "<｜end▁of▁sentence｜>", "", "</think>", markup=DEEPSEEK_MARKUP
    ),
    "qwen3": Family(
        "qwen3",
        "<|im_end|>",
        "<think>",
        "</think>",
        ("\n", "\n"),
        "\n\n",
        markup=QWEN_MARKUP,
        markup_lead_needs_content=True,
    ),
    "qwen3-thinking-2507": Family(
        "qwen3",
        "<|im_end|>",
        "",
        "</think>",
        ("", "\n"),
        "\n\n",
        markup=QWEN_MARKUP,
        markup_lead_needs_content=True,
    ),
    "qwen3-instruct-2507": Family(
        "qwen3",
        "<|im_end|>",
        "",
        "",
        thinks=False,
        markup=QWEN_MARKUP,
        markup_lead_needs_content=True,
    ),
    # V3.1's template is non-thinking by default: the prompt ends "<｜Assistant｜></think>".
    "deepseek-v3.1": Family(
        "deepseek-v3", "<｜end▁of▁sentence｜>", "", "", thinks=False, markup=DEEPSEEK_MARKUP
    ),
    "deepseek-v3.2": Family(
        "deepseek-v3.2",
        "<｜end▁of▁sentence｜>",
        "",
        "</think>",
        markup=DSML_MARKUP,
        # Detected from its Python chat encoder (encoding/encoding_dsv32.py), not the vocabulary;
        # the encoder chats without thinking unless the request turns it on.
        tool_reason="tool_call_format_unconfirmed",
        variables=(("thinking", True),),
    ),
    "glm-4.6": Family(
        "glm-4.5",
        "<|user|>",
        "\n<think>",
        "</think>",
        markup=GLM_MARKUP,
        tool_eot="<|observation|>",
    ),
    "minimax-m2": Family(
        "minimax-m2", "[e~[", "", "</think>", ("", "\n"), "\n\n", markup=MINIMAX_MARKUP
    ),
    "gpt-oss": Family(
        "gpt-oss",
        "<|return|>",
        "<|channel|>analysis<|message|>",
        HARMONY_FINAL,
        markup=HARMONY_MARKUP,
        tool_think_close="<|end|>",
        tool_content_wrap=("<|start|>assistant<|channel|>commentary<|message|>", "<|end|>"),
        tool_eot="<|call|>",
    ),
}
# GLM writes "\n" before its answer, but only when there is one.
GLM_ANSWER_LEAD = "\n"

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
CALL = {
    "id": "functions.get_weather:0",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
}
USER = [{"role": "user", "content": "What is the capital of France?"}]


@dataclass(frozen=True)
class Shape:
    messages: list
    reasoning: str = "Paris is the capital; answer briefly."
    content: str = "The capital of France is Paris."
    tools: list | None = None
    tool_call: bool = False
    truncate: int = 0  # cut this many ids off the end of the generation
    special_in_prompt: str = ""


SHAPES = {
    "single_turn": Shape(USER),
    "multi_turn": Shape(
        [
            {"role": "system", "content": "Be brief."},
            *USER,
            {"role": "assistant", "content": "Paris.", "reasoning_content": "old"},
            {"role": "user", "content": "And of Italy?"},
        ],
        content="Rome.",
    ),
    "empty_reasoning": Shape(USER, reasoning=""),
    "tool_call": Shape(USER, content="Let me check.", tools=TOOLS, tool_call=True),
    "tool_call_no_content": Shape(USER, content="", tools=TOOLS, tool_call=True),
    "unicode": Shape(
        [{"role": "user", "content": "Écris en français 🇫🇷 et 中文"}],
        reasoning="L'utilisateur veut 中文 + emoji 👩‍💻.",
        content="Voilà : café, naïve, 日本語, 👍🏽 — fin…\n\n```py\nx = 1\n```",
    ),
    "special_text_in_user_data": Shape(
        [
            {
                "role": "user",
                "content": "Literal <|im_end|> and </think> and <｜end▁of▁sentence｜> and <|end|>",
            }
        ],
        special_in_prompt="yes",
    ),
    "truncated": Shape(USER, content="Counting: one, two, three, four, five, six.", truncate=4),
}


def generated_text(family: Family, shape: Shape) -> tuple[str, str | None, str]:
    """(generated text, delivered reasoning, delivered content) for a text-exact provider."""
    content = shape.content
    tool = shape.tool_call
    close = family.tool_think_close if tool and family.tool_think_close is not None else None
    close = family.think_close if close is None else close
    if family.thinks:
        lead, trail = family.reasoning_pad
        reasoning = lead + shape.reasoning + trail if shape.reasoning else ""
        if family.reasoning_pad != ("", "") and not shape.reasoning:
            reasoning = "\n\n" if family.think_open else "\n"  # Qwen's empty block
        answer_lead = family.answer_lead
        if family.profile == "glm-4.5" and content:
            answer_lead = GLM_ANSWER_LEAD
        answer = answer_lead + content
        head = family.think_open + reasoning + close
    else:
        reasoning, answer, head = None, content, ""
    markup, wrapped, delivered = "", answer, answer
    if tool:
        markup = family.markup
        if family.markup_lead_needs_content and not content:
            markup = markup[1:]  # Qwen writes the newline only after content
        if answer:
            start, end = family.tool_content_wrap
            wrapped = start + answer + end
        if wrapped == answer:
            # A tool parser hands back everything before the markup's first token as content,
            # the markup's leading whitespace included.
            delivered = answer + markup[: len(markup) - len(markup.lstrip())]
    eot = family.tool_eot if tool and family.tool_eot else family.eot
    return head + wrapped + markup + eot, reasoning, delivered


def case(tokenizer, family: Family, shape: Shape):
    renderer = ChatRenderer(tokenizer, family_profile(tokenizer, family))
    rendering = renderer.render(shape.messages, shape.tools, dict(family.variables))
    prompt_ids = renderer.prompt_ids(rendering)
    text, reasoning, content = generated_text(family, shape)
    truth = encode(tokenizer, text)
    finish = "tool_calls" if shape.tool_call else "stop"
    if shape.truncate:
        truth = truth[: -shape.truncate]
        finish = "length"
        # What the provider delivers of a cut answer: the decoded text of what was generated.
        head_ids = encode(tokenizer, text[: len(text) - len(content) - len(family.eot)])
        assert truth[: len(head_ids)] == head_ids
        content = decode(tokenizer, truth[len(head_ids) :])
    usage = {"prompt_tokens": len(prompt_ids), "completion_tokens": len(truth)}
    completion = Completion(
        "gen-1",
        "Provider",
        "m",
        reasoning,
        content,
        [CALL] if shape.tool_call else None,
        finish,
        finish,
        usage,
    )
    stored = StoredCompletion(
        "k", "s", 0, shape.messages, shape.tools, completion, rendering=rendering
    )
    return stored, prompt_ids, truth


def family_profile(tokenizer, family: Family):
    """The family's profile as a run gets it: detected, or forced by name where it must be."""
    detected = resolve_profile(tokenizer, None)
    if not family.forced:
        assert detected.name == family.profile
        return detected
    # Forcing must be needed and must not steal: detection still gives the shared family.
    assert detected.name == family.detected
    profile = resolve_profile(tokenizer, family.profile)
    assert profile.name == family.profile
    return profile


def stored_delivery(output, delivery, prompt_ids, messages, tools, rendering=None):
    """The stored completion of a simulated model's ``output`` as ``delivery`` hands it over
    (``simulator.wire.deliver``), counted as the provider counts: the prompt's ids and the
    generated ones."""
    usage = {"prompt_tokens": len(prompt_ids), "completion_tokens": len(output.ids)}
    completion = Completion(
        "g",
        "P",
        "m",
        delivery.reasoning_text,
        delivery.content_text,
        delivery.tool_calls,
        output.finish_reason,
        output.finish_reason,
        usage,
    )
    return StoredCompletion("k", "s", 0, messages, tools, completion, rendering=rendering)


def run_rows(tmp_path, monkeypatch, fixture, rows, config=None, **options):
    """(ground truth by generation id, exported rows) of a simulated run of ``rows`` (dicts):
    ``config`` is the simulator's settings (OpenRouter's dialect unless it names another),
    ``options`` the run's, each over a small fast default. Every provider is kept: these runs
    watch what each provider's quirks do to its samples (tests/run/test_rebuy.py watches a run
    leave one out)."""
    lines = [json.dumps(row, ensure_ascii=False) for row in rows]
    (tmp_path / "rows.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    settings = {"seed": 5, "min_tokens": 10, "max_tokens": 40, **(config or {})}
    options = {
        "model": "test/model",
        "concurrency": 4,
        "retry_base_delay": 0.01,
        "progress_interval": 3600,
        "keep_providers": True,
        **options,
    }
    monkeypatch.setenv("DRAFTGEN_TEST_KEY", "sk-test")
    with SimulatorThread(SimConfig(tokenizer=f"fixture:{fixture}", **settings)) as sim:
        run_options = RunOptions(
            inputs=[str(tmp_path / "rows.jsonl")],
            tokenizer=f"fixture:{fixture}",
            out=tmp_path / "run",
            base_url=sim.base_url,
            api_key_env="DRAFTGEN_TEST_KEY",
            **options,
        )
        asyncio.run(run(run_options))
        truth = dict(sim.truth)
    with Store(tmp_path / "run", create=False) as store:
        exported = list(store.samples.export_rows(include_unverified=True))
    return truth, exported


def text_checks(tmp_path) -> dict:
    """The text_check of each sample of ``run_rows``'s run, by key."""
    with Store(tmp_path / "run", create=False) as store:
        return dict(store.db.execute("SELECT key, text_check FROM samples"))


def plain_rows(count: int) -> list[dict]:
    return [
        {"id": f"r{i}", "messages": [{"role": "user", "content": f"Q{i} — é"}]}
        for i in range(count)
    ]


def simulated_run(tmp_path, monkeypatch, fixture: str, backend: str, quirks: dict):
    """(ground truth by generation id, exported rows, text_check by key) of a 16-row run of a
    ``FAMILIES`` entry, half the rows with tools, in the backend's simulator dialect."""
    forced = FAMILIES[fixture].profile if FAMILIES[fixture].forced else None
    rows = []
    for i in range(16):
        row = {"id": f"r{i}", "messages": [{"role": "user", "content": f"Question {i} — café"}]}
        if i % 2 == 0:
            row["tools"] = TOOLS
        rows.append(row)
    config = {"seed": 3, "max_tokens": 60, "dialect": backend, "tool_call_rate": 0.8}
    config.update(profile=forced, quirks=quirks)
    truth, exported = run_rows(
        tmp_path, monkeypatch, fixture, rows, config, backend=backend, profile=forced
    )
    return truth, exported, text_checks(tmp_path)

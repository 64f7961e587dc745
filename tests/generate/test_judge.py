"""Judging providers (``draftgen.generate.judge``), routing around the ones left out
(``backends.openrouter.route_around``), and reading a sample's number back from its source id."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from draftgen.backends.openrouter import route_around
from draftgen.generate.judge import RULE, judge
from draftgen.inputs.plan import sample_of, sample_source_id


def row(samples: int, **failed: int) -> dict:
    return {"samples": samples, "unverified": failed}


def test_a_provider_failing_where_the_others_pass_is_excluded_with_its_evidence():
    figures = {
        "Good": row(30, prompt_count_mismatch=1),
        "Other": row(20),
        "Bad": row(10, prompt_count_mismatch=9, completion_count_mismatch=1),
    }
    [exclusion] = judge(figures, set())
    assert exclusion.provider == "Bad"
    assert (exclusion.samples, exclusion.failed) == (10, 10)
    assert (exclusion.others_samples, exclusion.others_failed) == (50, 1)
    assert exclusion.evidence == (
        "10 of its 10 samples failed proof (prompt_count_mismatch 9, completion_count_mismatch 1)"
        " while the other providers' failed 1 of 50 (2%)"
    )


def test_nobody_is_blamed_for_what_every_provider_fails():
    # A renderer draftgen cannot prove fails every provider's samples alike.
    figures = {"A": row(20, prompt_renderer_unproven=20), "B": row(20, prompt_renderer_unproven=19)}
    assert judge(figures, set()) == []


def test_too_few_samples_on_either_side_judge_no_one():
    assert judge({"Bad": row(7, x=7), "Good": row(100)}, set()) == []
    assert judge({"Bad": row(100, x=100), "Good": row(7)}, set()) == []
    assert [e.provider for e in judge({"Bad": row(8, x=8), "Good": row(8)}, set())] == ["Bad"]


def test_a_provider_failing_less_than_the_rule_stays():
    assert judge({"Meh": row(20, x=9), "Good": row(20)}, set()) == []  # 45% < 50%
    assert judge({"Meh": row(20, x=12), "Good": row(20, x=5)}, set()) == []  # 60% - 25% < 40%


def test_providers_already_out_and_unnamed_ones_are_not_judged_again():
    figures = {"Out": row(50, x=50), "unknown": row(50, x=50), "Good": row(50)}
    assert judge(figures, {"Out"}) == []


def test_the_last_passing_provider_is_never_left_out():
    # Two bad ones at once: each is compared with the providers still in.
    figures = {"A": row(10, x=10), "B": row(10, x=10), "Good": row(10)}
    assert sorted(e.provider for e in judge(figures, set())) == ["A", "B"]
    assert judge({"A": row(10, x=10), "B": row(10, x=10)}, set()) == []


@given(
    st.dictionaries(
        st.sampled_from(["A", "B", "C", "D", "E"]),
        st.tuples(st.integers(0, 60), st.integers(0, 60)).map(
            lambda t: row(max(t), x=min(t)) if max(t) else row(0)
        ),
        max_size=5,
    )
)
def test_every_exclusion_meets_the_rule_and_someone_passing_stays(figures):
    excluded = judge(figures, set())
    names = {e.provider for e in excluded}
    for exclusion in excluded:
        assert exclusion.samples >= RULE.min_samples
        assert exclusion.failed / exclusion.samples >= RULE.min_failed_share
    if excluded:
        staying = [r for name, r in figures.items() if name not in names and r["samples"]]
        assert any(r["samples"] > sum(r["unverified"].values()) for r in staying)


def test_route_around_adds_to_the_users_ignore_and_keeps_the_rest():
    prefs = {"order": ["chutes", "siliconflow"], "ignore": ["DeepInfra"], "allow_fallbacks": True}
    routed = route_around(prefs, ["Parasail", "deepinfra"])
    assert routed == {
        "order": ["chutes", "siliconflow"],
        "ignore": ["DeepInfra", "Parasail"],
        "allow_fallbacks": True,
    }
    assert prefs["ignore"] == ["DeepInfra"]  # the run's own preferences are left as they were
    assert route_around(None, ["Parasail"]) == {"ignore": ["Parasail"]}
    assert route_around({"only": ["a", "b"]}, ["a"]) == {"only": ["a", "b"], "ignore": ["a"]}


@given(st.text(alphabet="ab#1", max_size=8), st.integers(0, 12))
def test_a_source_ids_sample_reads_back(row_id, sample):
    assert sample_of(sample_source_id(row_id, sample)) == sample

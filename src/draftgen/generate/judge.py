"""Judging providers: which provider's samples fail proof systematically while the others' pass,
so a run stops sending to it (``provider.ignore``) and buys its spoiled samples again elsewhere.

The rule (docs/providers.md, "Excluding a provider"): a provider is excluded once at least
``min_samples`` of its samples are judged, at least ``min_failed_share`` of them failed a check,
and the other providers together have at least ``min_samples`` judged samples of which a share
at most ``failed_share - margin`` failed. A failure every provider shares (a renderer draftgen
cannot prove, a tokenizer of another revision) is never blamed on one; the last provider whose
samples pass is never left out, since its passing samples are what the rule compares against.
"""

from __future__ import annotations

from dataclasses import dataclass

from draftgen.store.database import UNKNOWN_PROVIDER


@dataclass(frozen=True)
class ExclusionRule:
    min_samples: int = 8  # judged samples of the provider, and of the others, before judging
    min_failed_share: float = 0.5  # of the provider's judged samples
    margin: float = 0.4  # the provider's failed share exceeds the others' by at least this

    def describe(self) -> str:
        return (
            f"at least {self.min_failed_share:.0%} of its first {self.min_samples}+ samples fail "
            f"a check while the other providers' fail {self.margin:.0%} less often"
        )


RULE = ExclusionRule()


@dataclass(frozen=True)
class Exclusion:
    """A provider left out of a run, and the figures that condemned it."""

    provider: str
    samples: int  # its judged samples
    failed: int  # of them, failing a check
    reasons: dict[str, int]  # the failures by reason, most first
    others_samples: int
    others_failed: int

    @property
    def evidence(self) -> str:
        """One sentence for the log, status and the report."""
        reasons = ", ".join(f"{reason} {count}" for reason, count in self.reasons.items())
        share = self.others_failed / self.others_samples if self.others_samples else 0.0
        return (
            f"{self.failed} of its {self.samples} samples failed proof ({reasons}) while the "
            f"other providers' failed {self.others_failed} of {self.others_samples} ({share:.0%})"
        )

    def as_dict(self) -> dict:
        return {
            "samples": self.samples,
            "failed": self.failed,
            "reasons": self.reasons,
            "others_samples": self.others_samples,
            "others_failed": self.others_failed,
            "evidence": self.evidence,
        }


def judge(
    figures: dict[str, dict], excluded: set[str] | frozenset[str], rule: ExclusionRule = RULE
) -> list[Exclusion]:
    """The providers of ``figures`` (``Store.providers.provider_figures``) to exclude now,
    beside those already ``excluded``, worst first; samples of providers already excluded count
    for no one."""
    judged = {
        name: (row["samples"], sum(row["unverified"].values()), row["unverified"])
        for name, row in figures.items()
        if name != UNKNOWN_PROVIDER and name not in excluded and row["samples"]
    }
    found: list[Exclusion] = []
    for name, (samples, failed, reasons) in sorted(
        judged.items(), key=lambda item: -item[1][1] / item[1][0]
    ):
        others = [v for other, v in judged.items() if other != name and other not in _names(found)]
        others_samples = sum(s for s, _, _ in others)
        others_failed = sum(f for _, f, _ in others)
        if samples < rule.min_samples or others_samples < rule.min_samples:
            continue
        share, others_share = failed / samples, others_failed / others_samples
        if share >= rule.min_failed_share and share - others_share >= rule.margin:
            found.append(
                Exclusion(name, samples, failed, dict(reasons), others_samples, others_failed)
            )
    return found


def _names(found: list[Exclusion]) -> set[str]:
    return {exclusion.provider for exclusion in found}

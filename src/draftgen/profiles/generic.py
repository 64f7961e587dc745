"""The generic profile: a model no family module knows, its layout derived from its chat template.

``draftgen.tokens.derived_profile`` renders probe conversations through the template and fills a
``DerivedLayout``; this module turns a layout into the ``ModelProfile`` reconstruction uses and
back from the JSON the run's store keeps (so that a resume, an export or ``status`` read the same
layout without rendering again). What a template cannot show (tool-call markup above all) stays
empty: those samples are left unverified with a reason instead of the run being refused.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from draftgen.profiles.base import ModelProfile

GENERIC = "generic"


@dataclass(frozen=True)
class DerivedLayout:
    """What the chat template writes around a generated turn."""

    generation_prompt: str
    # The first special token the template writes after an answer (or the eos token when it
    # writes none): what the model generates to end its turn.
    end_of_turn: str
    think_start: str = ""
    think_end: str = ""
    think_lead: str = ""  # whitespace before think_start
    reasoning_pad: tuple[str, str] = ("", "")  # whitespace inside the think block
    answer_lead: str = ""  # whitespace between think_end and the answer
    thinking_variable: str = ""
    effort_variable: str = ""
    # Template variables the template reads beyond the standard ones (listed, not interpreted).
    variables: tuple[str, ...] = ()
    # What was derived and from what, and what could not be: shown by ``status`` and the log.
    notes: tuple[str, ...] = field(default=(), compare=False)

    def profile(self) -> ModelProfile:
        return ModelProfile(
            name=GENERIC,
            think_start=self.think_start,
            think_end=self.think_end,
            end_of_turn=self.end_of_turn,
            marker_tokens=(),
            detect_by_vocab=False,
            reasoning_split_markers=(self.think_end,) if self.think_end else (),
            think_lead=self.think_lead,
            reasoning_pad=self.reasoning_pad,
            answer_lead=self.answer_lead,
            thinking_variable=self.thinking_variable,
            effort_variable=self.effort_variable,
            # No accepted efforts are known: the effort is passed to the template as requested.
            efforts_strict=bool(self.effort_variable),
            derived=self,
        )

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> DerivedLayout:
        known = {name for name in cls.__dataclass_fields__}
        values = {key: value for key, value in data.items() if key in known}
        for key in ("reasoning_pad", "variables", "notes"):
            if key in values:
                values[key] = tuple(values[key])
        return cls(**values)

    def describe(self) -> list[str]:
        """One line per derived item, for ``status`` and the run log."""
        lines = [
            f"generation prompt {self.generation_prompt!r}",
            f"end of turn {self.end_of_turn!r}",
        ]
        if self.think_start or self.think_end:
            lines.append(f"think block {self.think_start!r} ... {self.think_end!r}")
        else:
            lines.append("no think block")
        if self.thinking_variable:
            lines.append(f"thinking switch {self.thinking_variable!r}")
        if self.effort_variable:
            lines.append(f"effort variable {self.effort_variable!r}")
        if self.variables:
            lines.append("template variables " + ", ".join(self.variables))
        return lines + list(self.notes)

"""Plan: which assistant turns of a conversation are regenerated, and the prompt for each.

Assistant messages without tool calls are dropped and regenerated in order; an assistant message
with ``tool_calls`` stays as history, because the tool results after it answer exactly those calls.
Each turn is addressed by a key over its prompt *skeleton* (the kept messages plus placeholders for
regenerated answers), so identical prompts share one generation and a resume finds what it stored.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace

import orjson

from draftgen.inputs.ingest import Conversation, Rejection

# Why a valid row is rejected when its last message is already an answer.
NOTHING_TO_ANSWER = "row has no user or tool turn left to answer after its last assistant message"


@dataclass(frozen=True)
class TurnPlan:
    key: str
    source_id: str
    turn: int
    # Messages up to this turn; regenerated answers are {"role": "assistant", "regenerated": i}.
    skeleton: tuple[dict, ...]
    tools: tuple[dict, ...] | None
    sample: int = 0  # which of the --completions-per-turn completions (0: the first)


def plan_turns(conversation: Conversation) -> list[TurnPlan]:
    skeleton: list[dict] = []
    plans: list[TurnPlan] = []

    def generation_point() -> None:
        plans.append(_turn(conversation, len(plans), skeleton))
        skeleton.append({"role": "assistant", "regenerated": len(plans) - 1})

    for message in conversation.messages:
        if message["role"] == "assistant" and not message.get("tool_calls"):
            if _awaits_answer(skeleton):
                generation_point()
            continue
        skeleton.append(message)
    if _awaits_answer(skeleton):
        plans.append(_turn(conversation, len(plans), skeleton))
    return plans


def sample_chains(plans: list[TurnPlan], samples: int) -> list[list[TurnPlan]]:
    """``samples`` independent chains of a conversation's turns, each a separate stored sample.

    Sample 0 is ``plans`` itself, so runs made before ``--samples`` existed resume unchanged;
    sample k > 0 gets keys derived from sample 0's and the source id ``ID#k`` (turn k+1 of a
    sample follows that sample's own answer to turn k), ``ID`` as ``sample_source_id`` spells it.
    """
    chains = [plans]
    for sample in range(1, samples):
        chains.append(
            [
                replace(
                    plan,
                    key=hashlib.sha256(f"{plan.key}#{sample}".encode()).hexdigest()[:32],
                    source_id=f"{plan.source_id}#{sample}",
                    sample=sample,
                )
                for plan in plans
            ]
        )
    return chains


def sample_source_id(row_id: str, sample: int = 0) -> str:
    """The source id stored (and exported) for sample ``sample`` of the row ``row_id``.

    ``#`` in a row id is doubled, so the one ``#`` before a sample's number cannot be part of
    a row id: row ``a#1`` is ``a##1``, never the ``a#1`` of row ``a``'s second sample. Ids
    without ``#`` are stored as they are.
    """
    escaped = row_id.replace("#", "##")
    return f"{escaped}#{sample}" if sample else escaped


def sample_of(source_id: str) -> int:
    """Which sample of its row a stored ``source_id`` is (``sample_source_id`` read back): the
    number after a ``#`` that ends a run of odd length, else 0."""
    head, mark, number = source_id.rpartition("#")
    if not mark or not number.isdigit():
        return 0
    run = len(head) - len(head.rstrip("#")) + 1
    return int(number) if run % 2 else 0


@dataclass
class PlanCount:
    """What a run will ask for, counted before it sends anything."""

    rows: int = 0  # rows read: conversations and rejected rows, all shards
    rejected: int = 0  # rows that cannot be used (in this shard)
    answerable: int = 0  # rows with a turn to answer, in any shard
    shard_rows: int = 0  # of those, the rows in this run's shard
    turns: int = 0  # assistant turns of those rows
    completions_per_turn: int = 1
    first_rejected: Rejection | None = None  # this shard's first rejected row

    @property
    def requests(self) -> int:
        """Requests the plan holds: turns times completions (duplicates and stored turns are
        sent once, and not again, so the run may send fewer)."""
        return self.turns * self.completions_per_turn


def original_answers(conversation: Conversation) -> list[str]:
    """The row's own assistant answers at the points ``plan_turns`` regenerates, in order.

    ``estimate`` renders later turns with these in place of answers not generated yet.
    """
    skeleton: list[dict] = []
    answers: list[str] = []
    for message in conversation.messages:
        if message["role"] == "assistant" and not message.get("tool_calls"):
            if _awaits_answer(skeleton):
                answers.append(message["content"])
                skeleton.append({"role": "assistant", "regenerated": len(answers) - 1})
            continue
        skeleton.append(message)
    return answers


def build_messages(plan: TurnPlan, answers: list[str]) -> list[dict]:
    """The messages sent for ``plan``, earlier regenerated answers filled in (content only)."""
    messages = []
    for message in plan.skeleton:
        if "regenerated" in message:
            messages.append({"role": "assistant", "content": answers[message["regenerated"]]})
        else:
            messages.append(message)
    return messages


def _awaits_answer(skeleton: list[dict]) -> bool:
    roles = [m["role"] for m in skeleton if m["role"] != "system"]
    return bool(roles) and roles[-1] in ("user", "tool")


def _turn(conversation: Conversation, turn: int, skeleton: list[dict]) -> TurnPlan:
    frozen = tuple(skeleton)
    digest = hashlib.sha256(
        orjson.dumps({"messages": frozen, "tools": conversation.tools}, option=orjson.OPT_SORT_KEYS)
    ).hexdigest()
    return TurnPlan(
        key=digest[:32],
        source_id=sample_source_id(conversation.source_id),
        turn=turn,
        skeleton=frozen,
        tools=conversation.tools,
    )

"""Plan: which assistant turns of a conversation are regenerated, and the prompt for each.

Assistant messages without tool calls are dropped and regenerated in order; an assistant message
with ``tool_calls`` stays as history, because the tool results after it answer exactly those calls.
Each turn is addressed by a key over its prompt *skeleton* (the kept messages plus placeholders for
regenerated answers), so identical prompts share one generation and a resume finds what it stored.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import orjson

from draftgen.ingest import Conversation


@dataclass(frozen=True)
class TurnPlan:
    key: str
    source_id: str
    turn: int
    # Messages up to this turn; regenerated answers are {"role": "assistant", "regenerated": i}.
    skeleton: tuple[dict, ...]
    tools: tuple[dict, ...] | None


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
        source_id=conversation.source_id,
        turn=turn,
        skeleton=frozen,
        tools=conversation.tools,
    )

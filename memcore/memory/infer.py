"""add(..., infer=True): an LLM extracts facts from messages, then decides for each against the
similar memories already in the scope: ADD, UPDATE, DELETE or NONE (Mem0's two-step approach).

Existing memories are shown to the model under short numbers, never their real ids, so a
made-up id can only ever miss; every decision is checked before it is applied.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from memcore.core.errors import LLMError
from memcore.core.models import MemoryRecord

EXTRACT = """You extract durable facts worth remembering about the user from a conversation:
preferences, plans, relationships, personal details, decisions, and facts about their work.
Each fact is one short self-contained sentence in the language of the conversation. Skip
greetings, small talk and anything only true for this moment.
Answer with JSON only: {"facts": ["...", "..."]} ({"facts": []} when there is nothing)."""

RECONCILE = """You keep a memory store consistent. You get the existing memories (each with an
id) and new facts. For each new fact decide:
- ADD: new information; give it the id "new".
- UPDATE: it refines or corrects an existing memory; give that memory's id and the merged text.
- DELETE: it contradicts an existing memory that is now false; give that memory's id.
- NONE: it is already known; give the existing memory's id.
Answer with JSON only:
{"memory": [{"id": "0", "text": "...", "event": "UPDATE"}, {"id": "new", "text": "...",
"event": "ADD"}]}"""


@dataclass(frozen=True, slots=True)
class Decision:
    event: str  # ADD, UPDATE, DELETE, NONE
    text: str
    target: MemoryRecord | None  # the existing memory, for UPDATE / DELETE / NONE


def conversation_text(messages: Sequence[Mapping[str, Any]]) -> str:
    return "\n".join(f"{m.get('role', 'user')}: {m.get('content', '')}" for m in messages)


def parse_facts(answer: Mapping[str, Any]) -> list[str]:
    facts = answer.get("facts")
    if not isinstance(facts, list):
        raise LLMError('the LLM did not answer {"facts": [...]}')
    return [f.strip() for f in facts if isinstance(f, str) and f.strip()]


def reconcile_prompt(existing: Sequence[MemoryRecord], facts: Sequence[str]) -> str:
    shown = [{"id": str(n), "text": r.text} for n, r in enumerate(existing)]
    return json.dumps({"existing": shown, "facts": list(facts)}, ensure_ascii=False)


def parse_decisions(answer: Mapping[str, Any], existing: Sequence[MemoryRecord]) -> list[Decision]:
    """The model's decisions, checked: unknown ids, empty texts and unknown events are dropped;
    one decision per existing memory at most."""
    items = answer.get("memory")
    if not isinstance(items, list):
        raise LLMError('the LLM did not answer {"memory": [...]}')
    out: list[Decision] = []
    touched: set[int] = set()
    for item in items:
        if not isinstance(item, Mapping):
            continue
        event = str(item.get("event", "")).upper()
        text = str(item.get("text") or "").strip()
        if event == "ADD" and text:
            out.append(Decision("ADD", text, None))
            continue
        if event not in ("UPDATE", "DELETE", "NONE"):
            continue
        try:
            n = int(str(item.get("id")))
        except ValueError:
            continue
        if not 0 <= n < len(existing) or n in touched:
            continue
        if event == "UPDATE" and not text:
            continue
        touched.add(n)
        out.append(Decision(event, text or existing[n].text, existing[n]))
    return out

"""Elicitations (ACP `elicitation/create`, form mode): the agent asks a person a question with a small flat form.

The agent's request stays open while a person answers through the API or CLI, like a permission request (and
waiting on it counts as activity for supervision). A turn that ends answers every open one with `cancel`.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from accounts.actor import Actor
from sessions.core.jsonobj import JsonObject
from sessions.core.live import ElicitationView
from sessions.store.folder import isoformat, utcnow


@dataclass
class PendingElicitation:
    request_id: str
    turn_id: str
    message: str
    requested_schema: JsonObject  # the agent's JSON schema of the form
    created_at: str = field(default_factory=lambda: isoformat(utcnow()) or "")
    # (action, content): action is accept, decline or cancel.
    answer: asyncio.Future[tuple[str, JsonObject | None]] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future())
    answered_by: Actor | None = None  # who answered (recorded in `elicitation_answered`)

    def public(self) -> ElicitationView:
        return {"id": self.request_id, "message": self.message, "requested_schema": self.requested_schema,
                "created_at": self.created_at, "turn_id": self.turn_id}


class ElicitationBoard:
    def __init__(self) -> None:
        self.pending: dict[str, PendingElicitation] = {}
        self._next = 0

    def open(self, turn_id: str, message: str, requested_schema: JsonObject) -> PendingElicitation:
        self._next += 1
        item = PendingElicitation(f"elicit-{self._next}", turn_id, message, requested_schema)
        self.pending[item.request_id] = item
        return item

    def resolve(self, request_id: str, action: str, content: JsonObject | None, actor: Actor | None = None) -> bool:
        item = self.pending.get(request_id)
        if item is None or item.answer.done():
            return False
        item.answered_by = actor
        item.answer.set_result((action, content))
        return True

    def cancel_all(self) -> int:
        count = 0
        for item in list(self.pending.values()):
            if not item.answer.done():
                item.answer.set_result(("cancel", None))
                count += 1
        return count

    def close(self, request_id: str) -> None:
        self.pending.pop(request_id, None)

    def waiting_items(self) -> list[PendingElicitation]:
        try:
            return [p for p in list(self.pending.values()) if not p.answer.done()]
        except RuntimeError:  # resized by the loop while a worker thread read it: counted again next time
            return []

    @property
    def waiting_count(self) -> int:
        return len(self.waiting_items())

    @property
    def waiting(self) -> bool:
        return self.waiting_count > 0

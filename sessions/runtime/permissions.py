"""Permission requests the policy leaves to a person (`approve-reads` for anything but reads).

The agent's `session/request_permission` call stays open while a person decides through the API or CLI.
A cancelled turn answers every open request with `cancelled`, as ACP requires.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from accounts.actor import Actor
from sessions.acp import client_side
from sessions.core.acp_shapes import PermissionOption, ToolCall
from sessions.core.live import AnsweredPermission, PermissionView
from sessions.store.folder import isoformat, utcnow


@dataclass
class PendingPermission:
    request_id: str
    turn_id: str
    tool_call: ToolCall
    options: list[PermissionOption]
    created_at: str = field(default_factory=lambda: isoformat(utcnow()) or "")
    answer: asyncio.Future[tuple[str, str | None]] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future())
    decided_by: Actor | None = None  # who answered (the first answer wins)

    def public(self) -> PermissionView:
        return {
            "request_id": self.request_id, "turn_id": self.turn_id,
            "tool_call_id": self.tool_call.get("toolCallId"), "title": self.tool_call.get("title"),
            "kind": self.tool_call.get("kind"), "tool_input": self.tool_call.get("rawInput"),
            "options": [{"option_id": o.get("optionId"), "kind": o.get("kind"), "label": o.get("name")}
                        for o in self.options],
            "created_at": self.created_at,
        }


def option_for(options: list[PermissionOption], decision: str, option_id: str | None) -> str | None:
    """The ACP option a person's approve/deny maps to (an explicit option id must be one offered)."""
    if option_id:
        return option_id if any(o.get("optionId") == option_id for o in options) else None
    return client_side.allow_option(options) if decision == "approve" else client_side.reject_option(options)


# Answered requests remembered per session, so a second person answering learns who was first (409
# `permission_answered`) rather than "no such request": bounded, the oldest forgotten first.
ANSWERED_KEPT = 64


class PermissionBoard:
    def __init__(self) -> None:
        self.pending: dict[str, PendingPermission] = {}
        self.answered: dict[str, AnsweredPermission] = {}

    def open(self, request_id: str, turn_id: str, tool_call: ToolCall,
             options: list[PermissionOption]) -> PendingPermission:
        """A pending request under `request_id`, or `request_id#2`, … while that one still waits: an agent that
        asked twice with one toolCallId had its first request overwritten, never answerable, never cancelled."""
        unique, n = request_id, 1
        while unique in self.pending:
            n += 1
            unique = f"{request_id}#{n}"
        item = PendingPermission(unique, turn_id, tool_call, options)
        self.pending[unique] = item
        return item

    def resolve(self, request_id: str, decision: str, option_id: str | None, actor: Actor | None = None) -> bool:
        item = self.pending.get(request_id)
        if item is None or item.answer.done():
            return False
        item.decided_by = actor
        item.answer.set_result((decision, option_id))
        self.answered[request_id] = AnsweredPermission(decision, actor)
        while len(self.answered) > ANSWERED_KEPT:
            self.answered.pop(next(iter(self.answered)))
        return True

    def cancel_all(self) -> int:
        count = 0
        for item in list(self.pending.values()):
            if not item.answer.done():
                item.answer.set_result(("cancelled", None))
                count += 1
        return count

    def close(self, request_id: str) -> None:
        self.pending.pop(request_id, None)

    @property
    def waiting_count(self) -> int:
        """Requests still waiting for a person. Read from worker threads too: a board resized mid-count by the
        loop is counted again on the next read, so it answers 0 rather than raise."""
        try:
            return sum(1 for p in list(self.pending.values()) if not p.answer.done())
        except RuntimeError:
            return 0

    @property
    def waiting(self) -> bool:
        return self.waiting_count > 0


def permission_mode(effective: str | None, configured: str) -> str:
    """The permission policy in force for a session: its own (a child's may be narrower), else its agent's."""
    return str(effective or configured)

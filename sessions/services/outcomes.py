"""How a session's last turn ended, read from its own store: the one rule the supervised work above sessions
(task runs, coordinated steps, dreams) settles by. A `done` whose stop reason is `end_turn` succeeded; a `done`
with any other stop reason (cancelled, refusal, max_tokens) or an `error` failed; None while no turn has ended."""

from __future__ import annotations

from dataclasses import dataclass

from sessions.store import events as event_store
from sessions.store import folder


@dataclass(frozen=True)
class TurnOutcome:
    succeeded: bool
    detail: str  # why it failed; "" when it succeeded
    turn_id: str  # the turn whose `done` or `error` row decided


def turn_outcome(session_id: str) -> TurnOutcome | None:
    rows = event_store.read_events(folder.events_path(session_id), types=["done", "error"], newest=True, limit=20)
    rows = [r for r in rows if r["turn_id"]]
    if not rows:
        return None
    last = rows[-1]
    content = last.get("content") or {}
    if last["type"] == "done":
        stop = content.get("prompt_stop_reason") or content.get("stop_reason") or "end_turn"
        if stop == "end_turn":
            return TurnOutcome(True, "", last["turn_id"])
        return TurnOutcome(False, f"the turn ended with stop reason {stop}", last["turn_id"])
    return TurnOutcome(False, str(content.get("error") or "the agent answered with an error"), last["turn_id"])


def turn_text(session_id: str, turn_id: str) -> str:
    """The agent's whole answer in one turn: every `agent_message` row of it (a streamed reply is stored as one
    row per write batch), in order."""
    rows = event_store.read_events(folder.events_path(session_id), types=["agent_message"], turn_id=turn_id,
                                   limit=event_store.MAX_PAGE * 10)
    return "".join(str((r.get("content") or {}).get("text") or "") for r in rows)

"""Who holds control of a session, shown live to its viewers: a `system` row titled `control_taken` in the
session's events (the holder itself lives in the catalog, accounts/control.py)."""

from __future__ import annotations

from accounts.actor import Actor
from sessions.core.enums import EventType
from sessions.services.lookup import _runtime_for


async def note_control(session_id: str, workspace_ref: str | None, actor: Actor) -> None:
    """The change of controller into the session's stream, which its viewers tail; a stopped session has no
    stream to tell (the catalog row says who holds it when it is resumed)."""
    runtime, _ = await _runtime_for(session_id, workspace_ref)
    if runtime is not None:
        runtime.record(EventType.SYSTEM, {"title": "control_taken", "text": f"{actor.label} took control",
                                          "actor": dict(actor.fields())})

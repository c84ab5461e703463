"""Viewers and a controller (issue 49): several people may watch a session, one holds control.

Control is the creator's (recorded at create) or whoever takes it; it lives in the catalog, so every node of a
cluster asks the same row. A session nobody holds (made before people existed, or by the daemon) is open to all.
"""

from __future__ import annotations

from datetime import datetime
from typing import TypedDict

from accounts.actor import Actor, ActorKind
from accounts.errors import AccountError
from accounts.models import SessionControl


class ControlOut(TypedDict):
    session_id: str
    controller: str | None  # a user's name; None: nobody holds it
    token_id: str | None
    taken_at: str | None


def holder(session_id: str) -> ControlOut:
    row = SessionControl.objects.filter(session_id=session_id).first()
    if row is None:
        return {"session_id": session_id, "controller": None, "token_id": None, "taken_at": None}
    return {"session_id": session_id, "controller": row.user, "token_id": row.token_id,
            "taken_at": row.taken_at.isoformat(timespec="seconds")}


def take(session_id: str, actor: Actor, now: datetime) -> ControlOut:
    """`actor` holds control from now (a person only: the daemon and agents never hold it)."""
    if actor.kind != ActorKind.USER:
        raise AccountError(400, "control_needs_person", "only a person's token can hold control of a session")
    SessionControl.objects.update_or_create(session_id=session_id, defaults={
        "user": actor.user, "token_id": actor.token_id, "taken_at": now})
    return holder(session_id)


def check(session_id: str, actor: Actor, queues: bool) -> None:
    """A prompt, steer or interrupt from someone who does not hold control: 409 `session_controlled_by` naming the
    controller, unless it only queues (`mode: queue`), which takes nothing from the controller."""
    if queues or actor.kind != ActorKind.USER:
        return
    row = SessionControl.objects.filter(session_id=session_id).first()
    if row is not None and row.user != actor.user:
        raise AccountError(409, "session_controlled_by", f"{row.user} holds control of this session: queue the "
                           "prompt (mode: queue), or take control (`compozy session control ID --take`)",
                           {"controller": row.user, "session_id": session_id})


def forget(session_id: str) -> None:
    SessionControl.objects.filter(session_id=session_id).delete()

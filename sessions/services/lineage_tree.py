"""A session's descendants, for the coordinator's tree on its page (`GET …/children`): every spawned session
whose lineage roots at it, each with its parent, so the page can draw the tree."""

from __future__ import annotations

from typing import TypedDict

from sessions.core.enums import SessionType
from sessions.models import Session
from sessions.services.lookup import scoped_meta
from sessions.store import folder

MAX_CHILDREN = 500


class ChildDoc(TypedDict):
    id: str
    name: str
    state: str
    stop_detail: str
    role: str
    depth: int
    parent_session_id: str
    ttl_expires_at: str | None


def descendants(session_id: str, workspace_ref: str | None = None) -> list[ChildDoc]:
    root = scoped_meta(session_id, workspace_ref, row_ok=True)
    rows = Session.objects.filter(workspace_id=root["workspace_id"], session_type=SessionType.SPAWNED,
                                  created_at__gte=Session.objects.filter(id=session_id).values("created_at")[:1]
                                  ).order_by("created_at")[:MAX_CHILDREN]
    found: list[ChildDoc] = []
    for row in rows:
        meta = folder.read_meta(row.id)
        if meta is None:
            continue
        lineage = meta.get("lineage") or {}
        if lineage.get("root_session_id") != session_id:
            continue
        found.append(ChildDoc(id=row.id, name=row.name, state=row.state, stop_detail=row.stop_detail,
                              role=str(lineage.get("spawn_role") or ""), depth=int(lineage.get("spawn_depth") or 0),
                              parent_session_id=str(lineage.get("parent_session_id") or ""),
                              ttl_expires_at=lineage.get("ttl_expires_at")))
    return found

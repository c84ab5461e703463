"""The attention list: one item per thing that waits on a person, derived each time from what the daemon knows.

Nothing is stored but acknowledgements: a pending permission leaves the list when it is answered (the session's
record no longer lists it), a failure when the session is continued or removed, a task when it is retried; any of
them when a person acknowledges it (`POST /api/attention/{id}/ack`). The API, the CLI (over HTTP) and the dashboard
all read this one list.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from typing import Any

from django.db.models import Q

from attention.enums import AttentionKind
from attention.models import AttentionAck
from attention.notices import KIND_OF, Notice, session_notices, task_notice
from sessions.core.enums import SessionState, SessionType
from sessions.core.errors import NotFound
from sessions.core.record import SessionMeta
from sessions.models import Session
from sessions.store.folder import utcnow
from tasks.enums import TaskEventKind, TaskStatus
from tasks.models import Task, TaskEvent

logger = logging.getLogger(__name__)

# A list this long is a backlog, not an inbox: the newest are shown, and `total` says how many there are.
MAX_ITEMS = 500


@dataclass(frozen=True)
class AttentionItem:
    id: str
    kind: AttentionKind
    summary: str
    since: str
    url: str
    session_id: str | None
    task_id: str | None
    workspace_id: str | None
    agent: str | None
    request_id: str | None = None  # a permission's: what `compozy session approve|deny` takes

    def public(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind.value, "summary": self.summary, "since": self.since,
                "url": self.url, "session_id": self.session_id, "task_id": self.task_id,
                "workspace_id": self.workspace_id, "agent": self.agent, "request_id": self.request_id}


def item_id(key: str) -> str:
    return "att_" + hashlib.sha256(key.encode()).hexdigest()[:16]


def _item(notice: Notice) -> AttentionItem | None:
    kind = KIND_OF.get(notice.event)
    if kind is None:
        return None
    return AttentionItem(item_id(notice.key), kind, notice.summary, notice.occurred_at, notice.path,
                         notice.session_id, notice.task_id, notice.workspace_id, notice.agent or None,
                         notice.request_id)


def _session_meta(row: Session) -> SessionMeta | None:
    from sessions.catalog import index as catalog
    from sessions.core.errors import Conflict
    from sessions.services import read_session_meta

    try:
        return read_session_meta(row.id)
    except NotFound:
        return catalog.row_meta(row)  # another node's session without a shared folder: its catalog row
    except Conflict:
        return None  # meta.json unreadable: doctor's session_metadata check names it


def _quiet_item(meta: SessionMeta) -> AttentionItem | None:
    """A turn quiet past `quiet_attention_after`: read from the payload, whose activity is the live runtime's."""
    from sessions.services.payloads import session_payload

    if meta["state"] != SessionState.ACTIVE:
        return None
    payload = session_payload(meta)
    quiet = payload["quiet"]
    if quiet is None or not quiet["attention"]:
        return None
    sid = meta["id"]
    # One item per turn: acknowledged, it stays away for this turn and comes back for a later quiet one.
    return AttentionItem(item_id(f"quiet:{sid}:{payload['current_turn_id']}"), AttentionKind.QUIET,
                         f"{meta.get('name') or sid}: the running turn has had {quiet['text']}", quiet["since"],
                         f"/sessions/{sid}", sid, None, meta.get("workspace_id"), meta.get("agent_name") or None)


def session_items(meta: SessionMeta) -> list[AttentionItem]:
    items = [item for item in map(_item, session_notices(meta)) if item is not None]
    quiet = _quiet_item(meta)
    if quiet is not None:
        items.append(quiet)
    if meta.get("task_id"):
        # A task's attempt that failed is its task's business: recovery retries it or the task needs attention
        # (its own item), so the person sees one item, not one per attempt.
        items = [i for i in items if i.kind != AttentionKind.FAILED]
    return items


def _task_items() -> list[AttentionItem]:
    items = []
    tasks = Task.objects.filter(status=TaskStatus.NEEDS_ATTENTION).order_by("-updated_at")[:MAX_ITEMS]
    for task in tasks:
        row = TaskEvent.objects.filter(task_id=task.id, kind=TaskEventKind.NEEDS_ATTENTION).order_by("-id").first()
        notice = task_notice(row, task) if row is not None else None
        item = _item(notice) if notice is not None else None
        if item is not None:
            items.append(item)
    return items


def current_items() -> list[AttentionItem]:
    """Every item, acknowledged or not, newest first."""
    # Sessions that may carry an item: a live one (a permission, a login) or one with a failure on its record.
    rows = (Session.objects.filter(Q(state=SessionState.ACTIVE) | Q(failure__isnull=False))
            .exclude(session_type=SessionType.DREAM).order_by("-updated_at")[:MAX_ITEMS])
    items: list[AttentionItem] = []
    for row in rows:
        meta = _session_meta(row)
        if meta is not None:
            items.extend(session_items(meta))
    items.extend(_task_items())
    items.sort(key=lambda i: i.since, reverse=True)
    return items


def list_items() -> dict[str, Any]:
    """`GET /api/attention`: the items nobody acknowledged, newest first."""
    items = current_items()
    acked = set(AttentionAck.objects.filter(item_id__in=[i.id for i in items]).values_list("item_id", flat=True))
    shown = [i.public() for i in items if i.id not in acked]
    return {"items": shown}


def acknowledge(item_id_: str) -> dict[str, Any]:
    """`POST /api/attention/{id}/ack`: the item leaves the list (for every node and viewer)."""
    item = next((i for i in current_items() if i.id == item_id_), None)
    if item is None:
        raise NotFound("no attention item with that id (answered, retried, removed or never there)",
                       code="attention_not_found", data={"id": item_id_})
    AttentionAck.objects.get_or_create(item_id=item.id, defaults={"acked_at": utcnow()})
    ring_attention(item.workspace_id or "", item.session_id or "")
    return {"item": {**item.public(), "acknowledged": True}}


def ring_attention(workspace_id: str, session_id: str) -> None:
    """The catalog stream's `attention` frame: viewers refetch the list. Best effort: the list is the truth."""
    from sessions.services import ring_catalog_threadsafe

    try:
        ring_catalog_threadsafe("attention", workspace_id, session_id)
    except Exception:  # no daemon loop here (manage.py): viewers learn it on their next read
        logger.debug("no catalog doorbell to ring for attention", exc_info=True)


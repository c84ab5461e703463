"""The task history: one append-only row per thing that happened to a task (kind, reason, action, detail)."""

from __future__ import annotations

import secrets
from datetime import datetime
from typing import Any

from django.dispatch import Signal

from sessions.store import folder
from tasks.enums import TaskAction, TaskEventKind, TaskReason
from tasks.models import TaskEvent


def new_task_id() -> str:
    return f"task_{secrets.token_hex(8)}"


def new_run_id() -> str:
    return f"run_{secrets.token_hex(8)}"


# Sent after every history row, with `event` (the TaskEvent), inside the caller's transaction: the attention app
# connects its webhook outbox in attention/apps.py, so a task turning `needs_attention` and its outbox row commit
# together, and tasks never import the app above it (the pattern of sessions.catalog.index.meta_saved).
task_noted = Signal()


def note(task_id: str, kind: TaskEventKind, *, run_id: str | None = None, reason: TaskReason = TaskReason.NONE,
         action: TaskAction = TaskAction.NONE, detail: dict[str, Any] | None = None,
         now: datetime | None = None) -> TaskEvent:
    row = TaskEvent.objects.create(task_id=task_id, run_id=run_id, kind=kind.value, reason=reason.value,
                                   action=action.value, detail=detail or {}, created_at=now or folder.utcnow())
    task_noted.send(sender=TaskEvent, event=row)
    return row


def event_record(row: TaskEvent) -> dict[str, Any]:
    return {"kind": row.kind, "task_id": row.task_id, "run_id": row.run_id, "reason": row.reason or None,
            "action": row.action or None, "detail": row.detail, "created_at": folder.isoformat(row.created_at)}

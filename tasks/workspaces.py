"""Tasks refer to their workspace: one with unfinished tasks cannot be removed, and removing one deletes its
finished tasks (sessions/catalog/workspace_users.py asks)."""

from __future__ import annotations

from sessions.catalog.workspace_users import WorkspaceUser, register
from sessions.models import Workspace
from tasks.enums import FINAL
from tasks.models import Task


def _unfinished(ws: Workspace) -> list[str]:
    return list(Task.objects.filter(workspace=ws).exclude(status__in=[s.value for s in FINAL])
                .values_list("id", flat=True))


def _delete_all(ws: Workspace) -> None:
    Task.objects.filter(workspace=ws).delete()


def register_as_workspace_user() -> None:
    register(WorkspaceUser(busy=_unfinished, release=_delete_all, code="workspace_has_active_tasks",
                           message="workspace has queued or running tasks: cancel them first", data_key="tasks"))

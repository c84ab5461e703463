"""Removing a workspace (sessions/services/workspaces.py) on a real SQLite catalog: everything that can refuse is
checked before anything is deleted. A task (a protected key) once made it a 500 after its sessions' folders and
rows were already gone."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator

import pytest

from tests.django_env import ensure_django

ensure_django(migrate=True)

from sessions.core.errors import Conflict  # noqa: E402
from sessions.models import Workspace  # noqa: E402
from sessions.services.workspaces import remove_workspace  # noqa: E402
from sessions.store import folder  # noqa: E402
from tasks import services  # noqa: E402
from tasks.models import Task  # noqa: E402


@pytest.fixture
def ws() -> Iterator[Workspace]:
    root = tempfile.mkdtemp(prefix="compozy-remove-ws-")
    now = folder.utcnow()
    workspace = Workspace.objects.create(id=f"ws_{os.urandom(8).hex()}", name=root, root_dir=root, created_at=now,
                                         updated_at=now)
    yield workspace
    Task.objects.filter(workspace_id=workspace.id).delete()
    Workspace.objects.filter(id=workspace.id).delete()


def test_a_workspace_with_an_unfinished_task_is_refused_with_nothing_deleted(ws: Workspace) -> None:
    task_id = services.create_task({"prompt": "do it", "workspace": ws.id, "max_attempts": 1})["task"]["id"]
    with pytest.raises(Conflict) as refused:
        remove_workspace(ws.id)
    assert refused.value.code == "workspace_has_active_tasks" and refused.value.data["tasks"] == [task_id]
    assert Workspace.objects.filter(id=ws.id).exists() and Task.objects.filter(id=task_id).exists()


def test_finished_tasks_go_with_their_workspace(ws: Workspace) -> None:
    task_id = services.create_task({"prompt": "do it", "workspace": ws.id, "max_attempts": 1})["task"]["id"]
    services.cancel_task_record(task_id)
    assert remove_workspace(ws.id)["id"] == ws.id
    assert not Workspace.objects.filter(id=ws.id).exists() and not Task.objects.filter(id=task_id).exists()

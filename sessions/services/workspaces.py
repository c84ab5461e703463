"""Workspaces: registered roots sessions run in."""

from __future__ import annotations

import contextlib
import os
import shutil
from typing import Any

from sessions import catalog
from sessions.config import get_config
from sessions.enums import LIVE_STATES
from sessions.errors import Conflict, NotFound
from sessions.models import Session, Workspace
from sessions.services.control import delete_session_files
from sessions.services.lookup import read_session_meta
from sessions.services.payloads import session_payload


def list_workspaces() -> list[dict[str, Any]]:
    return [catalog.workspace_record(ws) for ws in Workspace.objects.all()]


def add_workspace(root_dir: str, name: str = "", add_dirs: list[str] | None = None,
                  default_agent: str = "") -> dict[str, Any]:
    return catalog.workspace_record(catalog.register_workspace(root_dir, name=name, add_dirs=add_dirs,
                                                               default_agent=default_agent))


def workspace_info(ref: str) -> dict[str, Any]:
    ws = catalog.find_workspace(ref)
    catalog.check_root(ws)
    config = get_config()
    sessions = []
    for row in Session.objects.filter(workspace_id=ws.id).order_by("-updated_at")[:100]:
        with contextlib.suppress(NotFound, Conflict):
            sessions.append(session_payload(read_session_meta(row.id)))
    return {
        "workspace": catalog.workspace_record(ws),
        "sessions": sessions,
        "agents": [{"name": a.name, "provider": a.provider or config.default_provider} for a in config.agents.values()],
        "skills": [],
        "providers": [{"name": p.name, "command": list(p.command), "display_name": p.display_name,
                       "available": shutil.which(p.command[0]) is not None or os.path.isfile(p.command[0])}
                      for p in config.providers.values()],
    }


def remove_workspace(ref: str) -> dict[str, Any]:
    ws = catalog.find_workspace(ref)
    live = Session.objects.filter(workspace_id=ws.id, state__in=[s.value for s in LIVE_STATES])
    if live.exists():
        raise Conflict("workspace has active sessions", code="workspace_has_active_sessions")
    record = catalog.workspace_record(ws)
    for row in Session.objects.filter(workspace_id=ws.id):
        with contextlib.suppress(OSError):
            delete_session_files(row.id, ws.id)
    ws.delete()
    return record

"""Workspaces: registered roots sessions run in."""

from __future__ import annotations

import contextlib
from typing import TypedDict

from django.db import transaction

from compozy_base.config.loader import get_config
from sessions.catalog import index as catalog
from sessions.catalog import workspace_users
from sessions.catalog.index import WorkspaceDoc
from sessions.core.enums import LIVE_STATES
from sessions.core.errors import Conflict, InvalidRequest, NotFound, StorageError
from sessions.models import Session, Workspace
from sessions.services.control import delete_session_files
from sessions.services.lookup import _agent, read_session_meta
from sessions.services.payloads import SessionPayload, session_payload
from sessions.services.providers import describe


class AgentRef(TypedDict):
    name: str
    provider: str


class ProviderRef(TypedDict):
    name: str
    command: list[str]
    display_name: str
    available: bool


class WorkspaceInfo(TypedDict):
    workspace: WorkspaceDoc
    sessions: list[SessionPayload]
    agents: list[AgentRef]
    skills: list[str]
    providers: list[ProviderRef]


def list_workspaces() -> list[WorkspaceDoc]:
    return [catalog.workspace_record(ws) for ws in Workspace.objects.all()]


def add_workspace(root_dir: str, name: str = "", add_dirs: list[str] | None = None,
                  default_agent: str = "", sandbox_ref: str = "") -> WorkspaceDoc:
    """Register a root. A default agent that is not defined is refused here, not at every later create; a
    sandbox is refused outright: none is supported yet, and a caller must not believe its agents run in one."""
    if sandbox_ref:
        raise InvalidRequest("sandboxes are not supported yet: agents run with the user's rights in the workspace",
                             code="sandbox_unsupported", data={"sandbox_ref": sandbox_ref})
    if default_agent:
        _agent(get_config(), default_agent)
    return catalog.workspace_record(catalog.register_workspace(root_dir, name=name, add_dirs=add_dirs,
                                                               default_agent=default_agent))


def workspace_info(ref: str) -> WorkspaceInfo:
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
        # Available as a session start judges it: on PATH, or through npx for a built-in's npm package (this said
        # "no" for every provider run through npx, the usual case on a fresh machine).
        "providers": [{"name": p.name, "command": list(p.command), "display_name": p.display_name,
                       "available": describe(p)["found"] != "missing"} for p in config.providers.values()],
    }


def remove_workspace(ref: str) -> WorkspaceDoc:
    """Delete a workspace, its sessions' folders and rows, and its finished tasks. Everything that can refuse is
    checked first: a workspace with live sessions or unfinished tasks answers 409 with nothing deleted (a task
    once made it a 500 after its sessions were already gone)."""
    ws = catalog.find_workspace(ref)
    live = Session.objects.filter(workspace_id=ws.id, state__in=[s.value for s in LIVE_STATES])
    if live.exists():
        raise Conflict("workspace has active sessions", code="workspace_has_active_sessions")
    for user in workspace_users.users():
        if busy := user.busy(ws):
            raise Conflict(user.message, code=user.code, data={user.data_key: busy})
    record = catalog.workspace_record(ws)
    for row in Session.objects.filter(workspace_id=ws.id):
        try:
            delete_session_files(row.id, ws.id)
        except FileNotFoundError:  # its folder is gone already: only the row is left
            catalog.delete_session_row(row.id)
        except OSError as exc:  # the sessions deleted so far stay deleted; the workspace and the rest stay
            raise StorageError.from_exception(exc) from exc
    with transaction.atomic():
        for user in workspace_users.users():
            user.release(ws)  # finished rows only: their sessions are deleted above
        ws.delete()
    return record

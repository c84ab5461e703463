"""`POST WS/repair`: inspect and append-only repair of an interrupted session transcript (§13, §4.6)."""

from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async
from django.http import HttpRequest
from ninja import Router

from sessions import catalog
from sessions.errors import Conflict, NotFound
from sessions.repair import IssueCode, repair_transcript
from sessions.store import folder
from sessions.store.ids import is_session_id

router = Router(tags=["sessions"])

TRUE_VALUES = frozenset({"1", "true", "yes", "on"})


def _flag(request: HttpRequest, *names: str) -> bool:
    return any((request.GET.get(name) or "").lower() in TRUE_VALUES for name in names)


def _check_scope(workspace_ref: str, session_id: str) -> None:
    """The session must exist and belong to the workspace in the route (else 404, never a hint)."""
    meta = folder.read_meta(session_id) if is_session_id(session_id) else None
    if meta is None:
        raise NotFound("session not found", code="session_not_found", data={"session_id": session_id})
    try:
        ws = catalog.find_workspace(workspace_ref)
    except NotFound:
        raise NotFound("session not found", code="session_not_found") from None
    if ws.id != meta["workspace_id"]:
        raise NotFound("session not found in this workspace", code="session_not_found")


def repair_in_workspace(workspace_ref: str, session_id: str, *, dry_run: bool, force: bool) -> dict[str, Any]:
    try:
        _check_scope(workspace_ref, session_id)
    except ValueError as exc:
        raise Conflict(f"session metadata is unreadable: {exc}", code="session_meta_invalid") from exc
    report = repair_transcript(session_id, dry_run=dry_run, force=force)
    if any(issue["code"] == IssueCode.SESSION_NOT_STOPPED for issue in report["issues"]):
        raise Conflict("the session is live; stop it before repairing its transcript", code="session_not_stopped",
                       data={"session_id": session_id})
    return report


@router.post("/workspaces/{workspace}/sessions/{session_id}/repair")
async def repair_session(request: HttpRequest, workspace: str, session_id: str) -> dict[str, Any]:
    dry_run = _flag(request, "dry_run", "dry-run")
    force = _flag(request, "force")
    report = await sync_to_async(repair_in_workspace)(workspace, session_id, dry_run=dry_run, force=force)
    return {"repair": report}

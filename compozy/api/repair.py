"""`POST WS/repair`: inspect and append-only repair of an interrupted session transcript (§13, §4.6)."""

from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async
from django.http import HttpRequest
from ninja import Query, Router

from compozy.api.response_schemas import RepairOut
from compozy.api.schemas import Ident, Ref, RepairQuery, responses
from compozy.api.sessions import truthy
from sessions import services
from sessions.core.errors import Conflict
from sessions.repair.transcript import IssueCode, RepairPayload, repair_transcript

router = Router(tags=["sessions"])


def repair_in_workspace(workspace_ref: str, session_id: str, *, dry_run: bool, force: bool) -> RepairPayload:
    # As stored (no stale-state repair on read): the transcript repair below reports what it finds.
    services.check_workspace_scope(workspace_ref, services.load_meta(session_id))
    report = repair_transcript(session_id, dry_run=dry_run, force=force)
    if any(issue["code"] == IssueCode.SESSION_NOT_STOPPED for issue in report["issues"]):
        raise Conflict("the session is live; stop it before repairing its transcript", code="session_not_stopped",
                       data={"session_id": session_id})
    return report


@router.post("/workspaces/{workspace}/sessions/{session_id}/repair", response=responses({200: RepairOut}),
             exclude_unset=True)
async def repair_session(request: HttpRequest, workspace: Ref, session_id: Ident,
                         filters: Query[RepairQuery]) -> dict[str, Any]:
    # `dry-run` is the CLI flag's spelling, accepted as an alias of `dry_run`.
    dry_run = filters.dry_run or truthy(request.GET.get("dry-run"))
    force = filters.force
    report = await sync_to_async(repair_in_workspace)(workspace, session_id, dry_run=dry_run, force=force)
    return {"repair": report}

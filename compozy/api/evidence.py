"""`GET …/evidence`: the session's evidence archive (compozy/diagnostics/evidence.py), a redacted tar.gz download."""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.http import FileResponse, HttpRequest
from ninja import Router

from compozy.api.schemas import Ident, Ref, responses
from compozy.diagnostics import evidence

router = Router(tags=["sessions"])


@router.get("/workspaces/{workspace}/sessions/{session_id}/evidence", response=responses({}),
            openapi_extra={"responses": {"200": {"description": "The redacted evidence archive (tar.gz, 0600 on disk).",
                                                 "content": {"application/gzip": {}}}}})
async def get_evidence(request: HttpRequest, workspace: Ref, session_id: Ident) -> FileResponse:
    """Status, doctor, the session, its events (JSONL), history, recap, crash bundles and daemon-log lines."""
    archive, name = await sync_to_async(evidence.build_evidence)(session_id, workspace)
    return FileResponse(archive, as_attachment=True, filename=name, content_type="application/gzip")

"""Read routes over the event store: the transcript (backward pages) and the recap."""

from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async
from django.http import HttpRequest
from ninja import Router

from sessions import recap, services, transcript
from sessions.errors import InvalidRequest
from sessions.store import folder

router = Router(tags=["sessions"])

WS = "/workspaces/{workspace}/sessions/{session_id}"


def _int(value: str | None, name: str, low: int, high: int | None = None) -> int | None:
    if value is None or value == "":
        return None
    try:
        number = int(value)
    except ValueError:
        number = low - 1
    if number < low or (high is not None and number > high):
        bounds = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise InvalidRequest(f"{name} must be an integer {bounds}",
                             code="invalid_limit" if name == "limit" else "invalid_cursor")
    return number


def transcript_page(session_id: str, workspace: str, limit: int | None, before: int | None) -> dict[str, Any]:
    meta = services.scoped_meta(session_id, workspace)
    limit = limit or transcript.DEFAULT_LIMIT
    page = transcript.read_page(folder.events_path(session_id), limit=limit, before=before)
    return transcript.page_payload(page, epoch=transcript.session_epoch(meta), limit=limit)


@router.get(WS + "/transcript")
async def get_transcript(request: HttpRequest, workspace: str, session_id: str) -> dict[str, Any]:
    """Backward pages of assembled UI messages: `limit` (default 200, max 1000), `before_sequence`."""
    q = request.GET
    limit = _int(q.get("limit"), "limit", 1, transcript.MAX_LIMIT)
    before = _int(q.get("before_sequence"), "before_sequence", 1)
    return await sync_to_async(transcript_page)(session_id, workspace, limit, before)


@router.get(WS + "/recap")
async def get_recap(request: HttpRequest, workspace: str, session_id: str) -> dict[str, Any]:
    """Deterministic, bounded, redacted recap: `limit` recent messages (default 20, max 100)."""
    limit = _int(request.GET.get("limit"), "limit", 1, recap.MAX_LIMIT)
    return {"recap": await sync_to_async(recap.build_recap)(session_id, workspace_ref=workspace, limit=limit)}

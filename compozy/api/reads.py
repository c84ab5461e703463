"""Read routes over the event store: the transcript (backward pages) and the recap."""

from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse
from ninja import Query, Router

from compozy.api.response_schemas import RecapOut, TranscriptPageOut, render
from compozy.api.schemas import Ident, RecapQuery, Ref, TranscriptQuery, responses
from sessions import services
from sessions.live import transcript
from sessions.services import recap
from sessions.store import folder

router = Router(tags=["sessions"])

WS = "/workspaces/{workspace}/sessions/{session_id}"


def transcript_page(session_id: str, workspace: str, limit: int | None, before: int | None) -> HttpResponse:
    meta = services.scoped_meta(session_id, workspace)
    limit = limit or transcript.DEFAULT_LIMIT
    page = transcript.read_page(folder.events_path(session_id), limit=limit, before=before)
    return render(TranscriptPageOut, transcript.page_payload(page, epoch=transcript.session_epoch(meta), limit=limit))


@router.get(WS + "/transcript", response=responses({200: TranscriptPageOut}), exclude_unset=True)
async def get_transcript(request: HttpRequest, workspace: Ref, session_id: Ident,
                         filters: Query[TranscriptQuery]) -> HttpResponse:
    """Backward pages of assembled UI messages: `limit` (default 200, max 1000), `before_sequence`."""
    return await sync_to_async(transcript_page)(session_id, workspace, filters.limit, filters.before_sequence)


@router.get(WS + "/recap", response=responses({200: RecapOut}), exclude_unset=True)
async def get_recap(request: HttpRequest, workspace: Ref, session_id: Ident,
                    filters: Query[RecapQuery]) -> dict[str, Any]:
    """Deterministic, bounded, redacted recap: `limit` recent messages (default 20, max 100)."""
    return {"recap": await sync_to_async(recap.build_recap)(session_id, workspace_ref=workspace, limit=filters.limit)}

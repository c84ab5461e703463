"""REST routes for the attention list (`/api/attention…`). Thin: schemas are the contract; attention.services
derives the list."""

from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async
from django.http import HttpRequest
from ninja import Field, Router, Schema

from attention import services
from attention.enums import AttentionKind
from compozy.api.schemas import Ident, responses

router = Router(tags=["attention"])


class AttentionItemOut(Schema):
    id: str = Field(..., description="Stable for the thing it is about; what `POST /api/attention/{id}/ack` takes.")
    kind: AttentionKind
    summary: str = Field(..., description="One line: who asks for what, or what failed.")
    since: str = Field(..., description="When it began (RFC3339).")
    url: str = Field(..., description="The dashboard page to act on it (relative).")
    session_id: str | None
    task_id: str | None
    workspace_id: str | None
    agent: str | None
    request_id: str | None = Field(None, description="A permission's request id (`compozy session approve`).")


class AttentionItemAcked(AttentionItemOut):
    acknowledged: bool


class AttentionListOut(Schema):
    items: list[AttentionItemOut]


class AttentionAckOut(Schema):
    item: AttentionItemAcked


@router.get("/attention", response=responses({200: AttentionListOut}))
async def list_attention(request: HttpRequest) -> dict[str, Any]:
    """What waits on a person, newest first: pending permissions, provider logins, failed sessions, tasks that need
    attention. An item leaves when it is answered, retried, removed or acknowledged."""
    return await sync_to_async(services.list_items)()


@router.post("/attention/{item_id}/ack", response=responses({200: AttentionAckOut}))
async def ack_attention(request: HttpRequest, item_id: Ident) -> dict[str, Any]:
    """Acknowledge an item: it leaves the list for everyone (404 `attention_not_found` when it is gone already)."""
    return await sync_to_async(services.acknowledge)(item_id)

"""REST routes for people, their tokens and the audit log (`/api/users`, `/api/tokens`, `/api/audit`). Thin: the
accounts app's service layer does the work; every route here needs the `admin` scope (compozy/api/route_scopes.py).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from asgiref.sync import sync_to_async
from django.http import HttpRequest
from ninja import Field, Query, Router, Schema

from accounts import control, links, services
from accounts.errors import AccountError
from accounts.scopes import Role, TokenScope
from compozy.api.principals import principal_of
from compozy.api.schemas import Ident, Ref, StrictIn, responses
from compozy_base.config.loader import get_config
from sessions import services as sessions
from sessions.catalog import index as catalog
from sessions.core.errors import NotFound
from sessions.services.controller import note_control

router = Router(tags=["accounts"])


class UserIn(StrictIn):
    name: str = Field(..., max_length=64, description="1-64 of a-z 0-9 _ . -")
    role: Role = Role.OPERATOR


class UserOut(Schema):
    name: str
    role: Role
    created_at: str


class UserEnvelope(Schema):
    user: UserOut


class UsersOut(Schema):
    users: list[UserOut]


class TokenIn(StrictIn):
    user: str = Field(..., max_length=64)
    scopes: list[TokenScope] = Field(default_factory=list, max_length=4,
                                     description="Empty: every scope the user's role allows.")
    workspaces: list[str] = Field(default_factory=list, max_length=50,
                                  description="Workspace names, ids or paths; empty: every workspace.")
    expires: str | None = Field(None, max_length=20, description="A duration (`30d`, `12h`); none: never.")


class TokenOut(Schema):
    id: str
    user: str
    scopes: list[TokenScope]
    workspaces: list[str]
    created_at: str
    expires_at: str | None
    revoked_at: str | None
    state: str = Field(..., description="active, expired or revoked")


class TokenCreatedOut(Schema):
    token: TokenOut
    secret: str = Field(..., description="`Authorization: Bearer <secret>`. Shown once: only its hash is kept.")


class TokenEnvelope(Schema):
    token: TokenOut


class TokensOut(Schema):
    tokens: list[TokenOut]


class TokenQuery(Schema):
    user: str | None = Field(None, max_length=64)


class AuditQuery(Schema):
    user: str | None = Field(None, max_length=64)
    since: str | None = Field(None, max_length=40, description="A duration back from now (`1h`, `30m`) or RFC3339.")
    limit: int = Field(200, ge=1, le=5000)


class AuditEntryOut(Schema):
    id: int
    at: str
    actor: str = Field(..., description="A user's name, `daemon`, `agent:<session>` or `webhook-link`.")
    actor_kind: str
    user: str
    token_id: str
    action: str
    method: str
    path: str
    session_id: str
    status: int
    detail: dict[str, Any]


class AuditOut(Schema):
    entries: list[AuditEntryOut]


def _now() -> datetime:
    return datetime.now(UTC)


@router.get("/users", response=responses({200: UsersOut}))
async def list_users(request: HttpRequest) -> dict[str, Any]:
    return {"users": await sync_to_async(services.list_users)()}


@router.post("/users", response=responses({201: UserEnvelope}))
async def add_user(request: HttpRequest, payload: UserIn) -> tuple[int, dict[str, Any]]:
    return 201, {"user": await sync_to_async(services.add_user)(payload.name, payload.role, _now())}


def _create_token(payload: TokenIn) -> tuple[services.TokenOut, str]:
    workspaces = [catalog.find_workspace(ref).id for ref in payload.workspaces]
    expires = services.duration_seconds(payload.expires, "expires") if payload.expires else None
    if expires == 0:
        raise AccountError(400, "invalid_duration", "expires must be longer than zero")
    return services.create_token(payload.user, payload.scopes, workspaces, expires, _now())


@router.post("/tokens", response=responses({201: TokenCreatedOut}))
async def create_token(request: HttpRequest, payload: TokenIn) -> tuple[int, dict[str, Any]]:
    token, secret = await sync_to_async(_create_token)(payload)
    return 201, {"token": token, "secret": secret}


@router.get("/tokens", response=responses({200: TokensOut}))
async def list_tokens(request: HttpRequest, filters: Query[TokenQuery]) -> dict[str, Any]:
    return {"tokens": await sync_to_async(services.list_tokens)(filters.user, _now())}


@router.post("/tokens/{token_id}/revoke", response=responses({200: TokenEnvelope}))
async def revoke_token(request: HttpRequest, token_id: Ident) -> dict[str, Any]:
    return {"token": await sync_to_async(services.revoke_token)(token_id, _now())}


def _since(text: str | None, now: datetime) -> datetime | None:
    if not text:
        return None
    if text[:1].isdigit() and text[-1] in "smhd":
        return now - timedelta(seconds=services.duration_seconds(text, "since"))
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise AccountError(400, "invalid_since", "since takes a duration (1h, 30m) or an RFC3339 time") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


@router.get("/audit", response=responses({200: AuditOut}))
async def audit(request: HttpRequest, filters: Query[AuditQuery]) -> dict[str, Any]:
    """Who did what, newest first: every write carried out through the API (its actor: a user and token id), the
    answers given through action links (`webhook-link`)."""
    since = _since(filters.since, _now())
    return {"entries": await sync_to_async(services.audit)(filters.user, since, filters.limit)}


class LinksIn(StrictIn):
    ttl: str | None = Field(None, max_length=20, description="Shorter than `[notifications] link_ttl` (`10m`).")


class LinkOut(Schema):
    action: links.LinkAction
    url: str


class LinksOut(Schema):
    actions: list[LinkOut]
    expires_in: float = Field(..., description="Seconds each link answers for (`[notifications] link_ttl`).")


@router.post("/workspaces/{workspace}/sessions/{session_id}/permissions/{request_id}/links",
             response=responses({201: LinksOut}))
async def permission_links(request: HttpRequest, workspace: Ref, session_id: Ident, request_id: Ident,
                           payload: LinksIn | None = None) -> tuple[int, dict[str, Any]]:
    """Signed, single-use approve and deny links for one pending permission request, made with this token's
    authority (a phone or a chat may answer through them without signing in; the answer is logged as
    `webhook-link` with this token). Each expires after `[notifications] link_ttl`, or the shorter `ttl` asked."""
    waiting = (await sessions.list_permissions(session_id, workspace))["permissions"]
    pending = next((p for p in waiting if p["request_id"] == request_id), None)
    if pending is None:
        raise NotFound("no pending permission request with that id", code="permission_not_found",
                       data={"request_id": request_id})
    session = await sync_to_async(sessions.get_session)(session_id, workspace)
    ttl = get_config().notifications.link_ttl
    if payload is not None and payload.ttl:
        ttl = min(ttl, services.duration_seconds(payload.ttl, "ttl") or ttl)
    title = " ".join(str(x) for x in (pending.get("kind"), pending.get("title")) if x)
    offers = await sync_to_async(links.make)(principal_of(request), session_id, str(session["workspace_id"]),
                                             request_id, title, ttl, _now())
    return 201, {"actions": [{"action": o.action, "url": request.build_absolute_uri(o.path)} for o in offers],
                 "expires_in": ttl}


class ControlIn(StrictIn):
    take: bool = Field(False, description="Take control of the session for this token's person.")


class ControlOut(Schema):
    session_id: str
    controller: str | None = Field(..., description="Who holds control (a user's name); null: nobody.")
    token_id: str | None
    taken_at: str | None


SESSION = "/workspaces/{workspace}/sessions/{session_id}"


@router.get(SESSION + "/control", response=responses({200: ControlOut}))
async def get_control(request: HttpRequest, workspace: Ref, session_id: Ident) -> control.ControlOut:
    """Who holds control of the session: the others watch, and their prompts are refused unless they queue."""
    await sync_to_async(sessions.get_session)(session_id, workspace)  # 404 for a session it may not see
    return await sync_to_async(control.holder)(session_id)


@router.post(SESSION + "/control", response=responses({200: ControlOut}))
async def take_control(request: HttpRequest, workspace: Ref, session_id: Ident,
                       payload: ControlIn | None = None) -> control.ControlOut:
    """`{"take": true}`: this token's person holds control from now; the session's viewers see a `system` row
    titled `control_taken` on its stream. Without `take`, the holder is answered unchanged."""
    await sync_to_async(sessions.get_session)(session_id, workspace)
    if payload is None or not payload.take:
        return await sync_to_async(control.holder)(session_id)
    actor = principal_of(request).actor
    held = await sync_to_async(control.take)(session_id, actor, _now())
    await note_control(session_id, workspace, actor)
    return held

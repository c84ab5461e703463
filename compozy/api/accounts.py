"""REST routes for people, their tokens and the audit log (`/api/users`, `/api/tokens`, `/api/audit`). Thin: the
accounts app's service layer does the work; every route here needs the `admin` scope (compozy/api/route_scopes.py).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from asgiref.sync import sync_to_async
from django.http import HttpRequest
from ninja import Field, Query, Router, Schema

from accounts import services
from accounts.errors import AccountError
from accounts.scopes import Role, TokenScope
from compozy.api.schemas import Ident, StrictIn, responses
from sessions.catalog import index as catalog

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

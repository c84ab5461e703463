"""The one service layer for people, tokens and the audit log: the API (and through it the CLI) calls these.

Synchronous ORM calls: callers on the event loop run them off it (`asyncio.to_thread`, `sync_to_async`).
"""

from __future__ import annotations

import re
import threading
import time
from datetime import datetime, timedelta
from typing import TypedDict

from django.db import IntegrityError, transaction

from accounts import tokens
from accounts.actor import Actor
from accounts.errors import AccountError
from accounts.models import ApiToken, AuditEntry, User
from accounts.principal import Principal
from accounts.scopes import ROLE_SCOPES, Role, TokenScope

NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")
RESERVED_NAMES = frozenset({"owner", "daemon", "webhook-link"})
_DURATION = re.compile(r"(\d+)([smhd])")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}


class UserOut(TypedDict):
    name: str
    role: str
    created_at: str


class TokenOut(TypedDict):
    id: str
    user: str
    scopes: list[str]
    workspaces: list[str]
    created_at: str
    expires_at: str | None
    revoked_at: str | None
    state: str  # active, expired, revoked


class AuditOut(TypedDict):
    id: int
    at: str
    actor: str
    actor_kind: str
    user: str
    token_id: str
    action: str
    method: str
    path: str
    session_id: str
    status: int
    detail: dict[str, object]


def duration_seconds(text: str, what: str = "duration") -> int:
    """`30d`, `12h`, `1h30m`, `90s` in seconds; AccountError `invalid_duration` otherwise."""
    text = text.strip()
    parts = _DURATION.findall(text)
    if not text or "".join(n + u for n, u in parts) != text:
        raise AccountError(400, "invalid_duration", f"{what} takes a duration like 30d, 12h or 90m, not {text!r:.40}")
    return sum(int(n) * _UNIT[u] for n, u in parts)


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat(timespec="seconds") if moment else None


def add_user(name: str, role: Role, now: datetime) -> UserOut:
    if not NAME.fullmatch(name) or name in RESERVED_NAMES:
        raise AccountError(400, "invalid_user_name", "a user name is 1-64 of a-z 0-9 _ . - (starting with a letter "
                           f"or digit), and not one of {', '.join(sorted(RESERVED_NAMES))}", {"name": name[:80]})
    try:
        with transaction.atomic():
            user = User.objects.create(name=name, role=role.value, created_at=now)
    except IntegrityError:
        raise AccountError(409, "user_exists", f"user {name!r} exists already", {"name": name}) from None
    return {"name": user.name, "role": user.role, "created_at": _iso(user.created_at) or ""}


def list_users() -> list[UserOut]:
    return [{"name": u.name, "role": u.role, "created_at": _iso(u.created_at) or ""}
            for u in User.objects.order_by("name")]


def _token_out(row: ApiToken, now: datetime) -> TokenOut:
    state = "revoked" if row.revoked_at else "expired" if row.expires_at and row.expires_at <= now else "active"
    return {"id": row.id, "user": row.user_id, "scopes": list(row.scopes), "workspaces": list(row.workspaces),
            "created_at": _iso(row.created_at) or "", "expires_at": _iso(row.expires_at),
            "revoked_at": _iso(row.revoked_at), "state": state}


def create_token(user_name: str, scopes: list[TokenScope], workspaces: list[str], expires_in: int | None,
                 now: datetime) -> tuple[TokenOut, str]:
    """A new token for `user_name` and its secret (`<id>.<secret>`), which is not kept: shown once. Without
    scopes, the role's; a scope beyond the role is refused."""
    user = User.objects.filter(name=user_name).first()
    if user is None:
        raise AccountError(404, "user_not_found", f"no user {user_name!r}: `compozy user add {user_name}` first",
                           {"user": user_name})
    allowed = ROLE_SCOPES[Role(user.role)]
    wanted = set(scopes) or set(allowed)
    if beyond := sorted(s.value for s in wanted - allowed):
        raise AccountError(400, "scope_beyond_role", f"user {user_name!r} is {user.role}: it may not hold "
                           f"{', '.join(beyond)}", {"role": user.role, "scopes": beyond})
    secret, salt = tokens.new_secret(), tokens.new_salt()
    row = ApiToken.objects.create(
        id=tokens.new_token_id(), user=user, salt=salt, digest=tokens.digest(salt, secret),
        scopes=sorted(s.value for s in wanted), workspaces=sorted(set(workspaces)), created_at=now,
        expires_at=now + timedelta(seconds=expires_in) if expires_in else None)
    return _token_out(row, now), f"{row.id}.{secret}"


def list_tokens(user_name: str | None, now: datetime) -> list[TokenOut]:
    rows = ApiToken.objects.order_by("created_at", "id")
    if user_name:
        rows = rows.filter(user_id=user_name)
    return [_token_out(r, now) for r in rows]


def revoke_token(token_id: str, now: datetime) -> TokenOut:
    row = ApiToken.objects.filter(id=token_id).first()
    if row is None:
        raise AccountError(404, "token_not_found", f"no token {token_id!r}", {"token_id": token_id[:60]})
    if row.revoked_at is None:
        ApiToken.objects.filter(id=token_id, revoked_at__isnull=True).update(revoked_at=now)
        row.refresh_from_db()
    CACHE.forget(token_id)  # refused at once on this node; other nodes within CACHE_SECONDS
    return _token_out(row, now)


# A checked token is trusted this long before its row is read again. Revocation must reach every node of a
# cluster within 5 s (issue 49); 2 s leaves room for a slow catalog read, and spares the catalog a read on every
# request of a busy dashboard.
CACHE_SECONDS = 2.0


class TokenCache:
    """token id → (presented digest, principal or None, refusal code, checked at): per process, short-lived,
    thread-safe. A refused token keeps its code (`token_revoked`, `token_expired`, `auth_required`), so a client
    retrying a revoked token is answered without a catalog read each time."""

    def __init__(self, ttl: float = CACHE_SECONDS) -> None:
        self.ttl = ttl
        self._rows: dict[str, tuple[str, Principal | None, str, float]] = {}
        self._lock = threading.Lock()

    def get(self, token_id: str, presented: str, now: float) -> tuple[bool, Principal | None, str]:
        """(hit, principal, refusal code): the code is "" for a principal, and on a miss."""
        with self._lock:
            hit = self._rows.get(token_id)
        if hit is None or hit[0] != presented or now - hit[3] > self.ttl:
            return False, None, ""
        return True, hit[1], hit[2]

    def put(self, token_id: str, presented: str, principal: Principal | None, now: float, refusal: str = "") -> None:
        with self._lock:
            if len(self._rows) > 1024:  # bounded: a caller presenting made-up ids cannot grow it
                self._rows.clear()
            self._rows[token_id] = (presented, principal, "" if principal is not None else refusal, now)

    def forget(self, token_id: str) -> None:
        with self._lock:
            self._rows.pop(token_id, None)


CACHE = TokenCache()


def authenticate(presented: str, now: datetime, clock: float | None = None) -> tuple[Principal | None, str]:
    """The principal a presented `<id>.<secret>` speaks for and "", or None and why it is refused, for the 401's
    code: `token_revoked`, `token_expired` or `auth_required` (unknown, malformed, wrong secret). One catalog read,
    cached with its answer for CACHE_SECONDS."""
    parts = tokens.split(presented)
    if parts is None:
        return None, "auth_required"
    token_id, secret = parts
    at = time.monotonic() if clock is None else clock
    fingerprint = tokens.digest(token_id, secret)  # the cache keys on a digest, never the secret itself
    hit, principal, refusal = CACHE.get(token_id, fingerprint, at)
    if hit:
        return principal, refusal
    row = ApiToken.objects.filter(id=token_id).first()
    if row is None or not tokens.matches(row.salt, row.digest, secret):
        principal, refusal = None, "auth_required"
    else:
        principal = active(row, now)
        refusal = "" if principal is not None else "token_revoked" if row.revoked_at is not None else "token_expired"
    CACHE.put(token_id, fingerprint, principal, at, refusal)
    return principal, refusal


def active(row: ApiToken | None, now: datetime) -> Principal | None:
    """The principal of a token row that is neither revoked nor expired at `now`, else None."""
    if row is None or row.revoked_at is not None or (row.expires_at is not None and row.expires_at <= now):
        return None
    return Principal(row.user_id, row.id, frozenset(TokenScope(s) for s in row.scopes), frozenset(row.workspaces))


def principal_for_id(token_id: str, now: datetime, clock: float | None = None) -> Principal | None:
    """The principal of a browser signed in with token `token_id` (its cookie is the daemon's signature over the
    id): None once the token is revoked or expired."""
    at = time.monotonic() if clock is None else clock
    hit, principal, _ = CACHE.get(token_id, "signed-in", at)
    if hit:
        return principal
    principal = active(ApiToken.objects.filter(id=token_id).first(), now)
    CACHE.put(token_id, "signed-in", principal, at)
    return principal


def record(actor: Actor, action: str, now: datetime, *, method: str = "", path: str = "", session_id: str = "",
           status: int = 0, detail: dict[str, object] | None = None) -> None:
    AuditEntry.objects.create(at=now, actor=actor.label[:120], actor_kind=actor.kind.value, user=actor.user,
                              token_id=actor.token_id, action=action[:60], method=method, path=path[:500],
                              session_id=session_id[:64], status=status, detail=detail or {})


def audit(user: str | None, since: datetime | None, limit: int) -> list[AuditOut]:
    rows = AuditEntry.objects.order_by("-at", "-id")
    if user:
        rows = rows.filter(user=user)
    if since is not None:
        rows = rows.filter(at__gte=since)
    return [{"id": r.id, "at": _iso(r.at) or "", "actor": r.actor, "actor_kind": r.actor_kind, "user": r.user,
             "token_id": r.token_id, "action": r.action, "method": r.method, "path": r.path,
             "session_id": r.session_id, "status": r.status, "detail": dict(r.detail)} for r in rows[:limit]]

"""Action links (issue 49): signed, single-use, expiring URLs that answer one permission request (or one question of
the agent's) from a phone or a chat, without the dashboard's sign-in. The link is the credential:
`/a/<link id>.<action>.<signature>`.

A link is checked in this order, each step's refusal a stable code: its form and signature (403 `link_invalid`:
one altered byte anywhere fails here), its row (403 `link_invalid`), whether it was used (410 `link_used`), its
age (410 `link_expired`), and whether the token that made it still holds (403 `link_invalid`).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from django.db import IntegrityError, transaction
from django.utils import timezone

from accounts.actor import OWNER_TOKEN_ID, Actor, webhook_link
from accounts.errors import AccountError
from accounts.models import ActionLink, ApiToken, LinkKey
from accounts.principal import Principal
from accounts.services import active

LINK_PREFIX = "/a/"
_LINK = re.compile(r"(lnk_[0-9a-f]{16})\.(approve|deny|answer|decline)\.([0-9a-f]{64})")


class LinkAction(StrEnum):
    APPROVE = "approve"  # a permission's
    DENY = "deny"
    ANSWER = "answer"  # a question's: its page is the question's form
    DECLINE = "decline"


class LinkKind(StrEnum):
    PERMISSION = "permission"
    ELICITATION = "elicitation"


ACTIONS = {LinkKind.PERMISSION: (LinkAction.APPROVE, LinkAction.DENY),
           LinkKind.ELICITATION: (LinkAction.ANSWER, LinkAction.DECLINE)}


@dataclass(frozen=True)
class LinkOffer:
    """What a webhook payload carries: `{"action": "approve"|"deny", "url"}`."""

    action: LinkAction
    path: str


@dataclass(frozen=True)
class OpenedLink:
    """A link that may be used now: what it answers, and who made it."""

    link_id: str
    kind: LinkKind
    action: LinkAction
    session_id: str
    workspace_id: str
    request_id: str
    title: str
    actor: Actor


def _key() -> bytes:
    row = LinkKey.objects.filter(id=1).first()
    if row is None:
        try:
            with transaction.atomic():
                row = LinkKey.objects.create(id=1, secret=secrets.token_hex(32), created_at=timezone.now())
        except IntegrityError:  # another node made it first: theirs is the key
            row = LinkKey.objects.get(id=1)
    return row.secret.encode()


def _sign(key: bytes, link_id: str, action: str) -> str:
    return hmac.new(key, f"compozy action link {link_id} {action}".encode(), hashlib.sha256).hexdigest()


def make(maker: Principal, session_id: str, workspace_id: str, request_id: str, title: str, ttl: float,
         now: datetime, kind: LinkKind = LinkKind.PERMISSION) -> list[LinkOffer]:
    """The links for one pending request, made with `maker`'s authority: approve and deny for a permission,
    answer (the question's form) and decline for a question."""
    key = _key()
    row = ActionLink.objects.create(
        id="lnk_" + secrets.token_hex(8), kind=kind.value, session_id=session_id, workspace_id=workspace_id,
        request_id=request_id[:200], title=title[:300], user=maker.user, token_id=maker.token_id, created_at=now,
        expires_at=now + timedelta(seconds=ttl))
    return [LinkOffer(action, f"{LINK_PREFIX}{row.id}.{action.value}.{_sign(key, row.id, action.value)}")
            for action in ACTIONS[kind]]


def state(expires_at: datetime, used_at: datetime | None, now: datetime) -> str:
    """`used`, `expired` or `open`: a used link is used whatever its age (the clock is the caller's)."""
    if used_at is not None:
        return "used"
    return "expired" if now >= expires_at else "open"


def _maker_holds(row: ActionLink, now: datetime) -> bool:
    """The owner's links hold while the daemon does; a person's while their token is neither revoked nor expired."""
    if row.token_id == OWNER_TOKEN_ID:
        return True
    return active(ApiToken.objects.filter(id=row.token_id).first(), now) is not None


def open_link(text: str, now: datetime) -> OpenedLink:
    """The link `text` names (`<id>.<action>.<signature>`), if it may be used now; AccountError otherwise."""
    match = _LINK.fullmatch(text)
    invalid = AccountError(403, "link_invalid", "this link is not valid: it was altered, or never made here")
    if match is None:
        raise invalid
    link_id, action, signature = match.groups()
    if not hmac.compare_digest(signature, _sign(_key(), link_id, action)):
        raise invalid
    row = ActionLink.objects.filter(id=link_id).first()
    if row is None or LinkAction(action) not in ACTIONS[LinkKind(row.kind)]:
        raise invalid
    found = state(row.expires_at, row.used_at, now)
    if found == "used":
        raise AccountError(410, "link_used", f"this link was used already ({row.used_action})",
                           {"used_action": row.used_action})
    if found == "expired":
        raise AccountError(410, "link_expired", "this link has expired; answer in the dashboard or the CLI")
    if not _maker_holds(row, now):
        raise invalid
    return OpenedLink(row.id, LinkKind(row.kind), LinkAction(action), row.session_id, row.workspace_id,
                      row.request_id, row.title, webhook_link(row.user, row.token_id))


def spend(link: OpenedLink, now: datetime) -> None:
    """Mark the link used, once: a second use racing this one finds it used (compare-and-set on `used_at`)."""
    if not ActionLink.objects.filter(id=link.link_id, used_at__isnull=True).update(
            used_at=now, used_action=link.action.value):
        raise AccountError(410, "link_used", "this link was used already")


def unspend(link: OpenedLink) -> None:
    """The answer could not be given (the request was answered another way, the session stopped): the link is
    not spent by a refusal."""
    ActionLink.objects.filter(id=link.link_id).update(used_at=None, used_action="")

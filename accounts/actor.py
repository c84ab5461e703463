"""Who did something: a person's token, the daemon itself, an agent, or a signed action link. A typed value the
API layer builds from the request's token and hands down through the service layer into events and the audit log.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TypedDict


class ActorKind(StrEnum):
    USER = "user"
    DAEMON = "daemon"
    AGENT = "agent"
    WEBHOOK_LINK = "webhook-link"


class ActorFields(TypedDict, total=False):
    """How an actor is written into a session's event (`actor`) and into the audit log's JSON."""

    kind: str
    label: str
    user: str
    token_id: str
    session_id: str


@dataclass(frozen=True)
class Actor:
    kind: ActorKind
    user: str = ""  # the person (for a webhook link: the person whose token made the link)
    token_id: str = ""  # the token used (for a webhook link: the token that made it)
    session_id: str = ""  # for `agent:<session>`

    @property
    def label(self) -> str:
        """`alice`, `daemon`, `agent:<session>`, `webhook-link`: what a person reads in a list."""
        if self.kind == ActorKind.USER:
            return self.user
        if self.kind == ActorKind.AGENT:
            return f"agent:{self.session_id}"
        return self.kind.value

    def fields(self) -> ActorFields:
        out: ActorFields = {"kind": self.kind.value, "label": self.label}
        if self.user:
            out["user"] = self.user
        if self.token_id:
            out["token_id"] = self.token_id
        if self.session_id:
            out["session_id"] = self.session_id
        return out


DAEMON = Actor(ActorKind.DAEMON)
OWNER_USER = "owner"
# The token made at first start ($COMPOZY_HOME/token): the owner's admin token, and the control socket's caller.
OWNER_TOKEN_ID = "owner"
OWNER = Actor(ActorKind.USER, user=OWNER_USER, token_id=OWNER_TOKEN_ID)


def agent(session_id: str) -> Actor:
    return Actor(ActorKind.AGENT, session_id=session_id)


def webhook_link(user: str, token_id: str) -> Actor:
    return Actor(ActorKind.WEBHOOK_LINK, user=user, token_id=token_id)

"""Who a request's token speaks for, set by the API guard on the request (no Django: the guard's hot path)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from accounts.actor import OWNER_TOKEN_ID, OWNER_USER, Actor, ActorKind
from accounts.scopes import TokenScope, allows

# The ASGI scope key the guard sets; a request without it came from no token the guard knows (fail closed).
PRINCIPAL_KEY = "compozy.principal"
# A request one node routes to a session's owner carries who asked (compozy/api/routing.py); the owner believes it
# only beside the cluster token, and the node that took the request has checked its scopes and logged it.
ACTOR_HEADER = "x-compozy-actor"


@dataclass(frozen=True)
class Principal:
    user: str
    token_id: str
    scopes: frozenset[TokenScope]
    workspaces: frozenset[str] = frozenset()  # workspace ids; empty: every workspace

    @property
    def actor(self) -> Actor:
        return Actor(ActorKind.USER, user=self.user, token_id=self.token_id)

    def may(self, needed: TokenScope) -> bool:
        return allows(self.scopes, needed)

    @property
    def limited(self) -> bool:
        return bool(self.workspaces)

    def sees(self, workspace_id: str) -> bool:
        return not self.workspaces or workspace_id in self.workspaces

    def to_header(self) -> str:
        return json.dumps({"user": self.user, "token_id": self.token_id, "scopes": sorted(self.scopes),
                           "workspaces": sorted(self.workspaces)}, separators=(",", ":"))

    @classmethod
    def from_header(cls, value: str) -> Principal | None:
        """The principal a routed request names, None when the header is not one (then it is the owner's)."""
        try:
            raw = json.loads(value)
            return cls(str(raw["user"]), str(raw["token_id"]), frozenset(TokenScope(s) for s in raw["scopes"]),
                       frozenset(str(w) for w in raw["workspaces"]))
        except (ValueError, KeyError, TypeError):
            return None

    def public(self) -> dict[str, object]:
        return {"user": self.user, "token_id": self.token_id, "scopes": sorted(s.value for s in self.scopes),
                "workspaces": sorted(self.workspaces)}


# The owner's token (the file made at first start), the control socket's caller, and the cluster's other nodes
# routing a request to this one (their request was checked by the node that took it).
OWNER_PRINCIPAL = Principal(OWNER_USER, OWNER_TOKEN_ID, frozenset({TokenScope.ADMIN}))

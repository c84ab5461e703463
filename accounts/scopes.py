"""What a token may do: four scopes, and the role a person holds bounding the scopes their tokens may carry."""

from __future__ import annotations

from enum import StrEnum


class TokenScope(StrEnum):
    """Each route declares one (compozy/api/route_scopes.py). `admin` covers the others; `read` is covered by every
    scope, since a person who may prompt or approve must see what they answer."""

    READ = "read"
    PROMPT = "prompt"
    APPROVE = "approve"
    ADMIN = "admin"


class Role(StrEnum):
    ADMIN = "admin"
    OPERATOR = "operator"
    VIEWER = "viewer"


ROLE_SCOPES: dict[Role, frozenset[TokenScope]] = {
    Role.ADMIN: frozenset(TokenScope),
    Role.OPERATOR: frozenset({TokenScope.READ, TokenScope.PROMPT, TokenScope.APPROVE}),
    Role.VIEWER: frozenset({TokenScope.READ}),
}


def allows(granted: frozenset[TokenScope], needed: TokenScope) -> bool:
    """Whether a token with `granted` may use a route that declares `needed`."""
    if TokenScope.ADMIN in granted:
        return True
    if needed == TokenScope.READ:
        return bool(granted)
    return needed in granted

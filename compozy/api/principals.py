"""The request's principal and actor (set by the guard, compozy/api/guard.py), and the checks of a token limited
to some workspaces that only a route's body or answer can settle (a create's workspace, a list's rows)."""

from __future__ import annotations

from django.http import HttpRequest

from accounts.actor import Actor
from accounts.principal import OWNER_PRINCIPAL, PRINCIPAL_KEY, Principal
from sessions.catalog import index as catalog
from sessions.core.errors import NotFound


def principal_of(request: HttpRequest) -> Principal:
    """The guard sets it on every request; a request driven in-process without the guard (tests/inproc.py) is
    the owner's."""
    principal = getattr(request, "scope", {}).get(PRINCIPAL_KEY)
    return principal if isinstance(principal, Principal) else OWNER_PRINCIPAL


def actor_of(request: HttpRequest) -> Actor:
    return principal_of(request).actor


def check_create_workspace(principal: Principal, ref: str | None) -> None:
    """A limited token creates sessions only in its workspaces, which must be registered already (a path of
    its own would register a new one). Another workspace is answered as unknown."""
    if not principal.limited:
        return
    try:
        workspace = catalog.find_workspace(ref or "")
    except NotFound:
        workspace = None
    if workspace is None or not principal.sees(workspace.id):
        raise NotFound("workspace not found", code="workspace_not_found", data={"workspace": (ref or "")[:200]})

"""The scope each route needs, and the name its writes go by in the audit log: one table the guard reads.

A route not listed needs `read` to be read and `admin` to be written (fail closed: a new write route nobody
classified is the owner's until it is). `tests/integration/test_scope_probe.py` walks every route of the OpenAPI
document with every scope and fails on a route answering more than its scope allows.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from accounts.scopes import TokenScope

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_SEG = r"[^/]+"
SESSION = rf"/api/workspaces/(?P<workspace>{_SEG})/sessions/(?P<session>{_SEG})"


@dataclass(frozen=True)
class RouteRule:
    methods: frozenset[str]
    pattern: re.Pattern[str]
    scope: TokenScope
    action: str  # the audit log's name for a write


def _rule(methods: str, path: str, scope: TokenScope, action: str = "") -> RouteRule:
    return RouteRule(frozenset(methods.split()), re.compile(path + r"/?"), scope, action)


R, P, A, ADM = TokenScope.READ, TokenScope.PROMPT, TokenScope.APPROVE, TokenScope.ADMIN
RULES: tuple[RouteRule, ...] = (
    # People, tokens and the audit log are the owner's (and other admins').
    _rule("GET POST", r"/api/users", ADM, "user.add"),
    _rule("GET POST", r"/api/tokens", ADM, "token.create"),
    _rule("POST DELETE", r"/api/tokens/[^/]+(/revoke)?", ADM, "token.revoke"),
    _rule("GET", r"/api/audit", ADM),
    # Any valid token signs its own browser in, and says who it is.
    _rule("POST", r"/api/auth/ticket", R, "auth.ticket"),
    # Answering what an agent waits on.
    _rule("POST", SESSION + r"/permissions/[^/]+", A, "session.permission"),
    _rule("POST", SESSION + r"/elicitations/[^/]+", A, "session.answer"),
    _rule("POST", r"/api/attention/[^/]+/ack", A, "attention.ack"),
    _rule("POST", SESSION + r"/permissions/[^/]+/links", A, "link.create"),
    # Driving a session.
    _rule("POST", r"/api/sessions", P, "session.create"),
    _rule("POST", SESSION + r"/prompt", P, "session.prompt"),
    _rule("POST", SESSION + r"/steer", P, "session.steer"),
    _rule("POST", SESSION + r"/interrupt", P, "session.interrupt"),
    _rule("POST", SESSION + r"/prompt/cancel", P, "session.cancel"),
    _rule("DELETE", SESSION + r"/prompt/queue/[^/]+", P, "session.dequeue"),
    _rule("POST", SESSION + r"/mode", P, "session.mode"),
    _rule("POST", SESSION + r"/children", P, "session.child"),
    _rule("POST", SESSION + r"/reactivate", P, "session.reactivate"),
    _rule("POST DELETE", SESSION + r"/attach", P, "session.attach"),
    _rule("POST", SESSION + r"/control", P, "session.control"),
    _rule("POST", SESSION + r"/stop", P, "session.stop"),
    _rule("POST", SESSION + r"/rewind", P, "session.rewind"),
    _rule("POST", SESSION + r"/fork", P, "session.fork"),
    _rule("POST", SESSION + r"/commit", P, "session.commit"),
    _rule("POST", SESSION + r"/merge", P, "session.merge"),
    _rule("PATCH", SESSION, P, "session.update"),
    _rule("DELETE", SESSION, P, "session.remove"),
    _rule("POST", r"/api/tasks", P, "task.create"),
    _rule("POST", r"/api/tasks/[^/]+/cancel", P, "task.cancel"),
    _rule("POST", r"/api/tasks/[^/]+/retry", P, "task.retry"),
    _rule("POST", r"/api/workspaces/resolve", P, "workspace.resolve"),
    _rule("POST", r"/api/workspaces", P, "workspace.add"),
    _rule("POST", r"/api/agents/[^/]+/heartbeat/wake", P, "heartbeat.wake"),
    # Memory writes are a person's, as prompts are; rebuilding its index is upkeep.
    _rule("POST", r"/api/memory/entries", P, "memory.add"),
    _rule("PATCH DELETE", r"/api/memory/entries/[^/]+", P, "memory.edit"),
    _rule("POST", r"/api/memory/dreams/trigger", P, "memory.dream"),
    _rule("POST", r"/api/memory/dreams/decisions/[^/]+/revert", P, "memory.revert"),
    # The machine's own upkeep.
    _rule("DELETE", r"/api/workspaces/[^/]+", ADM, "workspace.remove"),
    _rule("POST", SESSION + r"/repair", ADM, "session.repair"),
    _rule("POST", r"/api/worktrees/prune", ADM, "worktree.prune"),
    _rule("POST", r"/api/memory/reindex", ADM, "memory.reindex"),
    _rule("POST PUT", r"/api/providers/[^/]+/(test|key|login)", ADM, "provider.setup"),
    _rule("POST", r"/api/daemon/reload", ADM, "config.reload"),
)


def rule_for(method: str, path: str) -> RouteRule | None:
    for rule in RULES:
        if method in rule.methods and rule.pattern.fullmatch(path):
            return rule
    return None


def needed(method: str, path: str) -> tuple[TokenScope, str]:
    """The scope a request needs and its audit name: a listed route's; else `read` for a read, `admin` for a write
    (named by its method and path)."""
    rule = rule_for("GET" if method == "HEAD" else method, path)
    if rule is not None:
        return rule.scope, rule.action or f"{method.lower()} {path[:50]}"
    if method in SAFE_METHODS:
        return TokenScope.READ, ""
    return TokenScope.ADMIN, f"{method.lower()} {path[:50]}"


_SESSION_PATHS = (
    re.compile(SESSION + r"(/.*)?"),
    re.compile(rf"/api/sessions/(?!catalog-stream$)(?P<session>{_SEG})/?"),
    re.compile(rf"/sessions/(?P<session>{_SEG})(/|/events\.jsonl)?"),
)
# What a token limited to some workspaces may reach besides its sessions: its own sign-in, the session list, the
# dashboard and the catalog stream (all cut to its workspaces), a create (checked against them) and the daemon's
# status. The inbox and the tasks page list every workspace's items: refused.
_LIMITED_OPEN = re.compile(r"/api/sessions/?|/api/sessions/catalog-stream|/api/auth/ticket|/api/auth/whoami"
                           r"|/api/status|/|/api/openapi\.json|/api/docs")


def session_of(path: str) -> str | None:
    """The session id a path names (API routes, its stream and exports, the dashboard's page), if any."""
    for pattern in _SESSION_PATHS:
        match = pattern.fullmatch(path)
        if match:
            return match.group("session")
    return None


def open_to_limited(path: str) -> bool:
    return bool(_LIMITED_OPEN.fullmatch(path))

"""Session types and lineage (docs/reference/sessions.md §16): spawned children, their TTL, and reaping."""

from __future__ import annotations

from datetime import datetime, timedelta

from compozy_base.config.modes import PermissionMode
from sessions.core.enums import SessionType
from sessions.core.record import LineageDoc, SessionMeta
from sessions.store.folder import isoformat, parse_time

MAX_SPAWN_DEPTH = 3
MAX_TTL_SECONDS = 7 * 24 * 3600
# Ordered from least to most permissive: a child never gets more than its parent.
PERMISSION_RANK = [PermissionMode.DENY_ALL, PermissionMode.APPROVE_READS, PermissionMode.APPROVE_ALL]


def effective_permissions(session_type: SessionType, agent_mode: str, parent_mode: str | None = None,
                          requested: str | None = None) -> str:
    if session_type == SessionType.DREAM:
        return PermissionMode.APPROVE_ALL.value  # memory consolidation must never block on a person
    mode = PermissionMode(requested or agent_mode)
    if parent_mode:
        mode = min(mode, PermissionMode(parent_mode), key=PERMISSION_RANK.index)
    return mode.value


def child_lineage(parent: SessionMeta, *, role: str, ttl_seconds: int, now: datetime) -> LineageDoc:
    parent_lineage = parent.get("lineage") or {}
    depth = int(parent_lineage.get("spawn_depth") or 0) + 1
    return {
        "parent_session_id": parent["id"],
        "root_session_id": parent_lineage.get("root_session_id") or parent["id"],
        "spawn_depth": depth,
        "spawn_role": role,
        "ttl_seconds": ttl_seconds,
        "ttl_expires_at": isoformat(now + timedelta(seconds=ttl_seconds)),
    }


def reap_reason(meta: SessionMeta, parent_meta: SessionMeta | None, now: datetime) -> str | None:
    """Why a live spawned child must be reaped now, or None."""
    lineage = meta.get("lineage") or {}
    if (meta.get("session_type") or "user") != SessionType.SPAWNED or not lineage:
        return None
    expires = parse_time(lineage.get("ttl_expires_at"))
    if expires and expires <= now:
        return "reaped: ttl expired"
    if parent_meta is None or parent_meta.get("state") == "stopped":
        return "reaped: parent stopped"
    return None

"""Session types: children never get wider permissions, dream always approves, reaping rules."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sessions.catalog.lineage import child_lineage, effective_permissions, reap_reason
from sessions.core.enums import SessionType

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def test_dream_sessions_always_approve_all() -> None:
    assert effective_permissions(SessionType.DREAM, "deny-all") == "approve-all"


def test_a_child_never_gets_more_than_its_parent() -> None:
    assert effective_permissions(SessionType.SPAWNED, "approve-all", parent_mode="approve-reads") == "approve-reads"
    assert effective_permissions(SessionType.SPAWNED, "approve-all", "approve-all", requested="deny-all") == "deny-all"


def test_lineage_tracks_root_and_depth_across_generations() -> None:
    parent = {"id": "sess_" + "a" * 16}
    child = child_lineage(parent, role="reviewer", ttl_seconds=60, now=NOW)
    grandchild = child_lineage({"id": "sess_" + "b" * 16, "lineage": child}, role="fixer", ttl_seconds=5, now=NOW)
    assert child["root_session_id"] == parent["id"] and child["spawn_depth"] == 1
    assert grandchild["root_session_id"] == parent["id"] and grandchild["spawn_depth"] == 2
    assert grandchild["parent_session_id"] == "sess_" + "b" * 16


def test_reaped_when_ttl_expires_or_parent_stops_not_before() -> None:
    meta = {"session_type": "spawned", "lineage": child_lineage({"id": "p"}, role="r", ttl_seconds=60, now=NOW)}
    live_parent = {"state": "active"}
    assert reap_reason(meta, live_parent, NOW + timedelta(seconds=30)) is None
    assert reap_reason(meta, live_parent, NOW + timedelta(seconds=61)) == "reaped: ttl expired"
    assert reap_reason(meta, {"state": "stopped"}, NOW) == "reaped: parent stopped"
    assert reap_reason({"session_type": "user"}, None, NOW) is None

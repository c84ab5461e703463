"""Spawned children on a live daemon: lineage recorded, and the supervision sweep (a huey job) reaps a child
when its TTL expires, and another when its parent stops, not before."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.conftest import Daemon, wait_for


def spawn(d: Daemon, parent_id: str, **body: Any) -> dict[str, Any]:
    response = d.http.post(d.scoped(parent_id, "/children"), json=body)
    assert response.status_code == 201, response.text
    return response.json()["session"]


def stopped_with(d: Daemon, session_id: str, detail: str) -> bool:
    session = d.session(session_id)
    return session["state"] == "stopped" and session["stop_detail"] == detail


def test_children_are_reaped_when_their_ttl_expires_or_their_parent_stops(daemon: Daemon, workspace: Path) -> None:
    parent = daemon.create(workspace)["id"]
    short = spawn(daemon, parent, role="reviewer", ttl_seconds=2)
    long = spawn(daemon, parent, role="fixer", ttl_seconds=3600)
    for child in (short, long):
        lineage = daemon.meta(child["id"])["lineage"]
        assert (lineage["parent_session_id"], lineage["spawn_depth"]) == (parent, 1)

    wait_for(lambda: stopped_with(daemon, short["id"], "reaped: ttl expired"), timeout=60, what="the TTL reap")
    assert daemon.session(long["id"])["state"] == "active", "a child within its TTL, parent live, is kept"

    assert daemon.http.post(daemon.scoped(parent, "/stop")).status_code == 204
    wait_for(lambda: stopped_with(daemon, long["id"], "reaped: parent stopped"), timeout=60,
             what="the reap after the parent stopped")

"""What `session status` and `health inspect` return: a session's health row with its wake state, policy and
audit. Apart from `services.py` (the health rows themselves) because it reads the wake service, which builds on
those rows."""

from __future__ import annotations

from typing import TypedDict

from health import policy, wake
from health.heartbeat import Diagnostic
from health.services import HealthDto, health_row, row_dict
from sessions import services
from sessions.services.payloads import SessionPayload


class StatusDto(TypedDict):
    session: SessionPayload
    health: HealthDto
    wake_state: wake.WakeStateDto | None


class InspectDto(TypedDict):
    session_id: str
    health: HealthDto
    wake_state: wake.WakeStateDto | None
    policy: policy.SnapshotSummary | None
    policy_snapshot_id: str | None
    policy_digest: str | None
    config_digest: str | None
    last_wake_event: wake.WakeEventDto | None
    wake_events: list[wake.WakeEventDto]
    last_error: str | None
    diagnostics: list[Diagnostic]


def status_dto(session_id: str, workspace_ref: str | None = None) -> StatusDto:
    """`session status`: the session record (unchanged, so `.session.failure` still reads) plus health."""
    row = health_row(session_id, workspace_ref)
    return {"session": services.get_session(session_id, workspace_ref), "health": row_dict(row),
            "wake_state": wake.wake_state_dto(session_id)}


def inspect_dto(session_id: str, workspace_ref: str | None = None, recent: int = 5) -> InspectDto:
    """Health, wake state, the HEARTBEAT.md policy the session's agent would be woken under, the last audit."""
    row = health_row(session_id, workspace_ref)
    snap = policy.resolve(row.agent_name, row.workspace_id)  # the snapshot a wake would use now
    events = wake.recent_events(session_id=session_id, limit=recent)
    return {
        "session_id": session_id, "health": row_dict(row), "wake_state": wake.wake_state_dto(session_id),
        "policy": policy.snapshot_summary(snap), "policy_snapshot_id": snap.id if snap else None,
        "policy_digest": snap.digest if snap and snap.digest else None,
        "config_digest": snap.config_digest if snap else None, "last_wake_event": events[0] if events else None,
        "wake_events": events, "last_error": row.last_error or None,
        "diagnostics": list(snap.diagnostics) if snap else [],
    }

"""Agent-level heartbeat surfaces: status (policy + wake service + optional session context) and manual wake."""

from __future__ import annotations

from typing import TypedDict

from compozy_base.config.loader import get_config
from health import policy, services, wake
from health.enums import WakeSource
from health.models import HeartbeatSnapshot
from health.policy import HeartbeatStatus
from health.services import HealthDto
from sessions import services as session_services
from sessions.catalog.claims import owner_id
from sessions.catalog.index import find_workspace
from sessions.core.errors import InvalidRequest, NotFound
from sessions.models import SweepClaim
from sessions.store.folder import isoformat, utcnow


def _check_agent(name: str) -> None:
    if name not in get_config().agents:
        raise NotFound(f"agent {name!r} is not defined", code="agent_not_found", data={"agent": name})


def _workspace_id(ref: str | None) -> str:
    return find_workspace(ref).id if ref else ""


class ServiceState(TypedDict):
    health_recomputed_at: str | None
    last_cycle_at: str | None


class AgentStatus(HeartbeatStatus, total=False):
    """`agent heartbeat status`: the policy's status, and what the wake service says of the agent now."""

    service: ServiceState
    wake_reason: str | None
    sessions: list[wake.SessionDecision]
    wake_state: wake.WakeStateDto | None
    session_health: HealthDto
    wake_events: list[wake.WakeEventDto]


def service_state() -> ServiceState:
    """When this daemon start's health recompute finished, and when the wake cycle last claimed a tick."""

    claim = SweepClaim.objects.filter(name=f"wake_cycle:{owner_id()}").first()
    run = services.current_run()
    return {"health_recomputed_at": services.recomputed_at(run) if run else None,
            "last_cycle_at": isoformat(claim.claimed_at) if claim else None}


def agent_status(name: str, *, workspace: str | None = None, session_id: str | None = None,
                 include_session_health: bool = False, include_wake_events: bool = False) -> AgentStatus:
    _check_agent(name)
    workspace_id = _workspace_id(workspace)
    row = None
    if session_id:
        row = services.health_row(session_id, workspace, touch=False)
        workspace_id = workspace_id or row.workspace_id
    out: AgentStatus = {**policy.status(name, workspace_id)}
    out["service"] = service_state()
    out["wake_reason"] = _wake_reason(out)
    # Per session, the decision a wake would reach now (the health seed: the reasons appear in this status too).
    out["sessions"] = wake.session_decisions(name, workspace_id=workspace_id, session_id=session_id or "")
    if session_id:
        out["wake_state"] = wake.wake_state_dto(session_id)
    if include_session_health and row is not None:
        out["session_health"] = services.row_dict(row)
    if include_wake_events:
        out["wake_events"] = wake.recent_events(agent_name=name, session_id=session_id, limit=20)
    return out


def _wake_reason(status: HeartbeatStatus) -> str | None:
    """The policy-level reason (closed set) that refuses every wake of the agent now, or None when each session's
    own state decides: `heartbeat_no_policy` for an agent without HEARTBEAT.md."""

    snap = HeartbeatSnapshot.objects.filter(id=status["snapshot_id"]).first() if status.get("snapshot_id") else None
    reason = wake.policy_reason(get_config().heartbeat, snap, utcnow())
    return reason.value if reason else None


def all_statuses() -> list[AgentStatus]:
    """The home-level policy of every configured agent (the dashboard's HEARTBEAT.md panel)."""

    service = service_state()
    return [{**(status := policy.status(name, "")), "service": service, "wake_reason": _wake_reason(status)}
            for name in sorted(get_config().agents)]


def manual_wake(name: str, session_id: str, *, source: WakeSource = WakeSource.MANUAL, dry_run: bool = False,
                workspace: str | None = None) -> wake.WakeDecision:
    _check_agent(name)
    if not session_id:
        raise InvalidRequest("session_id is required", code="session_id_required")
    wake.require_recomputed()
    # A session that does not exist, or one of another workspace, is a `session_not_found` decision (the health seed's
    # reason for an id that does not resolve) with nothing recorded: a wake for a made-up id must leave no audit row,
    # and one scoped to a workspace must never prompt another's session.

    try:
        session_services.scoped_meta(session_id, workspace or None)
    except NotFound as exc:
        if exc.code != "session_not_found":
            raise
        return wake.not_found(name, session_id, source=source, dry_run=dry_run)
    return wake.wake(name, session_id, source=source, dry_run=dry_run)

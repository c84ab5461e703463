"""The health app's API contract: one DTO per shape, shared by CLI (over HTTP/UDS) and the dashboard."""

from __future__ import annotations

from typing import Any

from ninja import Schema

from health.enums import HealthState, HealthValue, PolicyStatus, WakeReason, WakeResult, WakeSource


class HealthDTO(Schema):
    session_id: str
    workspace_id: str
    agent_name: str
    state: HealthState
    health: HealthValue
    active_prompt: bool
    attachable: bool
    eligible_for_wake: bool
    ineligibility_reason: WakeReason | None = None
    last_activity_at: str | None = None
    last_presence_at: str | None = None
    last_error: str | None = None
    updated_at: str | None = None


class HealthEnvelope(Schema):
    health: HealthDTO


class WakeStateDTO(Schema):
    workspace_id: str
    agent_name: str
    session_id: str
    policy_snapshot_id: str | None = None
    last_wake_at: str | None = None
    next_allowed_at: str | None = None
    coalesced_count: int
    last_result: WakeResult | None = None
    last_reason: WakeReason | None = None
    in_flight: bool
    updated_at: str | None = None


class WakeEventDTO(Schema):
    id: str
    workspace_id: str | None = None
    agent_name: str
    session_id: str | None = None
    policy_snapshot_id: str | None = None
    source: WakeSource
    result: WakeResult
    reason: WakeReason
    synthetic_prompt_id: str | None = None
    created_at: str | None = None
    expires_at: str | None = None


class StatusDTO(Schema):
    """`session status`: the session record as before, with health and wake state beside it."""

    session: dict[str, Any]
    health: HealthDTO
    wake_state: WakeStateDTO | None = None


class PolicySummaryDTO(Schema):
    snapshot_id: str
    validation_status: PolicyStatus
    digest: str | None = None
    config_digest: str
    source_path: str | None = None
    created_at: str | None = None


class InspectDTO(Schema):
    session_id: str
    health: HealthDTO
    wake_state: WakeStateDTO | None = None
    policy: PolicySummaryDTO | None = None
    policy_snapshot_id: str | None = None
    policy_digest: str | None = None
    config_digest: str | None = None
    last_wake_event: WakeEventDTO | None = None
    wake_events: list[WakeEventDTO] = []
    last_error: str | None = None
    diagnostics: list[dict[str, Any]] = []


class InspectQuery(Schema):
    include_recent_wake_events: int = 5


class HeartbeatStatusQuery(Schema):
    workspace: str | None = None
    workspace_id: str | None = None
    session_id: str | None = None
    include_session_health: bool = False
    include_recent_wake_events: bool = False


class WakeServiceDTO(Schema):
    """Whether wakes may run in this daemon start yet, and when the scheduler last cycled."""

    health_recomputed_at: str | None = None
    last_cycle_at: str | None = None


class SessionWakeDTO(Schema):
    """What a wake of one session would decide now (a dry run that writes nothing)."""

    session_id: str
    workspace_id: str
    state: HealthState
    result: WakeResult
    reason: WakeReason


class HeartbeatStatusDTO(Schema):
    agent_name: str
    workspace_id: str | None = None
    source_path: str | None = None
    present: bool
    valid: bool
    validation_status: PolicyStatus
    enabled: bool
    config_enabled: bool
    active: bool
    digest: str | None = None
    config_digest: str
    snapshot_id: str
    summary: str | None = None
    preferences: dict[str, Any] = {}
    context: dict[str, Any] = {}
    diagnostics: list[dict[str, Any]] = []
    service: WakeServiceDTO | None = None
    # The policy-level reason refusing every wake of the agent now (None: each session's state decides).
    wake_reason: WakeReason | None = None
    sessions: list[SessionWakeDTO] | None = None
    wake_state: WakeStateDTO | None = None
    wake_events: list[WakeEventDTO] | None = None
    session_health: HealthDTO | None = None


class HeartbeatAgentsDTO(Schema):
    agents: list[HeartbeatStatusDTO]


class WakeRequest(Schema):
    session_id: str
    source: WakeSource = WakeSource.MANUAL
    dry_run: bool = False
    idempotency_key: str | None = None
    workspace_id: str | None = None


class WakeDecisionDTO(Schema):
    wake_event_id: str | None = None
    result: WakeResult
    reason: WakeReason
    session_id: str
    agent_name: str
    source: WakeSource
    dry_run: bool
    policy_snapshot_id: str | None = None
    policy_digest: str | None = None
    config_digest: str | None = None
    synthetic_prompt_id: str | None = None
    diagnostics: list[dict[str, Any]] = []


class WakeDecisionEnvelope(Schema):
    decision: WakeDecisionDTO

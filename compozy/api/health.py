"""Health routes: doctor, session health/inspect, and the agent heartbeat status and wake (docs/reference/surfaces.md
§3).

Thin: parse with the schemas, call `health.services` / `health.wake`, return the DTO. `…/status` lives on the
sessions router (it was there first) and returns `health.dtos.status_dto`.
"""

from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async
from django.http import HttpRequest
from ninja import Query, Router

from compozy.api.health_schemas import (
    HealthEnvelope,
    HeartbeatAgentsDTO,
    HeartbeatStatusDTO,
    HeartbeatStatusQuery,
    InspectDTO,
    InspectQuery,
    WakeDecisionEnvelope,
    WakeRequest,
)
from compozy.api.response_schemas import DoctorOut
from compozy.api.schemas import DoctorQuery, Ident, Ref, responses
from compozy.diagnostics.doctor import run_doctor
from health import dtos, services
from health.agents import AgentStatus, agent_status, all_statuses, manual_wake
from health.dtos import InspectDto
from health.services import HealthAnswer

router = Router(tags=["health"])
WS = "/workspaces/{workspace}/sessions/{session_id}"


@router.get("/doctor", response=responses({200: DoctorOut}), exclude_unset=True)
async def doctor(request: HttpRequest, filters: Query[DoctorQuery]) -> dict[str, Any]:
    def split(values: list[str] | None) -> list[str] | None:
        return [v for raw in values or [] for v in raw.split(",") if v] or None

    # Off Django's shared sync thread: the dashboard asks on every page load, and the checks walk the worktrees'
    # files and the memory files, which other requests' sync work must not queue behind.
    return await sync_to_async(run_doctor, thread_sensitive=False)(split(filters.only), split(filters.exclude),
                                                                   filters.quiet)


@router.get(WS + "/health", response=responses({200: HealthEnvelope}))
async def session_health(request: HttpRequest, workspace: Ref, session_id: Ident) -> HealthAnswer:
    return await sync_to_async(services.health_dto)(session_id, workspace)


@router.get(WS + "/inspect", response=responses({200: InspectDTO}))
async def session_inspect(request: HttpRequest, workspace: Ref, session_id: Ident,
                          query: Query[InspectQuery]) -> InspectDto:
    return await sync_to_async(dtos.inspect_dto)(session_id, workspace,
                                                     max(0, min(query.include_recent_wake_events, 100)))


@router.get("/heartbeat/agents", response=responses({200: HeartbeatAgentsDTO}))
async def heartbeat_agents(request: HttpRequest) -> dict[str, Any]:
    return {"agents": await sync_to_async(all_statuses)()}


@router.get("/agents/{name}/heartbeat/status", response=responses({200: HeartbeatStatusDTO}))
async def heartbeat_status(request: HttpRequest, name: Ident, query: Query[HeartbeatStatusQuery]) -> AgentStatus:
    return await sync_to_async(agent_status)(
        name, workspace=query.workspace or query.workspace_id, session_id=query.session_id,
        include_session_health=query.include_session_health, include_wake_events=query.include_recent_wake_events)


@router.post("/agents/{name}/heartbeat/wake", response=responses({200: WakeDecisionEnvelope}))
async def heartbeat_wake(request: HttpRequest, name: Ident, body: WakeRequest) -> dict[str, Any]:
    # Not thread-sensitive: concurrent wakes must really run concurrently (the gate is a compare-and-set), and
    # a wake waits on the daemon's loop for its synthetic prompt to be recorded.
    decision = await sync_to_async(manual_wake, thread_sensitive=False)(
        name, body.session_id, source=body.source, dry_run=body.dry_run, workspace=body.workspace_id)
    return {"decision": decision}

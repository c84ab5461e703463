"""Health routes: doctor, session health/inspect, and the agent heartbeat status and wake (surfaces reference §3).

Thin: parse with the schemas, call `health.services` / `health.wake`, return the DTO. `…/status` lives on the
sessions router (it was there first) and returns `health.services.status_dto`.
"""

from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async
from django.http import HttpRequest
from ninja import Query, Router

from health import services
from health.doctor import run_doctor
from health.schemas import (
    HealthEnvelope,
    HeartbeatAgentsDTO,
    HeartbeatStatusDTO,
    HeartbeatStatusQuery,
    InspectDTO,
    InspectQuery,
    WakeDecisionEnvelope,
    WakeRequest,
)

router = Router(tags=["health"])
WS = "/workspaces/{workspace}/sessions/{session_id}"


@router.get("/doctor")
async def doctor(request: HttpRequest) -> dict[str, Any]:
    q = request.GET
    split = lambda key: [v for raw in q.getlist(key) for v in raw.split(",") if v]  # noqa: E731
    return await sync_to_async(run_doctor)(split("only") or None, split("exclude") or None,
                                           q.get("quiet", "").lower() in {"1", "true"})


@router.get(WS + "/health", response=HealthEnvelope)
async def session_health(request: HttpRequest, workspace: str, session_id: str) -> dict[str, Any]:
    return await sync_to_async(services.health_dto)(session_id, workspace)


@router.get(WS + "/inspect", response=InspectDTO)
async def session_inspect(request: HttpRequest, workspace: str, session_id: str,
                          query: Query[InspectQuery]) -> dict[str, Any]:
    return await sync_to_async(services.inspect_dto)(session_id, workspace,
                                                     max(0, min(query.include_recent_wake_events, 100)))


@router.get("/heartbeat/agents", response=HeartbeatAgentsDTO)
async def heartbeat_agents(request: HttpRequest) -> dict[str, Any]:
    from health.agents import all_statuses

    return {"agents": await sync_to_async(all_statuses)()}


@router.get("/agents/{name}/heartbeat/status", response=HeartbeatStatusDTO)
async def heartbeat_status(request: HttpRequest, name: str, query: Query[HeartbeatStatusQuery]) -> dict[str, Any]:
    from health.agents import agent_status

    return await sync_to_async(agent_status)(
        name, workspace=query.workspace or query.workspace_id, session_id=query.session_id,
        include_session_health=query.include_session_health, include_wake_events=query.include_recent_wake_events)


@router.post("/agents/{name}/heartbeat/wake", response=WakeDecisionEnvelope)
async def heartbeat_wake(request: HttpRequest, name: str, body: WakeRequest) -> dict[str, Any]:
    from health.agents import manual_wake

    # Not thread-sensitive: concurrent wakes must really run concurrently (the gate is a compare-and-set), and
    # a wake waits on the daemon's loop for its synthetic prompt to be recorded.
    decision = await sync_to_async(manual_wake, thread_sensitive=False)(
        name, body.session_id, source=body.source, dry_run=body.dry_run, workspace=body.workspace_id)
    return {"decision": decision}

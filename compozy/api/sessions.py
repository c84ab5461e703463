"""REST routes for sessions and workspaces. Thin: the schemas (compozy/api/schemas.py) validate, the service
layer acts, the route shapes the envelope."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, cast

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from ninja import Header, Query, Router, Schema

from accounts import control
from compozy.api import prompt_stream
from compozy.api.guard import PEER_PID
from compozy.api.health_schemas import StatusDTO
from compozy.api.principals import actor_of, check_create_workspace, principal_of
from compozy.api.response_schemas import (
    AttachOut,
    ElicitationAnswerOut,
    ElicitationsOut,
    EventsOut,
    HistoryOut,
    HookRunsOut,
    PermissionDecisionOut,
    PermissionsOut,
    PromptOut,
    QueueOut,
    SessionEnvelope,
    SessionListOut,
    StatusOut,
    WorkspaceEnvelope,
    WorkspaceInfoOut,
    WorkspacesOut,
    render,
)
from compozy.api.schemas import (
    AttachIn,
    CreateSessionIn,
    DetachQuery,
    ElicitationAnswerIn,
    EventsQuery,
    HistoryQuery,
    HookRunsQuery,
    Ident,
    InterruptIn,
    ListSessionsQuery,
    ModeIn,
    PermissionDecisionIn,
    PromptIn,
    PromptQuery,
    Ref,
    RemoveQuery,
    RenameIn,
    ResolveWorkspaceIn,
    Sequence,
    SpawnChildIn,
    SteerIn,
    StopIn,
    WorkspaceIn,
    responses,
)
from compozy.diagnostics.status import loop_lag, runtime_status
from health.dtos import StatusDto, status_dto
from health.services import decorate_list
from sessions import services
from sessions.catalog import index as catalog
from sessions.core.errors import InvalidRequest
from sessions.live.pressure import ABORT, BACKLOG
from sessions.services import lineage_tree
from sessions.services.create import CreateBody
from sessions.services.prompts import (
    ElicitationAnswer,
    ElicitationList,
    PermissionAnswer,
    PermissionList,
    PromptAnswer,
    QueueList,
)
from sessions.services.reactivation import Attached
from sessions.services.reads import SessionList
from sessions.services.workspaces import WorkspaceInfo

router = Router(tags=["sessions"])
workspaces = Router(tags=["workspaces"])

# Path parameters: bounded, NUL- and surrogate-free text (ids are further checked by the services).
Workspace = Ref
SessionId = Ident
LastEventId = Annotated[Sequence | None, Header(alias="Last-Event-ID")]


def now() -> datetime:
    return datetime.now(UTC)


def truthy(value: str | None) -> bool:
    """A query flag: 1, true, yes or on (any case)."""
    return (value or "").lower() in {"1", "true", "yes", "on"}


# ---- sessions --------------------------------------------------------------------------------

@router.post("/sessions", response=responses({201: SessionEnvelope}), exclude_unset=True)
async def create_session(request: HttpRequest, payload: CreateSessionIn) -> tuple[int, dict[str, Any]]:
    body = cast(CreateBody, payload.model_dump(exclude_unset=True))  # CreateSessionIn's fields are CreateBody's
    principal = principal_of(request)
    await sync_to_async(check_create_workspace)(principal, payload.workspace or payload.workspace_path)
    session = await services.create_session(body)
    await sync_to_async(control.take)(str(session["id"]), principal.actor, now())  # the creator holds control
    return 201, {"session": session}


@router.get("/sessions", response=responses({200: SessionListOut}), exclude_unset=True)
async def list_sessions(request: HttpRequest, filters: Query[ListSessionsQuery]) -> SessionList:
    principal = principal_of(request)
    # A token limited to some workspaces lists only their sessions, filtered in the query so the page counts them.
    result = await sync_to_async(services.list_sessions)(
        workspace=filters.workspace, state=filters.state, resumable=filters.resumable, all_states=filters.all,
        agent=filters.agent, query=filters.q, limit=filters.limit, cursor=filters.cursor, session_type=filters.type,
        workspace_ids=principal.workspaces if principal.limited else None,
    )
    if filters.include_health:
        result = await sync_to_async(decorate_list)(result)
    return result


@router.get("/sessions/{session_id}", response=responses({200: SessionEnvelope}), exclude_unset=True)
async def get_session(request: HttpRequest, session_id: SessionId) -> dict[str, Any]:
    return {"session": await sync_to_async(services.get_session)(session_id)}


WS = "/workspaces/{workspace}/sessions/{session_id}"


@router.get(WS, response=responses({200: SessionEnvelope}), exclude_unset=True)
async def get_scoped_session(request: HttpRequest, workspace: Workspace, session_id: SessionId) -> dict[str, Any]:
    return {"session": await sync_to_async(services.get_session)(session_id, workspace)}


@router.patch(WS, response=responses({200: SessionEnvelope}), exclude_unset=True)
async def rename_session(request: HttpRequest, workspace: Workspace, session_id: SessionId,
                         payload: RenameIn) -> dict[str, Any]:
    return {"session": await services.rename_session(session_id, payload.name, workspace)}


@router.get(WS + "/status", response=responses({200: StatusDTO}), exclude_unset=True)
async def session_status(request: HttpRequest, workspace: Workspace, session_id: SessionId) -> StatusDto:
    """The session record with its health (one DTO for CLI, HTTP and UDS)."""

    return await sync_to_async(status_dto)(session_id, workspace)


@router.delete(WS, response=responses({204: None}))
async def remove_session(request: HttpRequest, workspace: Workspace, session_id: SessionId,
                         filters: Query[RemoveQuery]) -> tuple[int, None]:
    """A worktree session with uncommitted or unmerged work answers 409 `worktree_has_work` unless `?force=true`."""
    await services.remove_session(session_id, workspace, force=filters.force)
    await sync_to_async(control.forget)(session_id)
    return 204, None


@router.post(WS + "/stop", response=responses({204: None}))
async def stop_session(request: HttpRequest, workspace: Workspace, session_id: SessionId,
                       payload: StopIn | None = None) -> tuple[int, None]:
    await services.stop_session(session_id, workspace, (payload.detail or "") if payload else "")
    return 204, None


# The 200 of a prompt that starts a turn is a stream (docs/reference/events.md §6.2); ninja declares only JSON bodies,
# so the stream's media type is added to the same 200 here. Queued and staged prompts answer 202 JSON.
PROMPT_STREAM_OPENAPI = {"responses": {200: {
    "description": "The turn started: the AI SDK's UI message stream v1 (header x-vercel-ai-ui-message-stream: v1; "
                   "`data: {chunk}` frames, then `data: [DONE]`), or with ?frames=raw (alias ?format=raw) "
                   "`event: <type>` frames. A client whose Accept asks for application/json (and not "
                   "text/event-stream) gets the JSON prompt result instead.",
    "content": {"text/event-stream": {"schema": {"type": "string"}}},
}}}


@router.post(WS + "/prompt", response=responses({200: PromptOut, 202: PromptOut}), exclude_unset=True,
             openapi_extra=PROMPT_STREAM_OPENAPI)
async def prompt(request: HttpRequest, workspace: Workspace, session_id: SessionId, payload: PromptIn,
                 filters: Query[PromptQuery]) -> tuple[int, PromptAnswer] | StreamingHttpResponse:
    message = payload.text()
    if message is None:
        raise InvalidRequest("message is required", code="message_required")
    await sync_to_async(control.check)(session_id, actor_of(request), payload.mode == "queue")
    status, result = await services.prompt_session(session_id, message, mode=payload.mode, workspace_ref=workspace,
                                                   expected_turn_id=payload.expected_turn_id)
    started = result["prompt"].get("turn_id") if result["prompt"].get("status") == "accepted" else None
    if status != 200 or not started or prompt_stream.wants_json(request.headers.get("Accept")):
        return status, result
    scope = getattr(request, "scope", {})
    return prompt_stream.response_for_turn(session_id, started, raw=filters.raw,
                                           backlog=scope.get(BACKLOG), abort=scope.get(ABORT))


@router.post(WS + "/mode", response=responses({200: SessionEnvelope}), exclude_unset=True)
async def set_mode(request: HttpRequest, workspace: Workspace, session_id: SessionId,
                   payload: ModeIn) -> dict[str, Any]:
    """Switch the agent's mode (one of `session.mode.available`): `session/set_mode`, or its mode config option."""
    return {"session": await services.set_mode(session_id, payload.mode, workspace)}


@router.post(WS + "/interrupt", response=responses({200: PromptOut}), exclude_unset=True)
async def interrupt(request: HttpRequest, workspace: Workspace, session_id: SessionId,
                    payload: InterruptIn | None = None) -> PromptAnswer:
    await sync_to_async(control.check)(session_id, actor_of(request), False)
    return await services.interrupt_session(session_id, workspace, payload.expected_turn_id if payload else None)


@router.post(WS + "/steer", response=responses({200: PromptOut, 202: PromptOut}), exclude_unset=True)
async def steer(request: HttpRequest, workspace: Workspace, session_id: SessionId,
                payload: SteerIn) -> tuple[int, PromptAnswer]:
    await sync_to_async(control.check)(session_id, actor_of(request), False)
    return await services.steer_session(session_id, payload.text, workspace)


@router.get(WS + "/prompt/queue", response=responses({200: QueueOut}), exclude_unset=True)
async def prompt_queue(request: HttpRequest, workspace: Workspace, session_id: SessionId) -> QueueList:
    return await sync_to_async(services.pending_inputs)(session_id, workspace)


@router.get(WS + "/permissions", response=responses({200: PermissionsOut}), exclude_unset=True)
async def permissions(request: HttpRequest, workspace: Workspace, session_id: SessionId) -> PermissionList:
    return await services.list_permissions(session_id, workspace)


@router.post(WS + "/permissions/{request_id}", response=responses({200: PermissionDecisionOut}),
             exclude_unset=True)
async def decide_permission(request: HttpRequest, workspace: Workspace, session_id: SessionId, request_id: Ident,
                            payload: PermissionDecisionIn) -> PermissionAnswer:
    return await services.decide_permission(session_id, request_id, payload.decision, payload.option_id, workspace,
                                            peer_pid=socket_peer(request), actor=actor_of(request))


@router.get(WS + "/elicitations", response=responses({200: ElicitationsOut}), exclude_unset=True)
async def elicitations(request: HttpRequest, workspace: Workspace, session_id: SessionId) -> ElicitationList:
    return await services.list_elicitations(session_id, workspace)


@router.post(WS + "/elicitations/{request_id}", response=responses({200: ElicitationAnswerOut}),
             exclude_unset=True)
async def answer_elicitation(request: HttpRequest, workspace: Workspace, session_id: SessionId, request_id: Ident,
                             payload: ElicitationAnswerIn) -> ElicitationAnswer:
    return await services.answer_elicitation(session_id, request_id, payload.action, payload.content, workspace,
                                             peer_pid=socket_peer(request), actor=actor_of(request))


@router.post(WS + "/prompt/cancel", response=responses({200: PromptOut}), exclude_unset=True)
async def cancel_turn(request: HttpRequest, workspace: Workspace, session_id: SessionId) -> PromptAnswer:
    return await services.cancel_turn(session_id, workspace)


@router.delete(WS + "/prompt/queue/{entry_id}", response=responses({200: PromptOut}), exclude_unset=True)
async def cancel_queued(request: HttpRequest, workspace: Workspace, session_id: SessionId,
                        entry_id: Ident) -> PromptAnswer:
    return await services.cancel_queued(session_id, entry_id, workspace)


@router.post(WS + "/children", response=responses({201: SessionEnvelope}), exclude_unset=True)
async def spawn_child(request: HttpRequest, workspace: Workspace, session_id: SessionId,
                      payload: SpawnChildIn) -> tuple[int, dict[str, Any]]:
    body = payload.model_dump(exclude_unset=True, mode="json")
    return 201, {"session": await services.spawn_child(session_id, body, workspace)}


class ChildOut(Schema):
    id: str
    name: str
    state: str
    stop_detail: str
    role: str
    depth: int
    parent_session_id: str
    ttl_expires_at: str | None


class ChildrenOut(Schema):
    children: list[ChildOut]


@router.get(WS + "/children", response=responses({200: ChildrenOut}))
async def children(request: HttpRequest, workspace: Workspace, session_id: SessionId) -> dict[str, Any]:
    """Every spawned session whose lineage roots at this one (a coordinator's steps), oldest first."""
    return {"children": await sync_to_async(lineage_tree.descendants)(session_id, workspace)}


@router.post(WS + "/reactivate", response=responses({200: SessionEnvelope}), exclude_unset=True)
async def reactivate(request: HttpRequest, workspace: Workspace, session_id: SessionId) -> dict[str, Any]:
    return {"session": await services.reactivate(session_id, workspace)}


@router.post(WS + "/attach", response=responses({200: AttachOut}), exclude_unset=True)
async def attach(request: HttpRequest, workspace: Workspace, session_id: SessionId,
                 payload: AttachIn | None = None) -> Attached:
    payload = payload or AttachIn()
    holder = payload.attached_to or f"http:{request.META.get('REMOTE_ADDR') or 'local'}"
    return await sync_to_async(services.attach)(session_id, workspace, holder, payload.ttl_seconds)


@router.delete(WS + "/attach", response=responses({200: SessionEnvelope}), exclude_unset=True)
async def detach(request: HttpRequest, workspace: Workspace, session_id: SessionId,
                 filters: Query[DetachQuery]) -> Attached:
    return await sync_to_async(services.detach)(session_id, workspace, filters.attached_to)


@router.get(WS + "/events", response=responses({200: EventsOut}), exclude_unset=True)
async def events(request: HttpRequest, workspace: Workspace, session_id: SessionId, filters: Query[EventsQuery],
                 last_event_id: LastEventId = None) -> HttpResponse:
    if "before_sequence" in request.GET:
        raise InvalidRequest("before_sequence is not supported on events; use after_sequence", code="invalid_parameter")
    after = filters.after_sequence if filters.after_sequence is not None else last_event_id

    def page() -> HttpResponse:
        return render(EventsOut, services.events_page(
            session_id, workspace_ref=workspace, after=after, limit=filters.limit, types=filters.type,
            turn_id=filters.turn_id, agent_name=filters.agent_name, since=filters.since))

    return await sync_to_async(page)()


@router.get(WS + "/history", response=responses({200: HistoryOut}), exclude_unset=True)
async def history(request: HttpRequest, workspace: Workspace, session_id: SessionId,
                  filters: Query[HistoryQuery]) -> HttpResponse:
    def turns() -> HttpResponse:
        found = services.history(session_id, workspace_ref=workspace, last=filters.limit or filters.last,
                                 after=filters.after_sequence)
        return render(HistoryOut, {"history": found})

    return await sync_to_async(turns)()


@router.get("/status", tags=["daemon"], response=responses({200: StatusOut}), exclude_unset=True)
async def status(request: HttpRequest) -> dict[str, Any]:
    # The loop's lag read here, on the loop, first: what the loop was like before this request, not with it.
    return await sync_to_async(runtime_status)(loop_lag())


# ---- workspaces ------------------------------------------------------------------------------

@workspaces.get("/workspaces", response=responses({200: WorkspacesOut}), exclude_unset=True)
async def list_workspaces(request: HttpRequest) -> dict[str, Any]:
    return {"workspaces": await sync_to_async(services.list_workspaces)()}


@workspaces.post("/workspaces", response=responses({201: WorkspaceEnvelope}), exclude_unset=True)
async def add_workspace(request: HttpRequest, payload: WorkspaceIn) -> tuple[int, dict[str, Any]]:
    record = await sync_to_async(services.add_workspace)(
        payload.root_dir, payload.name or "", payload.add_dirs or [], payload.default_agent or "",
        payload.sandbox_ref or "")
    return 201, {"workspace": record}


@workspaces.post("/workspaces/resolve", response=responses({200: WorkspaceEnvelope}), exclude_unset=True)
async def resolve_workspace(request: HttpRequest, payload: ResolveWorkspaceIn) -> dict[str, Any]:
    ws = await sync_to_async(catalog.resolve_or_register)(payload.path)
    return {"workspace": catalog.workspace_record(ws)}


@workspaces.get("/workspaces/{ref}", response=responses({200: WorkspaceInfoOut}), exclude_unset=True)
async def workspace_info(request: HttpRequest, ref: Ref) -> WorkspaceInfo:
    return await sync_to_async(services.workspace_info)(ref)


@workspaces.get("/workspaces/{ref}/hooks/runs", response=responses({200: HookRunsOut}), exclude_unset=True)
async def hook_runs(request: HttpRequest, ref: Ref, filters: Query[HookRunsQuery]) -> dict[str, Any]:
    return {"runs": await sync_to_async(services.hook_runs)(filters.session, ref, event=filters.event,
                                                             outcome=filters.outcome, last=filters.last)}


@workspaces.delete("/workspaces/{ref}", response=responses({204: None}))
async def remove_workspace(request: HttpRequest, ref: Ref) -> tuple[int, None]:
    await sync_to_async(services.remove_workspace)(ref)
    return 204, None


def socket_peer(request: HttpRequest) -> int | None:
    """The pid of the process at the other end of the control socket (SO_PEERCRED), None over TCP: a decision asked
    from inside an agent's process tree is refused (sessions/services/prompts.py `refuse_agents`)."""
    scope = getattr(request, "scope", None) or {}
    pid = scope.get(PEER_PID)
    return pid if isinstance(pid, int) else None

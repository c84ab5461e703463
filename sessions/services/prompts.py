"""Prompts, busy input, the queue and permission decisions: what reaches a live session's turn.

What they answer is typed with TypedDicts (`PromptAnswer`, `PermissionList`, …): built as dicts and sent as JSON
as they are. The live session itself is reached through `LiveSession` (sessions/core/live.py)."""

from __future__ import annotations

import asyncio
from typing import Required, TypedDict

from asgiref.sync import sync_to_async

from accounts import services as accounts
from accounts.actor import Actor
from accounts.actor import agent as agent_actor
from compozy_base.config.modes import BusyMode
from sessions.acp import peers
from sessions.acp.client_side import ALLOW_KINDS, REJECT_KINDS
from sessions.core.elicitation_form import content_problems
from sessions.core.enums import EventType, MarkerKind, SessionState
from sessions.core.errors import AgentCannotDecide, Conflict, InvalidRequest, NotFound, QueueFull, StorageError
from sessions.core.failures import has_free_space
from sessions.core.jsonobj import JsonObject
from sessions.core.live import ElicitationView, LiveSession, PermissionView, PromptResult
from sessions.models import PENDING_INPUT, InputEntry
from sessions.runtime import busy_input
from sessions.runtime.manager import SessionManager, get_manager
from sessions.services.lookup import _active_runtime, _runtime_for, not_active, scoped_meta
from sessions.services.reactivation import reactivate
from sessions.store import folder


class PromptAnswer(TypedDict):
    prompt: PromptResult


class PermissionList(TypedDict):
    permissions: list[PermissionView]


class PermissionDecided(PermissionView, total=False):
    decision: Required[str]  # approved or denied
    answered_by: str  # the actor's label: a user's name, or `webhook-link`


class PermissionAnswer(TypedDict):
    permission: PermissionDecided


class ElicitationList(TypedDict):
    elicitations: list[ElicitationView]


class ElicitationAnswered(ElicitationView):
    action: str  # accept, decline or cancel


class ElicitationAnswer(TypedDict):
    elicitation: ElicitationAnswered


class QueuedInput(TypedDict):
    """An entry of the session's input queue, as the queue read and the recap list it."""

    queue_entry_id: str
    text: str
    mode: str
    status: str
    queue_position: int
    queue_generation: int
    source: str
    created_at: str | None


class QueueList(TypedDict):
    queue: list[QueuedInput]
    queue_generation: int


async def prompt_session(session_id: str, message: str, *, mode: str | None = None,
                         workspace_ref: str | None = None, expected_turn_id: str | None = None,
                         ) -> tuple[int, PromptAnswer]:
    """(HTTP status, {"prompt": result}). Idle → accepted turn; busy → the busy-input mode."""
    runtime, meta = await _runtime_for(session_id, workspace_ref)
    manager = get_manager()
    text = manager.inputs.check_text(message)
    if mode is not None and mode not in set(BusyMode):
        raise InvalidRequest("mode must be queue, interrupt or steer", code="invalid_mode")
    if not await asyncio.to_thread(has_free_space, folder.session_dir(session_id)):
        # Refused before anything is recorded or started: the prompt either lands whole or not at all, and a
        # stopped session stays stopped (its agent was started, and the session made active, before this check).
        raise StorageError("not enough disk space for a new prompt", data={"reason": "disk_full"})
    # A runtime that still reads `stopped` and has not stopped is a reactivation just launched (a concurrent
    # prompt's, before its boot wrote `starting`); one whose stop finished is on its way out.
    reviving = runtime is not None and not runtime.stopped.is_set() and meta["state"] in (
        SessionState.STOPPED, SessionState.STARTING)
    if (runtime is None and meta["state"] == SessionState.STOPPED) or reviving:
        # A prompt to a stopped, eligible session reactivates it under the same id (§15); one that is starting
        # here (a reactivation under way, perhaps won against a prompt another node routed to us) waits for it.
        await reactivate(session_id, workspace_ref)
        runtime, meta = await _runtime_for(session_id, workspace_ref)
    if runtime is None or meta["state"] != SessionState.ACTIVE or runtime.stopping:
        raise not_active(meta, runtime)
    if mode == BusyMode.STEER and runtime.salvage is not None and not runtime.busy and not runtime.handover:
        # Right after a dedicated interrupt a steer composes the interrupted prompt with it, as `POST …/steer` does.
        return 200, {"prompt": await runtime.stage_steer(text)}
    mode, admitted = await _admit(manager, runtime, session_id, text, mode)
    if mode == busy_input.START and admitted is not None:
        return 200, {"prompt": admitted}
    if mode == BusyMode.QUEUE and admitted is not None:
        if not runtime.busy:
            await runtime.dispatch_next()  # the turn ended while we queued: nobody else will pick it up
        return 202, {"prompt": admitted}
    if mode == BusyMode.INTERRUPT:
        return 200, {"prompt": await runtime.interrupt(replacement=text, expected_turn_id=expected_turn_id)}
    result = await runtime.stage_steer(text)
    return (202 if result["status"] == "staged" else 200), {"prompt": result}


async def _admit(manager: SessionManager, runtime: LiveSession, session_id: str, text: str,
                 requested: str | None) -> tuple[str, PromptResult | None]:
    """Admission (sessions reference §6, FIFO): whether the prompt starts now or waits, and the start or the enqueue,
    as one step under the session's admission lock, so prompts run in the order they were acknowledged in. Returns
    the route and, for a start or an enqueue, the prompt result; the other modes are the caller's to run."""
    default_mode = manager.config.busy_input.default_mode.value
    async with runtime.admission:
        idle = not runtime.busy and not runtime.handover
        mode = busy_input.route(busy=runtime.busy, handover=runtime.handover, mode=requested,
                                default_mode=default_mode, queue_waiting=idle and await runtime.queue_waiting())
        if mode == busy_input.START:
            try:
                turn = await runtime.start_turn(text)
                return mode, {"status": "accepted", "turn_id": turn.id, "session_id": session_id}
            except Conflict as exc:
                if exc.code != "prompt_in_progress":
                    raise
                # Another turn started in the meantime: the prompt takes the busy-input path instead.
                mode = busy_input.route(busy=True, handover=runtime.handover, queue_waiting=True, mode=requested,
                                        default_mode=default_mode)
        if mode == BusyMode.QUEUE:
            return mode, await _queue(manager, runtime, session_id, text)
    return mode, None


async def _queue(manager: SessionManager, runtime: LiveSession, session_id: str, text: str) -> PromptResult:
    """The `queue` busy-input mode: the prompt waits in the session's input queue, marked in the transcript."""
    try:
        entry, position = await sync_to_async(manager.inputs.enqueue)(
            session_id, text, generation=runtime.rec.input_generation)
    except QueueFull as exc:
        # A refused prompt is visible in the transcript too, not only to the caller.
        runtime.marker(MarkerKind.PROMPT_DROPPED, "Prompt refused: the input queue is full.",
                       {"reason": "queue_full", "queue_cap": manager.config.busy_input.queue_cap})
        await runtime.recorder.flush()
        raise exc
    runtime.marker(MarkerKind.PROMPT_QUEUED, f"Prompt queued at position {position}.",
                   {"queue_entry_id": entry.id, "queue_position": position,
                    "queue_generation": entry.generation})
    await runtime.recorder.flush()
    return {"status": "queued", "mode": "queue", "queued": True, "queue_entry_id": entry.id,
            "queue_position": position, "queue_generation": entry.generation}


async def interrupt_session(session_id: str, workspace_ref: str | None = None,
                            expected_turn_id: str | None = None) -> PromptAnswer:
    """The dedicated interrupt: cancel the turn, no replacement; its text is kept for one steer."""
    runtime = await _active_runtime(session_id, workspace_ref)
    return {"prompt": await runtime.interrupt(replacement=None, expected_turn_id=expected_turn_id)}


async def steer_session(session_id: str, text: str, workspace_ref: str | None = None) -> tuple[int, PromptAnswer]:
    runtime = await _active_runtime(session_id, workspace_ref)
    result = await runtime.stage_steer(get_manager().inputs.check_text(text, "text"))
    return (202 if result["status"] == "staged" else 200), {"prompt": result}


async def list_permissions(session_id: str, workspace_ref: str | None = None) -> PermissionList:
    runtime, _ = await _runtime_for(session_id, workspace_ref)
    items = [] if runtime is None else [p.public() for p in runtime.permissions.pending.values()
                                        if not p.answer.done()]
    return {"permissions": items}


async def refuse_agents(runtime: LiveSession | None, peer_pid: int | None, what: str, request_id: str) -> None:
    """A decision asked over the control socket by a process of an agent's tree is refused (403
    agent_cannot_decide) and recorded in the session it was meant for as the agent's (a `system` row titled
    `decision_refused`). `peer_pid`: the socket peer's (SO_PEERCRED), None over TCP."""
    if peer_pid is None:
        return
    manager = get_manager()
    agents = {r.agent.pid: sid for sid, r in manager.runtimes.items() if r.agent is not None and r.agent.pid}
    agent = await asyncio.to_thread(peers.agent_of, peer_pid, agents)
    if agent is None:
        return
    if runtime is not None:
        runtime.record(EventType.SYSTEM, {"title": "decision_refused", "text": (
            f"{what} {request_id} refused: asked from inside session {agent}'s agent (pid {peer_pid})"), "raw": {
            "request_id": request_id, "what": what, "source": f"agent:{agent}", "peer_pid": peer_pid},
            "actor": dict(agent_actor(agent).fields())})
    # The attempt is the agent's, in the audit log too (the guard logs only writes carried out).
    await sync_to_async(accounts.record)(agent_actor(agent), f"{what}.refused", folder.utcnow(),
                                         session_id=runtime.rec.id if runtime is not None else "", status=403,
                                         detail={"request_id": request_id, "peer_pid": peer_pid})
    raise AgentCannotDecide(f"{what} decisions come from a person, not from an agent's process "
                            f"(pid {peer_pid} belongs to session {agent}'s agent)",
                            data={"source": f"agent:{agent}", "peer_pid": peer_pid})


async def decide_permission(session_id: str, request_id: str, decision: str, option_id: str | None = None,
                            workspace_ref: str | None = None, *, peer_pid: int | None = None,
                            actor: Actor | None = None) -> PermissionAnswer:
    """`actor`: who answers (recorded in the permission event); the first answer wins, a later one answers 409
    `permission_answered` naming who answered."""
    if decision not in ("approve", "deny"):
        raise InvalidRequest("decision must be approve or deny", code="invalid_decision")
    runtime, _ = await _runtime_for(session_id, workspace_ref)
    await refuse_agents(runtime, peer_pid, "permission", request_id)
    pending = runtime.permissions.pending.get(request_id) if runtime else None
    answered = runtime.permissions.answered.get(request_id) if runtime else None
    if (pending is None or pending.answer.done()) and answered is not None:
        raise Conflict("this permission request was answered already", code="permission_answered", data={
            "request_id": request_id, "decision": answered.decision,
            "answered_by": answered.actor.label if answered.actor else ""})
    if runtime is None or pending is None or pending.answer.done():
        raise NotFound("no pending permission request with that id", code="permission_not_found",
                       data={"request_id": request_id})
    if option_id:
        option = next((o for o in pending.options if o.get("optionId") == option_id), None)
        if option is None:
            raise InvalidRequest("option_id is not one of the offered options", code="invalid_option")
        # The audit row says "approved"/"denied": an option of the other kind would make it lie to the reader.
        kinds = ALLOW_KINDS if decision == "approve" else REJECT_KINDS
        if option.get("kind") not in kinds:
            raise InvalidRequest(f"option {option_id!r} is of kind {option.get('kind')!r}, which does not "
                                 f"{decision} the request", code="option_decision_mismatch",
                                 data={"option_id": option_id, "kind": option.get("kind"), "decision": decision})
    runtime.decide_permission(request_id, decision, option_id, actor)
    decided: PermissionDecided = {**pending.public(), "decision": "approved" if decision == "approve" else "denied"}
    if actor is not None:
        decided["answered_by"] = actor.label
    return {"permission": decided}


async def list_elicitations(session_id: str, workspace_ref: str | None = None) -> ElicitationList:
    """The agent's questions waiting on a person (ACP `elicitation/create`, form mode)."""
    runtime, _ = await _runtime_for(session_id, workspace_ref)
    return {"elicitations": [] if runtime is None else [p.public() for p in runtime.elicitations.waiting_items()]}


async def answer_elicitation(session_id: str, request_id: str, action: str, content: JsonObject | None = None,
                             workspace_ref: str | None = None, *, peer_pid: int | None = None,
                             actor: Actor | None = None) -> ElicitationAnswer:
    """accept (with content that fits the requested schema), decline or cancel; the agent's request returns."""
    if action not in ("accept", "decline", "cancel"):
        raise InvalidRequest("action must be accept, decline or cancel", code="invalid_action")
    runtime, _ = await _runtime_for(session_id, workspace_ref)
    await refuse_agents(runtime, peer_pid, "elicitation", request_id)
    pending = runtime.elicitations.pending.get(request_id) if runtime else None
    if runtime is None or pending is None or pending.answer.done():
        raise NotFound("no pending elicitation with that id", code="elicitation_not_found",
                       data={"request_id": request_id})
    if action == "accept":
        problems = content_problems(pending.requested_schema, content or {})
        if problems:
            what = "; ".join(f"{p['field']} {p['reason']}".strip() for p in problems)
            raise InvalidRequest(f"content does not fit the requested schema: {what}",
                                 code="invalid_elicitation_content", data={"problems": problems})
    runtime.elicitations.resolve(request_id, action, (content or {}) if action == "accept" else None, actor)
    return {"elicitation": {**pending.public(), "action": action}}


def pending_inputs(session_id: str, workspace_ref: str | None = None) -> QueueList:
    meta = scoped_meta(session_id, workspace_ref)
    rows = InputEntry.objects.filter(session_id=session_id, status__in=PENDING_INPUT).order_by("created_at", "id")
    return {"queue": [{"queue_entry_id": e.id, "text": e.text, "mode": e.mode, "status": e.status,
                       "queue_position": i + 1, "queue_generation": e.generation, "source": e.source,
                       "created_at": folder.isoformat(e.created_at)} for i, e in enumerate(rows)],
            "queue_generation": int(meta.get("input_generation") or 0)}


async def cancel_queued(session_id: str, entry_id: str, workspace_ref: str | None = None) -> PromptAnswer:
    runtime, _ = await _runtime_for(session_id, workspace_ref)
    entry = await sync_to_async(get_manager().inputs.cancel)(session_id, entry_id)
    if runtime is not None:
        runtime.marker(MarkerKind.PROMPT_DROPPED, "Queued prompt canceled.",
                       {"queue_entry_id": entry.id, "reason": "canceled"})
        await runtime.recorder.flush()
    return {"prompt": {"status": "canceled", "queue_entry_id": entry.id, "queue_generation": entry.generation,
                       "mode": entry.mode}}


async def cancel_turn(session_id: str, workspace_ref: str | None = None) -> PromptAnswer:
    runtime, _ = await _runtime_for(session_id, workspace_ref)
    cancelled = False
    if runtime is not None and runtime.busy:
        runtime.marker(MarkerKind.PROMPT_CANCEL, "Current turn canceled by request.")
        cancelled = await runtime.cancel_turn()
    return {"prompt": {"status": "canceled" if cancelled else "idle"}}

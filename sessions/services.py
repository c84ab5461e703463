"""The one service layer: the ninja API, SSE consumers, CLI (over HTTP) and manage.py all call this.

Sync functions touch only durable state (catalog, meta.json, events.db); async ones also talk to
the live SessionManager on the daemon's loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import os
import shutil
import time
from pathlib import Path
from typing import Any

from asgiref.sync import sync_to_async
from django.db import transaction
from django.db.models import Count

from compozy_site.home import compozy_home
from sessions import catalog, cluster, lineage
from sessions.config import AgentConfig, Config, ProviderConfig, get_config
from sessions.enums import LIVE_STATES, BusyMode, FailureKind, MarkerKind, PermissionMode, SessionState, SessionType
from sessions.errors import Conflict, InvalidRequest, NotFound, QueueFull, StorageError
from sessions.models import Session, Workspace
from sessions.runtime import lifecycle, signals
from sessions.runtime.loop_lag import MONITOR
from sessions.runtime.manager import get_manager
from sessions.store import events as event_store
from sessions.store import folder
from sessions.store.events import MAX_PAGE
from sessions.store.failures import classify, has_free_space
from sessions.store.folder import load_meta
from sessions.store.ids import is_session_id, new_session_id

REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")
SPEEDS = ("normal", "fast")


# ---- payloads --------------------------------------------------------------------------------

def session_payload(meta: dict[str, Any]) -> dict[str, Any]:
    """SessionPayload (surfaces reference §4.1), computed from meta.json plus live runtime facts."""
    runtime = _live_runtime(meta["id"])
    prompting = bool(runtime and runtime.busy)
    stalled = (meta.get("liveness") or {}).get("stall_state") == "stalled"
    badge = lifecycle.badge(meta["state"], meta.get("failure"), stalled=stalled, prompting=prompting)
    activity = dict((meta.get("liveness") or {}).get("activity") or {})
    payload: dict[str, Any] = {
        "id": meta["id"],
        "name": meta.get("name") or None,
        "name_source": meta.get("name_source") or ("user" if meta.get("name") else None),
        "agent_name": meta["agent_name"],
        "provider": meta.get("provider") or "",
        "model": meta.get("model") or None,
        "reasoning_effort": meta.get("reasoning_effort") or None,
        "speed": meta.get("speed") or "normal",
        "speed_resolution": meta.get("speed_resolution"),
        "workspace_id": meta["workspace_id"],
        "workspace_path": meta.get("workspace_path"),
        "cwd": meta.get("cwd"),
        "type": meta.get("session_type") or "user",
        "state": meta["state"],
        "badge": badge.value,
        # A failed turn leaves the session able to take the next prompt; any other failure does not.
        "attachable": meta["state"] == SessionState.ACTIVE and badge.value in ("idle", "running")
        and (meta.get("failure") or {}).get("kind") in (None, FailureKind.PROMPT_FAILURE) and not stalled,
        "prompt_state": "prompting" if prompting else ("idle" if meta["state"] == SessionState.ACTIVE else "none"),
        "current_turn_id": runtime.turn.id if runtime and runtime.turn else None,
        "stop_reason": meta.get("stop_reason") or None,
        "stop_detail": meta.get("stop_detail") or None,
        "failure": meta.get("failure"),
        "acp_session_id": meta.get("acp_session_id") or None,
        "acp_caps": meta.get("acp_caps"),
        "effective_permissions": meta.get("effective_permissions"),
        "activity": activity or None,
        "last_activity_at": activity.get("last_activity_at"),
        "lineage": meta.get("lineage"),
        "created_at": meta["created_at"],
        "activated_at": meta.get("activated_at"),  # first reached `active`: `session new` tells start from turn
        "updated_at": meta["updated_at"],
    }
    return payload


def _live_runtime(session_id: str) -> Any:
    try:
        return get_manager().get(session_id)
    except Exception:
        return None


# ---- resolution ------------------------------------------------------------------------------

def resolve_agent(config: Config, agent_name: str, ws: Workspace) -> tuple[AgentConfig, ProviderConfig, str]:
    name = agent_name or ws.default_agent or config.default_agent
    agent = _agent(config, name)
    return agent, _provider(config, agent.provider or config.default_provider), name


def _agent(config: Config, name: str) -> AgentConfig:
    if not name:
        raise InvalidRequest("agent name is required", code="agent_required")
    agent = config.agents.get(name)
    if agent is None:
        raise NotFound(f"agent {name!r} is not defined", code="agent_not_found",
                       data={"agent": name, "known": sorted(config.agents)})
    return agent


def _provider(config: Config, name: str) -> ProviderConfig:
    if not name:
        raise InvalidRequest("agent provider is required", code="provider_required")
    provider = config.providers.get(name)
    if provider is None:
        raise NotFound(f"provider {name!r} is not defined", code="provider_not_found",
                       data={"provider": name, "known": sorted(config.providers)})
    return provider


def read_session_meta(session_id: str) -> dict[str, Any]:
    """meta.json of a session, stale live states repaired when no runtime owns them (§13). A snapshot
    the daemon could not write yet (a full disk) is newer than the file, so it wins."""
    unsaved = _unsaved_meta(session_id)
    if unsaved is not None:
        return unsaved
    meta = load_meta(session_id)
    if meta["state"] in LIVE_STATES and _live_runtime(session_id) is None and not _daemon_may_own(session_id):
        from sessions.repair import repair_stale_meta

        meta = repair_stale_meta(meta)
    return meta


def _unsaved_meta(session_id: str) -> dict[str, Any] | None:
    try:
        meta = get_manager().unsaved_meta.get(session_id)
    except Exception:
        return None
    return copy.deepcopy(meta) if meta is not None else None


def _daemon_may_own(session_id: str) -> bool:
    """A live state is live while this daemon runs (or is creating) the session, or while another node holds its
    unexpired lease. Outside a daemon (manage.py, tests) a running daemon of this home may own it too: leave it."""
    try:
        manager = get_manager()
    except Exception:
        from compozy_site.daemon_record import daemon_running

        return daemon_running() or cluster.holder_elsewhere(session_id) is not None
    return manager.owns(session_id) or cluster.holder_elsewhere(session_id) is not None


class SessionOwnedElsewhere(Conflict):
    """Work that must touch a live runtime reached a node that does not run it."""

    def __init__(self, session_id: str, holder: cluster.Holder) -> None:
        super().__init__(f"session {session_id} runs on node {holder.node_id} ({holder.address}); send this "
                         "request there", code="session_owned_elsewhere",
                         data={"session_id": session_id, "owner": holder.public()})


def scoped_meta(session_id: str, workspace_ref: str | None) -> dict[str, Any]:
    """meta.json of a session that must belong to `workspace_ref` (a session outside it is 404)."""
    meta = read_session_meta(session_id)
    check_workspace_scope(workspace_ref, meta)
    return meta


def check_workspace_scope(workspace_ref: str | None, meta: dict[str, Any]) -> None:
    if workspace_ref is None:
        return
    try:
        ws = catalog.find_workspace(workspace_ref)
    except NotFound:
        raise NotFound("session not found", code="session_not_found") from None
    if ws.id != meta["workspace_id"]:
        raise NotFound("session not found in this workspace", code="session_not_found")


def get_session(session_id: str, workspace_ref: str | None = None) -> dict[str, Any]:
    meta = scoped_meta(session_id, workspace_ref)
    return session_payload(meta)


# ---- create ----------------------------------------------------------------------------------

def _prepare_create(body: dict[str, Any], session_type: SessionType = SessionType.USER,
                    parent: dict[str, Any] | None = None, role: str = "", ttl_seconds: int = 0,
                    ) -> tuple[dict[str, Any], ProviderConfig, list[Path], str]:
    """Steps 1-5 of creation (reference §3), all durable before we answer 201."""
    config = get_config()
    workspace, workspace_path = body.get("workspace"), body.get("workspace_path")
    if workspace and workspace_path:
        raise InvalidRequest("workspace and workspace_path are mutually exclusive", code="workspace_conflict")
    if not workspace and not workspace_path:
        raise InvalidRequest("workspace or workspace_path is required", code="workspace_required")
    if workspace_path and not os.path.isabs(workspace_path):
        raise InvalidRequest("workspace_path must be an absolute path", code="workspace_path_not_absolute")
    effort = body.get("reasoning_effort") or ""
    if effort and effort not in REASONING_EFFORTS:
        raise InvalidRequest(f"reasoning_effort must be one of {', '.join(REASONING_EFFORTS)}",
                             code="invalid_reasoning_effort")
    speed = body.get("speed") or "normal"
    if speed not in SPEEDS:
        raise InvalidRequest("speed must be normal or fast", code="invalid_speed")
    if body.get("agent_name"):
        _agent(config, body["agent_name"])  # before resolve-or-register: a refused create registers nothing
    ws = catalog.find_workspace(workspace) if workspace else catalog.resolve_or_register(workspace_path)
    catalog.check_root(ws)
    agent, provider, agent_name = resolve_agent(config, body.get("agent_name") or "", ws)
    if body.get("provider"):
        provider = _provider(config, body["provider"])
    permissions = lineage.effective_permissions(
        session_type, agent.permissions or config.permissions_mode.value,
        parent.get("effective_permissions") if parent else None, body.get("permissions"))
    now = folder.isoformat(folder.utcnow())
    session_id = new_session_id()
    meta: dict[str, Any] = {
        "id": session_id, "name": (body.get("name") or "").strip(), "agent_name": agent_name,
        "provider": provider.name, "model": body.get("model") or agent.model or provider.default_model,
        "model_explicit": bool(body.get("model") or agent.model),
        "reasoning_effort": effort or agent.reasoning_effort, "speed": speed,
        "workspace_id": ws.id, "workspace_path": ws.root_dir, "cwd": ws.root_dir,
        "session_type": session_type.value, "effective_permissions": permissions,
        "state": SessionState.STARTING.value, "stop_reason": "", "stop_detail": "", "failure": None,
        "acp_session_id": "", "liveness": {"activity": {}}, "input_generation": 0,
        "created_at": now, "updated_at": now,
    }
    if parent is not None:
        meta["lineage"] = lineage.child_lineage(parent, role=role, ttl_seconds=ttl_seconds, now=folder.utcnow())
    prompt = (body.get("prompt") or "").strip()
    manager = get_manager()
    if prompt:
        manager.inputs.check_text(prompt)
    directory = folder.session_dir(session_id)
    if not has_free_space(directory):
        raise StorageError("not enough disk space for a new session", data={"reason": "disk_full"})
    manager.reserved.add(session_id)
    try:
        directory.mkdir(parents=True, exist_ok=False)
        event_store.init_store(folder.events_path(session_id))
        with transaction.atomic():
            catalog.upsert_session_row(meta)
            cluster.take(session_id)  # a new id: nobody else can hold it
            if prompt:
                manager.inputs.enqueue(session_id, prompt, mode="startup", source="startup")
        # After the lease: a node reading the shared folder never finds a `starting` meta.json without a holder
        # (it would repair the create as stale); until this write it finds no session at all.
        folder.write_meta(meta)
    except BaseException as exc:
        # Durable admission: a rejected staged prompt (or a full disk) leaves no session behind.
        with contextlib.suppress(Exception):
            Session.objects.filter(id=session_id).delete()
        shutil.rmtree(directory, ignore_errors=True)
        manager.reserved.discard(session_id)
        if isinstance(exc, Exception) and classify(exc, directory) is not None:
            raise StorageError.from_exception(exc) from exc
        raise
    roots = [Path(ws.root_dir), *[Path(d) for d in ws.add_dirs or []]]
    return meta, provider, roots, prompt


async def create_session(body: dict[str, Any], session_type: SessionType = SessionType.USER,
                         parent: dict[str, Any] | None = None, role: str = "", ttl_seconds: int = 0,
                         ) -> dict[str, Any]:
    manager = get_manager()
    if manager.draining:
        from sessions.errors import Unavailable

        raise Unavailable("the daemon is shutting down", code="daemon_draining")
    body = await _pre_create_hook(manager, body, session_type)
    with manager.admission():
        meta, provider, roots, prompt = await sync_to_async(_prepare_create)(
            body, session_type, parent, role, ttl_seconds)
        runtime = manager.launch(meta, provider=provider, roots=roots)
    if prompt:
        runtime.marker(MarkerKind.PROMPT_QUEUED, "First prompt staged at create.", {"source": "startup"}, turn_id="")
    signals.ring_catalog("upserted", meta["workspace_id"], meta["id"])
    return session_payload(meta)


async def _pre_create_hook(manager: Any, body: dict[str, Any], session_type: SessionType) -> dict[str, Any]:
    """session.pre_create runs before anything exists: a denial creates nothing; a patch may rename the
    session, pick another agent or another workspace. Its runs have no session store to be recorded in."""
    runner = manager.hooks
    if runner is None or not runner.has_hooks("session.pre_create"):
        return body
    payload = {"session_name": body.get("name") or "", "session_type": session_type.value,
               "agent_name": body.get("agent_name") or "", "workspace_id": body.get("workspace") or "",
               "workspace": body.get("workspace_path") or "", "state": "starting"}
    outcome = await runner.dispatch("session.pre_create", payload, record_run=lambda row: None)
    if not outcome.ok:
        from sessions.errors import HookDenied

        raise HookDenied(outcome.error, data={"hook": outcome.hook_name})
    patched = dict(body)
    result = outcome.payload
    if result.get("session_name") != payload["session_name"]:
        patched["name"] = result.get("session_name") or ""
    if result.get("agent_name") and result["agent_name"] != payload["agent_name"]:
        patched["agent_name"] = result["agent_name"]
    if result.get("workspace_id") and result["workspace_id"] != payload["workspace_id"]:
        patched.pop("workspace_path", None)
        patched["workspace"] = result["workspace_id"]
    elif result.get("workspace") and result["workspace"] != payload["workspace"]:
        patched.pop("workspace", None)
        patched["workspace_path"] = result["workspace"]
    return patched


async def spawn_child(parent_id: str, body: dict[str, Any], workspace_ref: str | None = None) -> dict[str, Any]:
    """A `spawned` child of a live session: same workspace, lineage recorded, permissions no wider than
    the parent's, reaped when its TTL expires or its parent stops (a huey job)."""
    runtime, parent = await _runtime_for(parent_id, workspace_ref)
    if runtime is None or parent["state"] != SessionState.ACTIVE:
        raise InvalidRequest("only an active session can spawn children", code="session_not_active")
    depth = int((parent.get("lineage") or {}).get("spawn_depth") or 0) + 1
    if depth > lineage.MAX_SPAWN_DEPTH:
        raise Conflict(f"spawn depth {depth} exceeds {lineage.MAX_SPAWN_DEPTH}", code="spawn_depth_exceeded")
    role, ttl = body.get("role"), body.get("ttl_seconds")
    if not isinstance(role, str) or not role.strip():
        raise InvalidRequest("role is required", code="role_required")
    if not isinstance(ttl, int) or isinstance(ttl, bool) or not 1 <= ttl <= lineage.MAX_TTL_SECONDS:
        raise InvalidRequest(f"ttl_seconds must be between 1 and {lineage.MAX_TTL_SECONDS}", code="invalid_ttl")
    unknown = set(body) - {"role", "ttl_seconds", "agent_name", "prompt", "permissions", "name"}
    if unknown:
        raise InvalidRequest(f"unknown field(s): {', '.join(sorted(unknown))}", code="unknown_field")
    permissions = body.get("permissions")
    if permissions is not None and permissions not in set(PermissionMode):
        raise InvalidRequest("permissions must be deny-all, approve-reads or approve-all", code="invalid_field")
    child_body = {"workspace": parent["workspace_id"], "agent_name": body.get("agent_name") or parent["agent_name"],
                  "prompt": body.get("prompt"), "name": body.get("name") or "", "permissions": permissions}
    return await create_session(child_body, SessionType.SPAWNED, parent, role.strip(), ttl)


def reap_candidates(live: dict[str, dict[str, Any]]) -> list[tuple[str, str]]:
    """(session id, reason) for live spawned children whose TTL expired or whose parent stopped. `live` maps
    session id → meta.json already read; a parent outside it is read from its folder."""
    now = folder.utcnow()
    found = []
    for session_id, meta in live.items():
        if not meta.get("lineage"):
            continue
        parent_id = meta["lineage"].get("parent_session_id") or ""
        parent = live.get(parent_id)
        if parent is None:
            try:
                parent = folder.read_meta(parent_id) if is_session_id(parent_id) else None
            except ValueError:
                parent = None
        reason = lineage.reap_reason(meta, parent, now)
        if reason:
            found.append((session_id, reason))
    return found


# ---- prompt, stop, remove --------------------------------------------------------------------

async def _runtime_for(session_id: str, workspace_ref: str | None) -> Any:
    meta = await sync_to_async(read_session_meta)(session_id)
    await sync_to_async(check_workspace_scope)(workspace_ref, meta)
    runtime = get_manager().get(session_id)
    if runtime is None and meta["state"] in LIVE_STATES:
        holder = await sync_to_async(cluster.holder_elsewhere)(session_id)
        if holder is not None:
            raise SessionOwnedElsewhere(session_id, holder)
    return runtime, meta


# ---- reactivation and attach (sessions reference §14-15) --------------------------------------

REACTIVATION_HINT = "inspect `compozy session recap|history ID` and `compozy session repair ID --dry-run`"


def _reactivation_plan(session_id: str) -> tuple[dict[str, Any], ProviderConfig, list[Path]]:
    """Validate meta, workspace, agent and event store; refuse with the reason and where to look."""
    meta = read_session_meta(session_id)
    if meta["state"] != SessionState.STOPPED:
        raise Conflict(f"session is {meta['state']}, not stopped", code="session_not_stopped")

    def refuse(message: str, code: str) -> Conflict:
        return Conflict(f"session cannot be reactivated: {message}; {REACTIVATION_HINT}", code=code,
                        data={"session_id": session_id, "reason": code})

    if (meta.get("session_type") or "user") != SessionType.USER:
        raise refuse("daemon-managed sessions are reactivated only by the daemon", "session_not_reactivatable")
    ws = Workspace.objects.filter(id=meta["workspace_id"]).first()
    if ws is None:
        raise refuse("its workspace is no longer registered", "workspace_not_found")
    if not Path(ws.root_dir).is_dir():
        raise refuse(f"the workspace root {ws.root_dir} no longer exists", "workspace_root_missing")
    config = get_config()
    agent = config.agents.get(meta["agent_name"])
    if agent is None:
        raise refuse(f"agent {meta['agent_name']!r} is no longer defined", "agent_not_found")
    provider = config.providers.get(meta.get("provider") or agent.provider or config.default_provider)
    if provider is None:
        raise refuse(f"provider {meta.get('provider')!r} is no longer defined", "provider_not_found")
    path = folder.events_path(session_id)
    try:
        event_store.max_sequence(path)
    except Exception as exc:
        raise refuse(f"its event store is unreadable ({exc})", "event_store_unreadable") from exc
    if (meta.get("failure") or {}).get("kind") == FailureKind.STORAGE_FAILURE:
        # Its last turn could not be closed while the disk was full: close it now, append-only, so the
        # transcript never reads as if that turn were still running.
        from sessions.repair import repair_transcript

        repair_transcript(session_id, dry_run=False, force=False)
    roots = [Path(ws.root_dir), *[Path(d) for d in ws.add_dirs or []]]
    return meta, provider, roots


async def reactivate(session_id: str, workspace_ref: str | None = None, timeout: float = 90.0) -> dict[str, Any]:
    """stopped → starting → active under the same Compozy id (daemon-managed; used by prompt and resume)."""
    manager = get_manager()
    runtime = manager.get(session_id)
    if runtime is None:
        with manager.admission():
            meta, provider, roots = await sync_to_async(_reactivation_plan)(session_id)
            await sync_to_async(check_workspace_scope)(workspace_ref, meta)
            # On the runtime's DB thread, after any release queued by this session's last stop; two nodes
            # reactivating one session at once: one takes the lease, the other answers 409.
            from sessions.runtime.tasks import db

            holder = await db(cluster.take, session_id)
            if holder is not None:
                raise SessionOwnedElsewhere(session_id, holder)
            runtime = manager.get(session_id) or manager.launch(meta, provider=provider, roots=roots,
                                                                reactivate=True)
    done = asyncio.ensure_future(runtime.active.wait())
    stopped = asyncio.ensure_future(runtime.stopped.wait())
    try:
        await asyncio.wait({done, stopped}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        done.cancel()
        stopped.cancel()
    payload = await sync_to_async(get_session)(session_id)
    if payload["state"] != SessionState.ACTIVE:
        failure = payload.get("failure") or {}
        raise Conflict(f"reactivation failed: {failure.get('summary') or payload.get('stop_detail') or 'timed out'}; "
                       f"{REACTIVATION_HINT}", code="session_reactivation_failed",
                       data={"session": payload})
    return payload


def attach(session_id: str, workspace_ref: str | None, attached_to: str, ttl_seconds: int) -> dict[str, Any]:
    """Take the holder lease of an attachable live session (compare-and-set on the catalog row)."""
    from datetime import timedelta

    if not 1 <= ttl_seconds <= 86400:
        raise InvalidRequest("ttl_seconds must be between 1 and 86400", code="invalid_ttl")
    payload = get_session(session_id, workspace_ref)
    if not payload["attachable"]:
        raise Conflict(f"session is not attachable (state {payload['state']}, badge {payload['badge']}); "
                       f"{REACTIVATION_HINT}", code="session_not_attachable", data={"session": payload})
    now = folder.utcnow()
    expires = now + timedelta(seconds=ttl_seconds)
    from django.db.models import Q

    free = Q(attached_to="") | Q(attach_expires_at__lt=now) | Q(attached_to=attached_to)
    changed = Session.objects.filter(Q(id=session_id) & free).update(attached_to=attached_to,
                                                                      attach_expires_at=expires)
    if changed != 1:
        row = Session.objects.get(id=session_id)
        raise Conflict(f"session is attached to {row.attached_to} until {folder.isoformat(row.attach_expires_at)}",
                       code="session_attach_locked", data={"attached_to": row.attached_to})
    # The lease lives in catalog columns the session payload does not show: the payload read above stands.
    return {"session": payload, "attach": {
        "session_id": session_id, "attached_to": attached_to, "attached_at": folder.isoformat(now),
        "attach_expires_at": folder.isoformat(expires)}}


def detach(session_id: str, workspace_ref: str | None, attached_to: str) -> dict[str, Any]:
    payload = get_session(session_id, workspace_ref)
    Session.objects.filter(id=session_id, attached_to=attached_to).update(attached_to="", attach_expires_at=None)
    return {"session": payload}



async def prompt_session(session_id: str, message: str, *, mode: str | None = None,
                         workspace_ref: str | None = None, expected_turn_id: str | None = None,
                         ) -> tuple[int, dict[str, Any]]:
    """(HTTP status, {"prompt": result}). Idle → accepted turn; busy → the busy-input mode."""
    runtime, meta = await _runtime_for(session_id, workspace_ref)
    manager = get_manager()
    text = manager.inputs.check_text(message)
    if (runtime is None and meta["state"] == SessionState.STOPPED) or (
            runtime is not None and meta["state"] == SessionState.STARTING):
        # A prompt to a stopped, eligible session reactivates it under the same id (§15); one that is starting
        # here (a reactivation under way, perhaps won against a prompt another node routed to us) waits for it.
        await reactivate(session_id, workspace_ref)
        runtime, meta = await _runtime_for(session_id, workspace_ref)
    if runtime is None or meta["state"] != SessionState.ACTIVE or runtime.stopping:
        raise InvalidRequest(f"session is {meta['state']}, not active", code="session_not_active",
                             data={"state": meta["state"]})
    if mode is not None and mode not in set(BusyMode):
        raise InvalidRequest("mode must be queue, interrupt or steer", code="invalid_mode")
    if not await asyncio.to_thread(has_free_space, folder.session_dir(session_id)):
        # Refused before anything is recorded: the prompt either lands whole or not at all.
        raise StorageError("not enough disk space for a new prompt", data={"reason": "disk_full"})
    if not runtime.busy and not runtime.handover:
        try:
            turn = await runtime.start_turn(text)
            return 200, {"prompt": {"status": "accepted", "turn_id": turn.id, "session_id": session_id}}
        except Conflict as exc:
            if exc.code != "prompt_in_progress":
                raise
            # Another turn started in the meantime: the prompt takes the busy-input path instead.
    mode = mode or manager.config.busy_input.default_mode.value
    if mode == BusyMode.QUEUE:
        try:
            entry, position = await sync_to_async(manager.inputs.enqueue)(
                session_id, text, generation=int(runtime.meta.get("input_generation", 0)))
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
        if not runtime.busy:
            await runtime.dispatch_next()  # the turn ended while we queued: nobody else will pick it up
        return 202, {"prompt": {"status": "queued", "mode": "queue", "queued": True, "queue_entry_id": entry.id,
                                "queue_position": position, "queue_generation": entry.generation}}
    if mode == BusyMode.INTERRUPT:
        return 200, {"prompt": await runtime.interrupt(replacement=text, expected_turn_id=expected_turn_id)}
    result = await runtime.stage_steer(text)
    return (202 if result["status"] == "staged" else 200), {"prompt": result}


async def interrupt_session(session_id: str, workspace_ref: str | None = None,
                            expected_turn_id: str | None = None) -> dict[str, Any]:
    """The dedicated interrupt: cancel the turn, no replacement; its text is kept for one steer."""
    runtime = await _active_runtime(session_id, workspace_ref)
    return {"prompt": await runtime.interrupt(replacement=None, expected_turn_id=expected_turn_id)}


async def steer_session(session_id: str, text: str, workspace_ref: str | None = None) -> tuple[int, dict[str, Any]]:
    runtime = await _active_runtime(session_id, workspace_ref)
    result = await runtime.stage_steer(get_manager().inputs.check_text(text))
    return (202 if result["status"] == "staged" else 200), {"prompt": result}


async def _active_runtime(session_id: str, workspace_ref: str | None) -> Any:
    runtime, meta = await _runtime_for(session_id, workspace_ref)
    if runtime is None or meta["state"] != SessionState.ACTIVE or runtime.stopping:
        raise InvalidRequest(f"session is {meta['state']}, not active", code="session_not_active",
                             data={"state": meta["state"]})
    return runtime


async def list_permissions(session_id: str, workspace_ref: str | None = None) -> dict[str, Any]:
    runtime, _ = await _runtime_for(session_id, workspace_ref)
    items = [] if runtime is None else [p.public() for p in runtime.permissions.pending.values()
                                        if not p.answer.done()]
    return {"permissions": items}


async def decide_permission(session_id: str, request_id: str, decision: str, option_id: str | None = None,
                            workspace_ref: str | None = None) -> dict[str, Any]:
    if decision not in ("approve", "deny"):
        raise InvalidRequest("decision must be approve or deny", code="invalid_decision")
    runtime, _ = await _runtime_for(session_id, workspace_ref)
    pending = runtime.permissions.pending.get(request_id) if runtime else None
    if pending is None or pending.answer.done():
        raise NotFound("no pending permission request with that id", code="permission_not_found",
                       data={"request_id": request_id})
    if option_id and not any(o.get("optionId") == option_id for o in pending.options):
        raise InvalidRequest("option_id is not one of the offered options", code="invalid_option")
    runtime.decide_permission(request_id, decision, option_id)
    return {"permission": {**pending.public(), "decision": "approved" if decision == "approve" else "denied"}}


def pending_inputs(session_id: str, workspace_ref: str | None = None) -> dict[str, Any]:
    meta = scoped_meta(session_id, workspace_ref)
    from sessions.models import PENDING_INPUT, InputEntry

    rows = InputEntry.objects.filter(session_id=session_id, status__in=PENDING_INPUT).order_by("created_at", "id")
    return {"queue": [{"queue_entry_id": e.id, "text": e.text, "mode": e.mode, "status": e.status,
                       "queue_position": i + 1, "queue_generation": e.generation, "source": e.source,
                       "created_at": folder.isoformat(e.created_at)} for i, e in enumerate(rows)],
            "queue_generation": int(meta.get("input_generation") or 0)}


async def cancel_queued(session_id: str, entry_id: str, workspace_ref: str | None = None) -> dict[str, Any]:
    runtime, _ = await _runtime_for(session_id, workspace_ref)
    entry = await sync_to_async(get_manager().inputs.cancel)(session_id, entry_id)
    if runtime is not None:
        runtime.marker(MarkerKind.PROMPT_DROPPED, "Queued prompt canceled.",
                       {"queue_entry_id": entry.id, "reason": "canceled"})
        await runtime.recorder.flush()
    return {"prompt": {"status": "canceled", "queue_entry_id": entry.id, "queue_generation": entry.generation,
                       "mode": entry.mode}}


async def cancel_turn(session_id: str, workspace_ref: str | None = None) -> dict[str, Any]:
    runtime, _ = await _runtime_for(session_id, workspace_ref)
    cancelled = False
    if runtime is not None and runtime.busy:
        runtime.marker(MarkerKind.PROMPT_CANCEL, "Current turn canceled by request.")
        cancelled = await runtime.cancel_turn()
    return {"prompt": {"status": "canceled" if cancelled else "idle"}}


async def rename_session(session_id: str, name: str, workspace_ref: str | None = None) -> dict[str, Any]:
    name = (name or "").strip()
    if not name or len(name) > 300:
        raise InvalidRequest("name must be 1 to 300 characters", code="invalid_name")
    runtime, meta = await _runtime_for(session_id, workspace_ref)
    if runtime is not None:
        await runtime.rename(name)
    else:
        meta.update({"name": name, "name_source": "user", "updated_at": folder.isoformat(folder.utcnow())})
        await sync_to_async(catalog.save_meta)(meta)
    return await sync_to_async(get_session)(session_id)


async def stop_session(session_id: str, workspace_ref: str | None = None, detail: str = "") -> dict[str, Any]:
    runtime, _ = await _runtime_for(session_id, workspace_ref)
    if runtime is not None:
        await runtime.stop(lifecycle.user_stop_reason(detail), detail or "stopped by user")
    return await sync_to_async(get_session)(session_id)


async def remove_session(session_id: str, workspace_ref: str | None = None) -> dict[str, Any]:
    """Stop first, then tombstone-rename the folder, delete the row, and delete the tombstone."""
    runtime, meta = await _runtime_for(session_id, workspace_ref)
    if runtime is not None:
        await runtime.stop(lifecycle.user_stop_reason(""), "session deleted")
    before = await sync_to_async(get_session)(session_id)
    await sync_to_async(delete_session_files)(session_id, meta["workspace_id"])
    return before


def delete_session_files(session_id: str, workspace_id: str) -> None:
    directory = folder.session_dir(session_id)
    tombstone = directory.parent / f".compozy-delete-{session_id}-{time.time_ns()}"
    os.rename(directory, tombstone)
    try:
        catalog.delete_session_row(session_id)
    except Exception:
        os.rename(tombstone, directory)  # keep catalog truth: the session still exists
        raise
    shutil.rmtree(tombstone, ignore_errors=True)
    with contextlib.suppress(Exception):
        _ring_catalog_threadsafe("deleted", workspace_id, session_id)


def _ring_catalog_threadsafe(kind: str, workspace_id: str, session_id: str) -> None:
    manager = get_manager()
    if manager.loop is not None:
        manager.loop.call_soon_threadsafe(signals.ring_catalog, kind, workspace_id, session_id)


# ---- listing ---------------------------------------------------------------------------------

def list_sessions(*, workspace: str | None = None, state: str | None = None, resumable: bool = False,
                  all_states: bool = False, agent: str | None = None, query: str | None = None,
                  limit: int = 50, cursor: str | None = None, session_type: str | None = None) -> dict[str, Any]:
    if not 1 <= limit <= 100:
        raise InvalidRequest("limit must be between 1 and 100", code="invalid_limit")
    qs = Session.objects.all().order_by("-updated_at", "id")
    if workspace:
        qs = qs.filter(workspace_id=catalog.find_workspace(workspace).id)
    if state:
        if state not in set(SessionState):
            raise InvalidRequest("state must be starting, active, stopping or stopped", code="invalid_state")
        qs = qs.filter(state=state)
    elif resumable or not all_states:
        qs = qs.filter(state=SessionState.ACTIVE)
    if agent:
        qs = qs.filter(agent_name=agent)
    # Dream sessions are daemon-internal and hidden unless asked for by type.
    qs = qs.filter(session_type=session_type) if session_type else qs.exclude(session_type=SessionType.DREAM)
    if query:
        qs = qs.filter(name__icontains=query) | qs.filter(id__icontains=query)
    offset = 0
    if cursor:
        try:
            offset = max(int(cursor), 0)
        except ValueError as exc:
            raise InvalidRequest("invalid cursor", code="invalid_cursor") from exc
    total = qs.count()
    rows = list(qs[offset:offset + limit])
    sessions = []
    for row in rows:
        try:
            payload = session_payload(read_session_meta(row.id))
        except NotFound:
            if folder.session_dir(row.id).exists():
                continue
            # Another node's session and no shared sessions folder: the catalog row is what this node knows.
            payload = session_payload(catalog.row_meta(row))
        except Conflict:
            continue
        lease_held = bool(row.attached_to and row.attach_expires_at and row.attach_expires_at > folder.utcnow())
        if resumable and (not payload["attachable"] or lease_held):
            continue
        sessions.append(payload)
    has_more = offset + limit < total
    page: dict[str, Any] = {"total": total, "limit": limit, "has_more": has_more}
    if has_more:
        page["next_cursor"] = str(offset + limit)
    return {"sessions": sessions, "page": page}


# ---- events and history ----------------------------------------------------------------------

def _limit(value: int | None, default: int = 200) -> int:
    if value is None:
        return default
    if not 1 <= value <= MAX_PAGE:
        raise InvalidRequest(f"limit must be between 1 and {MAX_PAGE}", code="invalid_limit")
    return value


def envelope(meta: dict[str, Any], row: dict[str, Any]) -> dict[str, Any]:
    """SessionEventPayload: the stored row plus the Compozy session and workspace ids."""
    return {"session_id": meta["id"], "workspace_id": meta["workspace_id"], **row}


def list_events(session_id: str, *, workspace_ref: str | None = None, after: int | None = None,
                limit: int | None = None, types: list[str] | None = None, turn_id: str | None = None,
                agent_name: str | None = None, since: str | None = None) -> list[dict[str, Any]]:
    meta = scoped_meta(session_id, workspace_ref)
    if after is not None and after < 0:
        raise InvalidRequest("after_sequence must be a non-negative integer", code="invalid_cursor")
    rows = event_store.read_events(
        folder.events_path(session_id), after=after or 0, limit=_limit(limit),
        newest=after is None, types=types, turn_id=turn_id, agent_name=agent_name, since=since,
    )
    return [envelope(meta, r) for r in rows]


MAX_TURN_EVENTS = 1000
MAX_HISTORY_EVENTS = 5000


def history(session_id: str, *, workspace_ref: str | None = None, last: int | None = None,
            after: int | None = None) -> list[dict[str, Any]]:
    """Events grouped by turn in first-appearance order; the newest `last` turns, paged from disk.

    Memory is bounded whatever the turn sizes: a turn keeps at most its newest MAX_TURN_EVENTS events
    (`truncated`, `omitted_events`) and a response at most MAX_HISTORY_EVENTS; `session events --after`
    pages through a huge turn in full.
    """
    meta = scoped_meta(session_id, workspace_ref)
    want = _limit(last)
    path = folder.events_path(session_id)
    turns: dict[str, list[dict[str, Any]]] = {}
    omitted: dict[str, int] = {}
    first_seq: dict[str, int] = {}
    kept = 0
    before: int | None = None
    floor = after or 0
    done = False
    while not done:
        page = event_store.read_events(path, after=floor, limit=MAX_PAGE, newest=True, before=before)
        if not page:
            break
        for row in reversed(page):  # newest first
            key = row["turn_id"]
            if key not in turns:
                if len(turns) >= want or kept >= MAX_HISTORY_EVENTS:
                    done = True
                    break
                turns[key] = []
            first_seq[key] = row["sequence"]
            if len(turns[key]) >= MAX_TURN_EVENTS or kept >= MAX_HISTORY_EVENTS:
                omitted[key] = omitted.get(key, 0) + 1
                continue
            turns[key].append(envelope(meta, row))
            kept += 1
        if len(page) < MAX_PAGE:
            break
        before = page[0]["sequence"]
    ordered = sorted(turns, key=lambda k: first_seq[k])
    result = []
    for key in ordered:
        item: dict[str, Any] = {"turn_id": key, "events": list(reversed(turns[key]))}
        if omitted.get(key):
            item.update({"truncated": True, "omitted_events": omitted[key]})
        result.append(item)
    return result

def hook_runs(session_id: str, workspace_ref: str | None, *, event: str | None = None, outcome: str | None = None,
              last: int | None = None) -> list[dict[str, Any]]:
    """hook_runs rows of one session, oldest first (`last` keeps the newest N)."""
    scoped_meta(session_id, workspace_ref)  # 404 outside the workspace
    return event_store.read_hook_runs(folder.events_path(session_id), event=event, outcome=outcome,
                                      last=_limit(last, 1000))


# ---- workspaces ------------------------------------------------------------------------------

def list_workspaces() -> list[dict[str, Any]]:
    return [catalog.workspace_record(ws) for ws in Workspace.objects.all()]


def add_workspace(root_dir: str, name: str = "", add_dirs: list[str] | None = None,
                  default_agent: str = "") -> dict[str, Any]:
    return catalog.workspace_record(catalog.register_workspace(root_dir, name=name, add_dirs=add_dirs,
                                                               default_agent=default_agent))


def workspace_info(ref: str) -> dict[str, Any]:
    ws = catalog.find_workspace(ref)
    catalog.check_root(ws)
    config = get_config()
    sessions = []
    for row in Session.objects.filter(workspace_id=ws.id).order_by("-updated_at")[:100]:
        with contextlib.suppress(NotFound, Conflict):
            sessions.append(session_payload(read_session_meta(row.id)))
    return {
        "workspace": catalog.workspace_record(ws),
        "sessions": sessions,
        "agents": [{"name": a.name, "provider": a.provider or config.default_provider} for a in config.agents.values()],
        "skills": [],
        "providers": [{"name": p.name, "command": list(p.command), "display_name": p.display_name,
                       "available": shutil.which(p.command[0]) is not None or os.path.isfile(p.command[0])}
                      for p in config.providers.values()],
    }


def remove_workspace(ref: str) -> dict[str, Any]:
    ws = catalog.find_workspace(ref)
    live = Session.objects.filter(workspace_id=ws.id, state__in=[s.value for s in LIVE_STATES])
    if live.exists():
        raise Conflict("workspace has active sessions", code="workspace_has_active_sessions")
    record = catalog.workspace_record(ws)
    for row in Session.objects.filter(workspace_id=ws.id):
        with contextlib.suppress(OSError):
            delete_session_files(row.id, ws.id)
    ws.delete()
    return record


# ---- status ----------------------------------------------------------------------------------

def runtime_status() -> dict[str, Any]:
    """`compozy status`: the daemon block, session counts and recent failures (surfaces §4.9)."""
    from compozy_site.daemon_record import read_daemon_record

    config = get_config()
    record = read_daemon_record() or {}
    by_state = dict(Session.objects.values_list("state").annotate(n=Count("id")).values_list("state", "n"))
    failures = []
    by_kind: dict[str, int] = {}
    for row in Session.objects.filter(failure__isnull=False).order_by("-updated_at")[:200]:
        kind = (row.failure or {}).get("kind")
        if not kind:
            continue
        by_kind[kind] = by_kind.get(kind, 0) + 1
        if len(failures) < 10:
            failures.append({
                "session_id": row.id, "agent_name": row.agent_name, "provider": row.provider,
                "workspace_id": row.workspace_id, "state": row.state, "failure_kind": kind,
                "summary": (row.failure or {}).get("summary"),
                "crash_bundle_path": (row.failure or {}).get("crash_bundle_path"),
                "failure": row.failure, "updated_at": folder.isoformat(row.updated_at),
            })
    total = sum(by_state.values())
    active = by_state.get(SessionState.ACTIVE, 0)
    home = compozy_home()
    free = shutil.disk_usage(home).free
    return {
        "schema_version": 1,
        "generated_at": folder.isoformat(folder.utcnow()),
        "daemon": {
            "status": "running", "pid": os.getpid(), "started_at": record.get("started_at"),
            "socket": str(config.socket), "http_host": config.http_host,
            "http_port": record.get("port", config.http_port), "active_sessions": active,
            "total_sessions": total, "version": "0.1.0", "home": str(home), "config": config.source,
        },
        "sessions": {"active": active, "total": total, "by_status": by_state},
        "event_loop": {"lag": MONITOR.report()},
        "cluster": cluster.status(),
        "health": {
            "status": "ok" if not by_kind else "warn",
            "persistence": {"status": "ok" if free > 100 * 1024 * 1024 else "warn", "free_bytes": free},
            "failures": {"status": "ok" if not by_kind else "warn", "total": sum(by_kind.values()),
                         "by_kind": by_kind, "recent": failures},
        },
    }



def check_create_fields(body: dict[str, Any]) -> None:
    allowed = {"agent_name", "name", "workspace", "workspace_path", "provider", "model", "reasoning_effort",
               "speed", "prompt"}
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise InvalidRequest(f"unknown field(s): {', '.join(unknown)}", code="unknown_field")

"""Creating sessions (docs/reference/sessions.md §3): durable admission before 201, and spawned children.

A create's body is a TypedDict (`CreateBody`): the API's schema (compozy/api/schemas.py `CreateSessionIn`) or the
task runner builds it as a dict, and a hook's patch changes it as one."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import NotRequired, TypedDict

from django.db import transaction

from compozy_base.config.agents import ProviderConfig
from compozy_base.config.loader import REASONING_EFFORTS, Config, get_config
from compozy_base.config.modes import PermissionMode
from sessions.catalog import cluster, lineage
from sessions.catalog import index as catalog
from sessions.core.enums import MarkerKind, SessionState, SessionType
from sessions.core.errors import Conflict, HookDenied, InvalidRequest, StorageError, Unavailable
from sessions.core.failures import classify, has_free_space
from sessions.core.jsonobj import JsonObject
from sessions.core.offload import db
from sessions.core.record import SessionMeta, SessionRecord, WorktreeDoc
from sessions.live import doorbells
from sessions.models import Session
from sessions.runtime.manager import SessionManager, get_manager
from sessions.services.lookup import _agent, _provider, _runtime_for, resolve_agent
from sessions.services.payloads import SessionPayload, session_payload
from sessions.store import events as event_store
from sessions.store import folder
from sessions.store.ids import is_session_id, new_session_id
from sessions.worktree import checkpoints, git, layout, trees

logger = logging.getLogger(__name__)

SPEEDS = ("normal", "fast")
ISOLATIONS = ("none", "worktree")


class TaskBinding(TypedDict):
    """What binds a task run's session to its run (tasks/runner.py; never from the API)."""

    task_id: str
    run_id: str
    cwd: str
    budget_usd: float | None  # what the task's budget left after its earlier attempts
    isolation: NotRequired[str]  # `[tasks] isolation`, resolved by the runner
    worktree: NotRequired[WorktreeDoc]  # a retry's: the earlier attempt's worktree, continued


class ForkSpec(TypedDict):
    """What a fork starts from (sessions/services/history_ops.py; never from the API)."""

    session_id: str
    checkpoint: int
    commit: str  # the checkpoint's commit: the new worktree's files


class CreateBody(TypedDict, total=False):
    workspace: str | None
    workspace_path: str | None
    agent_name: str | None
    name: str | None
    provider: str | None
    model: str | None
    reasoning_effort: str | None
    speed: str | None
    prompt: str | None
    permissions: str | None  # a spawned child's (`spawn_child`)
    isolation: str | None  # none or worktree (docs/reference/worktrees.md)
    task_binding: TaskBinding
    fork: ForkSpec


def _check_body(config: Config, body: CreateBody) -> tuple[str, str]:
    """Everything that can refuse the body, checked before resolve-or-register: a refused create registers nothing.
    Returns the reasoning effort and the speed."""
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
    agent_name, provider = body.get("agent_name"), body.get("provider")
    if agent_name:
        _agent(config, agent_name)
    if provider:
        _provider(config, provider)
    isolation = body.get("isolation")
    if isolation is not None and isolation not in ISOLATIONS:
        raise InvalidRequest("isolation must be none or worktree", code="invalid_isolation")
    if isolation == "worktree" and workspace_path:
        git.repo_root(Path(workspace_path))  # refused before the workspace is registered
    return effort, speed


def _prepare_create(body: CreateBody, session_type: SessionType = SessionType.USER,
                    parent: SessionMeta | None = None, role: str = "", ttl_seconds: int = 0,
                    ) -> tuple[SessionRecord, ProviderConfig, list[Path], str]:
    """Steps 1-5 of creation (docs/reference/sessions.md §3), all durable before we answer 201."""
    config = get_config()
    workspace, workspace_path = body.get("workspace"), body.get("workspace_path")
    effort, speed = _check_body(config, body)
    manager = get_manager()
    # Step 5: only a prompt with non-whitespace content is staged (trimmed); an absent, empty or blank one keeps
    # create-only behaviour, so a script that passes an optional prompt through still creates its session.
    raw_prompt = body.get("prompt") or ""
    prompt = manager.inputs.check_text(raw_prompt, "prompt") if raw_prompt.strip() else ""
    ws = catalog.find_workspace(workspace) if workspace else catalog.resolve_or_register(str(workspace_path))
    catalog.check_root(ws)
    agent, provider, agent_name = resolve_agent(config, body.get("agent_name") or "", ws)
    provider_name = body.get("provider")
    if provider_name:
        provider = _provider(config, provider_name)
    permissions = lineage.effective_permissions(
        session_type, agent.permissions or config.permissions_mode.value,
        parent.get("effective_permissions") if parent else None, body.get("permissions"))
    now = folder.isoformat(folder.utcnow())
    session_id = new_session_id()
    meta: SessionMeta = {
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
    binding = body.get("task_binding")  # internal only (tasks): the API's create schema refuses it
    if binding:
        meta.update({"task_id": binding["task_id"], "run_id": binding["run_id"], "cwd": binding["cwd"]})
        if binding.get("budget_usd") is not None:  # what the task's budget left after its earlier attempts
            meta["budget_usd"] = binding["budget_usd"]
    if parent is not None:
        meta["lineage"] = lineage.child_lineage(parent, role=role, ttl_seconds=ttl_seconds, now=folder.utcnow())
    meta["isolation"] = isolation = _isolation(body, agent.isolation)
    directory = folder.session_dir(session_id)
    if not has_free_space(directory):
        raise StorageError("not enough disk space for a new session", data={"reason": "disk_full"})
    manager.reserved.add(session_id)
    placed: trees.Placed | None = None
    try:
        directory.mkdir(parents=True, exist_ok=False)
        if isolation == "worktree":
            placed = _place_worktree(session_id, body, meta)
        rec = SessionRecord.from_meta(meta)
        event_store.init_store(folder.events_path(session_id))
        with transaction.atomic():
            catalog.upsert_session_row(rec)
            cluster.take(session_id)  # a new id: nobody else can hold it
            if prompt:
                manager.inputs.enqueue(session_id, prompt, mode="startup", source="startup")
        # After the lease: a node reading the shared folder never finds a `starting` meta.json without a holder
        # (it would repair the create as stale); until this write it finds no session at all.
        folder.write_meta(rec)
    except BaseException as exc:
        # Durable admission: a rejected staged prompt (or a full disk) leaves no session behind.
        try:
            Session.objects.filter(id=session_id).delete()
        except Exception:  # the create's own failure is the one the caller must see
            logger.warning("could not delete the catalog row of failed create %s", session_id, exc_info=True)
        shutil.rmtree(directory, ignore_errors=True)
        if placed is not None and not (binding and binding.get("worktree")):
            trees.discard(placed.worktree)  # a worktree made for this create only; a retry's continued one stays
        manager.reserved.discard(session_id)
        if isinstance(exc, Exception) and classify(exc, directory) is not None:
            raise StorageError.from_exception(exc) from exc
        raise
    return rec, provider, session_roots(rec, ws.root_dir, ws.add_dirs or []), prompt


def _isolation(body: CreateBody, agent_default: str) -> str:
    """The create's own, else a task's (`[tasks] isolation`), else the agent's; a fork always has a worktree."""
    if body.get("fork"):
        return "worktree"
    binding = body.get("task_binding")
    return body.get("isolation") or (binding.get("isolation") if binding else None) or agent_default or "none"


def session_roots(rec: SessionRecord, root_dir: str, add_dirs: list[str]) -> list[Path]:
    """The fs boundary: the workspace's root (a worktree session's: its worktree) and its added folders."""
    first = Path(str(rec.worktree["path"])) if rec.worktree else Path(root_dir)
    return [first, *[Path(d) for d in add_dirs]]


def _place_worktree(session_id: str, body: CreateBody, meta: SessionMeta) -> trees.Placed:
    """The session's worktree (docs/reference/worktrees.md): a new one from the workspace's HEAD, a fork's from its
    checkpoint, or a task retry's continued. The agent's cwd is the workspace's place in it."""
    workspace = Path(meta["workspace_path"])
    binding, fork = body.get("task_binding"), body.get("fork")
    reused = binding.get("worktree") if binding else None
    if reused and Path(str(reused.get("path", ""))).is_dir():
        placed = trees.Placed(reused, trees.cwd_in(Path(str(reused["path"])), Path(str(reused["repo"])), workspace))
    elif fork:
        parent = git.out(["rev-parse", f"{fork['commit']}^"], workspace)
        placed = trees.add(session_id, workspace, start=parent)
        try:
            checkpoints.restore(Path(placed.worktree["path"]), fork["commit"], parent,
                                layout.scratch_index(session_id))
        except BaseException:
            trees.discard(placed.worktree)  # the caller's clean-up never saw it placed
            raise
        meta["forked_from"] = {"session_id": fork["session_id"], "checkpoint": fork["checkpoint"]}
    else:
        placed = trees.add(session_id, workspace)
    meta["worktree"] = placed.worktree
    cwd = binding["cwd"] if binding else meta["cwd"]
    try:
        inside = Path(cwd).resolve().relative_to(workspace.resolve())
    except ValueError:
        inside = Path()
    meta["cwd"] = str(placed.cwd / inside)
    return placed


async def create_session(body: CreateBody, session_type: SessionType = SessionType.USER,
                         parent: SessionMeta | None = None, role: str = "", ttl_seconds: int = 0,
                         ) -> SessionPayload:
    manager = get_manager()
    if manager.draining:
        raise Unavailable("the daemon is shutting down", code="daemon_draining")
    body = await _pre_create_hook(manager, body, session_type)
    with manager.admission():
        # On the runtime's DB thread, not the thread every sync view and middleware step of every request shares:
        # a burst of creates (folder, events.db and catalog writes, fsyncs) queued `GET /api/status` for seconds
        # behind it. One writer thread also spares SQLite's lock a second writer.
        rec, provider, roots, prompt = await db(_prepare_create, body, session_type, parent, role, ttl_seconds)
        runtime = manager.launch(rec, provider=provider, roots=roots)
        meta = rec.to_meta()  # taken before the start runs: the answer is the session as created
    if prompt:
        runtime.marker(MarkerKind.PROMPT_QUEUED, "First prompt staged at create.", {"source": "startup"}, turn_id="")
    doorbells.ring_catalog("upserted", meta["workspace_id"], meta["id"])
    return session_payload(meta)


async def _pre_create_hook(manager: SessionManager, body: CreateBody, session_type: SessionType) -> CreateBody:
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
        raise HookDenied(outcome.error, data={"hook": outcome.hook_name})
    patched = body.copy()
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


async def spawn_child(parent_id: str, body: JsonObject, workspace_ref: str | None = None) -> SessionPayload:
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
    unknown = set(body) - {"role", "ttl_seconds", "agent_name", "prompt", "permissions", "name", "isolation"}
    if unknown:
        raise InvalidRequest(f"unknown field(s): {', '.join(sorted(unknown))}", code="unknown_field")
    permissions = body.get("permissions")
    if permissions is not None and permissions not in set(PermissionMode):
        raise InvalidRequest("permissions must be deny-all, approve-reads or approve-all", code="invalid_field")
    child_body: CreateBody = {
        "workspace": parent["workspace_id"], "agent_name": body.get("agent_name") or parent["agent_name"],
        "prompt": body.get("prompt"), "name": body.get("name") or "", "permissions": permissions}
    if body.get("isolation") is not None:  # a coordinated step's child: a worktree of its own (coordination/)
        child_body["isolation"] = str(body["isolation"])
    return await create_session(child_body, SessionType.SPAWNED, parent, role.strip(), ttl)


def reap_candidates(live: dict[str, SessionMeta]) -> list[tuple[str, str]]:
    """(session id, reason) for live spawned children whose TTL expired or whose parent stopped. `live` maps
    session id → meta.json already read; a parent outside it is read from its folder."""
    now = folder.utcnow()
    found = []
    for session_id, meta in live.items():
        child_lineage = meta.get("lineage")
        if not child_lineage:
            continue
        parent_id = child_lineage.get("parent_session_id") or ""
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

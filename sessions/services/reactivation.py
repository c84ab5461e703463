"""Reactivation under the same id and resume attach with holder leases (docs/reference/sessions.md §14-15)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import NotRequired, TypedDict

from asgiref.sync import sync_to_async

from compozy_base.config.agents import ProviderConfig
from compozy_base.config.loader import get_config
from sessions.catalog import cluster, ownership
from sessions.core.attach_holders import holder_gone
from sessions.core.enums import FailureKind, SessionState, SessionType
from sessions.core.errors import Conflict, InvalidRequest
from sessions.core.jsonobj import EventContent
from sessions.core.offload import db
from sessions.core.record import SessionRecord
from sessions.models import Session, Workspace
from sessions.repair.boot import check_transcript_once
from sessions.repair.transcript import repair_transcript
from sessions.runtime.manager import get_manager
from sessions.services.create import session_roots
from sessions.services.lookup import (
    SessionOwnedElsewhere,
    check_workspace_scope,
    get_session,
    pull_copy,
    read_session_meta,
)
from sessions.services.payloads import SessionPayload
from sessions.store import events as event_store
from sessions.store import folder, replica


def reactivation_hint(session_id: str) -> str:
    """Where to look before new work, with the id filled in (a literal `ID` made the operator find it)."""
    return (f"inspect `compozy session recap {session_id}` (or `history`) and "
            f"`compozy session repair {session_id} --dry-run`")


def _unreadable_store_hint(session_id: str) -> str:
    """recap, history and repair read the same store: they fail alike, so they are no help here."""
    return (f"keep what is left with `compozy session evidence {session_id}`; "
            f"`compozy session remove {session_id}` deletes it and its history")


class NotReactivatable(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


def _reactivatable(meta: EventContent) -> tuple[Workspace, ProviderConfig]:
    """A stopped session's workspace and provider, when a reactivation may start it; NotReactivatable with the
    reason otherwise. The checks that read no store: `session list --resumable` lists what passes them (the
    event store is read by the reactivation itself)."""
    if (meta.get("session_type") or "user") != SessionType.USER:
        raise NotReactivatable("session_not_reactivatable",
                               "daemon-managed sessions are reactivated only by the daemon")
    ws = Workspace.objects.filter(id=meta["workspace_id"]).first()
    if ws is None:
        raise NotReactivatable("workspace_not_found", "its workspace is no longer registered")
    if not Path(ws.root_dir).is_dir():
        if replica.enabled():  # a cluster on own disks: the session may have run on another machine
            raise NotReactivatable("workspace_unavailable", f"its workspace {ws.root_dir} does not exist on this "
                                   f"machine (node {cluster.node_id()}); continue it on a node that has it")
        raise NotReactivatable("workspace_root_missing", f"the workspace root {ws.root_dir} no longer exists")
    config = get_config()
    agent = config.agents.get(meta["agent_name"])
    if agent is None:
        raise NotReactivatable("agent_not_found", f"agent {meta['agent_name']!r} is no longer defined")
    provider = config.providers.get(meta.get("provider") or agent.provider or config.default_provider)
    if provider is None:
        raise NotReactivatable("provider_not_found", f"provider {meta.get('provider')!r} is no longer defined")
    return ws, provider


def reactivatable(meta: EventContent) -> bool:
    """Whether `session resume` (or a prompt) would reactivate this stopped session."""
    try:
        _reactivatable(meta)
    except NotReactivatable:
        return False
    return True


def _reactivation_plan(session_id: str) -> tuple[SessionRecord, ProviderConfig, list[Path]]:
    """Validate meta, workspace, agent and event store; refuse with the reason and where to look."""
    pull_copy(session_id)  # a dead node's session: this node's copy of it, from the cluster's database
    meta = read_session_meta(session_id)
    if meta["state"] != SessionState.STOPPED:
        # Another node's reactivation won the race since the caller read `stopped`: the session is that node's.
        holder = ownership.holder_elsewhere(session_id)
        if holder is not None:
            raise SessionOwnedElsewhere(session_id, holder)
        raise Conflict(f"session is {meta['state']}, not stopped", code="session_not_stopped")

    def refuse(message: str, code: str) -> Conflict:
        hint = _unreadable_store_hint(session_id) if code == "event_store_unreadable" else \
            reactivation_hint(session_id)
        return Conflict(f"session cannot be reactivated: {message}; {hint}", code=code,
                        data={"session_id": session_id, "reason": code})

    try:
        ws, provider = _reactivatable(meta)
    except NotReactivatable as exc:
        raise refuse(exc.message, exc.code) from None
    path = folder.events_path(session_id)
    try:
        event_store.max_sequence(path)
    except Exception as exc:
        raise refuse(f"its event store is unreadable ({exc})", "event_store_unreadable") from exc
    if (meta.get("failure") or {}).get("kind") == FailureKind.STORAGE_FAILURE:
        # Its last turn could not be closed while the disk was full: close it now, append-only, so the
        # transcript never reads as if that turn were still running.
        repair_transcript(session_id, dry_run=False, force=False)
    try:
        rec = SessionRecord.from_meta(meta)
    except ValueError as exc:  # read_meta checked its keys and state; a field of the wrong type is found here
        raise Conflict(f"session metadata is unreadable: {exc}", code="session_meta_invalid") from exc
    if rec.worktree and not Path(str(rec.worktree.get("path") or "")).is_dir():
        raise refuse("its worktree was removed", "worktree_missing")
    return rec, provider, session_roots(rec, ws.root_dir, ws.add_dirs or [])


def _adopt(session_id: str) -> None:
    """The lease is ours: in a cluster on own disks the session's events.db is rebuilt from the database's copy
    (the rows a dead owner committed, up to its last), and a turn cut by its death is closed here, the one node
    that writes the session now (its rows reach the database with the first batch)."""
    if not replica.pull(session_id):
        return
    meta = folder.read_meta(session_id)
    if meta is not None:
        check_transcript_once(session_id, meta, None, writer=True)


class AttachLease(TypedDict):
    session_id: str
    attached_to: str
    attached_at: str | None
    attach_expires_at: str | None


class Attached(TypedDict):
    """`POST …/attach` and `…/detach` (the lease only after an attach)."""

    session: SessionPayload
    attach: NotRequired[AttachLease]


async def reactivate(session_id: str, workspace_ref: str | None = None, timeout: float = 90.0) -> SessionPayload:
    """stopped → starting → active under the same Compozy id (daemon-managed; used by prompt and resume)."""
    manager = get_manager()
    runtime = manager.get(session_id)
    if runtime is not None:  # a live session is scoped like a stopped one: the wrong workspace never finds it
        await sync_to_async(check_workspace_scope)(workspace_ref, runtime.rec.to_meta())
    else:
        with manager.admission():
            rec, provider, roots = await sync_to_async(_reactivation_plan)(session_id)
            await sync_to_async(check_workspace_scope)(workspace_ref, rec.to_meta())
            # On the runtime's DB thread, after any release queued by this session's last stop; two nodes
            # reactivating one session at once: one takes the lease, the other answers 409.
            holder = await db(cluster.take, session_id)
            if holder is not None:
                raise SessionOwnedElsewhere(session_id, holder)
            await db(_adopt, session_id)
            runtime = manager.get(session_id) or manager.launch(rec, provider=provider, roots=roots,
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
                       f"{reactivation_hint(session_id)}", code="session_reactivation_failed",
                       data={"session": payload})
    return payload


def attach(session_id: str, workspace_ref: str | None, attached_to: str, ttl_seconds: int) -> Attached:
    """Take the holder lease of an attachable live session (compare-and-set on the catalog row)."""
    from datetime import timedelta

    if not 1 <= ttl_seconds <= 86400:
        raise InvalidRequest("ttl_seconds must be between 1 and 86400", code="invalid_ttl")
    payload = get_session(session_id, workspace_ref)
    if not payload["attachable"]:
        raise Conflict(f"session is not attachable (state {payload['state']}, badge {payload['badge']}); "
                       f"{reactivation_hint(session_id)}", code="session_not_attachable",
                       data={"session": payload})
    now = folder.utcnow()
    expires = now + timedelta(seconds=ttl_seconds)
    from django.db.models import Q

    free = Q(attached_to="") | Q(attach_expires_at__lt=now) | Q(attached_to=attached_to)
    held_by = Session.objects.filter(id=session_id).values_list("attached_to", flat=True).first() or ""
    if held_by and holder_gone(held_by):  # a `session resume` whose terminal closed: its process is gone
        free |= Q(attached_to=held_by)
    changed = Session.objects.filter(Q(id=session_id) & free).update(attached_to=attached_to,
                                                                      attach_expires_at=expires)
    if changed != 1:
        row = Session.objects.get(id=session_id)
        raise Conflict(f"session is attached to {row.attached_to} until {folder.isoformat(row.attach_expires_at)}; "
                       f"release it with `compozy session detach {session_id} --holder {row.attached_to}` (a "
                       "`session resume` whose process is gone releases it by itself)",
                       code="session_attach_locked", data={"attached_to": row.attached_to,
                                                           "until": folder.isoformat(row.attach_expires_at)})
    # The lease lives in catalog columns the session payload does not show: the payload read above stands.
    return {"session": payload, "attach": {
        "session_id": session_id, "attached_to": attached_to, "attached_at": folder.isoformat(now),
        "attach_expires_at": folder.isoformat(expires)}}


def detach(session_id: str, workspace_ref: str | None, attached_to: str) -> Attached:
    payload = get_session(session_id, workspace_ref)
    Session.objects.filter(id=session_id, attached_to=attached_to).update(attached_to="", attach_expires_at=None)
    return {"session": payload}

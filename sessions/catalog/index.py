"""Catalog rows and workspace resolution (docs/reference/workspaces.md §1-3). Synchronous ORM code."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TypedDict

from django.db import IntegrityError, transaction
from django.dispatch import Signal

from sessions.catalog.cluster import node_id
from sessions.core.enums import SessionState
from sessions.core.errors import Conflict, Gone, InvalidRequest, NotFound
from sessions.core.record import SessionMeta, SessionRecord
from sessions.models import Session, Workspace
from sessions.store import replica
from sessions.store.folder import isoformat, parse_time, utcnow, write_meta
from sessions.store.ids import is_workspace_id, new_workspace_id


class WorkspaceDoc(TypedDict):
    """A workspace as every surface shows it (built as a dict, sent as JSON)."""

    id: str
    name: str
    root_dir: str
    add_dirs: list[str]
    default_agent: str | None
    created_at: str | None
    updated_at: str | None


def workspace_record(ws: Workspace) -> WorkspaceDoc:
    return {
        "id": ws.id, "name": ws.name, "root_dir": ws.root_dir, "add_dirs": list(ws.add_dirs or []),
        "default_agent": ws.default_agent or None, "created_at": isoformat(ws.created_at),
        "updated_at": isoformat(ws.updated_at),
    }


def resolved_path(path: str, field: str = "workspace_path") -> Path:
    """`path` with its symlinks resolved. A symlink loop is the caller's bad input, not a 500 (Python 3.11 raises
    RuntimeError for it)."""
    try:
        return Path(path).resolve()
    except (OSError, RuntimeError, ValueError) as exc:
        raise InvalidRequest(f"{field} cannot be resolved: {exc}", code="workspace_path_unresolvable",
                             data={"path": path}) from exc


def canonical_dir(path: str, field: str = "workspace_path") -> Path:
    if not path or not os.path.isabs(path):
        raise InvalidRequest(f"{field} must be an absolute path", code="workspace_path_not_absolute")
    resolved = resolved_path(path, field)
    if not resolved.exists():  # a path given now: it may never have existed ("no longer" is check_root's)
        raise Gone(f"{field} {resolved} does not exist", code="workspace_root_missing", data={"path": str(resolved)})
    if not resolved.is_dir():
        raise InvalidRequest(f"{field} is not a directory", code="workspace_path_not_directory")
    return resolved


def _enclosing(path: Path) -> Workspace | None:
    """The nearest registered root that contains `path` (a nested registration beats its parent)."""
    best: Workspace | None = None
    for ws in Workspace.objects.all():
        root = Path(ws.root_dir)
        if (path == root or root in path.parents) and (best is None or len(ws.root_dir) > len(best.root_dir)):
            best = ws
    return best


def find_workspace(ref: str) -> Workspace:
    """By id, by absolute path (nearest enclosing root), else by name. Never registers."""
    if not ref:
        raise InvalidRequest("workspace is required", code="workspace_required")
    if ref.startswith(("ws_", "ws-")):
        ws = Workspace.objects.filter(id=ref).first() if is_workspace_id(ref) else None
        if ws is None:
            ws = Workspace.objects.filter(name=ref).first()
    elif os.path.isabs(ref):
        ws = _enclosing(resolved_path(ref, "workspace"))
    else:
        ws = Workspace.objects.filter(name=ref).first()
    if ws is None:
        raise NotFound("workspace not found", code="workspace_not_found", data={"workspace": ref})
    return ws


def unique_workspace_name(base: str) -> str:
    """`base`, or `base-2`, `base-3`, … whichever no workspace has yet."""
    base = base or "workspace"
    name, n = base, 2
    while Workspace.objects.filter(name=name).exists():
        name = f"{base}-{n}"
        n += 1
    return name


def register_workspace(root_dir: str, *, name: str = "", add_dirs: list[str] | None = None,
                       default_agent: str = "") -> Workspace:
    root = canonical_dir(root_dir, "root_dir")
    if Workspace.objects.filter(root_dir=str(root)).exists():
        raise Conflict("workspace path already registered", code="workspace_path_taken")
    if name and Workspace.objects.filter(name=name).exists():
        raise Conflict("workspace name already in use", code="workspace_name_taken")
    extra: list[str] = []
    for d in add_dirs or []:
        resolved = str(canonical_dir(d, "add_dirs"))
        if resolved != str(root) and resolved not in extra:
            extra.append(resolved)
    now = utcnow()
    try:
        with transaction.atomic():
            return Workspace.objects.create(
                id=new_workspace_id(), name=name or unique_workspace_name(root.name), root_dir=str(root),
                add_dirs=extra, default_agent=default_agent, created_at=now, updated_at=now,
            )
    except IntegrityError as exc:
        raise Conflict("workspace path already registered", code="workspace_path_taken") from exc


def workspace_for_path(path: str) -> tuple[Workspace | None, Path]:
    """What `workspace_path` names, without registering: (the registered workspace it lies in or None, the
    directory). A create checks everything else against it first, so a refused create registers nothing."""
    resolved = canonical_dir(path)
    return _enclosing(resolved), resolved


def resolve_or_register(path: str) -> Workspace:
    """`workspace_path` semantics: inside a registered tree → that workspace; else register the path."""
    ws, resolved = workspace_for_path(path)
    return ws if ws is not None else register_found(resolved)


def register_found(resolved: Path) -> Workspace:
    """Register a directory `workspace_for_path` found in no workspace."""
    try:
        return register_workspace(str(resolved))
    except Conflict:
        # Two concurrent requests for the same new path end on one row.
        ws = Workspace.objects.filter(root_dir=str(resolved)).first()
        if ws is None:
            raise
        return ws


def check_root(ws: Workspace) -> None:
    if not Path(ws.root_dir).is_dir():
        raise Gone("workspace root directory no longer exists", code="workspace_root_missing",
                   data={"workspace_id": ws.id, "root_dir": ws.root_dir})


# Sent after every save of a session's metadata, with `record` (the SessionRecord saved), on the thread that saved
# it (the runtime's DB thread, off the event loop). Its receivers connect in their AppConfig.ready(): health derives
# the session's health row (health/apps.py), attention writes the webhook events the record carries to its outbox
# (attention/apps.py). A signal keeps the catalog below the apps that build on it (no import of them from here), and
# `send` (not `send_robust`) lets a receiver's failure reach the saver, as a direct call would.
meta_saved = Signal()


def announce_saved(rec: SessionRecord) -> None:
    """What follows a save of `rec`: `meta_saved` sent to its receivers."""
    meta_saved.send(sender=SessionRecord, record=rec)


def save_meta(rec: SessionRecord) -> None:
    """meta.json (atomic, fsynced: the per-session truth), then its catalog mirror.

    When meta.json cannot be written (a full disk under the sessions folder) the catalog row is still
    updated, so listings show the change, and the error is raised for the caller to retry."""
    try:
        write_meta(rec)
    except OSError:
        upsert_session_row(rec)
        announce_saved(rec)
        raise
    upsert_session_row(rec)
    announce_saved(rec)


def upsert_session_row(rec: SessionRecord) -> None:
    """Mirror meta.json into the catalog; every lifecycle change writes both (so this node holds the folder)."""
    # A holder lease attaches to a live runtime: a stop ends it, so a later resume is not refused for 15 minutes
    # by a holder of a runtime that no longer exists.
    lease: dict[str, object] = ({"attached_to": "", "attach_expires_at": None} if rec.state == SessionState.STOPPED
                                else {})
    Session.objects.update_or_create(
        id=rec.id,
        defaults={
            **lease,
            "workspace_id": rec.workspace_id,
            "name": rec.name or "",
            "agent_name": rec.agent_name,
            "provider": rec.provider or "",
            "model": rec.model or "",
            "session_type": rec.session_type or "user",
            "state": rec.state.value,
            "stop_reason": rec.stop_reason or "",
            "stop_detail": rec.stop_detail or "",
            "failure": rec.failure.model_dump(mode="json", exclude_unset=True) if rec.failure is not None else None,
            "acp_session_id": rec.acp_session_id or "",
            "folder_node": node_id(),
            "last_activity_at": parse_time(rec.liveness.activity.last_activity_at),
            "created_at": parse_time(_stamp(rec, "created_at")),
            "updated_at": parse_time(_stamp(rec, "updated_at")),
        },
    )
    if replica.enabled():
        replica.save_meta_copy(rec.id, rec.to_meta())  # any node reads it (store/replica.py)


def _stamp(rec: SessionRecord, key: str) -> str:
    """A time the row cannot go without: a record lacking it is refused as the dict lacking the key was
    (rebuild_catalog reports `meta.json lacks 'created_at'`)."""
    value = getattr(rec, key)
    if value is None:
        raise KeyError(key)
    return str(value)


def delete_session_row(session_id: str) -> None:
    Session.objects.filter(id=session_id).delete()
    replica.forget(session_id)  # its durable copies go with it


def row_meta(row: Session) -> SessionMeta:
    """The metadata a catalog row mirrors, for a session whose meta.json is on another node's disk."""
    return {"id": row.id, "name": row.name, "agent_name": row.agent_name, "provider": row.provider,
            "model": row.model, "workspace_id": row.workspace_id, "session_type": row.session_type,
            "state": row.state, "stop_reason": row.stop_reason, "stop_detail": row.stop_detail,
            "failure": row.failure, "acp_session_id": row.acp_session_id,
            "liveness": {"activity": {"last_activity_at": isoformat(row.last_activity_at)}
                         if row.last_activity_at else {}},
            "created_at": isoformat(row.created_at), "updated_at": isoformat(row.updated_at)}

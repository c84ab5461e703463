"""Renaming, stopping and removing sessions."""

from __future__ import annotations

import logging
import os
import shutil
import time

from asgiref.sync import sync_to_async

from sessions.catalog import index as catalog
from sessions.core import lifecycle
from sessions.core.errors import InvalidRequest, NotFound
from sessions.core.record import SessionRecord
from sessions.live import doorbells
from sessions.runtime.manager import get_manager
from sessions.services.lookup import _active_runtime, _runtime_for, get_session
from sessions.services.payloads import SessionPayload
from sessions.services.worktrees import refuse_unsaved_work, remove_worktree
from sessions.store import folder

logger = logging.getLogger(__name__)


async def rename_session(session_id: str, name: str, workspace_ref: str | None = None) -> SessionPayload:
    name = (name or "").strip()
    if not name or len(name) > 300:
        raise InvalidRequest("name must be 1 to 300 characters", code="invalid_name")
    runtime, meta = await _runtime_for(session_id, workspace_ref)
    if runtime is not None:
        await runtime.rename(name)
    else:
        rec = SessionRecord.from_meta(meta)
        rec.name, rec.name_source, rec.updated_at = name, "user", folder.isoformat(folder.utcnow())
        try:
            await sync_to_async(catalog.save_meta)(rec)
        except FileNotFoundError:  # removed while we renamed it
            raise NotFound("session not found", code="session_not_found", data={"session_id": session_id}) from None
    return await sync_to_async(get_session)(session_id)


async def set_mode(session_id: str, mode: str, workspace_ref: str | None = None) -> SessionPayload:
    """`POST …/mode`: the agent's mode switched on its live session (sessions/runtime/agent_state.py)."""
    runtime = await _active_runtime(session_id, workspace_ref)
    await runtime.agent_state.set_mode(mode)
    return await sync_to_async(get_session)(session_id)


async def stop_session(session_id: str, workspace_ref: str | None = None, detail: str = "") -> SessionPayload:
    runtime, _ = await _runtime_for(session_id, workspace_ref)
    if runtime is not None:
        await runtime.stop(lifecycle.user_stop_reason(detail), detail or "stopped by user")
    return await sync_to_async(get_session)(session_id)


async def remove_session(session_id: str, workspace_ref: str | None = None, force: bool = False) -> SessionPayload:
    """A worktree with unsaved work refuses first (409 worktree_has_work, unless `force`: then its state is kept as
    a final checkpoint ref); stop, then tombstone-rename the folder, delete the row, and delete the tombstone."""
    runtime, meta = await _runtime_for(session_id, workspace_ref)
    if meta.get("worktree") and not force:
        await sync_to_async(refuse_unsaved_work, thread_sensitive=False)(session_id, meta)  # only a check
    if runtime is not None:
        await runtime.stop(lifecycle.user_stop_reason(""), "session deleted")
    if meta.get("worktree"):
        # After the stop: the agent wrote its last files; what it left is kept (final ref) before the worktree goes.
        await sync_to_async(remove_worktree, thread_sensitive=False)(session_id, meta)
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
    try:
        ring_catalog_threadsafe("deleted", workspace_id, session_id)
    except Exception:  # the files and the row are gone: a catalog view learns it on its next read
        logger.warning("could not ring the catalog doorbell for deleted %s", session_id, exc_info=True)


def ring_catalog_threadsafe(kind: str, workspace_id: str, session_id: str) -> None:
    """Ring the catalog doorbell from a worker thread (the doorbell lives on the daemon's loop)."""
    manager = get_manager()
    if manager.loop is not None:
        manager.loop.call_soon_threadsafe(doorbells.ring_catalog, kind, workspace_id, session_id)

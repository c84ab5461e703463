"""REST routes for worktree sessions (docs/reference/worktrees.md): changes, checkpoints, rewind, fork, commit,
merge, and the daemon-wide worktree list and prune. Thin: the schemas validate, sessions/services acts."""

from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async
from django.http import HttpRequest
from ninja import Query, Router

from compozy.api.response_schemas import (
    ChangesOut,
    CheckpointsOut,
    CommitOut,
    MergeOut,
    PruneOut,
    RewindOut,
    SessionEnvelope,
    WorktreesOut,
)
from compozy.api.schemas import (
    ChangesQuery,
    CheckpointIn,
    CommitIn,
    ForkIn,
    Ident,
    MergeIn,
    PruneIn,
    Ref,
    responses,
)
from compozy_base.config.loader import get_config
from sessions import services

router = Router(tags=["worktrees"])

WS = "/workspaces/{workspace}/sessions/{session_id}"


@router.get(WS + "/changes", response=responses({200: ChangesOut}), exclude_unset=True)
async def changes(request: HttpRequest, workspace: Ref, session_id: Ident,
                  filters: Query[ChangesQuery]) -> Any:
    """What the session changed since its base commit (untracked files count, ignored ones do not), or with
    `?turn=TURN_ID` in that one turn. Binary files are named, not inlined; patches are bounded (`patch_limit`)."""
    return await services.session_changes(session_id, workspace, filters.turn)


@router.get(WS + "/checkpoints", response=responses({200: CheckpointsOut}), exclude_unset=True)
async def checkpoints(request: HttpRequest, workspace: Ref, session_id: Ident) -> Any:
    return await sync_to_async(services.list_checkpoints, thread_sensitive=False)(session_id, workspace)


@router.post(WS + "/rewind", response=responses({200: RewindOut}), exclude_unset=True)
async def rewind(request: HttpRequest, workspace: Ref, session_id: Ident, payload: CheckpointIn) -> Any:
    """Files and conversation back to checkpoint N: 409 `session_busy` while a turn runs, 404
    `checkpoint_not_found`."""
    return await services.rewind_session(session_id, workspace, payload.checkpoint)


@router.post(WS + "/fork", response=responses({201: SessionEnvelope}), exclude_unset=True)
async def fork(request: HttpRequest, workspace: Ref, session_id: Ident,
               payload: ForkIn | None = None) -> tuple[int, dict[str, Any]]:
    checkpoint = payload.checkpoint if payload else None
    return 201, {"session": await services.fork_session(session_id, workspace, checkpoint)}


@router.post(WS + "/commit", response=responses({200: CommitOut}), exclude_unset=True)
async def commit(request: HttpRequest, workspace: Ref, session_id: Ident, payload: CommitIn | None = None) -> Any:
    return await services.commit_session(session_id, workspace, payload.message if payload else None)


@router.post(WS + "/merge", response=responses({200: MergeOut}), exclude_unset=True)
async def merge(request: HttpRequest, workspace: Ref, session_id: Ident, payload: MergeIn | None = None) -> Any:
    """The session's branch into `into` (default: the branch checked out when it began), never touching a dirty
    checkout: 409 `checkout_dirty`, or 409 `merge_conflict` with the files; either leaves everything as it was."""
    payload = payload or MergeIn()
    return await services.merge_session(session_id, workspace, payload.into, payload.squash)


@router.get("/worktrees", response=responses({200: WorktreesOut}), exclude_unset=True)
async def list_worktrees(request: HttpRequest) -> dict[str, Any]:
    def read() -> dict[str, Any]:
        rows = services.list_worktrees()
        # Each folder once: a task's retry lists the worktree it continues in as its own row too.
        sizes = {row["path"]: row["size_bytes"] for row in rows}
        return {"worktrees": rows, "size_bytes": sum(sizes.values()), "max_disk": get_config().worktrees_max_disk}

    return await sync_to_async(read, thread_sensitive=False)()


@router.post("/worktrees/prune", response=responses({200: PruneOut}), exclude_unset=True)
async def prune(request: HttpRequest, payload: PruneIn | None = None) -> Any:
    dry_run = payload.dry_run if payload else False
    return await sync_to_async(services.prune_worktrees, thread_sensitive=False)(dry_run)

"""Rewind and fork (docs/reference/worktrees.md §Rewind, §Fork): a worktree session's files and conversation taken
back to a checkpoint, in place or in a new session.

Rewind, step by step (one checkpoint or rewind at a time: the runtime's checkpoint lock):
1. refused while a turn runs (409 `session_busy`) or for an unknown checkpoint (404 `checkpoint_not_found`);
2. the state now is checkpointed first (reason `rewind`), so a rewind can itself be undone;
3. the journal names the restore, then the files go back to the checkpoint byte for byte (boot repair runs a
   restore a crash cut short to its end);
4. a `session_rewound` marker names the turns taken back: events stay append-only, those turns are marked, never
   deleted, and history shows them as rewound;
5. the conversation: a live agent gets a fresh ACP session and the transcript up to the checkpoint's turn replayed
   with the next prompt, as context recovery does (sessions/runtime/projection.py); a stopped session forgets its
   saved ACP session, so its reactivation does the same.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import TypedDict

from asgiref.sync import sync_to_async

from sessions.catalog import index as catalog
from sessions.core.enums import EventType, MarkerKind, SessionState
from sessions.core.errors import CompozyError, Conflict
from sessions.core.live import MarkerEvidence
from sessions.core.markers import marker_content
from sessions.core.record import SessionMeta, SessionRecord
from sessions.runtime.checkpointing import CheckpointDoc, take
from sessions.runtime.manager import get_manager
from sessions.runtime.projection import session_projection
from sessions.runtime.session import SessionRuntime
from sessions.runtime.start_path import StartFailed
from sessions.services.create import CreateBody, create_session
from sessions.services.lookup import get_session, scoped_meta
from sessions.services.payloads import SessionPayload
from sessions.services.worktrees import (
    CheckpointEntry,
    find_checkpoint,
    not_busy,
    off_loop,
    read_checkpoints,
    worktree_of,
)
from sessions.store import events as event_store
from sessions.store import folder
from sessions.store.ops import NewEvent
from sessions.worktree import changes, checkpoints, journal, layout

logger = logging.getLogger(__name__)


class Rewound(TypedDict):
    session: SessionPayload
    checkpoint: int
    turn_id: str
    before: CheckpointDoc  # the state before the rewind, itself a checkpoint: rewind to it to undo
    rewound_turns: list[str]


def _turns_after(session_id: str, sequence: int) -> list[str]:
    """Turns with events after `sequence`, in order: what a rewind to it takes back."""
    seen: list[str] = []
    for row in event_store.iter_events(folder.events_path(session_id), after=sequence):
        turn = row["turn_id"]
        if turn and turn not in seen and row["type"] in (EventType.USER_MESSAGE, EventType.SYNTHETIC_REENTRY):
            seen.append(turn)
    return seen


def _restore(session_id: str, worktree: Path, target: CheckpointEntry, before: CheckpointDoc) -> None:
    path = layout.journal_path(session_id)
    journal.begin(path, {"op": "restore", "session_id": session_id, "worktree": str(worktree),
                         "commit": target["commit"], "new": before["commit"]})
    checkpoints.restore(worktree, target["commit"], before["commit"], layout.scratch_index(session_id),
                        midway=lambda: journal.pause_point(path, "restore"))
    journal.end(path)


def _evidence(target: CheckpointEntry, before: CheckpointDoc, turns: list[str]) -> MarkerEvidence:
    return {"checkpoint": target["n"], "turn_id": target.get("turn_id", ""), "commit": target["commit"],
            "before_checkpoint": before["n"], "rewound_turns": turns}


async def _rewind_live(runtime: SessionRuntime, worktree: Path, target: CheckpointEntry) -> tuple[CheckpointDoc,
                                                                                                      list[str]]:
    async with runtime.checkpointer.lock:
        not_busy(runtime.id)  # again, under the lock: a prompt may have started while we looked the checkpoint up
        before = await runtime.checkpointer.record(worktree, "", "rewind")
        if before is None:
            raise CompozyError("the state before the rewind could not be checkpointed; nothing was changed",
                               code="checkpoint_failed", status=500)
        await asyncio.to_thread(_restore, runtime.id, worktree, target, before)
        base = str((runtime.rec.worktree or {}).get("base_commit") or "")
        if runtime.rec.worktree is not None and base:
            runtime.rec.worktree["changed_files"] = await asyncio.to_thread(changes.count, worktree, base,
                                                                            target["commit"])
        turns = await asyncio.to_thread(_turns_after, runtime.id, int(target["event_seq"]))
        runtime.marker(MarkerKind.SESSION_REWOUND, f"Rewound to checkpoint {target['n']}",
                       _evidence(target, before, turns), turn_id="")
        await runtime.recorder.flush()
        projection, _count = await asyncio.to_thread(session_projection, runtime.id, runtime.rec.forked_from,
                                                     folder.sessions_dir())
        try:
            await runtime.start_path.reopen(projection)
        except (StartFailed, CompozyError) as exc:
            raise CompozyError(f"the files were rewound, but the agent refused a fresh session: {exc}",
                               code="rewind_conversation_failed", status=502) from exc
    return before, turns


def _rewind_stopped(meta: SessionMeta, worktree: Path, target: CheckpointEntry) -> tuple[CheckpointDoc, list[str]]:
    """Blocking: the same steps with the store appended directly (no runtime writes it)."""
    session_id = meta["id"]
    base = str((meta.get("worktree") or {}).get("base_commit") or "")
    before = take(session_id, worktree, "", "rewind", base=base)
    log = event_store.EventLog(folder.events_path(session_id), meta["agent_name"])
    try:
        log.append([NewEvent(EventType.CHECKPOINT.value, "", dict(before))])
        journal.end(layout.journal_path(session_id))
        _restore(session_id, worktree, target, before)
        turns = _turns_after(session_id, int(target["event_seq"]))
        now = folder.isoformat(folder.utcnow())
        log.append([NewEvent(EventType.TRANSCRIPT_MARKER.value, "",
                             dict(marker_content(MarkerKind.SESSION_REWOUND, f"Rewound to checkpoint {target['n']}",
                                                 _evidence(target, before, turns), now)))])
    finally:
        log.close()
    # The agent's saved ACP session holds the turns taken back: forgotten, so reactivation opens a new one and
    # replays the transcript without them.
    rec = SessionRecord.from_meta(meta)
    rec.acp_session_id, rec.updated_at = "", now
    if rec.worktree is not None:
        rec.worktree["changed_files"] = changes.count(worktree, base, target["commit"]) if base else 0
    catalog.save_meta(rec)
    return before, turns


async def rewind_session(session_id: str, workspace_ref: str | None, n: int) -> Rewound:
    meta = await sync_to_async(scoped_meta)(session_id, workspace_ref)
    worktree = Path(worktree_of(meta)["path"])
    not_busy(session_id)
    target = await off_loop(find_checkpoint, session_id, n)
    runtime = get_manager().get(session_id)
    if runtime is not None:
        before, turns = await _rewind_live(runtime, worktree, target)
    elif meta["state"] == SessionState.STOPPED:
        before, turns = await off_loop(_rewind_stopped, meta, worktree, target)
    else:
        raise Conflict(f"session is {meta['state']}; rewind it once it is active or stopped", code="session_busy")
    return {"session": await sync_to_async(get_session)(session_id), "checkpoint": n,
            "turn_id": str(target.get("turn_id") or ""), "before": before, "rewound_turns": turns}


async def fork_session(session_id: str, workspace_ref: str | None, n: int | None) -> SessionPayload:
    """A new session with its own worktree from checkpoint `n` (default: the newest) and the conversation up to
    it, recording `forked_from`."""
    meta = await sync_to_async(scoped_meta)(session_id, workspace_ref)
    worktree_of(meta)
    if n is None:
        entries, _ = await off_loop(read_checkpoints, session_id)
        if not entries:
            raise Conflict("the session has no checkpoint yet: fork after its first turn", code="checkpoint_not_found",
                           status=404)
        target = entries[-1]
        n = int(target["n"])
    else:
        target = await off_loop(find_checkpoint, session_id, n)
    name = (meta.get("name") or "").strip()
    body: CreateBody = {"workspace": meta["workspace_id"], "agent_name": meta["agent_name"],
                        "provider": meta.get("provider") or None, "name": f"{name or session_id} (fork {n})"[:300],
                        "isolation": "worktree",
                        "fork": {"session_id": session_id, "checkpoint": n, "commit": target["commit"]}}
    if meta.get("model_explicit") and meta.get("model"):
        body["model"] = meta["model"]
    # The conversation follows from `forked_from`: the new session's start stages the original's, up to the
    # checkpoint, for its first prompt (sessions/runtime/start_path.py), and so does a reactivation after a restart.
    return await create_session(body)

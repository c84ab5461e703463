"""A checkpoint per turn for worktree sessions (docs/reference/worktrees.md §Checkpoints): when a turn ends, the
worktree's state becomes `refs/compozy/<id>/<n>` and a `checkpoint` event, before the session takes its next input.

The git work runs in a worker thread (a 10,000-file repository takes about 0.1 s, bench/); one checkpoint at a time
per session (`lock`, which a rewind holds too). A checkpoint that fails is a `system` event and a log line: the turn
stands, the next turn's checkpoint holds its changes too."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from sessions.core.enums import EventType
from sessions.core.errors import CompozyError
from sessions.store import events as event_store
from sessions.store import folder
from sessions.worktree import changes, checkpoints, journal, layout

if TYPE_CHECKING:
    from sessions.runtime.host import SessionCore

logger = logging.getLogger(__name__)


class CheckpointDoc(TypedDict):
    """A `checkpoint` event's content, and one entry of `GET …/checkpoints`."""

    n: int
    turn_id: str
    event_seq: int  # the last event of the session when it was taken
    commit: str
    ref: str
    reason: str  # turn (a turn ended), rewind (the state before a rewind) or final (a forced remove)
    created_at: str
    files_changed: int  # files that differ from the session's base commit at this checkpoint (the list's count)


def next_number(worktree: Path, session_id: str) -> int:
    numbers = [int(name.rsplit("/", 1)[-1]) for name in checkpoints.refs_of(worktree, session_id)
               if name.rsplit("/", 1)[-1].isdigit()]
    return max(numbers, default=0) + 1


def take(session_id: str, worktree: Path, turn_id: str, reason: str, *, final: bool = False,
         n: int | None = None, base: str = "") -> CheckpointDoc:
    """Blocking: the checkpoint itself (git), numbered `n` (default: after the session's last ref); the caller
    records the event and then ends the journal."""
    n = 0 if final else n or next_number(worktree, session_id)
    ref = layout.checkpoint_ref(session_id, layout.FINAL if final else n)
    seq = event_store.max_sequence(folder.events_path(session_id))
    commit = checkpoints.checkpoint(worktree, layout.checkpoint_index(session_id), ref,
                                    f"compozy checkpoint {session_id} #{n or 'final'} ({reason})",
                                    layout.journal_path(session_id))
    return {"n": n, "turn_id": turn_id, "event_seq": seq, "commit": commit, "ref": ref, "reason": reason,
            "created_at": folder.isoformat(folder.utcnow()) or "",
            "files_changed": changes.count(worktree, base, commit) if base else 0}


class Checkpointer:
    def __init__(self, session: SessionCore) -> None:
        self._session = session
        self.lock = asyncio.Lock()
        self._next: int | None = None  # the next number, once read from the refs (one git call fewer a turn)

    @property
    def worktree(self) -> Path | None:
        doc = self._session.rec.worktree
        return Path(str(doc["path"])) if doc and doc.get("path") else None

    async def after_turn(self, turn_id: str) -> CheckpointDoc | None:
        """The turn's checkpoint, recorded; None for a session without a worktree or when it failed (recorded)."""
        worktree = self.worktree
        if worktree is None:
            return None
        async with self.lock:
            return await self.record(worktree, turn_id, "turn")

    def _take(self, worktree: Path, turn_id: str, reason: str) -> CheckpointDoc:
        if self._next is None:
            self._next = next_number(worktree, self._session.rec.id)
        base = str((self._session.rec.worktree or {}).get("base_commit") or "")
        return take(self._session.rec.id, worktree, turn_id, reason, n=self._next, base=base)

    async def record(self, worktree: Path, turn_id: str, reason: str) -> CheckpointDoc | None:
        """Under `lock`: take, record the event, flush it, end the journal (boot repair keys on that order)."""
        session = self._session
        try:
            doc = await asyncio.to_thread(self._take, worktree, turn_id, reason)
        except (CompozyError, OSError) as exc:
            logger.warning("session %s: checkpoint after turn %s failed: %s", session.rec.id, turn_id, exc)
            session.record(EventType.SYSTEM, {"title": "checkpoint_failed", "text": str(exc)[:500]}, turn_id=turn_id)
            await asyncio.to_thread(journal.end, layout.journal_path(session.rec.id))
            return None
        self._next = doc["n"] + 1
        if session.rec.worktree is not None:
            # The session list's count (written with the record at the turn's end), without a git call per row.
            session.rec.worktree["changed_files"] = doc["files_changed"]
        session.record(EventType.CHECKPOINT, dict(doc), turn_id=turn_id)
        await session.recorder.flush()
        await asyncio.to_thread(journal.end, layout.journal_path(session.rec.id))
        return doc

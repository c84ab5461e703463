"""Worktree sessions' reads and writes that are not about the conversation (docs/reference/worktrees.md): changes,
checkpoints, commit, merge, the remove guard, `worktree list` and `prune`. Rewind and fork are in `rewind.py`.

Every git call runs in a worker thread (`asyncio.to_thread`), never on the loop."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import defaultdict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import ParamSpec, TypedDict, TypeVar, cast

from asgiref.sync import sync_to_async

from compozy_base.config.loader import get_config
from sessions.core.enums import EventType, SessionState
from sessions.core.errors import Conflict, InvalidRequest, NotFound
from sessions.core.markers import rewind_of
from sessions.core.record import SessionMeta, WorktreeDoc
from sessions.models import Workspace
from sessions.runtime.checkpointing import CheckpointDoc, take
from sessions.runtime.manager import get_manager
from sessions.services.lookup import scoped_meta
from sessions.store import events as event_store
from sessions.store import folder
from sessions.worktree import changes as changes_mod
from sessions.worktree import checkpoints, git, journal, layout, merging, trees

logger = logging.getLogger(__name__)
P = ParamSpec("P")
T = TypeVar("T")


class NotIsolated(InvalidRequest):
    status, code = 400, "session_not_isolated"


class SessionBusy(Conflict):
    status, code = 409, "session_busy"


class CheckpointNotFound(NotFound):
    status, code = 404, "checkpoint_not_found"


class WorktreeHasWork(Conflict):
    status, code = 409, "worktree_has_work"


# One git operation on a session's own indexes at a time from the API (a `changes` snapshot, a commit): git would
# refuse the second with `index.lock` held.
_LOCKS: defaultdict[str, threading.Lock] = defaultdict(threading.Lock)


def worktree_of(meta: SessionMeta) -> WorktreeDoc:
    doc = meta.get("worktree")
    if not doc:
        raise NotIsolated("this session has no worktree (isolation none)", data={"session_id": meta["id"]})
    if not Path(doc.get("path", "")).is_dir():
        raise Conflict("this session's worktree was removed", code="worktree_missing",
                       data={"path": doc.get("path", "")})
    return doc


class CheckpointEntry(CheckpointDoc, total=False):
    sequence: int  # the `checkpoint` event's own
    rewound: bool  # taken in a turn a later rewind took back


class CheckpointList(TypedDict):
    session_id: str
    checkpoints: list[CheckpointEntry]
    final: str | None  # refs/compozy/<id>/final's commit, after a forced remove


class TurnChanges(changes_mod.Changes, total=False):
    turn_id: str
    checkpoint: int


def read_checkpoints(session_id: str) -> tuple[list[CheckpointEntry], list[tuple[int, str, set[str]]]]:
    """The checkpoint events, oldest first, and the rewinds (their sequence, target commit, turns taken back)."""
    path = folder.events_path(session_id)
    found: list[CheckpointEntry] = []
    rewinds: list[tuple[int, str, set[str]]] = []
    for row in event_store.iter_events(path, types=[EventType.CHECKPOINT.value, EventType.TRANSCRIPT_MARKER.value]):
        if row["type"] == EventType.CHECKPOINT:
            entry = cast(CheckpointEntry, dict(row["content"]))
            entry["sequence"] = row["sequence"]
            found.append(entry)
        elif (rewind := rewind_of(row["type"], row["content"])) is not None:
            rewinds.append((row["sequence"], *rewind))
    taken_back = set().union(*(r[2] for r in rewinds)) if rewinds else set()
    for entry in found:
        entry["rewound"] = entry.get("turn_id", "") in taken_back and entry.get("reason") == "turn"
    return found, rewinds


def find_checkpoint(session_id: str, n: int) -> CheckpointEntry:
    entries, _ = read_checkpoints(session_id)
    for entry in entries:
        if entry.get("n") == n:
            return entry
    raise CheckpointNotFound(f"session {session_id} has no checkpoint {n}", data={"checkpoint": n})


def list_checkpoints(session_id: str, workspace_ref: str | None) -> CheckpointList:
    meta = scoped_meta(session_id, workspace_ref)
    doc = meta.get("worktree")
    if not doc:
        raise NotIsolated("this session has no worktree (isolation none)", data={"session_id": session_id})
    entries, _ = read_checkpoints(session_id)
    final = None
    repo = Path(doc.get("repo", ""))
    if repo.is_dir():
        final = checkpoints.refs_of(repo, session_id).get(layout.checkpoint_ref(session_id, layout.FINAL))
    return {"session_id": session_id, "checkpoints": entries, "final": final}


def _changes_now(session_id: str, doc: WorktreeDoc) -> changes_mod.Changes:
    worktree = Path(doc["path"])
    with _LOCKS[session_id]:
        tree = checkpoints.write_tree(worktree, folder.session_dir(session_id) / "changes.index")
    return changes_mod.compare(worktree, doc["base_commit"], tree)


def _changes_of_turn(session_id: str, doc: WorktreeDoc, turn_id: str) -> TurnChanges:
    """Between the state the turn began from (the previous checkpoint, or a rewind's target, or the base) and the
    turn's own checkpoint."""
    entries, rewinds = read_checkpoints(session_id)
    marks = sorted([(e["sequence"], "checkpoint", e) for e in entries] +
                   [(seq, "rewind", commit) for seq, commit, _ in rewinds], key=lambda item: item[0])
    before = doc["base_commit"]
    for _seq, kind, value in marks:
        if kind == "rewind":
            before = cast(str, value) or before
            continue
        entry = cast(CheckpointEntry, value)
        if entry.get("turn_id") == turn_id and entry.get("reason") == "turn":
            result = cast(TurnChanges, changes_mod.compare(Path(doc["path"]), before, entry["commit"]))
            result["turn_id"], result["checkpoint"] = turn_id, entry["n"]
            return result
        before = entry["commit"]
    raise NotFound(f"turn {turn_id} has no checkpoint in session {session_id}", code="turn_not_found",
                   data={"turn_id": turn_id})


def _session_changes(session_id: str, workspace_ref: str | None, turn_id: str | None = None) -> TurnChanges:
    """Blocking (git): what the session changed since its base, or in one turn."""
    doc = worktree_of(scoped_meta(session_id, workspace_ref))
    if turn_id:
        return _changes_of_turn(session_id, doc, turn_id)
    return cast(TurnChanges, _changes_now(session_id, doc))


async def session_changes(session_id: str, workspace_ref: str | None, turn_id: str | None = None) -> TurnChanges:
    return await off_loop(_session_changes, session_id, workspace_ref, turn_id)


def off_loop(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> Awaitable[T]:
    """A blocking service (git, and maybe a catalog read) in a worker thread of its own, not the thread every sync
    view shares: a checkpoint diff of a large repository would queue them all."""
    return sync_to_async(fn, thread_sensitive=False)(*args, **kwargs)


def not_busy(session_id: str) -> None:
    """409 session_busy while a turn runs (or the session is starting, stopping, or handing over)."""
    runtime = get_manager().get(session_id)
    if runtime is None:
        return
    if runtime.busy or runtime.turns.handover or runtime.stopping or runtime.rec.state != SessionState.ACTIVE:
        raise SessionBusy("a turn is running; wait for it to end or interrupt it", data={"session_id": session_id})


class Committed(TypedDict):
    committed: bool
    commit: str | None
    branch: str
    message: str


async def commit_session(session_id: str, workspace_ref: str | None, message: str | None) -> Committed:
    meta = await sync_to_async(scoped_meta)(session_id, workspace_ref)
    doc = worktree_of(meta)
    not_busy(session_id)
    text = (message or "").strip() or (meta.get("name") or "").strip() or f"compozy session {session_id}"

    def run() -> str | None:
        with _LOCKS[session_id]:
            return merging.commit_all(Path(doc["path"]), text)

    sha = await asyncio.to_thread(run)
    return {"committed": sha is not None, "commit": sha, "branch": doc["branch"], "message": text}


class MergeResult(TypedDict):
    merged: bool
    up_to_date: bool
    target: str
    commit: str
    previous: str
    squash: bool
    files: list[str]
    uncommitted: bool  # the worktree holds changes not committed on its branch: not part of the merge


async def merge_session(session_id: str, workspace_ref: str | None, into: str | None, squash: bool) -> MergeResult:
    meta = await sync_to_async(scoped_meta)(session_id, workspace_ref)
    doc = worktree_of(meta)
    target = (into or "").strip() or doc.get("base_branch") or ""
    if not target:
        raise InvalidRequest("the session began on a detached HEAD: name the branch to merge into (--into)",
                             code="merge_target_required")
    title = (meta.get("name") or "").strip() or session_id
    message = f"{title}\n\n(compozy session {session_id}, squashed)" if squash else \
        f"Merge {doc['branch']}: {title}"

    def run() -> MergeResult:
        dirty = trees.dirty(Path(doc["path"]))
        merged = merging.merge(Path(doc["repo"]), doc["branch"], target, squash=squash, message=message,
                               journal_file=layout.journal_path(session_id))
        return {"merged": not merged.up_to_date, "up_to_date": merged.up_to_date, "target": merged.target,
                "commit": merged.commit, "previous": merged.previous, "squash": squash, "files": merged.files,
                "uncommitted": dirty}

    return await asyncio.to_thread(run)


# ---- remove, list, prune --------------------------------------------------------------------------------------------


def _work_of(meta: SessionMeta) -> tuple[WorktreeDoc, Path, bool, int] | None:
    """The worktree, its folder, whether it is dirty and how many commits its base lacks; None without a folder."""
    doc = meta.get("worktree")
    if not doc:
        return None
    path = Path(doc.get("path", ""))
    if not path.is_dir():
        return None
    ahead, _ = trees.ahead_behind(doc)
    return doc, path, trees.dirty(path), ahead


def refuse_unsaved_work(session_id: str, meta: SessionMeta) -> None:
    """Blocking, and only a check: a worktree with uncommitted or unmerged work refuses a remove (409
    worktree_has_work); the caller removes it with `remove_worktree` once the agent is stopped."""
    found = _work_of(meta)
    if found is None:
        return
    doc, _path, dirty, ahead = found
    if dirty or ahead:
        raise WorktreeHasWork(
            f"the worktree has {'uncommitted changes' if dirty else ''}{' and ' if dirty and ahead else ''}"
            f"{f'{ahead} unmerged commit(s)' if ahead else ''}: commit and merge it, or remove with --force "
            f"(its state is then kept as {layout.checkpoint_ref(session_id, layout.FINAL)})",
            data={"dirty": dirty, "ahead": ahead, "branch": doc.get("branch", "")})


def remove_worktree(session_id: str, meta: SessionMeta) -> None:
    """Blocking, after the agent stopped. A worktree with uncommitted or unmerged work has its state kept first as
    `refs/compozy/<id>/final`. Then the worktree goes (the branch stays while it holds commits its base lacks;
    `compozy worktree prune` takes branch and refs later)."""
    found = _work_of(meta)
    if found is None:
        return
    doc, path, dirty, ahead = found
    if dirty or ahead:
        take(session_id, path, "", "final", final=True)
        journal.end(layout.journal_path(session_id))
    if any(other != session_id and (other_meta.get("worktree") or {}).get("path") == doc.get("path")
           for other, other_meta in _sessions_with_worktrees().items()):
        return  # a task's retry continues in this worktree: it stays with the attempt that works in it
    if dirty or ahead:
        trees.remove(doc)  # the branch stays with the work on it
    else:
        trees.discard(doc)


class WorktreeRow(TypedDict):
    session_id: str
    path: str
    branch: str
    repo: str
    state: str | None  # the session's; None for a worktree whose session is gone
    exists: bool
    size_bytes: int
    ahead: int
    behind: int
    dirty: bool


def _row(session_id: str, doc: WorktreeDoc, state: str | None) -> WorktreeRow:
    path = Path(doc.get("path", ""))
    exists = path.is_dir()
    ahead, behind = trees.ahead_behind(doc) if exists and Path(doc.get("repo", "")).is_dir() else (0, 0)
    return {"session_id": session_id, "path": str(path), "branch": doc.get("branch", ""),
            "repo": doc.get("repo", ""), "state": state, "exists": exists,
            "size_bytes": trees.size_on_disk(path) if exists else 0, "ahead": ahead, "behind": behind,
            "dirty": trees.dirty(path) if exists else False}


def _sessions_with_worktrees() -> dict[str, SessionMeta]:
    found: dict[str, SessionMeta] = {}
    for session_id in folder.list_session_dirs():
        try:
            meta = folder.read_meta(session_id)
        except ValueError:
            continue
        if meta is not None and meta.get("worktree"):
            found[session_id] = meta
    return found


def _orphan_doc(path: Path) -> WorktreeDoc:
    """A worktree folder no session names: its repository read from its `.git` file."""
    repo = ""
    try:
        pointer = (path / ".git").read_text().strip().removeprefix("gitdir:").strip()
        repo = str(Path(pointer).parent.parent.parent)  # <repo>/.git/worktrees/<name>
    except OSError:
        pass
    return {"path": str(path), "branch": layout.branch(path.name), "repo": repo, "base_commit": ""}


def list_worktrees() -> list[WorktreeRow]:
    """Blocking: every session's worktree, and worktree folders whose session is gone."""
    metas = _sessions_with_worktrees()
    rows = [_row(sid, cast(WorktreeDoc, meta["worktree"]), meta["state"]) for sid, meta in metas.items()]
    root = layout.worktrees_dir()
    if root.is_dir():
        for path in sorted(root.iterdir()):
            if path.is_dir() and path.name not in metas:
                rows.append(_row(path.name, _orphan_doc(path), None))
    return rows


def disk_used() -> int:
    root = layout.worktrees_dir()
    return trees.size_on_disk(root) if root.is_dir() else 0


class Pruned(TypedDict):
    kind: str  # worktree, ref or branch
    session_id: str
    name: str  # a path or a ref


class PruneResult(TypedDict):
    dry_run: bool
    pruned: list[Pruned]


def _repos(metas: dict[str, SessionMeta]) -> set[Path]:
    repos = {Path(str((m.get("worktree") or {}).get("repo", ""))) for m in metas.values()}
    for ws in Workspace.objects.all():
        if git.is_repository(Path(ws.root_dir)):
            repos.add(git.repo_root(Path(ws.root_dir)))
    return {r for r in repos if r.is_dir()}


def prune_worktrees(dry_run: bool) -> PruneResult:
    """Blocking: worktree folders, `refs/compozy/<id>/*` and `compozy/<id>` branches of sessions that no longer
    exist (removed sessions: their final checkpoint goes here, and only here)."""
    metas = _sessions_with_worktrees()
    pruned: list[Pruned] = []
    root = layout.worktrees_dir()
    if root.is_dir():
        for path in sorted(root.iterdir()):
            if path.is_dir() and path.name not in metas:
                pruned.append({"kind": "worktree", "session_id": path.name, "name": str(path)})
                if not dry_run:
                    trees.remove(_orphan_doc(path))
    live = set(folder.list_session_dirs())
    for repo in _repos(metas):
        listed = git.run(["for-each-ref", "--format=%(refname)", "refs/compozy/", "refs/heads/compozy/"], repo,
                         check=False).stdout.split()
        for ref in listed:
            parts = ref.split("/")
            session_id = parts[2] if ref.startswith("refs/compozy/") else parts[3] if len(parts) > 3 else ""
            if not session_id or session_id in live:
                continue
            kind = "ref" if ref.startswith("refs/compozy/") else "branch"
            pruned.append({"kind": kind, "session_id": session_id, "name": ref})
            if not dry_run:
                git.run(["update-ref", "-d", ref], repo, check=False)
        if not dry_run:
            git.run(["worktree", "prune"], repo, check=False)
    return {"dry_run": dry_run, "pruned": pruned}


def over_budget() -> tuple[int, int] | None:
    """(bytes used, `[worktrees] max_disk`) when the worktrees take more than it; None otherwise."""
    limit = get_config().worktrees_max_disk
    if not limit:
        return None
    used = disk_used()
    return (used, limit) if used > limit else None

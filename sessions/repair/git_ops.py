"""Boot repair of a git operation a crash cut short (sessions/worktree/journal.py): finished or rolled back.

Git itself keeps the object store sound (objects are written whole and renamed, refs through `<ref>.lock`): what a
kill -9 can leave is a stale lock, a checkpoint ref no event names, or a merge whose checkout moved and whose branch
did not. Each is settled here from the journal, before any runtime touches the session again."""

from __future__ import annotations

import logging
from pathlib import Path

from sessions.core.enums import EventType
from sessions.store import events as event_store
from sessions.store import folder
from sessions.worktree import checkpoints, git, journal, layout

logger = logging.getLogger(__name__)


def _clear_lock(path: Path) -> None:
    lock = path.with_name(path.name + ".lock")
    if lock.exists():
        lock.unlink()
        logger.info("git repair: removed the stale lock %s", lock)


def _checkpoint_recorded(session_id: str, ref: str) -> bool:
    rows = event_store.read_events(folder.events_path(session_id), limit=50, newest=True,
                                   types=[EventType.CHECKPOINT.value])
    return any(row["content"].get("ref") == ref for row in rows)


def _settle_checkpoint(session_id: str, entry: journal.Journal) -> str:
    """A checkpoint whose event was recorded stands (only the journal was left); otherwise its ref goes: the next
    turn's checkpoint takes the number again."""
    worktree, ref = Path(entry.get("worktree", "")), entry.get("ref", "")
    _clear_lock(Path(entry.get("index", "")))
    if not worktree.is_dir() or not ref:
        return "rolled_back"
    _clear_lock(git.common_dir(worktree) / ref)
    if _checkpoint_recorded(session_id, ref):
        return "finished"
    checkpoints.delete_ref(worktree, ref)
    return "rolled_back"


def _settle_merge(entry: journal.Journal) -> str:
    """The ref moved: done. The ref did not move and the checkout already holds the merge (its index is the new
    tree): the ref is moved, finishing it. Otherwise the checkout goes back to the old tree: rolled back (it was clean
    when the merge began, so nothing of the user's is lost)."""
    repo, ref, old, new = Path(entry.get("repo", "")), entry.get("target_ref", ""), entry.get("old", ""), \
        entry.get("new", "")
    if not repo.is_dir() or not ref:
        return "rolled_back"
    gitdir = Path(git.out(["rev-parse", "--absolute-git-dir"], repo))
    _clear_lock(gitdir / "index")
    _clear_lock(git.common_dir(repo) / ref)
    now = git.run(["rev-parse", "--verify", "-q", ref], repo, check=False).stdout.strip()
    if now == new:
        return "finished"
    if now != old or not entry.get("checked_out"):
        return "rolled_back"
    index_tree = git.out(["write-tree"], repo)
    if index_tree == git.out(["rev-parse", f"{new}^{{tree}}"], repo):
        git.run(["update-ref", ref, new, old], repo)
        return "finished"
    added = git.run(["diff-tree", "-r", "-z", "--name-only", "--diff-filter=A", old, new], repo).stdout
    git.run(["read-tree", "--reset", "-u", old], repo)
    for name in filter(None, added.split("\0")):
        (repo / name).unlink(missing_ok=True)
    return "rolled_back"


def _settle_restore(session_id: str, entry: journal.Journal) -> str:
    """A rewind cut short, its files maybe half restored: rolled back to the checkpoint taken just before it (its
    `session_rewound` marker, written after the restore, was never written, so the conversation was not rewound
    either). Files the rewind's target brought that the state before lacked are deleted."""
    worktree = Path(entry.get("worktree", ""))
    if not worktree.is_dir() or not entry.get("new"):
        return "rolled_back"
    gitdir = Path(git.out(["rev-parse", "--absolute-git-dir"], worktree))
    _clear_lock(gitdir / "index")
    checkpoints.restore(worktree, entry["new"], entry["commit"], layout.scratch_index(session_id))
    return "rolled_back"


def repair_git_ops(session_id: str) -> str | None:
    """None when no git operation was in flight; else `finished` or `rolled_back`, logged."""
    path = layout.journal_path(session_id)
    entry = journal.read(path)
    if entry is None:
        path.with_name(path.name + ".paused").unlink(missing_ok=True)
        return None
    op = entry.get("op")
    if git.git_path() is None:
        logger.warning("git repair of %s: git is not installed; the %s journal is kept", session_id, op)
        return None
    if op == "checkpoint":
        outcome = _settle_checkpoint(session_id, entry)
    elif op == "merge":
        outcome = _settle_merge(entry)
    elif op == "restore":
        outcome = _settle_restore(session_id, entry)
    else:
        outcome = "rolled_back"
    journal.end(path)
    path.with_name(path.name + ".paused").unlink(missing_ok=True)
    logger.info("git repair of %s: the interrupted %s was %s", session_id, op, outcome.replace("_", " "))
    return outcome

"""Checkpoints: the worktree's whole state (tracked and untracked, not ignored) as a commit under
`refs/compozy/<id>/<n>`, written through the session's own index so the branch, HEAD and the index the agent sees
never move. Rewind and fork read a checkpoint back into a worktree."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from sessions.worktree import git, journal


def write_tree(worktree: Path, index: Path) -> str:
    """The worktree's state as a tree, through `index` (seeded from the worktree's own index the first time, for its
    stat cache: only files that changed since are hashed again)."""
    if not index.exists():
        own = Path(git.out(["rev-parse", "--path-format=absolute", "--git-path", "index"], worktree))
        if own.exists():
            shutil.copyfile(own, index)
    env = {"GIT_INDEX_FILE": str(index)}
    git.run(["add", "-A", "--", "."], worktree, env=env)
    return git.out(["write-tree"], worktree, env=env)


def checkpoint(worktree: Path, index: Path, ref: str, message: str, journal_file: Path) -> str:
    """Steps: 1. the journal; 2. the snapshot; 3. a commit of it (parent: HEAD) by Compozy; 4. the ref, atomically
    (git writes `<ref>.lock` and renames it). The caller records the event, then ends the journal: a crash between
    leaves a ref without an event, which boot repair deletes (sessions/repair/git_ops.py)."""
    journal.begin(journal_file, {"op": "checkpoint", "ref": ref, "index": str(index), "worktree": str(worktree)})
    tree = write_tree(worktree, index)
    # `-p HEAD`: git resolves it, one process fewer than reading HEAD first (a checkpoint is paid at every turn's end).
    commit = git.out(["commit-tree", tree, "-p", "HEAD", "-m", message], worktree, env=git.IDENTITY)
    git.run(["update-ref", ref, commit], worktree)
    journal.pause_point(journal_file, "checkpoint")  # the crash test's moment: a ref no event names yet
    return commit


def delete_ref(repo: Path, ref: str) -> None:
    git.run(["update-ref", "-d", ref], repo, check=False)


def refs_of(repo: Path, session_id: str) -> dict[str, str]:
    """Every `refs/compozy/<id>/*` of a session: name → commit."""
    listed = git.run(["for-each-ref", "--format=%(refname) %(objectname)", f"refs/compozy/{session_id}/"], repo,
                     check=False).stdout
    return dict(line.split(" ", 1) for line in listed.splitlines() if " " in line)


def restore(worktree: Path, commit: str, current: str, scratch: Path,
            midway: Callable[[], None] | None = None) -> None:
    """The worktree's files made exactly `commit`'s tree (byte for byte, modes too), its branch and index reset to
    the commit's parent (HEAD when the checkpoint was taken). `current` is the checkpoint of the state before,
    taken by the caller: files it has and `commit` lacks are deleted."""
    parent = git.out(["rev-parse", f"{commit}^"], worktree)
    git.run(["reset", "-q", "--mixed", parent], worktree)
    env = {"GIT_INDEX_FILE": str(scratch)}
    try:
        git.run(["read-tree", commit], worktree, env=env)
        git.run(["checkout-index", "-a", "-f"], worktree, env=env)
    finally:
        scratch.unlink(missing_ok=True)
    if midway is not None:
        midway()  # the crash test's moment: the files written, the later ones not yet deleted
    added = git.run(["diff-tree", "-r", "-z", "--no-renames", "--name-only", "--diff-filter=A", commit, current],
                    worktree).stdout
    for name in filter(None, added.split("\0")):
        target = worktree / name
        if target.is_symlink() or target.is_file():
            target.unlink()

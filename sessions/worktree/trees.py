"""A session's worktree: made at create, measured for `compozy worktree list`, removed with its session."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from sessions.core.record import WorktreeDoc
from sessions.worktree import git, layout
from sessions.worktree.git import NotARepository


@dataclass(frozen=True)
class Placed:
    worktree: WorktreeDoc
    cwd: Path  # the agent's cwd: the workspace's place inside the worktree (a workspace may be a repo's subfolder)


def add(session_id: str, workspace: Path, *, start: str | None = None) -> Placed:
    """`git worktree add` on a new branch `compozy/<id>` from the workspace's HEAD (or `start`), under
    `$COMPOZY_HOME/worktrees/<id>`. NotARepository, GitUnavailable or GitFailed otherwise; nothing is left behind
    on failure."""
    repo = git.repo_root(workspace)
    head = git.run(["rev-parse", "--verify", "-q", "HEAD^{commit}"], repo, check=False).stdout.strip()
    if not head:
        raise NotARepository(f"{repo} has no commit yet; a worktree starts from one")
    base_branch = git.run(["symbolic-ref", "--short", "-q", "HEAD"], repo, check=False).stdout.strip()
    path = layout.worktree_path(session_id)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    branch = layout.branch(session_id)
    commit = start or head
    git.run(["worktree", "add", "-q", "-b", branch, str(path), commit], repo)
    doc: WorktreeDoc = {"path": str(path), "branch": branch, "base_commit": commit, "repo": str(repo),
                        "base_branch": base_branch}
    return Placed(doc, cwd_in(path, repo, workspace))


def writable_git_dir(doc: WorktreeDoc) -> Path | None:
    """The repository's shared git directory, which a worktree's commits write to (objects, refs, its own
    gitdir under `worktrees/`): the sandbox must leave it writable (sessions/runtime/confinement.py). Read from the
    worktree's `.git` file and its gitdir's `commondir`, two small reads and no subprocess (it is asked on the
    loop as an agent starts)."""
    try:
        pointer = (Path(doc["path"]) / ".git").read_text().strip()
        gitdir = Path(pointer.removeprefix("gitdir:").strip())
        common = (gitdir / "commondir").read_text().strip()
    except (OSError, KeyError):
        candidate = Path(doc.get("repo", "")) / ".git"
        return candidate if candidate.is_dir() else None
    found = Path(common)
    return (found if found.is_absolute() else gitdir / found).resolve()


def dirty(path: Path) -> bool:
    """Anything not committed on the branch: tracked changes or untracked files (ignored ones do not count)."""
    return bool(git.out(["status", "--porcelain", "--untracked-files=all"], path))


def ahead_behind(doc: WorktreeDoc) -> tuple[int, int]:
    """Commits on the session's branch not on its base branch, and the reverse (0, 0 without a base branch)."""
    base = doc.get("base_branch") or doc.get("base_commit") or ""
    if not base:
        return 0, 0
    result = git.run(["rev-list", "--left-right", "--count", f"{doc['branch']}...{base}"], Path(doc["repo"]),
                     check=False)
    try:
        ahead, behind = result.stdout.split()
        return int(ahead), int(behind)
    except ValueError:
        return 0, 0


def size_on_disk(path: Path) -> int:
    """Bytes the worktree's files take (its share of the object store is the repository's)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                continue
    return total


def remove(doc: WorktreeDoc) -> None:
    """The worktree's folder and git's note of it; the branch and the refs stay (`compozy worktree prune`)."""
    path, repo = Path(doc["path"]), Path(doc["repo"])
    if repo.is_dir():
        git.run(["worktree", "remove", "--force", "--force", str(path)], repo, check=False)
        git.run(["worktree", "prune"], repo, check=False)
    if path.exists():
        shutil.rmtree(path, ignore_errors=True)


def discard(doc: WorktreeDoc) -> None:
    """A worktree with nothing to keep: its folder, git's note of it, and its branch `compozy/<id>`."""
    remove(doc)
    git.run(["branch", "-D", doc.get("branch", "")], Path(doc["repo"]), check=False)


def cwd_in(worktree: Path, repo: Path, workspace: Path) -> Path:
    """The workspace's place inside a worktree of its repository (a workspace may be a repo's subfolder)."""
    return worktree / workspace.resolve().relative_to(repo.resolve())  # the repository itself: Path('.')

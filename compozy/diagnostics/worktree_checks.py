"""`compozy doctor`'s rows for worktree sessions (docs/reference/worktrees.md): git itself, and the disk the worktrees
take against `[worktrees] max_disk` (peers' worktrees ate 26 GB in two days unseen)."""

from __future__ import annotations

import time
from typing import Any

from compozy.diagnostics.items import item
from compozy_base.config.loader import get_config
from compozy_base.units import size as _size
from sessions.services.worktrees import disk_used
from sessions.worktree import git

# `git merge-tree --write-tree` (merging without a checkout) arrived in git 2.38.
MIN_GIT = (2, 38)


def _version(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


# `git --version` starts a process, and doctor runs on every dashboard page load (common.js asks for
# `/api/doctor?quiet=true`); git is rarely upgraded under a running daemon, so its answer is kept this long, per git
# path (git removed from PATH, or another git, is seen at once).
GIT_VERSION_SECONDS = 60.0
_git_seen: tuple[str, str | None, float] | None = None


def _git_version(clock: float | None = None) -> str | None:
    """`git --version`'s number (None: git missing or silent), read again once GIT_VERSION_SECONDS have passed."""
    global _git_seen
    path = git.git_path()
    if path is None:
        return None
    at = time.monotonic() if clock is None else clock
    seen = _git_seen
    if seen is not None and seen[0] == path and 0 <= at - seen[2] < GIT_VERSION_SECONDS:
        return seen[1]
    version = git.git_version()
    _git_seen = (path, version, at)
    return version


def check_git(clock: float | None = None) -> dict[str, Any]:
    """Worktree isolation needs git on the daemon's PATH, 2.38 or newer for merges."""
    version = _git_version(clock)
    if version is None:
        return item("git", "worktrees", "warn", "git missing",
                    "git is not on the daemon's PATH: worktree sessions are refused (git_unavailable)",
                    "apt-get install git")
    if _version(version) < MIN_GIT:
        return item("git", "worktrees", "warn", f"git {version} is old",
                    f"worktree sessions work, but `session merge` needs git {MIN_GIT[0]}.{MIN_GIT[1]} or newer",
                    evidence={"version": version})
    return item("git", "worktrees", "ok", "git", f"git {version}", evidence={"version": version})


def check_worktree_disk() -> dict[str, Any]:
    """The worktrees' disk use; a warning past `[worktrees] max_disk`."""
    limit = get_config().worktrees_max_disk
    used = disk_used()
    evidence = {"size_bytes": used, "max_disk": limit}
    if limit and used > limit:
        return item("worktrees_disk", "worktrees", "warn", "Worktrees over max_disk",
                    f"the worktrees take {_size(used)}, past [worktrees] max_disk ({_size(limit)}): merge or remove "
                    "finished sessions", "compozy worktree list", evidence=evidence)
    bound = f" of {_size(limit)}" if limit else " (no [worktrees] max_disk)"
    return item("worktrees_disk", "worktrees", "ok", "Worktrees disk", f"{_size(used)}{bound}", evidence=evidence)

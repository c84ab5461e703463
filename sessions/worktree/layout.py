"""Where worktree sessions keep things: names of branches and refs, paths under `$COMPOZY_HOME` and the session
folder (docs/reference/worktrees.md §Ref layout)."""

from __future__ import annotations

from pathlib import Path

from compozy_base.home import compozy_home
from sessions.store.folder import session_dir

REF_ROOT = "refs/compozy"
FINAL = "final"


def worktrees_dir(home: Path | None = None) -> Path:
    return (home or compozy_home()) / "worktrees"


def worktree_path(session_id: str, home: Path | None = None) -> Path:
    return worktrees_dir(home) / session_id


def branch(session_id: str) -> str:
    return f"compozy/{session_id}"


def checkpoint_ref(session_id: str, n: int | str) -> str:
    return f"{REF_ROOT}/{session_id}/{n}"


def checkpoint_index(session_id: str, home: Path | None = None) -> Path:
    """The session's own index for checkpoints: kept between turns so `git add -A` rehashes only what changed (the
    stat cache), never the index the agent sees."""
    return session_dir(session_id, home) / "checkpoint.index"


def scratch_index(session_id: str, home: Path | None = None) -> Path:
    """A throwaway index for reading a tree into (a rewind, a fork)."""
    return session_dir(session_id, home) / "restore.index"


def journal_path(session_id: str, home: Path | None = None) -> Path:
    return session_dir(session_id, home) / "git-journal.json"

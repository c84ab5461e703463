"""Where each scope's files live: `$COMPOZY_HOME/memory/` (global), `<workspace>/.compozy/memory/` (workspace),
`$COMPOZY_HOME/agents/<agent>/memory/` (agent). The journal and the index sit beside the global scope's files."""

from __future__ import annotations

from pathlib import Path

from compozy_base.home import compozy_home
from memory.entry import Scope


def memory_home(home: Path | None = None) -> Path:
    return (home or compozy_home()) / "memory"


def journal_path(home: Path | None = None) -> Path:
    return memory_home(home) / "journal.db"


def index_path(home: Path | None = None) -> Path:
    return memory_home(home) / "index.db"


def scope_dir(scope: Scope, *, workspace: Path | None = None, agent: str = "", home: Path | None = None) -> Path:
    if scope is Scope.GLOBAL:
        return memory_home(home)
    if scope is Scope.WORKSPACE:
        assert workspace is not None
        return workspace / ".compozy" / "memory"
    return (home or compozy_home()) / "agents" / agent / "memory"


def agents_root(home: Path | None = None) -> Path:
    return (home or compozy_home()) / "agents"


def ensure_dir(path: Path) -> None:
    """Owner-only folders: memory may hold what a person told an agent in confidence."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)

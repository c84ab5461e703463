"""Where Compozy keeps its state. Imported by settings and the CLI, so it must stay dependency-free."""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_HOME = "~/.compozy"


def compozy_home() -> Path:
    """`COMPOZY_HOME`, else `~/.compozy`; always absolute so child processes agree on it."""
    return Path(os.environ.get("COMPOZY_HOME") or DEFAULT_HOME).expanduser().resolve()


def sessions_dir(home: Path | None = None) -> Path:
    return (home or compozy_home()) / "sessions"


def crash_bundles_dir(home: Path | None = None) -> Path:
    return (home or compozy_home()) / "logs" / "crash-bundles"


def socket_path(home: Path | None = None) -> Path:
    return (home or compozy_home()) / "daemon.sock"


def daemon_record_path(home: Path | None = None) -> Path:
    return (home or compozy_home()) / "daemon.json"

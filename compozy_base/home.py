"""Where Compozy keeps its state. Imported by settings and the CLI, so it must stay dependency-free."""

from __future__ import annotations

import functools
import os
import stat
from pathlib import Path

DEFAULT_HOME = "~/.compozy"


@functools.lru_cache(maxsize=16)
def _absolute(configured: str, user_home: str | None) -> Path:
    """A configured folder made absolute, once per value (and per `HOME`, which `~` means): resolving stats every
    component, and these paths are built for every meta.json write, store read and stream."""
    return Path(configured).expanduser().resolve()


def compozy_home() -> Path:
    """`COMPOZY_HOME`, else `~/.compozy`; always absolute so child processes agree on it."""
    return _absolute(os.environ.get("COMPOZY_HOME") or DEFAULT_HOME, os.environ.get("HOME"))


def sessions_dir(home: Path | None = None) -> Path:
    """`COMPOZY_HOME/sessions`, or `COMPOZY_SESSIONS_DIR`: the folder the nodes of a cluster share, so any node
    reads any session's store and a survivor can continue a session whose owner died."""
    shared = os.environ.get("COMPOZY_SESSIONS_DIR")
    if shared and home is None:
        return _absolute(shared, os.environ.get("HOME"))
    return (home or compozy_home()) / "sessions"


def crash_bundles_dir(home: Path | None = None) -> Path:
    return (home or compozy_home()) / "logs" / "crash-bundles"


def socket_path(home: Path | None = None) -> Path:
    return (home or compozy_home()) / "daemon.sock"


def daemon_record_path(home: Path | None = None) -> Path:
    return (home or compozy_home()) / "daemon.json"


def boot_report_path(home: Path | None = None) -> Path:
    """The last boot repair's verdict (sessions/repair/boot.py writes it; `daemon start` and doctor read it)."""
    return (home or compozy_home()) / "boot-repair.json"


def token_path(home: Path | None = None) -> Path:
    return (home or compozy_home()) / "token"


def read_token(home: Path | None = None) -> str | None:
    """The daemon's API token, or None before the first start (the CLI then has nothing to prove)."""
    try:
        token = token_path(home).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return token or None


def config_path(home: Path | None = None) -> Path:
    return (home or compozy_home()) / "config.toml"


# Everything under COMPOZY_HOME is the owner's alone: transcripts, tokens, catalogs. The daemon runs under umask 077
# so every file it (or SQLite, for -wal/-shm) creates is born private; agents and hooks get the user's own umask
# back, because the files they write belong to the user's workspace.
PRIVATE_UMASK = 0o077
_user_umask: int | None = None


def enter_private_umask() -> None:
    global _user_umask
    previous = os.umask(PRIVATE_UMASK)
    if _user_umask is None:
        _user_umask = previous


def user_umask() -> int:
    """The umask the process had before `enter_private_umask` (for child processes); -1 = leave as is."""
    return -1 if _user_umask is None else _user_umask


def make_private(home: Path) -> None:
    """Home 0700; take group and other bits off everything already in it (owner bits, e.g. a hook script's x, stay).
    Symlinks are skipped: chmod would follow them out of the home."""
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(home, 0o700)
    for root, dirs, files in os.walk(home):
        for name in dirs + files:
            path = os.path.join(root, name)
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                continue
            if not stat.S_ISLNK(st.st_mode) and st.st_mode & 0o077:
                os.chmod(path, stat.S_IMODE(st.st_mode) & 0o700)

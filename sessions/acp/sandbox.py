"""Confinement for what an agent runs: the agent itself and the commands of its client terminals (docs/security.md).

On Linux with bubblewrap (`bwrap`, Debian's package) the command runs in a mount namespace of its own:
1. the whole filesystem read-only (`--ro-bind / /`), with a fresh /dev and /proc;
2. `$HOME` writable: an agent's own config, credentials and cache live there (Claude Code's `~/.claude`, Codex's
   `~/.codex`, npm's cache), and an agent that cannot write them does not work;
3. `$COMPOZY_HOME` hidden under an empty tmpfs: the API token, the socket, config.toml and its secrets, every
   session's folder and the catalog. With the token and the socket out of sight, an agent cannot drive the daemon
   that supervises it (it approved its own permission requests over the socket);
4. the session's workspace roots, `/tmp` and `[sandbox] writable` writable; `[sandbox] expose` (paths under
   `$COMPOZY_HOME`) shown again; `[sandbox] hidden` hidden too;
5. a pid namespace of its own, ended with the daemon (`--die-with-parent`: a daemon killed with SIGKILL takes its
   agents and their terminals with it, `setsid` children included, which a process-group kill misses), and the
   network cut when the agent's `network` is false.
Later binds win over earlier ones (bubblewrap applies them in order), which is what lets 3 hide a home that 2
showed and 4 show a workspace inside a hidden folder.

Without bubblewrap (`[sandbox] mode = "auto"`), or with `mode = "off"`, commands run unconfined: the weaker mode,
which `compozy doctor` warns about; the socket still refuses approvals from an agent's process tree
(compozy/api/peers.py), but the agent can read the token. `mode = "required"` refuses to start an agent then.
"""

from __future__ import annotations

import functools
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from compozy_base.config.sandbox import SandboxConfig, SandboxMode
from compozy_base.home import compozy_home

BWRAP = "bwrap"


class SandboxUnavailable(Exception):
    """`[sandbox] mode = "required"` and no bubblewrap that works here."""


@dataclass(frozen=True)
class Confinement:
    """What one command is confined to: its writable roots and whether it has the network."""

    roots: tuple[Path, ...]
    network: bool = True


@functools.cache
def bwrap_path() -> str | None:
    """bubblewrap's path, or None where it is not installed (or not Linux). Read once a process."""
    if os.uname().sysname != "Linux":
        return None
    return shutil.which(BWRAP)


def active(config: SandboxConfig) -> bool:
    """Whether commands are confined under this config; raises SandboxUnavailable when they must be and cannot."""
    if config.mode is SandboxMode.OFF:
        return False
    if bwrap_path() is None:
        if config.mode is SandboxMode.REQUIRED:
            raise SandboxUnavailable("[sandbox] mode is required, but bubblewrap (bwrap) is not installed: "
                                     "install it (Debian: apt-get install bubblewrap) or set mode = \"auto\"")
        return False
    return True


def _existing(paths: Sequence[Path]) -> list[Path]:
    seen: list[Path] = []
    for path in paths:
        if path.exists() and path not in seen:
            seen.append(path)
    return seen


def wrap(argv: Sequence[str], confinement: Confinement, config: SandboxConfig, *,
         home: Path | None = None) -> list[str]:
    """`argv` run under bubblewrap as the module docstring says, or unchanged when the sandbox is not active."""
    if not active(config):
        return list(argv)
    bwrap = bwrap_path()
    assert bwrap is not None
    compozy = (home or compozy_home()).resolve()
    user_home = Path(os.environ.get("HOME") or "/").resolve()
    args = [bwrap, "--die-with-parent", "--unshare-pid", "--ro-bind", "/", "/", "--dev", "/dev",
            "--proc", "/proc"]
    if not confinement.network:
        args.append("--unshare-net")
    for path in _existing([user_home, Path("/tmp"), *config.writable]):
        args += ["--bind", str(path), str(path)]
    for path in [compozy, *config.hidden]:
        if path.exists():
            args += ["--tmpfs", str(path)] if path.is_dir() else ["--ro-bind", "/dev/null", str(path)]
    for path in _existing([*config.expose, *(r.resolve() for r in confinement.roots)]):
        args += ["--bind", str(path), str(path)]
    # The command's own working directory is the caller's cwd (Popen's `cwd`): bubblewrap keeps it.
    return [*args, "--", *argv]


def confined_exit(code: int | None) -> int | None:
    """A confined command's exit as asyncio says it: bubblewrap exits 128+N for a child killed by signal N, where an
    unconfined child reads -N; a crash is classified by the signal (sessions/core/lifecycle.py), so it is read back.
    (An agent that exits with a code above 128 by itself reads as that signal: no agent we know of does.)"""
    if code is not None and 128 < code < 128 + 65:
        return -(code - 128)
    return code


def require_executable(name: str, path: str | None) -> None:
    """Raises FileNotFoundError, as a spawn would, for a command that cannot run: under bubblewrap a missing
    executable is bubblewrap's own exit 1 after the start, not the spawn's error (a `startup_failure`, not a crash).
    Blocking (stats PATH's directories): call it off the loop."""
    found = shutil.which(name, path=path) if "/" not in name else (name if os.access(name, os.X_OK) else None)
    if found is None or os.path.isdir(found):
        raise FileNotFoundError(2, "No such file or directory", name)

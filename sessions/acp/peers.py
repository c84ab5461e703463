"""Which agent a process belongs to: the question the control socket asks before it takes a decision.

A request that reaches the daemon from inside an agent's process tree is that agent's, never a person's: an agent
POSTed `approve` on its own pending permission over `$COMPOZY_HOME/daemon.sock` (audited `decision_source: person`).
The socket gives the peer's pid (SO_PEERCRED); the process is an agent's when its parent chain reaches a live
agent's process, or, for what left the chain (a `setsid` child reparented to init), when it carries an agent run's
mark (stragglers.py). Linux only (/proc); elsewhere nothing is found, and only the sandbox keeps agents off the socket.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from sessions.acp.stragglers import MARK_ENV, PROC

# A parent chain longer than this is not followed further (a real tree is a handful deep).
MAX_DEPTH = 64


def _parent(proc: Path, pid: int) -> int | None:
    try:
        for line in (proc / str(pid) / "status").read_text().splitlines():
            if line.startswith("PPid:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def _marked_session(proc: Path, pid: int) -> str | None:
    prefix = f"{MARK_ENV}=".encode()
    try:
        environ = (proc / str(pid) / "environ").read_bytes()
    except OSError:
        return None
    for entry in environ.split(b"\0"):
        if entry.startswith(prefix):
            return entry[len(prefix):].decode(errors="replace").split("@", 1)[0] or None
    return None


def agent_of(pid: int, agents: Mapping[int, str], *, proc: Path = PROC) -> str | None:
    """The session id whose agent `pid` belongs to (`agents`: each live agent's pid → its session id), or None.
    Blocking (/proc reads): call it off the loop."""
    current: int | None = pid
    for _ in range(MAX_DEPTH):
        if current is None or current <= 1:
            break
        if current in agents:
            return agents[current]
        current = _parent(proc, current)
    return _marked_session(proc, pid)

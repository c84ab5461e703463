"""What an agent started outside its process group. The group kill (driver.py, repair/stale.py) misses a child in
a session of its own (`setsid`, a daemonizing tool), which then ran on after the agent, changing the workspace
with nobody watching. Every agent runs with a mark in its environment, which its children inherit; when the agent
is gone, whatever still carries the mark is killed. Best effort: a child that clears its environment escapes,
and only a cgroup could hold it. Linux only (/proc); elsewhere nothing is found."""

from __future__ import annotations

import logging
import os
import signal
from pathlib import Path

logger = logging.getLogger(__name__)

MARK_ENV = "COMPOZY_AGENT_RUN"
# One client terminal of a run (sessions/runtime/terminals.py): what it started outside its group goes at release.
# Its commands carry the run's mark too, so the agent's exit, a stop and boot repair find them as the agent's.
TERMINAL_MARK_ENV = "COMPOZY_TERMINAL_RUN"
PROC = Path("/proc")


def mark(owner: str, started_at: str) -> str:
    """The mark of one agent run: who started it (a session id) and when. Both are in the session's liveness
    record, so boot repair finds a crashed daemon's stragglers from meta.json alone."""
    return f"{owner}@{started_at}"


def kill_marked(run_mark: str, *, proc: Path = PROC, name: str = MARK_ENV) -> int:
    """SIGKILL every process (of ours: others' environments are unreadable) that carries `run_mark` in the
    variable `name` (an agent run's, or one terminal's: `TERMINAL_MARK_ENV`); the count. Blocking (/proc reads):
    call it off the loop. A match is read again once a pidfd holds the process, so a pid reused in between is never
    signalled."""
    entry = f"{name}={run_mark}".encode()
    me = os.getpid()
    killed = 0
    try:
        pids = [int(name) for name in os.listdir(proc) if name.isdigit()]
    except OSError:
        return 0
    for pid in pids:
        if pid != me and _carries(proc, pid, entry):
            try:
                pidfd = os.pidfd_open(pid)
            except OSError:  # gone already, or no pidfd on this kernel
                continue
            try:
                if _carries(proc, pid, entry):  # still the same process: the pidfd now holds it
                    signal.pidfd_send_signal(pidfd, signal.SIGKILL)
                    killed += 1
            except OSError:  # it exited while we looked
                pass
            finally:
                os.close(pidfd)
    if killed:
        logger.warning("killed %d process(es) %s (%s) left running outside its process group", killed,
                       "an agent" if name == MARK_ENV else "a terminal", run_mark)
    return killed


def _carries(proc: Path, pid: int, entry: bytes) -> bool:
    try:
        with open(proc / str(pid) / "environ", "rb") as environ:
            return entry in environ.read().split(b"\0")
    except OSError:  # not ours, or gone
        return False

"""Process identity, the one answer to "is this pid still that process?" for agents, daemons and claims (Linux /proc).

A pid alone names nobody for long: pids are reused after a reboot or a long uptime, and signalling a stranger's
process group is far worse than leaving an orphan. A process is its pid plus its start: the kernel's start in clock
ticks after boot (exact; task runs record it), or a wall-clock time we wrote down when we started it (meta.json's
`subprocess_started_at`, daemon.json's `started_at`: a little after the kernel's, so matched within a tolerance).
"""

from __future__ import annotations

import os
from pathlib import Path

# Our wall-clock note of a start is taken after the fork returns; under load that is up to a few seconds late.
WALL_TOLERANCE_SECONDS = 5.0


def stat_fields(pid: int) -> list[str] | None:
    """/proc/<pid>/stat fields after the command name (state is [0], pgrp [2], starttime [19]); None if gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except (FileNotFoundError, ProcessLookupError, PermissionError, NotADirectoryError):
        return None
    return text.rsplit(")", 1)[1].split()


def exists(pid: int) -> bool:
    """The kernel still has a process by this pid (a zombie too, or one of another user's)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def alive(pid: int) -> bool:
    """The pid runs: it exists and is not a zombie (a zombie still answers kill(0))."""
    if not exists(pid):
        return False
    fields = stat_fields(pid)
    return fields is None or fields[0] not in ("Z", "X")


def start_ticks(pid: int) -> int | None:
    """The kernel's start of `pid`, in clock ticks after boot; None when it is gone."""
    fields = stat_fields(pid)
    return int(fields[19]) if fields else None


def started_at(pid: int) -> float | None:
    """The wall-clock start of `pid` (epoch seconds): boot time (/proc/stat btime) plus its start ticks."""
    ticks = start_ticks(pid)
    if ticks is None:
        return None
    try:
        boot_line = next(line for line in Path("/proc/stat").read_text().splitlines() if line.startswith("btime"))
        boot = int(boot_line.split()[1])
    except (OSError, StopIteration, ValueError):
        return None
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def same_process(pid: object, *, ticks: int | None = None, wall: float | None = None,
                 tolerance: float = WALL_TOLERANCE_SECONDS) -> bool:
    """`pid` is alive AND is the process that started then: exactly at `ticks`, or within `tolerance` of `wall`.
    Without a start to compare, nobody: a bare pid may be anyone's by now."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0 or not alive(pid):
        return False
    if ticks is not None:
        return start_ticks(pid) == ticks
    if wall is None:
        return False
    actual = started_at(pid)
    return actual is not None and abs(actual - wall) <= tolerance


def command_line(pid: int) -> bytes:
    """What `pid` runs, NUL-separated; empty when unreadable (gone, or not ours to read)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""

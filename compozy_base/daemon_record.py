"""`$COMPOZY_HOME/daemon.json`: who is running, where. Dependency-free: the CLI reads it too."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from compozy_base.home import daemon_record_path


def read_daemon_record(path: Path | None = None) -> dict[str, Any] | None:
    try:
        data = json.loads((path or daemon_record_path()).read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0); treat it as gone.
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            return handle.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def running_record(path: Path | None = None) -> dict[str, Any] | None:
    """The daemon record when its process is alive (and is not this process), else None."""
    record = read_daemon_record(path)
    if record and isinstance(record.get("pid"), int) and pid_alive(record["pid"]) and record["pid"] != os.getpid():
        return record
    return None


def daemon_running(path: Path | None = None) -> bool:
    return running_record(path) is not None


def process_started_at(pid: int) -> float | None:
    """Wall-clock start of `pid` (epoch seconds) from /proc, or None when unknown.

    /proc/<pid>/stat field 22 is the start in clock ticks after boot; /proc/stat's btime is the boot time.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii")
        boot_line = next(line for line in Path("/proc/stat").read_text().splitlines() if line.startswith("btime"))
        boot = int(boot_line.split()[1])
    except (OSError, StopIteration, ValueError):
        return None
    fields = stat.rsplit(")", 1)[-1].split()
    return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")


def is_same_process(pid: object, started_at: float | None, tolerance: float = 5.0) -> bool:
    """`pid` is alive AND is the process that started at `started_at`: PIDs are reused after a reboot or
    a long uptime, and killing a stranger's process group would be far worse than leaving an orphan."""
    if not isinstance(pid, int) or pid <= 0 or not pid_alive(pid) or started_at is None:
        return False
    actual = process_started_at(pid)
    return actual is not None and abs(actual - started_at) <= tolerance

"""`$COMPOZY_HOME/daemon.json`: who is running, where. Dependency-free: the CLI reads it too."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from compozy_site.home import daemon_record_path


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


def daemon_running(path: Path | None = None) -> bool:
    record = read_daemon_record(path)
    return bool(record and isinstance(record.get("pid"), int) and pid_alive(record["pid"])
                and record.get("pid") != os.getpid())

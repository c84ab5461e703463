"""`$COMPOZY_HOME/daemon.json`: who is running, where. Dependency-free: the CLI reads it too."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from compozy_base import process
from compozy_base.home import daemon_record_path


def read_daemon_record(path: Path | None = None) -> dict[str, Any] | None:
    try:
        data = json.loads((path or daemon_record_path()).read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def running_record(path: Path | None = None) -> dict[str, Any] | None:
    """The daemon record when its process is alive (and is not this process), else None."""
    record = read_daemon_record(path)
    if record and isinstance(record.get("pid"), int) and process.alive(record["pid"]) and record["pid"] != os.getpid():
        return record
    return None


def daemon_running(path: Path | None = None) -> bool:
    return running_record(path) is not None

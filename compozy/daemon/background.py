"""A daemon started and stopped from outside it: `compozy daemon start` (without `--foreground`) spawns the
foreground daemon (launcher.py) in a session of its own and waits until it answers, then for its boot repair;
`compozy daemon stop` signals it and waits until it is gone. Its log is `$COMPOZY_HOME/logs/daemon.log`."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sys
import time
from pathlib import Path
from typing import Any

from compozy.daemon.errors import DaemonAlreadyRunning, DaemonError
from compozy_base import process
from compozy_base.daemon_record import read_daemon_record, running_record
from compozy_base.home import boot_report_path, compozy_home

# Readiness budget of a detached start: migrations and imports took over 15 s on a loaded 2-core machine, and a
# start reported as failed must not leave a daemon behind, so the budget is generous and the child is stopped
# when it runs out.
START_TIMEOUT_SECONDS = 60.0
ABANDON_GRACE_SECONDS = 5.0


# daemon.log is the background daemon's stdout and stderr. It is never cut while a daemon writes it; a start finds it
# over this size and keeps it as daemon.log.1 (one generation), so a past flood cannot fill the disk start by start.
LOG_ROTATE_BYTES = 32 * 1024 * 1024


def rotate_log(path: Path, limit: int = LOG_ROTATE_BYTES) -> bool:
    try:
        if path.stat().st_size <= limit:
            return False
    except FileNotFoundError:
        return False
    os.replace(path, path.with_name(path.name + ".1"))
    return True


def start_detached(port: int | None = None, timeout: float = START_TIMEOUT_SECONDS) -> dict[str, Any]:
    """Spawn `compozy daemon start --foreground` in the background; wait until it answers. A child that is not
    ready in `timeout` is stopped (its whole process group) before the failure is reported."""
    import subprocess

    if (running := running_record()) is not None:
        raise DaemonAlreadyRunning(f"daemon already running (pid={running['pid']})")
    home = compozy_home()
    log_dir = home / "logs"
    log_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    args = [sys.executable, "-m", "compozy.cli", "daemon", "start", "--foreground"]
    if port is not None:
        args += ["--port", str(port)]
    rotate_log(log_dir / "daemon.log")
    started_at = 0  # where this start's lines begin in the log
    with contextlib.suppress(OSError):
        started_at = (log_dir / "daemon.log").stat().st_size
    log_fd = os.open(log_dir / "daemon.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.fchmod(log_fd, 0o600)
    with os.fdopen(log_fd, "ab") as log:
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                                env={**os.environ, "COMPOZY_HOME": str(home)})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        record = read_daemon_record()
        if record and record.get("pid") == proc.pid:
            return {**record, "boot_repair": _await_boot_repair(home, record, proc, deadline)}
        if proc.poll() is not None:
            # The reason is the child's own error line: "see the log" sent every newcomer to read it.
            reason = _start_error(log_dir / "daemon.log", started_at)
            raise DaemonError(f"daemon exited during start: {reason or f'code {proc.returncode}'} "
                              f"(log: {log_dir / 'daemon.log'})",
                              exit_code=proc.returncode if proc.returncode in (69, 78) else 69)
        time.sleep(0.1)
    record = read_daemon_record()
    if record and record.get("pid") == proc.pid:
        return record  # ready between the last look and the deadline
    _abandon(proc)
    raise DaemonError(f"daemon did not become ready in {timeout:g}s and was stopped (pid={proc.pid}); "
                      f"see {log_dir / 'daemon.log'}")


BOOT_REPAIR_WAIT_SECONDS = 30.0  # at most this long of `--timeout` for boot repair; the daemon serves meanwhile


def _await_boot_repair(home: Path, record: dict[str, Any], proc: Any, deadline: float) -> dict[str, Any]:
    """Wait, within the start's deadline, for this start's boot repair to finish: a script that reads a session
    right after `daemon start` sees it repaired (it returned ~1 s before the repair rows). A repair still running
    then is said, not waited for: the daemon is up and answers."""
    until = min(deadline, time.monotonic() + BOOT_REPAIR_WAIT_SECONDS)
    while True:
        try:
            report = json.loads(boot_report_path(home).read_text())
        except (OSError, ValueError):
            report = None
        if isinstance(report, dict) and report.get("run") == record.get("started_at"):
            return {"status": "done", **(report.get("counts") or {})}
        if time.monotonic() >= until or proc.poll() is not None:
            return {"status": "running"}
        time.sleep(0.05)


def _start_error(log: Path, offset: int) -> str:
    """The last `error: …` line a failed foreground start wrote to the log after `offset`, without its prefix."""
    try:
        with open(log, "rb") as file:
            file.seek(offset)
            lines = file.read(1024 * 1024).decode("utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    errors = [line.removeprefix("error: ") for line in lines if line.startswith("error: ")]
    return re.sub(r" \([a-z_]+\)$", "", errors[-1]) if errors else ""  # its code is the caller's to add


def _abandon(proc: Any) -> None:
    """Stop a daemon that missed its start deadline: SIGTERM (it removes its own record and socket), then
    SIGKILL of its process group (it was started in a new session, so agents it spawned go with it)."""
    import subprocess

    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(ABANDON_GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def stop_daemon(timeout: float = 15.0) -> dict[str, Any]:
    record = running_record()
    if record is None:
        raise DaemonError("daemon is not running")
    pid = record["pid"]
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.alive(pid):
        time.sleep(0.1)
    if process.alive(pid):
        raise DaemonError(f"daemon (pid={pid}) did not stop within {timeout:.0f}s")
    return {**record, "status": "stopped"}

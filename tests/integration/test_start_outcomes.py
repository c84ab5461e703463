"""What the start commands report, with real processes: `session new` returns a session that started even when
its staged first turn then crashed the agent (only a failed start exits non-zero), and `daemon start` never
leaves behind a daemon it reported as failed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT, Daemon, pid_alive, wait_gone

# ---- session new ------------------------------------------------------------------------------------------

def test_session_new_returns_a_started_session_whose_staged_turn_crashed(daemon: Daemon, workspace: Path) -> None:
    result = daemon.cli("session", "new", "--agent", "scripted", "--cwd", str(workspace), "--prompt", "crash",
                        "-o", "json")
    assert result.returncode == 0, result.stderr
    created = json.loads(result.stdout)
    assert created["activated_at"]
    stopped = daemon.wait_state(created["id"], {"stopped"})
    # The turn's outcome is on the record, where status and list show it; the start itself succeeded.
    assert stopped["stop_reason"] == "agent_crashed" and stopped["failure"]["kind"] == "process_exit"

    human = daemon.cli("session", "new", "--agent", "scripted", "--cwd", str(workspace), "--prompt", "crash")
    assert human.returncode == 0, human.stderr
    assert "startup failed" not in human.stdout + human.stderr


def test_session_new_still_exits_non_zero_when_the_start_failed(daemon: Daemon, workspace: Path) -> None:
    result = daemon.cli("session", "new", "--agent", "failnew", "--cwd", str(workspace), "--prompt", "hello",
                        "-o", "json")
    assert result.returncode == 1
    error = json.loads(result.stderr)
    assert error["code"] == "startup_failure" and error["session"]["activated_at"] is None
    assert error["session"]["failure"]["kind"] == "startup_failure"


# ---- daemon start -----------------------------------------------------------------------------------------

def compozy(home: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COMPOZY_HOME": str(home)}
    env.pop("COMPOZY_URL", None)
    return subprocess.run([sys.executable, "-m", "compozy_site.cli", *args], env=env, cwd=str(ROOT),
                          capture_output=True, text=True, timeout=timeout)


def test_a_daemon_start_that_times_out_leaves_no_daemon(tmp_path: Path) -> None:
    home = tmp_path / "home"
    # Python cannot even import the daemon in 0.2 s: readiness times out with the child alive.
    result = compozy(home, "daemon", "start", "--port", "0", "--timeout", "0.2", "-o", "json")
    assert result.returncode == 1
    error = json.loads(result.stderr)
    assert error["code"] == "daemon_start_failed" and "was stopped" in error["error"]
    pid = int(error["error"].split("pid=")[1].split(")")[0])
    assert wait_gone(pid, timeout=10)
    status = json.loads(compozy(home, "daemon", "status", "-o", "json").stdout)
    assert status["status"] == "stopped"


def test_a_detached_daemon_start_prints_the_record_of_a_running_daemon(tmp_path: Path) -> None:
    home = tmp_path / "home"
    started = compozy(home, "daemon", "start", "--port", "0", "-o", "json")
    assert started.returncode == 0, started.stderr
    record = json.loads(started.stdout)
    try:
        assert pid_alive(record["pid"]) and record["status"] == "running"
        assert json.loads(compozy(home, "status", "-o", "json").stdout)["daemon"]["pid"] == record["pid"]
    finally:
        stopped = compozy(home, "daemon", "stop", "-o", "json")
        assert stopped.returncode == 0, stopped.stderr
    assert wait_gone(record["pid"])

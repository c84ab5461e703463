"""What the start commands report, with real processes: `session new` returns a session that started even when
its staged first turn then crashed the agent (only a failed start exits non-zero), and `daemon start` never
leaves behind a daemon it reported as failed."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, Daemon, crash_mid_tool_call, pid_alive, wait_gone

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
    assert result.returncode == 70  # a failed start, like a failed turn
    error = json.loads(result.stderr)
    assert error["code"] == "startup_failure" and error["session"]["activated_at"] is None
    assert error["session"]["failure"]["kind"] == "startup_failure"


# ---- daemon start -----------------------------------------------------------------------------------------

def compozy(home: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COMPOZY_HOME": str(home)}
    env.pop("COMPOZY_URL", None)
    return subprocess.run([sys.executable, "-m", "compozy.cli", *args], env=env, cwd=str(ROOT),
                          capture_output=True, text=True, timeout=timeout)


def test_a_daemon_start_that_times_out_leaves_no_daemon(tmp_path: Path) -> None:
    home = tmp_path / "home"
    # Python cannot even import the daemon in 0.2 s: readiness times out with the child alive.
    result = compozy(home, "daemon", "start", "--port", "0", "--timeout", "0.2", "-o", "json")
    assert result.returncode == 69  # unavailable
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


@pytest.mark.timeout(300)
def test_a_daemon_start_after_a_crash_returns_once_boot_repair_has_repaired_the_session(tmp_path: Path,
                                                                                       workspace: Path) -> None:
    # It returned about 1 s before boot repair appended its rows: a script reading the session at once saw the
    # crashed turn still open.
    home = tmp_path / "home"
    session_id = crash_mid_tool_call(home, workspace)
    started = compozy(home, "daemon", "start", "--port", "0", "-o", "json")
    assert started.returncode == 0, started.stderr
    record = json.loads(started.stdout)
    try:
        boot = record["boot_repair"]
        assert (boot["status"], boot["repaired"], boot["transcripts_repaired"]) == ("done", 1, 1), boot
        # Read straight from the store, before anything else could repair it: the repair rows are there.
        with sqlite3.connect(home / "sessions" / session_id / "events.db") as db:
            last = [row[0] for row in db.execute("SELECT type FROM events ORDER BY sequence DESC LIMIT 2")]
        assert last == ["error", "tool_result"], last
    finally:
        assert compozy(home, "daemon", "stop", "-o", "json").returncode == 0
    assert wait_gone(record["pid"])


def test_a_daemon_that_cannot_start_says_why_in_one_line_with_its_exit_class(tmp_path: Path) -> None:
    # It exited 1 with "see …/daemon.log": the reason was only in the log.
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text('[limits]\nmax_concurrent_agents = "two"\n')
    bad = compozy(home, "daemon", "start", "--port", "0")
    assert bad.returncode == 78, bad.stderr
    assert bad.stderr.count("\n") == 1 and "limits.max_concurrent_agents: must be a positive integer" in bad.stderr
    (home / "config.toml").unlink()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = compozy(home, "daemon", "start", "--port", str(taken.getsockname()[1]))
    assert busy.returncode == 69, busy.stderr
    assert busy.stderr.count("\n") == 1 and "Address already in use" in busy.stderr
    assert json.loads(compozy(home, "daemon", "status", "-o", "json").stdout)["status"] == "stopped"


def test_a_command_group_named_alone_shows_its_help_and_exits_0(tmp_path: Path) -> None:
    for group in ([], ["session"], ["task"], ["agent", "heartbeat"]):
        shown = compozy(tmp_path, *group)
        assert shown.returncode == 0, (group, shown.returncode, shown.stderr)
        assert "Usage:" in shown.stdout and "Commands" in shown.stdout

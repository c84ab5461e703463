"""The foundation end to end through the `compozy` CLI against the real daemon: create, converse, stop,
inspect, remove; workspaces; the daemon's status; shutdown of a busy session by SIGTERM."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.conftest import ROOT, Daemon, pid_alive, start_daemon


def cli_error(result: Any, exit_code: int, code: str) -> None:
    assert result.returncode == exit_code, (result.stdout, result.stderr)
    assert result.stdout == ""
    [line] = result.stderr.strip().splitlines()
    assert json.loads(line)["code"] == code


def test_cli_session_new_converses_and_stops_user_canceled(daemon: Daemon, workspace: Path) -> None:
    created = daemon.cli_json("session", "new", "--agent", "general", "--cwd", str(workspace), "--prompt", "hello")
    assert created["state"] == "active"
    assert created["agent_name"] == "general" and created["provider"] == "demo"
    assert created["cwd"] == str(workspace.resolve())
    sid = created["id"]

    # The staged first prompt runs as the first turn; wait for its `done`.
    daemon.wait_event(sid, "done")
    events = daemon.cli_json("session", "events", sid)["events"]
    types = [e["type"] for e in events]
    assert [e["sequence"] for e in events] == sorted(e["sequence"] for e in events)
    first_user = types.index("user_message")
    replies = [i for i, t in enumerate(types) if t == "agent_message"]
    assert replies and first_user < replies[0] <= replies[-1] < types.index("done")
    assert events[first_user]["content"]["text"] == "hello"
    reply = "".join(events[i]["content"]["text"] for i in replies)
    assert "You said: hello" in reply
    turn = events[first_user]["turn_id"]
    assert all(events[i]["turn_id"] == turn for i in replies)

    stopped = daemon.cli_json("session", "stop", sid)
    assert stopped["state"] == "stopped"
    assert stopped["stop_reason"] == "user_canceled"
    assert stopped["failure"] is None
    final = daemon.cli_json("session", "events", sid, "--type", "session_stopped")["events"]
    assert len(final) == 1 and final[0]["content"]["stop_reason"] == "user_canceled"


def test_session_status_json_exposes_the_failure_object(daemon: Daemon, workspace: Path) -> None:
    failed = daemon.create(workspace, agent="missing")
    assert failed["state"] == "stopped"
    status = daemon.cli_json("session", "status", failed["id"])
    failure = status["session"]["failure"]
    assert failure["kind"] == "startup_failure"
    assert "/nonexistent/bin/agent-acp" in failure["summary"]
    assert Path(failure["crash_bundle_path"]).is_file()
    assert status["session"]["stop_reason"] == "error"
    assert status["session"]["badge"] == "failed"

    live = daemon.create(workspace)
    status = daemon.cli_json("session", "status", live["id"])
    assert status["session"]["state"] == "active" and status["session"]["failure"] is None
    assert status["session"]["badge"] == "idle" and status["session"]["prompt_state"] == "idle"


def test_status_json_reports_the_daemon_and_recent_failures(daemon: Daemon, workspace: Path) -> None:
    failed = daemon.create(workspace, agent="broken")
    live = daemon.create(workspace)
    status = daemon.cli_json("status")
    assert status["daemon"]["status"] == "running"
    assert status["daemon"]["pid"] == daemon.proc.pid
    assert status["daemon"]["home"] == str(daemon.home)
    assert status["sessions"]["active"] >= 1
    assert status["sessions"]["by_status"]["active"] == status["sessions"]["active"]
    assert status["sessions"]["total"] == sum(status["sessions"]["by_status"].values())
    recent = {f["session_id"]: f for f in status["health"]["failures"]["recent"]}
    assert recent[failed["id"]]["failure_kind"] == "startup_failure"
    assert recent[failed["id"]]["failure"]["cause"] == "handshake"
    assert recent[failed["id"]]["failure"] == daemon.session(failed["id"])["failure"]
    assert live["id"] not in recent
    assert status["health"]["failures"]["by_kind"]["startup_failure"] >= 1
    assert "handshake_failure" not in status["health"]["failures"]["by_kind"]

    human = daemon.cli("status")
    assert human.returncode == 0 and "Recent session failures" in human.stdout


def test_session_list_json_has_sessions_and_page(daemon: Daemon, workspace: Path) -> None:
    live = daemon.create(workspace, name="listed-live")
    gone = daemon.create(workspace, name="listed-stopped")
    daemon.cli_json("session", "stop", gone["id"])

    listing = daemon.cli_json("session", "list")
    assert set(listing) == {"sessions", "page"}
    ids = [s["id"] for s in listing["sessions"]]
    assert live["id"] in ids and gone["id"] not in ids  # active only by default
    assert all(s["state"] == "active" for s in listing["sessions"])
    assert listing["page"]["limit"] == 50 and listing["page"]["has_more"] is False

    everything = daemon.cli_json("session", "list", "--all")
    assert {live["id"], gone["id"]} <= {s["id"] for s in everything["sessions"]}
    assert everything["page"]["total"] >= 2

    first = daemon.cli_json("session", "list", "--all", "--limit", "1")
    assert len(first["sessions"]) == 1 and first["page"]["has_more"] is True
    second = daemon.cli_json("session", "list", "--all", "--limit", "1", "--cursor", first["page"]["next_cursor"])
    assert second["sessions"][0]["id"] != first["sessions"][0]["id"]

    stopped_only = daemon.cli_json("session", "list", "--state", "stopped", "--query", "listed-")
    assert [s["id"] for s in stopped_only["sessions"]] == [gone["id"]]


def test_session_remove_deletes_the_folder_and_later_reads_are_404(daemon: Daemon, workspace: Path) -> None:
    session = daemon.create(workspace)
    agent = daemon.meta(session["id"])["liveness"]["subprocess_pid"]
    folder = daemon.home / "sessions" / session["id"]
    assert folder.is_dir()

    removed = daemon.cli_json("session", "remove", session["id"])
    assert removed["id"] == session["id"]
    assert not folder.exists()
    assert not pid_alive(agent)  # a live session is stopped before its history goes
    assert daemon.http.get(f"/api/sessions/{session['id']}").status_code == 404
    cli_error(daemon.cli("session", "status", session["id"], "-o", "json"), 69, "session_not_found")
    listing = daemon.cli_json("session", "list", "--all")
    assert session["id"] not in {s["id"] for s in listing["sessions"]}


def test_workspace_add_list_info_remove(daemon: Daemon, tmp_path: Path) -> None:
    root = tmp_path / "project"
    root.mkdir()
    added = daemon.cli_json("workspace", "add", str(root), "--name", "project-x")
    assert added["root_dir"] == str(root.resolve()) and added["name"] == "project-x"
    assert added["id"].startswith("ws_")
    cli_error(daemon.cli("workspace", "add", str(root), "-o", "json"), 65, "workspace_path_taken")
    cli_error(daemon.cli("workspace", "add", "relative/dir", "-o", "json"), 65, "workspace_path_not_absolute")

    assert added["id"] in {w["id"] for w in daemon.cli_json("workspace", "list")}

    session = daemon.create(root)
    assert session["workspace_id"] == added["id"]
    info = daemon.cli_json("workspace", "info", "project-x")
    assert info["workspace"]["id"] == added["id"]
    assert [s["id"] for s in info["sessions"]] == [session["id"]]
    assert {"scripted", "general"} <= {a["name"] for a in info["agents"]}
    providers = {p["name"]: p for p in info["providers"]}
    assert providers["missing"]["available"] is False and providers["scripted"]["available"] is True
    assert daemon.cli_json("workspace", "info", added["id"])["workspace"]["name"] == "project-x"

    # Refused while a session is live; stopped sessions go with the workspace.
    cli_error(daemon.cli("workspace", "remove", "project-x", "-o", "json"), 65, "workspace_has_active_sessions")
    daemon.cli_json("session", "stop", session["id"])
    removed = daemon.cli_json("workspace", "remove", "project-x")
    assert removed["id"] == added["id"]
    assert added["id"] not in {w["id"] for w in daemon.cli_json("workspace", "list")}
    assert not (daemon.home / "sessions" / session["id"]).exists()
    cli_error(daemon.cli("workspace", "info", "project-x", "-o", "json"), 69, "workspace_not_found")
    assert root.is_dir()  # unregistering never touches the directory itself


def test_daemon_status_prints_the_record(daemon: Daemon) -> None:
    record = daemon.cli_json("daemon", "status")
    assert record["status"] == "running"
    assert record["pid"] == daemon.proc.pid
    assert record["socket"] == str(daemon.home / "daemon.sock")

    result = daemon.cli("daemon", "status")
    assert result.returncode == 0 and str(daemon.proc.pid) in result.stdout
    assert daemon.cli_json("daemon", "status", "--json") == daemon.cli_json("daemon", "status")

    # A second start is a conflict with one readable answer, not a failed start.
    again = daemon.cli("daemon", "start", "--json")
    assert again.returncode == 65, again.stderr
    assert json.loads(again.stderr)["code"] == "daemon_already_running"


def test_daemon_status_without_a_daemon_says_stopped(daemon: Daemon, tmp_path: Path) -> None:
    env = {**daemon.env, "COMPOZY_HOME": str(tmp_path / "empty-home")}
    result = subprocess.run([sys.executable, "-m", "compozy.cli", "daemon", "status", "-o", "json"],
                            env=env, cwd=str(ROOT), capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["status"] == "stopped"


# ---- a dedicated daemon: these kill it ----------------------------------------------------------

def read_store(events_db: Path) -> list[dict[str, Any]]:
    with sqlite3.connect(f"file:{events_db}?mode=ro", uri=True) as conn:
        rows = conn.execute("SELECT sequence, type, turn_id, content FROM events ORDER BY sequence").fetchall()
    return [{"sequence": s, "type": t, "turn_id": turn, "content": json.loads(c)} for s, t, turn, c in rows]


def test_sigterm_stops_a_busy_session_with_reason_shutdown(tmp_path: Path, workspace: Path) -> None:
    d = start_daemon(tmp_path / "home")
    try:
        busy = d.create(workspace)
        idle = d.create(workspace)
        assert d.prompt(busy["id"], "hang").status_code == 200
        d.wait_event(busy["id"], "agent_message", text="working")
        agents = [d.meta(s["id"])["liveness"]["subprocess_pid"] for s in (busy, idle)]
    finally:
        code = d.stop(signal.SIGTERM)
    assert code == 0, d.log()[-2000:]
    assert not (tmp_path / "home" / "daemon.json").exists()
    for agent in agents:
        assert not pid_alive(agent)
    for session in (busy, idle):
        meta = json.loads((tmp_path / "home" / "sessions" / session["id"] / "meta.json").read_text())
        assert meta["state"] == "stopped"
        assert meta["stop_reason"] == "shutdown" and meta["stop_detail"] == "daemon shutdown"
        events = read_store(tmp_path / "home" / "sessions" / session["id"] / "events.db")
        assert events[-1]["type"] == "session_stopped"
        assert events[-1]["content"]["stop_reason"] == "shutdown"
    busy_events = read_store(tmp_path / "home" / "sessions" / busy["id"] / "events.db")
    hang_turn = next(e["turn_id"] for e in busy_events if e["type"] == "user_message")
    # The stop path's session/cancel reached the agent, which ended the turn as `cancelled` before the stop.
    [done] = [e for e in busy_events if e["type"] == "done" and e["turn_id"] == hang_turn]
    assert done["content"]["stop_reason"] == "cancelled"
    assert done["sequence"] < busy_events[-1]["sequence"]


def test_daemon_started_on_port_zero_records_the_port_it_listens_on(daemon: Daemon) -> None:
    # The fixture's daemon runs with `--port 0`; `daemon.port` is what it really listens on (from /proc).
    assert daemon.http.get("/api/status").status_code == 200
    assert json.loads((daemon.home / "daemon.json").read_text())["port"] == daemon.port
    assert daemon.cli_json("daemon", "status")["port"] == daemon.port
    assert daemon.cli_json("status")["daemon"]["http_port"] == daemon.port

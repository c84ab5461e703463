"""Crash repair with the real daemon (docs/reference/sessions.md §13): a daemon SIGKILLed mid tool call leaves an
`active` session with a dangling tool call; `manage.py repair_sessions` plans the repair with the daemon
down; the restarted daemon's boot repair stops the session and terminalizes the turn; a second repair
appends nothing. Also: live sessions are refused, and `rebuild_catalog` restores a lost catalog."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from sessions.store.events import EventLog, max_sequence
from sessions.store.ops import NewEvent
from tests.conftest import ROOT, UNCONFINED, start_daemon, wait_for, wait_gone

INTERRUPTED_TOOL = "Tool call interrupted before a result was persisted."
INTERRUPTED_TURN = "Session interrupted before a terminal prompt event was persisted."
START_TIMEOUT = 120.0  # a daemon start imports the whole stack; slow when the machine is busy


def manage(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COMPOZY_HOME": str(home)}
    env.pop("COMPOZY_URL", None)
    return subprocess.run([sys.executable, "manage.py", *args], env=env, cwd=str(ROOT), capture_output=True,
                          text=True, timeout=120)


# Several daemon starts and CLI/manage.py processes each: generous on a loaded 2-core machine.
@pytest.mark.timeout(600)
def test_a_daemon_killed_mid_tool_call_is_repaired_at_restart(tmp_path: Path, workspace: Path) -> None:
    home = tmp_path / "home"
    first = start_daemon(home, timeout=START_TIMEOUT)
    try:
        session_id = first.create(workspace)["id"]
        accepted = first.prompt(session_id, "toolhang")
        assert accepted.status_code == 200, accepted.text
        turn_id = accepted.json()["prompt"]["turn_id"]
        tool_call = first.wait_event(session_id, "tool_call")
        call_id = tool_call["content"]["tool_call_id"]
        agent_pid = first.meta(session_id)["liveness"]["subprocess_pid"]
    finally:
        first.stop(signal.SIGKILL)
    # The agent loses its stdin with the daemon and exits on its own; only then is it a plain daemon crash.
    assert wait_gone(agent_pid, 60), "the orphaned agent did not exit"
    assert first.meta(session_id)["state"] == "active"
    events_db = home / "sessions" / session_id / "events.db"
    crash_sequence = max_sequence(events_db)
    assert crash_sequence >= tool_call["sequence"]

    planned = manage(home, "repair_sessions", "--all", "--dry-run", "--json")
    assert planned.returncode == 0, planned.stderr
    result = json.loads(planned.stdout)
    assert result["summary"]["total"] == 1 and result["summary"]["planned"] == 1
    entry = result["sessions"][0]
    assert (entry["session_id"], entry["status"], entry["stale_state"]) == (session_id, "planned", "active")
    repair = entry["repair"]
    assert repair["persisted"] is False
    assert [(a["code"], a["turn_id"], a.get("tool_call_id"), a["persisted"]) for a in repair["actions"]] == [
        ("append_interrupted_tool_result", turn_id, call_id, False),
        ("append_terminal_error", turn_id, None, False),
    ]
    assert f"[1/1] {session_id}  planned" in planned.stderr
    # Nothing persisted: meta.json is still the stale `active`, and no event was appended.
    assert first.meta(session_id)["state"] == "active"
    assert max_sequence(events_db) == crash_sequence

    second = start_daemon(home, timeout=START_TIMEOUT)
    try:
        wait_for(lambda: "and 1 transcript(s)" in second.log(), what="the boot transcript repair")
        rows = second.all_events(session_id)
        session = second.session(session_id)
        assert (session["state"], session["stop_reason"], session["failure"]["kind"], session["stop_detail"]) == (
            "stopped", "agent_crashed", "process_exit", "daemon crashed while session active")
        appended = [e for e in rows if e["sequence"] > crash_sequence]
        # Exactly the boot repair's two events follow the crash point.
        assert [(e["type"], e["turn_id"]) for e in appended] == [("tool_result", turn_id), ("error", turn_id)]
        assert appended[0]["content"]["tool_call_id"] == call_id
        assert appended[0]["content"]["tool_error"] == INTERRUPTED_TOOL
        assert appended[1]["content"]["error"] == INTERRUPTED_TURN
        assert appended[1]["content"]["stop_reason"] == "agent_crashed"
        assert appended[1]["content"]["failure"]["kind"] == "process_exit"

        again = second.cli("session", "repair", session_id, "-o", "json")
        assert again.returncode == 0, again.stderr
        report = json.loads(again.stdout)
        assert [i["code"] for i in report["issues"]] == ["terminal_event_already_exists"]
        assert report["issues"][0]["event_id"] == appended[1]["id"]
        assert report["actions"] == [] and report["persisted"] is False
        assert second.all_events(session_id) == rows

        human = second.cli("session", "repair", session_id, "--dry-run")
        assert human.returncode == 0, human.stderr
        assert f"session {session_id}: nothing to repair" in human.stdout
        assert "terminal_event_already_exists" in human.stdout
    finally:
        second.stop()


@pytest.mark.timeout(600)
def test_live_sessions_are_refused_and_rebuild_catalog_restores_the_list(tmp_path: Path, workspace: Path) -> None:
    home = tmp_path / "home"
    d = start_daemon(home, timeout=START_TIMEOUT)
    try:
        # A user stop of a turn the agent will not cancel closes that turn (issue 50): nothing to repair.
        stopped = d.create(workspace, agent="stubborn")["id"]
        assert d.prompt(stopped, "hang").status_code == 200
        d.wait_event(stopped, "agent_message", text="working")
        assert d.http.post(d.scoped(stopped, "/stop")).status_code == 204
        assert d.session(stopped)["stop_reason"] == "user_canceled"
        clean = d.http.post(d.scoped(stopped, "/repair"), params={"dry_run": "1"}).json()["repair"]
        assert [i["code"] for i in clean["issues"]] == ["terminal_event_already_exists"] and clean["actions"] == []
        # A daemon before that left such a turn open: its store, as it left it, for the rest of this test.
        log = EventLog(home / "sessions" / stopped / "events.db", "stubborn")
        log.append([NewEvent("user_message", "turn_00000000000000f1", {"text": "hang"})])
        log.close()
        live = d.create(workspace)["id"]
        workspace_id = d.session(live)["workspace_id"]

        response = d.http.post(d.scoped(live, "/repair"), params={"dry-run": "true"})
        assert response.status_code == 409, response.text
        assert response.json()["code"] == "session_not_stopped"
        refused = d.cli("session", "repair", live, "-o", "json")
        assert refused.returncode == 65 and json.loads(refused.stderr)["code"] == "session_not_stopped"
        outside = manage(home, "repair_sessions", live, "--json")
        assert outside.returncode == 1
        assert json.loads(outside.stdout)["sessions"][0]["status"] == "refused"
        assert d.meta(live)["state"] == "active"

        # Stop reasons other than agent_crashed/error need --force.
        count = len(d.all_events(stopped))
        unforced = d.http.post(d.scoped(stopped, "/repair"), params={"dry_run": "1"})
        assert unforced.status_code == 200, unforced.text
        assert [i["code"] for i in unforced.json()["repair"]["issues"]] == ["stop_reason_requires_force"]
        assert unforced.json()["repair"]["actions"] == []
        blocked = d.cli("session", "repair", stopped)
        assert blocked.returncode == 1 and "stop_reason_requires_force" in blocked.stdout
        assert blocked.stderr.strip() == "error: not repaired: stop_reason_requires_force (repair_blocked)"
        planned = d.http.post(d.scoped(stopped, "/repair"), params={"dry-run": "true", "force": "true"}).json()
        assert [a["code"] for a in planned["repair"]["actions"]] == ["append_terminal_error"]
        assert planned["repair"]["persisted"] is False
        assert len(d.all_events(stopped)) == count

        # A stopped session may be repaired by manage.py while the daemon runs.
        forced = manage(home, "repair_sessions", stopped, "--force")
        assert forced.returncode == 0, forced.stderr
        assert f"{stopped}  repaired  1 action(s): append_terminal_error" in forced.stdout
        last = d.all_events(stopped)[-1]
        assert (last["type"], last["content"]["stop_reason"]) == ("error", "user_canceled")
        assert len(d.all_events(stopped)) == count + 1

        elsewhere = d.http.post(f"/api/workspaces/ws_0123456789abcdef/sessions/{stopped}/repair")
        assert elsewhere.status_code == 404
    finally:
        d.stop()

    for name in ("catalog.sqlite3", "catalog.sqlite3-wal", "catalog.sqlite3-shm"):
        (home / name).unlink(missing_ok=True)
    rebuilt = manage(home, "rebuild_catalog", "--json")
    assert rebuilt.returncode == 0, rebuilt.stderr
    counts = json.loads(rebuilt.stdout)
    assert (counts["scanned"], counts["sessions_created"], counts["sessions_updated"], counts["workspaces_created"],
            counts["errors"]) == (2, 2, 0, 1, [])
    again = json.loads(manage(home, "rebuild_catalog", "--json").stdout)
    assert (again["sessions_created"], again["sessions_updated"], again["workspaces_created"]) == (0, 2, 0)
    # A folder whose meta.json is unreadable is an error to fix, and its row is no orphan: its folder is there.
    meta_path = home / "sessions" / stopped / "meta.json"
    good = meta_path.read_bytes()
    meta_path.write_text("{ not json")
    broken = manage(home, "rebuild_catalog", "--json")
    assert broken.returncode == 1, broken.stderr
    report = json.loads(broken.stdout)
    assert [e["session_id"] for e in report["errors"]] == [stopped] and report["orphan_rows"] == []
    meta_path.write_bytes(good)

    d = start_daemon(home, timeout=START_TIMEOUT)
    try:
        listed = d.http.get("/api/sessions", params={"all": "true"}).json()["sessions"]
        assert {s["id"]: s["state"] for s in listed} == {stopped: "stopped", live: "stopped"}
        assert {s["workspace_id"] for s in listed} == {workspace_id}
        workspaces = d.cli_json("workspace", "list")
        assert [w["id"] for w in workspaces] == [workspace_id]
        assert workspaces[0]["root_dir"] == str(workspace.resolve())
    finally:
        d.stop()


@pytest.mark.parametrize("setsid", [False, True], ids=["in-group", "setsid"])
def test_what_a_crashed_daemons_agent_started_does_not_outlive_boot_repair(tmp_path: Path, workspace: Path,
                                                                          setsid: bool) -> None:
    # The agent exits with its stdin when the daemon dies, but a tool it started (here `sleep 300`, in the agent's
    # process group) ran on, changing the workspace with nobody watching: repair only killed a leader still alive.
    # One in a session of its own (setsid) escaped the group kill too: it is found by the run's environment mark.
    # Unconfined: the mark's path (under the sandbox its pid namespace ends them with the daemon: test_sandbox.py).
    home = tmp_path / "home"
    first = start_daemon(home, UNCONFINED, timeout=START_TIMEOUT)
    try:
        session_id = first.create(workspace)["id"]
        assert first.prompt(session_id, "spawnchild setsid" if setsid else "spawnchild").status_code == 200
        reply = first.wait_event(session_id, "agent_message")["content"]["text"]
        child = int(reply.removeprefix("child pid "))
        agent_pid = first.meta(session_id)["liveness"]["subprocess_pid"]
        assert (os.getpgid(child) == agent_pid) is not setsid
    finally:
        first.stop(signal.SIGKILL)
    assert wait_gone(agent_pid, 60), "the orphaned agent did not exit"
    assert not wait_gone(child, 1), "the tool should still run until repair"
    second = start_daemon(home, timeout=START_TIMEOUT)
    try:
        assert second.wait_state(session_id, {"stopped"})["stop_reason"] == "agent_crashed"
        assert wait_gone(child, 30), "the crashed daemon's tool outlived boot repair"
    finally:
        second.stop()


# Eight manage.py processes, each a Django start (about 4 s on a quiet 2-core machine, 15 s on a loaded one).
@pytest.mark.timeout(300)
def test_the_repair_commands_follow_the_clis_command_line_rules(tmp_path: Path) -> None:
    # A bad command line printed argparse's usage block and exited 2 (1 with no arguments), and rebuild_catalog
    # knew only --json.
    home = tmp_path / "home"
    for args in (["repair_sessions"], ["repair_sessions", "--bogus", "-o", "json"], ["rebuild_catalog", "--all"]):
        refused = manage(home, *args)
        assert refused.returncode == 65, (args, refused.returncode, refused.stderr)
        assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
        if "json" in args:  # a script that asked for JSON gets its error as JSON, as from `compozy`
            assert json.loads(refused.stderr)["code"] == "usage_error"
    # A session that does not exist is "not found" (69), as `compozy` answers, not "needs a person" (1).
    unknown = manage(home, "repair_sessions", "sess_0123456789abcdef")
    assert unknown.returncode == 69 and "no such session: sess_0123456789abcdef" in unknown.stderr, unknown.stderr
    # Its summary says so too: it ended "1 need(s) a person" just above the "no such session" line.
    assert unknown.stdout.splitlines()[-1] == "1 session(s): 1 not_found; nothing needs a person", unknown.stdout
    rebuilt = manage(home, "rebuild_catalog", "-o", "json")
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert json.loads(rebuilt.stdout)["errors"] == []
    for command in ("repair_sessions", "rebuild_catalog"):
        helped = manage(home, command, "--help")
        assert helped.returncode == 0 and "examples:" in helped.stdout and "exit codes: 0" in helped.stdout

"""Every stop reason and failure kind the scripted agent can provoke, against the real daemon
(docs/reference/sessions.md
§7-§11): inactivity timeout with and without a cooperative agent, crash, unexpected clean exit,
user stop, daemon shutdown, broken handshake, missing executable and the wall-clock limit. Each failure
object must be the same in `session status`, `session list`, the raw SSE terminal frame and `compozy status`."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Daemon, chunk_count, markers, of_type, start_daemon, wait_for
from tests.sse import Frame, frames, open_stream

NO_TITLE = '[roles.auto_title]\nenabled = false\n'
# Shortened supervision (docs/reference/config.md §3); waits stay generous for a loaded machine.
SUPERVISION = (
    '[session.supervision]\nactivity_heartbeat_interval = "0.5s"\ninactivity_warning_after = "2s"\n'
    'inactivity_timeout = "4s"\ntimeout_cancel_grace = "1s"\nprogress_notify_interval = "0s"\n'
)
INACTIVITY_TIMEOUT = 4.0


def raw_frames(d: Daemon, session_id: str) -> list[Frame]:
    """The whole raw SSE stream of a stopped session; it closes itself after the terminal frame."""
    with open_stream(d.http, d.scoped(session_id, "/stream"), {"frames": "raw"}, last_event_id=0) as response:
        assert response.status_code == 200, response.read()
        return list(frames(response))


def assert_failure_everywhere(d: Daemon, session_id: str) -> dict[str, Any] | None:
    """The one failure object (§11): status, list JSON, the SSE terminal frame and `compozy status` agree."""
    status = d.cli_json("session", "status", session_id)["session"]
    failure = status["failure"]
    listed = d.cli_json("session", "list", "--all", "--query", session_id)["sessions"]
    assert [s["failure"] for s in listed if s["id"] == session_id] == [failure]
    stream = raw_frames(d, session_id)
    assert stream[-1].event == "session_stopped"
    assert stream[-1].data["failure"] == failure
    assert stream[-1].data["stop_reason"] == status["stop_reason"]
    recent = d.cli_json("status")["health"]["failures"]["recent"]
    mine = [f for f in recent if f["session_id"] == session_id]
    if failure is None:
        assert mine == []
    else:
        assert [f["failure"] for f in mine] == [failure]
        assert mine[0]["failure_kind"] == failure["kind"]
    return failure


def accepted_turn(d: Daemon, session_id: str, message: str) -> str:
    response = d.prompt(session_id, message)
    assert response.status_code == 200, response.text
    return str(response.json()["prompt"]["turn_id"])


# Daemons get a generous start budget: the suite shares two cores with other suites.
START_TIMEOUT = 120.0


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    d = start_daemon(tmp_path_factory.mktemp("home"), timeout=START_TIMEOUT)
    yield d
    d.stop()


@pytest.fixture(scope="module")
def supervised(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    d = start_daemon(tmp_path_factory.mktemp("supervised-home"), extra_config=SUPERVISION + NO_TITLE,
                     timeout=START_TIMEOUT)
    yield d
    d.stop()


# ---- runtime activity supervision ---------------------------------------------------------------------

def test_a_hang_deaf_to_cancel_warns_once_then_stops_with_reason_timeout(supervised: Daemon,
                                                                         workspace: Path) -> None:
    d = supervised
    sid = d.create(workspace, agent="stubborn")["id"]
    response = d.prompt(sid, "hang")
    assert response.status_code == 200, response.text
    turn_id = response.json()["prompt"]["turn_id"]
    stopped = d.wait_state(sid, {"stopped"}, timeout=90)

    assert stopped["stop_reason"] == "timeout"
    assert stopped["stop_detail"] == "activity_timeout"
    assert stopped["failure"]["kind"] == "timeout"
    events = d.all_events(sid)
    [final] = of_type(events, "session_stopped")
    assert events[-1] == final and final["content"]["stop_reason"] == "timeout"
    warnings = of_type(events, "runtime_warning")
    assert [w["content"]["text"].split(" (")[0] for w in warnings] == [
        "Runtime activity is stale", "Runtime activity timed out"], [w["content"]["text"] for w in warnings]
    assert all(w["turn_id"] == turn_id for w in warnings)
    timeouts = markers(events, "prompt_timeout")
    assert timeouts and all(m["turn_id"] == turn_id for m in timeouts)
    # Order (§7): the stale warning, the timeout marker, the timed-out warning, then the stop.
    assert warnings[0]["sequence"] < timeouts[0]["sequence"] < warnings[1]["sequence"] < final["sequence"]
    # The turn never ended on its own, so the stop path terminalized it with the failure.
    errors = [e for e in of_type(events, "error") if e["turn_id"] == turn_id]
    assert [e["content"]["failure"] for e in errors] == [stopped["failure"]]
    assert not [e for e in of_type(events, "done") if e["turn_id"] == turn_id]
    assert assert_failure_everywhere(d, sid) == stopped["failure"]


def test_a_hang_the_agent_cancels_ends_the_turn_cancelled_and_the_session_stays_active(supervised: Daemon,
                                                                                      workspace: Path) -> None:
    d = supervised
    sid = d.create(workspace, agent="scripted")["id"]
    response = d.prompt(sid, "hang")
    assert response.status_code == 200, response.text
    turn_id = response.json()["prompt"]["turn_id"]
    turn = d.turn_events(sid, turn_id, timeout=90)

    [done] = of_type(turn, "done")
    assert done["content"]["prompt_stop_reason"] == "cancelled"
    assert len(markers(turn, "prompt_timeout")) == 1
    assert [w["content"]["text"].split(" (")[0] for w in of_type(turn, "runtime_warning")] == [
        "Runtime activity is stale", "Runtime activity timed out"]
    session = d.session(sid)
    assert session["state"] == "active" and session["stop_reason"] is None and session["failure"] is None
    assert d.meta(sid)["liveness"]["stall_state"] == ""
    # The session still works.
    again = d.run_turn(sid, "still there?")
    assert of_type(again, "done")[0]["content"]["prompt_stop_reason"] == "end_turn"
    assert d.session(sid)["state"] == "active"


def test_an_agent_that_keeps_sending_updates_outlives_the_inactivity_timeout(supervised: Daemon,
                                                                             workspace: Path) -> None:
    d = supervised
    sid = d.create(workspace, agent="scripted")["id"]
    turn = d.run_turn(sid, "slow 12 0.5", timeout=90)

    [user] = of_type(turn, "user_message")
    [done] = of_type(turn, "done")
    assert done["content"]["prompt_stop_reason"] == "end_turn"
    assert chunk_count(e["content"]["text"] for e in of_type(turn, "agent_message")) == 12
    # The premise: the turn ran longer than inactivity_timeout.
    elapsed = datetime.fromisoformat(done["timestamp"]) - datetime.fromisoformat(user["timestamp"])
    assert elapsed.total_seconds() >= INACTIVITY_TIMEOUT
    events = d.all_events(sid)
    assert of_type(events, "runtime_warning") == []
    assert markers(events, "prompt_timeout") == []
    assert d.session(sid)["state"] == "active"


# ---- process exits and start failures (the shared module daemon) ----------------------------------------

def test_an_agent_killed_by_a_signal_mid_turn_is_agent_crashed_process_exit(daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace)["id"]
    assert daemon.prompt(sid, "crash").status_code == 200
    stopped = daemon.wait_state(sid, {"stopped"})
    assert stopped["stop_reason"] == "agent_crashed"
    assert stopped["failure"]["kind"] == "process_exit"
    assert "SIGKILL" in stopped["stop_detail"]
    assert Path(stopped["failure"]["crash_bundle_path"]).is_file()
    assert assert_failure_everywhere(daemon, sid) == stopped["failure"]


def test_an_agent_exiting_zero_mid_turn_is_error_process_exit(daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace)["id"]
    assert daemon.prompt(sid, "exit0").status_code == 200
    stopped = daemon.wait_state(sid, {"stopped"})
    assert stopped["stop_reason"] == "error"
    assert stopped["stop_detail"] == "process exited unexpectedly"
    assert stopped["failure"]["kind"] == "process_exit"
    assert assert_failure_everywhere(daemon, sid) == stopped["failure"]


def test_a_user_stop_mid_turn_is_user_canceled_and_the_cooperative_turn_ends_cancelled(daemon: Daemon,
                                                                                       workspace: Path) -> None:
    sid = daemon.create(workspace)["id"]
    turn_id = accepted_turn(daemon, sid, "hang")
    daemon.wait_event(sid, "agent_message", text="working")
    assert daemon.http.post(daemon.scoped(sid, "/stop")).status_code == 204
    stopped = daemon.session(sid)
    assert stopped["state"] == "stopped"
    assert stopped["stop_reason"] == "user_canceled" and stopped["failure"] is None
    events = daemon.all_events(sid)
    # The stop path's session/cancel reached the agent, which ended its own turn before the stop finished.
    [done] = [e for e in of_type(events, "done") if e["turn_id"] == turn_id]
    assert done["content"]["prompt_stop_reason"] == "cancelled"
    assert done["sequence"] < events[-1]["sequence"] and events[-1]["type"] == "session_stopped"
    assert assert_failure_everywhere(daemon, sid) is None


def test_a_user_stop_of_an_agent_deaf_to_cancel_marks_the_turn_interrupted(daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace, agent="stubborn")["id"]
    turn_id = accepted_turn(daemon, sid, "hang")
    daemon.wait_event(sid, "agent_message", text="working")
    assert daemon.http.post(daemon.scoped(sid, "/stop")).status_code == 204
    stopped = daemon.session(sid)
    assert stopped["stop_reason"] == "user_canceled" and stopped["failure"] is None
    events = daemon.all_events(sid)
    # The agent never answered, so the stop path closed the turn: ended cancelled by the stop, a marker, no failure.
    assert [m["turn_id"] for m in markers(events, "prompt_interrupted")] == [turn_id]
    ends = [e for e in events if e["turn_id"] == turn_id and e["type"] in ("done", "error")]
    assert [(e["type"], e["content"]["prompt_stop_reason"], e["content"]["session_stop_reason"]) for e in ends] == [
        ("done", "cancelled", "user_canceled")]
    assert assert_failure_everywhere(daemon, sid) is None


def tool_parts(d: Daemon, session_id: str) -> list[dict[str, Any]]:
    """Every tool call part of `session history -o json`, in order."""
    turns = d.cli_json("session", "history", session_id)
    return [part for turn in turns for message in turn["messages"] for part in message["parts"]
            if part["type"] == "dynamic-tool"]


@pytest.mark.parametrize("agent", ["scripted", "stubborn"], ids=["cooperative", "deaf-to-cancel"])
def test_a_stop_during_a_tool_call_closes_the_tool_call_with_the_turn(daemon: Daemon, workspace: Path,
                                                                      agent: str) -> None:
    """Issue 50, row 5: the tool call a stop cut is closed (`cancelled`) before the turn's end, once; history shows
    it once, and `session repair` finds nothing to repair (no `--force` asked)."""
    sid = daemon.create(workspace, agent=agent)["id"]
    turn_id = accepted_turn(daemon, sid, "toolhang")
    call_id = daemon.wait_event(sid, "tool_call")["content"]["tool_call_id"]
    assert daemon.http.post(daemon.scoped(sid, "/stop")).status_code == 204
    turn = [e for e in daemon.all_events(sid) if e["turn_id"] == turn_id]
    results = of_type(turn, "tool_result")
    assert [(r["content"]["tool_call_id"], r["content"]["status"]) for r in results] == [(call_id, "cancelled")]
    [end] = [e for e in turn if e["type"] in ("done", "error")]
    assert end["type"] == "done" and end["content"]["prompt_stop_reason"] == "cancelled"
    assert results[0]["sequence"] < end["sequence"]

    [part] = tool_parts(daemon, sid)
    assert (part["toolCallId"], part["status"], part["state"]) == (call_id, "cancelled", "output-error")
    human = daemon.cli("session", "history", sid)
    assert human.returncode == 0 and "in_progress" not in human.stdout, human.stdout

    repair = daemon.cli_json("session", "repair", sid)
    assert [i["code"] for i in repair["issues"] if i["severity"] == "error"] == [], repair
    assert repair["actions"] == [] and repair["persisted"] is False


def test_an_agent_killed_while_idle_is_agent_crashed_process_exit(daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace)["id"]
    os.kill(daemon.meta(sid)["liveness"]["subprocess_pid"], signal.SIGKILL)
    stopped = daemon.wait_state(sid, {"stopped"})
    assert stopped["stop_reason"] == "agent_crashed"
    assert stopped["failure"]["kind"] == "process_exit" and "SIGKILL" in stopped["failure"]["summary"]
    assert assert_failure_everywhere(daemon, sid) == stopped["failure"]


def test_an_agent_exiting_zero_while_idle_is_completed_without_a_failure(daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace)["id"]
    turn = daemon.run_turn(sid, "exitidle 0.5")
    assert of_type(turn, "done")[0]["content"]["prompt_stop_reason"] == "end_turn"
    stopped = daemon.wait_state(sid, {"stopped"})
    assert stopped["stop_reason"] == "completed" and stopped["failure"] is None
    assert assert_failure_everywhere(daemon, sid) is None


# One limit proves the wiring (the stop's detail, its reason, the session_stopped event); every limit's mapping is
# tests/unit/test_lifecycle.py's.
@pytest.mark.parametrize("limit", ["max_iterations"])
def test_a_user_stop_whose_detail_names_a_limit_is_classified_by_that_limit(daemon: Daemon, workspace: Path,
                                                                            limit: str) -> None:
    sid = daemon.create(workspace)["id"]
    detail = f"{limit}: the agent went on too long"
    assert daemon.http.post(daemon.scoped(sid, "/stop"), json={"detail": detail}).status_code == 204
    stopped = daemon.session(sid)
    assert (stopped["stop_reason"], stopped["stop_detail"], stopped["failure"]) == (limit, detail, None)
    [final] = of_type(daemon.all_events(sid), "session_stopped")
    assert final["content"]["stop_reason"] == limit


def test_a_prompt_the_agent_refuses_is_a_prompt_failure_and_the_session_lives_on(daemon: Daemon,
                                                                                 workspace: Path) -> None:
    sid = daemon.create(workspace)["id"]
    turn = daemon.run_turn(sid, "error")
    [error] = of_type(turn, "error")
    assert error["content"]["failure"]["kind"] == "prompt_failure"
    assert "session/prompt" in error["content"]["failure"]["summary"]
    session = daemon.session(sid)
    # Visible where users look: on the session, not only in an event; the session still takes prompts.
    assert session["state"] == "active" and session["failure"]["kind"] == "prompt_failure"
    assert session["attachable"] is True and session["badge"] == "idle"
    assert of_type(daemon.run_turn(sid, "hello again"), "done")
    # The turn's end is persisted just after its `done` event is committed.
    wait_for(lambda: daemon.session(sid)["failure"] is None, 10, "a turn that succeeds to clear the turn's failure")


def test_an_agent_that_needs_authentication_shows_waiting_for_auth_and_the_cli_exits_non_zero(
        daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace)["id"]
    sent = daemon.cli("session", "prompt", sid, "autherr")
    assert sent.returncode != 0 and "Authentication required" in sent.stderr, (sent.stdout, sent.stderr)
    # The way out, exactly: the test config's scripted provider names no key variable, so its login is asked for.
    assert "`compozy provider test scripted`" in sent.stderr and f"`compozy session resume {sid}`" in sent.stderr, \
        sent.stderr
    session = daemon.session(sid)
    assert session["failure"]["kind"] == "provider_auth_failure" and session["badge"] == "waiting-for-auth"
    assert session["attachable"] is False
    listed = {s["id"]: s for s in daemon.http.get("/api/sessions").json()["sessions"]}
    assert listed[sid]["badge"] == "waiting-for-auth"
    status = daemon.cli_json("session", "status", sid)
    assert status["session"]["failure"]["kind"] == "provider_auth_failure"
    as_json = daemon.cli("session", "prompt", sid, "autherr", "-o", "json")
    assert as_json.returncode != 0, "scripts see the failure in the exit code too"


def test_a_turn_that_ends_with_no_output_is_a_prompt_failure(daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace)["id"]
    turn = daemon.run_turn(sid, "empty")
    [error] = of_type(turn, "error")
    assert error["content"]["failure"]["kind"] == "prompt_failure" and "without any output" in error["content"]["error"]
    assert not of_type(turn, "done")
    assert daemon.session(sid)["failure"]["kind"] == "prompt_failure"
    sent = daemon.cli("session", "prompt", sid, "empty")
    assert sent.returncode != 0 and "without any output" in sent.stderr


def test_a_prompt_failure_keeps_the_reason_the_agent_gave(daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace)["id"]
    [error] = of_type(daemon.run_turn(sid, "error"), "error")
    assert "scripted prompt failure" in error["content"]["failure"]["summary"]


@pytest.mark.parametrize(("agent", "cause", "needle"), [
    ("broken", "handshake", "initialize"),
    ("missing", None, "/nonexistent/bin/agent-acp"),
])
def test_a_failed_start_is_error_with_its_failure_kind(daemon: Daemon, workspace: Path, agent: str,
                                                       cause: str | None, needle: str) -> None:
    stopped = daemon.create(workspace, agent=agent)
    assert stopped["state"] == "stopped"
    assert stopped["stop_reason"] == "error"
    assert stopped["failure"]["kind"] == "startup_failure"  # the seed's kind for every failed start
    assert stopped["failure"].get("cause") == cause
    assert needle in stopped["failure"]["summary"]
    assert Path(stopped["failure"]["crash_bundle_path"]).is_file()
    assert assert_failure_everywhere(daemon, stopped["id"]) == stopped["failure"]


# ---- dedicated daemons --------------------------------------------------------------------------------

def test_daemon_shutdown_stops_a_busy_session_with_reason_shutdown(tmp_path: Path, workspace: Path) -> None:
    home = tmp_path / "home"
    d = start_daemon(home, extra_config=NO_TITLE, timeout=START_TIMEOUT)
    try:
        sid = d.create(workspace)["id"]
        turn_id = accepted_turn(d, sid, "hang")
        d.wait_event(sid, "agent_message", text="working")
    finally:
        assert d.stop(signal.SIGTERM) == 0, d.log()[-2000:]
    again = start_daemon(home, timeout=START_TIMEOUT)
    try:
        stopped = again.session(sid)
        assert stopped["state"] == "stopped"
        assert (stopped["stop_reason"], stopped["stop_detail"]) == ("shutdown", "daemon shutdown")
        assert stopped["failure"] is None
        events = again.all_events(sid)
        [done] = [e for e in of_type(events, "done") if e["turn_id"] == turn_id]
        assert done["content"]["prompt_stop_reason"] == "cancelled"
        assert events[-1]["type"] == "session_stopped" and events[-1]["content"]["stop_reason"] == "shutdown"
        assert assert_failure_everywhere(again, sid) is None
    finally:
        again.stop()


def test_the_wall_clock_limit_stops_the_session_with_reason_timeout(tmp_path: Path, workspace: Path) -> None:
    d = start_daemon(tmp_path / "home", extra_config='[session.limits]\ntimeout = "3s"\n' + NO_TITLE,
                     timeout=START_TIMEOUT)
    try:
        sid = d.create(workspace)["id"]
        stopped = d.wait_state(sid, {"stopped"}, timeout=60)
        assert stopped["stop_reason"] == "timeout"
        assert "session.limits.timeout" in stopped["stop_detail"]
        assert stopped["failure"]["kind"] == "timeout"
        assert assert_failure_everywhere(d, sid) == stopped["failure"]
    finally:
        d.stop()

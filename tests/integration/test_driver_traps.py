"""The ACP driver's traps (sessions/acp/driver.py), each pinned against the real daemon and a real agent:
process groups, environment, stderr draining, update order, raw unknown updates, deaths mid-turn and
failed starts. The agent here is the scripted agent on the ACP SDK (tests/agents/sdk_agent.py): these traps
were found against SDK agents (their stdio transport, their exit on EOF), so that is what they are pinned on."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import SDK_AGENT, UNCONFINED, Daemon, pid_alive, start_daemon, wait_gone

CUSTOM_VAR = "COMPOZY_TEST_DAEMON_ONLY"
CUSTOM_VALUE = "from-the-daemon-env"


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """This module's daemon carries an extra variable the agents must inherit; its providers run the SDK agent."""
    # Unconfined: these tests read the agent's own pids on the host (tests/conftest.py UNCONFINED).
    d = start_daemon(tmp_path_factory.mktemp("home"), UNCONFINED, env_extra={CUSTOM_VAR: CUSTOM_VALUE},
                     agent=SDK_AGENT)
    yield d
    d.stop()


def texts(events: list[dict[str, Any]], type_: str = "agent_message") -> list[str]:
    return [e["content"].get("text", "") for e in events if e["type"] == type_]


def session_stopped_event(daemon: Daemon, session_id: str) -> dict[str, Any]:
    rows = [e for e in daemon.all_events(session_id) if e["type"] == "session_stopped"]
    assert len(rows) == 1, [e["type"] for e in daemon.all_events(session_id)]
    return rows[0]


def assert_crashed(daemon: Daemon, session_id: str, reason: str = "agent_crashed",
                   kind: str = "process_exit") -> dict[str, Any]:
    session = daemon.wait_state(session_id, {"stopped"})
    assert session["stop_reason"] == reason
    failure = session["failure"]
    assert failure["kind"] == kind
    assert failure["crash_bundle_path"] and Path(failure["crash_bundle_path"]).is_file()
    bundle = json.loads(Path(failure["crash_bundle_path"]).read_text())
    assert bundle["session_id"] == session_id and bundle["failure"]["kind"] == kind
    stopped = session_stopped_event(daemon, session_id)["content"]
    assert stopped["stop_reason"] == reason and stopped["failure"] == failure
    return session


# ---- deaths mid-turn ----------------------------------------------------------------------------

def test_agent_killing_itself_mid_turn_stops_the_session_as_crashed(daemon: Daemon, workspace: Path) -> None:
    session = daemon.create(workspace)
    assert daemon.prompt(session["id"], "crash").status_code == 200
    stopped = assert_crashed(daemon, session["id"])
    assert "SIGKILL" in stopped["failure"]["summary"]
    # What the agent said before dying is kept, in order.
    assert "".join(texts(daemon.all_events(session["id"]))) == "c0 c1 c2 "


def test_crash_mid_turn_records_an_error_and_a_provider_failure_marker_in_that_turn(daemon: Daemon,
                                                                                   workspace: Path) -> None:
    session = daemon.create(workspace)
    response = daemon.prompt(session["id"], "crash")
    turn_id = response.json()["prompt"]["turn_id"]
    stopped = assert_crashed(daemon, session["id"])
    events = daemon.all_events(session["id"])
    turn = [e for e in events if e["turn_id"] == turn_id]
    errors = [e for e in turn if e["type"] == "error"]
    assert len(errors) == 1 and errors[0]["content"]["failure"] == stopped["failure"]
    markers = [e["content"]["title"] for e in turn if e["type"] == "transcript_marker.created"]
    assert markers == ["provider_failure"]
    assert max(e["sequence"] for e in turn) < events[-1]["sequence"]  # all before session_stopped


def test_external_sigkill_of_a_busy_agent_stops_the_session_as_crashed(daemon: Daemon, workspace: Path) -> None:
    session = daemon.create(workspace)
    pid = daemon.meta(session["id"])["liveness"]["subprocess_pid"]
    assert isinstance(pid, int) and pid_alive(pid)
    assert daemon.prompt(session["id"], "hang").status_code == 200
    daemon.wait_event(session["id"], "agent_message", text="working")
    assert daemon.session(session["id"])["state"] == "active"
    os.kill(pid, signal.SIGKILL)
    assert_crashed(daemon, session["id"])
    assert daemon.meta(session["id"])["state"] == "stopped"


def test_clean_exit_mid_prompt_is_an_error_not_a_completion(daemon: Daemon, workspace: Path) -> None:
    session = daemon.create(workspace)
    assert daemon.prompt(session["id"], "exit0").status_code == 200
    stopped = assert_crashed(daemon, session["id"], reason="error")
    assert stopped["failure"]["summary"] == "process exited unexpectedly"


def test_agent_that_closes_stdout_but_lives_on_is_killed_not_left_active(daemon: Daemon, workspace: Path) -> None:
    session = daemon.create(workspace)
    pid = daemon.meta(session["id"])["liveness"]["subprocess_pid"]
    assert daemon.prompt(session["id"], "closeout").status_code == 200
    # The driver gives the agent a grace period to exit after EOF, then kills its group: the daemon's own kill,
    # a transport failure, not a crash "by SIGKILL".
    stopped = assert_crashed(daemon, session["id"], reason="error", kind="transport_failure")
    assert "closed its stdout" in stopped["failure"]["summary"]
    assert wait_gone(pid)


# ---- process group, environment, stderr -------------------------------------------------------

def test_stop_kills_the_agents_whole_process_group(daemon: Daemon, workspace: Path) -> None:
    session = daemon.create(workspace)
    response = daemon.prompt(session["id"], "spawnchild")
    assert response.status_code == 200
    reply = daemon.wait_event(session["id"], "agent_message")["content"]["text"]
    child = int(reply.removeprefix("child pid "))
    agent = daemon.meta(session["id"])["liveness"]["subprocess_pid"]
    assert pid_alive(child) and pid_alive(agent)
    assert os.getpgid(child) == agent  # the agent leads its own group, and its tools are in it

    result = daemon.cli("session", "stop", session["id"], "-o", "json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["stop_reason"] == "user_canceled"
    assert wait_gone(child), "the agent's child outlived the stop"
    assert wait_gone(agent)


def test_stop_escalates_to_sigkill_for_an_agent_deaf_to_cancel_eof_and_sigterm(daemon: Daemon,
                                                                                workspace: Path) -> None:
    session = daemon.create(workspace)
    agent = daemon.meta(session["id"])["liveness"]["subprocess_pid"]
    assert daemon.prompt(session["id"], "wedge").status_code == 200
    daemon.wait_event(session["id"], "agent_message", text="wedged")
    response = daemon.http.post(daemon.scoped(session["id"], "/stop"), timeout=60)
    assert response.status_code == 204
    stopped = daemon.wait_state(session["id"], {"stopped"})
    assert stopped["stop_reason"] == "user_canceled"
    assert not pid_alive(agent)
    marker = daemon.wait_event(session["id"], "transcript_marker.created", title="prompt_interrupted")
    assert marker["turn_id"] == daemon.all_events(session["id"], type="user_message")[-1]["turn_id"]


@pytest.mark.parametrize(("variable", "expected"), [
    ("COMPOZY_TEST_MARK", "from-provider"),  # the provider's env
    (CUSTOM_VAR, CUSTOM_VALUE),  # the daemon's own environment, passed through whole
    ("HOME", os.environ.get("HOME", "<unset>")),
    ("PATH", os.environ.get("PATH", "<unset>")),
])
def test_agent_gets_the_daemon_environment_plus_the_providers(daemon: Daemon, workspace: Path, variable: str,
                                                              expected: str) -> None:
    session = daemon.create(workspace)
    events = daemon.run_turn(session["id"], f"env {variable}")
    assert texts(events) == [expected]


def test_a_megabyte_of_stderr_mid_turn_does_not_hang_the_session(daemon: Daemon, workspace: Path) -> None:
    session = daemon.create(workspace)
    events = daemon.run_turn(session["id"], "stderr 1100000")
    assert texts(events) == ["stderr done"]
    assert events[-1]["type"] == "done"
    # Still usable afterwards.
    assert texts(daemon.run_turn(session["id"], "ping")) == ["echo: ping"]


def test_a_megabyte_of_stderr_at_start_does_not_hang_the_start(daemon: Daemon, workspace: Path) -> None:
    session = daemon.create(workspace, agent="noisy")
    assert session["state"] == "active", session
    assert texts(daemon.run_turn(session["id"], "ping")) == ["echo: ping"]


# ---- updates -----------------------------------------------------------------------------------

def test_streamed_updates_keep_their_order_with_gap_free_sequences(daemon: Daemon, workspace: Path) -> None:
    session = daemon.create(workspace)
    turn = daemon.run_turn(session["id"], "stream 2000", timeout=60)
    # Adjacent chunks of one write batch share a row (docs/reference/events.md §2): the text, in order, is what must
    # hold.
    assert "".join(texts(turn)) == "".join(f"c{i} " for i in range(2000))
    everything = daemon.all_events(session["id"])
    assert [e["sequence"] for e in everything] == list(range(1, len(everything) + 1))
    types = [e["type"] for e in turn]
    assert types[0] == "user_message" and types[-1] == "done"


def test_unknown_update_variants_are_stored_raw(daemon: Daemon, workspace: Path) -> None:
    session = daemon.create(workspace)
    turn = daemon.run_turn(session["id"], "unknown")
    system = [e for e in turn if e["type"] == "system"]
    assert len(system) == 1
    content = system[0]["content"]
    assert content["unknown_variant"] is True
    assert content["raw"] == {"sessionUpdate": "future_widget", "payload": {"x": 1}}
    # The turn goes on after it.
    assert texts(turn) == ["after unknown"] and turn[-1]["type"] == "done"


# ---- failed starts ------------------------------------------------------------------------------

# Every failed start is `startup_failure`, as the seed names it (issue 50, row 2); a handshake that never completed
# keeps its finer cause.
@pytest.mark.parametrize(("agent", "cause", "evidence"), [
    ("missing", None, "/nonexistent/bin/agent-acp"),
    ("broken", "handshake", "exited with code 2"),
    # Exits before answering initialize: the process was up, the handshake never completed.
    ("dies", "handshake", "boom at start"),
    ("failnew", None, "session/new"),
])
def test_failed_start_stops_with_error_and_its_failure_kind(daemon: Daemon, workspace: Path, agent: str,
                                                            cause: str | None, evidence: str) -> None:
    result = daemon.cli("session", "new", "--agent", agent, "--cwd", str(workspace))
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "startup failed: " in lines[0] and evidence in lines[0]
    assert result.stdout == ""

    listing = daemon.http.get("/api/sessions", params={"all": "true", "agent": agent}).json()["sessions"]
    session = next(s for s in listing if s["id"] in lines[0])
    assert session["state"] == "stopped"
    assert session["stop_reason"] == "error"
    assert session["failure"]["kind"] == "startup_failure"
    assert session["failure"].get("cause") == cause
    assert evidence in session["failure"]["summary"]
    assert Path(session["failure"]["crash_bundle_path"]).is_file()
    events = daemon.all_events(session["id"])
    assert [e["type"] for e in events][-2:] == ["error", "session_stopped"]
    assert events[-1]["content"]["failure"] == session["failure"]

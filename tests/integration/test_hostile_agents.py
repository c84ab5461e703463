"""Agents that break ACP, through the real daemon and the scripted agent: what they send wrong is recorded on
their own session as a protocol violation, never lost with its neighbours nor stored as something else, and an
agent that dies or goes deaf behind a pipe someone else holds is noticed and classified."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import UNCONFINED, Daemon, of_type, start_daemon


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """Unconfined: the grandchild tests read the agent's own pids on the host (tests/conftest.py UNCONFINED)."""
    d = start_daemon(tmp_path_factory.mktemp("home"), UNCONFINED)
    yield d
    d.stop()


def violations(daemon: Daemon, sid: str) -> list[str]:
    return [e["content"]["text"] for e in of_type(daemon.all_events(sid), "system")
            if e["content"].get("title") == "protocol_violation"]


def test_a_lone_surrogate_is_stored_as_a_replacement_character_beside_its_neighbours(daemon: Daemon,
                                                                                     workspace: Path) -> None:
    # It used to fail the whole commit batch: the session stopped as a storage failure (the disk was fine) and
    # the chunks before it, `done` and `session_stopped` were lost.
    sid = daemon.create(workspace)["id"]
    turn = daemon.run_turn(sid, "hostile surrogate")
    text = "".join(e["content"]["text"] for e in of_type(turn, "agent_message"))
    assert text == "before lone \ufffd here after"
    assert of_type(turn, "done")[0]["content"]["prompt_stop_reason"] == "end_turn"
    session = daemon.session(sid)
    assert session["state"] == "active" and session["failure"] is None
    assert daemon.cli_json("session", "list", "--all")  # the CLI's JSON output survives the session's rows


def test_garbage_and_another_sessions_updates_are_recorded_as_violations_not_stored_as_ours(
        daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace)["id"]
    turn = daemon.run_turn(sid, "hostile garbage")
    assert "".join(e["content"]["text"] for e in of_type(turn, "agent_message")) == "before after"
    found = violations(daemon, sid)
    assert any("not one JSON object" in v for v in found), found
    assert any("another ACP session" in v for v in found), found
    assert any("neither a request" in v for v in found), found  # the list id: once, it killed the reader
    # Answers to requests never sent, or answered already: the SDK dropped them without a word.
    assert any("request 'never-asked', which was never sent" in v for v in found), found
    assert any("request 0, which was never sent or was already answered" in v for v in found), found
    assert daemon.session(sid)["state"] == "active"
    assert of_type(daemon.run_turn(sid, "hello again"), "done")  # the reader lives on


@pytest.mark.parametrize("setsid", [False, True], ids=["in-group", "setsid"])
def test_an_agent_that_exits_while_a_grandchild_holds_its_stdout_is_noticed(daemon: Daemon, workspace: Path,
                                                                           setsid: bool) -> None:
    # Python 3.11's Process.wait() also waits for the pipes: the session read `active`, prompting, for 30 minutes.
    # A grandchild in a session of its own (setsid) escaped the group kill and held the pipe for ever.
    sid = daemon.create(workspace)["id"]
    assert daemon.prompt(sid, "orphanpipe setsid" if setsid else "orphanpipe").status_code == 200
    started = time.monotonic()
    stopped = daemon.wait_state(sid, {"stopped"}, timeout=20)
    assert time.monotonic() - started < 15
    assert stopped["stop_reason"] == "error" and stopped["failure"]["kind"] == "process_exit"
    grandchild = int(daemon.wait_event(sid, "agent_message")["content"]["text"].split()[-1])
    deadline = time.monotonic() + 10
    while _alive(grandchild) and time.monotonic() < deadline:  # what the agent started dies with it
        time.sleep(0.1)
    assert not _alive(grandchild)


def test_an_idle_agent_that_closes_its_stdout_is_stopped_as_a_transport_failure(daemon: Daemon,
                                                                                 workspace: Path) -> None:
    # It read `healthy` until the next prompt failed, then "killed by SIGKILL": the daemon's own kill, as a crash.
    sid = daemon.create(workspace)["id"]
    assert of_type(daemon.run_turn(sid, "closeoutidle"), "done")
    stopped = daemon.wait_state(sid, {"stopped"}, timeout=20)
    assert stopped["stop_reason"] == "error"
    assert stopped["failure"]["kind"] == "transport_failure"
    assert "closed its stdout" in stopped["failure"]["summary"]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie waiting for its reaper counts as gone
        return stat.read().split(")")[-1].split()[0] != "Z"


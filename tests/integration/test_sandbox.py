"""The agent is untrusted (docs/security.md): a hostile scripted agent, a real subprocess, against the real daemon.

Under bubblewrap it cannot read the token or reach the control socket, and still writes its workspace; over the
socket (the weaker mode, no sandbox) its approval of its own request is refused and recorded as the agent's; an
approved command does not let another run unasked; a terminal (and what it started with `setsid`) does not outlive
a daemon killed with SIGKILL; 200 pipelined `terminal/output` calls keep the shared loop's lag p99 under 50 ms.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sessions.acp.sandbox import bwrap_path
from tests.conftest import Daemon, of_type, said, start_daemon, wait_for

pytestmark = pytest.mark.timeout(120)

needs_bwrap = pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap (bwrap) is not installed")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


@pytest.fixture(scope="module")
def sandboxed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """A daemon whose agents run under bubblewrap with nothing of its home shown to them."""
    d = start_daemon(tmp_path_factory.mktemp("home"), '[sandbox]\nmode = "required"\n', timeout=120)
    yield d
    d.stop()


@pytest.fixture(scope="module")
def unconfined(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """The weaker mode: no sandbox at all, as on a machine without bubblewrap."""
    d = start_daemon(tmp_path_factory.mktemp("home"), '[sandbox]\nmode = "off"\n', timeout=120)
    yield d
    d.stop()


@needs_bwrap
def test_a_sandboxed_agent_cannot_read_the_token_or_reach_the_socket_but_writes_its_workspace(
        sandboxed: Daemon, workspace: Path) -> None:
    home = sandboxed.home.resolve()
    sid = sandboxed.create(workspace)["id"]
    text = said(sandboxed.run_turn(sid, f"probe {home}/token {home}/daemon.sock {home}/config.toml "
                                        f"{workspace}/README.md"))
    assert f"{home}/token=refused(" in text, text
    assert f"{home}/daemon.sock=refused(" in text, text
    assert f"{home}/config.toml=refused(" in text, text
    assert f"{workspace}/README.md=read" in text and "cwd=written" in text, text
    assert (workspace / "probe-wrote.txt").read_text() == "written by the agent\n"


def test_without_a_sandbox_the_agent_reaches_the_socket_but_its_self_approval_is_refused_and_recorded(
        unconfined: Daemon, workspace: Path) -> None:
    d = unconfined
    sid = d.create(workspace, agent="reader")["id"]  # approve-reads: its command waits on a person
    prefix = d.scoped(sid, "/permissions/")
    accepted = d.prompt(sid, f"selfapprove {d.home / 'daemon.sock'} {prefix}")
    assert accepted.status_code == 200, accepted.text
    turn_id = accepted.json()["prompt"]["turn_id"]

    def refused_row() -> list[dict[str, Any]]:
        return [e for e in d.all_events(sid) if e["type"] == "system"
                and e["content"].get("title") == "decision_refused"]

    [row] = wait_for(refused_row, timeout=30, what="the refusal to be recorded")
    assert row["content"]["raw"]["source"] == f"agent:{sid}", row
    assert row["content"]["actor"] == {"kind": "agent", "label": f"agent:{sid}", "session_id": sid}
    audited = d.cli_json("audit")["entries"]  # the attempt is the agent's in the audit log too (issue 49)
    assert [(e["actor"], e["action"], e["status"]) for e in audited if e["session_id"] == sid
            and e["actor_kind"] == "agent"] == [(f"agent:{sid}", "permission.refused", 403)]
    [request] = d.http.get(d.scoped(sid, "/permissions")).json()["permissions"]  # still waiting on a person
    assert d.http.post(d.scoped(sid, f"/permissions/{request['request_id']}"),
                       json={"decision": "deny"}).status_code == 200
    turn = d.turn_events(sid, turn_id)
    assert "self-approval answered 403 agent_cannot_decide" in said(turn), said(turn)
    decisions = [e["content"] for e in of_type(turn, "permission") if e["content"]["decision"] != "pending"]
    assert [(c["decision"], c["decision_source"]) for c in decisions] == [("denied", "person")], decisions


def test_an_approved_command_does_not_let_another_run_unasked(unconfined: Daemon, workspace: Path) -> None:
    d = unconfined
    proof = workspace / "proof.txt"
    sid = d.create(workspace, agent="reader")["id"]
    accepted = d.prompt(sid, f"swap ls ;; echo pwned > {proof}")
    turn_id = accepted.json()["prompt"]["turn_id"]

    def waiting() -> list[dict[str, Any]]:
        return list(d.http.get(d.scoped(sid, "/permissions")).json()["permissions"])

    [first] = wait_for(waiting, timeout=30, what="the request to run ls")
    assert first["title"] == "Run ls"
    assert d.http.post(d.scoped(sid, f"/permissions/{first['request_id']}"),
                       json={"decision": "approve"}).status_code == 200
    # The terminal runs something else: a person is asked again, shown exactly what would run.
    [second] = wait_for(lambda: [p for p in waiting() if p["request_id"] != first["request_id"]], timeout=30,
                        what="a second request for the command the terminal runs")
    assert second["title"] == f"Run: /bin/sh -c echo pwned > {proof}", second
    assert d.http.post(d.scoped(sid, f"/permissions/{second['request_id']}"),
                       json={"decision": "deny"}).status_code == 200
    assert said(d.turn_events(sid, turn_id)).startswith("refused: "), said(d.turn_events(sid, turn_id))
    assert not proof.exists()


def sleeping(seconds: str) -> list[int]:
    """The host's pids of `sleep SECONDS` (inside a sandbox a process sees its own namespace's pids, not these)."""
    wanted = f"sleep\0{seconds}\0".encode()
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if Path(f"/proc/{name}/cmdline").read_bytes() == wanted and alive(int(name)):
                    found.append(int(name))
            except OSError:
                continue
    return found


@pytest.mark.parametrize("mode", [pytest.param("required", marks=needs_bwrap), "off"])
def test_a_terminal_and_its_setsid_child_do_not_outlive_a_daemon_killed_with_sigkill(
        tmp_path: Path, workspace: Path, mode: str) -> None:
    home = tmp_path / "home"
    seconds = f"3098.{os.getpid()}{len(mode)}"  # names this test's two processes on the whole machine
    d = start_daemon(home, f'[sandbox]\nmode = "{mode}"\n', timeout=120)
    try:
        sid = d.create(workspace)["id"]
        d.run_turn(sid, f"term --keep setsid sleep {seconds} & exec sleep {seconds}")
        started = wait_for(lambda: len(found := sleeping(seconds)) == 2 and found, timeout=20,
                           what="the terminal's command and its setsid child")
        d.stop(signal.SIGKILL)
        d = start_daemon(home, timeout=120)  # boot repair of the crashed session
        wait_for(lambda: not any(alive(pid) for pid in started), timeout=30,
                 what=f"the terminal's processes {started} to be gone")
        assert not sleeping(seconds)
    finally:
        d.stop()


def test_pipelined_terminal_output_calls_keep_the_shared_loop_responsive(unconfined: Daemon,
                                                                         workspace: Path) -> None:
    d = unconfined
    sid = d.create(workspace)["id"]
    text = said(d.run_turn(sid, "termflood 200", timeout=60))
    assert text == "flooded 200 answers of [1000000] characters", text
    lag = d.cli_json("status")["event_loop"]["lag"]["windows"][0]  # the last 10 s
    assert lag["samples"] > 0 and lag["p99_ms"] < 50, lag

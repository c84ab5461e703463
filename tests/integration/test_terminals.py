"""Client terminals (ACP `terminal/*`, issue 29 point 3) against the real daemon: a command the agent runs through
us runs in the workspace under the permission policy as an execute action, its output bounded and redacted for the
agent, what ran recorded; a person decides under approve-reads (once per command, not twice); deny-all never runs
one; the stop kills what is still running."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import UNCONFINED, Daemon, said, start_daemon, wait_for

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    # Unconfined: the stop test reads the terminal's pid on the host (tests/conftest.py UNCONFINED).
    d = start_daemon(tmp_path_factory.mktemp("home"), UNCONFINED, timeout=120)
    yield d
    d.stop()


def systems(d: Daemon, sid: str, title: str) -> list[dict[str, Any]]:
    return [e for e in d.all_events(sid) if e["type"] == "system" and e["content"].get("title") == title]


def test_a_command_runs_in_the_workspace_its_output_bounded_and_redacted_and_recorded(
        daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace)["id"]  # approve-all
    turn = daemon.run_turn(sid, "term pwd; echo ANTHROPIC_API_KEY=sk-ant-api03-abcdefghijklmnopqrstuvwxyz012345")
    text = said(turn)
    assert text.startswith("exit 0 truncated False: "), text
    assert str(workspace) in text and "sk-ant-api03-abcdefghijklmnop" not in text and "[REDACTED]" in text, text
    [created] = systems(daemon, sid, "terminal_created")
    [exited] = systems(daemon, sid, "terminal_exited")
    assert created["content"]["raw"]["command"][0] == "/bin/sh"
    assert exited["content"]["raw"]["exit_code"] == 0 and "sk-ant-api03-abcdefghijklmnop" not in str(exited)

    long = said(daemon.run_turn(sid, "term head -c 20000 /dev/zero | tr '\\\\0' x; exit 3"))
    assert long.startswith("exit 3 truncated True: "), long[:80]
    assert len(long.split(": ", 1)[1]) <= 4096  # the agent's outputByteLimit


def test_under_approve_reads_a_person_decides_once_per_command(daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace, agent="reader")["id"]
    for prompt in ("term echo asked-by-us", "term --ask echo asked-by-the-agent"):
        accepted = daemon.prompt(sid, prompt)
        assert accepted.status_code == 200, accepted.text
        turn_id = accepted.json()["prompt"]["turn_id"]
        [request] = wait_for(lambda: daemon.http.get(daemon.scoped(sid, "/permissions")).json()["permissions"],
                             timeout=30, what="the command's permission request")
        assert daemon.http.post(daemon.scoped(sid, f"/permissions/{request['request_id']}"),
                                json={"decision": "approve"}).status_code == 200
        turn = daemon.turn_events(sid, turn_id)
        assert said(turn).startswith("exit 0"), said(turn)
        # The agent's own request was the person's one decision: the terminal did not ask again.
        pending = [e for e in turn if e["type"] == "permission" and e["content"]["decision"] == "pending"]
        assert len(pending) == 1, pending


def test_deny_all_never_runs_a_command(daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace, agent="denier")["id"]
    marker = workspace / "ran"
    turn = daemon.run_turn(sid, f"term touch {marker}")
    assert said(turn).startswith("refused: "), said(turn)
    assert not marker.exists() and not systems(daemon, sid, "terminal_created")
    assert any(e["type"] == "permission" and e["content"]["decision"] == "denied" for e in turn)


def test_the_stop_kills_what_still_runs_in_a_terminal(daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace)["id"]
    pid_file = workspace / "pid"
    daemon.run_turn(sid, f"term --keep echo $$ > {pid_file}; exec sleep 600")
    pid = int(wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), timeout=10, what="the pid"))
    assert daemon.http.post(daemon.scoped(sid, "/stop")).status_code == 204
    daemon.wait_state(sid, {"stopped"})

    def gone() -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"  # killed, not yet reaped

    wait_for(gone, timeout=10, what=f"the terminal's process {pid} to be killed")
    [exited] = systems(daemon, sid, "terminal_exited")
    assert exited["content"]["raw"]["signal"] in ("SIGTERM", "SIGKILL"), exited

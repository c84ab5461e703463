"""Supervised work against the real daemon and real agent subprocesses (issue 13): a silent run is warned
after quiet_after, stopped after stop_grace with its process tree verified gone, requeued once as a linked
attempt and left needing attention when the retry is silent too; a working run (streaming, a tool in flight,
a permission waiting on a person) is never stopped; a canceled task and max_attempts = 1 never retry; a
daemon killed while a run holds its lease recovers that run after restart under the same rules."""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Daemon, of_type, pid_alive, start_daemon, wait_for, wait_gone, wait_job_ticks

START_TIMEOUT = 120.0
QUIET_AFTER, STOP_GRACE = 2.0, 2.0
SILENCE = QUIET_AFTER + STOP_GRACE
NO_TITLE = "[roles.auto_title]\nenabled = false\n"
# The older inactivity timer is off so only the supervised-silence rules act; heartbeats every half second.
SUPERVISION = (f'[session.supervision]\nactivity_heartbeat_interval = "0.5s"\ninactivity_warning_after = "0s"\n'
               f'inactivity_timeout = "0s"\nprogress_notify_interval = "0s"\nquiet_after = "{QUIET_AFTER}s"\n'
               f'stop_grace = "{STOP_GRACE}s"\n[tasks]\nlease_ttl = "4s"\n') + NO_TITLE


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    d = start_daemon(tmp_path_factory.mktemp("tasks-home"), extra_config=SUPERVISION, timeout=START_TIMEOUT)
    yield d
    d.stop()


def create(d: Daemon, workspace: Path, prompt: str, agent: str = "scripted", **extra: Any) -> dict[str, Any]:
    response = d.http.post("/api/tasks", json={"prompt": prompt, "agent_name": agent,
                                               "workspace_path": str(workspace), **extra})
    assert response.status_code == 201, response.text
    return response.json()["task"]


def show(d: Daemon, task_id: str) -> dict[str, Any]:
    response = d.http.get(f"/api/tasks/{task_id}")
    assert response.status_code == 200, response.text
    return response.json()


def wait_task(d: Daemon, task_id: str, statuses: set[str], timeout: float = 90.0) -> dict[str, Any]:
    return wait_for(lambda: (t := show(d, task_id)["task"])["status"] in statuses and t, timeout,
                    f"task {task_id} in {statuses}")


def run_session(d: Daemon, task_id: str, attempt: int, timeout: float = 60.0) -> str:
    """The session id of one attempt, once the dispatcher bound it."""
    def bound() -> str | None:
        runs = [r for r in show(d, task_id)["task"]["runs"] if r["attempt"] == attempt]
        return runs[0]["session_id"] if runs and runs[0]["session_id"] else None
    return str(wait_for(bound, timeout, f"attempt {attempt} of {task_id} bound to a session"))


def agent_pid(d: Daemon, session_id: str) -> int:
    return int(wait_for(lambda: (d.meta(session_id).get("liveness") or {}).get("subprocess_pid"), 30, "agent pid"))


def stamp(event: dict[str, Any]) -> float:
    return datetime.fromisoformat(event["timestamp"].replace("Z", "+00:00")).timestamp()


def group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return not pid_alive(pgid)  # only zombies left


def assert_silence_stop(d: Daemon, session_id: str) -> dict[str, Any]:
    """Warned after quiet_after, stopped after stop_grace more, the process tree verified gone."""
    pgid = agent_pid(d, session_id)
    stopped = d.wait_state(session_id, {"stopped"}, timeout=60)
    assert (stopped["stop_reason"], stopped["stop_detail"]) == ("timeout", "supervised_silence")
    events = d.all_events(session_id)
    warnings = [e for e in of_type(events, "runtime_warning")
                if (e["content"].get("supervision") or {}).get("rule") == "quiet_after"]
    assert len(warnings) == 1, [e["content"] for e in of_type(events, "runtime_warning")]
    stop_event = of_type(events, "session_stopped")[-1]
    last_work = of_type(events, "agent_message")[-1]  # "working", then nothing
    assert last_work["sequence"] < warnings[0]["sequence"] < stop_event["sequence"]
    assert stamp(warnings[0]) - stamp(last_work) >= QUIET_AFTER - 0.1
    assert stamp(stop_event) - stamp(last_work) >= SILENCE - 0.1
    verification = wait_for(lambda: (d.meta(session_id).get("supervision") or {}).get("silence_stop"), 30,
                            "the verification in meta.json")
    assert verification["verified"] is True and verification["pgid"] == pgid
    assert verification["survivors"] == []
    assert group_gone(pgid)
    return verification


def test_a_silent_run_is_stopped_verified_requeued_once_then_needs_attention(daemon: Daemon, workspace: Path) -> None:
    task = create(daemon, workspace, "hang", title="silent work")
    first = run_session(daemon, task["id"], 1)
    assert daemon.meta(first)["task_id"] == task["id"]
    assert_silence_stop(daemon, first)

    second = run_session(daemon, task["id"], 2, timeout=90)
    assert second != first
    detail = show(daemon, task["id"])
    runs = detail["task"]["runs"]
    assert runs[0]["outcome"] == "silent_stopped" and runs[1]["recovers_run_id"] == runs[0]["id"]
    assert daemon.session(second)["cwd"] == daemon.session(first)["cwd"]
    assert daemon.session(second)["agent_name"] == "scripted"
    recovered = [e for e in detail["history"] if e["kind"] == "task.run_recovered"]
    assert len(recovered) == 1
    assert (recovered[0]["reason"], recovered[0]["action"]) == ("supervised_silence", "requeue")
    assert recovered[0]["detail"]["verified"] is True

    assert_silence_stop(daemon, second)
    done = wait_task(daemon, task["id"], {"needs_attention"}, timeout=60)
    assert (done["reason"], done["requeued"], done["attempts"]) == ("supervised_silence_exhausted", 1, 2)
    # Exhausted: the recovery that set needs_attention added no attempt, and with no queued or running run the task
    # cycle has nothing to dispatch (it does not even run).
    assert [r["status"] for r in show(daemon, task["id"])["task"]["runs"]] == ["finished", "finished"]

    status = daemon.cli_json("status")["tasks"]
    assert status["requeued"] >= 1 and status["needs_attention"] >= 1
    listed = daemon.cli_json("task", "list")["tasks"]
    assert listed[0]["status"] == "needs_attention"  # what needs a person comes first


def test_a_streaming_run_and_a_tool_in_flight_are_never_stopped(daemon: Daemon, workspace: Path) -> None:
    # 16 chunks 0.5 s apart: twice quiet_after + stop_grace of steady work.
    streaming = create(daemon, workspace, "slow 16 0.5")
    tool = create(daemon, workspace, "toolhang")
    session = run_session(daemon, tool["id"], 1)
    in_flight = stamp(daemon.wait_event(session, "tool_call"))
    done = wait_task(daemon, streaming["id"], {"succeeded", "failed", "needs_attention"}, timeout=90)
    assert done["status"] == "succeeded" and done["attempts"] == 1, done
    # Supervision looked at the tool call after it had been in flight past quiet_after + stop_grace.
    wait_job_ticks(daemon.home, "supervision", after=in_flight + SILENCE + 0.5)
    assert daemon.session(session)["state"] == "active"  # a tool call in flight is work
    assert not [e for e in of_type(daemon.all_events(session), "runtime_warning")
                if (e["content"].get("supervision") or {}).get("rule") == "quiet_after"]
    streamed = run_session(daemon, streaming["id"], 1)
    assert daemon.wait_state(streamed, {"stopped"})["stop_reason"] == "completed"
    daemon.cli_json("task", "cancel", tool["id"])


def test_a_permission_waiting_on_a_person_is_never_stopped(daemon: Daemon, workspace: Path) -> None:
    task = create(daemon, workspace, "tool write out.txt hello", agent="reader")
    session = run_session(daemon, task["id"], 1)
    request = wait_for(lambda: daemon.http.get(daemon.scoped(session, "/permissions")).json()["permissions"], 30,
                       "a pending permission")[0]
    wait_job_ticks(daemon.home, "supervision", after=time.time() + SILENCE + 0.5)
    assert daemon.session(session)["state"] == "active"
    assert show(daemon, task["id"])["task"]["status"] == "running"
    response = daemon.http.post(daemon.scoped(session, f"/permissions/{request['request_id']}"),
                                json={"decision": "approve", "option_id": "allow"})
    assert response.status_code == 200, response.text
    done = wait_task(daemon, task["id"], {"succeeded", "failed"})
    assert done["status"] == "succeeded" and done["attempts"] == 1
    assert (workspace / "out.txt").read_text() == "hello"  # committed files stay with the workspace


def test_a_canceled_task_never_retries(daemon: Daemon, workspace: Path) -> None:
    task = create(daemon, workspace, "hang")
    session = run_session(daemon, task["id"], 1)
    canceled = daemon.cli_json("task", "cancel", task["id"])["task"]
    assert canceled["status"] == "canceled"
    assert daemon.wait_state(session, {"stopped"})["stop_reason"] == "user_canceled"
    # The run is settled: a recovery racing the cancel would have decided by now, and with the session stopped and
    # no run queued or running neither supervision nor the task cycle has anything left to act on.
    after = wait_for(lambda: (t := show(daemon, task["id"]))["task"]["runs"][0]["outcome"] and t, 30, "the settled run")
    assert after["task"]["status"] == "canceled" and len(after["task"]["runs"]) == 1
    assert not [e for e in after["history"] if e["kind"] == "task.run_recovered"]


def test_max_attempts_one_never_retries(daemon: Daemon, workspace: Path) -> None:
    task = create(daemon, workspace, "hang", max_attempts=1)
    assert_silence_stop(daemon, run_session(daemon, task["id"], 1))
    done = wait_task(daemon, task["id"], {"needs_attention"}, timeout=60)
    assert done["reason"] == "supervised_silence_exhausted" and done["requeued"] == 0
    assert [r["status"] for r in show(daemon, task["id"])["task"]["runs"]] == ["finished"]  # and nothing queued


def test_a_failed_turn_fails_the_task_without_a_retry_and_a_person_can_retry_it(daemon: Daemon,
                                                                                  workspace: Path) -> None:
    task = create(daemon, workspace, "error")
    done = wait_task(daemon, task["id"], {"succeeded", "failed", "needs_attention"})
    assert (done["status"], done["reason"], done["attempts"]) == ("failed", "turn_failed", 1)
    retried = daemon.cli_json("task", "retry", task["id"])["task"]
    assert retried["status"] in ("queued", "running") and retried["attempts"] == 2
    assert wait_task(daemon, task["id"], {"failed"})["attempts"] == 2


def recorded_pgid(home: Path, task_id: str) -> int | None:
    with contextlib.closing(sqlite3.connect(f"file:{home / 'catalog.sqlite3'}?mode=ro", uri=True)) as conn:
        row = conn.execute("SELECT agent_pgid FROM tasks_taskrun WHERE task_id = ? AND attempt = 1",
                           (task_id,)).fetchone()
    return row[0] if row else None


def test_a_killed_daemon_leaves_a_lapsed_lease_that_is_recovered_after_restart(tmp_path: Path,
                                                                                workspace: Path) -> None:
    # No silence rules here (quiet_after off): only the lapsed lease can move the run.
    config = ('[session.supervision]\nactivity_heartbeat_interval = "0.5s"\nquiet_after = "0s"\n'
              '[tasks]\nlease_ttl = "3s"\n') + NO_TITLE
    home = tmp_path / "home"
    d = start_daemon(home, extra_config=config, timeout=START_TIMEOUT)
    try:
        # `wedge` ignores SIGTERM and stdin EOF: the orphan outlives its daemon unless recovery kills its group.
        task = create(d, workspace, "wedge", agent="scripted", max_attempts=2)
        first = run_session(d, task["id"], 1)
        pgid = agent_pid(d, first)
        wait_for(lambda: [e for e in d.all_events(first) if e["type"] == "agent_message"], 30, "the agent working")
        # The daemon's task cycle records the agent's group with the run (the catalog is the evidence to wait on).
        wait_for(lambda: recorded_pgid(home, task["id"]) == pgid, 30, "the run's agent group to be recorded")
    finally:
        d.stop(signal.SIGKILL)
    d = start_daemon(home, extra_config=config, timeout=START_TIMEOUT)
    try:
        second = run_session(d, task["id"], 2, timeout=90)
        detail = show(d, task["id"])
        first_run = detail["task"]["runs"][0]
        assert first_run["outcome"] == "lease_expired"
        assert detail["task"]["runs"][1]["recovers_run_id"] == first_run["id"]
        recovered = [e for e in detail["history"] if e["kind"] == "task.run_recovered"]
        assert [(e["reason"], e["action"]) for e in recovered] == [("lease_expired", "requeue")]
        assert recovered[0]["detail"]["verified"] is True and recovered[0]["detail"]["pgid"] == pgid
        assert wait_gone(pgid, 30) and group_gone(pgid)
        assert detail["task"]["requeued"] == 1
        assert second != first and d.session(first)["state"] == "stopped"
        d.cli_json("task", "cancel", task["id"])
    finally:
        d.stop()


def test_dispatch_stays_within_max_concurrent_agents(tmp_path: Path, workspace: Path) -> None:
    config = '[limits]\nmax_concurrent_agents = 1\n[tasks]\nlease_ttl = "4s"\n' + NO_TITLE
    d = start_daemon(tmp_path / "home", extra_config=config, timeout=START_TIMEOUT)
    try:
        tasks = [create(d, workspace, "slow 6 0.5")["id"] for _ in range(2)]
        most = 0
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            live = d.http.get("/api/sessions").json()["sessions"]  # active sessions
            most = max(most, len(live))
            if all(show(d, t)["task"]["status"] == "succeeded" for t in tasks):
                break
            time.sleep(0.1)
        assert [show(d, t)["task"]["status"] for t in tasks] == ["succeeded", "succeeded"]
        assert most == 1
    finally:
        d.stop()


def test_the_task_api_refuses_bad_bodies_with_stable_codes(daemon: Daemon, workspace: Path) -> None:
    def refused(body: dict[str, Any]) -> tuple[int, str]:
        response = daemon.http.post("/api/tasks", json=body)
        return response.status_code, response.json()["code"]

    assert refused({"prompt": "x", "workspace_path": str(workspace), "bogus": 1}) == (400, "unknown_field")
    assert refused({"prompt": "x"}) == (400, "workspace_required")
    assert refused({"prompt": " ", "workspace_path": str(workspace)}) == (400, "prompt_required")
    assert refused({"prompt": "x", "workspace_path": str(workspace), "max_attempts": 0}) == (400,
                                                                                            "invalid_max_attempts")
    assert refused({"prompt": "x", "workspace_path": str(workspace), "cwd": "/"}) == (400, "invalid_cwd")
    assert refused({"prompt": "x", "workspace_path": str(workspace), "agent_name": "nobody"}) == (404,
                                                                                                 "agent_not_found")
    assert daemon.http.get("/api/tasks/task_0000000000000000").json()["code"] == "task_not_found"
    assert daemon.cli("task", "show", "task_0000000000000000").returncode == 69


def test_a_workspace_whose_tasks_finished_is_removed_with_them(daemon: Daemon, tmp_path: Path) -> None:
    # A task holds its workspace: removing it answered 500 after its sessions' folders were already deleted.
    root = tmp_path / "finished-work"
    root.mkdir()
    task = create(daemon, root, "hello", max_attempts=1)
    session = run_session(daemon, task["id"], 1)
    daemon.http.post(daemon.scoped(session, "/stop"))
    wait_task(daemon, task["id"], {"succeeded", "failed", "canceled", "needs_attention"})
    daemon.wait_state(session, {"stopped"})
    response = daemon.http.delete(f"/api/workspaces/{task['workspace_id']}")
    assert response.status_code == 204, response.text
    assert daemon.http.get(f"/api/tasks/{task['id']}").status_code == 404
    assert not (daemon.home / "sessions" / session).exists()

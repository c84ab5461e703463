"""Crash safety under SIGKILL of the daemon (issue 5): nothing acknowledged is lost, nothing stays live,
no agent is orphaned, and the session continues under the same id. Bounded in time."""

from __future__ import annotations

import json
import random
import signal
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import Daemon, chunk_count, start_daemon, wait_for, wait_gone

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
BOOT = 120.0  # daemon start under a loaded CI machine


def stored_sequences(home: Path, session_id: str) -> list[int]:
    conn = sqlite3.connect(home / "sessions" / session_id / "events.db")
    try:
        return [row[0] for row in conn.execute("SELECT sequence FROM events ORDER BY rowid")]
    finally:
        conn.close()


def watch(d: Daemon, session_id: str, received: list[dict[str, Any]], stop: threading.Event) -> None:
    """A raw SSE viewer that keeps every frame it was told about, until the daemon dies."""
    url = f"{d.base_url}{d.scoped(session_id, '/stream')}"
    try:
        with httpx.stream("GET", url, params={"frames": "raw"}, headers=d.auth,
                          timeout=httpx.Timeout(60, read=60)) as response:
            for line in response.iter_lines():
                if stop.is_set():
                    return
                if line.startswith("data: "):
                    received.append(json.loads(line[6:]))
    except (httpx.HTTPError, OSError):
        return  # the daemon was killed under us


def test_sigkill_mid_turn_keeps_every_streamed_event_and_the_session_continues(
        tmp_path: Path, workspace: Path) -> None:
    home = tmp_path / "home"
    d = start_daemon(home, timeout=BOOT)
    sid = d.create(workspace)["id"]
    assert d.prompt(sid, "slow 400 0.01").status_code == 200
    received: list[dict[str, Any]] = []
    stop = threading.Event()
    viewer = threading.Thread(target=watch, args=(d, sid, received, stop), daemon=True)
    viewer.start()
    wait_for(lambda: chunk_count(f["content"]["text"] for f in received if f.get("type") == "agent_message") >= 50,
             what="the viewer to see the stream")
    agent_pid = d.meta(sid)["liveness"]["subprocess_pid"]
    d.stop(signal.SIGKILL)
    stop.set()
    viewer.join(10)

    # Every event a client received before the kill is in events.db, byte for byte.
    assert received, "nothing was streamed before the kill"
    conn = sqlite3.connect(home / "sessions" / sid / "events.db")
    stored = {row[0]: json.loads(row[1]) for row in conn.execute("SELECT sequence, content FROM events")}
    conn.close()
    for frame in received:
        assert stored[frame["sequence"]] == frame["content"]
    # The agent does not outlive its daemon (EOF on stdin, or repair kills its group).
    assert d.meta(sid)["state"] == "active"

    d = start_daemon(home, timeout=BOOT)
    try:
        assert wait_gone(agent_pid, 30), "the agent of the killed daemon is still running"
        session = d.session(sid)
        assert (session["state"], session["stop_reason"], session["failure"]["kind"]) == (
            "stopped", "agent_crashed", "process_exit")
        assert session["stop_detail"] == "daemon crashed while session active"
        # Boot repair terminalizes the interrupted turn (append-only).
        turn = received[0]["turn_id"]
        wait_for(lambda: any(e["type"] == "error" for e in d.all_events(sid) if e["turn_id"] == turn),
                 what="boot repair to terminalize the interrupted turn")
        sequences = stored_sequences(home, sid)
        assert sequences == list(range(1, len(sequences) + 1))
        # A new prompt continues the session under the same id.
        events = d.run_turn(sid, "echo still here", timeout=90)
        assert any(e["type"] == "done" for e in events)
        assert d.session(sid)["id"] == sid and d.session(sid)["state"] == "active"
    finally:
        d.stop()


def test_twenty_kill_and_restart_cycles_leave_no_gap_no_live_state_and_no_orphan(
        tmp_path: Path, workspace: Path) -> None:
    home = tmp_path / "home"
    rng = random.Random(20)
    sessions: list[str] = []
    agent_pids: set[int] = set()
    for _cycle in range(20):
        d = start_daemon(home, timeout=BOOT)
        body = {"agent_name": "scripted", "workspace_path": str(workspace), "prompt": "slow 300 0.01"}
        response = d.http.post("/api/sessions", json=body)
        assert response.status_code == 201, response.text
        sessions.append(response.json()["session"]["id"])
        time.sleep(rng.uniform(0.2, 2.5))  # sometimes mid-start, sometimes mid-stream
        for sid in sessions:
            pid = ((d.meta(sid).get("liveness") or {}).get("subprocess_pid"))
            if isinstance(pid, int):
                agent_pids.add(pid)
        d.stop(signal.SIGKILL)

    d = start_daemon(home, timeout=BOOT)
    try:
        for sid in sessions:
            session = d.session(sid)
            assert session["state"] == "stopped", f"{sid} left {session['state']}"
            assert session["stop_reason"] in {"agent_crashed", "error"}
            sequences = stored_sequences(home, sid)
            assert sequences == list(range(1, len(sequences) + 1)), f"gap or duplicate in {sid}"
        assert agent_pids, "no agent pid was recorded in any cycle: nothing to check for orphans"
        orphans = [pid for pid in agent_pids if not wait_gone(pid, 30)]
        assert not orphans, f"agent processes outlived their daemon: {orphans}"
    finally:
        d.stop()

"""Session health and wakes against the real daemon and the scripted agent (docs/reference/health.md §1-§4)."""

from __future__ import annotations

import json
import signal
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sessions.store.folder import parse_time
from tests.conftest import NO_TITLE, TITLES, Daemon, of_type, start_daemon, wait_for
from tests.disk import fill_up, free_bytes, tmpfs

HEARTBEAT = """---
version: 1
summary: check the inbox
preferences:
  min_interval: 1s
---
Look at the inbox and the task list first.
"""
FAST = """
[agents.heartbeat]
session_health_stale_after = "2s"
min_interval = "1s"
default_interval = "1h"
wake_cooldown = "1s"
"""


def write_policy(home: Path, agent: str = "scripted", text: str = HEARTBEAT) -> Path:
    path = home / "agents" / agent / "HEARTBEAT.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def hd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    home = tmp_path_factory.mktemp("health-home")
    # The policy's interval is the config default (1h): the scheduler never wakes on its own in these tests.
    write_policy(home, text=HEARTBEAT.replace("  min_interval: 1s\n", ""))
    # Titles on: a wake's synthetic prompt must not start a title pass (test_two_concurrent_wakes_…).
    d = start_daemon(home, FAST + TITLES)
    yield d
    d.stop()


def listed_health(d: Daemon, session_id: str) -> dict[str, Any] | None:
    """Health from the list (which does not touch presence, so it never holds staleness off)."""
    rows = d.http.get("/api/sessions", params={"include_health": "true", "all": "true"}).json()["sessions"]
    return next((s["health"] for s in rows if s["id"] == session_id), None)


def health(d: Daemon, session_id: str) -> dict[str, Any]:
    response = d.http.get(d.scoped(session_id, "/health"))
    assert response.status_code == 200, response.text
    return response.json()["health"]


def test_an_idle_session_turns_stale_after_the_threshold_and_healthy_again_on_a_prompt(hd: Daemon,
                                                                                    workspace: Path) -> None:
    s = hd.create(workspace)
    first = listed_health(hd, s["id"])
    assert first is not None and first["state"] == "idle" and first["health"] == "healthy"
    assert first["eligible_for_wake"] is True and first["ineligibility_reason"] is None
    stale = wait_for(lambda: (h := listed_health(hd, s["id"])) and h["health"] == "stale" and h, timeout=15,
                     what="stale health")
    assert stale["state"] == "idle" and stale["attachable"] is True
    assert stale["eligible_for_wake"] is False and stale["ineligibility_reason"] == "session_unhealthy"
    hd.run_turn(s["id"], "hello after a nap")
    # The turn's end is persisted just after its `done` event: health follows that write. Healthy alone is not
    # enough: the turn's start already made it healthy (state `prompting`), a moment before its end is saved.
    wait_for(lambda: (h := listed_health(hd, s["id"]) or {}).get("health") == "healthy" and h.get("state") == "idle",
             timeout=10, what="health to recover on the turn's activity, the turn's end saved")
    after = health(hd, s["id"])
    assert after["health"] == "healthy" and after["state"] == "idle" and after["eligible_for_wake"] is True
    assert parse_time(after["last_activity_at"]) > parse_time(stale["updated_at"]) - _slack()
    # The health read touched presence (metadata only: not a transition).
    assert after["last_presence_at"] is not None


def _slack() -> Any:
    from datetime import timedelta

    return timedelta(seconds=1)


def test_a_stopped_session_reads_stopped_and_not_attachable_on_every_surface(hd: Daemon, workspace: Path) -> None:
    s = hd.create(workspace)
    assert hd.http.post(hd.scoped(s["id"], "/stop")).status_code == 204
    h = health(hd, s["id"])
    assert (h["state"], h["health"], h["attachable"], h["active_prompt"]) == ("stopped", "dead", False, False)
    assert (h["eligible_for_wake"], h["ineligibility_reason"]) == (False, "session_unhealthy")
    assert h["last_presence_at"] is None  # a stopped session is not present
    assert hd.cli_json("session", "health", s["id"]) == {"health": h}
    status = hd.cli("session", "status", s["id"], "--json")
    assert status.returncode == 0, status.stderr
    import json

    body = json.loads(status.stdout)
    assert body["session"]["state"] == "stopped" and body["health"]["state"] == "stopped"
    listed = hd.cli_json("session", "list", "--all", "--include-health")["sessions"]
    assert next(x["health"] for x in listed if x["id"] == s["id"])["state"] == "stopped"
    inspect = hd.cli_json("session", "inspect", s["id"])
    assert inspect["health"]["attachable"] is False and inspect["policy_digest"].startswith("sha256:")
    assert inspect["policy"]["validation_status"] == "valid"
    # A wake is refused before any work, with the health reason.
    decision = hd.http.post("/api/agents/scripted/heartbeat/wake", json={"session_id": s["id"]}).json()["decision"]
    assert (decision["result"], decision["reason"]) == ("skipped", "session_unhealthy")


def test_a_running_prompt_reads_prompting_and_is_never_woken(hd: Daemon, workspace: Path) -> None:
    s = hd.create(workspace)
    response = hd.prompt(s["id"], "slow 6 0.5")
    assert response.status_code == 200, response.text
    # Health follows the prompt at once: it read `idle` and wake-eligible until the turn's first heartbeat (30 s).
    during = wait_for(lambda: (h := health(hd, s["id"]))["state"] == "prompting" and h, timeout=3,
                      what="health to read prompting")
    assert during["active_prompt"] is True and during["health"] == "healthy"
    assert during["eligible_for_wake"] is False and during["ineligibility_reason"] == "session_prompt_active"
    decision = hd.http.post("/api/agents/scripted/heartbeat/wake", json={"session_id": s["id"]}).json()["decision"]
    assert (decision["result"], decision["reason"]) == ("skipped", "session_prompt_active")
    hd.turn_events(s["id"], response.json()["prompt"]["turn_id"])
    after = wait_for(lambda: (h := health(hd, s["id"]))["state"] == "idle" and h, timeout=5,
                     what="health to read idle after the turn")
    assert after["active_prompt"] is False and after["eligible_for_wake"] is True
    assert of_type(hd.all_events(s["id"]), "synthetic_reentry") == []


def test_two_concurrent_wakes_of_one_session_give_one_synthetic_prompt_and_one_coalesced(
        hd: Daemon, workspace: Path) -> None:
    s = hd.create(workspace)
    barrier = threading.Barrier(2)
    decisions: list[dict[str, Any]] = []

    def fire() -> None:
        with hd.client(timeout=30) as http:
            barrier.wait()
            response = http.post("/api/agents/scripted/heartbeat/wake",
                                 json={"session_id": s["id"], "source": "scheduler"})
            assert response.status_code == 200, response.text
            decisions.append(response.json()["decision"])

    threads = [threading.Thread(target=fire) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted((d["result"], d["reason"]) for d in decisions) == [("coalesced", "wake_coalesced"),
                                                                      ("sent", "wake_sent")]
    sent = next(d for d in decisions if d["result"] == "sent")
    hd.turn_events(s["id"], sent["synthetic_prompt_id"])
    synthetic = of_type(hd.all_events(s["id"]), "synthetic_reentry")
    assert len(synthetic) == 1 and synthetic[0]["turn_id"] == sent["synthetic_prompt_id"]
    content = synthetic[0]["content"]
    assert content["source"] == "synthetic" and content["synthetic"]["wake_event_id"] == sent["wake_event_id"]
    assert content["synthetic"]["reason"] == "agent_heartbeat_wake"
    assert content["text"].startswith("Agent Heartbeat requested a reorientation for this existing session.")
    assert of_type(hd.all_events(s["id"]), "user_message") == []
    assert wait_for(lambda: hd.session(s["id"])["state"] == "active" and hd.meta(s["id"]), timeout=10)
    assert hd.meta(s["id"]).get("auto_title") is None  # the daemon's prompt never names the session
    inspect = hd.cli_json("session", "inspect", s["id"])
    assert inspect["wake_state"]["last_result"] in ("sent", "coalesced")
    assert inspect["wake_state"]["last_wake_at"] is not None
    assert {e["reason"] for e in inspect["wake_events"]} == {"wake_sent", "wake_coalesced"}


def test_after_a_kill_and_restart_health_is_recomputed_before_the_first_wake(tmp_path: Path,
                                                                              workspace: Path) -> None:
    home = tmp_path / "home"
    write_policy(home)
    d = start_daemon(home, FAST)
    try:
        old = d.create(workspace)
        assert health(d, old["id"])["state"] == "idle"
        d.proc.send_signal(signal.SIGKILL)
        d.proc.wait(10)
        d.http.close()
        d = start_daemon(home, FAST)
        restarted = time.time()
        new = d.create(workspace)
        status = wait_for(lambda: _sent_wake(d, new["id"]), timeout=30, what="a scheduler wake after the restart")
        recomputed = parse_time(status["service"]["health_recomputed_at"])
        after_restart = [e for e in status["wake_events"] if parse_time(e["created_at"]).timestamp() >= restarted - 1]
        assert after_restart and all(parse_time(e["created_at"]) >= recomputed for e in after_restart)
        first_wake = min(parse_time(e["created_at"]) for e in after_restart)
        # The killed daemon's session was recomputed from its repaired metadata, before that first wake.
        old_health = d.http.get("/api/sessions", params={"include_health": "true", "all": "true"}).json()
        row = next(s["health"] for s in old_health["sessions"] if s["id"] == old["id"])
        assert (row["state"], row["health"], row["attachable"]) == ("stopped", "dead", False)
        assert parse_time(row["updated_at"]) <= first_wake
        assert "health recomputed at boot" in d.log()
    finally:
        d.stop()


def _sent_wake(d: Daemon, session_id: str) -> dict[str, Any] | None:
    status = d.http.get("/api/agents/scripted/heartbeat/status",
                        params={"session_id": session_id, "include_recent_wake_events": "true"}).json()
    return status if any(e["result"] == "sent" for e in status.get("wake_events") or []) else None


def test_doctor_reports_health_rows_the_wake_service_and_invalid_policies(hd: Daemon, workspace: Path) -> None:
    hd.create(workspace)
    write_policy(hd.home, agent="reader", text="---\nversion: 1\ncron: '* * * * *'\n---\n")
    try:
        items = wait_for(lambda: _doctor_items(hd, lambda i: i["wake_service"]["severity"] == "ok"), timeout=20,
                         what="a wake cycle")
        assert items["session_health_rows"]["severity"] in ("ok", "info")
        assert items["session_health_rows"]["evidence"]["missing"] == 0
        policies = items["heartbeat_policies"]
        assert policies["severity"] == "warn" and "heartbeat_forbidden_field" in policies["message"]
        # One home-level file, however many workspaces' snapshots resolved to it.
        assert policies["message"].startswith("1 policy file(s) invalid"), policies
        assert policies["suggested_command"] == "compozy agent heartbeat status reader"
        status = hd.cli_json("agent", "heartbeat", "status", "reader")
        assert (status["validation_status"], status["active"]) == ("invalid", False)
        assert status["diagnostics"][0]["code"] == "heartbeat_forbidden_field"
    finally:
        (hd.home / "agents" / "reader" / "HEARTBEAT.md").unlink()
    assert _doctor_items(hd, lambda i: True)["heartbeat_policies"]["severity"] == "ok"
    # A mistyped check is an error that lists the real ones, never an empty "ok" report.
    typo = hd.cli("doctor", "--only", "wake_servce", "-o", "json")
    assert typo.returncode == 65, typo.stdout + typo.stderr
    body = json.loads(typo.stderr)
    assert body["code"] == "invalid_check" and "wake_service" in body["error"]


def _doctor_items(d: Daemon, ready: Any) -> dict[str, dict[str, Any]] | None:
    body = d.cli_json("doctor")
    items = {i["id"]: i for i in body["items"]}
    return items if ready(items) else None


def test_health_status_and_inspect_answer_derived_health_when_a_full_catalog_lacks_the_row(
        tmp_path: Path, workspace: Path) -> None:
    """A read with no health row stored it first: on a full catalog disk that write failed and health, status and
    inspect answered 500 internal_error (so did inspect's first HEARTBEAT.md snapshot). Reads must answer."""
    with tmpfs(tmp_path / "home", 20 * 1024 * 1024) as home:
        d = start_daemon(home, extra_config=NO_TITLE)
        try:
            sid = d.create(workspace)["id"]
            assert d.http.post(d.scoped(sid, "/stop")).status_code == 204
            d.wait_state(sid, {"stopped"})
            catalog = sqlite3.connect(str(home / "catalog.sqlite3"), isolation_level=None)
            catalog.execute("DELETE FROM session_health WHERE session_id = ?", (sid,))
            catalog.execute("DELETE FROM agent_heartbeat_snapshots")
            catalog.close()
            fill_up(home)
            assert free_bytes(home) < 64 * 1024
            health = d.cli_json("session", "health", sid)["health"]
            assert (health["state"], health["attachable"]) == ("stopped", False), health
            status = d.cli_json("session", "status", sid)
            assert status["session"]["state"] == "stopped" and status["health"]["state"] == "stopped", status
            inspect = d.cli_json("session", "inspect", sid)
            assert inspect["health"]["state"] == "stopped" and inspect["policy"]["snapshot_id"] == "", inspect
        finally:
            d.stop()

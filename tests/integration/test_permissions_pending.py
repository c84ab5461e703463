"""Permission requests a person answers (`approve-reads` leaves anything but reads to a person), against the
real daemon and the scripted agent: auto-approved reads, a pending write listed by the API and the CLI and
approved from the CLI, a denial from the API, cancellation of the turn answering the request `cancelled`, and
supervision counting the wait for a person as activity."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import NO_TITLE, Daemon, markers, module_daemon, of_type, start_daemon, wait_for, wait_job_ticks

START_TIMEOUT = 120.0
SUPERVISION = (
    '[session.supervision]\nactivity_heartbeat_interval = "0.5s"\ninactivity_warning_after = "2s"\n'
    'inactivity_timeout = "4s"\ntimeout_cancel_grace = "1s"\nprogress_notify_interval = "0s"\n'
)
INACTIVITY_TIMEOUT = 4.0


daemon = module_daemon(NO_TITLE, timeout=START_TIMEOUT)


@pytest.fixture(scope="module")
def supervised(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    d = start_daemon(tmp_path_factory.mktemp("supervised-home"), extra_config=SUPERVISION + NO_TITLE,
                     timeout=START_TIMEOUT)
    yield d
    d.stop()


def start(d: Daemon, sid: str, message: str) -> str:
    response = d.prompt(sid, message)
    assert response.status_code == 200, response.text
    return str(response.json()["prompt"]["turn_id"])


def pending_request(d: Daemon, sid: str, turn_id: str) -> dict[str, Any]:
    """The `pending` permission event of a turn, once the agent asked."""
    def find() -> dict[str, Any] | None:
        rows = [e for e in d.all_events(sid, turn_id=turn_id)
                if e["type"] == "permission" and e["content"]["decision"] == "pending"]
        return rows[0] if rows else None
    return wait_for(find, what=f"a pending permission in {turn_id}")


def listed(d: Daemon, sid: str) -> list[dict[str, Any]]:
    response = d.http.get(d.scoped(sid, "/permissions"))
    assert response.status_code == 200, response.text
    return list(response.json()["permissions"])


def decisions(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(e["content"]["decision"], e["content"]["decision_source"]) for e in of_type(events, "permission")]


def test_approve_reads_answers_a_read_without_asking(daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace, agent="reader")["id"]
    turn = daemon.run_turn(sid, "tool read README.md")
    assert decisions(turn) == [("approved", "policy:approve-reads")]
    [result] = of_type(turn, "tool_result")
    assert result["content"]["status"] == "completed"
    assert result["content"]["tool_result"]["content"] == "hello from the workspace\n"
    assert of_type(turn, "done")[0]["content"]["prompt_stop_reason"] == "end_turn"
    assert listed(daemon, sid) == []


def test_a_write_waits_for_a_person_and_a_cli_approval_writes_the_file(daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace, agent="reader")["id"]
    turn_id = start(daemon, sid, "tool write x.txt hi there")
    request = pending_request(daemon, sid, turn_id)
    request_id = request["content"]["request_id"]
    assert request["content"]["decision_source"] == "person"

    [item] = listed(daemon, sid)
    assert item["request_id"] == request_id and item["turn_id"] == turn_id
    assert item["kind"] == "edit" and item["title"] == "Write x.txt"
    assert {o["option_id"] for o in item["options"]} == {"allow", "reject"}
    cli_listed = daemon.cli_json("session", "permissions", sid)["permissions"]
    assert [p["request_id"] for p in cli_listed] == [request_id]
    assert daemon.session(sid)["prompt_state"] == "prompting"
    assert daemon.session(sid)["pending_permissions"] == 1
    [row] = [s for s in daemon.http.get("/api/sessions").json()["sessions"] if s["id"] == sid]
    assert row["pending_permissions"] == 1  # the list shows who waits for a person
    assert not (workspace / "x.txt").exists()

    approved = daemon.cli_json("session", "approve", sid, request_id)
    assert approved["permission"]["decision"] == "approved"
    turn = daemon.turn_events(sid, turn_id)
    assert of_type(turn, "done")[0]["content"]["prompt_stop_reason"] == "end_turn"
    assert (workspace / "x.txt").read_text() == "hi there"
    assert decisions(turn) == [("pending", "person"), ("approved", "person")]
    assert of_type(turn, "tool_result")[0]["content"]["status"] == "completed"
    assert listed(daemon, sid) == []
    assert daemon.session(sid)["pending_permissions"] == 0
    # The first answer wins; a later one learns who gave it (issue 49).
    again = daemon.http.post(daemon.scoped(sid, f"/permissions/{request_id}"), json={"decision": "deny"})
    assert again.status_code == 409 and again.json()["code"] == "permission_answered", again.text
    assert again.json()["diagnostic"]["evidence"]["answered_by"] == "owner"


def test_a_denial_from_the_api_fails_the_tool_call(daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace, agent="reader")["id"]
    turn_id = start(daemon, sid, "tool write y.txt nope")
    request_id = pending_request(daemon, sid, turn_id)["content"]["request_id"]
    bad = daemon.http.post(daemon.scoped(sid, f"/permissions/{request_id}"), json={"decision": "maybe"})
    assert bad.status_code == 400 and bad.json()["code"] == "invalid_decision"
    # An option of the other kind would store "approved" while the agent hears "reject" (or the reverse).
    for decision, option in (("approve", "reject"), ("deny", "allow")):
        mixed = daemon.http.post(daemon.scoped(sid, f"/permissions/{request_id}"),
                                 json={"decision": decision, "option_id": option})
        assert mixed.status_code == 400 and mixed.json()["code"] == "option_decision_mismatch", mixed.text
    assert [p["request_id"] for p in listed(daemon, sid)] == [request_id]  # still waiting for a person

    response = daemon.http.post(daemon.scoped(sid, f"/permissions/{request_id}"), json={"decision": "deny"})
    assert response.status_code == 200, response.text
    assert response.json()["permission"]["decision"] == "denied"
    turn = daemon.turn_events(sid, turn_id)
    assert decisions(turn) == [("pending", "person"), ("denied", "person")]
    [result] = of_type(turn, "tool_result")
    assert result["content"]["status"] == "failed" and result["content"]["tool_error"] == "permission denied"
    assert of_type(turn, "done")[0]["content"]["prompt_stop_reason"] == "end_turn"
    assert not (workspace / "y.txt").exists()
    assert listed(daemon, sid) == []


@pytest.mark.parametrize(("how", "marker"), [("/prompt/cancel", "prompt_cancel"), ("/interrupt", "prompt_interrupted")])
def test_canceling_the_turn_answers_its_pending_permission_cancelled(daemon: Daemon, workspace: Path, how: str,
                                                                     marker: str) -> None:
    sid = daemon.create(workspace, agent="reader")["id"]
    turn_id = start(daemon, sid, "tool write z.txt never")
    pending_request(daemon, sid, turn_id)
    response = daemon.http.post(daemon.scoped(sid, how), json={})
    assert response.status_code == 200, response.text

    turn = daemon.turn_events(sid, turn_id)
    assert of_type(turn, "done")[0]["content"]["prompt_stop_reason"] == "cancelled"
    assert decisions(turn) == [("pending", "person"), ("cancelled", "turn_cancelled")]
    assert of_type(turn, "tool_result")[0]["content"]["status"] == "failed"
    assert not (workspace / "z.txt").exists()
    assert listed(daemon, sid) == []
    assert len(markers(daemon.all_events(sid), marker)) == 1
    assert daemon.session(sid)["state"] == "active"


def test_waiting_for_a_person_is_activity_so_supervision_never_times_it_out(supervised: Daemon,
                                                                            workspace: Path) -> None:
    d = supervised
    sid = d.create(workspace, agent="reader")["id"]
    control = d.create(workspace, agent="scripted")["id"]  # proves supervision is live in this daemon
    turn_id = start(d, sid, "tool write late.txt worth the wait")
    request_id = pending_request(d, sid, turn_id)["content"]["request_id"]
    control_turn = start(d, control, "hang")

    # The control turn is silent and gets timed out; the permission wait, twice as long, does not.
    control_events = d.turn_events(control, control_turn, timeout=90)
    assert len(markers(control_events, "prompt_timeout")) == 1
    # The sweep had its chance twice over once the timeout would have passed: two supervision ticks after it.
    wait_job_ticks(d.home, "supervision", after=time.time() + 2 * INACTIVITY_TIMEOUT, timeout=60)
    events = d.all_events(sid)
    assert of_type(events, "runtime_warning") == []
    assert markers(events, "prompt_timeout") == []
    assert [p["request_id"] for p in listed(d, sid)] == [request_id]
    session = d.session(sid)
    assert session["state"] == "active" and session["prompt_state"] == "prompting"
    assert session["activity"]["last_activity_kind"] == "agent_waiting"

    response = d.http.post(d.scoped(sid, f"/permissions/{request_id}"), json={"decision": "approve"})
    assert response.status_code == 200, response.text
    turn = d.turn_events(sid, turn_id)
    assert of_type(turn, "done")[0]["content"]["prompt_stop_reason"] == "end_turn"
    assert (workspace / "late.txt").read_text() == "worth the wait"

"""Elicitation (ACP `elicitation/create`, form mode) against the real daemon and the scripted agent's `ask`: the
question is listed (API, CLI, attention list) while it waits, answered from the API (accept with content the agent
receives, content that does not fit answers 400 and leaves it open, decline) and from the CLI, never timed out by
supervision while it waits on a person, and cancelled when the session stops."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import (
    NO_TITLE,
    Daemon,
    markers,
    module_daemon,
    of_type,
    said,
    start_daemon,
    wait_for,
    wait_job_ticks,
)

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


def listed(d: Daemon, sid: str) -> list[dict[str, Any]]:
    response = d.http.get(d.scoped(sid, "/elicitations"))
    assert response.status_code == 200, response.text
    return list(response.json()["elicitations"])


def ask(d: Daemon, sid: str, message: str = "ask Who are you?") -> tuple[str, dict[str, Any]]:
    """(turn id, the pending elicitation) once the agent asked."""
    response = d.prompt(sid, message)
    assert response.status_code == 200, response.text
    turn_id = str(response.json()["prompt"]["turn_id"])
    [item] = wait_for(lambda: listed(d, sid) or None, what="a pending elicitation")
    return turn_id, item


def system_titles(events: list[dict[str, Any]]) -> list[str]:
    return [e["content"].get("title") for e in of_type(events, "system")
            if str(e["content"].get("title", "")).startswith("elicitation_")]


def answer(d: Daemon, sid: str, request_id: str, body: dict[str, Any]) -> Any:
    return d.http.post(d.scoped(sid, f"/elicitations/{request_id}"), json=body)


def attention_items(d: Daemon, sid: str) -> list[dict[str, Any]]:
    response = d.http.get("/api/attention")
    assert response.status_code == 200, response.text
    return [i for i in response.json()["items"] if i["session_id"] == sid and i["kind"] == "elicitation"]


def test_an_accepted_answer_reaches_the_agent_and_content_that_does_not_fit_is_refused(
        daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace)["id"]
    turn_id, item = ask(daemon, sid)
    assert item["message"] == "Who are you?" and item["turn_id"] == turn_id and item["created_at"]
    schema = item["requested_schema"]
    assert set(schema["properties"]) == {"name", "count", "urgent", "color"}
    assert schema["required"] == ["name", "count"]
    [notice] = wait_for(lambda: attention_items(daemon, sid) or None, what="the elicitation in the attention list")
    assert notice["request_id"] == item["id"] and "Who are you?" in notice["summary"]
    assert daemon.session(sid)["pending_elicitations"] == 1  # the session page refetches on this count

    for bad, field in (({"count": 3}, "name"), ({"name": "Ada", "count": "three"}, "count"),
                       ({"name": "Ada", "count": 1, "color": "pink"}, "color"),
                       ({"name": "Ada", "count": 1, "extra": True}, "extra")):
        refused = answer(daemon, sid, item["id"], {"action": "accept", "content": bad})
        assert refused.status_code == 400, refused.text
        assert refused.json()["code"] == "invalid_elicitation_content"
        assert field in refused.text
    assert [e["id"] for e in listed(daemon, sid)] == [item["id"]]  # still waiting for a person
    missing = answer(daemon, sid, "elicit-999", {"action": "decline"})
    assert missing.status_code == 404 and missing.json()["code"] == "elicitation_not_found"

    content = {"name": "Ada", "count": 2.5, "urgent": True, "color": "green"}
    response = answer(daemon, sid, item["id"], {"action": "accept", "content": content})
    assert response.status_code == 200, response.text
    assert response.json()["elicitation"]["action"] == "accept"
    turn = daemon.turn_events(sid, turn_id)
    assert said(turn) == "ask accept: " + json.dumps(content, sort_keys=True)
    assert system_titles(turn) == ["elicitation_requested", "elicitation_answered"]
    assert listed(daemon, sid) == [] and daemon.session(sid)["pending_elicitations"] == 0
    wait_for(lambda: attention_items(daemon, sid) == [], what="the elicitation gone from the attention list")
    again = answer(daemon, sid, item["id"], {"action": "decline"})
    assert again.status_code == 404 and again.json()["code"] == "elicitation_not_found"


def test_a_decline_from_the_api_and_answers_from_the_cli(daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace)["id"]
    turn_id, item = ask(daemon, sid)
    assert answer(daemon, sid, item["id"], {"action": "decline"}).status_code == 200
    assert said(daemon.turn_events(sid, turn_id)) == "ask decline"

    turn_id, item = ask(daemon, sid)
    cli_listed = daemon.cli_json("session", "elicitations", sid)["elicitations"]
    assert [e["id"] for e in cli_listed] == [item["id"]]
    bad = daemon.cli("session", "answer", sid, item["id"], "--field", "count=lots")
    assert bad.returncode != 0 and len(bad.stderr.strip().splitlines()) == 1 and "count" in bad.stderr
    done = daemon.cli_json("session", "answer", sid, item["id"], "--field", "name=Ada", "--field", "count=3",
                           "--field", "urgent=yes", "--field", "color=blue")
    assert done["elicitation"]["action"] == "accept"
    assert said(daemon.turn_events(sid, turn_id)) == "ask accept: " + json.dumps(
        {"color": "blue", "count": 3, "name": "Ada", "urgent": True}, sort_keys=True)

    turn_id, item = ask(daemon, sid)
    declined = daemon.cli("session", "answer", sid, item["id"], "--decline")
    assert declined.returncode == 0, declined.stderr
    assert said(daemon.turn_events(sid, turn_id)) == "ask decline"
    gone = daemon.cli("session", "answer", sid, item["id"], "--cancel")
    assert gone.returncode == 69 and "elicitation_not_found" in gone.stderr


def test_stopping_the_session_cancels_a_pending_elicitation(daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace)["id"]
    turn_id, item = ask(daemon, sid)
    assert daemon.http.post(daemon.scoped(sid, "/stop")).status_code == 204
    daemon.wait_state(sid, {"stopped"})
    events = daemon.all_events(sid)
    [answered] = [e for e in of_type(events, "system") if e["content"].get("title") == "elicitation_answered"]
    assert answered["content"]["text"] == "cancel" and answered["turn_id"] == turn_id
    assert answered["content"]["raw"]["request_id"] == item["id"]
    assert listed(daemon, sid) == []
    wait_for(lambda: attention_items(daemon, sid) == [], what="no attention item for a stopped session")


def test_a_pending_elicitation_keeps_supervision_from_timing_the_turn_out(supervised: Daemon,
                                                                          workspace: Path) -> None:
    d = supervised
    sid = d.create(workspace)["id"]
    control = d.create(workspace)["id"]  # proves supervision is live in this daemon
    turn_id, item = ask(d, sid)
    response = d.prompt(control, "hang")
    control_turn = response.json()["prompt"]["turn_id"]

    # The control turn is silent and gets timed out; the wait for an answer, twice as long, does not.
    assert len(markers(d.turn_events(control, control_turn, timeout=90), "prompt_timeout")) == 1
    # The sweep had its chance twice over once the timeout would have passed: two supervision ticks after it.
    wait_job_ticks(d.home, "supervision", after=time.time() + 2 * INACTIVITY_TIMEOUT, timeout=60)
    events = d.all_events(sid)
    assert markers(events, "prompt_timeout") == []
    assert [e["id"] for e in listed(d, sid)] == [item["id"]]
    session = d.session(sid)
    assert session["state"] == "active" and session["prompt_state"] == "prompting"
    assert session["activity"]["last_activity_kind"] == "agent_waiting"

    assert answer(d, sid, item["id"], {"action": "accept", "content": {"name": "x", "count": 1}}).status_code == 200
    assert said(d.turn_events(sid, turn_id)) == "ask accept: " + json.dumps({"count": 1, "name": "x"}, sort_keys=True)

"""What waits on a person reaches them (issue 31), against the real daemon, the scripted agent and a real HTTP
receiver on loopback: the attention list (API and CLI) and its acknowledgements; signed webhooks delivered through
the outbox, retried while the receiver is down, kept across a SIGKILL, given up (and shown by doctor) on a refusal;
the secret nowhere it must not be; a receiver trickling its answer delays no other, and a URL that cannot be sent
stops the start (issue 44)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import NO_TITLE, ROOT, Daemon, daemon_config, start_daemon, wait_for
from tests.webhook_receiver import Receiver, Trickler, webhook_config

SECRET = "whsec-test-0123456789abcdef"
EVENTS = ["permission_requested", "elicitation_requested", "auth_required", "session_failed", "turn_finished"]
START_TIMEOUT = 120.0


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    r = Receiver().start()
    yield r
    r.stop()


@pytest.fixture(scope="module")
def refused() -> Iterator[Receiver]:
    """A receiver that refuses every delivery for good (410 Gone): the outbox gives up at once."""
    r = Receiver(status=410).start()
    yield r
    r.stop()


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory, receiver: Receiver, refused: Receiver) -> Iterator[Daemon]:
    config = webhook_config(receiver.url, SECRET, EVENTS) + (
        f'\n[[notifications.webhooks]]\nurl = "{refused.url}"\nsecret = "{SECRET}-refused"\n'
        'events = ["session_failed"]\n')
    d = start_daemon(tmp_path_factory.mktemp("home"), extra_config=config + NO_TITLE, timeout=START_TIMEOUT)
    yield d
    d.stop()


def attention(d: Daemon) -> list[dict[str, Any]]:
    response = d.http.get("/api/attention")
    assert response.status_code == 200, response.text
    return list(response.json()["items"])


def items_for(d: Daemon, sid: str, kind: str) -> list[dict[str, Any]]:
    return [i for i in attention(d) if i["session_id"] == sid and i["kind"] == kind]


def test_a_pending_permission_is_listed_signed_and_delivered_and_leaves_the_list_when_answered(
        daemon: Daemon, receiver: Receiver, workspace: Path) -> None:
    sid = daemon.create(workspace, agent="reader")["id"]
    assert daemon.prompt(sid, "tool write x.txt hi there").status_code == 200
    [item] = wait_for(lambda: items_for(daemon, sid, "permission"), what="the permission in the attention list")
    assert item["id"].startswith("att_") and item["url"] == f"/sessions/{sid}" and item["request_id"]
    assert "x.txt" in item["summary"] or "edit" in item["summary"]

    listed = daemon.cli_json("attention")["items"]
    assert item["id"] in [i["id"] for i in listed]

    [delivery] = wait_for(lambda: receiver.received("permission_requested", session_id=sid),
                          what="the permission_requested webhook")
    assert delivery.signed_with(SECRET)
    assert not delivery.signed_with(SECRET + "x")
    payload = delivery.payload
    assert payload["id"].startswith("evt_") and payload["workspace_id"] == item["workspace_id"]
    assert payload["summary"] == item["summary"] and payload["url"].endswith(f"/sessions/{sid}")
    assert payload["url"].startswith("http://127.0.0.1:") and payload["summary"] in payload["text"]
    assert payload["occurred_at"].endswith("Z")
    assert delivery.headers["x-compozy-event"] == "permission_requested"
    assert delivery.headers["content-type"] == "application/json"

    decided = daemon.http.post(daemon.scoped(sid, f"/permissions/{item['request_id']}"),
                               json={"decision": "approve"})
    assert decided.status_code == 200, decided.text
    wait_for(lambda: not items_for(daemon, sid, "permission"), what="the answered permission to leave the list")
    # The turn it held ends, and its end is an event too; the request was delivered once.
    wait_for(lambda: receiver.received("turn_finished", session_id=sid), what="turn_finished")
    assert len(receiver.received("permission_requested", session_id=sid)) == 1


def test_an_agent_question_is_listed_and_delivered_and_leaves_the_list_when_answered(
        daemon: Daemon, receiver: Receiver, workspace: Path) -> None:
    sid = daemon.create(workspace)["id"]
    assert daemon.prompt(sid, "ask Which color?").status_code == 200
    [item] = wait_for(lambda: items_for(daemon, sid, "elicitation"), what="the question in the attention list")
    assert item["request_id"] and "Which color?" in item["summary"]
    [delivery] = wait_for(lambda: receiver.received("elicitation_requested", session_id=sid),
                          what="the elicitation_requested webhook")
    assert delivery.signed_with(SECRET) and delivery.payload["summary"] == item["summary"]
    answered = daemon.http.post(daemon.scoped(sid, f"/elicitations/{item['request_id']}"), json={"action": "cancel"})
    assert answered.status_code == 200, answered.text
    wait_for(lambda: not items_for(daemon, sid, "elicitation"), what="the answered question to leave the list")
    assert len(receiver.received("elicitation_requested", session_id=sid)) == 1


def test_a_failed_session_is_listed_until_acknowledged(daemon: Daemon, receiver: Receiver, workspace: Path) -> None:
    sid = daemon.create(workspace)["id"]
    assert daemon.prompt(sid, "crash").status_code == 200
    daemon.wait_state(sid, {"stopped"})
    [item] = wait_for(lambda: items_for(daemon, sid, "failed"), what="the failed session in the list")
    [delivery] = wait_for(lambda: receiver.received("session_failed", session_id=sid), what="session_failed")
    assert delivery.signed_with(SECRET) and delivery.payload["summary"] == item["summary"]

    human = daemon.cli("attention")
    assert human.returncode == 0 and item["id"] in human.stdout and "failed" in human.stdout
    assert "compozy attention ack ID" in human.stdout
    acked = daemon.cli_json("attention", "ack", item["id"])
    assert acked["item"]["id"] == item["id"] and acked["item"]["acknowledged"] is True
    assert not items_for(daemon, sid, "failed")
    again = daemon.http.post(f"/api/attention/{item['id']}/ack")  # idempotent: a second viewer's ack
    assert again.status_code == 200, again.text
    gone = daemon.http.post("/api/attention/att_0000000000000000/ack")
    assert gone.status_code == 404 and gone.json()["code"] == "attention_not_found"
    cli = daemon.cli("attention", "ack", "att_0000000000000000")
    assert cli.returncode != 0 and len(cli.stderr.strip().splitlines()) == 1 and "attention" in cli.stderr


def test_a_provider_that_wants_a_login_is_an_auth_item(daemon: Daemon, receiver: Receiver, workspace: Path) -> None:
    sid = daemon.create(workspace)["id"]
    daemon.run_turn(sid, "autherr")
    [item] = wait_for(lambda: items_for(daemon, sid, "auth"), what="the auth item")
    assert "login" in item["summary"]
    wait_for(lambda: receiver.received("auth_required", session_id=sid), what="auth_required")


def test_a_refused_delivery_is_given_up_shown_by_doctor_and_the_secret_is_nowhere(
        daemon: Daemon, refused: Receiver, workspace: Path) -> None:
    sid = daemon.create(workspace)["id"]
    assert daemon.prompt(sid, "crash").status_code == 200
    wait_for(lambda: refused.received("session_failed", session_id=sid), what="the refused attempt")

    def webhooks_item() -> dict[str, Any] | None:
        report = daemon.cli_json("doctor", "--only", "webhooks")
        [check] = report["items"]
        return check if check["severity"] == "warn" else None

    check = wait_for(webhooks_item, what="doctor's webhooks warning")
    assert "410" in check["message"] and f"127.0.0.1:{refused.port}" in check["message"]
    assert len(refused.received("session_failed", session_id=sid)) == 1  # a 4xx is not retried
    shown = json.dumps(check) + json.dumps(attention(daemon)) + daemon.log() + json.dumps(daemon.events(sid))
    assert SECRET not in shown and "private-path-token" not in shown


def test_a_receiver_down_at_first_gets_every_event_once_it_is_up(tmp_path: Path, workspace: Path) -> None:
    receiver = Receiver()  # its port is reserved; nothing listens yet
    d = start_daemon(tmp_path / "home", extra_config=webhook_config(receiver.url, SECRET, ["turn_finished"]),
                     timeout=START_TIMEOUT)
    try:
        sid = d.create(workspace)["id"]
        for n in range(3):
            d.run_turn(sid, f"say {n}")
        wait_for(lambda: d.cli_json("doctor", "--only", "webhooks")["items"][0]["severity"] == "info",
                 what="the deliveries retrying")
        receiver.start()
        wait_for(lambda: len({r.payload["id"] for r in receiver.received("turn_finished", session_id=sid)}) == 3,
                 what="every turn's event delivered")
        assert all(r.signed_with(SECRET) for r in receiver.received())
    finally:
        d.stop()
        receiver.stop()


def test_deliveries_pending_when_the_daemon_is_killed_are_delivered_after_its_restart(
        tmp_path: Path, workspace: Path) -> None:
    receiver = Receiver()
    home = tmp_path / "home"
    config = webhook_config(receiver.url, SECRET, ["turn_finished"])
    first = start_daemon(home, extra_config=config, timeout=START_TIMEOUT)
    try:
        sid = first.create(workspace)["id"]
        for n in range(2):
            first.run_turn(sid, f"say {n}")
        wait_for(lambda: first.cli_json("doctor", "--only", "webhooks")["items"][0]["severity"] == "info",
                 what="the deliveries retrying")
    finally:
        first.stop(signal.SIGKILL)
    receiver.start()
    second = start_daemon(home, timeout=START_TIMEOUT)
    try:
        wait_for(lambda: len({r.payload["id"] for r in receiver.received("turn_finished", session_id=sid)}) == 2,
                 what="both turns' events delivered after the restart")
        doctor = second.cli_json("doctor", "--only", "webhooks")["items"][0]
        assert doctor["severity"] == "ok" and doctor["evidence"]["counts"]["delivered"] == 2
    finally:
        second.stop()
        receiver.stop()


# A task whose agent goes silent: stopped, verified gone, and with one attempt allowed it needs attention.
SILENCE = ('[session.supervision]\nactivity_heartbeat_interval = "0.5s"\ninactivity_warning_after = "0s"\n'
           'inactivity_timeout = "0s"\nquiet_after = "1s"\nstop_grace = "1s"\n[tasks]\nlease_ttl = "4s"\n')


def test_a_task_that_needs_attention_is_listed_and_delivered(tmp_path: Path, workspace: Path) -> None:
    receiver = Receiver().start()
    config = webhook_config(receiver.url, SECRET, ["task_needs_attention", "session_failed"]) + SILENCE + NO_TITLE
    d = start_daemon(tmp_path / "home", extra_config=config, timeout=START_TIMEOUT)
    try:
        response = d.http.post("/api/tasks", json={"prompt": "hang", "agent_name": "scripted", "max_attempts": 1,
                                                   "workspace_path": str(workspace), "title": "goes silent"})
        assert response.status_code == 201, response.text
        task_id = response.json()["task"]["id"]
        [delivery] = wait_for(lambda: receiver.received("task_needs_attention", task_id=task_id), 90,
                              "the task_needs_attention webhook")
        assert delivery.signed_with(SECRET)
        assert "goes silent" in delivery.payload["summary"] and delivery.payload["url"].endswith(f"/tasks#{task_id}")
        [item] = [i for i in attention(d) if i["kind"] == "task"]
        assert item["task_id"] == task_id and item["summary"] == delivery.payload["summary"]
        # Its stopped attempt is the task's business: one item, not one per attempt.
        assert [i["kind"] for i in attention(d)] == ["task"]
        retried = d.http.post(f"/api/tasks/{task_id}/retry")
        assert retried.status_code == 200, retried.text
        wait_for(lambda: not [i for i in attention(d) if i["kind"] == "task"], what="the retried task to leave")
    finally:
        d.stop()
        receiver.stop()


def test_a_permission_left_open_by_a_killed_daemon_is_not_listed_after_the_session_continues(
        tmp_path: Path, workspace: Path) -> None:
    from tests.conftest import wait_gone

    home = tmp_path / "home"
    first = start_daemon(home, timeout=START_TIMEOUT)
    try:
        sid = first.create(workspace, agent="reader")["id"]
        assert first.prompt(sid, "tool write x.txt hi").status_code == 200
        wait_for(lambda: items_for(first, sid, "permission"), what="the permission item")
        agent_pid = first.meta(sid)["liveness"]["subprocess_pid"]
    finally:
        first.stop(signal.SIGKILL)
    assert wait_gone(agent_pid, 60), "the orphaned agent did not exit"
    second = start_daemon(home, timeout=START_TIMEOUT)
    try:
        second.wait_state(sid, {"stopped"})
        assert not items_for(second, sid, "permission")  # nobody can answer it: its agent is gone
        second.run_turn(sid, "say hello")  # continues the session with a new agent process
        assert second.session(sid)["state"] == "active"
        assert not items_for(second, sid, "permission")
    finally:
        second.stop()


def test_a_receiver_trickling_its_answer_does_not_delay_a_healthy_one(tmp_path: Path, workspace: Path) -> None:
    """Issue 44: a receiver sending a byte every 2 s held the one delivery thread for good, and a healthy receiver
    got 1 of 4 events. Now each of 4 turns reaches the healthy receiver within the trickler's own deadline
    (`timeout = "3s"`) of the turn's end, while the trickler's attempts go on being cut and retried."""
    trickler, healthy = Trickler(every=2.0).start(), Receiver().start()
    config = webhook_config(healthy.url, SECRET, ["turn_finished"]) + (
        f'\n[[notifications.webhooks]]\nurl = "{trickler.url}"\nsecret = "{SECRET}-trickler"\n'
        'events = ["turn_finished"]\n')
    d = start_daemon(tmp_path / "home", extra_config=config + NO_TITLE, timeout=START_TIMEOUT)
    try:
        sid = d.create(workspace)["id"]
        for n in range(4):
            d.run_turn(sid, f"say {n}")

        def four() -> dict[str, float] | None:
            arrived = {r.payload["id"]: r.at - datetime.fromisoformat(r.payload["occurred_at"]).timestamp()
                       for r in healthy.received("turn_finished", session_id=sid)}
            return arrived if len(arrived) == 4 else None

        lags = wait_for(four, 30, "the 4 turns' events at the healthy receiver")
        assert max(lags.values()) < 3.0, f"seconds from each turn's end to the healthy receiver: {lags}"
        wait_for(lambda: len(trickler.held) >= 2, 30, "the trickler's attempts cut and retried")
        assert max(trickler.held) < 4.0, trickler.held
    finally:
        d.stop()
        trickler.stop()
        healthy.stop()


def test_a_webhook_url_that_cannot_be_sent_stops_the_start_in_one_line_without_its_path(tmp_path: Path) -> None:
    """It used to start, then trace back every ~33 s with the URL's path in the log, never giving the rows up."""
    home = tmp_path / "home"
    home.mkdir()
    bad = "https://hooks.example.com/services/private-path-token with space?key=private-query"
    (home / "config.toml").write_text(daemon_config(home, webhook_config(bad, SECRET, ["turn_finished"])))
    env = {**os.environ, "COMPOZY_HOME": str(home)}
    env.pop("COMPOZY_URL", None)
    result = subprocess.run([sys.executable, "-m", "compozy.cli", "daemon", "start", "--port", "0"], env=env,
                            cwd=str(ROOT), capture_output=True, text=True, timeout=120)
    if result.returncode == 0:  # it started after all: stopped, not left behind
        subprocess.run([sys.executable, "-m", "compozy.cli", "daemon", "stop"], env=env, cwd=str(ROOT),
                       capture_output=True, timeout=120)
    assert result.returncode == 78, result.stderr
    assert result.stderr.count("\n") == 1 and "notifications.webhooks[0].url: must not contain spaces" in result.stderr
    assert "private-path-token" not in result.stderr + result.stdout and "private-query" not in result.stderr

"""Approvals from a phone or a chat (issue 49), against the real daemon, the scripted agent and a real webhook
receiver: a permission's webhook carries signed approve/deny links (and Slack's buttons); a link's page needs no
sign-in; it answers its own request exactly once, and is refused when reused (410 link_used), expired (410
link_expired) or altered by one byte (403 link_invalid); the answer names `webhook-link` and the token that made
the link, in the session's events and in the audit log."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from tests.conftest import JSON_ONLY, NO_TITLE, Daemon, start_daemon, wait_for
from tests.webhook_receiver import Receiver, webhook_config

SECRET = "whsec-test-0123456789abcdef"


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    r = Receiver().start()
    yield r
    r.stop()


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory, receiver: Receiver) -> Iterator[Daemon]:
    config = webhook_config(receiver.url, SECRET, ["permission_requested", "elicitation_requested"],
                            'action_links = true\nlink_ttl = "30m"')
    d = start_daemon(tmp_path_factory.mktemp("home"), extra_config=config + NO_TITLE)
    yield d
    d.stop()


def anonymous(d: Daemon) -> httpx.Client:
    """A phone: no token, no cookie."""
    return httpx.Client(base_url=d.base_url, timeout=30)


def pending(d: Daemon, workspace: Path, name: str) -> tuple[str, str]:
    sid = d.create(workspace, agent="reader")["id"]
    assert d.prompt(sid, f"tool write {name} hi").status_code == 200
    listed = wait_for(lambda: d.http.get(d.scoped(sid, "/permissions")).json()["permissions"],
                      what="a pending permission")
    return sid, str(listed[0]["request_id"])


def path_of(url: str) -> str:
    return urlsplit(url).path


def one_byte_altered(path: str, at: int) -> str:
    chars = list(path)
    chars[at] = "0" if chars[at] != "0" else "1"
    return "".join(chars)


def approval(d: Daemon, sid: str) -> dict[str, Any]:
    return d.wait_event(sid, "permission", decision="approved")


def test_a_webhook_link_approves_exactly_once_and_names_webhook_link(
        daemon: Daemon, receiver: Receiver, tmp_path: Path) -> None:
    sid, request_id = pending(daemon, tmp_path, "x.txt")
    [delivery] = wait_for(lambda: receiver.received("permission_requested", session_id=sid), what="the webhook")
    actions = {a["action"]: a["url"] for a in delivery.payload["actions"]}
    assert set(actions) == {"approve", "deny"} and all(u.startswith("http://127.0.0.1:") for u in actions.values())
    buttons = delivery.payload["blocks"][1]["elements"]  # Slack's incoming-webhook buttons
    assert {b["url"] for b in buttons} == set(actions.values())
    approve, deny = path_of(actions["approve"]), path_of(actions["deny"])

    with anonymous(daemon) as phone:
        page = phone.get(approve)
        assert page.status_code == 200 and "<form method=\"post\">" in page.text and "Approve" in page.text
        assert "script" not in page.headers["content-security-policy"]
        # Opening the page answers nothing.
        assert [p["request_id"] for p in daemon.http.get(daemon.scoped(sid, "/permissions")).json()[
            "permissions"]] == [request_id]
        for at in (len("/a/") + 5, len(approve) - 1, approve.index(".approve") + 2):
            tampered = one_byte_altered(approve, at)
            for method in ("GET", "POST"):
                refused = phone.request(method, tampered, headers=JSON_ONLY)
                assert refused.status_code == 403 and refused.json()["code"] == "link_invalid", (at, method)
        done = phone.post(approve, headers=JSON_ONLY)
        assert done.status_code == 200, done.text
        assert done.json()["permission"]["decision"] == "approved"
        for path in (approve, deny):
            again = phone.post(path, headers=JSON_ONLY)
            assert again.status_code == 410 and again.json()["code"] == "link_used"
        page_again = phone.get(approve)
        assert page_again.status_code == 410 and page_again.headers["x-compozy-code"] == "link_used"
        assert "<form" not in page_again.text

    event = approval(daemon, sid)
    assert event["content"]["actor"] == {"kind": "webhook-link", "label": "webhook-link", "user": "owner",
                                         "token_id": "owner"}
    assert (tmp_path / "x.txt").read_text() == "hi"
    entries = wait_for(lambda: [e for e in daemon.cli_json("audit")["entries"]
                                if e["session_id"] == sid and e["actor"] == "webhook-link"], what="the audit row")
    assert [e["action"] for e in entries] == ["session.permission"]
    assert entries[0]["detail"]["decision"] == "approved" and entries[0]["token_id"] == "owner"


def test_a_link_answers_only_its_own_request_and_a_person_made_one_names_their_token(
        daemon: Daemon, tmp_path_factory: pytest.TempPathFactory) -> None:
    daemon.cli_json("user", "add", "pat", "--role", "operator")
    made = daemon.cli_json("token", "create", "--user", "pat", "--scope", "approve")
    first, first_request = pending(daemon, tmp_path_factory.mktemp("one"), "a.txt")
    second, second_request = pending(daemon, tmp_path_factory.mktemp("two"), "b.txt")
    with httpx.Client(base_url=daemon.base_url, timeout=30,
                      headers={"Authorization": f"Bearer {made['secret']}"}) as pat:
        minted = pat.post(daemon.scoped(first, f"/permissions/{first_request}/links"), json={})
        assert minted.status_code == 201, minted.text
        other = pat.post(daemon.scoped(second, f"/permissions/{second_request}/links"), json={})
    deny_first = path_of({a["action"]: a["url"] for a in minted.json()["actions"]}["deny"])
    deny_second = path_of({a["action"]: a["url"] for a in other.json()["actions"]}["deny"])
    # The first link's id with the second's signature: neither request is answered.
    spliced = deny_first.rsplit(".", 1)[0] + "." + deny_second.rsplit(".", 1)[1]
    with anonymous(daemon) as phone:
        refused = phone.post(spliced, headers=JSON_ONLY)
        assert refused.status_code == 403 and refused.json()["code"] == "link_invalid"
        assert phone.post(deny_first, headers=JSON_ONLY).status_code == 200
    denied = daemon.wait_event(first, "permission", decision="denied")
    assert denied["content"]["actor"]["kind"] == "webhook-link"
    assert denied["content"]["actor"]["token_id"] == made["token"]["id"]
    assert denied["content"]["actor"]["user"] == "pat"
    still = daemon.http.get(daemon.scoped(second, "/permissions")).json()["permissions"]
    assert [p["request_id"] for p in still] == [second_request]  # the other request still waits


def test_an_expired_link_and_a_revoked_makers_link_change_nothing(daemon: Daemon, tmp_path: Path) -> None:
    sid, request_id = pending(daemon, tmp_path, "late.txt")
    brief = daemon.http.post(daemon.scoped(sid, f"/permissions/{request_id}/links"), json={"ttl": "1s"})
    assert brief.status_code == 201 and brief.json()["expires_in"] == 1
    approve = path_of({a["action"]: a["url"] for a in brief.json()["actions"]}["approve"])
    with anonymous(daemon) as phone:
        # Its page (which answers nothing) is watched until the link lapses; then the button is refused.
        page = wait_for(lambda: (r := phone.get(approve)).status_code == 410 and r, timeout=10,
                        what="the link to expire")
        assert page.headers["x-compozy-code"] == "link_expired" and "expired" in page.text
        expired = phone.post(approve, headers=JSON_ONLY)
        assert expired.status_code == 410 and expired.json()["code"] == "link_expired"
    made = daemon.cli_json("token", "create", "--user", "pat", "--scope", "approve")
    with httpx.Client(base_url=daemon.base_url, timeout=30,
                      headers={"Authorization": f"Bearer {made['secret']}"}) as pat:
        minted = pat.post(daemon.scoped(sid, f"/permissions/{request_id}/links"), json={})
    daemon.cli_json("token", "revoke", made["token"]["id"])
    revoked_link = path_of(minted.json()["actions"][0]["url"])
    with anonymous(daemon) as phone:
        refused = phone.post(revoked_link, headers=JSON_ONLY)
        assert refused.status_code == 403 and refused.json()["code"] == "link_invalid"
    assert [p["request_id"] for p in daemon.http.get(daemon.scoped(sid, "/permissions")).json()[
        "permissions"]] == [request_id]


def test_a_question_link_opens_its_form_and_answers_it_once(
        daemon: Daemon, receiver: Receiver, tmp_path: Path) -> None:
    sid = daemon.create(tmp_path)["id"]
    prompt = daemon.prompt(sid, "ask Which color?")
    assert prompt.status_code == 200, prompt.text
    [delivery] = wait_for(lambda: receiver.received("elicitation_requested", session_id=sid),
                          what="the question's webhook")
    actions = {a["action"]: path_of(a["url"]) for a in delivery.payload["actions"]}
    assert set(actions) == {"answer", "decline"}
    with anonymous(daemon) as phone:
        form = phone.get(actions["answer"])
        assert form.status_code == 200 and "Which color?" in form.text
        for field in ('name="name"', 'name="count"', 'type="checkbox" name="urgent"', '<option value="green">'):
            assert field in form.text, field
        bad = phone.post(actions["answer"], data={"name": "Ada", "count": "many"}, headers=JSON_ONLY)
        assert bad.status_code == 400 and bad.json()["code"] == "invalid_elicitation_content"  # nothing spent
        done = phone.post(actions["answer"], data={"name": "Ada", "count": "3", "urgent": "on", "color": "green"},
                          headers=JSON_ONLY)
        assert done.status_code == 200, done.text
        assert done.json()["elicitation"]["action"] == "accept"
        for path in actions.values():
            again = phone.post(path, headers=JSON_ONLY)
            assert again.status_code == 410 and again.json()["code"] == "link_used"
    turn = daemon.turn_events(sid, prompt.json()["prompt"]["turn_id"])
    said = "".join(e["content"].get("text", "") for e in turn if e["type"] == "agent_message")
    assert 'ask accept: {"color": "green", "count": 3, "name": "Ada", "urgent": true}' in said, said
    answered = daemon.wait_event(sid, "system", title="elicitation_answered")
    assert answered["content"]["actor"]["kind"] == "webhook-link"

"""Bad input that needs the real daemon: a live session (its attach lease, its prompt, stop and interrupt, its
workspace scope) or daphne itself (Twisted's body parsing). Each answers 4xx with the common error shape and a stable
code, and changes nothing. Every other category is tested in-process in tests/unit/test_api_bad_input.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.api_checks import error, post_raw, snapshot
from tests.conftest import JSON_ONLY, Daemon, start_daemon


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    d = start_daemon(tmp_path_factory.mktemp("home"))
    yield d
    d.stop()


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("bad-input-ws")


@pytest.fixture(scope="module")
def session(daemon: Daemon, ws: Path) -> dict[str, Any]:
    """A live session whose state every test checks is left alone."""
    created = daemon.create(ws, name="keep-me")
    assert created["state"] == "active"
    return created


def test_a_5000_digit_integer_is_malformed_json(daemon: Daemon, session: dict[str, Any]) -> None:
    before = snapshot(daemon, session["id"])
    body = b'{"attached_to": "http:me", "ttl_seconds": ' + b"9" * 5000 + b"}"
    error(post_raw(daemon, daemon.scoped(session["id"], "/attach"), body), 400, "malformed_json")
    child = b'{"role": "helper", "ttl_seconds": ' + b"1" * 5000 + b"}"
    error(post_raw(daemon, daemon.scoped(session["id"], "/children"), child), 400, "malformed_json")
    assert snapshot(daemon, session["id"]) == before
    assert daemon.session(session["id"])["attachable"]


def test_well_formed_ai_sdk_parts_still_prompt(daemon: Daemon, session: dict[str, Any]) -> None:
    body = {"id": "chat-1", "trigger": "submit-message", "messages": [
        {"id": "m1", "role": "user", "parts": [{"type": "text", "text": "hello "}, {"type": "file", "url": "x"},
                                               {"type": "text", "text": "there"}]}]}
    response = daemon.http.post(daemon.scoped(session["id"], "/prompt"), json=body, headers=JSON_ONLY)
    assert response.status_code == 200, response.text
    turn = daemon.turn_events(session["id"], response.json()["prompt"]["turn_id"])
    assert [e["content"]["text"] for e in turn if e["type"] == "user_message"] == ["hello there"]


def test_a_malformed_multipart_body_gets_a_json_error(daemon: Daemon, session: dict[str, Any]) -> None:
    """Twisted used to answer this itself with a bare 400 and a disconnect, before the request reached Django.
    Now the API reads the body as the JSON it is (idle session: nothing to steer)."""
    before = snapshot(daemon, session["id"])
    response = daemon.http.post(daemon.scoped(session["id"], "/steer"), content=b'{"text": "x"}',
                                headers={"Content-Type": "multipart/form-data"})
    error(response, 409, "prompt_not_in_progress")
    assert snapshot(daemon, session["id"]) == before


def test_the_wrong_workspace_never_finds_a_live_session(daemon: Daemon, session: dict[str, Any],
                                                        tmp_path: Path) -> None:
    other = daemon.http.post("/api/workspaces", json={"root_dir": str(tmp_path)}).json()["workspace"]["id"]
    before = snapshot(daemon, session["id"])
    # Reactivate skipped the scope check for a live session (200 with the whole session).
    error(daemon.http.post(f"/api/workspaces/{other}/sessions/{session['id']}/reactivate"), 404, "session_not_found")
    error(daemon.http.post(f"/api/workspaces/nope/sessions/{session['id']}/reactivate"), 404, "session_not_found")
    # A wake scoped to another workspace prompted this session; a made-up id left an audit event. Both are a
    # `session_not_found` decision now (the health seed), recording nothing.
    for body in ({"session_id": session["id"], "workspace_id": other}, {"session_id": "sess_0000000000000000"}):
        wake = daemon.http.post("/api/agents/scripted/heartbeat/wake", json=body)
        assert wake.status_code == 200, wake.text
        decision = wake.json()["decision"]
        assert (decision["result"], decision["reason"], decision["wake_event_id"]) == (
            "skipped", "session_not_found", None)
    assert snapshot(daemon, session["id"]) == before
    assert daemon.http.delete(f"/api/workspaces/{other}").status_code == 204


def test_a_null_body_is_no_body_where_the_body_is_optional(daemon: Daemon, ws: Path) -> None:
    # The OpenAPI document declares these bodies `anyOf [model, null]`, but `null` answered 400 malformed_json.
    sid = daemon.create(ws, name="null-body")["id"]
    assert post_raw(daemon, daemon.scoped(sid, "/interrupt"), b"null").status_code == 200
    assert post_raw(daemon, daemon.scoped(sid, "/stop"), b"null").status_code == 204
    assert daemon.session(sid)["state"] == "stopped"
    # Where a body is required, null is still refused, naming what is missing.
    refused = post_raw(daemon, daemon.scoped(sid, "/prompt"), b"null")
    assert refused.status_code == 400 and refused.json()["code"] != "internal_error", refused.text


def test_an_integer_field_takes_a_whole_json_number_and_nothing_else(daemon: Daemon,
                                                                      session: dict[str, Any]) -> None:
    # JSON Schema's `integer` (what the OpenAPI contract says) admits 60.0; a boolean, a string or 60.5 is not one.
    attach = daemon.scoped(session["id"], "/attach")
    for wrong in (True, "60", 60.5, None):
        answer = daemon.http.post(attach, json={"attached_to": "probe", "ttl_seconds": wrong})
        assert answer.status_code == 400, (wrong, answer.text)
        assert answer.json()["code"] == "invalid_ttl" and "ttl_seconds" in answer.json()["error"], answer.text
    taken = daemon.http.post(attach, json={"attached_to": "probe", "ttl_seconds": 60.0})
    assert taken.status_code == 200, taken.text
    lease = taken.json()["attach"]
    assert lease["attached_to"] == "probe", lease
    held = datetime.fromisoformat(lease["attach_expires_at"]) - datetime.fromisoformat(lease["attached_at"])
    assert held.total_seconds() == 60
    assert daemon.http.delete(attach, params={"attached_to": "probe"}).status_code == 200


def test_a_live_session_whose_meta_json_was_damaged_can_still_be_read_and_stopped(daemon: Daemon,
                                                                                  ws: Path) -> None:
    # Its runtime holds the truth: a stop answered 409 session_meta_invalid and the agent ran on.
    sid = daemon.create(ws)["id"]
    meta_path = daemon.home / "sessions" / sid / "meta.json"
    meta_path.write_text(meta_path.read_text().replace('"state": "active"', '"state": "zombie"'))
    assert '"zombie"' in meta_path.read_text()
    assert daemon.session(sid)["state"] == "active"
    assert daemon.http.post(daemon.scoped(sid, "/stop")).status_code == 204
    stopped = daemon.session(sid)
    assert stopped["state"] == "stopped" and stopped["stop_reason"] == "user_canceled"
    # The stop's own write put the file right.
    assert json.loads(meta_path.read_text())["state"] == "stopped"

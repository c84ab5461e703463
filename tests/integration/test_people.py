"""Several people on one daemon (issue 49), against the real daemon and the scripted agent: people and scoped
tokens made with the CLI, a `read` token that lists and tails but whose writes answer 403, a token limited to one
workspace that finds another's sessions missing (routes, streams, exports), revocation and expiry refused at once,
who answered a permission, and every write of a scripted run in `compozy audit` with its actor."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import JSON_ONLY, NO_TITLE, Daemon, module_daemon, wait_for

daemon = module_daemon(NO_TITLE)


def token(d: Daemon, user: str, *args: str) -> str:
    return str(d.cli_json("token", "create", "--user", user, *args)["secret"])


def as_person(d: Daemon, secret: str) -> httpx.Client:
    return httpx.Client(base_url=d.base_url, headers={"Authorization": f"Bearer {secret}"}, timeout=30)


def code(response: httpx.Response) -> str:
    return str(response.json().get("code"))


@pytest.fixture(scope="module")
def people(daemon: Daemon) -> dict[str, str]:
    daemon.cli_json("user", "add", "alice", "--role", "operator")
    daemon.cli_json("user", "add", "rita", "--role", "viewer")
    return {"alice": token(daemon, "alice"), "rita": token(daemon, "rita", "--scope", "read")}


@pytest.fixture(scope="module")
def two_workspaces(daemon: Daemon, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    a, b = tmp_path_factory.mktemp("ws-a"), tmp_path_factory.mktemp("ws-b")
    yield {"a": daemon.create(a), "b": daemon.create(b)}


def test_the_owner_token_and_the_socket_are_unchanged_and_user_errors_are_one_line(
        daemon: Daemon, people: dict[str, str]) -> None:
    assert daemon.http.get("/api/auth/whoami").json()["principal"]["user"] == "owner"
    again = daemon.cli("user", "add", "alice")
    assert again.returncode != 0 and len(again.stderr.strip().splitlines()) == 1 and "exists" in again.stderr
    beyond = daemon.cli("token", "create", "--user", "rita", "--scope", "approve", "-o", "json")
    assert beyond.returncode != 0 and "scope_beyond_role" in beyond.stdout + beyond.stderr
    listed = daemon.cli_json("token", "list")["tokens"]
    assert {t["user"] for t in listed} >= {"alice", "rita"}
    assert all("secret" not in t and "digest" not in t for t in listed)
    help_text = daemon.cli("token", "create", "--help").stdout
    assert "--scope" in help_text and "--workspace" in help_text and "Examples" in help_text


def test_a_read_token_lists_and_tails_but_every_write_answers_403(
        daemon: Daemon, people: dict[str, str], two_workspaces: dict[str, Any]) -> None:
    session = two_workspaces["a"]
    scoped = daemon.scoped(session["id"])
    with as_person(daemon, people["rita"]) as rita:
        assert rita.get("/api/auth/whoami").json()["principal"]["scopes"] == ["read"]
        ids = {s["id"] for s in rita.get("/api/sessions").json()["sessions"]}
        assert session["id"] in ids
        assert rita.get(scoped + "/events").status_code == 200
        with rita.stream("GET", scoped + "/stream", params={"frames": "raw"}) as stream:
            assert stream.status_code == 200
            assert stream.headers["content-type"].startswith("text/event-stream")
        writes = [("POST", "/api/sessions", {"agent_name": "scripted", "workspace_path": "/tmp"}),
                  ("POST", scoped + "/prompt", {"message": "hi"}), ("POST", scoped + "/steer", {"text": "x"}),
                  ("POST", scoped + "/interrupt", {}), ("POST", scoped + "/stop", {}),
                  ("POST", scoped + "/permissions/r1", {"decision": "approve"}),
                  ("POST", scoped + "/elicitations/r1", {"action": "cancel"}), ("DELETE", scoped, None),
                  ("POST", "/api/users", {"name": "mallory"}), ("GET", "/api/audit", None),
                  ("POST", "/api/tokens", {"user": "rita"})]
        for method, path, body in writes:
            response = rita.request(method, path, json=body, headers=JSON_ONLY)
            assert response.status_code == 403 and code(response) == "insufficient_scope", (path, response.text)
    assert daemon.session(session["id"])["state"] == "active"  # nothing of it happened


def test_a_token_limited_to_workspace_a_finds_b_missing_on_routes_streams_and_exports(
        daemon: Daemon, people: dict[str, str], two_workspaces: dict[str, Any]) -> None:
    a, b = two_workspaces["a"], two_workspaces["b"]
    secret = token(daemon, "alice", "--workspace", a["workspace_id"])
    with as_person(daemon, secret) as limited:
        listed = {s["id"] for s in limited.get("/api/sessions").json()["sessions"]}
        assert a["id"] in listed and b["id"] not in listed
        assert limited.get(daemon.scoped(a["id"])).status_code == 200
        for path in [f"/api/sessions/{b['id']}", daemon.scoped(b["id"]), daemon.scoped(b["id"], "/events"),
                     daemon.scoped(b["id"], "/stream"), daemon.scoped(b["id"], "/evidence"),
                     f"/sessions/{b['id']}/events.jsonl", daemon.scoped(b["id"], "/transcript")]:
            response = limited.get(path)
            assert response.status_code == 404 and code(response) == "session_not_found", (path, response.text)
        # A write to B is as missing as a read; one to A needs only the token's scope.
        stop_b = limited.post(daemon.scoped(b["id"], "/stop"), json={})
        assert stop_b.status_code == 404 and code(stop_b) == "session_not_found"
        create_b = limited.post("/api/sessions", json={"agent_name": "scripted", "workspace": b["workspace_id"]})
        assert create_b.status_code == 404 and code(create_b) == "workspace_not_found"
        # The dashboard lists only its workspace's sessions; routes beyond its workspaces are refused outright.
        dashboard = limited.get("/")
        assert dashboard.status_code == 200 and a["id"] in dashboard.text and b["id"] not in dashboard.text
        for path in ("/api/tasks", "/attention", "/api/attention", "/api/workspaces"):
            refused = limited.get(path)
            assert refused.status_code == 403 and code(refused) == "token_workspace_limited", path


def test_a_limited_tokens_session_page_counts_only_its_workspaces_sessions(
        daemon: Daemon, people: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> None:
    # B's sessions are newer and more than a page: filtered after paging, A's session would be on no page and the
    # total would count B's.
    a = daemon.create(tmp_path_factory.mktemp("page-a"))
    b_dir = tmp_path_factory.mktemp("page-b")
    b_ids = {daemon.create(b_dir)["id"] for _ in range(3)}
    secret = token(daemon, "alice", "--workspace", a["workspace_id"])
    with as_person(daemon, secret) as limited:
        listed = limited.get("/api/sessions", params={"limit": 2})
        assert listed.status_code == 200, listed.text
        body = listed.json()
        assert [s["id"] for s in body["sessions"]] == [a["id"]]
        assert body["page"] == {"total": 1, "limit": 2, "has_more": False}
        dashboard = limited.get("/")
        assert dashboard.status_code == 200 and a["id"] in dashboard.text
        assert not any(b in dashboard.text for b in b_ids)


def test_a_revoked_token_is_refused_at_once_and_an_expired_one_when_it_expires(
        daemon: Daemon, people: dict[str, str]) -> None:
    created = daemon.cli_json("token", "create", "--user", "alice", "--scope", "read")
    with as_person(daemon, created["secret"]) as person:
        assert person.get("/api/sessions").status_code == 200
        revoked = daemon.cli_json("token", "revoke", created["token"]["id"])
        assert revoked["token"]["state"] == "revoked"
        refused = person.get("/api/sessions")
        assert refused.status_code == 401 and code(refused) == "token_revoked"
    brief = daemon.cli_json("token", "create", "--user", "alice", "--scope", "read", "--expires", "1s")
    with as_person(daemon, brief["secret"]) as person:
        expired = wait_for(lambda: (r := person.get("/api/sessions")).status_code == 401 and r, timeout=10,
                           what="the token to expire")
        assert code(expired) == "token_expired"
    altered = created["secret"][:-1] + ("A" if created["secret"][-1] != "A" else "B")
    with as_person(daemon, altered) as person:
        assert code(person.get("/api/sessions")) == "auth_required"


def test_every_write_of_a_scripted_run_is_in_the_audit_log_with_its_actor(
        daemon: Daemon, people: dict[str, str], tmp_path: Path) -> None:
    with as_person(daemon, people["alice"]) as alice:
        created = alice.post("/api/sessions", json={"agent_name": "reader", "workspace_path": str(tmp_path)})
        assert created.status_code == 201, created.text
        sid = created.json()["session"]["id"]
        daemon.wait_state(sid, {"active"})
        scoped = daemon.scoped(sid)
        prompt = alice.post(scoped + "/prompt", json={"message": "tool write x.txt hi"}, headers=JSON_ONLY)
        assert prompt.status_code == 200, prompt.text
        turn_id = prompt.json()["prompt"]["turn_id"]
        pending = wait_for(lambda: [p for p in alice.get(scoped + "/permissions").json()["permissions"]],
                           what="a pending permission")
        request_id = pending[0]["request_id"]
        answered = alice.post(scoped + f"/permissions/{request_id}", json={"decision": "approve"})
        assert answered.status_code == 200 and answered.json()["permission"]["answered_by"] == "alice"
        turn = daemon.turn_events(sid, turn_id)
        [approval] = [e for e in turn if e["type"] == "permission" and e["content"]["decision"] == "approved"]
        assert approval["content"]["actor"]["user"] == "alice"
        assert approval["content"]["actor"]["token_id"].startswith("tok_")
        # The second answer loses and learns who was first.
        late = daemon.http.post(scoped + f"/permissions/{request_id}", json={"decision": "deny"})
        assert late.status_code == 409 and late.json()["diagnostic"]["evidence"]["answered_by"] == "alice"
        assert alice.post(scoped + "/stop", json={}).status_code == 204
        assert alice.delete(scoped).status_code == 204
    alice_token = daemon.cli_json("token", "list", "--user", "alice")["tokens"][0]["id"]

    def logged() -> list[str] | None:
        entries = daemon.cli_json("audit", "--user", "alice", "--since", "1h")["entries"]
        actions = [e["action"] for e in entries if e["session_id"] == sid or e["action"] == "session.create"]
        wanted = {"session.create", "session.prompt", "session.permission", "session.stop", "session.remove"}
        return actions if wanted <= set(actions) else None

    actions = wait_for(logged, what="every write in the audit log")
    entries = daemon.cli_json("audit", "--user", "alice")["entries"]
    assert all(e["actor"] == "alice" and e["token_id"] == alice_token for e in entries)
    assert actions.count("session.permission") == 1  # the losing answer (409) changed nothing
    assert approval["content"]["actor"]["token_id"] == alice_token



def test_one_person_holds_control_and_the_others_queue_or_take_it(
        daemon: Daemon, people: dict[str, str], tmp_path: Path) -> None:
    daemon.cli_json("user", "add", "bob", "--role", "operator")
    bob_secret = token(daemon, "bob")
    with as_person(daemon, people["alice"]) as alice, as_person(daemon, bob_secret) as bob:
        created = alice.post("/api/sessions", json={"agent_name": "scripted", "workspace_path": str(tmp_path)})
        sid = created.json()["session"]["id"]
        daemon.wait_state(sid, {"active"})
        scoped = daemon.scoped(sid)
        assert bob.get(scoped + "/control").json()["controller"] == "alice"  # the creator holds it
        refused = bob.post(scoped + "/prompt", json={"message": "hello"}, headers=JSON_ONLY)
        assert refused.status_code == 409 and code(refused) == "session_controlled_by"
        assert refused.json()["diagnostic"]["evidence"]["controller"] == "alice"
        for path, body in (("/steer", {"text": "x"}), ("/interrupt", {})):
            assert code(bob.post(scoped + path, json=body)) == "session_controlled_by"
        queued = bob.post(scoped + "/prompt", json={"message": "hello", "mode": "queue"}, headers=JSON_ONLY)
        assert queued.status_code in (200, 202), queued.text  # a queued prompt takes nothing from alice
        taken = bob.post(scoped + "/control", json={"take": True})
        assert taken.status_code == 200 and taken.json()["controller"] == "bob"
        shown = daemon.wait_event(sid, "system", title="control_taken")
        assert shown["content"]["actor"]["user"] == "bob" and "bob took control" in shown["content"]["text"]
        assert code(alice.post(scoped + "/prompt", json={"message": "hi"}, headers=JSON_ONLY)) == \
            "session_controlled_by"
    assert daemon.cli_json("session", "control", sid)["controller"] == "bob"
    assert daemon.cli_json("session", "control", sid, "--take")["controller"] == "owner"


def test_an_answer_to_the_agents_question_names_who_answered(
        daemon: Daemon, people: dict[str, str], tmp_path: Path) -> None:
    with as_person(daemon, people["alice"]) as alice:
        created = alice.post("/api/sessions", json={"agent_name": "scripted", "workspace_path": str(tmp_path)})
        sid = created.json()["session"]["id"]
        daemon.wait_state(sid, {"active"})
        scoped = daemon.scoped(sid)
        assert alice.post(scoped + "/prompt", json={"message": "ask Which color?"}, headers=JSON_ONLY).status_code \
            == 200
        [question] = wait_for(lambda: alice.get(scoped + "/elicitations").json()["elicitations"],
                              what="the agent's question")
        assert alice.post(scoped + f"/elicitations/{question['id']}", json={"action": "decline"}).status_code == 200
    answered = daemon.wait_event(sid, "system", title="elicitation_answered")
    assert answered["content"]["actor"]["user"] == "alice" and answered["content"]["text"] == "decline"


def test_a_stop_no_person_asked_for_is_the_daemons(daemon: Daemon, tmp_path: Path) -> None:
    sid = daemon.create(tmp_path)["id"]
    daemon.prompt(sid, "crash")
    daemon.wait_state(sid, {"stopped"})
    stopped = daemon.wait_event(sid, "session_stopped")
    assert stopped["content"]["actor"] == {"kind": "daemon", "label": "daemon"}
    entries = wait_for(lambda: [e for e in daemon.cli_json("audit")["entries"] if e["session_id"] == sid
                                and e["actor"] == "daemon"], what="the daemon's stop in the audit log")
    assert entries[0]["action"] == "session.stop" and entries[0]["detail"]["stop_reason"] != "user_canceled"

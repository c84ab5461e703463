"""The auth probe of issue 49, in the style of test_trust_boundary.py: every route of the OpenAPI document, the
streams and the pages, by no token, an expired one, a revoked one, and a token of each scope. No route answers
more than its scope allows, and nothing a refused request named changed."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from tests.api_checks import error, snapshot
from tests.conftest import JSON_ONLY, NO_TITLE, Daemon, module_daemon, wait_for

daemon = module_daemon(NO_TITLE)

SCOPES = ("read", "prompt", "approve", "admin")
EXTRA_READS = ["/api/sessions/catalog-stream", "{session}/stream", "/", "/sessions/{sid}",
               "/sessions/{sid}/events.jsonl", "/metrics", "/api/auth/whoami"]


def needs(method: str, path: str) -> str:
    """The scope a route should need, written from the issue's words rather than read from the daemon's table:
    reading is `read` (but who may do what, and who did it, are the admin's), answering a waiting agent is
    `approve`, the machine's upkeep and people are `admin`, the rest of the writes drive sessions: `prompt`."""
    if re.match(r"/api/(users|tokens|audit)", path):
        return "admin"
    if method == "GET":
        return "read"
    if re.search(r"/(permissions|elicitations)/[^/]+(/links)?$|/ack$", path):
        return "approve"
    if path.endswith("/repair") or (method == "DELETE" and re.fullmatch(r"/api/workspaces/[^/]+", path)):
        return "admin"
    # The machine's upkeep: worktrees pruned, memory reindexed, providers' keys and logins, config reloaded.
    if re.match(r"/api/(worktrees/prune|memory/reindex|providers/|daemon/reload)", path):
        return "admin"
    return "prompt"


def allowed(scope: str, needed: str) -> bool:
    return scope == "admin" or scope == needed or needed == "read"


@pytest.fixture(scope="module")
def world(daemon: Daemon, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    session = daemon.create(tmp_path_factory.mktemp("ws"))
    daemon.cli_json("user", "add", "ada", "--role", "admin")
    created = {scope: daemon.cli_json("token", "create", "--user", "ada", "--scope", scope) for scope in SCOPES}
    tokens = {scope: answer["secret"] for scope, answer in created.items()}
    revoked = daemon.cli_json("token", "create", "--user", "ada", "--scope", "admin")
    daemon.cli_json("token", "revoke", revoked["token"]["id"])
    expired = daemon.cli_json("token", "create", "--user", "ada", "--scope", "admin", "--expires", "1s")
    with httpx.Client(base_url=daemon.base_url, timeout=10,
                      headers={"Authorization": f"Bearer {expired['secret']}"}) as client:
        wait_for(lambda: client.get("/api/status").status_code == 401, timeout=10, what="the token to expire")
    return {"session": session, "tokens": tokens, "admin_token_id": created["admin"]["token"]["id"],
            "revoked": revoked["secret"], "expired": expired["secret"]}


def routes(daemon: Daemon, session: dict[str, Any]) -> list[tuple[str, str]]:
    """Every (method, concrete path) of the OpenAPI document, its parameters filled with the probe's session and
    workspace (and made-up ids for the rest), plus the streams and pages the document does not list."""
    document = daemon.http.get("/api/openapi.json").json()
    values = {"workspace": session["workspace_id"], "session_id": session["id"], "ref": session["workspace_id"]}
    out = []
    for template, item in document["paths"].items():
        path = re.sub(r"\{(\w+)\}", lambda m: values.get(m.group(1), "probe1"), template)
        out += [(method.upper(), path) for method in item if method in ("get", "post", "patch", "put", "delete")]
    scoped = f"/api/workspaces/{session['workspace_id']}/sessions/{session['id']}"
    out += [("GET", p.format(session=scoped, sid=session["id"])) for p in EXTRA_READS]
    assert len(out) > 60, "the probe should cover every route"
    return out


def send(client: httpx.Client, method: str, path: str) -> httpx.Response:
    if path.endswith("stream"):
        with client.stream(method, path) as response:
            if response.status_code != 200:
                response.read()  # a refusal is a JSON body; a stream's status and headers are enough
            return response
    return client.request(method, path, json=None if method == "GET" else {}, headers=JSON_ONLY)


def test_no_expired_or_revoked_token_reaches_any_route(daemon: Daemon, world: dict[str, Any]) -> None:
    before = snapshot(daemon, world["session"]["id"])
    for label, header in (("none", {}), ("expired", {"Authorization": f"Bearer {world['expired']}"}),
                          ("revoked", {"Authorization": f"Bearer {world['revoked']}"})):
        with httpx.Client(base_url=daemon.base_url, timeout=10, headers=header) as client:
            for method, path in routes(daemon, world["session"]):
                response = send(client, method, path)
                assert response.status_code == 401, (label, method, path, response.status_code)
                if response.headers["content-type"].startswith("application/json"):
                    assert response.json()["code"] in {"auth_required", "token_expired", "token_revoked"}
            if label != "none":
                refused = client.get("/api/sessions")
                error(refused, 401, f"token_{label}")
    assert snapshot(daemon, world["session"]["id"]) == before


@pytest.mark.parametrize("scope", SCOPES[:3])
def test_no_route_answers_more_than_the_token_scope_allows(daemon: Daemon, world: dict[str, Any],
                                                           scope: str) -> None:
    before = snapshot(daemon, world["session"]["id"])
    refused, reached = 0, 0
    with httpx.Client(base_url=daemon.base_url, timeout=10,
                      headers={"Authorization": f"Bearer {world['tokens'][scope]}"}) as client:
        for method, path in routes(daemon, world["session"]):
            needed = needs(method, path)
            if allowed(scope, needed):
                if method == "GET":  # a read it may make answers (writes it may make are the behaviour tests')
                    response = send(client, method, path)
                    assert response.status_code not in (401, 403), (scope, method, path, response.text[:200])
                    reached += 1
                continue
            response = send(client, method, path)
            error(response, 403, "insufficient_scope")
            assert response.json()["diagnostic"]["evidence"]["needed"] == needed, (method, path)
            refused += 1
    assert refused > 5 and reached > 20
    assert snapshot(daemon, world["session"]["id"]) == before


def test_an_admin_token_reaches_the_admin_routes(daemon: Daemon, world: dict[str, Any]) -> None:
    with httpx.Client(base_url=daemon.base_url, timeout=10,
                      headers={"Authorization": f"Bearer {world['tokens']['admin']}"}) as client:
        for path in ("/api/users", "/api/tokens", "/api/audit"):
            assert client.get(path).status_code == 200, path
        assert client.get("/api/auth/whoami").json()["principal"] == {
            "user": "ada", "token_id": world["admin_token_id"], "scopes": ["admin"], "workspaces": []}

"""Which requests a node routes to a session's owner, and the cluster token at the guard."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest

from compozy.api.guard import Guard, GuardPolicy
from compozy.api.routing import _runtime_session
from compozy_base.auth import MIN_CLUSTER_TOKEN_CHARS, cluster_token
from tests.django_env import ensure_django
from tests.unit.test_guard import POLICY, http_scope

SID = "sess_0123456789abcdef"
WS = f"/api/workspaces/ws_0123456789abcdef/sessions/{SID}"


def scope(method: str, path: str, **headers: str) -> dict[str, Any]:
    return {"type": "http", "method": method, "path": path,
            "headers": [(k.encode(), v.encode()) for k, v in headers.items()]}


@pytest.mark.parametrize(("method", "suffix"), [
    ("POST", "/prompt"), ("POST", "/stop"), ("POST", "/interrupt"), ("POST", "/steer"), ("POST", "/prompt/cancel"),
    ("DELETE", "/prompt/queue/inq_1"), ("POST", "/permissions/req-1"), ("GET", "/permissions"),
    ("POST", "/elicitations/elicit-1"), ("GET", "/elicitations"), ("DELETE", ""),
    ("POST", "/children")])
def test_work_on_a_live_runtime_is_routed(method: str, suffix: str) -> None:
    assert _runtime_session(scope(method, WS + suffix)) == SID


@pytest.mark.parametrize(("method", "path"), [
    ("GET", WS), ("GET", WS + "/events"), ("GET", WS + "/history"), ("GET", WS + "/recap"), ("GET", WS + "/stream"),
    ("GET", WS + "/prompt/queue"), ("POST", WS + "/repair"), ("GET", "/api/sessions"), ("POST", "/api/sessions"),
    ("POST", "/api/workspaces/ws_1/sessions/../etc/prompt")])
def test_reads_and_everything_else_stay_here(method: str, path: str) -> None:
    assert _runtime_session(scope(method, path)) is None


def test_a_request_routed_once_is_never_routed_again() -> None:
    assert _runtime_session(scope("POST", WS + "/prompt", **{"x-compozy-routed": "node-a"})) is None


def test_a_short_cluster_token_is_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COMPOZY_CLUSTER_TOKEN", "x" * (MIN_CLUSTER_TOKEN_CHARS - 1))
    assert cluster_token() == ""
    monkeypatch.setenv("COMPOZY_CLUSTER_TOKEN", "x" * MIN_CLUSTER_TOKEN_CHARS)
    assert cluster_token() == "x" * MIN_CLUSTER_TOKEN_CHARS


def status_through_guard(policy: GuardPolicy, request: dict[str, Any]) -> int:
    ensure_django()
    sent: list[dict[str, Any]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(Guard(app, policy)(request, receive, send))
    return int(next(m for m in sent if m["type"] == "http.response.start")["status"])


def test_the_guard_accepts_the_cluster_token_only_when_one_is_set() -> None:
    shared = "c" * 40
    request = http_scope(headers={"authorization": f"Bearer {shared}"})
    assert status_through_guard(dataclasses.replace(POLICY, cluster_token=shared), request) == 200
    assert status_through_guard(POLICY, request) == 401
    wrong = http_scope(headers={"authorization": f"Bearer {shared[:-1]}d"})
    assert status_through_guard(dataclasses.replace(POLICY, cluster_token=shared), wrong) == 401

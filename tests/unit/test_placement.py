"""Placement's order of candidates and which creates it places (compozy/api/placement.py); the nodes placed on for
real are tests/integration/test_placement.py's."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.django_env import ensure_django

ensure_django()  # placement reads the catalog's nodes: its models need Django set up

from compozy.api import placement  # noqa: E402
from compozy.api.placement import Answer, Candidate  # noqa: E402
from sessions.catalog.cluster import NodeView  # noqa: E402


def node(node_id: str, leases: int, status: str = "up", address: str = "http://n:1") -> NodeView:
    return {"id": node_id, "address": address, "pid": 1, "this_node": False, "status": status,
            "started_at": None, "last_seen": None, "leases": leases}


def test_fewest_live_agents_first_a_tie_kept_here_and_nodes_down_or_without_an_address_left_out(
        monkeypatch: pytest.MonkeyPatch) -> None:
    views = [node("c", 1), node("b", 1), node("me", 1), node("a", 3), node("down", 0, status="down"),
             node("nowhere", 0, address=""), node("z", 0)]
    monkeypatch.setattr(placement.cluster, "nodes", lambda: views)
    order = placement.candidates("me")
    assert [(c.node_id, c.live, c.here) for c in order] == [
        ("z", 0, False), ("me", 1, True), ("b", 1, False), ("c", 1, False), ("a", 3, False)]


def test_this_node_is_a_candidate_before_its_row_exists(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(placement.cluster, "nodes", lambda: [node("b", 0)])
    assert placement.candidates("me")[0] == Candidate("me", "", 0, True)


def scope(method: str, path: str, **headers: str) -> dict[str, Any]:
    return {"type": "http", "method": method, "path": path,
            "headers": [(k.encode(), v.encode()) for k, v in headers.items()]}


@pytest.mark.parametrize(("request_scope", "placed"), [
    (scope("POST", "/api/sessions"), True),
    (scope("POST", "/api/sessions", **{"x-compozy-routed": "node-a"}), False),
    (scope("POST", "/api/sessions", **{"x-compozy-placement": "here"}), False),
    (scope("POST", "/api/sessions", **{"x-compozy-placement": "anywhere"}), True),
    (scope("GET", "/api/sessions"), False),
    (scope("POST", "/api/sessions/"), False),
    (scope("POST", "/api/tasks"), False)])
def test_only_a_create_neither_forwarded_nor_pinned_is_placed(request_scope: dict[str, Any], placed: bool) -> None:
    assert placement.is_create(request_scope) is placed


def answer(status: int, code: str) -> Answer:
    body = {"error": "x", "code": code, "diagnostic": {"evidence": {"live": 2}}}
    return Answer(status, [], json.dumps(body).encode())


def test_a_full_or_draining_node_is_passed_over_any_other_answer_is_the_creates() -> None:
    assert answer(429, "agent_limit_reached").passed_over()
    assert answer(503, "daemon_draining").passed_over()
    assert not answer(201, "").passed_over()
    assert not answer(400, "invalid_request").passed_over()
    assert not answer(429, "login_rate_limited").passed_over()
    assert not Answer(502, [], b"<html>bad gateway</html>").passed_over()
    assert answer(429, "agent_limit_reached").evidence() == {"live": 2}

"""Placement: three nodes that share nothing but PostgreSQL and Redis (homes of their own, no shared sessions folder),
each with room for two agents. Creates sent to one node spread over all three, fewest live agents first; only when
every node is full is the answer 429 `agent_limit_reached`, naming each node; a freed slot on another node takes the
next create, from the CLI as from the API.

Skipped with the reason where PostgreSQL or Redis is missing."""

from __future__ import annotations

import secrets
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Daemon, start_daemon, wait_for
from tests.integration.test_scale import CLUSTER_CONFIG
from tests.shared_services import fresh_database, fresh_redis, require_postgres, require_redis

pytestmark = pytest.mark.timeout(300)

PER_NODE = 2
CONFIG = CLUSTER_CONFIG + f"[limits]\nmax_concurrent_agents = {PER_NODE}\n"
NAMES = ("node-a", "node-b", "node-c")


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Daemon]]:
    require_postgres()
    require_redis()
    root = tmp_path_factory.mktemp("placement")
    token = secrets.token_hex(24)
    started: dict[str, Daemon] = {}
    with fresh_database() as db_url, fresh_redis() as redis_url:
        try:
            for name in NAMES:
                env = {"DATABASE_URL": db_url, "REDIS_URL": redis_url, "COMPOZY_NODE_ID": name,
                       "COMPOZY_CLUSTER_TOKEN": token}
                started[name] = start_daemon(root / name, extra_config=CONFIG, env_extra=env, timeout=120)
            first = started[NAMES[0]]
            wait_for(lambda: len([n for n in first.http.get("/api/status").json()["cluster"]["nodes"]
                                  if n["status"] == "up"]) == len(NAMES), timeout=30, what="three nodes up")
            yield started
        finally:
            for daemon in reversed(list(started.values())):
                daemon.stop()


def live_leases(node: Daemon) -> dict[str, int]:
    return {n["id"]: n["leases"] for n in node.http.get("/api/status").json()["cluster"]["nodes"]}


def test_creates_spread_over_the_nodes_and_429_only_when_every_node_is_full(
        nodes: dict[str, Daemon], workspace: Path) -> None:
    a = nodes["node-a"]
    placed: list[tuple[str, str]] = []
    for _ in range(PER_NODE * len(NAMES)):
        response = a.http.post("/api/sessions", json={"agent_name": "scripted", "workspace_path": str(workspace)})
        assert response.status_code == 201, response.text
        node, sid = response.headers["x-compozy-node"], response.json()["session"]["id"]
        placed.append((node, sid))
        # The session's folder is on the node that runs it, not on the one asked.
        assert (nodes[node].home / "sessions" / sid).is_dir()
        assert node == "node-a" or not (a.home / "sessions" / sid).exists()
    # Fewest live agents first, a tie kept by the node asked: A, then B and C, then round again.
    assert [node for node, _ in placed] == ["node-a", "node-b", "node-c"] * PER_NODE
    assert Counter(node for node, _ in placed) == dict.fromkeys(NAMES, PER_NODE)
    assert live_leases(a) == dict.fromkeys(NAMES, PER_NODE)

    full = nodes["node-b"].http.post("/api/sessions",
                                     json={"agent_name": "scripted", "workspace_path": str(workspace)})
    assert full.status_code == 429, full.text
    body = full.json()
    assert body["code"] == "agent_limit_reached"
    evidence = body["diagnostic"]["evidence"]["nodes"]
    assert sorted(n["node_id"] for n in evidence) == sorted(NAMES)
    assert all(n["live"] == PER_NODE and n["max_concurrent_agents"] == PER_NODE for n in evidence)

    # A slot freed on C (its session stopped through A, routed to C): the CLI on B creates there.
    on_c = next(sid for node, sid in placed if node == "node-c")
    stopped = a.http.post(a.scoped(on_c, "/stop"))
    assert stopped.status_code == 204, stopped.text
    wait_for(lambda: live_leases(a)["node-c"] == PER_NODE - 1, timeout=30, what="node C's lease released")
    created = nodes["node-b"].cli_json("session", "new", "--agent", "scripted", "--cwd", str(workspace))
    assert created["state"] == "active"
    assert (nodes["node-c"].home / "sessions" / created["id"]).is_dir()
    assert live_leases(a) == dict.fromkeys(NAMES, PER_NODE)


@pytest.mark.parametrize("header", [("x-compozy-routed", "node-a"), ("x-compozy-placement", "here")])
def test_a_create_forwarded_or_pinned_here_is_answered_by_the_node_asked(
        nodes: dict[str, Daemon], workspace: Path, header: tuple[str, str]) -> None:
    # A forwarded create carries X-Compozy-Routed, a pinned one X-Compozy-Placement: here. The node asked answers
    # it itself, full or not: its own 429, its own counts.
    b = nodes["node-b"]
    response = b.http.post("/api/sessions", json={"agent_name": "scripted", "workspace_path": str(workspace)},
                           headers=dict([header]))
    assert response.status_code == 429, response.text
    assert response.json()["diagnostic"]["evidence"] == {"live": PER_NODE, "max_concurrent_agents": PER_NODE}

"""Nodes of one cluster starting and restarting while the others run: a start is that node's own business. Its boot
repair and health recompute run on it (never on a node whose consumer took the message from the shared queue), and
it judges only the sessions it may: not those another live node runs, nor those stored on another node's disk.

Each test builds its own cluster (PostgreSQL database and Redis db of the test's own, as test_scale.py), with and
without a shared sessions folder."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Daemon, start_daemon, wait_for
from tests.integration.test_scale import CLUSTER_CONFIG
from tests.shared_services import fresh_database, fresh_redis, require_postgres, require_redis

pytestmark = pytest.mark.timeout(300)

RECOMPUTED = "health recomputed at boot"
BOOT_REPAIR = "boot repair: scanned"


class Nodes:
    """Daemons of one cluster, started and restarted by name; all stopped at the end."""

    def __init__(self, root: Path, env: Callable[[str], dict[str, str]]) -> None:
        self.root, self.env = root, env
        self.nodes: dict[str, Daemon] = {}

    def start(self, name: str) -> Daemon:
        node = start_daemon(self.root / f"home-{name}", extra_config=CLUSTER_CONFIG, env_extra=self.env(f"node-{name}"),
                            timeout=120)
        self.nodes[name] = node
        return node

    def restart(self, name: str) -> tuple[Daemon, int]:
        """The node stopped and started again, and where its new start's lines begin in its log."""
        old = self.nodes[name]
        old.stop()
        offset = len(old.log())
        return self.start(name), offset

    def stop_all(self) -> None:
        for node in reversed(list(self.nodes.values())):
            node.stop()


@pytest.fixture(params=["shared", "unshared"])
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Nodes]:
    require_postgres()
    require_redis()
    shared = tmp_path / "shared-sessions"
    token = secrets.token_hex(24)
    with ExitStack() as stack:
        db_url = stack.enter_context(fresh_database())
        redis_url = stack.enter_context(fresh_redis())

        def env(node: str) -> dict[str, str]:
            extra = {"COMPOZY_SESSIONS_DIR": str(shared)} if request.param == "shared" else {}
            return {"DATABASE_URL": db_url, "REDIS_URL": redis_url, "COMPOZY_NODE_ID": node,
                    "COMPOZY_CLUSTER_TOKEN": token, **extra}

        if request.param == "shared":
            shared.mkdir()
        nodes = Nodes(tmp_path, env)
        try:
            yield nodes
        finally:
            nodes.stop_all()


def health(node: Daemon, session_id: str) -> dict[str, Any]:
    response = node.http.get(node.scoped(session_id, "/health"))
    assert response.status_code == 200, response.text
    return response.json()["health"]


def recomputed(node: Daemon, offset: int = 0) -> bool:
    return RECOMPUTED in node.log()[offset:]


def test_a_node_restarting_leaves_the_health_of_the_other_nodes_sessions_alone(
        cluster: Nodes, workspace: Path) -> None:
    # B's boot recompute derived every session from its own runtime facts: A's idle session became
    # detached|unknown (shared folder) or detached|stale "session metadata missing" (none), not attachable, no wake.
    a = cluster.start("a")
    cluster.start("b")
    idle = a.create(workspace)["id"]
    done = a.create(workspace)["id"]
    assert a.http.post(a.scoped(done, "/stop")).status_code == 204
    before = health(a, idle)
    assert (before["state"], before["health"], before["attachable"]) == ("idle", "healthy", True)
    assert health(a, done)["state"] == "stopped"

    b, offset = cluster.restart("b")
    wait_for(lambda: recomputed(b, offset), timeout=30, what="node B's boot recompute")
    after = health(a, idle)
    assert (after["state"], after["health"], after["attachable"], after["eligible_for_wake"]) == \
        ("idle", "healthy", True, before["eligible_for_wake"]), after
    assert after["last_error"] is None
    stopped = health(a, done)
    assert (stopped["state"], stopped["health"], stopped["last_error"]) == ("stopped", "dead", None), stopped
    assert a.http.post(a.scoped(idle, "/stop")).status_code == 204


def wake_service(node: Daemon) -> dict[str, Any]:
    return next(i for i in node.cli_json("doctor", "--only", "daemon")["items"] if i["id"] == "wake_service")


@pytest.mark.parametrize("cluster", ["unshared"], indirect=True)
def test_each_node_runs_its_own_boot_repair_and_health_recompute_when_started_beside_others(cluster: Nodes) -> None:
    # Boot repair and the wake cycle went through the shared queue: A's consumer ran B's and C's boot repair (over
    # A's own folder) and kept their "recomputed" mark, so B's wakes waited (doctor: wake_service warn) for minutes.
    a = cluster.start("a")
    wait_for(lambda: recomputed(a), timeout=30, what="node A's boot recompute")
    later = []
    for name in ("b", "c"):
        time.sleep(2)
        later.append(cluster.start(name))
    for node in later:
        wait_for(lambda node=node: BOOT_REPAIR in node.log() and recomputed(node), timeout=30,
                 what=f"{node.home.name}'s own boot repair and health recompute")
        wait_for(lambda node=node: wake_service(node)["title"] != "Wake service waiting", timeout=30,
                 what=f"{node.home.name}'s wake service past its health recompute")
    time.sleep(3)  # a start's repair, had it gone to A, would be in A's log by now
    assert a.log().count(BOOT_REPAIR) == 1, a.log()
    assert a.log().count(RECOMPUTED) == 1

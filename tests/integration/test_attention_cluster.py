"""Two nodes, one outbox: every node's webhook thread polls the shared catalog, and the compare-and-set claim lets
one node make each attempt, so each event reaches the receiver once (issue 31).

Runs against the machine's PostgreSQL and Redis on loopback (a database and a Redis db of the test's own); skipped
with the reason where either is missing."""

from __future__ import annotations

import secrets
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import Daemon, start_daemon, wait_for
from tests.integration.test_scale import CLUSTER_CONFIG
from tests.shared_services import fresh_database, fresh_redis, require_postgres, require_redis
from tests.webhook_receiver import Receiver, webhook_config

SECRET = "whsec-cluster-0123456789abcdef"
TURNS = 4

pytestmark = pytest.mark.timeout(300)


def outbox(node: Daemon) -> dict[str, int]:
    return dict(node.cli_json("doctor", "--only", "webhooks")["items"][0]["evidence"]["counts"])


def test_two_nodes_deliver_each_event_once(tmp_path: Path) -> None:
    require_postgres()
    require_redis()
    receiver = Receiver()  # down while the events pile up, so both nodes' threads compete for every row
    shared = tmp_path / "shared-sessions"
    shared.mkdir()
    config = CLUSTER_CONFIG + webhook_config(receiver.url, SECRET, ["turn_finished"])
    token = secrets.token_hex(24)
    with fresh_database() as db_url, fresh_redis() as redis_url:
        def env(node: str) -> dict[str, str]:
            return {"DATABASE_URL": db_url, "REDIS_URL": redis_url, "COMPOZY_SESSIONS_DIR": str(shared),
                    "COMPOZY_NODE_ID": node, "COMPOZY_CLUSTER_TOKEN": token}

        a = start_daemon(tmp_path / "home-a", extra_config=config, env_extra=env("node-a"), timeout=120)
        b: Daemon | None = None
        try:
            b = start_daemon(tmp_path / "home-b", extra_config=config, env_extra=env("node-b"), timeout=120)
            workspace = tmp_path / "repo"
            workspace.mkdir()
            on_a, on_b = a.create(workspace)["id"], b.create(workspace)["id"]
            for n in range(TURNS):
                a.run_turn(on_a, f"say a{n}")
                b.run_turn(on_b, f"say b{n}")
            wait_for(lambda: outbox(a)["pending"] == 2 * TURNS, what="every event in the shared outbox")
            receiver.start()
            wait_for(lambda: outbox(b)["delivered"] == 2 * TURNS, timeout=120, what="every event delivered")
            ids = Counter(r.payload["id"] for r in receiver.received("turn_finished"))
            assert len(ids) == 2 * TURNS and set(ids.values()) == {1}, ids
            sessions = Counter(r.payload["session_id"] for r in receiver.received("turn_finished"))
            assert sessions == {on_a: TURNS, on_b: TURNS}
            assert all(r.signed_with(SECRET) for r in receiver.received())
        finally:
            if b is not None:
                b.stop()
            a.stop()
            receiver.stop()

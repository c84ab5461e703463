"""A node whose PostgreSQL catalog goes away and comes back: while it is gone, work on a session answers a coded
503 `catalog_unavailable` in the API's error shape (the CLI: one line, exit 69); once it is back, the same node works
again without a restart. The catalog is reached through a TCP proxy (tests/tcp_proxy.py) the test cuts and restores.

Skipped with the reason where PostgreSQL or Redis is missing (the embedded default never needs them)."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Daemon, start_daemon, wait_for
from tests.integration.test_scale import CLUSTER_CONFIG
from tests.shared_services import fresh_database, fresh_redis, require_postgres, require_redis
from tests.tcp_proxy import TcpProxy, proxied

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def outage(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Daemon, TcpProxy]]:
    require_postgres()
    require_redis()
    root = tmp_path_factory.mktemp("outage")
    with fresh_database() as db_url, fresh_redis() as redis_url, proxied(db_url) as proxy:
        env = {"DATABASE_URL": proxy.url(db_url), "REDIS_URL": redis_url, "COMPOZY_NODE_ID": "node-o",
               "COMPOZY_CLUSTER_TOKEN": secrets.token_hex(24)}
        node = start_daemon(root / "home", extra_config=CLUSTER_CONFIG, env_extra=env, timeout=120)
        try:
            yield node, proxy
        finally:
            node.stop()


def test_work_while_the_catalog_is_gone_is_a_coded_503_and_the_node_recovers_without_a_restart(
        outage: tuple[Daemon, TcpProxy], workspace: Path) -> None:
    # After a short outage every prompt and stop on the node answered daphne's HTML 500 until a daemon restart: the
    # lease lookup kept its dead connection (and the CLI, finding no X-Compozy-Home, blamed another home's daemon).
    node, proxy = outage
    sid = node.create(workspace)["id"]
    assert node.run_turn(sid, "stream 2")
    proxy.cut()
    try:
        refused = node.prompt(sid, "stream 1")
        assert refused.status_code == 503, refused.text
        assert refused.json()["code"] == "catalog_unavailable", refused.text
        cli = node.cli("session", "prompt", sid, "stream 1", "-o", "json")
        assert cli.returncode == 69, (cli.returncode, cli.stderr)
        assert json.loads(cli.stderr)["code"] == "catalog_unavailable", cli.stderr
        # `compozy status` says what is wrong in one line (it printed nothing, exit 69).
        status = node.cli("status")
        assert status.returncode == 69, (status.returncode, status.stdout, status.stderr)
        assert status.stderr.count("\n") == 1 and "catalog database does not answer" in status.stderr, status.stderr
        # doctor's checks that need the catalog fail in one line each (a driver's message spanned several).
        doctor = node.cli("doctor", "--only", "cluster", "-o", "json")
        failed = [i for i in json.loads(doctor.stdout)["items"] if i["severity"] == "error"]
        assert failed and all("\n" not in i["message"] for i in failed), failed
    finally:
        proxy.restore()
    # The same node, no restart: the next prompts run.
    accepted = wait_for(lambda: (r := node.prompt(sid, "stream 2")).status_code == 200 and r, timeout=60,
                        what="a prompt accepted once the catalog is back")
    node.turn_events(sid, accepted.json()["prompt"]["turn_id"], timeout=60)
    assert node.http.post(node.scoped(sid, "/stop")).status_code == 204

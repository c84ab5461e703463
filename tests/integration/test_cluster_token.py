"""A cluster token that cannot work is said, not ignored: a node given one under 32 characters logs it at start and
`compozy status` / `doctor --only cluster` call it refused; a node whose token another node does not share gets a
coded 502 `cluster_token_rejected` naming that node when it routes work there, not the owner's 401 passed on as if
the caller's own CLI lacked a token.

Skipped with the reason where PostgreSQL or Redis is missing."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Daemon, start_daemon, wait_for
from tests.integration.test_scale import CLUSTER_CONFIG
from tests.shared_services import fresh_database, fresh_redis, require_postgres, require_redis

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Daemon, Daemon, Daemon]]:
    """A with a good token, B with another good one (A refuses it), C with one too short."""
    require_postgres()
    require_redis()
    root = tmp_path_factory.mktemp("tokens")
    tokens = {"node-a": secrets.token_hex(24), "node-b": secrets.token_hex(24), "node-c": "short-secret"}
    with fresh_database() as db_url, fresh_redis() as redis_url:
        started: list[Daemon] = []
        try:
            for node, token in tokens.items():
                env = {"DATABASE_URL": db_url, "REDIS_URL": redis_url, "COMPOZY_NODE_ID": node,
                       "COMPOZY_CLUSTER_TOKEN": token}
                started.append(start_daemon(root / node, extra_config=CLUSTER_CONFIG, env_extra=env, timeout=120))
            yield started[0], started[1], started[2]
        finally:
            for daemon in reversed(started):
                daemon.stop()


def test_a_short_cluster_token_is_logged_and_shown_refused_by_status_and_doctor(
        nodes: tuple[Daemon, Daemon, Daemon], workspace: Path) -> None:
    a, _, c = nodes
    assert c.log().count("cluster token refused") == 1
    token = c.cli_json("status")["cluster"]["cluster_token"]
    assert token["status"] == "refused" and "too short" in token["reason"]
    assert "too short" in c.cli("status").stdout
    checked = c.cli("doctor", "--only", "cluster", "-o", "json")
    assert checked.returncode == 1  # a failed check
    doctor = {i["id"]: i for i in json.loads(checked.stdout)["items"]}
    assert doctor["cluster_token"]["severity"] == "error" and "too short" in doctor["cluster_token"]["message"]
    assert {i["id"]: i for i in a.cli_json("doctor", "--only", "cluster")["items"]}["cluster_token"]["severity"] == "ok"
    # Work C cannot route says why.
    sid = a.create(workspace)["id"]
    refused = c.cli("session", "stop", sid)
    assert refused.returncode != 0 and "too short" in refused.stderr, refused.stderr
    assert a.http.post(a.scoped(sid, "/stop")).status_code == 204


def test_work_routed_to_a_node_that_refuses_our_cluster_token_is_a_coded_502_naming_it(
        nodes: tuple[Daemon, Daemon, Daemon], workspace: Path) -> None:
    a, b, _ = nodes
    sid = a.create(workspace)["id"]
    wait_for(lambda: any(s["id"] == sid for s in b.http.get("/api/sessions").json()["sessions"]), timeout=10,
             what="B to list it")
    routed = b.http.post(a.scoped(sid, "/prompt"), json={"message": "stream 1"}, headers={"Accept": "application/json"})
    assert routed.status_code == 502, routed.text
    assert routed.json()["code"] == "cluster_token_rejected" and "node-a" in routed.json()["error"]
    cli = b.cli("session", "stop", sid, "-o", "json")
    assert cli.returncode == 69, (cli.returncode, cli.stderr)
    assert json.loads(cli.stderr)["code"] == "cluster_token_rejected"
    assert a.http.post(a.scoped(sid, "/stop")).status_code == 204

"""`GET /healthz` and `GET /readyz`: answered without the token and whatever the Host (an orchestrator probes the pod's
address), saying nothing but ok / ready; everything else still needs the token and a served Host. `/readyz` fails
while the catalog database is unreachable (cut through the test's TCP proxy) and recovers when it answers again.
"""

from __future__ import annotations

import secrets
from pathlib import Path

import httpx

from tests.conftest import Daemon, start_daemon, wait_for
from tests.integration.test_scale import CLUSTER_CONFIG
from tests.shared_services import fresh_database, fresh_redis, require_postgres, require_redis
from tests.tcp_proxy import proxied

POD_HOST = {"Host": "10.42.0.7:2123"}  # what a kubelet sends: the pod's IP, never a loopback name


def test_healthz_answers_ok_without_a_token_from_any_host(daemon: Daemon) -> None:
    with httpx.Client(base_url=daemon.base_url) as anonymous:
        response = anonymous.get("/healthz", headers=POD_HOST)
        assert response.status_code == 200
        assert response.json() == {"status": "ok"}
        assert "x-compozy-home" not in response.headers  # the home's path is the token holder's to learn
        head = anonymous.head("/healthz", headers=POD_HOST)
        assert head.status_code == 200 and head.content == b""


def test_readyz_says_ready_with_its_checks_and_nothing_more(daemon: Daemon) -> None:
    with httpx.Client(base_url=daemon.base_url) as anonymous:
        response = anonymous.get("/readyz", headers=POD_HOST)
    assert response.status_code == 200, response.text
    assert response.json() == {"status": "ready", "checks": {"database": "ok", "store": "ok"}}


def test_only_the_two_probes_pass_without_the_token_or_a_served_host(daemon: Daemon) -> None:
    with httpx.Client(base_url=daemon.base_url) as anonymous:
        for path in ("/healthz/", "/healthz/x", "/readyz.json", "/api/status", "/metrics"):
            refused = anonymous.get(path)
            assert refused.status_code == 401, (path, refused.status_code)
        for method in ("POST", "PUT", "DELETE"):
            refused = anonymous.request(method, "/healthz")
            assert refused.status_code == 401, (method, refused.status_code)
        # With the token, another path from a Host that is not served is still refused.
        refused = anonymous.get("/api/status", headers={**POD_HOST, **daemon.auth})
        assert refused.status_code == 400 and refused.json()["code"] == "host_not_allowed"


def test_readyz_fails_while_the_database_is_unreachable_and_recovers(tmp_path: Path) -> None:
    require_postgres()
    require_redis()
    with fresh_database() as db_url, fresh_redis() as redis_url, proxied(db_url) as proxy:
        env = {"DATABASE_URL": proxy.url(db_url), "REDIS_URL": redis_url, "COMPOZY_NODE_ID": "node-r",
               "COMPOZY_CLUSTER_TOKEN": secrets.token_hex(24)}
        node = start_daemon(tmp_path / "home", extra_config=CLUSTER_CONFIG, env_extra=env, timeout=120)
        try:
            with httpx.Client(base_url=node.base_url, timeout=10) as anonymous:
                assert anonymous.get("/readyz").status_code == 200
                proxy.cut()
                down = wait_for(lambda: (r := anonymous.get("/readyz")).status_code == 503 and r, timeout=30,
                                what="readyz to fail with the database cut")
                body = down.json()
                assert body["code"] == "not_ready"
                checks = body["diagnostic"]["evidence"]["checks"]
                assert checks["database"] in ("unreachable", "timeout") and checks["store"] == "ok"
                assert "127.0.0.1" not in down.text and "postgres" not in down.text.lower()
                # Liveness is not readiness: the process still answers.
                assert anonymous.get("/healthz").json() == {"status": "ok"}
                assert "readyz: the catalog database" in node.log() or "readyz: the database" in node.log()
                proxy.restore()
                wait_for(lambda: anonymous.get("/readyz").status_code == 200, timeout=30,
                         what="readyz to recover with the database back")
        finally:
            node.stop()

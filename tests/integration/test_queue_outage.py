"""A node whose Redis (huey's queue, the doorbells) does not answer: the daemon says so in one log line, then at
growing intervals, never a traceback per attempt; `compozy status` shows Redis failing; once Redis answers again the
log says the queue works again. Redis is reached through a TCP proxy the test cuts (tests/tcp_proxy.py).

Skipped with the reason where PostgreSQL or Redis is missing."""

from __future__ import annotations

import secrets
import time
from pathlib import Path

import pytest

from tests.conftest import start_daemon, wait_for
from tests.integration.test_scale import CLUSTER_CONFIG
from tests.shared_services import fresh_database, fresh_redis, require_postgres, require_redis
from tests.tcp_proxy import proxied

pytestmark = pytest.mark.timeout(300)

OUTAGE_SECONDS = 12.0


def test_a_job_queue_that_does_not_answer_is_logged_once_then_at_growing_intervals(tmp_path: Path) -> None:
    # huey's two workers and its scheduler logged `Error reading from queue` with a traceback at every attempt:
    # 5,182 lines (202 tracebacks) in 12 s, the ticker one traceback per job besides.
    require_postgres()
    require_redis()
    with fresh_database() as db_url, fresh_redis() as redis_url, proxied(redis_url) as proxy:
        proxy.cut(refuse=True)  # the port is known, nothing listens on it
        env = {"DATABASE_URL": db_url, "REDIS_URL": proxy.url(redis_url), "COMPOZY_NODE_ID": "node-q",
               "COMPOZY_CLUSTER_TOKEN": secrets.token_hex(24)}
        node = start_daemon(tmp_path / "home", extra_config=CLUSTER_CONFIG, env_extra=env, timeout=120)
        try:
            time.sleep(OUTAGE_SECONDS)
            log = node.log()
            assert "Traceback" not in log, log[-3000:]
            queue = [line for line in log.splitlines() if "job queue does not answer" in line]
            assert 1 <= len(queue) <= 2, queue  # at 0 s and 10 s; the next not before 30 s
            assert len(log.splitlines()) < 30, log[-3000:]
            assert node.cli_json("status")["cluster"]["services"]["redis"]["status"] == "error"
            proxy.restore()
            wait_for(lambda: "job queue: working again" in node.log(), timeout=30, what="the queue working again")
            assert "Traceback" not in node.log()
        finally:
            node.stop()

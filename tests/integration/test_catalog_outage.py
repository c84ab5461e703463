"""A node whose PostgreSQL catalog goes away and comes back: while it is gone, work on a session answers a coded
503 `catalog_unavailable` in the API's error shape (the CLI: one line, exit 69); once it is back, the same node works
again without a restart. The catalog is reached through a TCP proxy of the test's own that it cuts and restores.

Skipped with the reason where PostgreSQL or Redis is missing (the embedded default never needs them)."""

from __future__ import annotations

import contextlib
import json
import secrets
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse, urlunparse

import pytest

from tests.conftest import Daemon, start_daemon, wait_for
from tests.integration.test_scale import CLUSTER_CONFIG
from tests.shared_services import fresh_database, fresh_redis, require_postgres, require_redis

pytestmark = pytest.mark.timeout(300)


class Proxy:
    """127.0.0.1:<port> → target, one thread per direction; `cut()` closes the listener and every connection
    (the database is gone), `restore()` listens on the same port again."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = 0
        self._listener: socket.socket | None = None
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()

    def restore(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def cut(self) -> None:
        with self._lock:
            conns, self._conns = self._conns, []
            listener, self._listener = self._listener, None
        for sock in [*conns, *([listener] if listener else [])]:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._conns += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


@pytest.fixture(scope="module")
def outage(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Daemon, Proxy]]:
    require_postgres()
    require_redis()
    root = tmp_path_factory.mktemp("outage")
    with fresh_database() as db_url, fresh_redis() as redis_url:
        parsed = urlparse(db_url)
        proxy = Proxy((parsed.hostname or "127.0.0.1", parsed.port or 5432))
        proxy.restore()
        proxied = urlunparse(parsed._replace(netloc=f"{parsed.username}@127.0.0.1:{proxy.port}"))
        env = {"DATABASE_URL": proxied, "REDIS_URL": redis_url, "COMPOZY_NODE_ID": "node-o",
               "COMPOZY_CLUSTER_TOKEN": secrets.token_hex(24)}
        node = start_daemon(root / "home", extra_config=CLUSTER_CONFIG, env_extra=env, timeout=120)
        try:
            yield node, proxy
        finally:
            node.stop()
            proxy.cut()


def test_work_while_the_catalog_is_gone_is_a_coded_503_and_the_node_recovers_without_a_restart(
        outage: tuple[Daemon, Proxy], workspace: Path) -> None:
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

"""Three nodes that share nothing but PostgreSQL and Redis (issue 46): homes of their own, no COMPOZY_SESSIONS_DIR,
each node reaching the database through a TCP proxy the test can cut, node B's clock 60 s fast and node C's 60 s
slow (`COMPOZY_TEST_CLOCK_OFFSET`).

- skewed clocks fence nothing: leases run on the database's clock;
- a fenced node's late batches are refused by the database (its row count unchanged);
- the database cut for `OUTAGE_SECONDS` under streaming sessions: none stops, the streams go on, and every
  acknowledged event reaches the database once it is back (no node fails another's sessions over meanwhile);
- kill -9 of an owner mid-turn: every event its viewer saw is readable on a survivor at once (events, history, the
  live tail, evidence), and the session continues there after the TTL.

The outage is 20 s by default, not the issue's 60 (`COMPOZY_TEST_OUTAGE_SECONDS=60` runs that): with a 3 s TTL it
is already seven TTLs, which is the property; a minute more of CI buys nothing else. 2 nodes x 2 sessions stream
through it (C, idle, reconnects first: it is the node that must not fail the others over).
"""

from __future__ import annotations

import io
import os
import secrets
import signal
import sqlite3
import tarfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, closing
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import Daemon, start_daemon, wait_for
from tests.integration.test_scale import CLUSTER_CONFIG, LEASE_TTL
from tests.shared_services import fresh_database, fresh_redis, require_postgres, require_redis
from tests.sse import Frame, frames, open_stream
from tests.tcp_proxy import TcpProxy, proxied

OUTAGE_SECONDS = float(os.environ.get("COMPOZY_TEST_OUTAGE_SECONDS") or 20)
# Streaming sessions per node through the outage: 2 on two nodes by default; `COMPOZY_TEST_OUTAGE_SESSIONS=3` puts 3
# on each of the three (the figure, with COMPOZY_TEST_OUTAGE_SECONDS=60: run by hand, a few minutes).
OUTAGE_SESSIONS = int(os.environ.get("COMPOZY_TEST_OUTAGE_SESSIONS") or 0)
SKEW = {"node-a": 0, "node-b": 60, "node-c": -60}

pytestmark = pytest.mark.timeout(420)


@dataclass
class Node:
    daemon: Daemon
    proxy: TcpProxy
    name: str


@dataclass
class Cluster:
    a: Node
    b: Node
    c: Node
    database_url: str

    @property
    def nodes(self) -> list[Node]:
        return [self.a, self.b, self.c]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    require_postgres()
    require_redis()
    root = tmp_path_factory.mktemp("cluster-data")
    token = secrets.token_hex(24)
    with fresh_database() as db_url, fresh_redis() as redis_url, ExitStack() as stack:
        started: list[Node] = []
        try:
            for name in ("node-a", "node-b", "node-c"):
                proxy = stack.enter_context(proxied(db_url))
                env = {"DATABASE_URL": proxy.url(db_url), "REDIS_URL": redis_url, "COMPOZY_NODE_ID": name,
                       "COMPOZY_CLUSTER_TOKEN": token, "COMPOZY_TEST_CLOCK_OFFSET": str(SKEW[name])}
                daemon = start_daemon(root / f"home-{name[-1]}", extra_config=CLUSTER_CONFIG, env_extra=env,
                                      timeout=120)
                started.append(Node(daemon, proxy, name))
            yield Cluster(started[0], started[1], started[2], database_url=db_url)
        finally:
            for node in reversed(started):
                node.daemon.stop()


def db_rows(cluster: Cluster, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(cluster.database_url) as conn:
        return conn.execute(sql, params).fetchall()


def copied_ids(cluster: Cluster, session_id: str) -> list[str]:
    return [r[0] for r in db_rows(cluster, "SELECT event_id FROM compozy_event_copy WHERE session_id = %s"
                                           " ORDER BY sequence", session_id)]


def local_ids(node: Node, session_id: str) -> list[str]:
    path = node.daemon.home / "sessions" / session_id / "events.db"
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
        return [r[0] for r in conn.execute("SELECT id FROM events ORDER BY sequence")]


def _in_database(cluster: Cluster, node: Node, session_id: str) -> Callable[[], bool]:
    """Whether the database holds exactly the rows of the node's events.db."""
    return lambda: copied_ids(cluster, session_id) == local_ids(node, session_id)


def lease_of(cluster: Cluster, session_id: str) -> tuple[str, str, Any] | None:
    rows = db_rows(cluster, "SELECT node_id, run, expires_at FROM compozy_sessions_sessionlease"
                            " WHERE session_id = %s", session_id)
    return rows[0] if rows else None


def expiry(cluster: Cluster, session_id: str) -> datetime:
    lease = lease_of(cluster, session_id)
    assert lease is not None, f"{session_id} has no lease"
    expires: datetime = lease[2]
    return expires


class Viewer(threading.Thread):
    """Follows a session's raw stream on one node from `after`, keeping every frame, until `done` or closed."""

    def __init__(self, node: Daemon, session_id: str, after: int = 0, until_done: bool = True) -> None:
        super().__init__(daemon=True)
        self.node, self.session_id, self.after, self.until_done = node, session_id, after, until_done
        self.path = node.scoped(session_id, "/stream")
        self.frames: list[Frame] = []
        self.connected = threading.Event()
        self.error: BaseException | None = None
        self.start()

    def run(self) -> None:
        try:
            with self.node.client(timeout=httpx.Timeout(10, read=120)) as client, \
                    open_stream(client, self.path, {"frames": "raw"}, self.after) as response:
                assert response.status_code == 200, response.read()
                self.connected.set()
                for frame in frames(response):
                    if frame.id:
                        self.frames.append(frame)
                    if self.until_done and frame.event == "done":
                        return
        except BaseException as exc:  # noqa: BLE001 - the test reads it
            self.error = exc

    @property
    def ids(self) -> list[str]:
        return [f.data["id"] for f in self.frames if isinstance(f.data, dict) and "id" in f.data]

    @property
    def sequences(self) -> list[int]:
        return [int(f.id or 0) for f in self.frames]


def test_clocks_a_minute_fast_and_slow_fence_no_session(cluster: Cluster, workspace: Path) -> None:
    # A node 30 s fast stopped every other node's sessions within seconds: each node judged expiry by its own clock.
    sessions = {node.name: node.daemon.create(workspace)["id"] for node in cluster.nodes}
    for node in cluster.nodes:
        assert node.daemon.run_turn(sessions[node.name], "stream 2")
    first = {sid: expiry(cluster, sid) for sid in sessions.values()}
    # Renewed for three TTLs on every node: each lease's expiry moved on by them (the database's clock), and no
    # node 60 s ahead took a lease it judged expired.
    def renewed_for_three_ttls() -> bool:
        return all((expiry(cluster, sid) - expires).total_seconds() >= 3 * LEASE_TTL for sid, expires in first.items())

    wait_for(renewed_for_three_ttls, timeout=60, what="three TTLs of renewals")
    for node in cluster.nodes:
        sid = sessions[node.name]
        lease = lease_of(cluster, sid)
        assert lease is not None and lease[0] == node.name and not lease[1].startswith("fenced:"), lease
        assert node.daemon.session(sid)["state"] == "active"
        # A batch written now still lands in the database: not fenced.
        assert node.daemon.run_turn(sid, "stream 2")
        wait_for(_in_database(cluster, node, sid), timeout=10, what="the turn in the database")
        assert "refused by the database" not in node.daemon.log()
    # Stamps are the node's own clock (the skew is real): node B's rows are a minute ahead of node A's (more than
    # the seconds between their turns), and node C's, run after A's, a minute behind.
    def stamp(node: Node) -> datetime:
        return datetime.fromisoformat(node.daemon.all_events(sessions[node.name])[-1]["timestamp"])

    a_stamp, b_stamp, c_stamp = stamp(cluster.a), stamp(cluster.b), stamp(cluster.c)
    assert (b_stamp - a_stamp).total_seconds() > 30, (a_stamp, b_stamp)
    assert c_stamp < a_stamp, (a_stamp, c_stamp)
    for sid in sessions.values():
        owner = next(n for n in cluster.nodes if sessions[n.name] == sid)
        assert owner.daemon.http.post(owner.daemon.scoped(sid, "/stop")).status_code == 204


def test_a_fenced_nodes_late_batch_is_refused_by_the_database(cluster: Cluster, workspace: Path) -> None:
    a = cluster.a
    sid = a.daemon.create(workspace)["id"]
    accepted = a.daemon.prompt(sid, "slow 300 0.03")
    assert accepted.status_code == 200, accepted.text
    wait_for(lambda: len(copied_ids(cluster, sid)) >= 5, timeout=30, what="the turn's first rows in the database")
    # A survivor's failover, as cluster.claim_expired writes it: the lease becomes a fence on A's run.
    db_rows(cluster, "UPDATE compozy_sessions_sessionlease SET run = 'fenced:' || run, address = '',"
                     " expires_at = now() + interval '1 day' WHERE session_id = %s RETURNING 1", sid)
    fenced_at = len(copied_ids(cluster, sid))
    # A goes on committing to its own events.db until its keeper sees the fence; the database takes none of it.
    wait_for(lambda: len(local_ids(a, sid)) > fenced_at + 3, timeout=30, what="node A to commit after the fence")
    wait_for(lambda: "refused by the database" in a.daemon.log(), timeout=30, what="the refusal in A's log")
    assert len(copied_ids(cluster, sid)) == fenced_at
    assert copied_ids(cluster, sid) == local_ids(a, sid)[:fenced_at]
    # And A stops the agent without writing: the fence stands.
    wait_for(lambda: sid not in a.daemon.http.get("/api/status").json()["cluster"]["leases"].__repr__(), timeout=30,
             what="node A to let the session go")
    lease = lease_of(cluster, sid)
    assert lease is not None and lease[1].startswith("fenced:")
    assert len(copied_ids(cluster, sid)) == fenced_at


def test_a_database_outage_stops_no_session_and_loses_no_acknowledged_event(
        cluster: Cluster, workspace: Path) -> None:
    owners = ([node for node in cluster.nodes for _ in range(OUTAGE_SESSIONS)] if OUTAGE_SESSIONS
              else [cluster.a, cluster.a, cluster.b, cluster.b])
    sessions = [node.daemon.create(workspace)["id"] for node in owners]
    chunks = int((OUTAGE_SECONDS + 12) / 0.1)
    viewers = []
    for node, sid in zip(owners, sessions, strict=True):
        viewer = Viewer(node.daemon, sid)
        assert viewer.connected.wait(30)
        viewers.append(viewer)
        assert node.daemon.prompt(sid, f"slow {chunks} 0.1").status_code == 200
    wait_for(lambda: all(len(v.frames) >= 5 for v in viewers), timeout=30, what="every stream under way")
    for node in cluster.nodes:
        node.proxy.cut()
    cut_at = time.monotonic()
    seen_at_cut = [len(v.frames) for v in viewers]
    try:
        # The streams go on through the outage (events held in each events.db), and no session stops.
        wait_for(lambda: time.monotonic() - cut_at >= OUTAGE_SECONDS and all(
            len(v.frames) > seen + 20 for v, seen in zip(viewers, seen_at_cut, strict=True)),
            timeout=OUTAGE_SECONDS + 30, what="the outage to last while the streams go on")
    finally:
        # C first: the node that, reconnecting before the owners, once failed their sessions over.
        for node in (cluster.c, cluster.a, cluster.b):
            node.proxy.restore()
    for viewer in viewers:
        viewer.join(120)
        assert not viewer.is_alive() and viewer.error is None, viewer.error
        assert viewer.frames[-1].event == "done"
        assert viewer.sequences == list(range(viewer.sequences[0], viewer.sequences[-1] + 1))  # no gap
    for node, sid, viewer in zip(owners, sessions, viewers, strict=True):
        assert node.daemon.session(sid)["state"] == "active"
        lease = lease_of(cluster, sid)
        assert lease is not None and lease[0] == node.name and not lease[1].startswith("fenced:")
        # Every acknowledged event, held through the outage, reaches the database.
        wait_for(_in_database(cluster, node, sid), timeout=60, what="the held events in the database")
        assert set(viewer.ids) <= set(copied_ids(cluster, sid))
    for node, sid in zip(owners, sessions, strict=True):
        assert node.daemon.http.post(node.daemon.scoped(sid, "/stop")).status_code == 204


def test_a_killed_owners_session_is_read_at_once_and_continued_on_a_survivor(
        cluster: Cluster, workspace: Path, tmp_path: Path) -> None:
    a, b = cluster.a, cluster.b
    elsewhere = tmp_path / "only-on-node-a"  # a workspace the survivor's machine does not have (removed below)
    elsewhere.mkdir()
    stranded = a.daemon.create(elsewhere)["id"]
    stranded_path = a.daemon.scoped(stranded)
    sid = a.daemon.create(workspace)["id"]
    scoped = a.daemon.scoped(sid)
    viewer = Viewer(a.daemon, sid)
    assert viewer.connected.wait(30)
    assert a.daemon.prompt(sid, "slow 400 0.03").status_code == 200
    wait_for(lambda: len(viewer.frames) >= 30, timeout=30, what="the viewer to see the turn stream")
    a.daemon.stop(signal.SIGKILL)
    seen = viewer.ids
    assert len(seen) >= 30

    # At once, on a survivor: events, history, the live tail and evidence hold every event the viewer saw.
    read = b.daemon.http.get(f"{scoped}/events", params={"limit": 1000})
    assert read.status_code == 200, read.text
    assert [e["id"] for e in read.json()["events"]][:len(seen)] == seen
    assert b.daemon.http.get(f"{scoped}/history").status_code == 200
    tail = Viewer(b.daemon, sid, until_done=False)
    wait_for(lambda: set(seen) <= set(tail.ids), timeout=10, what="the survivor's live tail to replay the turn")
    evidence = b.daemon.http.get(f"{scoped}/evidence")
    assert evidence.status_code == 200, evidence.text
    with tarfile.open(fileobj=io.BytesIO(evidence.content), mode="r:gz") as archive:
        exported = b"".join(archive.extractfile(m).read() for m in archive.getmembers()  # type: ignore[union-attr]
                            if m.isfile())
    assert all(event_id.encode() in exported for event_id in seen[-5:])

    # After the TTL a survivor fails it over; a prompt on B continues it there, under the same id.
    wait_for(lambda: b.daemon.session(sid)["state"] == "stopped", timeout=60, what="the failover")
    accepted = b.daemon.prompt(sid, "stream 2")
    assert accepted.status_code == 200, accepted.text
    turn = b.daemon.turn_events(sid, accepted.json()["prompt"]["turn_id"], timeout=60)
    assert any(e["type"] == "done" for e in turn)
    after = b.daemon.all_events(sid)
    assert [e["id"] for e in after][:len(seen)] == seen
    assert after == sorted(after, key=lambda e: e["sequence"])
    assert [e["sequence"] for e in after] == list(range(1, len(after) + 1))
    lease = lease_of(cluster, sid)
    assert lease is not None and lease[0] == "node-b"
    wait_for(_in_database(cluster, b, sid), timeout=10, what="B's rows in the database")

    # A session whose workspace path does not exist on the survivor's machine is not continued there, and says so.
    elsewhere.rmdir()
    wait_for(lambda: b.daemon.session(stranded)["state"] == "stopped", timeout=60, what="the other failover")
    refused = b.daemon.http.post(f"{stranded_path}/prompt", json={"message": "stream 2"},
                                 headers={"Accept": "application/json"})
    assert refused.status_code == 409, refused.text
    assert refused.json()["code"] == "workspace_unavailable"
    assert str(elsewhere) in refused.json()["error"]
    assert b.daemon.http.post(f"{scoped}/stop").status_code == 204

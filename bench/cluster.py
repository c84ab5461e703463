"""A cluster node against the single node (issue 46): `python -m bench.cluster [--sessions 4] [--chunks 5000]
[--rounds 2]`.

Each round, in the same run: a single embedded daemon (SQLite catalog, its own events.db) and one node of a
two-node cluster (PostgreSQL + Redis, each node its own disk, so every batch is also inserted into the database,
fenced by its lease, before it is acknowledged) stream SESSIONS scripted `stream CHUNKS` turns at once. Events per
second per node = chunk texts stored ÷ the wall time from the first prompt to the last `done`; the cluster node's
rows are checked to be in the database. Then failover: the cluster node is killed (SIGKILL) mid-turn and the
survivor is timed until it reads the session (its events), until it fails it over (`stopped`, after the TTL) and
until a prompt there has continued it (the turn's `done`). Prints one line per round and the medians.

Needs the machine's PostgreSQL and Redis on loopback (tests/shared_services.py). Figures on a shared 2-core
machine: compare the two sides of one round, never a single figure.
"""

from __future__ import annotations

import argparse
import secrets
import signal
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psycopg

from tests.conftest import Daemon, start_daemon, wait_for
from tests.shared_services import fresh_database, fresh_redis

LEASE_TTL = 3.0
CLUSTER_CONFIG = f'[cluster]\nlease_ttl = "{LEASE_TTL:g}s"\n'


def stream_rate(daemon: Daemon, workspace: Path, sessions: int, chunks: int) -> tuple[float, list[str]]:
    """Chunks stored a second, SESSIONS turns of CHUNKS chunks each streaming at once."""
    ids = [daemon.create(workspace)["id"] for _ in range(sessions)]
    for sid in ids:  # warm: the agent up, the store opened, the lease taken
        daemon.run_turn(sid, "stream 2")
    turns: list[str] = []
    started = time.monotonic()
    for sid in ids:
        answer = daemon.prompt(sid, f"stream {chunks}")
        assert answer.status_code == 200, answer.text
        turns.append(answer.json()["prompt"]["turn_id"])
    for sid, turn in zip(ids, turns, strict=True):
        events = daemon.turn_events(sid, turn, timeout=600)
        assert any(e["type"] == "done" for e in events)
    elapsed = time.monotonic() - started
    return sessions * chunks / elapsed, ids


def timed(what: Callable[[], object], timeout: float) -> float:
    started = time.monotonic()
    wait_for(what, timeout=timeout, what="the failover step")
    return time.monotonic() - started


def one_round(root: Path, sessions: int, chunks: int) -> dict[str, float]:
    workspace = root / "workspace"
    workspace.mkdir(parents=True)
    single = start_daemon(root / "single", timeout=120)
    try:
        alone, _ = stream_rate(single, workspace, sessions, chunks)
    finally:
        single.stop()
    token = secrets.token_hex(24)
    with fresh_database() as db_url, fresh_redis() as redis_url:
        def env(node: str) -> dict[str, str]:
            return {"DATABASE_URL": db_url, "REDIS_URL": redis_url, "COMPOZY_NODE_ID": node,
                    "COMPOZY_CLUSTER_TOKEN": token}

        a = start_daemon(root / "home-a", CLUSTER_CONFIG, env_extra=env("node-a"), timeout=120)
        b = start_daemon(root / "home-b", CLUSTER_CONFIG, env_extra=env("node-b"), timeout=120)
        try:
            clustered, ids = stream_rate(a, workspace, sessions, chunks)
            with psycopg.connect(db_url) as conn:
                copied = conn.execute("SELECT COUNT(*) FROM compozy_event_copy WHERE session_id = ANY(%s)",
                                      [ids]).fetchone()
            stored = sum(len(a.all_events(sid)) for sid in ids)
            assert copied is not None and copied[0] == stored, (copied, stored)
            failover = failover_times(a, b, ids[0])
        finally:
            b.stop()
            a.stop()
    return {"single": alone, "cluster": clustered, "ratio": clustered / alone, **failover}


def failover_times(a: Daemon, b: Daemon, sid: str) -> dict[str, float]:
    scoped = a.scoped(sid)
    assert a.prompt(sid, "slow 400 0.02").status_code == 200
    wait_for(lambda: len(a.events(sid)) > 20, timeout=30, what="the turn under way")
    a.stop(signal.SIGKILL)
    killed = time.monotonic()
    read = timed(lambda: b.http.get(f"{scoped}/events").status_code == 200, 30)
    stopped = timed(lambda: b.session(sid)["state"] == "stopped", 60) + read
    answer = b.prompt(sid, "stream 2")
    assert answer.status_code == 200, answer.text
    b.turn_events(sid, answer.json()["prompt"]["turn_id"], timeout=60)
    return {"read_s": read, "failed_over_s": stopped, "continued_s": time.monotonic() - killed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=4)
    parser.add_argument("--chunks", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    results = []
    for n in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="compozy-bench-cluster-") as tmp:
            result = one_round(Path(tmp), args.sessions, args.chunks)
        results.append(result)
        line = ", ".join(f"{k} {v:.2f}" for k, v in result.items())
        print(f"round {n + 1}: {line}", flush=True)  # noqa: T201 - the bench's output
    medians = {key: statistics.median(r[key] for r in results) for key in results[0]}
    print("median: " + ", ".join(f"{k} {v:.2f}" for k, v in medians.items()))  # noqa: T201 - the bench's output
    summary = (f"events/s per node: cluster {medians['cluster']:.0f} vs single {medians['single']:.0f} "
               f"({medians['ratio']:.2f}x, target >= 0.5x); failover: read at once in {medians['read_s']:.2f} s, "
               f"failed over in {medians['failed_over_s']:.1f} s (TTL {LEASE_TTL:g} s), continued in "
               f"{medians['continued_s']:.1f} s")
    print(summary)  # noqa: T201 - the bench's output


if __name__ == "__main__":
    threading.current_thread().name = "bench"
    main()

"""A cluster node against the single node (issue 46): `python -m bench.cluster [--sessions 4] [--chunks 20000]
[--rounds 5]`.

In the same run, side by side: a single embedded daemon (SQLite catalog, its own events.db) and node A of a two-node
cluster (PostgreSQL + Redis, each node its own disk, so every batch is also inserted into the database, fenced by its
lease, before it is acknowledged). Each round SESSIONS scripted `stream CHUNKS` turns stream at once on the single
node, then on node A (alternating, so the machine's load falls on both alike). Events per second per node = chunk
texts stored ÷ the wall time from the first prompt to the last `done`; node A's rows are checked to be in the
database. Then failover: node A is killed (SIGKILL) mid-turn and node B is timed until it reads the session (its
events: the first read, and the next), until it fails it over (`stopped`, after the TTL) and until a prompt there
has continued it (the turn's `done`). Prints one line per round, the failover and the medians.

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
from tests.integration.test_scale import LEASE_TTL, two_nodes
from tests.shared_services import fresh_database, fresh_redis


def start_sessions(daemon: Daemon, workspace: Path, sessions: int) -> list[str]:
    ids = [daemon.create(workspace)["id"] for _ in range(sessions)]
    for sid in ids:  # warm: the agent up, the store opened, the lease taken
        daemon.run_turn(sid, "stream 2")
    return ids


def stream_rate(daemon: Daemon, ids: list[str], chunks: int) -> float:
    """Chunks stored a second: one `stream CHUNKS` turn on each session at once, from the first prompt to the
    last `done`."""
    turns: list[str] = []
    started = time.monotonic()
    for sid in ids:
        answer = daemon.prompt(sid, f"stream {chunks}")
        assert answer.status_code == 200, answer.text
        turns.append(answer.json()["prompt"]["turn_id"])
    for sid, turn in zip(ids, turns, strict=True):
        events = daemon.turn_events(sid, turn, timeout=600)
        assert any(e["type"] == "done" for e in events)
    return len(ids) * chunks / (time.monotonic() - started)


def timed(what: Callable[[], object], timeout: float) -> float:
    started = time.monotonic()
    wait_for(what, timeout=timeout, what="the failover step")
    return time.monotonic() - started


def run(root: Path, sessions: int, chunks: int, rounds: int) -> list[dict[str, float]]:
    """The single node and the cluster node up side by side; their turns alternate, `rounds` times; then the
    failover, once."""
    workspace = root / "workspace"
    workspace.mkdir(parents=True)
    token = secrets.token_hex(24)
    results: list[dict[str, float]] = []
    with fresh_database() as db_url, fresh_redis() as redis_url:
        def env(node: str) -> dict[str, str]:
            return {"DATABASE_URL": db_url, "REDIS_URL": redis_url, "COMPOZY_NODE_ID": node,
                    "COMPOZY_CLUSTER_TOKEN": token}

        single = start_daemon(root / "single", timeout=120)
        try:
            with two_nodes(root, env) as (a, b):
                alone_ids = start_sessions(single, workspace, sessions)
                cluster_ids = start_sessions(a, workspace, sessions)
                for n in range(rounds):
                    alone = stream_rate(single, alone_ids, chunks)
                    clustered = stream_rate(a, cluster_ids, chunks)
                    results.append({"single": alone, "cluster": clustered, "ratio": clustered / alone})
                    line = ", ".join(f"{k} {v:.2f}" for k, v in results[-1].items())
                    print(f"round {n + 1}: {line}", flush=True)  # noqa: T201 - the bench's output
                with psycopg.connect(db_url) as conn:
                    copied = conn.execute("SELECT COUNT(*) FROM compozy_event_copy WHERE session_id = ANY(%s)",
                                          [cluster_ids]).fetchone()
                stored = sum(len(a.all_events(sid)) for sid in cluster_ids)
                assert copied is not None and copied[0] == stored, (copied, stored)
                single.stop()
                failover = failover_times(a, b, cluster_ids[0])
                print("failover: " + ", ".join(f"{k} {v:.2f}" for k, v in failover.items()))  # noqa: T201
                results[-1].update(failover)
        finally:
            single.stop()
    return results


def failover_times(a: Daemon, b: Daemon, sid: str) -> dict[str, float]:
    scoped = a.scoped(sid)
    assert a.prompt(sid, "slow 400 0.02").status_code == 200
    wait_for(lambda: len(a.events(sid)) > 20, timeout=30, what="the turn under way")
    a.stop(signal.SIGKILL)
    killed = time.monotonic()
    read = timed(lambda: b.http.get(f"{scoped}/events").status_code == 200, 30)
    again = timed(lambda: b.http.get(f"{scoped}/events").status_code == 200, 30)
    stopped = timed(lambda: b.session(sid)["state"] == "stopped", 60) + read + again
    answer = b.prompt(sid, "stream 2")
    assert answer.status_code == 200, answer.text
    b.turn_events(sid, answer.json()["prompt"]["turn_id"], timeout=60)
    return {"read_s": read, "read_again_s": again, "failed_over_s": stopped,
            "continued_s": time.monotonic() - killed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=4)
    parser.add_argument("--chunks", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="compozy-bench-cluster-") as tmp:
        results = run(Path(tmp), args.sessions, args.chunks, args.rounds)
    medians = {key: statistics.median(r[key] for r in results if key in r) for key in results[-1]}
    print("median: " + ", ".join(f"{k} {v:.2f}" for k, v in medians.items()))  # noqa: T201 - the bench's output
    summary = (f"events/s per node: cluster {medians['cluster']:.0f} vs single {medians['single']:.0f} "
               f"({medians['ratio']:.2f}x, target >= 0.5x); failover: read at once in {medians['read_s']:.2f} s, "
               f"failed over in {medians['failed_over_s']:.1f} s (TTL {LEASE_TTL:g} s), continued in "
               f"{medians['continued_s']:.1f} s")
    print(summary)  # noqa: T201 - the bench's output


if __name__ == "__main__":
    threading.current_thread().name = "bench"
    main()

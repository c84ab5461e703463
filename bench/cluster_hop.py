"""Between nodes (issue 46 point 6): `python -m bench.cluster_hop [--requests 400] [--doorbells 2000]`.

Three measurements on the machine's PostgreSQL and Redis (tests/shared_services.py; skipped with the reason without
them), each printed as p50/p95/p99 (CPU as a mean per read: it is read once over the whole loop):
1. **forwarded request**: two nodes with sessions folders of their own; a session on A; `GET /api/sessions/ID` sent
   to A directly and to B (which forwards it to A with the cluster token through its pooled client), alternating,
   REQUESTS each on kept-alive client connections. The added latency is B's minus A's, percentile by percentile
   (target < 5 ms p50 on loopback), and the CPU each node spent per read (B's is all the hop's own), which does not
   depend on what else the machine runs. Beside it, the cost the pool removes: a request to A on a new
   `httpx.AsyncClient` each time (what routing did before), against one pooled client.
2. **doorbells**: one publisher and one subscriber, DOORBELLS messages sent one at a time, each timed from its send
   to its receipt: Redis pub/sub (what channels-redis's group send rides on) against PostgreSQL `LISTEN/NOTIFY`
   on its own connection pair, same run. Then a burst: DOORBELLS sent back to back, messages per second received.
3. What the numbers decided is written in docs/architecture.md ("Between nodes").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from bench.harness import daemon_cpu_seconds
from tests.conftest import Daemon
from tests.integration.test_scale import two_nodes
from tests.shared_services import fresh_database, fresh_redis, postgres_unavailable, redis_unavailable


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)

    def at(share: float) -> float:
        return ordered[min(len(ordered) - 1, int(share * len(ordered)))]

    return {"p50": at(0.50), "p95": at(0.95), "p99": at(0.99), "n": float(len(ordered))}


def line(name: str, stats: dict[str, float], unit: str = "ms") -> str:
    return (f"{name:<44} p50 {stats['p50']:8.2f} {unit}  p95 {stats['p95']:8.2f} {unit}  "
            f"p99 {stats['p99']:8.2f} {unit}  (n={int(stats['n'])})")


def timed(get: Callable[[], httpx.Response], node: str = "") -> float:
    """Milliseconds for one GET; it must answer 200, and from `node` when given (a forwarded read)."""
    started = time.perf_counter()
    response = get()
    elapsed = (time.perf_counter() - started) * 1000
    if response.status_code != 200:
        raise RuntimeError(f"{response.status_code}: {response.text[:200]}")
    if node and response.headers.get("x-compozy-node") != node:
        raise RuntimeError("the read was answered by the node asked: it was not forwarded")
    return elapsed


def forwarded(root: Path, requests: int) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    """The reads' latencies (percentiles by name) and each node's mean CPU milliseconds per read."""
    workspace = root / "workspace"
    workspace.mkdir(parents=True)
    token = secrets.token_hex(24)
    with fresh_database() as db_url, fresh_redis() as redis_url:
        def env(node: str) -> dict[str, str]:
            return {"DATABASE_URL": db_url, "REDIS_URL": redis_url, "COMPOZY_NODE_ID": node,
                    "COMPOZY_CLUSTER_TOKEN": token}

        with two_nodes(root, env) as (a, b):
            return _forwarded(a, b, workspace, requests)


def _forwarded(a: Daemon, b: Daemon, workspace: Path, requests: int) -> tuple[dict[str, dict[str, float]],
                                                                              dict[str, float]]:
    sid = a.create(workspace)["id"]
    # The lightest routed read (one catalog row and meta.json): what the owner spends is small beside the hop.
    path = f"/api/sessions/{sid}"
    with a.client(timeout=30) as to_a, b.client(timeout=30) as to_b:
        for _ in range(20):  # warm-up: connections, the pool, Django's first requests
            timed(lambda: to_a.get(path))
            timed(lambda: to_b.get(path))
        direct, hop = [], []
        cpu_a, cpu_b = daemon_cpu_seconds(a.proc.pid), daemon_cpu_seconds(b.proc.pid)
        for _ in range(requests):
            direct.append(timed(lambda: to_a.get(path)))
            hop.append(timed(lambda: to_b.get(path), node="node-a"))
        # CPU does not depend on what else the machine runs: B's is all the hop's (it only forwards), A's
        # served both reads of each pair.
        cpu_a = (daemon_cpu_seconds(a.proc.pid) - cpu_a) * 1000 / (2 * requests)
        cpu_b = (daemon_cpu_seconds(b.proc.pid) - cpu_b) * 1000 / requests
    new_client, pooled = client_cost(a, path, requests // 2)
    a.http.post(a.scoped(sid, "/stop"))
    through, owner = percentiles(hop), percentiles(direct)
    added = {key: through[key] - owner[key] for key in ("p50", "p95", "p99")} | {"n": owner["n"]}
    # CPU is read per node over the whole loop: a mean per read, not a distribution.
    return ({"direct to the owner": owner, "through another node": through,
             "added by the hop (percentile by percentile)": added,
             "owner, a new AsyncClient per request": percentiles(new_client),
             "owner, one pooled AsyncClient": percentiles(pooled)},
            {"owner's CPU per read": cpu_a, "forwarding node's CPU per forwarded read": cpu_b})


def client_cost(node: Daemon, path: str, requests: int) -> tuple[list[float], list[float]]:
    """What routing paid per request before the pool (a new client each), against a pooled client."""
    url = node.base_url + path

    async def run() -> tuple[list[float], list[float]]:
        fresh, kept = [], []
        async with httpx.AsyncClient(headers=node.auth) as pool:
            for _ in range(requests):
                started = time.perf_counter()
                async with httpx.AsyncClient(headers=node.auth) as client:
                    (await client.get(url)).raise_for_status()
                fresh.append((time.perf_counter() - started) * 1000)
                started = time.perf_counter()
                (await pool.get(url)).raise_for_status()
                kept.append((time.perf_counter() - started) * 1000)
        return fresh, kept

    return asyncio.run(run())


def redis_doorbells(url: str, count: int) -> tuple[list[float], float]:
    import redis

    publisher, subscriber = redis.Redis.from_url(url), redis.Redis.from_url(url)
    channel = f"bench.{secrets.token_hex(4)}"
    pubsub = subscriber.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(channel)
    while pubsub.get_message(timeout=1.0) is not None:
        pass
    samples = []
    for i in range(count):
        started = time.perf_counter()
        publisher.publish(channel, json.dumps({"type": "events.appended", "sequence": i}))
        while pubsub.get_message(timeout=5.0) is None:
            pass
        samples.append((time.perf_counter() - started) * 1000)
    burst = _burst(lambda i: publisher.publish(channel, json.dumps({"sequence": i})),
                   lambda: pubsub.get_message(timeout=5.0) is not None, count)
    pubsub.close()
    publisher.close()
    subscriber.close()
    return samples, burst


def postgres_doorbells(url: str, count: int) -> tuple[list[float], float]:
    import psycopg

    channel = f"bench_{secrets.token_hex(4)}"
    with psycopg.connect(url, autocommit=True) as publisher, psycopg.connect(url, autocommit=True) as listener:
        listener.execute(f"LISTEN {channel}")

        def one() -> bool:
            return any(True for _ in listener.notifies(timeout=5.0, stop_after=1))

        samples = []
        for i in range(count):
            started = time.perf_counter()
            publisher.execute("SELECT pg_notify(%s, %s)", (channel, json.dumps({"type": "events.appended",
                                                                                 "sequence": i})))
            if not one():
                raise RuntimeError("a notification did not arrive within 5 s")
            samples.append((time.perf_counter() - started) * 1000)
        # The burst reads with one generator (a generator per message would bound the rate by its own set-up).
        stream = listener.notifies(timeout=30.0, stop_after=count)
        burst = _burst(lambda i: publisher.execute("SELECT pg_notify(%s, %s)", (channel, json.dumps({"sequence": i}))),
                       lambda: next(stream, None) is not None, count)
        stream.close()  # a suspended notifies() holds the connection's lock: closing the connection would wait
    return samples, burst


def _burst(send: Callable[[int], object], receive: Callable[[], bool], count: int) -> float:
    """Messages per second received when `count` are sent back to back from another thread."""
    started = time.perf_counter()
    sender = threading.Thread(target=lambda: [send(i) for i in range(count)])
    sender.start()
    received = 0
    while received < count and receive():
        received += 1
    sender.join()
    return received / (time.perf_counter() - started)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--doorbells", type=int, default=2000)
    args = parser.parse_args()
    missing = postgres_unavailable() or redis_unavailable()
    if missing:
        print(f"skipped: {missing}")  # noqa: T201 - a script's report
        return 2
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")  # noqa: T201
    with tempfile.TemporaryDirectory(prefix="compozy-hop-") as tmp:
        latencies, cpu = forwarded(Path(tmp), args.requests)
    for name, mean in cpu.items():
        print(f"{name:<44} mean {mean:8.2f} ms per read  (n={args.requests})")  # noqa: T201
    for name, stats in latencies.items():
        print(line(name, stats))  # noqa: T201
    with fresh_redis() as redis_url, fresh_database() as db_url:
        redis_samples, redis_rate = redis_doorbells(redis_url, args.doorbells)
        pg_samples, pg_rate = postgres_doorbells(db_url, args.doorbells)
    print(line("doorbell, Redis pub/sub", percentiles(redis_samples)))  # noqa: T201
    print(line("doorbell, PostgreSQL LISTEN/NOTIFY", percentiles(pg_samples)))  # noqa: T201
    print(f"{'burst, Redis pub/sub':<44} {redis_rate:10.0f} messages/s")  # noqa: T201
    print(f"{'burst, PostgreSQL LISTEN/NOTIFY':<44} {pg_rate:10.0f} messages/s")  # noqa: T201
    return 0


if __name__ == "__main__":
    sys.exit(main())

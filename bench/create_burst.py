"""A burst of creates (issue 33 point 4): `python -m bench.create_burst [--rounds 3] [--limit 20] [--creates 200]`.

Each round starts a fresh daemon with `[limits] max_concurrent_agents = LIMIT`, sends CREATES `POST /api/sessions`
at once (one connection each, as tests/integration/test_create_burst.py does), times `GET /api/status` on another
connection until every admitted session is active, then reads the loop lag (`event_loop.lag`: the 10 s window
ending then, which covers the burst and the starts) and stops what it created. Prints one line per round and the
medians. Figures on a shared 2-core machine: compare rounds run back to back, never a single one.

Measured 2026-12-02 (2 cores, load average 10-14 from other work), medians of the rounds, before (008609e) → after
agent start-up left the loop (the spawn on start-up threads, the create's admission on the DB thread, Django's
middleware hooks on the loop):
- limit 20, 3 rounds: `GET /api/status` at worst 1.26 → 0.77 s; loop lag p99 183 → 112 ms, max 320 → 152 ms.
- limit 60, 2 rounds: status at worst 2.86 → 1.09 s; loop lag p99 642 → 208 ms, max 1003 → 432 ms.
Every create answered (201 or 429 agent_limit_reached) in every round, before and after: the 1024 listen backlog
had already removed the resets. The lag left is the two cores shared with the agents starting and 200 client
threads: no loop callback in a traced run used over 3 ms of CPU.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import httpx

from tests.conftest import start_daemon
from tests.integration.test_create_burst import Burst


def one_round(root: Path, limit: int, creates: int) -> dict[str, float]:
    workspace = root / "workspace"
    workspace.mkdir(parents=True)
    daemon = start_daemon(root / "home", f"[limits]\nmax_concurrent_agents = {limit}\n")
    try:
        burst = Burst(daemon, workspace, creates)
        burst.run()
        created = [a.json()["session"]["id"] for a in burst.answers
                   if isinstance(a, httpx.Response) and a.status_code == 201]
        try:
            for session_id in created:
                daemon.wait_state(session_id, {"active"}, timeout=180)
        finally:
            burst.finish()
        for session_id in created:
            daemon.http.post(daemon.scoped(session_id, "/stop"))
        for session_id in created:
            daemon.wait_state(session_id, {"stopped"}, timeout=60)
    finally:
        daemon.stop()
    window = burst.lag["windows"][0]  # type: ignore[index]
    return {"created": len(created), "answered": sum(isinstance(a, httpx.Response) for a in burst.answers),
            "status_max_s": max(burst.status_seconds), "status_median_s": statistics.median(burst.status_seconds),
            "lag_p99_ms": float(window["p99_ms"]), "lag_max_ms": float(window["max_ms"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--limit", type=int, default=20)
    parser.add_argument("--creates", type=int, default=200)
    args = parser.parse_args()
    rounds = []
    for number in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="compozy-burst-") as root:
            figures = one_round(Path(root), args.limit, args.creates)
        rounds.append(figures)
        line = ", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in figures.items())
        print(f"round {number + 1}: {line}")  # noqa: T201 - the bench's output
    medians = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    print("median: " + ", ".join(f"{k} {v:.3f}" for k, v in medians.items()))  # noqa: T201 - the bench's output


if __name__ == "__main__":
    main()

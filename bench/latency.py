"""Agent-to-viewer latency: S sessions on the ticker agent, V raw-frames SSE viewers each.

Each agent_message's text is the agent's `time.time_ns()` at send time; a viewer's latency sample is its
receive time (one clock reading per socket read) minus that. The path measured: agent stdout → daemon ACP
receive loop → recorder group commit → events.db → doorbell → SSE consumer reads the store → socket → viewer.
"""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.harness import BenchDaemon, cpu_seconds, environment_note
from bench.report import BenchResult, Op, Target
from bench.sse_client import SequenceChecker, SSEStream
from sessions.store.folder import parse_time

TARGET_P99_MS = 50.0
TEXT_NS = re.compile(rb'"text":"(\d{16,20})"')


@dataclass
class Params:
    sessions: int
    viewers: int
    ticks: int
    interval_ms: int


FULL = Params(sessions=20, viewers=3, ticks=300, interval_ms=50)
QUICK = Params(sessions=10, viewers=3, ticks=40, interval_ms=50)
# Many viewers on few sessions: what one shared read per session (sessions/feed.py) saves shows here.
FANOUT_FULL = Params(sessions=4, viewers=25, ticks=200, interval_ms=50)
FANOUT_QUICK = Params(sessions=2, viewers=25, ticks=40, interval_ms=50)


@dataclass
class Viewer:
    session_id: str
    after: int
    samples: list[tuple[int, int]] = field(default_factory=list)  # (sent ns, received ns)
    checker: SequenceChecker | None = None
    error: str | None = None


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return 0.0
    k = (len(sorted_values) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (k - lo)


async def watch(stream: SSEStream, viewer: Viewer) -> None:
    checker = viewer.checker = SequenceChecker(viewer.after)
    out = viewer.samples
    try:
        async for received, batch in stream.batches():
            for frame in batch:
                if frame.id is not None:
                    checker.see(frame.id)
                if frame.event == "agent_message":
                    match = TEXT_NS.search(frame.data)
                    if match:
                        out.append((int(match.group(1)), received))
                elif frame.event == "done":
                    return
                elif frame.event in ("error", "session_stopped"):
                    viewer.error = f"{frame.event}: {frame.data[:200]!r}"
                    return
        viewer.error = "stream closed before done"
    finally:
        await stream.close()


async def drive(daemon: BenchDaemon, sessions: list[dict[str, Any]], p: Params) -> tuple[list[Viewer], float]:
    viewers: list[Viewer] = []
    streams: list[tuple[SSEStream, Viewer]] = []
    for session in sessions:
        after = await asyncio.to_thread(daemon.newest_sequence, session)
        for _ in range(p.viewers):
            viewer = Viewer(session["id"], after)
            stream = SSEStream(daemon.host, daemon.port, daemon.stream_path(session), last_event_id=after,
                               token=daemon.d.token)
            streams.append((stream, viewer))
            viewers.append(viewer)
    await asyncio.gather(*(s.connect() for s, _ in streams))
    tasks = [asyncio.create_task(watch(s, v)) for s, v in streams]
    # Spread the sessions' tick phases evenly over one interval, as independent sessions would be.
    gap = p.interval_ms / 1000 / max(1, len(sessions))
    started = time.monotonic()
    turns: list[tuple[dict[str, Any], str]] = []
    async with httpx.AsyncClient(base_url=f"http://{daemon.host}:{daemon.port}", headers=daemon.d.auth,
                                 timeout=30) as client:
        for session in sessions:
            response = await client.post(daemon.scoped(session, "/prompt"),
                                         json={"message": f"tick {p.ticks} {p.interval_ms}"},
                                         headers={"Accept": "application/json"})
            if response.status_code not in (200, 202):
                raise RuntimeError(f"prompt failed: {response.status_code} {response.text}")
            turns.append((session, response.json()["prompt"]["turn_id"]))
            await asyncio.sleep(gap)
    timeout = p.ticks * p.interval_ms / 1000 + 60
    if tasks:
        done, pending = await asyncio.wait(tasks, timeout=timeout)
        for task in pending:
            task.cancel()
        for task in done:
            task.result()
    for session, turn_id in turns:
        await asyncio.to_thread(daemon.wait_done, session, turn_id, timeout)
    return viewers, time.monotonic() - started


def store_stamps(db: Path, after: int) -> dict[int, float]:
    """Agent send time (ns) → the row's stored timestamp (taken by the recorder as it commits), epoch ms."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT timestamp, content FROM events WHERE sequence > ? AND type = 'agent_message'",
                            (after,)).fetchall()
    finally:
        conn.close()
    out: dict[int, float] = {}
    for stamp, content in rows:
        moment = parse_time(stamp)
        text = json.loads(content).get("text", "")
        if moment and text.isdigit():
            out[int(text)] = moment.timestamp() * 1000
    return out


def run(root: Path, quick: bool) -> BenchResult:
    return measure(root, "latency", QUICK if quick else FULL, target=True)


def run_fanout(root: Path, quick: bool) -> BenchResult:
    return measure(root, "fanout", FANOUT_QUICK if quick else FANOUT_FULL, target=False)


def run_first_turn(root: Path, quick: bool) -> BenchResult:
    """Like `latency`, but measured while the sessions' one-off auto-title agents start (at most two at once)."""
    return measure(root, "firstturn", QUICK if quick else FULL, target=False, settle_titles=False)


def measure(root: Path, name: str, p: Params, *, target: bool, settle_titles: bool = True) -> BenchResult:
    result = BenchResult(name, f"Latency: agent → viewer, {p.sessions} sessions x {p.viewers} SSE viewers, "
                               f"{p.ticks} ticks every {p.interval_ms} ms")
    daemon = BenchDaemon(root / name)
    try:
        started = time.monotonic()
        pending = [daemon.create("ticker", wait=False) for _ in range(p.sessions)]
        sessions = [daemon.wait_state(s["id"], {"active"}, timeout=180) for s in pending]
        boot_s = time.monotonic() - started
        # Warm-up turn per agent: first-use costs (imports, pydantic models, the one-off auto-title agent) stay
        # out of the samples.
        warm = [daemon.prompt(s, "tick 3 5") for s in sessions]
        for s, w in zip(sessions, warm, strict=True):
            daemon.wait_done(s, w["prompt"]["turn_id"])
        if settle_titles:
            for s in sessions:
                daemon.wait_title_settled(s)
        warm_after = {s["id"]: daemon.newest_sequence(s) for s in sessions}
        cpu_daemon0, cpu_client0 = cpu_seconds(daemon.pid), time.process_time()
        with daemon.profiling(name):
            viewers, wall = asyncio.run(drive(daemon, sessions, p))
        cpu_daemon = cpu_seconds(daemon.pid) - cpu_daemon0
        cpu_client = time.process_time() - cpu_client0
        committed: dict[int, float] = {}
        for s in sessions:
            committed.update(store_stamps(daemon.events_db(s), warm_after[s["id"]]))
    finally:
        daemon.stop()

    expected = p.sessions * p.viewers * p.ticks
    samples = sorted((recv - sent) / 1e6 for v in viewers for sent, recv in v.samples)
    store_ms = sorted(ms - sent / 1e6 for sent, ms in committed.items())
    sse_ms = sorted(recv / 1e6 - committed[sent] for v in viewers for sent, recv in v.samples if sent in committed)
    errors = [f"{v.session_id}: {v.error}" for v in viewers if v.error]
    bad = [f"{v.session_id}: {v.checker.describe()}" for v in viewers if v.checker and not v.checker.ok]
    result.check("every viewer reached done", not errors, "; ".join(errors[:3]) or f"{len(viewers)} viewers")
    result.check("no gap or duplicate (all viewers)", not bad, "; ".join(bad[:3]) or "consecutive sequences")
    result.check("every tick delivered to every viewer", len(samples) == expected,
                 f"{len(samples):,} samples of {expected:,}")

    p99_target = Target(Op.AT_MOST, TARGET_P99_MS) if target else None
    n = f"n={len(samples):,}"
    result.metric(f"{name}.p50", "agent → viewer p50", percentile(samples, 0.50), "ms", note=n)
    result.metric(f"{name}.p95", "agent → viewer p95", percentile(samples, 0.95), "ms")
    result.metric(f"{name}.p99", "agent → viewer p99", percentile(samples, 0.99), "ms", target=p99_target,
                  summary=True, note=f"{p.sessions}x{p.viewers} viewers, {n}")
    result.metric(f"{name}.max", "agent → viewer max", samples[-1] if samples else 0.0, "ms")
    result.metric(f"{name}.mean", "agent → viewer mean", statistics.fmean(samples) if samples else 0.0, "ms")
    result.metric(f"{name}.store_p50", "  agent → recorded (row timestamp) p50", percentile(store_ms, 0.5), "ms",
                  note=f"n={len(store_ms):,}; the ingest share")
    result.metric(f"{name}.store_p99", "  agent → recorded (row timestamp) p99", percentile(store_ms, 0.99), "ms")
    result.metric(f"{name}.sse_p50", "  recorded → viewer p50", percentile(sse_ms, 0.5), "ms",
                  note="the doorbell + SSE share")
    result.metric(f"{name}.sse_p99", "  recorded → viewer p99", percentile(sse_ms, 0.99), "ms")
    rate = p.sessions * p.ticks / (p.ticks * p.interval_ms / 1000)
    result.metric(f"{name}.daemon_cpu", "daemon CPU during the run", cpu_daemon / wall * 100, "% of a core",
                  note=f"{rate:.0f} events/s in, {rate * p.viewers:.0f} frames/s out")
    events_in = p.sessions * p.ticks
    result.metric(f"{name}.cpu_per_event", f"daemon CPU per event in ({p.viewers} viewers each)",
                  cpu_daemon / events_in * 1e6 if events_in else 0.0, "µs", summary=True,
                  note="no batching here: one commit, doorbell and feed read per event, one send per viewer")
    frames_out = events_in * p.viewers
    result.metric(f"{name}.cpu_per_frame", "daemon CPU per frame out", cpu_daemon / frames_out * 1e6 if frames_out
                  else 0.0, "µs")
    result.metric(f"{name}.client_cpu", f"bench client CPU ({p.sessions * p.viewers} viewers + prompts)",
                  cpu_client / wall * 100, "% of a core")
    result.details.update({"params": p.__dict__, "samples": len(samples), "expected": expected,
                           "boot_seconds": boot_s, "wall_seconds": wall,
                           "histogram_ms": histogram(samples)})
    result.notes.append(environment_note())
    result.notes.append(f"{p.sessions} ticker agents booted in {boot_s:.1f} s; tick phases spread evenly over one "
                        "interval; latency uses one clock (same host), receive time taken once per socket read.")
    return result


def histogram(samples: list[float]) -> dict[str, int]:
    edges = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000]
    counts: dict[str, int] = {}
    lower = 0.0
    for edge in edges:
        counts[f"{lower:g}-{edge:g}ms"] = sum(1 for s in samples if lower <= s < edge)
        lower = edge
    counts[f">={lower:g}ms"] = sum(1 for s in samples if s >= lower)
    return counts

"""Agent-to-viewer latency: S sessions on the ticker agent, V raw-frames SSE viewers each.

Each ticker chunk's text is `t<ns>;`, the agent's `time.time_ns()` at send time; a viewer takes one latency
sample per stamp: its receive time of the frame that carries it (one clock reading per socket read) minus
the stamp. A row may carry several stamps (the store merges the adjacent chunks of one write batch). The
path measured: agent stdout → daemon ACP receive loop → recorder commit on the store's thread → doorbell →
the session's live feed → SSE → viewer.

The acceptance run (`latency`) also streams one `stream 20000` turn of the scripted agent in a 21st session
(one viewer) during the measured phase, and reports beside the latency the daemon's event-loop lag over the
phase (`GET /api/status` → `event_loop.lag`, 10 s windows read so that they cover the phase) and its CPU per
live frame delivered (process CPU from /proc over the phase ÷ frames received by all viewers).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import sqlite3
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench import floors
from bench.harness import BenchDaemon, daemon_cpu_times, environment_note
from bench.report import BenchResult, Op, Target
from bench.sse_client import ChunkChecker, SequenceChecker, SSEStream
from sessions.store.folder import parse_time

# Issue 10's acceptance, at 20 sessions x 3 viewers with one 20k-chunk turn streaming beside them.
TARGET_P99_MS = 20.0
TARGET_LOOP_LAG_P99_MS = 5.0
TARGET_CPU_PER_FRAME_US = 100.0
STAMP = re.compile(rb"t(\d{16,20});")
STAMP_TEXT = re.compile(r"t(\d{16,20});")
LAG_WINDOW_S = 10  # the daemon's shortest lag window (sessions/runtime/loop_lag.py)
IDLE_SECONDS = 3.0  # daemon CPU with every session open and no turn running, measured before the phase


@dataclass
class Params:
    sessions: int
    viewers: int
    ticks: int
    interval_ms: int
    beside: int = 0  # chunks of one scripted `stream` turn in another session during the phase (0: none)


FULL = Params(sessions=20, viewers=3, ticks=300, interval_ms=50, beside=20_000)
# 200 ticks: a 10 s phase, so the daemon's 10 s lag window covers the phase alone.
QUICK = Params(sessions=10, viewers=3, ticks=200, interval_ms=50, beside=5_000)
# Many viewers on few sessions: what one shared read per session (sessions/live/feed.py) saves shows here.
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
                    out.extend((int(stamp), received) for stamp in STAMP.findall(frame.data))
                elif frame.event == "done":
                    return
                elif frame.event in ("error", "session_stopped"):
                    viewer.error = f"{frame.event}: {frame.data[:200]!r}"
                    return
        viewer.error = "stream closed before done"
    finally:
        await stream.close()


@dataclass
class Beside:
    """The scripted `stream N` turn beside the tickers, and its one viewer."""
    session: dict[str, Any]
    after: int
    chunks: ChunkChecker = field(default_factory=ChunkChecker)
    checker: SequenceChecker | None = None
    prompt_ns: int = 0
    done_ns: int = 0
    error: str | None = None


@dataclass
class Phase:
    viewers: list[Viewer]
    wall: float
    daemon_cpu: float
    daemon_system: float  # of which in the kernel (socket sends, wake-ups, WAL writes)
    client_cpu: float
    lag_reads: list[dict[str, Any]]  # each: the 10 s window read at `at_s` seconds into the phase
    lag_final: dict[str, Any]  # the whole `event_loop.lag` block read right after the phase
    beside: Beside | None = None

    @property
    def frames(self) -> int:
        ticker = sum(v.checker.count for v in self.viewers if v.checker)
        return ticker + (self.beside.checker.count if self.beside and self.beside.checker else 0)


async def watch_beside(stream: SSEStream, beside: Beside) -> None:
    checker = beside.checker = SequenceChecker(beside.after)
    try:
        async for received, batch in stream.batches():
            for frame in batch:
                if frame.id is not None:
                    checker.see(frame.id)
                if frame.event == "agent_message":
                    beside.chunks.feed(json.loads(frame.data)["content"].get("text", ""))
                elif frame.event == "done":
                    beside.done_ns = received
                    return
                elif frame.event in ("error", "session_stopped"):
                    beside.error = f"{frame.event}: {frame.data[:200]!r}"
                    return
        beside.error = "stream closed before done"
    finally:
        await stream.close()


async def read_lag(client: httpx.AsyncClient) -> dict[str, Any]:
    response = await client.get("/api/status")
    response.raise_for_status()
    return response.json()["event_loop"]["lag"]


async def poll_lag(client: httpx.AsyncClient, started: float, reads: list[dict[str, Any]]) -> None:
    """Read the daemon's 10 s lag window every 10 s from the phase start, so the windows tile the phase."""
    k = 1
    while True:
        await asyncio.sleep(max(0.0, started + k * LAG_WINDOW_S - time.monotonic()))
        lag = await read_lag(client)
        reads.append({"at_s": time.monotonic() - started, **lag["windows"][0]})
        k += 1


async def _prompt(client: httpx.AsyncClient, daemon: BenchDaemon, session: dict[str, Any], message: str) -> str:
    """Send a prompt; returns its turn id."""
    response = await client.post(daemon.scoped(session, "/prompt"), json={"message": message},
                                 headers={"Accept": "application/json"})
    if response.status_code not in (200, 202):
        raise RuntimeError(f"prompt failed: {response.status_code} {response.text}")
    return response.json()["prompt"]["turn_id"]


async def drive(daemon: BenchDaemon, sessions: list[dict[str, Any]], p: Params,
                beside_session: dict[str, Any] | None = None) -> Phase:
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
    beside: Beside | None = None
    beside_stream: SSEStream | None = None
    if beside_session is not None:
        after = await asyncio.to_thread(daemon.newest_sequence, beside_session)
        beside = Beside(beside_session, after)
        beside_stream = SSEStream(daemon.host, daemon.port, daemon.stream_path(beside_session), last_event_id=after,
                                  token=daemon.d.token)
        await beside_stream.connect()
    await asyncio.gather(*(s.connect() for s, _ in streams))
    tasks = [asyncio.create_task(watch(s, v)) for s, v in streams]
    if beside is not None and beside_stream is not None:
        tasks.append(asyncio.create_task(watch_beside(beside_stream, beside)))
    # Spread the sessions' tick phases evenly over one interval, as independent sessions would be.
    gap = p.interval_ms / 1000 / max(1, len(sessions))
    ticking_s = p.ticks * p.interval_ms / 1000
    lag_reads: list[dict[str, Any]] = []
    turns: list[tuple[dict[str, Any], str]] = []
    async with httpx.AsyncClient(base_url=f"http://{daemon.host}:{daemon.port}", headers=daemon.d.auth,
                                 timeout=30) as client:
        started = time.monotonic()
        (user0, system0), client0 = daemon_cpu_times(daemon.pid), time.process_time()
        poller = asyncio.create_task(poll_lag(client, started, lag_reads))
        for session in sessions:
            turns.append((session, await _prompt(client, daemon, session, f"tick {p.ticks} {p.interval_ms}")))
            await asyncio.sleep(gap)
        if beside is not None:
            # A third of the way in: every ticker streams steadily before, during and after the burst.
            await asyncio.sleep(max(0.0, started + ticking_s / 3 - time.monotonic()))
            beside.prompt_ns = time.time_ns()
            turns.append((beside.session, await _prompt(client, daemon, beside.session, f"stream {p.beside}")))
        timeout = ticking_s + 60
        if tasks:
            done, pending = await asyncio.wait(tasks, timeout=timeout)
            for task in pending:
                task.cancel()
            for task in done:
                task.result()
        user1, system1 = daemon_cpu_times(daemon.pid)
        daemon_cpu, daemon_system = user1 + system1 - user0 - system0, system1 - system0
        client_cpu = time.process_time() - client0
        wall = time.monotonic() - started
        poller.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await poller
        lag_final = await read_lag(client)
    lag_reads.append({"at_s": wall, **lag_final["windows"][0]})
    for session, turn_id in turns:
        await asyncio.to_thread(daemon.wait_done, session, turn_id, timeout)
    return Phase(viewers, wall, daemon_cpu, daemon_system, client_cpu, lag_reads, lag_final, beside)


def store_stamps(db: Path, after: int) -> dict[int, float]:
    """Agent send time (ns) → the stored timestamp (taken by the recorder as it commits) of the row carrying it,
    epoch ms."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT timestamp, content FROM events WHERE sequence > ? AND type = 'agent_message'",
                            (after,)).fetchall()
    finally:
        conn.close()
    out: dict[int, float] = {}
    for stamp, content in rows:
        moment = parse_time(stamp)
        if moment:
            for sent in STAMP_TEXT.findall(json.loads(content).get("text", "")):
                out[int(sent)] = moment.timestamp() * 1000
    return out


def run(root: Path, quick: bool) -> BenchResult:
    return measure(root, "latency", QUICK if quick else FULL, target=True)


def run_fanout(root: Path, quick: bool) -> BenchResult:
    return measure(root, "fanout", FANOUT_QUICK if quick else FANOUT_FULL, target=False)


def run_first_turn(root: Path, quick: bool) -> BenchResult:
    """Like `latency` without the turn beside, measured while the sessions' one-off auto-title agents start (at
    most two at once)."""
    p = QUICK if quick else FULL
    return measure(root, "firstturn", Params(p.sessions, p.viewers, p.ticks, p.interval_ms), target=False,
                   settle_titles=False)


def measure(root: Path, name: str, p: Params, *, target: bool, settle_titles: bool = True) -> BenchResult:
    beside_title = f", one `stream {p.beside:,}` turn beside them" if p.beside else ""
    result = BenchResult(name, f"Latency: agent → viewer, {p.sessions} sessions x {p.viewers} SSE viewers, "
                               f"{p.ticks} ticks every {p.interval_ms} ms{beside_title}")
    daemon = BenchDaemon(root / name)
    try:
        started = time.monotonic()
        pending = [daemon.create("ticker", wait=False) for _ in range(p.sessions)]
        streamer = daemon.create("scripted", wait=False) if p.beside else None
        sessions = [daemon.wait_state(s["id"], {"active"}, timeout=180) for s in pending]
        if streamer is not None:
            streamer = daemon.wait_state(streamer["id"], {"active"}, timeout=180)
        boot_s = time.monotonic() - started
        # Warm-up turn per agent: first-use costs (imports, pydantic models, the one-off auto-title agent) stay
        # out of the samples.
        warm = [(s, daemon.prompt(s, "tick 3 5")) for s in sessions]
        if streamer is not None:
            warm.append((streamer, daemon.prompt(streamer, "stream 500")))
        for s, w in warm:
            daemon.wait_done(s, w["prompt"]["turn_id"])
        if settle_titles:
            for s, _ in warm:
                daemon.wait_title_settled(s)
        warm_after = {s["id"]: daemon.newest_sequence(s) for s in sessions}
        idle0 = sum(daemon_cpu_times(daemon.pid))
        time.sleep(IDLE_SECONDS)
        idle_rate = (sum(daemon_cpu_times(daemon.pid)) - idle0) / IDLE_SECONDS
        with daemon.profiling(name):
            phase = asyncio.run(drive(daemon, sessions, p, streamer))
        committed: dict[int, float] = {}
        for s in sessions:
            committed.update(store_stamps(daemon.events_db(s), warm_after[s["id"]]))
    finally:
        daemon.stop()

    commit_us, handoff_us = floors.raw_commit_us(root / f"{name}-raw.db"), asyncio.run(floors.raw_handoff_us())
    tick_us, pacing_us = asyncio.run(floors.raw_tick_us(root / f"{name}-raw-ticks", p.sessions, p.interval_ms))
    viewers, wall, cpu_daemon = phase.viewers, phase.wall, phase.daemon_cpu
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
    beside = phase.beside
    burst: list[float] = []
    outside: list[float] = []
    if beside is not None:
        checker = beside.checker
        result.check("turn beside: reached done, no gap or duplicate",
                     beside.error is None and checker is not None and checker.ok,
                     beside.error or (checker.describe() if checker else "never read"))
        result.check("turn beside: every chunk delivered in order", beside.chunks.ok(p.beside),
                     f"{beside.chunks.describe(p.beside)} in {checker.count if checker else 0:,} frames")
        # The samples the agents sent while the turn beside streamed (prompt → its done frame at its viewer).
        burst = sorted((recv - sent) / 1e6 for v in viewers for sent, recv in v.samples
                       if beside.prompt_ns <= sent <= beside.done_ns)
        outside = sorted((recv - sent) / 1e6 for v in viewers for sent, recv in v.samples
                         if not beside.prompt_ns <= sent <= beside.done_ns)

    n = f"n={len(samples):,}"
    result.metric(f"{name}.p50", "agent → viewer p50", percentile(samples, 0.50), "ms", note=n)
    result.metric(f"{name}.p95", "agent → viewer p95", percentile(samples, 0.95), "ms")
    result.metric(f"{name}.p99", "agent → viewer p99", percentile(samples, 0.99), "ms", summary=True,
                  target=Target(Op.AT_MOST, TARGET_P99_MS) if target else None,
                  note=f"{p.sessions}x{p.viewers} viewers, {n}" + (f", {p.beside:,} chunks beside" if beside else ""))
    result.metric(f"{name}.max", "agent → viewer max", samples[-1] if samples else 0.0, "ms")
    result.metric(f"{name}.mean", "agent → viewer mean", statistics.fmean(samples) if samples else 0.0, "ms")
    if beside is not None:
        burst_s = (beside.done_ns - beside.prompt_ns) / 1e9
        result.metric(f"{name}.burst_p99", "  p99 while the turn beside streamed", percentile(burst, 0.99), "ms",
                      summary=True, note=f"n={len(burst):,} sent in its {burst_s:.2f} s (prompt → done frame); "
                                         f"max {burst[-1] if burst else 0.0:.1f} ms")
        # Where the burst's extra delay sits: before the row is committed (ingest, store threads) or after.
        window = range(beside.prompt_ns, beside.done_ns + 1)
        burst_store = sorted(ms - sent / 1e6 for sent, ms in committed.items() if sent in window)
        burst_sse = sorted(recv / 1e6 - committed[sent] for v in viewers for sent, recv in v.samples
                           if sent in window and sent in committed)
        result.metric(f"{name}.burst_store_p99", "    of which agent → recorded p99", percentile(burst_store, 0.99),
                      "ms", note=f"n={len(burst_store):,}")
        result.metric(f"{name}.burst_sse_p99", "    of which recorded → viewer p99", percentile(burst_sse, 0.99),
                      "ms")
        result.metric(f"{name}.calm_p99", "  p99 of the other ticks", percentile(outside, 0.99), "ms",
                      summary=True, note=f"n={len(outside):,}: the same run without the samples of the burst")
        result.metric(f"{name}.beside_rate", "  turn beside, prompt → done frame at its viewer",
                      p.beside / burst_s if burst_s > 0 else 0.0, "chunks/s")
    result.metric(f"{name}.store_p50", "  agent → recorded (row timestamp) p50", percentile(store_ms, 0.5), "ms",
                  note=f"n={len(store_ms):,}; the ingest share")
    result.metric(f"{name}.store_p99", "  agent → recorded (row timestamp) p99", percentile(store_ms, 0.99), "ms")
    result.metric(f"{name}.sse_p50", "  recorded → viewer p50", percentile(sse_ms, 0.5), "ms",
                  note="the doorbell + SSE share")
    result.metric(f"{name}.sse_p99", "  recorded → viewer p99", percentile(sse_ms, 0.99), "ms")
    windows = [r for r in phase.lag_reads if r.get("samples")]
    lag_p99 = max((r["p99_ms"] for r in windows), default=0.0)
    lag_max = max((r["max_ms"] for r in windows), default=0.0)
    p99s = ", ".join(f"{r['p99_ms']:.1f}" for r in windows)
    result.metric(f"{name}.loop_lag_p99", "daemon event-loop lag p99 over the phase", lag_p99, "ms", summary=True,
                  target=Target(Op.AT_MOST, TARGET_LOOP_LAG_P99_MS) if target else None,
                  note=f"worst p99 of {len(windows)} {LAG_WINDOW_S} s windows covering the {wall:.1f} s phase "
                       f"(p99s {p99s}); max {lag_max:.1f} ms")
    rate = p.sessions * p.ticks / (p.ticks * p.interval_ms / 1000)
    result.metric(f"{name}.daemon_cpu", "daemon CPU during the phase", cpu_daemon / wall * 100, "% of a core",
                  note=f"{phase.daemon_system / cpu_daemon if cpu_daemon else 0:.0%} in the kernel; "
                       f"{rate:.0f} ticks/s in, {rate * p.viewers:.0f} tick frames/s out"
                       + (f", plus the {p.beside:,}-chunk turn" if beside else ""))
    events_in = p.sessions * p.ticks + p.beside
    result.metric(f"{name}.cpu_per_event", "daemon CPU per chunk in", cpu_daemon / events_in * 1e6, "µs",
                  note=f"{events_in:,} chunks in ({p.viewers} viewers per ticker session)")
    frames = phase.frames
    result.metric(f"{name}.cpu_per_frame", "daemon CPU per live frame delivered", cpu_daemon / frames * 1e6 if frames
                  else 0.0, "µs", summary=True, target=Target(Op.AT_MOST, TARGET_CPU_PER_FRAME_US) if target else None,
                  note=f"{cpu_daemon:.2f} s CPU (/proc, the phase) ÷ {frames:,} frames received by all viewers")
    idle_cpu = idle_rate * wall
    result.metric(f"{name}.cpu_per_frame_net", "  net of the idle daemon's CPU",
                  (cpu_daemon - idle_cpu) / frames * 1e6 if frames else 0.0, "µs",
                  note=f"idle: {idle_rate:.1%} of a core with {len(viewers)} streams open and no turn "
                       f"({IDLE_SECONDS:g} s before the phase)")
    result.metric(f"{name}.raw_commit", "raw: one event, one EventLog.commit (CPU)", commit_us, "µs",
                  note="what a tick costs the store when every event commits alone")
    result.metric(f"{name}.raw_handoff", "raw: loop → thread → loop round trip (CPU)", handoff_us, "µs",
                  note="the recorder's hand-off (a queue to a thread, call_soon_threadsafe back) of a no-op")
    result.metric(f"{name}.raw_tick", "raw: one tick through the store writer at the phase's rate (CPU)", tick_us,
                  "µs", note=f"the Recorder alone, {p.sessions} stores, one event every "
                             f"{p.interval_ms / p.sessions:g} ms, net of that pacing loop's own {pacing_us:.0f} µs: "
                             f"÷ {p.viewers} viewers = {tick_us / p.viewers:.0f} µs of every frame before any ACP or "
                             "SSE work")
    if frames:
        result.metric(f"{name}.cpu_per_frame_vs_tick", "  CPU per live frame ÷ (raw tick ÷ viewers)",
                      (cpu_daemon / frames * 1e6) / (tick_us / p.viewers) if tick_us else 0.0, "x",
                      note="how far above the store path's own floor each delivered frame costs")
    result.metric(f"{name}.client_cpu", f"bench client CPU ({p.sessions * p.viewers} viewers + prompts)",
                  phase.client_cpu / wall * 100, "% of a core")
    result.details.update({"params": p.__dict__, "samples": len(samples), "expected": expected,
                           "boot_seconds": boot_s, "wall_seconds": wall, "frames": frames,
                           "daemon_cpu_s": cpu_daemon, "daemon_system_s": phase.daemon_system,
                           "idle_cpu_per_s": idle_rate,
                           "loop_lag_reads": phase.lag_reads, "loop_lag_final": phase.lag_final,
                           "histogram_ms": histogram(samples), "burst_histogram_ms": histogram(burst)})
    result.notes.append(environment_note())
    result.notes.append(f"{p.sessions} ticker agents booted in {boot_s:.1f} s; tick phases spread evenly over one "
                        "interval; latency uses one clock (same host), receive time taken once per socket read.")
    if beside is not None:
        result.notes.append(f"the `stream {p.beside:,}` turn starts a third of the way into the phase, in a session "
                            "of its own with one raw-frames viewer.")
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

"""Capacity: how many agents can stream at once (issue 32).

N sessions of the ticker agent (`bench/agents/light_ticker.py`), each sending 20 chunks a second, one raw-frames
viewer each; N rises step by step until agent → viewer p99 passes 50 ms, the daemon's event-loop lag p99 passes
10 ms or the daemon needs more than one core. The answer is the largest N that held, its CPU per chunk, and beside
it the floor: a bare ACP SDK client (the SDK's `Connection` on its stdio transport, updates taken as dicts, nothing
stored) reading the same N agents at the same rate in the same run, its CPU per chunk.

Each step measures a fixed window that starts a second after the last prompt of the step was answered (so the
prompts themselves are not the measurement) and ends `WINDOW_S` later: the samples sent inside it, the daemon's CPU
over it from /proc, and the daemon's own 10 s lag window read at its end. Sessions of one step stay for the next.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from acp import PROTOCOL_VERSION, spawn_stdio_transport
from acp._transport import NdjsonTransport
from acp.connection import Connection
from acp.exceptions import RequestError
from acp.task import MessageSender, TaskSupervisor

from bench.harness import BENCH_DIR, BenchDaemon, daemon_cpu_times, environment_note
from bench.latency import Viewer, percentile, store_stamps, watch
from bench.report import BenchResult, Op, Target
from bench.sse_client import SSEStream
from sessions.acp.transport import STDIO_LIMIT_BYTES
from tests.conftest import toml_list

LIGHT_TICKER = BENCH_DIR / "agents" / "light_ticker.py"
INTERVAL_MS = 50  # 20 chunks a second per session, a normal model's pace
TARGET_N = 200
LIMIT_P99_MS = 50.0
LIMIT_LAG_P99_MS = 10.0
LIMIT_CPU = 1.0  # cores
WINDOW_S = 10.0  # the daemon's shortest lag window: one read at the window's end covers it exactly
LEAD_S = 1.0  # after the last prompt's answer, before the window opens
TAIL_S = 1.0  # ticks keep coming this long after the window closes
STEPS = (25, 50, 100, 125, 150, 175, 200, 250, 300)
QUICK_STEPS = (25, 100, 200)
# `COMPOZY_CAPACITY_STEPS=50,100` runs only those steps (exploring one size without the ones below it).
STEPS_ENV = "COMPOZY_CAPACITY_STEPS"


def config() -> str:
    command = toml_list([sys.executable, str(LIGHT_TICKER)])
    return "\n".join(["[providers.light]", f"command = {command}", "", "[agents.light]", 'provider = "light"', "",
                      "[limits]", "max_concurrent_agents = 400", ""])


@dataclass
class Window:
    """One step's measured window, read by `run_step`."""
    viewers: list[Viewer]
    start: float  # epoch seconds
    end: float
    cpu: float  # the daemon's CPU seconds over the window
    kernel: float  # of which the kernel's share
    machine: float  # the whole machine's busy share
    client: float  # the bench client's CPU, cores
    lag_p99_ms: float
    writer: str  # where commits ran at the window's end: "thread" or "process", and at what rate


def machine_busy() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine, from /proc/stat: is the box itself saturated?"""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


@dataclass
class Step:
    n: int
    p99_ms: float
    p50_ms: float
    lag_p99_ms: float
    cpu_cores: float
    cpu_per_chunk_us: float
    samples: int
    expected: int
    errors: list[str]
    gaps: list[str]
    machine: float = 0.0  # share of the whole machine (every core) busy over the window
    kernel: float = 0.0  # share of the daemon's CPU spent in the kernel
    client: float = 0.0  # the bench client's CPU, cores
    store_p99_ms: float = 0.0  # agent → the row's commit timestamp
    sse_p99_ms: float = 0.0  # the row's commit timestamp → viewer
    writer: str = ""

    @property
    def holds(self) -> bool:
        return (self.p99_ms <= LIMIT_P99_MS and self.lag_p99_ms <= LIMIT_LAG_P99_MS and self.cpu_cores <= LIMIT_CPU
                and not self.errors and not self.gaps)


async def run_step(daemon: BenchDaemon, sessions: list[dict[str, Any]], ticks: int) -> Window:
    """One step: viewers open, every session prompted, the window measured. Returns the viewers, the window's
    bounds (epoch seconds), the daemon's CPU seconds over it and its loop lag p99 (ms)."""
    viewers: list[Viewer] = []
    streams: list[tuple[SSEStream, Viewer]] = []
    async with httpx.AsyncClient(base_url=f"http://{daemon.host}:{daemon.port}", headers=daemon.d.auth,
                                 timeout=60, limits=httpx.Limits(max_connections=8)) as client:
        async def newest(session: dict[str, Any]) -> int:
            r = await client.get(daemon.scoped(session, "/events"), params={"limit": 1})
            r.raise_for_status()
            events = r.json()["events"]
            return int(events[-1]["sequence"]) if events else 0

        afters = await asyncio.gather(*(newest(s) for s in sessions))
        for session, after in zip(sessions, afters, strict=True):
            viewer = Viewer(session["id"], after)
            streams.append((SSEStream(daemon.host, daemon.port, daemon.stream_path(session), last_event_id=after,
                                      token=daemon.d.token), viewer))
            viewers.append(viewer)
        for i in range(0, len(streams), 50):
            await asyncio.gather(*(s.connect() for s, _ in streams[i:i + 50]))
        tasks = [asyncio.create_task(watch(s, v)) for s, v in streams]

        async def prompt(session: dict[str, Any]) -> None:
            r = await client.post(daemon.scoped(session, "/prompt"), json={"message": f"tick {ticks} {INTERVAL_MS}"},
                                  headers={"Accept": "application/json"})
            if r.status_code not in (200, 202):
                raise RuntimeError(f"prompt failed: {r.status_code} {r.text}")

        # Spread the sessions' tick phases over one interval, as independent sessions would be.
        gap = INTERVAL_MS / 1000 / len(sessions)
        sends = []
        for session in sessions:
            sends.append(asyncio.create_task(prompt(session)))
            await asyncio.sleep(gap)
        await asyncio.gather(*sends)
        await asyncio.sleep(LEAD_S)
        start = time.time()
        if os.environ.get("COMPOZY_CAPACITY_MARK"):  # for tracing the daemon over the window from outside
            Path(os.environ["COMPOZY_CAPACITY_MARK"]).write_text(str(daemon.pid))
        (user0, sys0), machine0, client0 = daemon_cpu_times(daemon.pid), machine_busy(), time.process_time()
        with daemon.profiling(f"capacity-{len(sessions)}"):  # the window only: not the sessions' set-up
            await asyncio.sleep(WINDOW_S)
        (user1, sys1), machine1, client1 = daemon_cpu_times(daemon.pid), machine_busy(), time.process_time()
        cpu = user1 + sys1 - user0 - sys0
        end = time.time()
        r = await client.get("/api/status")
        r.raise_for_status()
        lag = r.json()["event_loop"]["lag"]["windows"][0]
        sw = r.json().get("store_writer") or {}
        writer = f"{sw.get('mode')} at {sw.get('batches_per_second', 0):,.0f} batches/s" if sw else "unknown"
        done, pending = await asyncio.wait(tasks, timeout=ticks * INTERVAL_MS / 1000 + 60)
        for task in pending:
            task.cancel()
        for task in done:
            task.result()
    return Window(viewers, start, end, cpu, kernel=(sys1 - sys0) / max(1e-9, cpu),
                  machine=(machine1[0] - machine0[0]) / max(1e-9, machine1[1] - machine0[1]),
                  client=(client1 - client0) / (end - start), lag_p99_ms=float(lag.get("p99_ms") or 0.0), writer=writer)


def measure_step(daemon: BenchDaemon, sessions: list[dict[str, Any]]) -> Step:
    n = len(sessions)
    afters = {s["id"]: daemon.newest_sequence(s) for s in sessions}
    # Long enough that every session ticks through the whole window, however long the prompts took to send.
    ticks = int((LEAD_S + WINDOW_S + TAIL_S + 0.05 * n / 10 + 3) * 1000 / INTERVAL_MS)
    w = asyncio.run(run_step(daemon, sessions, ticks))
    viewers, start, end, cpu = w.viewers, w.start, w.end, w.cpu
    lo, hi = int(start * 1e9), int(end * 1e9)
    samples = sorted((recv - sent) / 1e6 for v in viewers for sent, recv in v.samples if lo <= sent < hi)
    window = end - start
    committed: dict[int, float] = {}
    for s in sessions:
        committed.update(store_stamps(daemon.events_db(s), afters[s["id"]]))
    store_ms = sorted(ms - sent / 1e6 for sent, ms in committed.items() if lo <= sent < hi)
    sse_ms = sorted(recv / 1e6 - committed[sent] for v in viewers for sent, recv in v.samples
                    if lo <= sent < hi and sent in committed)
    chunks_in = n * window * 1000 / INTERVAL_MS
    return Step(n=n, p99_ms=percentile(samples, 0.99), p50_ms=percentile(samples, 0.5), lag_p99_ms=w.lag_p99_ms,
                cpu_cores=cpu / window, cpu_per_chunk_us=cpu / chunks_in * 1e6 if chunks_in else 0.0,
                samples=sum(len(v.samples) for v in viewers), expected=n * ticks,
                errors=[f"{v.session_id}: {v.error}" for v in viewers if v.error],
                gaps=[f"{v.session_id}: {v.checker.describe()}" for v in viewers if v.checker and not v.checker.ok],
                machine=w.machine, kernel=w.kernel, client=w.client,
                store_p99_ms=percentile(store_ms, 0.99), sse_p99_ms=percentile(sse_ms, 0.99), writer=w.writer)


# ---- the floor: a bare SDK client reading the same agents --------------------------------------------------------

class _Counting(NdjsonTransport):
    """The SDK's NDJSON framing; session/update notifications taken off as dicts and counted."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, counter: list[int]) -> None:
        self._supervisor = TaskSupervisor(source="bench.capacity")
        super().__init__(reader, MessageSender(writer, self._supervisor))
        self._counter = counter

    async def receive(self) -> dict[str, Any] | None:
        while True:
            message = await super().receive()
            if message is None or message.get("method") != "session/update" or "id" in message:
                return message
            self._counter[0] += 1

    async def close(self) -> None:
        try:
            await super().close()
        finally:
            await self._supervisor.shutdown()


async def _no_requests(method: str, params: Any, is_notification: bool) -> Any:
    if not is_notification:
        raise RequestError.method_not_found(method)


async def bare_floor(n: int, cwd: Path) -> tuple[float, int, float]:
    """A bare SDK client on `n` ticker agents at the same rate: (CPU seconds, chunks, seconds) over the window."""
    counter = [0]
    ticks = int((WINDOW_S + LEAD_S + TAIL_S + 2) * 1000 / INTERVAL_MS)
    async with contextlib.AsyncExitStack() as stack:
        conns: list[tuple[Connection, str]] = []
        for _ in range(n):
            reader, writer, _process = await stack.enter_async_context(spawn_stdio_transport(
                sys.executable, str(LIGHT_TICKER), cwd=cwd, limit=STDIO_LIMIT_BYTES))
            conn = Connection(_no_requests, _Counting(reader, writer, counter))
            stack.push_async_callback(conn.close)
            await conn.send_request("initialize", {"protocolVersion": PROTOCOL_VERSION, "clientCapabilities": {},
                                                   "clientInfo": {"name": "compozy-bench", "version": "1"}})
            opened = await conn.send_request("session/new", {"cwd": str(cwd), "mcpServers": []})
            conns.append((conn, opened["sessionId"]))
        gap = INTERVAL_MS / 1000 / n
        turns = []
        for conn, session_id in conns:
            turns.append(asyncio.create_task(conn.send_request("session/prompt", {
                "sessionId": session_id, "prompt": [{"type": "text", "text": f"tick {ticks} {INTERVAL_MS}"}]})))
            await asyncio.sleep(gap)
        await asyncio.sleep(LEAD_S)
        cpu0, count0, t0 = time.process_time(), counter[0], time.monotonic()
        await asyncio.sleep(WINDOW_S)
        cpu, count, seconds = time.process_time() - cpu0, counter[0] - count0, time.monotonic() - t0
        await asyncio.gather(*turns)
    return cpu, count, seconds


def run(root: Path, quick: bool) -> BenchResult:
    chosen = os.environ.get(STEPS_ENV)
    steps_n = tuple(int(x) for x in chosen.split(",")) if chosen else QUICK_STEPS if quick else STEPS
    result = BenchResult("capacity", f"Capacity: sessions streaming {1000 // INTERVAL_MS} chunks/s each, one raw "
                                     f"viewer each, N raised {', '.join(map(str, steps_n))} until a limit breaks")
    home = root / "capacity"
    daemon = BenchDaemon(home, extra=config())
    steps: list[Step] = []
    sessions: list[dict[str, Any]] = []
    try:
        for n in steps_n:
            while len(sessions) < n:
                batch = [daemon.create("light", wait=False) for _ in range(min(25, n - len(sessions)))]
                sessions += [daemon.wait_state(s["id"], {"active"}, timeout=300) for s in batch]
            step = measure_step(daemon, sessions)
            steps.append(step)
            if not step.holds:
                break
    finally:
        daemon.stop()
    held = [s for s in steps if s.holds]
    best = held[-1] if held else None
    floor_n = best.n if best else steps[0].n
    floor_cpu, floor_chunks, floor_s = asyncio.run(bare_floor(floor_n, daemon.workspace))
    floor_us = floor_cpu / floor_chunks * 1e6 if floor_chunks else 0.0
    for s in steps:
        verdict = "holds" if s.holds else "breaks"
        result.metric(f"capacity.n{s.n}.p99", f"N={s.n}: agent → viewer p99", s.p99_ms, "ms",
                      note=f"{verdict}; p50 {s.p50_ms:.1f} ms; loop lag p99 {s.lag_p99_ms:.1f} ms; daemon "
                           f"{s.cpu_cores:.0%} of a core ({s.kernel:.0%} in the kernel), "
                           f"{s.cpu_per_chunk_us:.0f} µs a chunk; machine "
                           f"{s.machine:.0%} busy, bench client {s.client:.0%} of a core; p99 agent → "
                           f"stored {s.store_p99_ms:.1f} ms, stored → viewer {s.sse_p99_ms:.1f} ms; commits: "
                           f"{s.writer}")
        result.check(f"N={s.n}: every viewer reached done, no gap or duplicate", not s.errors and not s.gaps,
                     "; ".join((s.errors + s.gaps)[:3]) or f"{s.n} viewers, {s.samples:,} samples of {s.expected:,}")
        result.check(f"N={s.n}: every tick delivered", s.samples == s.expected,
                     f"{s.samples:,} samples of {s.expected:,}")
    result.metric("capacity.n", "largest N that holds", float(best.n if best else 0), "sessions", summary=True,
                  target=Target(Op.AT_LEAST, TARGET_N),
                  note=f"limits: p99 ≤ {LIMIT_P99_MS:g} ms, loop lag p99 ≤ {LIMIT_LAG_P99_MS:g} ms, daemon ≤ one core; "
                       + ("the next step broke" if len(held) < len(steps) else "every step held"))
    if best is not None:
        result.metric("capacity.cpu_per_chunk", f"  daemon CPU per chunk at N={best.n}", best.cpu_per_chunk_us,
                      "µs", raw_limit=floor_us, raw_label="bare SDK client", summary=True,
                      note=f"{best.cpu_cores:.0%} of a core for {best.n * 1000 // INTERVAL_MS:,} chunks/s in and "
                           f"out")
        result.metric("capacity.p99", f"  agent → viewer p99 at N={best.n}", best.p99_ms, "ms", summary=True,
                      target=Target(Op.AT_MOST, LIMIT_P99_MS))
        result.metric("capacity.lag_p99", f"  loop lag p99 at N={best.n}", best.lag_p99_ms, "ms", summary=True,
                      target=Target(Op.AT_MOST, LIMIT_LAG_P99_MS))
    result.metric("capacity.floor", f"floor: bare SDK client, {floor_n} agents, CPU per chunk", floor_us, "µs",
                  note=f"{floor_cpu / floor_s:.0%} of a core for {floor_chunks / floor_s:,.0f} chunks/s; stores "
                       "and serves nothing")
    result.details.update({"steps": [s.__dict__ | {"holds": s.holds} for s in steps],
                           "floor": {"n": floor_n, "cpu_s": floor_cpu, "chunks": floor_chunks, "seconds": floor_s}})
    result.notes.append(environment_note())
    result.notes.append(f"each step: a {WINDOW_S:g} s window from {LEAD_S:g} s after the last prompt; lag is the "
                        "daemon's own 10 s window read at its end; sessions stay from one step to the next.")
    return result

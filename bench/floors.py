"""Raw floors for the latency benchmarks, measured in the bench process right after each phase: what one tick
costs the store layer, the store thread's hand-off, and the daemon's own store path at the phase's tick rate."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from sessions.store.events import EventLog
from sessions.store.ops import NewEvent

RAW_REPEATS = 2000


def raw_commit_us(path: Path) -> float:
    """CPU per single-event commit through the store layer (a tick arrives alone, so it commits alone)."""
    log = EventLog(path, "ticker")
    try:
        log.commit([NewEvent("agent_message", "turn_warm", {"session_id": "t", "text": "t0;"})])
        start = time.process_time()
        for _ in range(RAW_REPEATS):
            log.commit([NewEvent("agent_message", "turn_0123456789abcdef",
                                 {"session_id": "ticker-" + "0" * 32, "text": f"t{time.time_ns()};"})])
        return (time.process_time() - start) / RAW_REPEATS * 1e6
    finally:
        log.close()


async def raw_handoff_us() -> float:
    """CPU per loop → store thread → loop round trip, as the recorder hands off each batch: a queue to a plain
    thread, one call_soon_threadsafe back."""
    import queue
    import threading

    loop = asyncio.get_running_loop()
    inbox: queue.SimpleQueue[asyncio.Future[None] | None] = queue.SimpleQueue()

    def worker() -> None:
        while (future := inbox.get()) is not None:
            loop.call_soon_threadsafe(future.set_result, None)

    thread = threading.Thread(target=worker, daemon=True)
    thread.start()
    try:
        for i in range(RAW_REPEATS + 1):
            if i == 1:
                start = time.process_time()
            future = loop.create_future()
            inbox.put(future)
            await future
        return (time.process_time() - start) / RAW_REPEATS * 1e6
    finally:
        inbox.put(None)
        thread.join(5)


async def raw_tick_us(root: Path, sessions: int, interval_ms: float, events: int = 1000) -> tuple[float, float]:
    """CPU per event of the daemon's own store path alone (the Recorder: hand-off, commit on its thread, result
    back) at the phase's tick rate across `sessions` stores: what a tick costs before any ACP or SSE work. Each
    event arrives alone, so each is its own transaction and wakes a cold thread.

    Returns (store path, pacing): the first is net of the pacing, the same loop of sleeps run first without
    recording. The pacing stands in for the daemon's wake-up on the agent's line, which is ingest, not store."""
    from sessions.store.writer.recorder import Recorder

    root.mkdir(parents=True, exist_ok=True)
    recorders = [Recorder(root / f"s{i}" / "events.db", "ticker", lambda stored, rows: None)
                 for i in range(sessions)]
    gap = interval_ms / 1000 / sessions
    try:
        for rec in recorders:  # opened and warm: first-use costs stay out
            rec.record("agent_message", "turn_warm", {"session_id": "t", "text": "t0;"})
            await rec.flush()
        start = time.process_time()
        for _ in range(events):
            await asyncio.sleep(gap)
        pacing = (time.process_time() - start) / events * 1e6
        start = time.process_time()
        for i in range(events):
            rec = recorders[i % len(recorders)]
            rec.record("agent_message", "turn_0123456789abcdef", {"session_id": "ticker-" + "0" * 32,
                                                                  "text": f"t{time.time_ns()};"})
            await asyncio.sleep(gap)
        for rec in recorders:
            await rec.flush()
        total = (time.process_time() - start) / events * 1e6
        return max(0.0, total - pacing), pacing
    finally:
        for rec in recorders:
            await rec.close()

"""What one shared store writer with a hand-off cadence would save per event, in-process (~30 s): the redesign the
CPU-per-frame target points at, measured before anyone builds it.

The daemon's store path today is the `Recorder`: a writer thread per store, each lone event handed off at the next
loop iteration (one thread wake-up, one commit, one wake-up of the loop back). The model here is one writer thread
for every store, handed what all of them recorded once per `window` (one wake-up each way per window, one commit
per store with pending events). Both run at the latency phase's tick rate (20 stores, one event every 2.5 ms, each
alone in its store: a session's ticks are 50 ms apart), net of the same pacing loop without recording, beside one
single-event `EventLog.commit` (the floor a store write cannot go under: each session has its own events.db).

The model is not the daemon's writer: it has none of the isolation a real one needs (a locked or slow store would
stall every session's commits behind it), so its figures are an upper bound on the saving.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from pathlib import Path

from bench.floors import raw_commit_us
from bench.report import BenchResult
from sessions.store.events import EventLog
from sessions.store.ops import NewEvent
from sessions.store.writer.recorder import Recorder

STORES = 20
GAP_SECONDS = 0.0025  # 400 ticks/s, as the latency phase's 20 sessions x one tick every 50 ms
WINDOWS_MS = (0.0, 2.0, 5.0, 10.0)


def _tick() -> NewEvent:
    return NewEvent("agent_message", "turn_0123456789abcdef", {"session_id": "ticker-" + "0" * 32,
                                                               "text": f"t{time.time_ns()};"})


class SharedWriter:
    """One thread commits every store's pending events, handed off once per window (0: the next iteration)."""

    def __init__(self, paths: list[Path], window: float) -> None:
        self.paths = paths
        self.window = window
        self.logs: dict[int, EventLog] = {}
        self.pending: dict[int, list[NewEvent]] = {}
        self.committed = 0
        self._scheduled = self._in_flight = False
        self._loop = asyncio.get_running_loop()
        self._inbox: queue.SimpleQueue[dict[int, list[NewEvent]] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._write, daemon=True)
        self._thread.start()

    def record(self, store: int, event: NewEvent) -> None:
        self.pending.setdefault(store, []).append(event)
        self._schedule()

    def _schedule(self) -> None:
        if self._scheduled or self._in_flight:
            return
        self._scheduled = True
        if self.window:
            self._loop.call_later(self.window, self._hand_off)
        else:
            self._loop.call_soon(self._hand_off)

    def _hand_off(self) -> None:
        self._scheduled = False
        if self.pending:
            work, self.pending = self.pending, {}
            self._in_flight = True
            self._inbox.put(work)

    def _write(self) -> None:
        while (work := self._inbox.get()) is not None:
            for store, events in work.items():
                if store not in self.logs:
                    self.logs[store] = EventLog(self.paths[store], "ticker")
                self.logs[store].commit(events)
            self._loop.call_soon_threadsafe(self._back, sum(map(len, work.values())))
        for log in self.logs.values():
            log.close()

    def _back(self, count: int) -> None:
        self._in_flight = False
        self.committed += count
        if self.pending:
            self._schedule()

    def close(self) -> None:
        self._inbox.put(None)
        self._thread.join(5)


async def _pacing(events: int) -> float:
    start = time.process_time()
    for _ in range(events):
        await asyncio.sleep(GAP_SECONDS)
    return (time.process_time() - start) / events * 1e6


async def _recorder_us(root: Path, events: int) -> float:
    recorders = [Recorder(root / f"r{i}" / "events.db", "ticker", lambda stored, rows: None) for i in range(STORES)]
    try:
        for rec in recorders:  # opened and warm
            rec.record("agent_message", "turn_warm", {"text": "t0;"})
            await rec.flush()
        start = time.process_time()
        for i in range(events):
            event = _tick()
            recorders[i % STORES].record(event.type, event.turn_id, event.content)
            await asyncio.sleep(GAP_SECONDS)
        for rec in recorders:
            await rec.flush()
        return (time.process_time() - start) / events * 1e6
    finally:
        for rec in recorders:
            await rec.close()


async def _shared_us(root: Path, window: float, events: int) -> float:
    paths = [root / f"w{window:g}-{i}" / "events.db" for i in range(STORES)]
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
    writer = SharedWriter(paths, window)
    try:
        for i in range(STORES):
            writer.record(i, NewEvent("agent_message", "turn_warm", {"text": "t0;"}))
        while writer.committed < STORES:
            await asyncio.sleep(0.005)
        start = time.process_time()
        for i in range(events):
            writer.record(i % STORES, _tick())
            await asyncio.sleep(GAP_SECONDS)
        while writer.committed < STORES + events:
            await asyncio.sleep(0.001)
        return (time.process_time() - start) / events * 1e6
    finally:
        writer.close()


async def _measure(root: Path, events: int) -> dict[str, float]:
    pacing = await _pacing(events)
    figures = {"pacing": pacing, "recorder": max(0.0, await _recorder_us(root, events) - pacing)}
    for window in WINDOWS_MS:
        figures[f"shared_{window:g}ms"] = max(0.0, await _shared_us(root, window / 1000, events) - pacing)
    return figures


def run(root: Path, quick: bool) -> BenchResult:
    events = 1000 if quick else 3000
    result = BenchResult("cadence", f"Store path per lone event, {STORES} stores at one event every "
                                    f"{GAP_SECONDS * 1000:g} ms: the daemon's Recorder against one shared writer")
    root.mkdir(parents=True, exist_ok=True)
    figures = asyncio.run(_measure(root, events))
    commit = raw_commit_us(root / "raw" / "events.db")
    today = figures["recorder"]
    result.metric("cadence.recorder", "Recorder (a writer thread per store, today)", today, "µs", raw_limit=commit,
                  raw_label="one EventLog.commit", summary=True,
                  note=f"net of the pacing loop's {figures['pacing']:.0f} µs")
    for window in WINDOWS_MS:
        value = figures[f"shared_{window:g}ms"]
        result.metric(f"cadence.shared_{window:g}ms", f"one shared writer, hand-off every {window:g} ms", value, "µs",
                      raw_limit=commit, raw_label="one EventLog.commit", summary=window == WINDOWS_MS[-1],
                      note=(f"saves {today - value:.0f} µs a tick" if value < today else
                            f"costs {value - today:.0f} µs more a tick") + f"; adds up to {window:g} ms to every frame")
    result.notes.append("An upper bound on the saving: the model has no per-store isolation (a locked store would "
                        "stall every other session's commits), and the window's delay is paid by every live frame.")
    return result

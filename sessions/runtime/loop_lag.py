"""Event-loop lag: how late the shared loop runs a timer that should have fired now.

Every session, stream and request shares daphne's one loop, so anything that blocks it (SQLite, fsync, a
lock, a subprocess) shows up here as lag for everyone. The daemon samples it continuously; `compozy
status` and the benchmarks read the percentiles, which is how "nothing slow on the loop" is checked.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import NotRequired, TypedDict

# 20 samples a second: fine enough to catch a stall of a few tens of milliseconds, cheap enough to run
# always (one timer callback per sample).
SAMPLE_SECONDS = 0.05
# Two minutes of samples: the windows reported below, and a benchmark's measured phase, fit inside.
KEEP_SAMPLES = int(120 / SAMPLE_SECONDS)
WINDOWS_SECONDS = (10, 60)


class LagWindow(TypedDict):
    window_s: float
    samples: int
    p50_ms: NotRequired[float]  # with samples only
    p99_ms: NotRequired[float]
    max_ms: NotRequired[float]


class LagReport(TypedDict):
    """The loop's lag for `compozy status` (compozy/diagnostics/status.py)."""

    sample_interval_ms: float
    worst_since_start_ms: float
    windows: list[LagWindow]


class LoopLagMonitor:
    def __init__(self) -> None:
        self.samples: deque[tuple[float, float]] = deque(maxlen=KEEP_SAMPLES)  # (monotonic, lag seconds)
        self.worst = 0.0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _run(self) -> None:
        while True:
            due = time.monotonic() + SAMPLE_SECONDS
            await asyncio.sleep(SAMPLE_SECONDS)
            now = time.monotonic()
            lag = max(0.0, now - due)
            self.samples.append((now, lag))
            self.worst = max(self.worst, lag)

    def summary(self, window: float) -> LagWindow:
        cutoff = time.monotonic() - window
        lags = sorted(lag for at, lag in list(self.samples) if at >= cutoff)
        if not lags:
            return {"window_s": window, "samples": 0}

        def pct(p: float) -> float:
            return round(lags[min(len(lags) - 1, int(p * len(lags)))] * 1000, 3)

        return {"window_s": window, "samples": len(lags), "p50_ms": pct(0.50), "p99_ms": pct(0.99),
                "max_ms": round(lags[-1] * 1000, 3)}

    def report(self) -> LagReport:
        return {"sample_interval_ms": SAMPLE_SECONDS * 1000, "worst_since_start_ms": round(self.worst * 1000, 3),
                "windows": [self.summary(w) for w in WINDOWS_SECONDS]}


MONITOR = LoopLagMonitor()

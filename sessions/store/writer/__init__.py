"""The write path: one object a session writes through, and one place that decides where its batches commit.

```
 SessionRuntime.record ─► Recorder (recorder.py: merges chunks, holds a secret's tail, group commit, one batch in
   │                      flight a store, retries, storage failure)
   ├─ placement.entry: own thread? (a store that left the shared writer, or a cluster store waiting on its lease)
   │     └─► the store's own thread (recorder.py `_write_loop`: retries with backoff, fenced by the lease)
   └─► SharedWriter (shared.py: every session's batches in one hand-off, at most every 5 ms)
         ├─ placement.LoadGauge + placement.shared: thread or process, from every session's batches a second
         ├─► WriterThread (thread.py), in the daemon's process ─┐   a store locked, failing or slow, or a batch
         └─► the store writer process (process.py)  ────────────┴─► out when the process died: to its own thread
   ─► events.db committed (acknowledged from here) ─► Recorder.on_commit ─► the live feed's doorbell
```

Everything above the store imports this package, never its modules: `Recorder` to write, `shutdown` when the
loop ends, `report` for `compozy status`.
"""

from __future__ import annotations

from asyncio import AbstractEventLoop

from sessions.store.writer import shared
from sessions.store.writer.recorder import LEASE_WAIT_SECONDS, Recorder

__all__ = ["LEASE_WAIT_SECONDS", "Recorder", "report", "shutdown"]


async def shutdown(loop: AbstractEventLoop) -> None:
    """The loop's shared writer ends: its process answers what it was sent, closes its stores and exits."""
    await shared.for_loop(loop).shutdown()


def report() -> shared.WriterReport:
    """Where commits go now (thread or process), the load, and whether the process broke: for `compozy status`."""
    return shared.report()

"""The shared store writer's thread: its commits while the load is light (store/writer/shared.py decides).

A batch costs the loop no more than a queue put and one callback back, and commits on this thread in the daemon's
own process, one store after another (each its own transaction). Below a thousand or so batches a second that is
cheaper than the store writer process (no pipe, no second process to wake, none competing for a core); above it,
every SQLite call's GIL hand-off with the busy loop makes commits queue, and the process takes over.

It never waits on a store's lock (busy timeout 0) and tries a batch once: what fails or is slow comes back for the
store's own thread (`ThreadResult.detach`).
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
import weakref
from asyncio import AbstractEventLoop
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from sessions.store.events import EventLog
from sessions.store.ops import PendingOp
from sessions.store.rows import StoredEvent

logger = logging.getLogger(__name__)

# A commit slower than this (a checkpoint's fsync on a slow disk) sends its store to a thread of its own.
SLOW_COMMIT_SECONDS = 0.1


class ThreadStore(Protocol):
    """What the thread needs of a session's store writer (store/writer/recorder.py's `Recorder`)."""

    log: EventLog | None

    @property
    def name(self) -> str: ...

    def prepare(self, batch: list[PendingOp]) -> list[Any]: ...
    def open_log(self, busy_ms: int) -> EventLog: ...
    def attempt(self, ops: list[Any], *, shared: bool = False) -> tuple[list[StoredEvent],
                                                                       list[tuple[Any, ...]]]: ...
    def close_log(self) -> None: ...


@dataclass(slots=True)
class Outcome:
    """What a shared writer (this thread, or the store writer process) did with one batch. `ops` (the batch
    materialized) is set when the batch goes to its store's own thread: materializing applies the private-key carry,
    which must not run twice."""
    stored: list[StoredEvent]
    rows: list[tuple[Any, ...]]
    detach: str | None = None  # why the store leaves the shared writer (None: it stays)
    ops: list[Any] | None = None
    retry: bool = False  # the batch was not committed here: its store's own thread commits it
    verify: bool = False  # it may have been committed: the own thread looks for it first
    failure: tuple[str, str] | None = None  # (reason, detail): the store's own verdict, no retry can help


class ThreadResult(NamedTuple):
    """One batch's outcome (`batch` None: the thread closed the store's connection)."""

    store: ThreadStore
    batch: list[PendingOp] | None
    outcome: Outcome


ThreadWork = tuple[ThreadStore, list[PendingOp] | None]


class WriterThread:
    """Started at the first hand-off; `put` is called on the loop, `deliver` is called back on it."""

    def __init__(self, loop: AbstractEventLoop, deliver: Callable[[list[ThreadResult]], None]) -> None:
        self.loop = loop
        self._deliver = deliver
        self._queue: queue.SimpleQueue[list[ThreadWork] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        # Stores whose connection this thread opened and still holds: closed here if the loop goes away first.
        self._open: weakref.WeakSet[ThreadStore] = weakref.WeakSet()
        self._released: list[EventLog] = []  # connections to close, appended on the loop

    def put(self, work: list[ThreadWork]) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="store-writer", daemon=True)
            self._thread.start()
        self._queue.put(work)

    def release(self, log: EventLog) -> None:
        """A store's connection the loop took from it (the store moved to the process): closed on this thread, since
        closing may checkpoint."""
        self._released.append(log)
        self.put([])

    def _run(self) -> None:
        while True:
            work = self._queue.get()
            if work is None:
                return
            self._close_released()
            with contextlib.suppress(queue.Empty):
                while True:  # what queued while the last round was committing joins this one
                    more = self._queue.get_nowait()
                    if more is None:
                        self._queue.put(None)
                        break
                    work += more
            results: list[ThreadResult] = []
            for store, batch in work:
                if batch is None:
                    store.close_log()
                    self._open.discard(store)
                    results.append(ThreadResult(store, None, Outcome([], [])))
                    continue
                result = self._commit(store, batch)
                if store.log is not None and not result.outcome.detach:
                    self._open.add(store)
                else:
                    self._open.discard(store)
                results.append(result)
            if not results:
                continue
            try:
                self.loop.call_soon_threadsafe(self._deliver, results)
            except RuntimeError:  # the loop is closed (daemon exit): nobody is left to tell; close what is open,
                # including a store this round sent to a thread of its own (slow on a loaded machine): that thread
                # is never told either
                stores = {id(s): s for s in [*self._open, *(r.store for r in results if r.store.log is not None)]}
                for store in stores.values():
                    store.close_log()
                return

    def _close_released(self) -> None:
        while self._released:
            log = self._released.pop()
            try:
                log.close()
            except Exception as exc:  # noqa: BLE001 - an idle connection that fails to close holds nothing
                logger.warning("store %s: closing an idle connection failed: %s", log.path.parent.name, exc)

    def _commit(self, store: ThreadStore, batch: list[PendingOp]) -> ThreadResult:
        ops = None
        try:
            ops = store.prepare(batch)
            store.open_log(0)  # never waits on a lock; an open is not timed as a commit
            started = time.perf_counter()
            stored, rows = store.attempt(ops, shared=True)
            took = time.perf_counter() - started
        except Exception as exc:  # noqa: BLE001 - every kind goes to the store's own thread, which classifies it
            return ThreadResult(store, batch, Outcome([], [], detach=f"{type(exc).__name__}: {exc}", ops=ops,
                                                      retry=True))
        slow = f"a commit took {took * 1000:.0f} ms" if took > SLOW_COMMIT_SECONDS else None
        return ThreadResult(store, batch, Outcome(stored, rows, detach=slow))

    def stop(self) -> None:
        if self._thread is not None:
            self._queue.put(None)

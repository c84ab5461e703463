"""One store writer thread for every session on a loop, handed what they all recorded in one hand-off.

With a thread per store, each lone event of a quiet session paid a thread wake-up, a GIL hand-off and a wake-up of
the loop of its own; with a hundred sessions streaming at a model's pace those hundred threads queued for the GIL
behind each other and the shared loop fell tens of milliseconds behind. Here the sessions' batches travel to one
thread in one hand-off (at most one every `HAND_OFF_SECONDS`), are committed one store after another (each its own
transaction, as before), and come back in one callback.

Isolation stays per store: the shared thread tries a batch once and never waits on a store's lock (busy timeout
0). A store that is locked, failing, or slow (a commit over `SLOW_COMMIT_SECONDS`) is moved to a writer thread of
its own (`Recorder._detach`), which retries with backoff as every store did before; so such a store stalls only
its own session.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
import weakref
from asyncio import AbstractEventLoop, Future
from dataclasses import dataclass
from typing import Any, Protocol

from sessions.store.events import EventLog
from sessions.store.ops import PendingOp

logger = logging.getLogger(__name__)

# A commit slower than this (a checkpoint's fsync on a slow disk, an overloaded filesystem) sends its store to a
# thread of its own for the rest of its life: one slow store must not delay every other session's frames.
SLOW_COMMIT_SECONDS = 0.1
# At most one hand-off to the thread per this many seconds: a lone event waits up to 5 ms for others to join it. Every
# hand-off costs the loop and the thread a wake-up and a GIL exchange. Measured with `python -m bench --only capacity`
# at 100 sessions (2,000 chunks/s), four alternating pairs on a noisy VM: the daemon's CPU per chunk 300-362 µs
# (mean 330) handing off at every loop iteration, 269-321 µs (mean 297) with 5 ms; p99 varied more between runs
# than between the two.
HAND_OFF_SECONDS = 0.005


@dataclass(slots=True)
class Outcome:
    """What the shared thread did with one batch. `ops` (the batch materialized) is set when the batch goes to its
    store's own thread: materializing applies the private-key carry, which must not run twice."""
    stored: list[dict[str, Any]]
    rows: list[tuple[Any, ...]]
    detach: str | None = None  # why the store leaves the shared thread (None: it stays)
    ops: list[Any] | None = None
    retry: bool = False  # the batch was not committed: its store's own thread commits it


class Store(Protocol):
    """What the shared thread needs of a session's store writer (runtime/recorder.py's `Recorder`)."""

    log: EventLog | None

    @property
    def name(self) -> str: ...

    def prepare(self, batch: list[PendingOp]) -> list[Any]: ...
    def attempt(self, ops: list[Any], *, shared: bool = False) -> tuple[list[dict[str, Any]],
                                                                       list[tuple[Any, ...]]]: ...
    def close_log(self) -> None: ...
    def shared_done(self, batch: list[PendingOp], outcome: Outcome) -> None: ...

Work = tuple[Store, list[PendingOp] | None]  # a batch, or None: close the store


class SharedWriter:
    """The shared store writer of one event loop. `submit` is called on the loop; the thread does the rest."""

    def __init__(self, loop: AbstractEventLoop) -> None:
        self.loop = loop
        self._queue: queue.SimpleQueue[list[Work] | None] = queue.SimpleQueue()
        self._gathered: list[Work] = []
        self._sent_at = float("-inf")  # loop time of the last hand-off
        self._thread: threading.Thread | None = None
        self._closing: dict[int, Future[None]] = {}
        # Stores whose connection this thread opened and still holds: closed here if the loop goes away first.
        self._open: weakref.WeakSet[Store] = weakref.WeakSet()

    def submit(self, recorder: Store, batch: list[PendingOp]) -> None:
        """On the loop: the batch joins this iteration's hand-off."""
        self._gather((recorder, batch))

    def close_store(self, recorder: Store) -> Future[None]:
        """On the loop: close the store's connection on the thread that opened it; the future resolves after."""
        done = self._closing.get(id(recorder))
        if done is None:
            done = self._closing[id(recorder)] = self.loop.create_future()
            self._gather((recorder, None))
        return done

    def _gather(self, work: Work) -> None:
        if not self._gathered:
            wait = HAND_OFF_SECONDS - (self.loop.time() - self._sent_at)
            if wait > 0:
                self.loop.call_later(wait, self._send)
            else:
                self.loop.call_soon(self._send)
        self._gathered.append(work)

    def _send(self) -> None:
        self._sent_at = self.loop.time()
        work, self._gathered = self._gathered, []
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="store-writer", daemon=True)
            self._thread.start()
        self._queue.put(work)

    # ---- the thread ------------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            work = self._queue.get()
            if work is None:
                return
            with contextlib.suppress(queue.Empty):
                while True:  # what queued while the last round was committing joins this one
                    more = self._queue.get_nowait()
                    if more is None:
                        self._queue.put(None)
                        break
                    work += more
            results: list[tuple[Store, list[PendingOp] | None, Outcome | None]] = []
            for recorder, batch in work:
                if batch is None:
                    recorder.close_log()
                    self._open.discard(recorder)
                    results.append((recorder, None, None))
                    continue
                outcome = self._commit(recorder, batch)
                if recorder.log is not None and not outcome.detach:
                    self._open.add(recorder)
                else:
                    self._open.discard(recorder)
                results.append((recorder, batch, outcome))
            try:
                self.loop.call_soon_threadsafe(self._deliver, results)
            except RuntimeError:  # the loop is closed (daemon exit): nobody is left to tell; close what is open
                for recorder in list(self._open):
                    recorder.close_log()
                return

    def _commit(self, recorder: Store, batch: list[PendingOp]) -> Outcome:
        ops = None
        try:
            ops = recorder.prepare(batch)
            started = time.perf_counter()
            stored, rows = recorder.attempt(ops, shared=True)
            took = time.perf_counter() - started
        except Exception as exc:  # noqa: BLE001 - every kind goes to the store's own thread, which classifies it
            return Outcome([], [], detach=f"{type(exc).__name__}: {exc}", ops=ops, retry=True)
        if took > SLOW_COMMIT_SECONDS:
            return Outcome(stored, rows, detach=f"a commit took {took * 1000:.0f} ms")
        return Outcome(stored, rows)

    def _deliver(self, results: list[tuple[Store, list[PendingOp] | None, Outcome | None]]) -> None:
        """On the loop: each store's outcome, in the order they were committed."""
        for recorder, batch, outcome in results:
            if batch is None or outcome is None:
                done = self._closing.pop(id(recorder), None)
                if done is not None and not done.done():
                    done.set_result(None)
                continue
            try:
                recorder.shared_done(batch, outcome)
            except Exception:  # one session's callback must not keep the others' commits from being reported
                logger.exception("store %s: reporting a commit failed", recorder.name)


_writers: weakref.WeakKeyDictionary[AbstractEventLoop, SharedWriter] = weakref.WeakKeyDictionary()


def for_loop(loop: AbstractEventLoop) -> SharedWriter:
    writer = _writers.get(loop)
    if writer is None:
        writer = _writers[loop] = SharedWriter(loop)
    return writer


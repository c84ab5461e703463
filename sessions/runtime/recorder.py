"""The session's store writer: group commit on a thread of its own, never on the event loop.

`record` is synchronous and cheap, so the ACP receive loop can call it in arrival order. Everything
recorded while a commit is in flight becomes the next batch (group commit: the busier the session, the
bigger the batches). Commits run on the store's own thread, so a locked store or a slow fsync stalls
only its own session, never the loop that every session, stream and request shares.

A failed commit keeps its batch and is retried with bounded backoff; `MAX(sequence)` is re-read inside
every write transaction. A store that stays unwritable past `WRITE_DEADLINE_SECONDS` puts the recorder
in a failed state: nothing recorded afterwards is written, `flush` raises, and `on_failure` tells the
runtime, which stops the session with failure kind `storage_failure`. The doorbell rings only after a
commit.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from sessions.store.events import EventLog, HookRun, NewEvent, StoreOp, UsageUpdate, merge_chunks
from sessions.store.failures import StoreFailure, classify

logger = logging.getLogger(__name__)

# How long one batch may keep failing before the store counts as unwritable. SQLite's own lock wait in
# the reference is 5 s (busy_timeout=5000); a store locked or full for longer than that stops the session.
WRITE_DEADLINE_SECONDS = 5.0
# First retry after 50 ms (a transient lock), doubling to at most 1 s between attempts.
RETRY_FIRST_SECONDS = 0.05
RETRY_MAX_SECONDS = 1.0
# One lock wait inside an attempt; the retry loop, not SQLite, owns the overall deadline.
ATTEMPT_BUSY_TIMEOUT_MS = 1000
# Bound one transaction, so a burst of 100k chunks commits (and reaches viewers) in steps.
MAX_BATCH_OPS = 5000

Committed = Callable[[list[dict[str, Any]], list[tuple[Any, ...]]], None]


class Recorder:
    def __init__(self, path: Path, agent_name: str, on_commit: Committed,
                 on_failure: Callable[[StoreFailure], None] | None = None, *, redact: bool = True,
                 write_deadline: float = WRITE_DEADLINE_SECONDS) -> None:
        self.path = path
        self.agent_name = agent_name
        self.redact = redact
        # Opened on the writer thread at the first commit: opening runs SQLite I/O (schema, WAL, MAX).
        self.log: EventLog | None = None
        self.on_commit = on_commit
        self.on_failure = on_failure
        self.write_deadline = write_deadline
        self._pending: list[StoreOp] = []
        self._recorded = 0  # ops accepted by record()/merge_usage()/record_hook_run()
        self._committed = 0  # ops durably committed
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._task: asyncio.Task[None] | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"store-{path.parent.name[-8:]}")
        self.failure: StoreFailure | None = None
        self.closed = False
        self.commit_seconds: Callable[[float], None] | None = None  # observed by metrics, when wired

    @property
    def name(self) -> str:
        return self.path.parent.name

    # ---- the loop side: cheap, synchronous ------------------------------------------------------

    def record(self, type_: str, turn_id: str, content: dict[str, Any]) -> None:
        self._add(NewEvent(type_, turn_id, content))

    def merge_usage(self, turn_id: str, usage: dict[str, Any]) -> None:
        self._add(UsageUpdate(turn_id, usage))

    def record_hook_run(self, row: dict[str, Any]) -> None:
        self._add(HookRun(row))

    def _add(self, op: StoreOp) -> None:
        if self.closed or self.failure is not None:
            # Never written: a session whose store failed must not look as if it went on recording.
            logger.warning("%s not recorded for %s: the recorder is %s", getattr(op, "type", type(op).__name__),
                           self.name, "failed" if self.failure else "closed")
            return
        self._pending.append(op)
        self._recorded += 1
        if self._task is None:
            # Started from the next loop iteration: everything recorded in this tick joins the batch.
            self._task = asyncio.get_running_loop().create_task(self._drain())

    async def flush(self) -> None:
        """Wait until everything recorded so far is committed; raises StoreFailure if it never will be."""
        if self.failure is not None:
            raise self.failure
        if self._committed >= self._recorded:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((self._recorded, waiter))
        await asyncio.shield(waiter)

    @property
    def pending(self) -> int:
        return self._recorded - self._committed

    # ---- the writer ------------------------------------------------------------------------

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._pending and self.failure is None:
                batch, self._pending = self._pending[:MAX_BATCH_OPS], self._pending[MAX_BATCH_OPS:]
                try:
                    stored, rows = await loop.run_in_executor(self._executor, self._commit_with_retry, batch)
                except StoreFailure as failure:
                    self._pending = batch + self._pending  # kept: never silently dropped
                    self._fail(failure)
                    return
                self._committed += len(batch)
                if stored:
                    try:
                        self.on_commit(stored, rows)
                    except Exception:
                        logger.exception("commit callback failed for %s", self.name)
                self._wake_waiters()
        finally:
            self._task = None

    def _commit_with_retry(self, batch: list[StoreOp]) -> tuple[list[dict[str, Any]], list[tuple[Any, ...]]]:
        """Runs on the store's thread. Retries a failing batch until it commits or the deadline passes."""
        ops = merge_chunks(batch)
        started = time.monotonic()
        delay = RETRY_FIRST_SECONDS
        attempt = 0
        while True:
            attempt += 1
            try:
                t0 = time.perf_counter()
                if self.log is None:
                    self.log = EventLog(self.path, self.agent_name, redact=self.redact,
                                        busy_timeout_ms=ATTEMPT_BUSY_TIMEOUT_MS)
                stored = self.log.commit(ops)
                if self.commit_seconds is not None:
                    self.commit_seconds(time.perf_counter() - t0)
                if attempt > 1:
                    logger.warning("store %s: batch committed after %d attempts", self.name, attempt)
                return stored, self.log.last_rows
            except Exception as exc:
                reason = classify(exc, self.path)
                if reason is None:
                    # Not a storage condition (a bug or a value SQLite refuses): retrying cannot help.
                    logger.exception("store %s: batch refused", self.name)
                    raise StoreFailure("write_refused", str(exc)) from exc
                if time.monotonic() - started + delay > self.write_deadline:
                    logger.error("store %s unwritable (%s) after %d attempts: %s", self.name,
                                 reason, attempt, exc)
                    raise StoreFailure(reason, str(exc)) from exc
                logger.warning("store %s: write failed (%s), retrying in %.2fs: %s", self.name,
                               reason, delay, exc)
                time.sleep(delay)
                delay = min(delay * 2, RETRY_MAX_SECONDS)

    def _fail(self, failure: StoreFailure) -> None:
        self.failure = failure
        for _, waiter in self._waiters:
            if not waiter.done():
                waiter.set_exception(failure)
                waiter.exception()  # retrieved: a waiter that went away must not log "never retrieved"
        self._waiters.clear()
        if self.on_failure is not None:
            self.on_failure(failure)

    def _wake_waiters(self) -> None:
        keep = []
        for target, waiter in self._waiters:
            if target <= self._committed:
                if not waiter.done():
                    waiter.set_result(None)
            else:
                keep.append((target, waiter))
        self._waiters = keep

    # ---- closing ---------------------------------------------------------------------------

    async def close(self) -> None:
        """Commit what is pending (unless the store failed), then close the log on its own thread."""
        with contextlib.suppress(StoreFailure):
            await self.flush()
        self.closed = True
        loop = asyncio.get_running_loop()
        try:
            if self.log is not None:
                await loop.run_in_executor(self._executor, self.log.close)
        finally:
            self._executor.shutdown(wait=False)

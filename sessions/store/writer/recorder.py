"""The session's store writer: group commit off the event loop.

`record` is synchronous and cheap, so the ACP receive loop can call it in arrival order; adjacent streamed
chunks merge there as they arrive (docs/reference/events.md §2), one list append each. Everything
recorded while a commit is in flight becomes the next batch (group commit: the busier the session, the
bigger the batches). Commits run on the loop's shared store writer (store/writer/shared.py: every session's
batches in one hand-off, at most every 5 ms, committed by its thread, or under load by the store writer process,
to which the loop sends them drafted), which never waits on a store: a store that is locked, failing or slow moves
to a thread of its own, where it is retried as below. So a locked store or a slow fsync stalls only its
own session, never the loop that every session, stream and request shares.

In a cluster a commit first waits until the node's leases are confirmed (`may_write`: a node stalled or cut
off from the catalog past two renewals may have been failed over, and a survivor may be writing this store);
fenced meanwhile (`closed`), the batch is dropped, never written.

A failed commit keeps its batch and is retried with bounded backoff; `MAX(sequence)` is re-read inside
every write transaction. A store that stays unwritable past `WRITE_DEADLINE_SECONDS` puts the recorder
in a failed state: nothing recorded afterwards is written, `flush` raises, and `on_failure` tells the
runtime, which stops the session with failure kind `storage_failure`. The doorbell rings only after a
commit.

Where redaction is on, a batch whose last streamed run ends in what may be the beginning of a secret (a
provider prefix, a key and its separator: `redact_stream.secret_tail`) keeps that tail back for the next chunk to
join, at most `HOLD_SECONDS`, so the row that stores the secret holds all of it and is redacted as a whole. A
flush, a close or any other event releases it at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import queue
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sessions.core.failures import StoreFailure, classify
from sessions.core.jsonobj import EventContent
from sessions.core.redact_stream import PrivateKeyCarry, secret_tail
from sessions.store import replica, shipper
from sessions.store.clean import scrub
from sessions.store.events import EventLog, row_to_event
from sessions.store.ops import (
    MERGEABLE_TYPES,
    ChunkRun,
    HookRun,
    HookRunRow,
    NewEvent,
    PendingOp,
    UsageColumns,
    UsageUpdate,
    append_op,
    materialize,
    op_weight,
)
from sessions.store.rows import Drafted, StoredEvent, draft
from sessions.store.writer import placement
from sessions.store.writer import shared as store_writer
from sessions.store.writer.placement import Home
from sessions.store.writer.thread import Outcome

logger = logging.getLogger(__name__)

# How long one batch may keep failing before the store counts as unwritable. SQLite's own lock wait in
# the reference is 5 s (busy_timeout=5000); a store locked or full for longer than that stops the session.
WRITE_DEADLINE_SECONDS = 5.0
# First retry after 50 ms (a transient lock), doubling to at most 1 s between attempts.
RETRY_FIRST_SECONDS = 0.05
RETRY_MAX_SECONDS = 1.0
# One lock wait inside an attempt; the retry loop, not SQLite, owns the overall deadline.
ATTEMPT_BUSY_TIMEOUT_MS = 1000
# Bound one transaction: ops, each a lone event or a run of at most MAX_RUN_CHUNKS merged chunks.
MAX_BATCH_OPS = 5000
# The longest a streamed tail that may begin a secret waits for the rest of it (a model streams a 40-character
# token in well under a second); and how far back a tail is looked for.
HOLD_SECONDS = 1.0
HOLD_WINDOW_CHARS = 4096
LEASE_WAIT_SECONDS = 0.05  # how often a commit waiting for the lease looks again

# Batches handed to store threads and not yet reported back, per event loop, across every session on it: a
# session streaming a burst reads it to leave the GIL to the other sessions' writers (`others_waiting`).
# Weak keys: a loop closed with a batch still out takes its count with it.
_batches_in_flight: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, int] = weakref.WeakKeyDictionary()

Committed = Callable[[list[StoredEvent], list[tuple[Any, ...]]], None]


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
        self._pending: list[PendingOp] = []
        self._recorded = 0  # ops accepted by record()/merge_usage()/record_hook_run()
        self._committed = 0  # ops durably committed
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        # The hand-off is a plain queue to a thread and one call_soon_threadsafe back: no Task, executor
        # future or wrapped future per batch (with lone events, that bookkeeping cost more than the commit).
        self._loop: asyncio.AbstractEventLoop | None = None
        # The store's own writer thread: started only when the store leaves the shared writer (`_detach`).
        self._queue: queue.SimpleQueue[tuple[list[PendingOp], list[Any] | None, bool] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._detached = False
        self._scheduled = False  # a hand-off is due at the next loop iteration
        self._in_flight = False  # a batch is with the writer thread and not yet reported back
        self._thread_done: asyncio.Future[None] | None = None
        self.failure: StoreFailure | None = None
        self.closed = False
        self.refused = 0  # events offered after the recorder failed or closed, never written
        self.commit_seconds: Callable[[float], None] | None = None  # observed by metrics, when wired
        self._held_since: float | None = None  # when the tail kept back now was first kept back
        self._hold_timer: asyncio.TimerHandle | None = None
        self._key_carry = PrivateKeyCarry()  # the writer thread's: private-key blocks that span rows
        self.may_write: Callable[[], bool] | None = None  # a cluster's lease check, read on the writer thread
        self.replica: replica.Link | None = None  # a cluster's durable copy of each batch (store/replica.py)
        self._shipping = 0  # batches with the replica, not yet published

    @property
    def name(self) -> str:
        return self.path.parent.name

    # ---- the loop side: cheap, synchronous ------------------------------------------------------

    def record(self, type_: str, turn_id: str, content: EventContent) -> None:
        self._add(NewEvent(type_, turn_id, content))

    def merge_usage(self, turn_id: str, usage: UsageColumns) -> None:
        self._add(UsageUpdate(turn_id, usage))

    def record_hook_run(self, row: HookRunRow) -> None:
        self._add(HookRun(row))

    def _add(self, op: NewEvent | UsageUpdate | HookRun) -> None:
        if self.closed or self.failure is not None:
            # Never written: a session whose store failed must not look as if it went on recording. Said once per
            # recorder, then counted: a failed store under a streaming agent refused 18,000 chunks, one log line each.
            self.refused += 1
            if self.refused == 1:
                logger.warning("%s not recorded for %s: the recorder is %s; later events are refused too",
                               getattr(op, "type", type(op).__name__), self.name,
                               "failed" if self.failure else "closed")
            return
        append_op(self._pending, op)
        self._recorded += 1
        if not self._scheduled and not self._in_flight:
            # From the next loop iteration: everything recorded in this tick joins the batch.
            self._scheduled = True
            if self._loop is None:
                self._loop = asyncio.get_running_loop()
            self._loop.call_soon(self._hand_off)

    async def flush(self) -> None:
        """Wait until everything recorded so far is committed; raises StoreFailure if it never will be."""
        if self.failure is not None:
            raise self.failure
        if self._committed >= self._recorded:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((self._recorded, waiter))
        if self._pending and not self._in_flight and not self._scheduled:
            self._hand_off()  # a held-back tail: a waiter releases it
        await asyncio.shield(waiter)

    def others_waiting(self) -> bool:
        """Whether another session's batch is with its store thread: a thread that needs the GIL to commit."""
        return self._loop is not None and _batches_in_flight.get(self._loop, 0) > self._in_flight

    @property
    def pending(self) -> int:
        return self._recorded - self._committed

    # ---- the writer ------------------------------------------------------------------------

    def _hand_off(self) -> None:
        """On the loop: the next batch to the writer thread (one batch in flight at a time, so sequence
        order is arrival order)."""
        self._scheduled = False
        if self._in_flight or not self._pending or self.failure is not None:
            return
        batch, self._pending = self._pending[:MAX_BATCH_OPS], self._pending[MAX_BATCH_OPS:]
        if not self._pending and self.redact:
            held = self._hold_tail(batch)
            if held is not None:
                self._pending = [held]
                if not batch:
                    return
        self._in_flight = True
        loop = self._loop
        assert loop is not None
        _batches_in_flight[loop] = _batches_in_flight.get(loop, 0) + 1
        if placement.entry(detached=self._detached, leased=self.may_write is not None) is Home.OWN:
            self._to_own_thread(batch, None)
        else:
            store_writer.for_loop(loop).submit(self, batch)

    def _to_own_thread(self, batch: list[PendingOp], ops: list[Any] | None, verify: bool = False) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._write_loop, name=f"store-{self.name[-8:]}", daemon=True)
            self._thread.start()
        self._queue.put((batch, ops, verify))

    def _detach(self, why: str) -> None:
        """This store leaves the shared writer for a thread of its own, for the rest of its life."""
        if not self._detached:
            self._detached = True
            logger.warning("store %s: moved to a writer thread of its own (%s)", self.name, why)

    def shared_done(self, batch: list[PendingOp], outcome: Outcome) -> None:
        """On the loop: what the shared writer did with this store's batch."""
        if outcome.failure is not None:
            logger.error("store %s unwritable (%s): %s", self.name, *outcome.failure)
            self._committed_batch(batch, [], [], StoreFailure(*outcome.failure))
            return
        if outcome.detach is not None:
            self._detach(outcome.detach)
        if outcome.retry:  # the one move mid-flight (placement.py says why): its own thread commits it, with retries
            self._to_own_thread(batch, outcome.ops, outcome.verify)
            return
        self._committed_batch(batch, outcome.stored, outcome.rows, None)

    def _hold_tail(self, batch: list[PendingOp]) -> ChunkRun | None:
        """Take the end of the batch's last streamed run off the batch when it may begin a secret."""
        last = batch[-1]
        now = time.monotonic()
        if (type(last) is not ChunkRun or self._waiters or self.closed
                or (self._held_since is not None and now - self._held_since >= HOLD_SECONDS)):
            self._held_since = None
            return None
        chars = secret_tail(last.tail_text(HOLD_WINDOW_CHARS))
        if chars == 0:
            self._held_since = None
            return None
        head, tail, added = last.split_tail(chars)
        self._recorded += added
        if head is None:
            batch.pop()
        else:
            batch[-1] = head
        if self._held_since is None:
            self._held_since = now
        if self._hold_timer is None:
            assert self._loop is not None
            self._hold_timer = self._loop.call_later(HOLD_SECONDS - (now - self._held_since), self._release_hold)
        return tail

    def _release_hold(self) -> None:
        self._hold_timer = None
        if self._pending and not self._in_flight and not self._scheduled:
            self._hand_off()

    def _carry_private_keys(self, ops: list[Any]) -> list[Any]:
        """On the writer thread, in commit order: rows inside a private-key block another row opened."""
        out = []
        for op in ops:
            if type(op) is NewEvent and op.type in MERGEABLE_TYPES and type(op.content.get("text")) is str:
                text = self._key_carry.apply(op.turn_id, op.type, op.content["text"])
                if text is not op.content["text"]:
                    op = NewEvent(op.type, op.turn_id, {**op.content, "text": text}, op.id)
            out.append(op)
        return out

    def _write_loop(self) -> None:
        """The writer thread: commits each batch, then reports back to the loop in one callback."""
        loop = self._loop
        assert loop is not None
        while True:
            item = self._queue.get()
            if item is None:
                break
            batch, prepared, verify = item
            stored: list[StoredEvent] = []
            rows: list[tuple[Any, ...]] = []
            failure: StoreFailure | None = None
            try:
                stored, rows = self._commit_with_retry(batch, prepared, verify)
            except StoreFailure as exc:
                failure = exc
            except BaseException as exc:  # never let the thread die with a batch claimed as in flight
                logger.exception("store %s: writer failed", self.name)
                failure = StoreFailure("write_refused", str(exc))
            try:
                loop.call_soon_threadsafe(self._committed_batch, batch, stored, rows, failure)
            except RuntimeError:  # the loop is closed: nobody is left to tell, but the log is still closed
                break
        self.close_log()
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(self._writer_exited)

    def close_log(self) -> None:
        """On the writer thread that holds the store: its connection closed."""
        if self.log is not None:
            with contextlib.suppress(Exception):
                self.log.close()

    def _committed_batch(self, batch: list[PendingOp], stored: list[StoredEvent], rows: list[tuple[Any, ...]],
                         failure: StoreFailure | None) -> None:
        """On the loop, after the writer thread finished a batch."""
        self._in_flight = False
        loop = self._loop
        assert loop is not None
        _batches_in_flight[loop] -= 1
        if failure is not None:
            self._pending = batch + self._pending  # kept: never silently dropped
            self._fail(failure)
            return
        weight = sum(map(op_weight, batch))
        if self.replica is not None:
            # A cluster's durable copy (store/replica.py): the batch is published (the feed, the doorbell, flush's
            # waiters) once the database has it, or holds it through an outage. Meanwhile the next batch commits.
            self._shipping += 1
            self.replica.ship(rows, functools.partial(self._shipped, weight, stored, rows))
        else:
            self._publish(weight, stored, rows)
        if self._pending and not self._scheduled:
            self._hand_off()  # what was recorded while this batch was in flight is the next batch

    def _shipped(self, weight: int, stored: list[StoredEvent], rows: list[tuple[Any, ...]],
                 outcome: shipper.Outcome) -> None:
        """On the replica's thread: what the database did with the batch, back to the loop in order."""
        loop = self._loop
        assert loop is not None
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody is left to tell
            loop.call_soon_threadsafe(self._after_ship, weight, stored, rows, outcome)

    def _after_ship(self, weight: int, stored: list[StoredEvent], rows: list[tuple[Any, ...]],
                    outcome: shipper.Outcome) -> None:
        self._shipping -= 1
        if outcome is shipper.Outcome.OVERFLOW and self.failure is None:
            self._fail(StoreFailure("replica_backlog_full", f"more than {shipper.HELD_LIMIT} events held while the "
                                    "cluster's database did not answer"))
        self._publish(weight, stored, rows)

    def _publish(self, weight: int, stored: list[StoredEvent], rows: list[tuple[Any, ...]]) -> None:
        """On the loop: the batch is acknowledged: its rows go to the live feed and the doorbell."""
        self._committed += weight
        if self.replica is not None:
            self.replica.published(rows)
        if stored:
            try:
                self.on_commit(stored, rows)
            except Exception:
                logger.exception("commit callback failed for %s", self.name)
        self._wake_waiters()

    def _writer_exited(self) -> None:
        if self._thread_done is not None and not self._thread_done.done():
            self._thread_done.set_result(None)

    def prepare(self, batch: list[PendingOp]) -> list[Any]:
        """On a writer thread, in commit order: the batch as store ops (a private-key block that spans rows
        carried over), exactly once per batch."""
        ops = materialize(batch)
        return self._carry_private_keys(ops) if self.redact else ops

    def draft(self, ops: list[Any]) -> Drafted:
        """Where the batch is handed to the shared writer: its drafts, which the store writer process finishes."""
        return draft(ops, self.agent_name)

    def observe_commit(self, seconds: float) -> None:
        if self.commit_seconds is not None:
            self.commit_seconds(seconds)

    def attempt(self, ops: list[Any], *, shared: bool = False) -> tuple[list[StoredEvent], list[tuple[Any, ...]]]:
        """On a writer thread: one commit. The shared writer's thread waits on no lock; the store's own thread waits
        one attempt's worth."""
        log = self.open_log(0 if shared else ATTEMPT_BUSY_TIMEOUT_MS)
        t0 = time.perf_counter()
        stored = log.commit(ops)
        self.observe_commit(time.perf_counter() - t0)
        return stored, log.last_rows

    def open_log(self, busy_ms: int) -> EventLog:
        """On a writer thread: the store's connection, opened at its first use, waiting `busy_ms` on a lock. Apart
        from the commit, so that an open (slow on a loaded machine) never counts as a slow commit."""
        if self.log is None:
            self.log = EventLog(self.path, self.agent_name, redact=self.redact, busy_timeout_ms=busy_ms)
        else:
            self.log.set_busy_timeout(busy_ms)
        return self.log

    def _landed(self, ops: list[Any]) -> tuple[list[StoredEvent], list[tuple[Any, ...]]] | None:
        """A batch the store writer process may have committed before it died: its rows if it did."""
        rows = self.open_log(ATTEMPT_BUSY_TIMEOUT_MS).landed([op.id for op in ops if type(op) is NewEvent])
        if rows is None:
            return None
        logger.warning("store %s: a batch out when the store writer process died had been committed", self.name)
        return [row_to_event(row) for row in rows], rows

    def _commit_with_retry(self, batch: list[PendingOp], prepared: list[Any] | None = None,
                           verify: bool = False) -> tuple[list[StoredEvent], list[tuple[Any, ...]]]:
        """Runs on the store's own thread. Retries a failing batch until it commits or the deadline passes."""
        if self.may_write is not None and not self._await_lease():
            return [], []
        ops = prepared if prepared is not None else self.prepare(batch)
        started = time.monotonic()
        delay = RETRY_FIRST_SECONDS
        attempt = 0
        scrubbed = False
        while True:
            attempt += 1
            try:
                if verify and (landed := self._landed(ops)) is not None:
                    return landed
                stored, rows = self.attempt(ops)
                if attempt > 1:
                    logger.warning("store %s: batch committed after %d attempts", self.name, attempt)
                return stored, rows
            except Exception as exc:
                if isinstance(exc, UnicodeEncodeError) and not scrubbed:
                    # A lone surrogate (agents' messages are cleaned as parsed; this is the last line): never one
                    # value failing its whole batch, and its session, as a storage failure.
                    logger.warning("store %s: a value no UTF-8 encoder takes; stored with U+FFFD instead", self.name)
                    ops, scrubbed = [_scrubbed(op) for op in ops], True
                    continue
                if isinstance(exc, StoreFailure):  # the store's own verdict (displaced): retrying cannot help
                    logger.error("store %s unwritable (%s): %s", self.name, exc.reason, exc.detail)
                    raise
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

    def _await_lease(self) -> bool:
        """Wait while the lease is unconfirmed. False: the session was fenced (`closed` with a batch still out:
        a plain close flushes first), so nothing is written."""
        assert self.may_write is not None
        waited = False
        while not self.closed and not self.may_write():
            if not waited:
                logger.warning("store %s: commits wait until this node's session leases are confirmed", self.name)
                waited = True
            time.sleep(LEASE_WAIT_SECONDS)
        if self.closed:
            logger.error("store %s: a batch was not written: this node lost the session's lease", self.name)
            return False
        return True

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
        if self.refused > 1 and not self.closed:
            logger.warning("store %s: %d event(s) refused after it %s", self.name, self.refused,
                           "failed" if self.failure else "closed")
        self.closed = True
        if self.replica is not None:
            # What an outage held back reaches the database before the lease goes with the stop (bounded).
            link, self.replica = self.replica, None
            if not await asyncio.to_thread(link.settle):
                logger.error("store %s: closed with events the cluster's database does not have yet; they stay in "
                             "events.db and are sent when this session is written again", self.name)
            link.close()
        if self._loop is not None:
            # Held open by the shared writer (its thread, its process or both): closed there, after any batch of
            # ours it still has.
            await asyncio.shield(store_writer.for_loop(self._loop).close_store(self))
        if self._thread is None:
            return
        if self._thread_done is None:  # a second close waits for the same exit
            self._thread_done = asyncio.get_running_loop().create_future()
            self._queue.put(None)  # after any batch still queued (a failed store's retries are over)
        await asyncio.shield(self._thread_done)


def _scrubbed(op: Any) -> Any:
    if isinstance(op, NewEvent):
        return NewEvent(op.type, op.turn_id, scrub(op.content), op.id)
    if isinstance(op, UsageUpdate):
        return UsageUpdate(op.turn_id, scrub(op.usage))
    if isinstance(op, HookRun):
        return HookRun(scrub(op.row))
    return op

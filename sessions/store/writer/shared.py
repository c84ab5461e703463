"""One store writer for every session on a loop: a thread while the load is light, a process of its own above it.

Every session's batches go to it in one hand-off (at most one every `HAND_OFF_SECONDS`) and are committed one
store after another (each its own transaction). Where they commit depends on every session's batches a second:
- below `placement.PROCESS_ABOVE`, on the writer thread (store/writer/thread.py) in the daemon's process: a lone event
  costs a queue put and one callback;
- above it, in the store writer process (store/writer/process.py): batches are drafted on the loop (ids,
  timestamps) and sent in one frame; the process redacts, encodes and commits them and answers in one frame with
  what it stored. In a thread, every SQLite call of every commit gives up the GIL and has to win it back from the
  busy loop, so at a hundred streaming sessions commits queued behind the loop; a process has its own interpreter.
  Back to the thread below `THREAD_BELOW`. Which one, and when a batch goes elsewhere, is decided in `placement.py`.

Isolation stays per store either way: neither waits on a lock (busy timeout 0) and each tries a batch once. A store
that is locked, failing, or slow (a commit over `SLOW_COMMIT_SECONDS`) is moved to a writer thread of its own
(`Recorder._detach`), which retries with backoff, so it stalls only its own session. A batch out when the process
died may have been committed or not: its store's own thread looks for it by its first event's id before writing
it (`verify`). The process is started again for the next batches, at most `MAX_RESTARTS` times; after that the
thread commits everything, and `broken` says why.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import pickle
import subprocess
import sys
import weakref
from asyncio import AbstractEventLoop, Future
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol, TypedDict, cast

import sessions
from sessions.core.redact import known_secrets
from sessions.store.ops import NewEvent, PendingOp
from sessions.store.rows import Drafted, Values, numbered
from sessions.store.writer import placement
from sessions.store.writer.placement import Home, LoadGauge
from sessions.store.writer.process import HEADER_BYTES, CloseJob, JobResult, SecretsJob, WriteJob, frame
from sessions.store.writer.thread import (
    SLOW_COMMIT_SECONDS,
    Outcome,
    ThreadResult,
    ThreadStore,
    ThreadWork,
    WriterThread,
)

logger = logging.getLogger(__name__)

# At most one hand-off per this many seconds: a lone event waits up to 5 ms for others to join it. Every hand-off
# costs the loop a wake-up and a frame each way. Measured with the writer still a thread, `python -m bench --only
# capacity` at 100 sessions (2,000 chunks/s), four alternating pairs on a noisy VM: the daemon's CPU per chunk
# 300-362 µs (mean 330) handing off at every loop iteration, 269-321 µs (mean 297) with 5 ms.
HAND_OFF_SECONDS = 0.005
# A process that keeps dying (a broken interpreter, memory limits) is not started again past this many times.
MAX_RESTARTS = 3
_PROJECT_ROOT = str(Path(sessions.__file__).resolve().parent.parent)


class Store(ThreadStore, Protocol):
    """What the shared writer needs of a session's store writer (store/writer/recorder.py's `Recorder`)."""

    path: Path
    agent_name: str

    redact: bool

    def draft(self, ops: list[Any]) -> Drafted: ...
    def shared_done(self, batch: list[PendingOp], outcome: Outcome) -> None: ...
    def observe_commit(self, seconds: float) -> None: ...


Work = tuple[Store, list[PendingOp] | None]  # a batch, or None: close the store


@dataclass(slots=True)
class _Sent:
    """One job of a frame the process has not answered yet."""
    store: Store
    batch: list[PendingOp] | None  # None: a close (or the secrets)
    ops: list[Any] | None = None
    drafted: Drafted | None = None
    secrets: bool = False
    internal: bool = False  # a close nobody waits on


class SharedWriter:
    """The shared store writer of one event loop. `submit` and `close_store` are called on the loop."""

    def __init__(self, loop: AbstractEventLoop) -> None:
        self.loop = loop
        self._gathered: list[Work] = []
        self._sent_at = float("-inf")  # loop time of the last hand-off
        self._process: subprocess.Popen[bytes] | None = None
        self._pipe: _PipeWriter | None = None
        self._reader: asyncio.Task[None] | None = None
        self._unanswered: deque[list[_Sent]] = deque()  # frames sent, in order
        self._held: set[Path] = set()  # stores whose connection the process holds open
        self._closing: dict[Path, Future[None]] = {}
        self._secrets_sent = 0  # how many registered secrets the running process was handed
        self.restarts = 0
        self.broken: str | None = None  # why the process is not started again
        self._thread: WriterThread | None = None
        self._close_pending: dict[Path, int] = {}  # closes dispatched and not yet done, by store
        # A choice of mode whatever the load: a test's, or `COMPOZY_STORE_WRITER=thread|process` (for comparing the
        # two in `python -m bench --only capacity`).
        self.forced: str | None = os.environ.get("COMPOZY_STORE_WRITER") or None
        if self.forced not in (None, "thread", "process"):
            logger.warning("COMPOZY_STORE_WRITER=%s is neither thread nor process: ignored", self.forced)
            self.forced = None
        self.gauge = LoadGauge(loop.time())  # where the next hand-off commits, from the load (placement.py)

    def submit(self, store: Store, batch: list[PendingOp]) -> None:
        """The batch joins the next hand-off."""
        self._gather((store, batch))

    def close_store(self, store: Store) -> Future[None]:
        """The process closes the store's connection (if it holds it) after any batch of it still out; the future
        resolves after."""
        done = self._closing.get(store.path)
        if done is None:
            done = self._closing[store.path] = self.loop.create_future()
            self._gather((store, None))
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
        mode = self._mode(sum(1 for _, batch in work if batch is not None))
        jobs: list[WriteJob | CloseJob | SecretsJob] = []
        sent: list[_Sent] = []
        to_thread: list[ThreadWork] = []
        moved = 0
        for store, batch in work:
            if batch is None:
                self._dispatch_close(store, jobs, sent, to_thread)
                continue
            open_on_thread, in_process = store.log is not None, store.path in self._held
            if mode is Home.PROCESS and open_on_thread and not in_process:
                moved += 1  # it moves from the thread: a few a hand-off
            if placement.shared(mode, open_on_thread=open_on_thread, in_process=in_process,
                                moved=moved) is Home.THREAD:
                to_thread.append((store, batch))
                continue
            ops = None
            try:
                ops = store.prepare(batch)
                drafted = store.draft(ops)
            except Exception as exc:  # noqa: BLE001 - the store's own thread commits it and classifies what fails
                self._report(store, batch, Outcome([], [], detach=f"{type(exc).__name__}: {exc}", ops=ops,
                                                   retry=True))
                continue
            if self.broken is not None or not self._ensure_process():
                self._report(store, batch, Outcome([], [], detach=self.broken, ops=ops, retry=True))
                continue
            jobs.append(WriteJob(str(store.path), store.agent_name, drafted.drafts, drafted.statements, store.redact))
            sent.append(_Sent(store, batch, ops, drafted))
            self._held.add(store.path)
        if to_thread:
            if self._thread is None:
                self._thread = WriterThread(self.loop, self._deliver_thread)
            self._thread.put(to_thread)
        if jobs:
            assert self._pipe is not None
            if len(secrets := known_secrets()) != self._secrets_sent:  # first, so the frame's writes redact them
                jobs.insert(0, SecretsJob(secrets))
                sent.insert(0, _Sent(sent[0].store, None, secrets=True))
                self._secrets_sent = len(secrets)
            self._unanswered.append(sent)
            self._pipe.write(frame(jobs))

    def _dispatch_close(self, store: Store, jobs: list[WriteJob | CloseJob | SecretsJob], sent: list[_Sent],
                        to_thread: list[ThreadWork]) -> None:
        """A store is closed wherever it is open: the thread, the process, or both."""
        pending = 0
        if store.path in self._held:
            jobs.append(CloseJob(str(store.path)))
            sent.append(_Sent(store, None))
            self._held.discard(store.path)
            pending += 1
        if store.log is not None:
            to_thread.append((store, None))
            pending += 1
        self._close_pending[store.path] = pending
        if not pending:
            self._closed(store.path)

    def _mode(self, batches: int) -> Home:
        """Thread or process for this hand-off: `placement.LoadGauge` decides from every session's batches a second
        over the last second; here only what it asks for is done (the process started before it is needed)."""
        gauge, forced = self.gauge, self.forced_home
        if gauge.observe(self.loop.time(), batches):
            if gauge.warm(broken=self.broken is not None, forced=forced):
                self._ensure_process()  # started before it is needed: its start-up is not in any commit's way
            if gauge.decide(broken=self.broken is not None) and forced is None:
                logger.info("store writer: %.0f batches a second; commits move to the %s", gauge.rate, gauge.mode)
        return forced or gauge.mode

    @property
    def forced_home(self) -> Home | None:
        return Home(self.forced) if self.forced else None

    @property
    def mode(self) -> Home:
        return self.gauge.mode

    @property
    def rate(self) -> float:
        return self.gauge.rate

    def _deliver_thread(self, results: list[ThreadResult]) -> None:
        """On the loop: the thread's outcomes, in the order it committed them."""
        for r in results:
            store = cast(Store, r.store)  # the thread is handed only ours
            if r.batch is None:
                self._closed(store.path)
            else:
                self._report(store, r.batch, r.outcome)

    def _report(self, store: Store, batch: list[PendingOp], outcome: Outcome) -> None:
        try:
            store.shared_done(batch, outcome)
        except Exception:  # one session's callback must not keep the others' commits from being reported
            logger.exception("store %s: reporting a commit failed", store.name)

    def _closed(self, path: Path) -> None:
        """One close of the store is done; its future resolves when every one dispatched is."""
        left = self._close_pending.get(path, 0) - 1
        if left > 0:
            self._close_pending[path] = left
            return
        self._close_pending.pop(path, None)
        done = self._closing.pop(path, None)
        if done is not None and not done.done():
            done.set_result(None)

    # ---- the process -----------------------------------------------------------------------------

    def _ensure_process(self) -> bool:
        """Start the process if none is running; False (and `broken` set) if it cannot be."""
        if self._pipe is not None:
            return True
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (_PROJECT_ROOT, os.environ.get("PYTHONPATH"))
                                                           if p)}
        try:
            # Started once per loop; Popen's fork and exec take a few milliseconds of this loop, once.
            process = subprocess.Popen([sys.executable, "-m", "sessions.store.writer.process"], env=env,
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=_PROJECT_ROOT)
        except OSError as exc:
            self.broken = f"the store writer process could not start: {exc}"
            logger.error("%s; every store commits on a thread of its own", self.broken)
            return False
        assert process.stdin is not None and process.stdout is not None
        reader = asyncio.StreamReader(limit=2**20)
        self._process = process
        self._pipe = _PipeWriter(process.stdin, self.loop)
        self._reader = self.loop.create_task(self._read(process, reader))
        self._reader.add_done_callback(self._reader_done)
        return True

    def _reader_done(self, task: asyncio.Task[None]) -> None:
        """Cancelled, the loop is ending (asyncio.run cancels what is left): the input ends too, and the process
        exits once it has written what it was sent."""
        if task.cancelled() and self._pipe is not None:
            self._pipe.close()

    async def _read(self, process: subprocess.Popen[bytes], reader: asyncio.StreamReader) -> None:
        assert process.stdout is not None
        await self.loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), process.stdout)
        try:
            while True:
                head = await reader.readexactly(HEADER_BYTES)
                results: list[JobResult] = pickle.loads(await reader.readexactly(int.from_bytes(head, "big")))
                self._deliver(self._unanswered.popleft(), results)
                # Frames read at once (the loop was late) are delivered one a loop iteration: in one step, their
                # sessions' commits held the loop 5-9 ms at a time at 200 streaming sessions.
                await asyncio.sleep(0)
        except asyncio.IncompleteReadError:
            pass
        except Exception:  # an answer we cannot read: the process is of no further use; its batches go back
            logger.exception("store writer process: unreadable answer")
            process.kill()
        code = await asyncio.to_thread(process.wait)
        self._exited(code)

    def _deliver(self, sent: list[_Sent], results: list[JobResult]) -> None:
        """Each store's outcome, in the order they were committed."""
        for job, result in zip(sent, results, strict=True):
            if job.secrets or job.internal:
                continue
            if job.batch is None:
                self._closed(job.store.path)
                continue
            drafted = job.drafted
            assert drafted is not None
            if result.lasts is None or result.contents is None:
                self._held.discard(job.store.path)  # the process closed it
                failure = (result.failure, result.error) if result.failure else None
                outcome = Outcome([], [], detach=result.error, ops=job.ops, retry=True, failure=failure)
            else:
                job.store.observe_commit(result.seconds)
                for i in result.changed:  # what is stored, never what the agent sent (rare: a secret was redacted)
                    drafted.stored[i]["content"] = json.loads(result.contents[i])
                values: list[Values] = [(*d[:4], content, d[5])
                                        for d, content in zip(drafted.drafts, result.contents, strict=True)]
                stored, rows = numbered(drafted.stored, values, result.lasts)
                outcome = Outcome(stored, rows)
                self._release_thread_connection(job.store)
                if result.seconds > SLOW_COMMIT_SECONDS:
                    outcome.detach = f"a commit took {result.seconds * 1000:.0f} ms"
                    self._close_in_process(job.store)
            self._report(job.store, job.batch, outcome)

    def _release_thread_connection(self, store: Store) -> None:
        """A store the process now holds lets go of the connection the thread opened for it. Left open beside the
        process's, it made each of the store's commits cost the kernel several times as much (ext4 zeroing page
        cache: 38% of the process's CPU at 200 streaming sessions). Only once the process holds the store open, so
        that this close is never the store's last (which would checkpoint); and on the thread, since a close may
        still do I/O. Safe to take here: one batch in flight a store, and this one was the process's."""
        if store.log is not None and self._thread is not None and store.path in self._held:
            log, store.log = store.log, None
            self._thread.release(log)

    def _exited(self, code: int) -> None:
        """The process ended: every batch it had not answered goes to its store's own thread, checked first."""
        self._pipe = self._process = self._reader = None
        self._secrets_sent = 0
        unanswered, self._unanswered = self._unanswered, deque()
        self._held.clear()
        if unanswered:
            self.restarts += 1
            why = f"the store writer process exited (code {code}) with {len(unanswered)} frame(s) unanswered"
            logger.error("%s; their stores move to threads of their own", why)
            if self.restarts > MAX_RESTARTS:
                self.broken = f"{why}, {self.restarts} times"
        for frame_jobs in unanswered:
            for job in frame_jobs:
                if job.secrets or job.internal:
                    continue
                if job.batch is None:
                    self._closed(job.store.path)
                else:
                    assert job.drafted is not None
                    self._report(job.store, job.batch, Outcome(
                        [], [], detach=f"the store writer process exited (code {code})",
                        ops=with_ids(job.ops or [], job.drafted), retry=True, verify=True))

    def _close_in_process(self, store: Store) -> None:
        """The process lets go of a store that moved to a thread of its own (nobody waits on it)."""
        if store.path in self._held and self._pipe is not None:
            self._held.discard(store.path)
            self._unanswered.append([_Sent(store, None, internal=True)])
            self._pipe.write(frame([CloseJob(str(store.path))]))

    async def shutdown(self, timeout: float = 10.0) -> None:
        """End of input: the process answers what it has, closes its stores and exits; waits for that."""
        reader = self._reader
        if self._thread is not None:
            self._thread.stop()
        if self._pipe is not None:
            self._pipe.close()
        if reader is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(reader), timeout)


def with_ids(ops: list[Any], drafted: Drafted) -> list[Any]:
    """`ops` with each event's id as drafted: a batch that may have landed is looked for, and written, by them."""
    ids = iter(d[0] for d in drafted.drafts)
    return [op._replace(id=next(ids)) if type(op) is NewEvent else op for op in ops]


class _PipeWriter:
    """The process's stdin: written at once while the pipe takes it, the rest kept and written when it drains. No
    frame is ever lost to a full pipe, and the loop never blocks on one."""

    def __init__(self, pipe: IO[bytes], loop: AbstractEventLoop) -> None:
        self._pipe = pipe
        self._fd = pipe.fileno()
        os.set_blocking(self._fd, False)
        self._loop = loop
        self._buffer = bytearray()
        self._closing = False

    def write(self, data: bytes) -> None:
        if self._closing:
            return
        waiting = bool(self._buffer)  # the pipe is full: the writer callback drains it
        self._buffer += data
        if waiting:
            return
        self._drain()
        if self._buffer:
            self._loop.add_writer(self._fd, self._drain)

    def _drain(self) -> None:
        try:
            written = os.write(self._fd, self._buffer)
        except BlockingIOError:
            return
        except OSError as exc:  # the process is gone: its reader sees the end and hands every batch back
            logger.warning("store writer process: its input closed (%s)", exc)
            written = len(self._buffer)
        del self._buffer[:written]
        if not self._buffer:
            self._loop.remove_writer(self._fd)
            if self._closing:
                self._pipe.close()

    def close(self) -> None:
        """Close once everything written has gone down the pipe."""
        if not self._closing:
            self._closing = True
            if not self._buffer:
                with contextlib.suppress(OSError):
                    self._pipe.close()


_writers: weakref.WeakKeyDictionary[AbstractEventLoop, SharedWriter] = weakref.WeakKeyDictionary()


class WriterReport(TypedDict):
    """Where commits run now (`compozy status`)."""

    mode: str  # thread or process
    batches_per_second: float
    process_pid: int | None
    restarts: int
    broken: str | None  # why the process is not started again


def report() -> WriterReport:
    """For `compozy status`: where commits run now, and a process that stopped being started again (read from
    another thread: plain attributes, each read once)."""
    writers = list(_writers.values())
    if not writers:
        return {"mode": "thread", "batches_per_second": 0.0, "process_pid": None, "restarts": 0, "broken": None}
    writer = writers[0]  # the daemon runs one loop
    process = writer._process
    return {"mode": writer.forced or writer.mode, "batches_per_second": round(writer.rate, 1),
            "process_pid": process.pid if process is not None else None, "restarts": writer.restarts,
            "broken": writer.broken}


def for_loop(loop: AbstractEventLoop) -> SharedWriter:
    writer = _writers.get(loop)
    if writer is None:
        writer = _writers[loop] = SharedWriter(loop)
    return writer

"""The store writer (sessions/store/writer/recorder.py) over a real events.db: commits leave the event loop,
a failing batch is kept and retried, a store that stays unwritable fails visibly, and sequences stay
gap-free whoever else appends."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sqlite3
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from sessions.core import redact
from sessions.core.failures import DISK_FULL, DISPLACED, LOCKED, StoreFailure, classify
from sessions.store.events import EventLog, read_events
from sessions.store.ops import MAX_RUN_CHUNKS, NewEvent, UsageUpdate, merge_chunks
from sessions.store.writer import placement
from sessions.store.writer import recorder as recorder_mod
from sessions.store.writer import shared as store_writer
from sessions.store.writer.recorder import Recorder


class Sink:
    """What the runtime's callbacks would see."""

    def __init__(self) -> None:
        self.commits: list[list[int]] = []
        self.failures: list[StoreFailure] = []

    def committed(self, stored: list[dict[str, Any]], rows: list[tuple[Any, ...]]) -> None:
        assert [r[0] for r in rows] == [e["sequence"] for e in stored]
        self.commits.append([e["sequence"] for e in stored])

    def failed(self, failure: StoreFailure) -> None:
        self.failures.append(failure)


ATTEMPT_S = recorder_mod.ATTEMPT_BUSY_TIMEOUT_MS / 1000  # one lock wait on a store's own thread


def make(path: Path, sink: Sink, **kwargs: Any) -> Recorder:
    return Recorder(path, "general", sink.committed, sink.failed, **kwargs)


def hold_write_lock(path: Path, seconds: float, ready: threading.Event) -> threading.Thread:
    """Another connection takes the store's write lock, as another process would."""

    def run() -> None:
        conn = sqlite3.connect(str(path), isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        ready.set()
        threading.Event().wait(seconds)
        conn.execute("ROLLBACK")
        conn.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_adjacent_same_turn_chunks_merge_and_nothing_else_does() -> None:
    ops = [NewEvent("agent_message", "t1", {"text": "a"}), NewEvent("agent_message", "t1", {"text": "b"}),
           NewEvent("thought", "t1", {"text": "x"}), NewEvent("thought", "t1", {"text": "y"}),
           NewEvent("agent_message", "t1", {"text": "c"}), NewEvent("agent_message", "t2", {"text": "d"}),
           NewEvent("agent_message", "t2", {"text": "e", "message_id": "m2"}),
           NewEvent("agent_message", "t2", {"text": "f"}, id="ev_fixed"), NewEvent("tool_call", "t2", {"title": "t"}),
           NewEvent("agent_message", "t2", {"text": "g"}), UsageUpdate("t2", {"input_tokens": 1}),
           NewEvent("agent_message", "t2", {"text": "h"})]
    merged = merge_chunks(ops)
    assert [(getattr(o, "type", "usage"), getattr(o, "content", {}).get("text")) for o in merged] == [
        ("agent_message", "ab"), ("thought", "xy"), ("agent_message", "c"), ("agent_message", "d"),
        ("agent_message", "e"), ("agent_message", "f"), ("tool_call", None), ("agent_message", "g"),
        ("usage", None), ("agent_message", "h")]


def test_a_merged_row_holds_at_most_max_run_chunks() -> None:
    ops = [NewEvent("agent_message", "t1", {"text": f"{i};"}) for i in range(MAX_RUN_CHUNKS + 3)]
    merged = merge_chunks(ops)
    assert len(merged) == 2
    assert merged[0].content["text"] == "".join(f"{i};" for i in range(MAX_RUN_CHUNKS))
    assert merged[1].content["text"] == "".join(f"{i};" for i in range(MAX_RUN_CHUNKS, MAX_RUN_CHUNKS + 3))


def test_a_burst_reaches_the_store_thread_already_merged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks merge as they are recorded, on the loop: the writer gets a few runs, not one op per chunk."""
    path = tmp_path / "events.db"
    sink = Sink()
    batch_sizes: list[int] = []
    real = Recorder.prepare

    def prepare(self: Recorder, batch: Any) -> Any:
        ops = real(self, batch)
        batch_sizes.append(len(ops))
        return ops

    monkeypatch.setattr(Recorder, "prepare", prepare)
    count = 2 * MAX_RUN_CHUNKS + 500

    async def main() -> int:
        rec = make(path, sink)
        for i in range(count):  # one tick: nothing is handed off before the loop turns
            rec.record("agent_message", "t1", {"text": f"{i};"})
        rec.record("done", "t1", {})
        await rec.flush()  # returns only once every recorded chunk counts as committed
        pending = rec.pending
        await rec.close()
        return pending

    assert asyncio.run(main()) == 0
    assert batch_sizes == [4], "three runs and the done event, in one transaction"
    rows = read_events(path, limit=10)
    assert [r["type"] for r in rows] == ["agent_message"] * 3 + ["done"]
    assert "".join(r["content"]["text"] for r in rows[:3]) == "".join(f"{i};" for i in range(count))
    assert [r["content"]["text"].count(";") for r in rows[:3]] == [MAX_RUN_CHUNKS, MAX_RUN_CHUNKS, 500]


def test_light_load_commits_on_the_shared_writer_thread_and_batches_what_one_tick_recorded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "events.db"
    sink = Sink()
    threads: list[str] = []
    real = EventLog.commit

    def commit(self: EventLog, ops: Any) -> Any:
        threads.append(threading.current_thread().name)
        return real(self, ops)

    monkeypatch.setattr(EventLog, "commit", commit)

    async def main() -> None:
        rec = make(path, sink)
        rec.record("user_message", "t1", {"text": "hi"})
        rec.record("tool_call", "t1", {"title": "read"})
        rec.merge_usage("t1", {"input_tokens": 3})
        await rec.flush()
        rec.record("done", "t1", {})
        await rec.flush()
        await rec.close()

    asyncio.run(main())
    assert threads == ["store-writer", "store-writer"], "below the process's threshold the shared thread commits"
    assert sink.commits == [[1, 2], [3]], "one tick's events share one transaction; the next tick is the next"
    assert [e["type"] for e in read_events(path, limit=10)] == ["user_message", "tool_call", "done"]
    conn = sqlite3.connect(str(path))
    assert conn.execute("SELECT input_tokens FROM token_usage WHERE turn_id='t1'").fetchone() == (3,)


def test_a_locked_store_is_retried_and_loses_nothing(tmp_path: Path) -> None:
    path = tmp_path / "events.db"
    EventLog(path, "general").close()
    sink = Sink()
    ready = threading.Event()

    async def main() -> float:
        rec = make(path, sink)
        holder = hold_write_lock(path, 2.5, ready)
        ready.wait(5)
        loop = asyncio.get_running_loop()
        for i in range(50):
            rec.record("agent_message", "t1", {"text": f"c{i} "})
        rec.record("done", "t1", {})
        # While the writer waits on the lock, the loop keeps turning: measure its longest stall.
        worst, last = 0.0, loop.time()
        flushed = asyncio.ensure_future(rec.flush())
        while not flushed.done():
            await asyncio.sleep(0.01)
            now = loop.time()
            worst, last = max(worst, now - last), now
        await flushed
        holder.join(5)
        await rec.close()
        return worst

    worst = asyncio.run(main())
    # Held 2.5 s: a commit on the loop would stall it that long. The bound leaves room for a loaded machine.
    assert worst < 1.0, f"the event loop stalled {worst:.2f}s behind a locked store"
    rows = read_events(path, limit=100)
    assert [e["sequence"] for e in rows] == [1, 2]
    assert rows[0]["content"]["text"] == "".join(f"c{i} " for i in range(50)) and rows[1]["type"] == "done"
    assert not sink.failures


def test_others_waiting_sees_another_sessions_batch_with_its_store_thread(tmp_path: Path) -> None:
    """What a burst asks before it pauses: is another session's batch with its store thread (here held there
    by a lock another connection keeps until the test lets go)? Its own batch does not count."""
    locked = tmp_path / "locked" / "events.db"
    EventLog(locked, "general").close()

    async def main() -> list[bool]:
        waiting, burst = make(locked, Sink()), make(tmp_path / "burst" / "events.db", Sink())
        seen = [burst.others_waiting()]
        holder = sqlite3.connect(str(locked), isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        waiting.record("agent_message", "t1", {"text": "tick"})
        burst.record("agent_message", "t2", {"text": "chunk"})
        await burst.flush()  # both were handed off in the same loop turn; the burst's own commit is back
        seen += [burst.others_waiting(), waiting.others_waiting()]
        holder.execute("ROLLBACK")
        holder.close()
        await waiting.flush()
        seen.append(burst.others_waiting())
        await waiting.close()
        await burst.close()
        return seen

    assert asyncio.run(main()) == [False, True, False, False]


def test_a_store_locked_past_the_deadline_fails_visibly_and_records_nothing_after(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "events.db"
    EventLog(path, "general").close()
    sink = Sink()
    ready = threading.Event()

    async def main() -> Recorder:
        rec = make(path, sink, write_deadline=0.6)
        rec.record("user_message", "t1", {"text": "before"})
        await rec.flush()
        holder = hold_write_lock(path, 2.0, ready)
        ready.wait(5)
        rec.record("agent_message", "t1", {"text": "kept in memory, never claimed as written"})
        with pytest.raises(StoreFailure) as failed:
            await rec.flush()
        assert failed.value.reason == LOCKED
        for n in range(500):
            rec.record("agent_message", "t1", {"text": f"after the failure {n}"})
        assert rec.pending == 1, "the failed batch is kept; nothing recorded after the failure is accepted"
        assert rec.refused == 500
        with pytest.raises(StoreFailure):
            await rec.flush()
        holder.join(5)
        await rec.close()
        return rec

    with caplog.at_level(logging.WARNING, logger="sessions.store.writer.recorder"):
        asyncio.run(main())
    assert [f.reason for f in sink.failures] == [LOCKED], "the runtime hears about it exactly once"
    refusals = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert len(refusals) == 2 and "500 event(s) refused" in refusals[1], refusals  # said once, counted at close
    assert [e["content"].get("text") for e in read_events(path, limit=10)] == ["before"]


@pytest.mark.parametrize("how", ["deleted", "replaced"])
def test_a_store_deleted_or_replaced_under_the_writer_fails_at_once_and_writes_nothing_more(
        tmp_path: Path, how: str) -> None:
    """The open connection would go on writing into the unlinked inode, where no reader ever sees it."""
    path = tmp_path / "events.db"
    sink = Sink()

    async def main() -> None:
        rec = make(path, sink)
        rec.record("user_message", "t1", {"text": "before"})
        await rec.flush()
        for name in ("events.db", "events.db-wal", "events.db-shm"):
            (tmp_path / name).unlink(missing_ok=True)
        if how == "replaced":
            EventLog(path, "other").close()
        rec.record("agent_message", "t1", {"text": "into a file nobody reads"})
        with pytest.raises(StoreFailure) as failed:
            await asyncio.wait_for(rec.flush(), 3)  # at once: no retries against a file that is gone
        assert failed.value.reason == DISPLACED
        await rec.close()

    asyncio.run(main())
    assert [f.reason for f in sink.failures] == [DISPLACED]
    assert read_events(path, limit=10) == []  # missing, or the new file: nothing was claimed written in it


def test_sequences_continue_after_another_writer_appended(tmp_path: Path) -> None:
    """MAX(sequence) is read inside each write transaction: a repair (or any writer) appending between
    two batches never makes the recorder reuse a sequence."""
    path = tmp_path / "events.db"
    sink = Sink()

    async def main() -> None:
        rec = make(path, sink)
        rec.record("user_message", "t1", {"text": "one"})
        await rec.flush()
        other = EventLog(path, "repair")
        other.append([NewEvent("error", "t0", {"error": "appended by repair"})])
        other.close()
        rec.record("done", "t1", {})
        await rec.flush()
        await rec.close()

    asyncio.run(main())
    assert [e["sequence"] for e in read_events(path, limit=10)] == [1, 2, 3]
    assert sink.commits == [[1], [3]]


def test_storage_errors_are_classified_and_bugs_are_not() -> None:
    full = sqlite3.OperationalError("database or disk is full")
    assert classify(full) == DISK_FULL
    assert classify(OSError(28, "No space left on device")) == DISK_FULL
    assert classify(sqlite3.OperationalError("database is locked")) == LOCKED
    assert classify(ValueError("a bug")) is None
    assert classify(sqlite3.IntegrityError("UNIQUE constraint failed")) is None
    wrapped = RuntimeError("database or disk is full")  # as Django's OperationalError wraps SQLite's
    wrapped.__cause__ = full
    assert classify(wrapped) == DISK_FULL


def test_a_refused_batch_fails_at_once_instead_of_retrying(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch SQLite refuses for what it is (not for the disk) cannot succeed later: no backoff loop."""
    path = tmp_path / "events.db"
    sink = Sink()
    monkeypatch.setattr(recorder_mod, "RETRY_FIRST_SECONDS", 5.0)

    async def main() -> None:
        rec = make(path, sink)
        rec.record("system", "t1", {"title": "x"})
        await rec.flush()
        first_id = read_events(path, limit=1)[0]["id"]
        rec._add(NewEvent("system", "t1", {"title": "dup"}, id=first_id))
        with pytest.raises(StoreFailure) as failed:
            await asyncio.wait_for(rec.flush(), 3)
        assert failed.value.reason == "write_refused"
        await rec.close()

    asyncio.run(main())
    assert len(sink.failures) == 1


def test_closing_twice_waits_for_the_same_writer_exit(tmp_path: Path) -> None:
    """A second close (a stop path retried) must not wait for a writer thread that already exited."""
    path = tmp_path / "events.db"
    sink = Sink()

    async def main() -> None:
        rec = make(path, sink)
        rec.record("user_message", "t1", {"text": "hi"})
        await asyncio.wait_for(rec.close(), 10)
        await asyncio.wait_for(rec.close(), 10)

    asyncio.run(main())
    assert [e["type"] for e in read_events(path, limit=10)] == ["user_message"]


def test_a_shared_writer_thread_whose_loop_closed_still_commits_and_closes_its_stores(tmp_path: Path) -> None:
    """At daemon exit the loop may close while batches are with the shared writer's thread: nobody can be told,
    but the batches are committed and every store's connection it opened closed, not left to the interpreter."""
    sink = Sink()
    closed_loop = asyncio.new_event_loop()
    closed_loop.close()
    recs = [make(tmp_path / name / "events.db", sink) for name in ("a", "b")]
    writer = store_writer.SharedWriter(closed_loop)
    writer.forced = "thread"
    writer._gathered = [(rec, [NewEvent("user_message", "t1", {"text": "hi"})]) for rec in recs]
    writer._send()  # what the loop's next iteration does with the batches one iteration gathered
    assert writer._thread is not None and writer._thread._thread is not None
    writer._thread._thread.join(10)
    assert not writer._thread._thread.is_alive()
    for rec in recs:
        assert [e["type"] for e in read_events(rec.path, limit=10)] == ["user_message"]
        assert rec.log is not None
        with pytest.raises(sqlite3.ProgrammingError):
            rec.log._conn.execute("SELECT 1")  # closed by the writer thread
    assert sink.commits == []  # nobody was told


def open_here() -> set[str]:
    """What this process's file descriptors point at, read from the kernel."""
    links = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            links.add(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:  # closed meanwhile
            pass
    return links


class _Marker:
    """A close the writer thread carries out after everything queued before it (released connections included)."""

    log = None
    name = "marker"
    path = Path("/nonexistent/marker")

    def __init__(self) -> None:
        self.reached = threading.Event()

    def close_log(self) -> None:
        self.reached.set()


async def writer_thread_caught_up(writer: store_writer.SharedWriter) -> None:
    """Until the writer thread has done everything queued so far: it closes released connections first."""
    assert writer._thread is not None
    marker = _Marker()
    writer._thread.put([(marker, None)])  # type: ignore[list-item]
    assert await asyncio.to_thread(marker.reached.wait, 30)


def test_the_shared_writer_moves_commits_to_the_process_under_load_and_back(tmp_path: Path) -> None:
    """Below `THREAD_BELOW` batches a second the thread commits, above `PROCESS_ABOVE` the process; a store's
    batches may commit on either in turn. The thread's connection is closed when the store moves to the process
    (left open, it made the process's commits cost the kernel several times as much), and every connection is
    closed at the end."""
    sink = Sink()
    rec = make(tmp_path / "events.db", sink)

    async def main() -> list[str]:
        loop = asyncio.get_running_loop()
        writer = store_writer.for_loop(loop)
        modes = []
        for rate in (0.0, placement.PROCESS_ABOVE * 2, placement.PROCESS_ABOVE, placement.THREAD_BELOW / 2):
            writer.gauge.window_start = loop.time() - 1.0  # one second has passed with this many batches
            writer.gauge.window_batches = int(rate)
            rec.record("agent_message", "t1", {"text": f"{len(modes)};"})
            await rec.flush()
            modes.append(writer.mode)
            if len(modes) == 1:
                assert rec.log is not None and str(rec.path) in open_here()
            elif len(modes) == 2:  # moved to the process: the thread's connection is let go
                assert rec.log is None
                await writer_thread_caught_up(writer)
                assert str(rec.path) not in open_here()
        assert writer._process is not None and rec.path in writer._held and rec.log is not None  # open in both
        await rec.close()
        assert rec.path not in writer._held
        return modes

    assert asyncio.run(main()) == ["thread", "process", "process", "thread"]
    assert [e["content"]["text"] for e in read_events(rec.path, limit=10)] == ["0;", "1;", "2;", "3;"]
    assert sink.commits == [[1], [2], [3], [4]]
    assert rec.log is not None
    with pytest.raises(sqlite3.ProgrammingError):
        rec.log._conn.execute("SELECT 1")  # closed by the writer thread


def test_the_store_writer_process_commits_what_it_was_sent_and_ends_with_its_input(tmp_path: Path) -> None:
    """The loop may close (daemon exit) while batches are with the store writer process: nobody can be told, but
    what was sent is committed, and the process closes its stores and exits when its input ends."""
    sink = Sink()
    recs = [make(tmp_path / name / "events.db", sink) for name in ("a", "b")]

    async def main() -> subprocess.Popen[bytes]:
        writer = store_writer.for_loop(asyncio.get_running_loop())
        writer.forced = "process"
        writer._gathered = [(rec, [NewEvent("user_message", "t1", {"text": "hi"})]) for rec in recs]
        writer._send()  # what the loop does with the batches gathered: one frame to the process
        assert writer._process is not None
        return writer._process

    process = asyncio.run(main())  # closes the loop with the answer unread
    assert process.wait(10) == 0  # its input ended with the loop's writer
    for rec in recs:
        assert [e["type"] for e in read_events(rec.path, limit=10)] == ["user_message"]
    assert sink.commits == []  # nobody was told


def test_batches_out_when_the_store_writer_process_dies_go_to_their_stores_threads(tmp_path: Path) -> None:
    """Killed with a frame unanswered, the process may or may not have committed it: the batch goes to its store's
    own thread, which writes it (after looking for it, see the next test). Nothing is lost, and the next batches
    of other stores go to a new process."""
    sink = Sink()
    rec = make(tmp_path / "lost" / "events.db", sink)

    async def main() -> None:
        writer = store_writer.for_loop(asyncio.get_running_loop())
        writer.forced = "process"
        rec.record("user_message", "t1", {"text": "first"})
        await rec.flush()
        process = writer._process
        assert process is not None
        os.kill(process.pid, signal.SIGSTOP)  # it never reads the next frame
        rec.record("agent_message", "t1", {"text": "second"})
        rec._hand_off()  # now, not at the loop's next turn
        writer._send()
        process.kill()
        await rec.flush()
        other = make(tmp_path / "other" / "events.db", sink)
        other.record("user_message", "t1", {"text": "after"})
        await other.flush()
        assert writer._process is not None and writer._process is not process
        assert writer.restarts == 1 and writer.broken is None
        await rec.close()
        await other.close()

    asyncio.run(main())
    assert [e["content"]["text"] for e in read_events(rec.path, limit=10)] == ["first", "second"]
    assert rec._detached  # the store stays with its own thread
    assert [e["content"]["text"] for e in read_events(tmp_path / "other" / "events.db", limit=10)] == ["after"]
    assert not sink.failures


def test_a_batch_the_dead_process_had_committed_is_not_stored_twice(tmp_path: Path) -> None:
    """The own thread looks for a batch handed back by a dead process by its first event's id: there, it is taken
    as committed (its rows read back); not there, it is written with the ids it was sent with."""
    path = tmp_path / "events.db"
    sink = Sink()
    committed = [NewEvent("agent_message", "t1", {"text": "once"}, "ev-once"), NewEvent("done", "t1", {}, "ev-done")]
    EventLog(path, "general").commit(committed)  # what the process wrote before it died
    rec = make(path, sink)
    stored, rows = rec._commit_with_retry(list(committed), list(committed), verify=True)
    assert [(e["id"], e["sequence"]) for e in stored] == [("ev-once", 1), ("ev-done", 2)]
    assert [r[0] for r in rows] == [1, 2]
    fresh = [NewEvent("user_message", "t2", {"text": "new"}, "ev-new")]
    stored, _ = rec._commit_with_retry(list(fresh), list(fresh), verify=True)
    assert [(e["id"], e["sequence"]) for e in stored] == [("ev-new", 3)]
    assert [e["id"] for e in read_events(path, limit=10)] == ["ev-once", "ev-done", "ev-new"]
    rec.close_log()


def test_a_locked_store_leaves_the_shared_writer_and_the_others_commit_meanwhile(tmp_path: Path) -> None:
    """The shared writer never waits on a lock: the locked store moves to a thread of its own (where it commits once
    the lock is gone) while another store's batches keep committing on the shared thread."""
    locked_path = tmp_path / "locked" / "events.db"
    EventLog(locked_path, "general").close()
    sink = Sink()

    async def main() -> tuple[list[float], set[str]]:
        locked, free = make(locked_path, sink), make(tmp_path / "free" / "events.db", sink)
        holder = sqlite3.connect(str(locked_path), isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        locked.record("agent_message", "t1", {"text": "behind a lock"})
        waits = []
        for i in range(10):
            t0 = time.monotonic()
            free.record("agent_message", "t2", {"text": f"c{i} "})
            await free.flush()
            waits.append(time.monotonic() - t0)
        assert locked.pending == 1
        holder.execute("ROLLBACK")
        holder.close()
        await locked.flush()
        await locked.close()
        await free.close()
        return waits, {locked._thread.name if locked._thread else "", free._thread.name if free._thread else ""}

    waits, threads = asyncio.run(main())
    assert max(waits) < ATTEMPT_S, f"a free store waited {max(waits):.2f}s behind another store's lock"
    assert threads == {"store-locked", ""}, "only the locked store got a thread of its own"
    assert [e["content"]["text"] for e in read_events(locked_path, limit=10)] == ["behind a lock"]


def test_a_writer_whose_loop_closed_still_commits_and_closes_its_store(tmp_path: Path) -> None:
    """At daemon exit the loop may close while a batch is with a store's own writer thread: nobody can be told, but
    the batch is committed and the store's connection closed, not left to the interpreter's exit."""
    path = tmp_path / "events.db"
    sink = Sink()
    closed_loop = asyncio.new_event_loop()
    closed_loop.close()

    async def main() -> Recorder:
        rec = make(path, sink)
        rec._detached = True  # a store that left the shared writer
        rec.record("user_message", "t1", {"text": "hi"})
        rec._loop = closed_loop  # the writer thread starts at the hand-off and reports back to this loop
        await asyncio.sleep(0)  # the hand-off runs: thread started, batch queued
        return rec

    rec = asyncio.run(main())
    assert rec._thread is not None
    rec._thread.join(10)
    assert not rec._thread.is_alive()
    assert [e["type"] for e in read_events(path, limit=10)] == ["user_message"]
    assert rec.log is not None
    with pytest.raises(sqlite3.ProgrammingError):
        rec.log._conn.execute("SELECT 1")  # closed by the writer thread
    assert sink.commits == []  # nobody was told


def test_a_value_no_utf8_encoder_takes_is_stored_with_a_replacement_not_failing_its_batch(tmp_path: Path) -> None:
    # Agents' messages are cleaned as parsed; this is the store's last line: a lone surrogate from any other path
    # once failed the whole batch (its neighbours, `done`) and the session, as a storage failure.
    path = tmp_path / "events.db"
    sink = Sink()

    async def main() -> None:
        rec = make(path, sink)
        rec.record("user_message", "t1", {"text": "before"})
        rec.record("tool_call", "t1", {"title": "lone \ud800 surrogate"})
        rec.record("done", "t1", {})
        await rec.flush()
        await rec.close()

    asyncio.run(main())
    assert sink.failures == []
    rows = read_events(path, limit=10)
    assert [r["type"] for r in rows] == ["user_message", "tool_call", "done"]
    assert rows[1]["content"]["title"] == "lone \ufffd surrogate"


def test_what_the_writer_process_redacts_is_what_the_envelopes_and_rows_show(tmp_path: Path) -> None:
    """The store writer process redacts (a provider-shaped key, and a secret the daemon registered, which has no
    shape: it is handed to the process): the store, and the envelopes and rows the live feed is given, hold the
    redacted text, never what the agent sent."""
    registered = "q8Zr4-registered-no-shape-Lm2x"
    redact.register_secret(registered)
    path = tmp_path / "events.db"
    seen: list[tuple[list[dict[str, Any]], list[tuple[Any, ...]]]] = []

    async def main() -> None:
        store_writer.for_loop(asyncio.get_running_loop()).forced = "process"
        rec = Recorder(path, "general", lambda stored, rows: seen.append((stored, rows)))
        rec.record("user_message", "t1", {"text": f"key glpat-abcdefghij1234567890 and {registered}"})
        rec.record("tool_call", "t1", {"title": "plain"})
        await rec.flush()
        await rec.close()

    asyncio.run(main())
    [(stored, rows)] = seen
    for text in (stored[0]["content"]["text"], json.loads(rows[0][5])["text"],
                 read_events(path, limit=1)[0]["content"]["text"]):
        assert "glpat-abcdefghij1234567890" not in text and registered not in text and redact.REDACTED in text
    assert stored[1]["content"]["title"] == "plain"

"""Throughput end to end (agent → events.db → raw SSE) beside the raw limits measured in the same run.

- end to end: the scripted agent's `stream N` (N agent_message chunks, as fast as it can write) into a live
  session, read by one raw-frames SSE client from `Last-Event-ID` until the turn's `done` frame;
- raw sqlite: plain `sqlite3` inserts of the same row shape into a WAL/synchronous=NORMAL db, in batches the
  size of the daemon's group commits (measured from the store), and one transaction per row;
- bare daphne: a minimal ASGI app on daphne streaming pre-built frames of the same shape to the same client.
"""

from __future__ import annotations

import asyncio
import json
import socket
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.harness import BenchDaemon, cpu_seconds, environment_note
from bench.report import BenchResult, Op, Target
from bench.sse_client import SequenceChecker, SSEStream
from sessions.store.events import SCHEMA_SQL, EventLog, NewEvent
from sessions.store.folder import parse_time
from sessions.store.ids import new_event_id

ROOT = Path(__file__).resolve().parent.parent
TARGET_EVENTS_PER_S = 10_000.0
DEFAULT_BATCH = 256  # the scripted agent's write batch, used when the daemon's batch size is unknown


@dataclass
class Params:
    chunks: int
    warmup: int
    per_row_max: int
    per_row_seconds: float


FULL = Params(chunks=100_000, warmup=2_000, per_row_max=100_000, per_row_seconds=8.0)
QUICK = Params(chunks=20_000, warmup=500, per_row_max=20_000, per_row_seconds=2.0)


# ---- end to end ----------------------------------------------------------------------------------

@dataclass
class StreamRun:
    after: int
    prompt_ns: int
    first_ns: int
    done_ns: int
    frames: int
    checker: SequenceChecker
    turn_id: str
    done_sequence: int = 0
    terminal_error: str | None = None


async def read_until_done(host: str, port: int, path: str, after: int, start_turn: Any,
                          timeout: float, token: str) -> StreamRun:
    """Open the stream at `after`, then start the turn (so every frame is live), read until `done`."""
    stream = SSEStream(host, port, path, last_event_id=after, token=token)
    await stream.connect()
    checker = SequenceChecker(after)
    prompt_ns = time.time_ns()
    accepted = await asyncio.to_thread(start_turn)
    turn_id = accepted["prompt"]["turn_id"]
    first_ns = done_ns = done_seq = 0
    frames = 0
    error: str | None = None

    async def consume() -> None:
        nonlocal first_ns, done_ns, done_seq, frames, error
        async for received, batch in stream.batches():
            if not first_ns:
                first_ns = received
            for frame in batch:
                frames += 1
                if frame.id is not None:
                    checker.see(frame.id)
                if frame.event == "done":
                    done_ns, done_seq = received, frame.id or 0
                    return
                if frame.event in ("session_stopped", "error"):
                    error = f"{frame.event}: {frame.data[:300]!r}"
                    return
        error = "stream closed before the done frame"

    try:
        await asyncio.wait_for(consume(), timeout)
    finally:
        await stream.close()
    return StreamRun(after, prompt_ns, first_ns, done_ns, frames, checker, turn_id, done_seq, error)


@dataclass
class StoreFacts:
    rows: int
    agent_rows: int
    text_ok: bool
    text_detail: str
    consecutive: bool
    first_ts: float
    last_ts: float
    done_ts: float
    commits: int
    later_types: list[str]


def analyse_store(db: Path, after: int, until: int, chunks: int) -> StoreFacts:
    """Read the turn back from events.db: order, content, and the commit pattern (one timestamp per commit)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT sequence, type, timestamp, content FROM events WHERE sequence > ?"
                            " AND sequence <= ? ORDER BY sequence", (after, until)).fetchall()
        later = [r[0] for r in conn.execute("SELECT type FROM events WHERE sequence > ? ORDER BY sequence LIMIT 20",
                                            (until,))]
    finally:
        conn.close()
    consecutive = all(row[0] == after + 1 + i for i, row in enumerate(rows))
    agent = [r for r in rows if r[1] == "agent_message"]
    text = "".join(json.loads(r[3]).get("text", "") for r in agent)
    expected = "".join(f"c{i} " for i in range(chunks))
    if text == expected:
        text_detail = f"{chunks} chunks in order in {len(agent)} agent_message rows"
    else:
        at = next((i for i, (a, b) in enumerate(zip(text, expected, strict=False)) if a != b),
                  min(len(text), len(expected)))
        text_detail = f"text differs at char {at}: got {text[at:at + 40]!r}, want {expected[at:at + 40]!r}"
    stamps = [r[2] for r in agent]
    done = [r for r in rows if r[1] == "done"]

    def ts(value: str) -> float:
        moment = parse_time(value)
        return moment.timestamp() if moment else 0.0

    return StoreFacts(rows=len(rows), agent_rows=len(agent), text_ok=text == expected, text_detail=text_detail,
                      consecutive=consecutive, first_ts=ts(stamps[0]) if stamps else 0.0,
                      last_ts=ts(stamps[-1]) if stamps else 0.0, done_ts=ts(done[-1][2]) if done else 0.0,
                      commits=len(set(stamps)), later_types=later)


# ---- raw limits ----------------------------------------------------------------------------------

def synth_rows(count: int, session_id: str = "scripted-" + "0" * 32,
               ordered_ids: bool = False) -> list[tuple[Any, ...]]:
    """Rows shaped like the recorder's agent_message rows (same columns, same JSON content keys, random
    `ev_<hex>` ids); with `ordered_ids`, ids that sort in insertion order (what a time-ordered id would give)."""
    now = "2026-01-01T00:00:00.000000Z"
    turn = "turn_0123456789abcdef"
    rows = []
    for i in range(count):
        content = {"schema": "compozy.session.event.v1", "type": "agent_message", "timestamp": now,
                   "session_id": session_id, "text": f"c{i} ", "turn_id": turn}
        rows.append((i + 1, f"ev_{i:016x}" if ordered_ids else new_event_id(), turn, "agent_message", "scripted",
                     json.dumps(content, separators=(",", ":")), now))
    return rows


INSERT = ("INSERT INTO events(sequence, id, turn_id, type, agent_name, content, timestamp)"
          " VALUES (?,?,?,?,?,?,?)")


def fresh_db(path: Path) -> sqlite3.Connection:
    path.unlink(missing_ok=True)
    conn = sqlite3.connect(str(path), isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.executescript(SCHEMA_SQL)
    return conn


def raw_batched(path: Path, rows: list[tuple[Any, ...]], batch: int) -> float:
    conn = fresh_db(path)
    try:
        start = time.perf_counter()
        for i in range(0, len(rows), batch):
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(INSERT, rows[i:i + batch])
            conn.execute("COMMIT")
        return len(rows) / (time.perf_counter() - start)
    finally:
        conn.close()


def raw_per_row(path: Path, rows: list[tuple[Any, ...]], budget: float) -> tuple[float, int]:
    conn = fresh_db(path)
    try:
        start = time.perf_counter()
        done = 0
        for row in rows:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(INSERT, row)
            conn.execute("COMMIT")
            done += 1
            if done % 1000 == 0 and time.perf_counter() - start > budget:
                break
        return done / (time.perf_counter() - start), done
    finally:
        conn.close()


def eventlog_batched(path: Path, count: int, batch: int) -> float:
    """The store layer the recorder uses (content dict, redaction, JSON, ids), same batches: Python's share."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    log = EventLog(path, "scripted")
    events = [NewEvent("agent_message", "turn_0123456789abcdef",
                       {"session_id": "scripted-" + "0" * 32, "text": f"c{i} "}) for i in range(count)]
    try:
        start = time.perf_counter()
        for i in range(0, count, batch):
            log.append(events[i:i + batch])
        return count / (time.perf_counter() - start)
    finally:
        log.close()


# ---- bare daphne ---------------------------------------------------------------------------------

async def bare_daphne(frames: int) -> tuple[float, SequenceChecker]:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    port = listener.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "daphne", "--fd", str(listener.fileno()), "-v", "0",
                             "bench.bare_sse:app"], cwd=str(ROOT), pass_fds=(listener.fileno(),),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    listener.close()
    try:
        stream: SSEStream | None = None
        deadline = time.monotonic() + 20
        while stream is None:
            candidate = SSEStream("127.0.0.1", port, "/stream?n=100&page=1000")
            try:
                await candidate.connect()
                await candidate.close()
                stream = SSEStream("127.0.0.1", port, f"/stream?n={frames}&page=1000")
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    detail = proc.stderr.read() if proc.stderr else b""
                    raise RuntimeError(f"bare daphne did not start: {detail!r}") from None
                await asyncio.sleep(0.1)
        await stream.connect()
        checker = SequenceChecker(0)
        first = 0
        async for received, batch in stream.batches():
            first = first or received
            for frame in batch:
                if frame.id is not None:
                    checker.see(frame.id)
                if frame.event == "done":
                    await stream.close()
                    return frames / max((received - first) / 1e9, 1e-9), checker
        raise RuntimeError("bare daphne stream ended without done")
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# ---- the benchmark -------------------------------------------------------------------------------

def run(root: Path, quick: bool) -> BenchResult:
    p = QUICK if quick else FULL
    result = BenchResult("throughput", f"Throughput: scripted agent streaming {p.chunks:,} chunks → events.db → "
                                       "1 raw SSE client")
    daemon = BenchDaemon(root / "throughput")
    try:
        session = daemon.create("scripted")
        warm = daemon.prompt(session, f"stream {p.warmup}")
        daemon.wait_done(session, warm["prompt"]["turn_id"])
        after = daemon.newest_sequence(session)
        agent_pid = daemon.agent_pid(session)
        cpu0, agent0, client0 = cpu_seconds(daemon.pid), cpu_seconds(agent_pid or 0), time.process_time()
        with daemon.profiling("throughput"):
            run_ = asyncio.run(read_until_done(daemon.host, daemon.port, daemon.stream_path(session), after,
                                               lambda: daemon.prompt(session, f"stream {p.chunks}"),
                                               timeout=max(120.0, p.chunks / 500), token=daemon.d.token))
        daemon_cpu = cpu_seconds(daemon.pid) - cpu0
        agent_cpu = cpu_seconds(agent_pid or 0) - agent0
        client_cpu = time.process_time() - client0
        db = daemon.events_db(session)
        facts = analyse_store(db, after, run_.done_sequence or 2**62, p.chunks)
        db_bytes = sum(f.stat().st_size for f in db.parent.glob("events.db*"))
    finally:
        daemon.stop()

    result.check("stream reached done", run_.terminal_error is None,
                 run_.terminal_error or f"done frame at sequence {run_.done_sequence}")
    result.check("no gap or duplicate (client)", run_.checker.ok, run_.checker.describe())
    result.check("no gap (store)", facts.consecutive, f"{facts.rows} rows after sequence {run_.after}")
    result.check("content complete and ordered", facts.text_ok, facts.text_detail)
    expected_frames = facts.rows
    result.check("client saw every stored row", run_.checker.count == expected_frames,
                 f"{run_.checker.count} framed rows vs {expected_frames} stored")

    e2e_s = (run_.done_ns - run_.prompt_ns) / 1e9
    e2e = p.chunks / e2e_s if e2e_s > 0 else 0.0
    persisted = (facts.agent_rows - 1) / (facts.last_ts - facts.first_ts) if facts.last_ts > facts.first_ts else 0.0
    delivered_s = (run_.done_ns - run_.first_ns) / 1e9
    delivered = run_.checker.count / delivered_s if delivered_s > 0 else 0.0
    mean_batch = facts.agent_rows / facts.commits if facts.commits else float(DEFAULT_BATCH)
    batch = max(1, round(mean_batch))
    tail_lag_ms = (run_.done_ns / 1e9 - facts.done_ts) * 1000 if facts.done_ts else 0.0

    # Raw limits, after the daemon is gone so they get the machine to themselves.
    rows = synth_rows(p.chunks)
    scratch = root / "raw-sqlite"
    scratch.mkdir(parents=True, exist_ok=True)
    raw = raw_batched(scratch / "batched.db", rows, batch)
    raw_ordered = raw_batched(scratch / "ordered.db", synth_rows(p.chunks, ordered_ids=True), batch)
    per_row, per_row_n = raw_per_row(scratch / "per-row.db", rows[:p.per_row_max], p.per_row_seconds)
    store_layer = eventlog_batched(scratch / "eventlog.db", p.chunks, batch)
    bare, bare_checker = asyncio.run(bare_daphne(p.chunks))
    result.check("bare daphne frames consecutive", bare_checker.ok, bare_checker.describe())

    target = Target(Op.AT_LEAST, TARGET_EVENTS_PER_S)
    result.metric("throughput.e2e", "end to end (prompt sent → done frame received)", e2e, "ev/s",
                  raw_limit=raw, raw_label="raw sqlite", target=target,
                  note=f"{p.chunks:,} chunks in {e2e_s:.2f} s", summary=True)
    result.metric("throughput.e2e_vs_daphne", "end to end vs bare daphne SSE", e2e, "ev/s", raw_limit=bare,
                  raw_label="bare daphne", target=target, summary=True)
    result.metric("throughput.persisted", "persisted (store: first → last agent_message commit)", persisted,
                  "ev/s", raw_limit=raw, raw_label="raw sqlite", target=target, summary=True)
    result.metric("throughput.delivered", "delivered (client: first → last frame)", delivered, "ev/s",
                  raw_limit=bare, raw_label="bare daphne", target=target)
    result.metric("throughput.tail_lag", "done committed → done frame at client", tail_lag_ms, "ms",
                  note="how far SSE trails the store at the end")
    cpu_us = daemon_cpu / p.chunks * 1e6
    result.metric("throughput.cpu_per_event", "daemon CPU per event (all threads)", cpu_us, "µs",
                  note=f"{daemon_cpu:.1f} s CPU = {daemon_cpu / e2e_s:.0%} of a core; implies ≤ "
                       f"{1e6 / cpu_us:,.0f} ev/s per core", summary=True)
    result.metric("throughput.agent_cpu", "scripted agent CPU during the stream", agent_cpu / e2e_s * 100,
                  "% of a core")
    result.metric("throughput.client_cpu", "bench SSE client CPU during the stream", client_cpu / e2e_s * 100,
                  "% of a core")
    result.metric("throughput.group_commit", "group commit: mean rows per transaction", mean_batch, "rows",
                  note=f"{facts.commits:,} commits for {facts.agent_rows:,} rows")
    result.metric("raw.sqlite_batched", f"raw sqlite, batches of {batch} (WAL, synchronous=NORMAL)", raw,
                  "rows/s", summary=True)
    result.metric("raw.sqlite_ordered_ids", "raw sqlite, same batches, insertion-ordered ids", raw_ordered,
                  "rows/s", raw_limit=raw, raw_label="random ids",
                  note="the UNIQUE index on random ids costs this much")
    result.metric("raw.sqlite_per_row", "raw sqlite, one transaction per row", per_row, "rows/s", raw_limit=raw,
                  raw_label="batched", note=f"{per_row_n:,} rows", summary=True)
    result.metric("raw.eventlog", f"EventLog.append, batches of {batch} (JSON, ids, redaction)", store_layer,
                  "rows/s", raw_limit=raw, raw_label="raw sqlite", note="the store layer's Python cost")
    result.metric("raw.daphne", "bare daphne SSE, pre-built frames, 1000 per send", bare, "frames/s",
                  summary=True)
    result.details.update({
        "chunks": p.chunks, "after_sequence": run_.after, "frames": run_.checker.count, "turn_id": run_.turn_id,
        "e2e_seconds": e2e_s, "delivered_seconds": delivered_s, "store_rows": facts.rows,
        "agent_rows": facts.agent_rows, "commits": facts.commits, "events_db_bytes": db_bytes,
        "per_row_rows": per_row_n, "raw_batch": batch, "rows_after_done": facts.later_types,
    })
    result.notes.append(environment_note())
    result.notes.append(f"events.db after the run: {db_bytes / 2**20:.1f} MiB (incl. WAL) for {facts.rows:,} rows "
                        "of this turn plus the warm-up.")
    return result

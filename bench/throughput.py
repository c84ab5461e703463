"""Throughput end to end (agent → events.db → raw SSE) beside the raw limits measured in the same run.

- end to end: the scripted agent's `stream N` (N agent_message chunks `c0 c1 …`, as fast as it can write) into
  a live session, read by one raw-frames SSE client from `Last-Event-ID` until the turn's `done` frame. Rates
  count chunk texts, not rows or frames: the store merges the adjacent chunks of one write batch into one row;
- bare ACP clients (`bench/bare_acp.py`): the same agent and turn on the `acp` SDK alone, the ceiling for any
  client. Daemon and bare turns alternate over a few rounds, so each pair sees the same machine;
- raw sqlite: this turn's stored rows inserted by plain `sqlite3` in the daemon's commits, the store layer
  alone, and the unmerged shapes (one row per chunk, batched and one transaction per row) for reference;
- bare daphne: a minimal ASGI app on daphne streaming pre-built frames (one per chunk) to the same client.
"""

from __future__ import annotations

import asyncio
import json
import socket
import sqlite3
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.bare_acp import BareRun, transport_client, typed_client
from bench.harness import BenchDaemon, cpu_seconds, daemon_cpu_seconds, environment_note
from bench.report import BenchResult, Op, Target
from bench.sse_client import ChunkChecker, SequenceChecker, SSEStream
from sessions.store.events import SCHEMA_SQL, EventLog
from sessions.store.folder import parse_time
from sessions.store.ids import new_event_id
from sessions.store.ops import NewEvent, merge_chunks

ROOT = Path(__file__).resolve().parent.parent
TARGET_VS_BARE_ACP = 0.8  # issue 10: end to end at least 0.8x the bare ACP SDK client on the same turn
DEFAULT_BATCH = 256  # the scripted agent's write batch: one row per chunk, for the unmerged raw limits


@dataclass
class Params:
    chunks: int
    warmup: int
    per_row_max: int
    per_row_seconds: float
    rounds: int


FULL = Params(chunks=100_000, warmup=2_000, per_row_max=100_000, per_row_seconds=4.0, rounds=3)
QUICK = Params(chunks=20_000, warmup=500, per_row_max=20_000, per_row_seconds=1.0, rounds=2)


# ---- end to end ----------------------------------------------------------------------------------

@dataclass
class StreamRun:
    after: int
    prompt_ns: int
    first_ns: int
    done_ns: int
    frames: int
    checker: SequenceChecker
    chunks: ChunkChecker
    turn_id: str
    done_sequence: int = 0
    terminal_error: str | None = None
    daemon_cpu: float = 0.0
    agent_cpu: float = 0.0
    client_cpu: float = 0.0

    @property
    def seconds(self) -> float:
        return (self.done_ns - self.prompt_ns) / 1e9 if self.done_ns else 0.0

    @property
    def rate(self) -> float:
        """Chunks per second, prompt sent → done frame received."""
        return self.chunks.count / self.seconds if self.seconds > 0 else 0.0


async def read_until_done(host: str, port: int, path: str, after: int, start_turn: Any,
                          timeout: float, token: str) -> StreamRun:
    """Open the stream at `after`, then start the turn (so every frame is live), read until `done`."""
    stream = SSEStream(host, port, path, last_event_id=after, token=token)
    await stream.connect()
    checker = SequenceChecker(after)
    chunks = ChunkChecker()
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
                if frame.event == "agent_message":
                    chunks.feed(json.loads(frame.data)["content"].get("text", ""))
                elif frame.event == "done":
                    done_ns, done_seq = received, frame.id or 0
                    return
                elif frame.event in ("session_stopped", "error"):
                    error = f"{frame.event}: {frame.data[:300]!r}"
                    return
        error = "stream closed before the done frame"

    try:
        await asyncio.wait_for(consume(), timeout)
    finally:
        await stream.close()
    return StreamRun(after, prompt_ns, first_ns, done_ns, frames, checker, chunks, turn_id, done_seq, error)


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
    first_commit_chunks: int
    stored: list[tuple[Any, ...]]  # this turn's rows as stored, for the raw sqlite limit
    later_types: list[str]


def analyse_store(db: Path, after: int, until: int, chunks: int) -> StoreFacts:
    """Read the turn back from events.db: order, content, and the commit pattern (one timestamp per commit)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT sequence, id, turn_id, type, agent_name, content, timestamp FROM events"
                            " WHERE sequence > ? AND sequence <= ? ORDER BY sequence", (after, until)).fetchall()
        later = [r[0] for r in conn.execute("SELECT type FROM events WHERE sequence > ? ORDER BY sequence LIMIT 20",
                                            (until,))]
    finally:
        conn.close()
    consecutive = all(row[0] == after + 1 + i for i, row in enumerate(rows))
    agent = [r for r in rows if r[3] == "agent_message"]
    texts = [json.loads(r[5]).get("text", "") for r in agent]
    checker = ChunkChecker()
    for text in texts:
        checker.feed(text)
    text_ok = checker.ok(chunks)
    text_detail = f"{checker.describe(chunks)}, in {len(agent):,} agent_message rows" if text_ok \
        else checker.describe(chunks)
    stamps = [r[6] for r in agent]
    done = [r for r in rows if r[3] == "done"]

    def ts(value: str) -> float:
        moment = parse_time(value)
        return moment.timestamp() if moment else 0.0

    first_commit = sum(t.count(" ") for t, stamp in zip(texts, stamps, strict=True) if stamp == stamps[0])
    return StoreFacts(rows=len(rows), agent_rows=len(agent), text_ok=text_ok, text_detail=text_detail,
                      consecutive=consecutive, first_ts=ts(stamps[0]) if stamps else 0.0,
                      last_ts=ts(stamps[-1]) if stamps else 0.0, done_ts=ts(done[-1][6]) if done else 0.0,
                      commits=len(set(stamps)), first_commit_chunks=first_commit, stored=rows, later_types=later)


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


def raw_stored(path: Path, rows: list[tuple[Any, ...]]) -> float:
    """The turn's rows exactly as the daemon stored them (merged chunks), one transaction per commit (rows of one
    commit share a timestamp): seconds for plain sqlite to store what the daemon stored."""
    commits: dict[str, list[tuple[Any, ...]]] = {}
    for row in rows:
        commits.setdefault(row[6], []).append(row)
    conn = fresh_db(path)
    try:
        start = time.perf_counter()
        for batch in commits.values():
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(INSERT, batch)
            conn.execute("COMMIT")
        return time.perf_counter() - start
    finally:
        conn.close()


def store_layer(path: Path, count: int, batch: int) -> float:
    """The recorder's store path off the daemon (merge_chunks, then EventLog.commit: content dict, redaction,
    JSON, ids), `batch` chunks per commit as in the daemon: chunks/s, Python's share of persisting."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    log = EventLog(path, "scripted")
    events = [NewEvent("agent_message", "turn_0123456789abcdef",
                       {"session_id": "scripted-" + "0" * 32, "text": f"c{i} "}) for i in range(count)]
    try:
        start = time.perf_counter()
        for i in range(0, count, batch):
            log.commit(merge_chunks(events[i:i + batch]))
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

def median(values: Iterable[float]) -> float:
    """0 for no values: a failed round must end as a failed check, not as a StatisticsError."""
    items = list(values)
    return statistics.median(items) if items else 0.0


@dataclass
class Rounds:
    daemon: list[StreamRun]
    ceiling: list[BareRun]
    typed: list[BareRun]


async def measure_rounds(daemon: BenchDaemon, session: dict[str, Any], p: Params) -> Rounds:
    """Alternate the daemon's turn and the bare clients' turns, so each pair sees the same machine."""
    prompt_log = daemon.home.parent / "bare-acp-prompts.jsonl"
    agent_pid = daemon.agent_pid(session) or 0
    out = Rounds([], [], [])
    async with transport_client(daemon.workspace, prompt_log) as ceiling, \
            typed_client(daemon.workspace, prompt_log) as typed:
        await ceiling.stream(p.warmup)
        await typed.stream(p.warmup)
        for _ in range(p.rounds):
            after = await asyncio.to_thread(daemon.newest_sequence, session)
            cpu0, agent0, client0 = daemon_cpu_seconds(daemon.pid), cpu_seconds(agent_pid), time.process_time()
            run_ = await read_until_done(daemon.host, daemon.port, daemon.stream_path(session), after,
                                         lambda: daemon.prompt(session, f"stream {p.chunks}"),
                                         timeout=max(120.0, p.chunks / 500), token=daemon.d.token)
            run_.daemon_cpu = daemon_cpu_seconds(daemon.pid) - cpu0
            run_.agent_cpu = cpu_seconds(agent_pid) - agent0
            run_.client_cpu = time.process_time() - client0
            out.daemon.append(run_)
            if run_.terminal_error:
                break
            out.ceiling.append(await ceiling.stream(p.chunks))
            out.typed.append(await typed.stream(p.chunks))
    return out


def run(root: Path, quick: bool) -> BenchResult:
    p = QUICK if quick else FULL
    result = BenchResult("throughput", f"Throughput: scripted agent `stream {p.chunks:,}` → events.db → 1 raw SSE "
                                       f"client, against bare ACP SDK clients on the same turn ({p.rounds} rounds)")
    daemon = BenchDaemon(root / "throughput")
    try:
        session = daemon.create("scripted")
        warm = daemon.prompt(session, f"stream {p.warmup}")
        daemon.wait_done(session, warm["prompt"]["turn_id"])
        with daemon.profiling("throughput"):
            rounds = asyncio.run(measure_rounds(daemon, session, p))
        db = daemon.events_db(session)
        facts = [analyse_store(db, r.after, r.done_sequence or 2**62, p.chunks) for r in rounds.daemon]
        db_bytes = sum(f.stat().st_size for f in db.parent.glob("events.db*"))
    finally:
        daemon.stop()

    # One check per property over every round; the detail names the first round that failed it.
    pairs_ = list(enumerate(zip(rounds.daemon, facts, strict=True), 1))

    def over_rounds(name: str, ok: Callable[[StreamRun, StoreFacts], bool],
                    detail: Callable[[StreamRun, StoreFacts], str]) -> None:
        if not pairs_:
            result.check(name, False, "no round ran")
            return
        failed = [(i, r, f) for i, (r, f) in pairs_ if not ok(r, f)]
        if failed:
            i, r, f = failed[0]
            result.check(name, False, f"round {i} of {len(pairs_)}: {detail(r, f)}")
        else:
            r, f = pairs_[-1][1]
            result.check(name, True, f"{len(pairs_)} rounds; last: {detail(r, f)}")

    over_rounds("stream reached done", lambda r, f: r.terminal_error is None,
                lambda r, f: r.terminal_error or f"done frame at sequence {r.done_sequence}")
    over_rounds("no gap or duplicate (client)", lambda r, f: r.checker.ok, lambda r, f: r.checker.describe())
    over_rounds("every chunk delivered in order (client)", lambda r, f: r.chunks.ok(p.chunks),
                lambda r, f: f"{r.chunks.describe(p.chunks)} in {r.frames:,} frames")
    over_rounds("no gap (store)", lambda r, f: f.consecutive, lambda r, f: f"{f.rows} rows after sequence {r.after}")
    over_rounds("every chunk stored in order", lambda r, f: f.text_ok, lambda r, f: f.text_detail)
    over_rounds("client saw every stored row", lambda r, f: r.checker.count == f.rows,
                lambda r, f: f"{r.checker.count} framed rows vs {f.rows} stored")
    for name, runs in (("SDK transport", rounds.ceiling), ("typed SDK", rounds.typed)):
        bad = [r.checker.describe(p.chunks) for r in runs if not r.checker.ok(p.chunks) or r.stop_reason != "end_turn"]
        result.check(f"bare ACP client ({name}) got every chunk", not bad and len(runs) == p.rounds,
                     "; ".join(bad[:2]) or f"{len(runs)} turns of {p.chunks:,} chunks, in order")

    # The median round of each; per-round ratios show how much the machine moved under the pairs.
    e2e = median(r.rate for r in rounds.daemon)
    ceiling = median(r.rate for r in rounds.ceiling)
    typed = median(r.rate for r in rounds.typed)
    pairs = ", ".join(f"{d.rate / c.rate:.2f}x" for d, c in zip(rounds.daemon, rounds.ceiling, strict=False)
                      if c.rate)
    chunks_total = sum(r.chunks.count for r in rounds.daemon)
    daemon_cpu = sum(r.daemon_cpu for r in rounds.daemon)
    e2e_s = max(sum(r.seconds for r in rounds.daemon), 1e-9)
    delivered = median(r.chunks.count / ((r.done_ns - r.first_ns) / 1e9) for r in rounds.daemon
                       if r.done_ns > r.first_ns)
    persisted = median((p.chunks - f.first_commit_chunks) / (f.last_ts - f.first_ts) for f in facts
                       if f.last_ts > f.first_ts)
    tail_lag_ms = median((r.done_ns / 1e9 - f.done_ts) * 1000 for r, f in zip(rounds.daemon, facts, strict=True)
                         if f.done_ts and r.done_ns)
    commits = sum(f.commits for f in facts)
    agent_rows = sum(f.agent_rows for f in facts)
    chunks_per_commit = chunks_total / commits if commits else 1.0

    # Raw limits without the daemon, so they get the machine to themselves.
    scratch = root / "raw-sqlite"
    scratch.mkdir(parents=True, exist_ok=True)
    stored_s = median(raw_stored(scratch / f"stored-{i}.db", f.stored) for i, f in enumerate(facts))
    stored_rate = p.chunks / stored_s if stored_s > 0 else 0.0
    layer = store_layer(scratch / "store-layer.db", p.chunks, max(1, round(chunks_per_commit)))
    rows = synth_rows(p.chunks)
    raw = raw_batched(scratch / "batched.db", rows, DEFAULT_BATCH)
    per_row, per_row_n = raw_per_row(scratch / "per-row.db", rows[:p.per_row_max], p.per_row_seconds)
    bare, bare_checker = asyncio.run(bare_daphne(p.chunks))
    result.check("bare daphne frames consecutive", bare_checker.ok, bare_checker.describe())

    seconds = median(r.seconds for r in rounds.daemon)
    result.metric("throughput.e2e", "end to end: prompt sent → done frame at the SSE client", e2e, "chunks/s",
                  raw_limit=ceiling, raw_label="bare ACP, SDK transport", summary=True,
                  target=Target(Op.AT_LEAST, TARGET_VS_BARE_ACP, of_ratio=True),
                  note=f"median of {len(rounds.daemon)} rounds ({p.chunks:,} chunks in {seconds:.2f} s); "
                       f"per round vs the ceiling: {pairs}")
    result.metric("throughput.e2e_vs_typed", "end to end vs the SDK's typed client", e2e, "chunks/s",
                  raw_limit=typed, raw_label="bare ACP, typed SDK", summary=True)
    result.metric("throughput.bare_acp", "bare ACP client, SDK transport (the ceiling)", ceiling, "chunks/s",
                  summary=True, note="Connection + NDJSON transport, updates as dicts: "
                  f"client CPU {median(r.client_cpu / r.seconds for r in rounds.ceiling):.0%} of a core"
                  if rounds.ceiling else "")
    result.metric("throughput.bare_acp_typed", "bare ACP client, typed SDK (ClientSideConnection)", typed,
                  "chunks/s", note="pydantic models and a task per notification" if rounds.typed else "")
    result.metric("throughput.delivered", "delivered (client: first → last frame)", delivered, "chunks/s")
    result.metric("throughput.persisted", "persisted (store: first → last agent_message commit)", persisted,
                  "chunks/s", raw_limit=layer, raw_label="store layer alone")
    result.metric("throughput.tail_lag", "done committed → done frame at client", tail_lag_ms, "ms",
                  note="how far SSE trails the store at the end")
    cpu_us = daemon_cpu / chunks_total * 1e6 if chunks_total else 0.0
    # CPU per chunk does not depend on how much of the machine others take: the load-independent comparison.
    bare_chunks = sum(r.chunks for r in rounds.ceiling)
    bare_us = sum(r.client_cpu for r in rounds.ceiling) / bare_chunks * 1e6 if bare_chunks else None
    result.metric("throughput.cpu_per_event", "daemon CPU per chunk (all threads)", cpu_us, "µs", summary=True,
                  raw_limit=bare_us, raw_label="bare ACP client, SDK transport",
                  note=f"{daemon_cpu:.1f} s CPU = {daemon_cpu / e2e_s:.0%} of a core; implies ≤ "
                       f"{1e6 / cpu_us:,.0f} chunks/s per core" if cpu_us else "")
    result.metric("throughput.agent_cpu", "scripted agent CPU during the stream",
                  sum(r.agent_cpu for r in rounds.daemon) / e2e_s * 100, "% of a core")
    result.metric("throughput.client_cpu", "bench SSE client CPU during the stream",
                  sum(r.client_cpu for r in rounds.daemon) / e2e_s * 100, "% of a core")
    result.metric("throughput.group_commit", "group commit: chunks per transaction", chunks_per_commit, "chunks",
                  note=f"{commits:,} commits, {agent_rows:,} agent_message rows (merged) for {chunks_total:,} chunks")
    result.metric("raw.sqlite_stored", "raw sqlite: this turn's stored rows, same commits", stored_rate,
                  "chunks/s", raw_limit=layer, raw_label="store layer",
                  note=f"{len(facts[0].stored) if facts else 0} rows in {stored_s * 1000:.1f} ms")
    result.metric("raw.store_layer", f"store layer: merge_chunks + EventLog.commit, {chunks_per_commit:.0f} per commit",
                  layer, "chunks/s", note="the recorder's Python cost per chunk, off the daemon")
    result.metric("raw.sqlite_batched", f"raw sqlite, one row per chunk, batches of {DEFAULT_BATCH}", raw, "rows/s",
                  note="unmerged: what merging spares the store")
    result.metric("raw.sqlite_per_row", "raw sqlite, one row and one transaction per chunk", per_row, "rows/s",
                  raw_limit=raw, raw_label="batched", note=f"{per_row_n:,} rows")
    result.metric("raw.daphne", "bare daphne SSE, one pre-built frame per chunk, 1000 per send", bare, "frames/s",
                  note="the transport for unmerged frames; the daemon sends one frame per merged row")
    result.details.update({
        "chunks": p.chunks, "rounds": [
            {"e2e": r.rate, "ceiling": c.rate, "typed": t.rate, "frames": r.frames, "rows": f.rows,
             "commits": f.commits, "daemon_cpu_s": r.daemon_cpu}
            for r, c, t, f in zip(rounds.daemon, rounds.ceiling, rounds.typed, facts, strict=False)],
        "events_db_bytes": db_bytes, "per_row_rows": per_row_n, "rows_after_done": [f.later_types for f in facts],
    })
    result.notes.append(environment_note())
    result.notes.append("bare ACP clients: the same scripted agent and `stream N` turn, prompt sent → prompt response, "
                        "every chunk text checked; the daemon's figure adds the HTTP prompt, the store and SSE.")
    result.notes.append(f"events.db after the run: {db_bytes / 2**20:.1f} MiB (incl. WAL).")
    return result

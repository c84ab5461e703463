"""Bounded memory: the daemon's RSS around reads of a 1,000,000-event session.

A real session is created and stopped through the daemon, then its events.db is grown to 1M events with
`EventLog` (the store's own writer, batches of 10k, realistic turns of 100 events) while it is stopped.
Then `GET …/events?limit=20` (behind `compozy session events --last 20`) and `GET …/history?limit=5` are
timed, and the daemon's VmRSS / VmHWM (peak, reset before each read) are compared before and after.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

from bench.harness import BenchDaemon, Memory, reset_peak
from bench.report import BenchResult, Op, Target
from sessions.store.events import EventLog
from sessions.store.ids import new_turn_id
from sessions.store.ops import NewEvent

BATCH = 10_000
TURN_EVENTS = 100
CHUNK_TEXT = "The quick brown fox jumps over the lazy dog while the agent keeps streaming its answer. "
# A bound of our own choosing: reads over any store size should cost the daemon no more than this.
TARGET_GROWTH_MIB = 32.0


def grow_store(db: Path, agent_name: str, acp_session_id: str, events: int, turn_size: int) -> float:
    """Append `events` events in turns of `turn_size` (user_message, agent chunks, done); returns events/s."""
    log = EventLog(db, agent_name, redact=False)
    try:
        start = time.perf_counter()
        pending: list[NewEvent] = []
        written = 0
        turn = new_turn_id()
        for i in range(events):
            position = i % turn_size
            if position == 0:
                turn = new_turn_id()
                pending.append(NewEvent("user_message", turn, {"text": f"prompt {i // turn_size}", "source": "user"}))
            elif position == turn_size - 1 or i == events - 1:
                pending.append(NewEvent("done", turn, {"session_id": acp_session_id, "stop_reason": "end_turn",
                                                       "prompt_stop_reason": "end_turn"}))
            else:
                pending.append(NewEvent("agent_message", turn, {"session_id": acp_session_id,
                                                                "text": f"{position}: {CHUNK_TEXT}"}))
            if len(pending) >= BATCH:
                log.append(pending)
                written += len(pending)
                pending = []
        if pending:
            log.append(pending)
            written += len(pending)
        return written / (time.perf_counter() - start)
    finally:
        log.close()


def db_bytes(db: Path) -> int:
    return sum(p.stat().st_size for p in db.parent.glob(db.name + "*"))


def timed_get(daemon: BenchDaemon, path: str, params: dict[str, Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    response = daemon.d.http.get(path, params=params)
    elapsed = (time.perf_counter() - start) * 1000
    if response.status_code != 200:
        raise RuntimeError(f"GET {path} {params}: {response.status_code} {response.text[:500]}")
    return elapsed, response.json()


def measure(daemon: BenchDaemon, path: str, params: dict[str, Any], repeat: int) -> dict[str, Any]:
    """Latencies (first call apart) and the RSS / peak RSS change around `repeat` identical reads."""
    peak_reset = reset_peak(daemon.pid)
    before: Memory = daemon.memory()
    latencies = []
    body: Any = None
    for _ in range(repeat):
        ms, body = timed_get(daemon, path, params)
        latencies.append(ms)
    after = daemon.memory()
    return {"first_ms": latencies[0], "p50_ms": statistics.median(latencies), "max_ms": max(latencies),
            "rss_before_mib": before.rss_mib, "rss_after_mib": after.rss_mib,
            "rss_growth_mib": after.rss_mib - before.rss_mib,
            "peak_growth_mib": (after.hwm_mib - before.rss_mib) if peak_reset else None,
            "peak_reset": peak_reset, "body": body}


def stopped_session(daemon: BenchDaemon) -> dict[str, Any]:
    session = daemon.create("scripted")
    turn = daemon.prompt(session, "hello")
    daemon.wait_done(session, turn["prompt"]["turn_id"])
    daemon.stop_session(session)
    return daemon.d.session(session["id"])


def run(root: Path, quick: bool) -> BenchResult:
    events = 100_000 if quick else 1_000_000
    big_turn = 20_000 if quick else 100_000
    result = BenchResult("memory", f"Bounded memory: daemon RSS around reads of a {events:,}-event session")
    daemon = BenchDaemon(root / "memory")
    try:
        control = stopped_session(daemon)
        big = stopped_session(daemon)
        wide = stopped_session(daemon)
        acp_id = str(big.get("acp_session_id") or "scripted-bench")
        big_db, wide_db = daemon.events_db(big), daemon.events_db(wide)
        base_seq = daemon.newest_sequence(big)
        gen_rate = grow_store(big_db, big["agent_name"], acp_id, events, TURN_EVENTS)
        wide_base = daemon.newest_sequence(wide)
        grow_store(wide_db, wide["agent_name"], acp_id, big_turn, big_turn)
        size = db_bytes(big_db)

        # Warm the code paths (imports, first-request setup) on a small session so they are not counted.
        for _ in range(3):
            timed_get(daemon, daemon.scoped(control, "/events"), {"limit": 20})
            timed_get(daemon, daemon.scoped(control, "/history"), {"limit": 5})
        start_memory = daemon.memory()
        ev = measure(daemon, daemon.scoped(big, "/events"), {"limit": 20}, 20)
        hist = measure(daemon, daemon.scoped(big, "/history"), {"limit": 5}, 10)
        with daemon.profiling("memory-wide-history"):
            wide_hist = measure(daemon, daemon.scoped(wide, "/history"), {"limit": 1}, 1)
    finally:
        daemon.stop()

    newest = ev["body"]["events"]
    want = list(range(base_seq + events - 19, base_seq + events + 1))
    got = [e["sequence"] for e in newest]
    result.check("events?limit=20 returns the newest 20", got == want,
                 f"sequences {got[0] if got else None}..{got[-1] if got else None}, want {want[0]}..{want[-1]}")
    turns = hist["body"]["history"]
    sizes = [len(t["events"]) for t in turns]
    result.check("history?limit=5 returns 5 whole turns", len(turns) == 5 and sum(sizes) > 0,
                 f"{len(turns)} turns, {sum(sizes)} events")
    wide_turns = wide_hist["body"]["history"]
    wide_events = sum(len(t["events"]) for t in wide_turns)
    omitted = sum(int(t.get("omitted_events") or 0) for t in wide_turns)
    # history keeps at most 1000 events of one turn (bounded memory) and accounts for every other one.
    result.check("history bounds one huge turn and counts what it left out",
                 wide_events <= 1000 and wide_events + omitted == big_turn
                 and all(t.get("truncated") for t in wide_turns if t.get("omitted_events")),
                 f"{wide_events:,} kept + {omitted:,} omitted of {big_turn:,} (after sequence {wide_base})")

    size_mib = size / 2**20
    bound = Target(Op.AT_MOST, TARGET_GROWTH_MIB)

    def growth(m: dict[str, Any]) -> float:
        return m["peak_growth_mib"] if m["peak_growth_mib"] is not None else m["rss_growth_mib"]

    peak_label = "peak RSS growth (VmHWM)" if ev["peak_reset"] else "RSS growth (VmHWM reset not permitted)"
    result.metric("memory.store_size", "events.db size (incl. WAL)", size_mib, "MiB",
                  note=f"{events:,} events, turns of {TURN_EVENTS}")
    result.metric("memory.rss_start", "daemon RSS before the reads", start_memory.rss_mib, "MiB")
    result.metric("memory.events_growth", f"events?limit=20: {peak_label}", growth(ev), "MiB", raw_limit=size_mib,
                  raw_label="db size", target=bound, summary=True,
                  note=f"RSS {ev['rss_before_mib']:.1f} → {ev['rss_after_mib']:.1f} MiB over 20 calls")
    result.metric("memory.events_latency", "events?limit=20 latency p50", ev["p50_ms"], "ms", summary=True,
                  note=f"first {ev['first_ms']:.1f} ms, max {ev['max_ms']:.1f} ms")
    result.metric("memory.history_growth", f"history?limit=5: {peak_label}", growth(hist), "MiB",
                  raw_limit=size_mib, raw_label="db size", target=bound, summary=True,
                  note=f"RSS {hist['rss_before_mib']:.1f} → {hist['rss_after_mib']:.1f} MiB over 10 calls")
    result.metric("memory.history_latency", "history?limit=5 latency p50", hist["p50_ms"], "ms", summary=True,
                  note=f"first {hist['first_ms']:.1f} ms, max {hist['max_ms']:.1f} ms")
    result.metric("memory.wide_turn_growth", f"history?limit=1 on one {big_turn:,}-event turn: {peak_label}",
                  growth(wide_hist), "MiB", note="history returns whole turns: cost follows turn size")
    result.metric("memory.wide_turn_latency", f"history?limit=1 on one {big_turn:,}-event turn, p50",
                  wide_hist["p50_ms"], "ms")
    result.metric("memory.generate", "store fast path (EventLog.append, batches of 10k, no redaction)", gen_rate,
                  "ev/s")
    for m in (ev, hist, wide_hist):
        m.pop("body", None)
    result.details.update({"event_count": events, "events_db_bytes": size, "events_read": ev, "history": hist,
                           "wide_turn": {**wide_hist, "events": big_turn}})
    result.notes.append("Peak growth = VmHWM after the reads - VmRSS before, with VmHWM reset (clear_refs 5) just "
                        "before; RSS rarely shrinks after a peak (allocator), so the peak is the honest figure.")
    return result

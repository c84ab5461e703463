"""events.db: gap-free sequences, group commit, redaction before storage, bounded reads, WAL."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from sessions.store.events import (
    PAGE_SIZE,
    EventLog,
    RowFilter,
    iter_events,
    max_sequence,
    read_events,
    read_hook_runs,
    read_rows,
)
from sessions.store.ops import NewEvent


@pytest.fixture
def log(tmp_path: Path) -> EventLog:
    return EventLog(tmp_path / "events.db", "general")


def test_sequences_start_at_one_and_stay_gap_free_across_batches(log: EventLog) -> None:
    first = log.append([NewEvent("user_message", "t1", {"text": "hi"})])
    second = log.append([NewEvent("agent_message", "t1", {"text": str(i)}) for i in range(5)])
    assert [e["sequence"] for e in first + second] == [1, 2, 3, 4, 5, 6]
    assert max_sequence(log.path) == 6


def test_a_reopened_writer_continues_the_sequence(tmp_path: Path) -> None:
    path = tmp_path / "events.db"
    EventLog(path, "a").append([NewEvent("user_message", "t", {"text": "x"})])
    again = EventLog(path, "a").append([NewEvent("done", "t", {"stop_reason": "end_turn"})])
    assert again[0]["sequence"] == 2


def test_secrets_are_redacted_before_they_reach_disk(log: EventLog) -> None:
    log.append([NewEvent("error", "t", {"error": "auth failed for sk-proj-abcdefghijklmnopqrstuvwx123456"})])
    raw = sqlite3.connect(log.path).execute("SELECT content FROM events").fetchone()[0]
    assert "sk-proj-abcdefghijklmnopqrstuvwx123456" not in raw
    assert "[REDACTED]" in raw


def test_content_is_tagged_with_its_schema_and_type(log: EventLog) -> None:
    log.append([NewEvent("agent_message", "t9", {"text": "hello"})])
    content = read_events(log.path)[0]["content"]
    assert content["schema"] == "compozy.session.event.v1"
    assert content["type"] == "agent_message" and content["turn_id"] == "t9"


def test_newest_reads_return_the_tail_ascending(log: EventLog) -> None:
    log.append([NewEvent("agent_message", "t", {"text": str(i)}) for i in range(50)])
    tail = read_events(log.path, limit=5, newest=True)
    assert [e["sequence"] for e in tail] == [46, 47, 48, 49, 50]


def test_reads_filter_by_type_turn_and_cursor(log: EventLog) -> None:
    log.append([NewEvent("user_message", "a", {"text": "q"}), NewEvent("agent_message", "a", {"text": "r"}),
                NewEvent("user_message", "b", {"text": "q2"}), NewEvent("done", "b", {})])
    assert [e["sequence"] for e in read_events(log.path, types=["user_message"])] == [1, 3]
    assert [e["sequence"] for e in read_events(log.path, turn_id="b")] == [3, 4]
    assert [e["sequence"] for e in read_events(log.path, after=2)] == [3, 4]
    assert [e["sequence"] for e in read_events(log.path, before=3, limit=10, newest=True)] == [1, 2]


def test_iter_events_pages_through_everything_in_order(log: EventLog) -> None:
    log.append([NewEvent("agent_message", "t", {"text": str(i)}) for i in range(2500)])
    sequences = [e["sequence"] for e in iter_events(log.path, page=1000)]
    assert sequences == list(range(1, 2501))


def test_store_uses_wal_so_readers_never_block_the_writer(log: EventLog) -> None:
    mode = sqlite3.connect(log.path).execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


def test_a_new_store_has_small_pages_and_an_older_one_keeps_its_own(tmp_path: Path) -> None:
    """1 KB pages: a one-chunk commit writes five pages to the WAL (store.events.PAGE_SIZE says why)."""
    log = EventLog(tmp_path / "new" / "events.db", "a")
    assert log._conn.execute("PRAGMA page_size").fetchone()[0] == PAGE_SIZE == 1024
    older = tmp_path / "older.db"
    with sqlite3.connect(older) as conn:  # a store made before: SQLite's default page size, no WAL yet
        conn.execute("CREATE TABLE events (sequence INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, turn_id TEXT NOT"
                     " NULL, type TEXT NOT NULL, agent_name TEXT NOT NULL, content TEXT NOT NULL, archived INTEGER"
                     " NOT NULL DEFAULT 0, timestamp TEXT NOT NULL, transcript_entry_key TEXT NOT NULL DEFAULT '')")
        default = conn.execute("PRAGMA page_size").fetchone()[0]
    reopened = EventLog(older, "a")
    reopened.append([NewEvent("user_message", "t", {"text": "x"})])
    assert reopened._conn.execute("PRAGMA page_size").fetchone()[0] == default != PAGE_SIZE
    assert [e["sequence"] for e in read_events(older)] == [1]


def test_token_usage_merges_one_row_per_turn(log: EventLog) -> None:
    log.merge_usage("t1", {"input_tokens": 10, "output_tokens": None})
    log.merge_usage("t1", {"output_tokens": 7})
    row = sqlite3.connect(log.path).execute("SELECT input_tokens, output_tokens FROM token_usage").fetchall()
    assert row == [(10, 7)]


def test_hook_runs_round_trip(log: EventLog) -> None:
    log.record_hook_run({"id": "hook-1", "hook_name": "h", "event": "input.pre_submit", "mode": "sync",
                         "outcome": "denied", "duration_ns": 2_000_000, "required": True, "error": "no"})
    runs = read_hook_runs(log.path)
    assert runs[0]["outcome"] == "denied" and runs[0]["required"] is True and runs[0]["duration_ms"] == 2.0


def test_reading_a_missing_store_is_empty_not_an_error(tmp_path: Path) -> None:
    assert read_events(tmp_path / "nope.db") == []
    assert max_sequence(tmp_path / "nope.db") == 0


def test_ids_are_unique_so_append_if_absent_is_idempotent(log: EventLog) -> None:
    log.append([NewEvent("system", "t", {"title": "x"}, id="ev_fixed")])
    with pytest.raises(sqlite3.IntegrityError):
        log.append([NewEvent("system", "t", {"title": "y"}, id="ev_fixed")])
    assert len(read_events(log.path)) == 1
    assert json.loads(json.dumps(read_events(log.path)[0]["content"]))["title"] == "x"


@pytest.mark.parametrize("row_filter", [
    RowFilter(), RowFilter(types=("tool_call",)), RowFilter(types=("agent_message", "done")),
    RowFilter(turn_id="t2"), RowFilter(agent_name="other"), RowFilter(types=("tool_call",), turn_id="t1"),
    RowFilter(since="SINCE"), RowFilter(types=("agent_message",), agent_name="general", since="SINCE"),
])
def test_a_row_filter_matches_a_live_row_exactly_when_its_sql_selects_it(tmp_path: Path,
                                                                         row_filter: RowFilter) -> None:
    """The live tail tests rows the feed already holds with `matches`; a read asks SQLite with `where`: the two
    must select the same rows, or a filtered stream would change what it shows when it falls behind the feed."""
    path = tmp_path / "events.db"
    general, other = EventLog(path, "general"), EventLog(path, "other")
    general.append([NewEvent("agent_message", "t1", {"text": "a"}), NewEvent("tool_call", "t1", {"title": "x"})])
    other.append([NewEvent("agent_message", "t2", {"text": "b"}), NewEvent("done", "t2", {})])
    since = read_events(path, limit=10)[-1]["timestamp"]  # the second batch's (one timestamp a batch)
    general.append([NewEvent("tool_call", "t2", {"title": "y"}), NewEvent("agent_message", "t1", {"text": "c"})])
    if row_filter.since == "SINCE":
        row_filter = RowFilter(row_filter.types, row_filter.turn_id, row_filter.agent_name, since)
    every = read_rows(path, limit=100)
    selected = read_rows(path, limit=100, types=row_filter.types, turn_id=row_filter.turn_id,
                         agent_name=row_filter.agent_name, since=row_filter.since)
    assert [r for r in every if row_filter.matches(r)] == selected
    assert bool(row_filter) == (selected != every)  # each filter here leaves some rows out

"""`events.db`: the append-only, per-session event log, and the bounded reads over it.

One writer per session (EventLog) assigns gap-free sequences from 1 inside its write transaction.
Readers open their own connections and page by sequence, so no read loads a whole store into memory.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from sessions.core.failures import DISK_FULL, DISPLACED, IO_ERROR, READ_ONLY, StoreFailure, StoreReadError, classify
from sessions.store.ops import HookRun, HookRunRow, NewEvent, StoreOp, UsageColumns, UsageUpdate
from sessions.store.rows import EventRow, Statement, StoredEvent, Values, draft, finish, numbered, slices

MAX_PAGE = 1000
DEFAULT_PAGE = 200

SCHEMA_SQL = """
CREATE TABLE IF NOT EXISTS events (
    sequence INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    turn_id TEXT NOT NULL,
    type TEXT NOT NULL,
    agent_name TEXT NOT NULL,
    content TEXT NOT NULL,
    archived INTEGER NOT NULL DEFAULT 0,
    timestamp TEXT NOT NULL,
    transcript_entry_key TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS events_turn ON events(turn_id);
CREATE INDEX IF NOT EXISTS events_type ON events(type);
CREATE INDEX IF NOT EXISTS events_timestamp ON events(timestamp);
CREATE TABLE IF NOT EXISTS token_usage (
    turn_id TEXT PRIMARY KEY,
    input_tokens INTEGER, output_tokens INTEGER, total_tokens INTEGER, thought_tokens INTEGER,
    cache_read_tokens INTEGER, cache_write_tokens INTEGER, context_used INTEGER, context_size INTEGER,
    cost_amount REAL, cost_currency TEXT, timestamp TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS hook_runs (
    id TEXT PRIMARY KEY,
    hook_name TEXT NOT NULL,
    event TEXT NOT NULL,
    source TEXT NOT NULL,
    mode TEXT NOT NULL,
    duration_ns INTEGER NOT NULL DEFAULT 0,
    outcome TEXT NOT NULL,
    dispatch_depth INTEGER NOT NULL DEFAULT 1,
    patch_applied TEXT,
    error TEXT,
    required INTEGER NOT NULL DEFAULT 0,
    recorded_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS hook_runs_event ON hook_runs(event);
CREATE INDEX IF NOT EXISTS hook_runs_recorded ON hook_runs(recorded_at);
"""


def connect(path: Path, *, readonly: bool = False, check_same_thread: bool = False,
            busy_timeout_ms: int = 5000) -> sqlite3.Connection:
    conn = sqlite3.connect(str(path), timeout=busy_timeout_ms / 1000, isolation_level=None,
                           check_same_thread=check_same_thread)
    conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
    if readonly:
        conn.execute("PRAGMA query_only=1")
    return conn


# Conditions under which a read retries immutable: opening a WAL store creates its -shm (and -wal), which a full
# disk or a read-only filesystem refuses, though every committed row is in the main file. Never for a lock.
_IMMUTABLE_RETRY = frozenset({DISK_FULL, IO_ERROR, READ_ONLY})


def open_reader(path: Path) -> sqlite3.Connection:
    """A read-only connection for one bounded read, already opened (its schema read).

    When the store cannot be opened for a disk condition and holds no WAL content (no -wal file, or an empty
    one: nothing committed lives outside the main file), it is reopened with `immutable=1`, which needs neither
    a -shm file nor a lock, so a stopped session stays readable on a full disk. Not for a connection held open
    across reads (a live tail): an immutable one never sees what is committed after it opened."""
    conn = connect(path, readonly=True)
    try:
        conn.execute("PRAGMA schema_version").fetchone()  # opens the file and its WAL index
        return conn
    except sqlite3.OperationalError as exc:
        conn.close()
        reason = classify(exc, path)
        if reason not in _IMMUTABLE_RETRY or _wal_bytes(path):
            raise read_failure(exc, path) from exc
    uri = f"{path.resolve().as_uri()}?mode=ro&immutable=1"
    try:
        conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA schema_version").fetchone()
    except sqlite3.OperationalError as exc:
        raise read_failure(exc, path) from exc
    return conn


def _wal_bytes(path: Path) -> int:
    try:
        return os.stat(path.with_name(path.name + "-wal")).st_size
    except FileNotFoundError:
        return 0


def read_failure(exc: Exception, path: Path) -> Exception:
    """What a failed read raises: a disk condition as StoreReadError (the API says the store could not be read);
    anything else (not a database, no events table) as it was."""
    reason = classify(exc, path)
    return StoreReadError(reason, str(exc)) if reason is not None else exc


def query(path: Path, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    """One bounded read of the store at `path` (see `open_reader`)."""
    conn = open_reader(path)
    try:
        return conn.execute(sql, params).fetchall()
    except sqlite3.OperationalError as exc:
        raise read_failure(exc, path) from exc
    finally:
        conn.close()


# Every table and index SCHEMA_SQL creates: a store that has them all (and is in WAL mode) opens without running it,
# which halves an open (1.4 → 0.7 ms here): the store writer process opens a hundred stores when load moves to it.
_SCHEMA_OBJECTS = frozenset(re.findall(r"CREATE (?:TABLE|INDEX) IF NOT EXISTS (\w+)", SCHEMA_SQL))


def _schema_ready(conn: sqlite3.Connection) -> bool:
    names = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    return _SCHEMA_OBJECTS.issubset(names) and conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


# A new store's page size. Each commit of one streamed chunk changes a leaf of the table and of its four indexes,
# and the WAL takes each changed page whole: 20 KB a chunk at SQLite's default 4 KB, 5 KB at 1 KB. Measured with
# the store writer process's own work over 200 stores, one chunk a commit, alternating: 57 µs a commit against 72-85
# (512 bytes: 61). The cost falls on large rows (overflow chains four times as long): reading ten 20 KB events
# 1.5x as long, a thousand chunks 1.1x. A store keeps the size it was made with (WAL cannot change it).
PAGE_SIZE = 1024


def init_store(path: Path, busy_timeout_ms: int = 5000) -> None:
    """Create events.db with WAL; idempotent."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = connect(path, busy_timeout_ms=busy_timeout_ms)
    try:
        conn.execute(f"PRAGMA page_size={PAGE_SIZE}")  # before WAL and the first table: no effect on an existing store
        conn.execute("PRAGMA journal_mode=WAL")
        conn.executescript(SCHEMA_SQL)
    finally:
        conn.close()


_INSERT_HEAD = "INSERT INTO events(id, turn_id, type, agent_name, content, timestamp) VALUES "
_INSERT_SQL: dict[int, str] = {}


class EventLog:
    """The single writer of one session's events.db. Not thread-safe: one thread at a time uses it (the
    session's store writer thread, or a repair command)."""

    def __init__(self, path: Path, agent_name: str, *, redact: bool = True, busy_timeout_ms: int = 5000) -> None:
        self.path = path
        self.agent_name = agent_name
        self.redact = redact
        if not path.exists():
            init_store(path, busy_timeout_ms)
        self._conn = connect(path, check_same_thread=False, busy_timeout_ms=busy_timeout_ms)
        if not _schema_ready(self._conn):  # an older store: its missing tables and indexes, and WAL, first
            self._conn.close()
            init_store(path, busy_timeout_ms)
            self._conn = connect(path, check_same_thread=False, busy_timeout_ms=busy_timeout_ms)
        self.busy_timeout_ms = busy_timeout_ms
        # NORMAL in WAL: a commit survives a process crash; only an OS crash may lose the last ones.
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self.last_sequence: int = self._max_sequence()
        # Ours declares `sequence INTEGER PRIMARY KEY` (the rowid): SQLite then numbers new rows itself.
        columns = self._conn.execute("PRAGMA table_info(events)").fetchall()  # (cid, name, type, notnull, dflt, pk)
        self._rowid_sequence = [(c[1], (c[2] or "").upper()) for c in columns if c[5]] == [("sequence", "INTEGER")]
        self.last_rows: list[tuple[Any, ...]] = []
        # The file this connection opened (SQLite holds it open from the first query above). A path deleted or
        # replaced under a live session took every later commit into an unlinked inode: lost, and read nowhere.
        self._identity = _file_identity(path)

    def set_busy_timeout(self, ms: int) -> None:
        """How long a commit waits on another writer's lock (the shared store writer waits for none)."""
        if ms != self.busy_timeout_ms:
            self._conn.execute(f"PRAGMA busy_timeout={int(ms)}")
            self.busy_timeout_ms = ms

    def displaced(self) -> bool:
        """Whether `path` is no longer the file this log writes: removed, or replaced by another. One stat."""
        return _file_identity(self.path) != self._identity

    def _max_sequence(self) -> int:
        return int(self._conn.execute("SELECT COALESCE(MAX(sequence), 0) FROM events").fetchone()[0])

    def append(self, events: Sequence[NewEvent]) -> list[StoredEvent]:
        """Write a batch of events in one transaction (group commit); returns the stored rows as envelopes."""
        return self.commit(events)

    def commit(self, ops: Sequence[StoreOp]) -> list[StoredEvent]:
        """Events, usage merges and hook runs in one transaction; returns the stored event envelopes.

        SQLite numbers the rows itself (`sequence` is the rowid: MAX(sequence) + 1, read under its write lock),
        so a failed commit (rolled back) or a writer elsewhere can never leave this log numbering from a stale
        maximum. A batch of events only is one INSERT statement, its own transaction: every SQLite call
        releases the GIL, and with lone events the GIL hand-offs around BEGIN, a SELECT and COMMIT cost the
        daemon more than the write itself."""
        if not ops:
            return []
        drafted = draft(ops, self.agent_name)
        values, changed = finish(drafted.drafts, redact=self.redact)
        for i, content in changed.items():
            drafted.stored[i]["content"] = content
        stored, self.last_rows = numbered(drafted.stored, values, self.write(values, drafted.statements))
        if self.last_rows:
            self.last_sequence = self.last_rows[-1][0]
        return stored

    def write(self, values: list[Values], statements: list[Statement]) -> list[int]:
        """The SQLite half of `commit`: encoded rows (and the other ops' statements) in one transaction; returns
        each INSERT slice's last sequence. The store writer process runs only this half."""
        if self.displaced():
            raise StoreFailure(DISPLACED, f"{self.path.name} was removed or replaced while this writer held it open")
        parts = slices(values)
        if self._rowid_sequence and not statements and len(parts) == 1:
            return [self._insert(parts[0])]  # autocommit: the statement is the transaction
        return self._commit_transaction(statements, parts)

    def landed(self, ids: list[str]) -> list[tuple[Any, ...]] | None:
        """The stored rows of events `ids` (read_rows form) when the first of them is in the log, else None: a
        batch whose writer died after sending it cannot have landed in part (one transaction)."""
        if not ids or self._conn.execute("SELECT 1 FROM events WHERE id = ?", (ids[0],)).fetchone() is None:
            return None
        marks = ",".join("?" * len(ids))
        return self._conn.execute(f"SELECT {_COLUMNS} FROM events WHERE id IN ({marks}) ORDER BY sequence",
                                  ids).fetchall()

    def _commit_transaction(self, statements: list[Statement], slices: list[list[Values]]) -> list[int]:
        """Usage merges, hook runs and event slices in one BEGIN IMMEDIATE transaction; returns each slice's last
        sequence."""
        conn = self._conn
        lasts: list[int] = []
        conn.execute("BEGIN IMMEDIATE")
        try:
            for sql, params in statements:  # their own tables: the events' order and numbering do not depend on them
                conn.execute(sql, params)
            for chunk in slices:
                # A store made elsewhere may keep `sequence` apart from the rowid: number from MAX, in the txn.
                lasts.append(self._insert(chunk, None if self._rowid_sequence else self._max_sequence() + 1))
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):  # a failed rollback leaves nothing committed either
                    conn.execute("ROLLBACK")
            raise
        return lasts

    def _insert(self, values: list[Values], first: int | None = None) -> int:
        """One INSERT of `values`, numbered by SQLite (or from `first`); returns the last row's sequence."""
        if first is not None:
            marks = ",".join(["(?,?,?,?,?,?,?)"] * len(values))
            self._conn.execute(f"INSERT INTO events(sequence, id, turn_id, type, agent_name, content, timestamp)"
                               f" VALUES {marks}", [v for i, row in enumerate(values) for v in (first + i, *row)])
            return first + len(values) - 1
        sql = _INSERT_SQL.get(len(values))
        if sql is None:
            sql = _INSERT_HEAD + ",".join(["(?,?,?,?,?,?)"] * len(values))
            if len(values) <= 16:
                _INSERT_SQL[len(values)] = sql  # the common sizes, so sqlite3's statement cache hits
        cursor = self._conn.execute(sql, [v for row in values for v in row])
        return int(cursor.lastrowid or 0)

    def merge_usage(self, turn_id: str, usage: UsageColumns) -> None:
        self.commit([UsageUpdate(turn_id, usage)])

    def record_hook_run(self, row: HookRunRow) -> None:
        self.commit([HookRun(row)])

    def close(self) -> None:
        self._conn.close()


def _file_identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


# ---- reads -------------------------------------------------------------------------------------

def row_to_event(row: tuple[Any, ...]) -> EventRow:
    seq, event_id, turn_id, type_, agent, content, timestamp, archived = row
    try:
        body = json.loads(content)
    except json.JSONDecodeError:
        body = {"invalid_json": content[:2048]}
    return {"id": event_id, "sequence": seq, "turn_id": turn_id, "type": type_, "agent_name": agent,
            "content": body, "timestamp": timestamp, "archived": bool(archived)}


_COLUMNS = "sequence, id, turn_id, type, agent_name, content, timestamp, archived"


@dataclass(frozen=True, slots=True)
class RowFilter:
    """Which events a read or a live tail wants. One definition, two forms: SQL for a read of the store (`where`),
    and the same comparisons on a row the live feed already holds (`matches`), so the two can never disagree."""

    types: tuple[str, ...] = ()
    turn_id: str | None = None
    agent_name: str | None = None
    since: str | None = None  # a stored timestamp: rows at or after it

    @classmethod
    def of(cls, types: Iterable[str] | None = None, turn_id: str | None = None, agent_name: str | None = None,
           since: str | None = None) -> RowFilter:
        return cls(tuple(t for t in (types or ()) if t), turn_id or None, agent_name or None, since or None)

    def __bool__(self) -> bool:
        return bool(self.types or self.turn_id or self.agent_name or self.since)

    def where(self) -> tuple[list[str], list[Any]]:
        clauses: list[str] = []
        params: list[Any] = []
        if self.types:
            clauses.append(f"type IN ({','.join('?' for _ in self.types)})")
            params += self.types
        if self.turn_id:
            clauses.append("turn_id = ?")
            params.append(self.turn_id)
        if self.agent_name:
            clauses.append("agent_name = ?")
            params.append(self.agent_name)
        if self.since:
            clauses.append("timestamp >= ?")
            params.append(self.since)
        return clauses, params

    def matches(self, row: tuple[Any, ...]) -> bool:
        """A row in `read_rows` form: (sequence, id, turn_id, type, agent_name, content, timestamp, archived)."""
        return ((not self.types or row[3] in self.types) and (not self.turn_id or row[2] == self.turn_id)
                and (not self.agent_name or row[4] == self.agent_name)
                and (not self.since or row[6] >= self.since))


def read_events(
    path: Path,
    *,
    after: int = 0,
    limit: int = DEFAULT_PAGE,
    newest: bool = False,
    types: Iterable[str] | None = None,
    turn_id: str | None = None,
    agent_name: str | None = None,
    since: str | None = None,
    before: int | None = None,
) -> list[EventRow]:
    """Events after `after` ascending; with `newest`, the newest `limit` matches, still ascending."""
    rows = read_rows(path, after=after, limit=limit, newest=newest, types=types, turn_id=turn_id,
                     agent_name=agent_name, since=since, before=before)
    return [row_to_event(r) for r in rows]


def read_rows(
    path: Path,
    *,
    after: int = 0,
    limit: int = DEFAULT_PAGE,
    newest: bool = False,
    types: Iterable[str] | None = None,
    turn_id: str | None = None,
    agent_name: str | None = None,
    since: str | None = None,
    before: int | None = None,
    conn: sqlite3.Connection | None = None,
) -> list[tuple[Any, ...]]:
    """Like read_events, but raw tuples (`content` still the stored JSON text), ascending.

    The SSE raw stream splices the stored text into frames instead of decoding and re-encoding it, and
    passes its own open `conn`: opening a connection costs ~1 ms, a query on an open one ~25 µs. An open
    `conn` already proves the store exists, so the live tail's per-event read skips the stat.
    """
    if conn is None and not path.exists():
        return []
    where = ["sequence > ?"]
    params: list[Any] = [after]
    if before is not None:
        where.append("sequence < ?")
        params.append(before)
    clauses, values = RowFilter.of(types, turn_id, agent_name, since).where()
    where += clauses
    params += values
    order = "DESC" if newest else "ASC"
    sql = f"SELECT {_COLUMNS} FROM events WHERE {' AND '.join(where)} ORDER BY sequence {order} LIMIT ?"
    params.append(max(1, min(limit, MAX_PAGE * 10)))
    rows = conn.execute(sql, params).fetchall() if conn is not None else query(path, sql, params)
    if newest:
        rows.reverse()
    return rows


def iter_events(path: Path, *, after: int = 0, page: int = MAX_PAGE,
                types: Iterable[str] | None = None) -> Iterator[EventRow]:
    """Every event after `after` (of `types`, when given), one page in memory at a time."""
    cursor = after
    while True:
        batch = read_events(path, after=cursor, limit=page, types=types)
        if not batch:
            return
        yield from batch
        cursor = batch[-1]["sequence"]


def max_sequence(path: Path) -> int:
    if not path.exists():
        return 0
    return int(query(path, "SELECT COALESCE(MAX(sequence), 0) FROM events")[0][0])


class HookRunView(TypedDict):
    """A stored hook run as the API and `hooks runs` show it: `duration_ns` as `duration_ms`, `required` a bool."""

    id: str
    hook_name: str
    event: str
    source: str
    mode: str
    outcome: str
    dispatch_depth: int
    patch_applied: str | None
    error: str | None
    required: bool
    recorded_at: str
    duration_ms: float


def read_hook_runs(path: Path, *, event: str | None = None, outcome: str | None = None,
                   last: int | None = None) -> list[HookRunView]:
    if not path.exists():
        return []
    where, params = ["1=1"], list[object]()
    if event:
        where.append("event = ?")
        params.append(event)
    if outcome:
        where.append("outcome = ?")
        params.append(outcome)
    sql = (f"SELECT id, hook_name, event, source, mode, duration_ns, outcome, dispatch_depth, patch_applied,"
           f" error, required, recorded_at FROM hook_runs WHERE {' AND '.join(where)} ORDER BY recorded_at DESC, id"
           f" LIMIT ?")
    params.append(last or 1000)
    rows = query(path, sql, params)
    return [{"id": id_, "hook_name": hook_name, "event": event_, "source": source, "mode": mode, "outcome": outcome_,
             "dispatch_depth": depth, "patch_applied": patch, "error": error, "required": bool(required),
             "recorded_at": recorded_at, "duration_ms": round(duration_ns / 1e6, 3)}
            for (id_, hook_name, event_, source, mode, duration_ns, outcome_, depth, patch, error, required,
                 recorded_at) in reversed(rows)]

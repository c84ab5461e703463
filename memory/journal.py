"""The write path's journal, and the records beside it: `$COMPOZY_HOME/memory/journal.db` (SQLite, synchronous
FULL). A change is a `pending` row, committed before its file changes; the file lands; the row becomes `applied`.
A crash between the two leaves a pending row that boot finishes (memory/store.py `recover`): the row holds the
whole new text, so finishing it twice writes the same file once.

Beside it: the workspace roots memory has seen (what `reindex` walks), recalls (which session was shown which
entry: what a dream weighs), dreams and their decisions (memory/dreams.py)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from memory.paths import ensure_dir, journal_path

SCHEMA = """
CREATE TABLE IF NOT EXISTS journal (
    id INTEGER PRIMARY KEY AUTOINCREMENT, at TEXT NOT NULL, actor TEXT NOT NULL, session_id TEXT NOT NULL DEFAULT '',
    dream_id TEXT NOT NULL DEFAULT '', op TEXT NOT NULL CHECK (op IN ('write', 'delete')), path TEXT NOT NULL,
    scope TEXT NOT NULL, type TEXT NOT NULL, slug TEXT NOT NULL, workspace TEXT NOT NULL DEFAULT '',
    agent TEXT NOT NULL DEFAULT '', content TEXT, before TEXT,
    state TEXT NOT NULL CHECK (state IN ('pending', 'applied')), applied_at TEXT);
CREATE INDEX IF NOT EXISTS journal_pending ON journal (state) WHERE state = 'pending';
CREATE TABLE IF NOT EXISTS roots (path TEXT PRIMARY KEY, seen_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS recalls (
    id INTEGER PRIMARY KEY AUTOINCREMENT, at TEXT NOT NULL, session_id TEXT NOT NULL, path TEXT NOT NULL,
    via TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS recalls_path ON recalls (path);
CREATE TABLE IF NOT EXISTS dreams (
    id TEXT PRIMARY KEY, workspace TEXT NOT NULL, session_id TEXT NOT NULL DEFAULT '', state TEXT NOT NULL,
    started_at TEXT NOT NULL, finished_at TEXT, detail TEXT NOT NULL DEFAULT '', candidates INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS decisions (
    id TEXT PRIMARY KEY, dream_id TEXT NOT NULL, at TEXT NOT NULL, action TEXT NOT NULL, reason TEXT NOT NULL,
    source_sessions TEXT NOT NULL, changes TEXT NOT NULL, reverted_at TEXT);
"""


# The journals this process has given their schema and mode, by (path, inode): a connect runs the schema script
# and the chmod once, not each time. A file removed and made again (a new inode, or an empty file) is prepared anew.
_prepared: set[tuple[str, int]] = set()


def _prepare(conn: sqlite3.Connection, path: Path) -> None:
    st = path.stat()
    if st.st_size > 0 and (str(path), st.st_ino) in _prepared:
        return
    conn.executescript(SCHEMA)
    path.chmod(0o600)
    _prepared.add((str(path), path.stat().st_ino))


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@contextmanager
def connect(home: Path | None = None) -> Iterator[sqlite3.Connection]:
    """One short connection a use (callers run in worker threads, never on the loop); committed on success."""
    path = journal_path(home)
    ensure_dir(path.parent)
    conn = sqlite3.connect(path, timeout=10.0, isolation_level=None)
    conn.row_factory = sqlite3.Row
    try:
        conn.execute("PRAGMA synchronous=FULL")
        _prepare(conn, path)
        conn.execute("BEGIN IMMEDIATE")
        yield conn
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    finally:
        conn.close()


@dataclass(frozen=True)
class Change:
    """One decided change: the whole new text (None: the file is removed) and what it replaces."""

    op: str
    path: str
    scope: str
    type: str
    slug: str
    workspace: str
    agent: str
    content: str | None
    before: str | None
    actor: str
    session_id: str = ""
    dream_id: str = ""


def begin(change: Change) -> int:
    with connect() as conn:
        cur = conn.execute(
            "INSERT INTO journal (at, actor, session_id, dream_id, op, path, scope, type, slug, workspace, agent, "
            "content, before, state) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending')",
            (now_iso(), change.actor, change.session_id, change.dream_id, change.op, change.path, change.scope,
             change.type, change.slug, change.workspace, change.agent, change.content, change.before))
        if change.workspace:
            conn.execute("INSERT OR IGNORE INTO roots (path, seen_at) VALUES (?, ?)", (change.workspace, now_iso()))
        return int(cur.lastrowid or 0)


def applied(journal_id: int) -> None:
    with connect() as conn:
        conn.execute("UPDATE journal SET state = 'applied', applied_at = ? WHERE id = ?", (now_iso(), journal_id))


def pending() -> list[tuple[int, Change]]:
    with connect() as conn:
        rows = conn.execute("SELECT * FROM journal WHERE state = 'pending' ORDER BY id").fetchall()
    return [(int(r["id"]), _change(r)) for r in rows]


def _change(r: sqlite3.Row) -> Change:
    return Change(op=r["op"], path=r["path"], scope=r["scope"], type=r["type"], slug=r["slug"],
                  workspace=r["workspace"], agent=r["agent"], content=r["content"], before=r["before"],
                  actor=r["actor"], session_id=r["session_id"], dream_id=r["dream_id"])


def last_write() -> dict[str, str] | None:
    with connect() as conn:
        row = conn.execute("SELECT at, actor, session_id, op, scope, type, slug FROM journal "
                           "WHERE state = 'applied' ORDER BY id DESC LIMIT 1").fetchone()
    return dict(row) if row else None


def note_root(workspace: Path) -> None:
    with connect() as conn:
        conn.execute("INSERT OR IGNORE INTO roots (path, seen_at) VALUES (?, ?)", (str(workspace), now_iso()))


def roots() -> list[Path]:
    with connect() as conn:
        return [Path(r["path"]) for r in conn.execute("SELECT path FROM roots ORDER BY path")]


def note_recalls(session_id: str, paths: list[str], via: str) -> None:
    if not session_id or not paths:
        return
    with connect() as conn:
        conn.executemany("INSERT INTO recalls (at, session_id, path, via) VALUES (?, ?, ?, ?)",
                         [(now_iso(), session_id, p, via) for p in paths])


def recalled_by(paths: list[str]) -> dict[str, list[str]]:
    """For each path, the sessions it was recalled in (first recall first)."""
    if not paths:
        return {}
    with connect() as conn:
        marks = ",".join("?" * len(paths))
        rows = conn.execute(f"SELECT path, session_id FROM recalls WHERE path IN ({marks}) ORDER BY id",
                            paths).fetchall()
    seen: dict[str, list[str]] = {}
    for row in rows:
        sessions = seen.setdefault(row["path"], [])
        if row["session_id"] not in sessions:
            sessions.append(row["session_id"])
    return seen

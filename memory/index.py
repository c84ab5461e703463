"""The derived search index: `$COMPOZY_HOME/memory/index.db`, SQLite FTS5 over every scope's entries. Never the
source of truth: `rebuild` makes it anew from the files (into a temporary file renamed over the old one, so a
search never reads half an index), and each change through the write path updates it in place.

Its state for `memory health`: fresh, stale (files it lacks or holds wrongly), rebuilding, or failed with the
cause; kept in this process beside the file."""

from __future__ import annotations

import logging
import os
import re
import sqlite3
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from memory.paths import ensure_dir, index_path

logger = logging.getLogger(__name__)

SCHEMA = """
CREATE VIRTUAL TABLE IF NOT EXISTS entries USING fts5(
    path UNINDEXED, scope UNINDEXED, workspace UNINDEXED, agent UNINDEXED, type UNINDEXED, slug UNINDEXED,
    name, description, body, tokenize = 'unicode61');
CREATE TABLE IF NOT EXISTS files (path TEXT PRIMARY KEY, mtime REAL NOT NULL);
"""


@dataclass(frozen=True)
class Item:
    path: str
    scope: str
    workspace: str
    agent: str
    type: str
    slug: str
    name: str
    description: str
    body: str
    mtime: float


@dataclass(frozen=True)
class Hit:
    path: str
    scope: str
    workspace: str
    agent: str
    type: str
    slug: str
    name: str
    snippet: str


_state = threading.Lock()
_rebuilding = False
_failure: str | None = None


def status() -> tuple[bool, str | None]:
    """(rebuilding now, the last failure's cause)."""
    return _rebuilding, _failure


def mark_failed(cause: str) -> None:
    global _failure
    _failure = cause


# The index files this process has given their schema, by (path, inode): an update runs the schema script once,
# not each time. A rebuild makes a new file (a new inode), prepared anew.
_prepared: set[tuple[str, int]] = set()


def _connect(path: Path, *, fresh: bool = False) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=10.0)
    st = path.stat()
    if fresh or st.st_size == 0 or (str(path), st.st_ino) not in _prepared:
        conn.executescript(SCHEMA)
        if not fresh:
            _prepared.add((str(path), path.stat().st_ino))
    return conn


def _insert(conn: sqlite3.Connection, item: Item) -> None:
    conn.execute("DELETE FROM entries WHERE path = ?", (item.path,))
    conn.execute("INSERT INTO entries VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                 (item.path, item.scope, item.workspace, item.agent, item.type, item.slug, item.name,
                  item.description, item.body))
    conn.execute("INSERT OR REPLACE INTO files (path, mtime) VALUES (?, ?)", (item.path, item.mtime))


def rebuild(items: Iterable[Item]) -> int:
    """The whole index anew from `items`; the old one stays readable until the new one replaces it."""
    global _rebuilding, _failure
    target = index_path()
    ensure_dir(target.parent)
    tmp = target.with_name(f".index.{os.getpid()}.{threading.get_ident()}.tmp")
    with _state:
        _rebuilding = True
    try:
        tmp.unlink(missing_ok=True)
        conn = _connect(tmp, fresh=True)
        count = 0
        try:
            with conn:
                for item in items:
                    _insert(conn, item)
                    count += 1
        finally:
            conn.close()
        tmp.chmod(0o600)
        os.replace(tmp, target)
        _failure = None
        return count
    except (OSError, sqlite3.Error) as exc:
        _failure = f"rebuild failed: {exc}"
        tmp.unlink(missing_ok=True)
        raise
    finally:
        with _state:
            _rebuilding = False


def update(path: str, item: Item | None) -> bool:
    """One file's rows replaced (None: removed). False when there is no index to update (rebuild instead)."""
    target = index_path()
    if not target.exists():
        return False
    conn = _connect(target)
    try:
        with conn:
            if item is None:
                conn.execute("DELETE FROM entries WHERE path = ?", (path,))
                conn.execute("DELETE FROM files WHERE path = ?", (path,))
            else:
                _insert(conn, item)
    finally:
        conn.close()
    return True


def indexed() -> dict[str, float] | None:
    """Path → mtime the index holds; None when there is no index file."""
    target = index_path()
    if not target.exists():
        return None
    conn = sqlite3.connect(f"file:{target}?mode=ro", uri=True, timeout=10.0)
    try:
        return {row[0]: row[1] for row in conn.execute("SELECT path, mtime FROM files")}
    finally:
        conn.close()


def fts_query(text: str) -> str:
    """Free text as an FTS5 query: each word quoted (no operator syntax reaches FTS5), all of them required,
    the last one as a prefix."""
    words = re.findall(r"\w+", text)
    if not words:
        return ""
    quoted = [f'"{w}"' for w in words[:32]]
    quoted[-1] += "*"
    return " ".join(quoted)


def search(text: str, *, allowed: set[str] | None, limit: int = 20) -> list[Hit]:
    """Hits best first; `allowed`: the scope folders the reader may see (None: every one)."""
    query = fts_query(text)
    target = index_path()
    if not query or not target.exists():
        return []
    conn = sqlite3.connect(f"file:{target}?mode=ro", uri=True, timeout=10.0)
    try:
        rows = conn.execute(
            "SELECT path, scope, workspace, agent, type, slug, name, "
            "snippet(entries, -1, '[', ']', '…', 12) FROM entries WHERE entries MATCH ? ORDER BY rank LIMIT ?",
            (query, limit * 5)).fetchall()
    finally:
        conn.close()
    hits = [Hit(*row) for row in rows]
    if allowed is not None:
        hits = [h for h in hits if str(Path(h.path).parent.parent) in allowed]
    return hits[:limit]

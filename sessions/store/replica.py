"""The durable copies of a cluster's sessions in its PostgreSQL database (issue 46): every committed batch's rows
(`compozy_event_copy`, keyed by session and sequence) and `meta.json`'s content (`compozy_meta_copy`).

```
 Recorder (writer/recorder.py) ─ events.db committed ─► Shipper.ship (one thread a process, every session's
   batches in one transaction: the lease rows locked FOR SHARE, then one INSERT … FROM unnest)
     ├─ lease ours ─► inserted ─► published: the live feed, the doorbell, flush's waiters (acknowledged)
     ├─ database unreachable ─► HELD: published from events.db alone; the backlog is sent when it answers
     └─ lease not ours (failed over, taken) ─► FENCED: not one row written
 any other node: pull() ─► its own copy of the folder (meta.json, events.db) brought up to the database's, then
   every reader (events, history, the live tail, evidence) reads that copy as it reads its own sessions
```

The shipper's thread is store/shipper.py; this module is what a session and a reader see of it. Only in a cluster
without a shared sessions folder (`enabled`): the embedded default writes nothing here.

The fence is the lease row locked in the insert's own transaction (FOR SHARE): failover's compare-and-set on that
row waits for the insert to commit, and after it no insert by the fenced run finds the row still naming it. An
expired lease still naming this run is shippable: nobody took it, and whoever does reads the copy after taking it
(that is how a node catches up after an outage before its keeper renewed what expired meanwhile).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sessions.store import events as event_store
from sessions.store import folder
from sessions.store.shipper import Lease, Outcome, Row, Shipper, ShipperReport

logger = logging.getLogger(__name__)

MARKER = "replica.json"  # beside meta.json: the copy's version that meta.json holds
PULL_PAGE = 2000  # rows a query when a copy catches up


def enabled() -> bool:
    """A cluster on PostgreSQL whose nodes keep their sessions on their own disks."""
    url = os.environ.get("DATABASE_URL", "")
    return url.startswith(("postgres://", "postgresql://")) and not os.environ.get("COMPOZY_SESSIONS_DIR")


_shipper: Shipper | None = None
_shipper_lock = threading.Lock()
# Sessions whose events.db this process writes: never overwritten by a pull.
_writing: set[str] = set()
# The newest sequence published (in the database, or held) per session written here: the live feed reads no
# further, so a viewer never sees a row the database may not get.
_visible: dict[str, int] = {}


def shipper() -> Shipper:
    global _shipper
    with _shipper_lock:
        if _shipper is None:
            _shipper = Shipper()
        return _shipper


def report() -> ShipperReport | None:
    return _shipper.report() if _shipper is not None else None


@dataclass
class Link:
    """A recorder's way to the database: its session, its lease (the generation its rows are fenced by)."""

    session_id: str
    lease: Lease
    path: Path

    def __post_init__(self) -> None:
        _writing.add(self.session_id)
        _visible.pop(self.session_id, None)

    def ship(self, rows: list[Row], done: Callable[[Outcome], None]) -> None:
        shipper().ship(self.session_id, self.lease, self.path, rows, done)

    def published(self, rows: list[Row]) -> None:
        if rows:
            _visible[self.session_id] = int(rows[-1][0])

    def settle(self) -> bool:
        return shipper().settle(self.session_id)

    def close(self) -> None:
        _writing.discard(self.session_id)
        _visible.pop(self.session_id, None)


def visible_upto(session_id: str) -> int | None:
    """How far a reader in this process may read the session's events.db (None: all of it)."""
    if session_id not in _writing:
        return None
    return _visible.get(session_id, 0)


# ---- the other nodes' copies -----------------------------------------------------------------

_pull_locks: dict[str, threading.Lock] = {}
_pull_locks_guard = threading.Lock()


def _pull_lock(session_id: str) -> threading.Lock:
    with _pull_locks_guard:
        return _pull_locks.setdefault(session_id, threading.Lock())


def save_meta_copy(session_id: str, meta: Mapping[str, object]) -> int:
    """meta.json's content into the database (every catalog mirror); returns its version, which this node's folder
    keeps beside meta.json (`MARKER`) so a pull never puts an older copy over it."""
    from django.db import connection

    text = json.dumps(meta, separators=(",", ":"), ensure_ascii=False)
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO compozy_meta_copy (session_id, version, meta) VALUES (%s, 1, %s)"
                       " ON CONFLICT (session_id) DO UPDATE SET version = compozy_meta_copy.version + 1,"
                       " meta = EXCLUDED.meta RETURNING version", [session_id, text])
        version = int(cursor.fetchone()[0])
    _write_marker(folder.session_dir(session_id), version)
    return version


def meta_copy(session_id: str) -> tuple[int, dict[str, Any]] | None:
    from sessions.models import MetaCopy

    found = MetaCopy.objects.filter(session_id=session_id).values_list("version", "meta").first()
    if found is None:
        return None
    return int(found[0]), json.loads(found[1])


def _marker_version(directory: Path) -> int:
    try:
        return int(json.loads((directory / MARKER).read_text())["version"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def _write_marker(directory: Path, version: int) -> None:
    if directory.is_dir():
        folder.write_json_atomic(directory / MARKER, {"version": version})


def pull(session_id: str) -> bool:
    """This node's copy of the session's folder brought up to the database's: meta.json when the database holds a
    newer one, events.db with the rows it lacks (rebuilt when it diverged: the rows of a run that was fenced). False
    when the database holds no copy. Never for a session this process writes."""
    if not enabled() or session_id in _writing:
        return False
    copy = meta_copy(session_id)
    if copy is None:
        return False
    version, meta = copy
    directory = folder.session_dir(session_id)
    with _pull_lock(session_id):
        if session_id in _writing:
            return False
        if not (directory / "meta.json").exists() or _marker_version(directory) < version:
            directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            folder.write_json_atomic(directory / "meta.json", meta)
            _write_marker(directory, version)
        _pull_events(session_id, folder.events_path(session_id))
    return True


def pull_events(session_id: str) -> None:
    """The live tail's read on a node that does not write the session: the rows the database has and its copy
    lacks, first."""
    if not enabled() or session_id in _writing:
        return
    path = folder.events_path(session_id)
    if not path.parent.is_dir():
        return
    from django.db import DatabaseError

    try:
        with _pull_lock(session_id):
            if session_id not in _writing:
                _pull_events(session_id, path)
    except DatabaseError as exc:  # the tail goes on from this node's copy; the next read tries again
        logger.warning("replica: %s not brought up to the database (%s)", session_id, exc)
        drop_connection()


def _pull_events(session_id: str, path: Path) -> None:
    from sessions.models import EventCopy

    if not path.exists():
        event_store.init_store(path)
    conn = event_store.connect(path)
    try:
        local = int(conn.execute("SELECT COALESCE(MAX(sequence), 0) FROM events").fetchone()[0])
        copies = EventCopy.objects.filter(session_id=session_id)
        remote = int(copies.order_by("-sequence").values_list("sequence", flat=True).first() or 0)
        if local and remote:
            common = min(local, remote)
            mine = conn.execute("SELECT id FROM events WHERE sequence = ?", (common,)).fetchone()
            theirs = copies.filter(sequence=common).values_list("event_id", flat=True).first()
            if mine is None or mine[0] != theirs:
                logger.warning("replica: this node's copy of %s diverged from the database at %d; rebuilding it",
                               session_id, common)
                conn.execute("DELETE FROM events")
                local = 0
        while remote > local:
            page = list(copies.filter(sequence__gt=local).order_by("sequence").values_list(
                "sequence", "event_id", "turn_id", "type", "agent_name", "content", "timestamp", "archived")[
                :PULL_PAGE])
            if not page:
                break
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.executemany("INSERT OR IGNORE INTO events(sequence, id, turn_id, type, agent_name, content,"
                                 " timestamp, archived) VALUES (?,?,?,?,?,?,?,?)",
                                 [(s, i, t, ty, a, c, ts, int(ar)) for s, i, t, ty, a, c, ts, ar in page])
                conn.execute("COMMIT")
            except sqlite3.Error:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                raise
            local = int(page[-1][0])
    finally:
        conn.close()


def drop_connection() -> None:
    """This thread's catalog connection closed after it failed (a worker thread's, which no request cycle closes):
    the next read opens a new one instead of failing on the dead one for ever."""
    from django.db import connection

    with contextlib.suppress(Exception):
        connection.close()


def forget(session_id: str) -> None:
    """A removed session's copies leave the database too."""
    if not enabled():
        return
    from sessions.models import EventCopy, MetaCopy

    EventCopy.objects.filter(session_id=session_id).delete()
    MetaCopy.objects.filter(session_id=session_id).delete()

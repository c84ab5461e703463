"""The replica's shipper (store/replica.py has the picture): the one thread of a process that writes the durable
event copies of a cluster's sessions into PostgreSQL, every session's batches of a round in one transaction that
locks their lease rows FOR SHARE first, so a run that no longer holds a session's lease writes not one of its rows.
A database that does not answer leaves the rows HELD in events.db; they are read back and sent, in order, when it
answers again.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from sessions.store import events as event_store

logger = logging.getLogger(__name__)

BACKLOG_PAGE = 5000  # held rows sent a transaction after an outage
DRAIN_MAX = 500  # shipments one transaction takes
CATCH_UP_SECONDS = 1.0  # how often a held backlog is tried again
# A session holds at most this many events in its events.db alone (a database outage) before it stops with a
# storage failure: the promise that what was acknowledged reaches the database must stay a bounded one.
HELD_LIMIT = int(os.environ.get("COMPOZY_REPLICA_HELD_LIMIT") or 200_000)
SETTLE_SECONDS = 10.0  # how long a closing session waits for its backlog to reach the database

_LEASES = "compozy_sessions_sessionlease"
_INSERT = ("INSERT INTO compozy_event_copy (session_id, sequence, event_id, turn_id, type, agent_name, content,"
           " timestamp, archived) SELECT * FROM unnest(%s::text[], %s::bigint[], %s::text[], %s::text[], %s::text[],"
           " %s::text[], %s::text[], %s::text[], %s::bool[]) ON CONFLICT DO NOTHING")

Row = tuple[Any, ...]  # events.db's read form: sequence, id, turn_id, type, agent_name, content, timestamp, archived


class Outcome(StrEnum):
    SHIPPED = "shipped"  # in the database: acknowledged
    HELD = "held"  # the database did not answer: in events.db alone, sent when it does
    FENCED = "fenced"  # the lease is not this run's: refused, not one row written
    OVERFLOW = "overflow"  # held past HELD_LIMIT: the session stops


@dataclass(frozen=True)
class Lease:
    node_id: str
    run: str


@dataclass
class _Shipment:
    session_id: str
    lease: Lease
    path: Path
    rows: list[Row]
    done: Callable[[Outcome], None] | None


@dataclass
class _Held:
    lease: Lease
    path: Path
    count: int = 0
    settled: threading.Event = field(default_factory=threading.Event)


@dataclass
class ShipperReport:
    held_sessions: int
    held_events: int
    connected: bool
    shipped_batches: int
    fenced_batches: int


class Shipper:
    """The one thread of this process that writes the durable event copies (see the module's picture)."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[_Shipment] = queue.SimpleQueue()
        self._shipped: dict[str, int] = {}  # the highest sequence known to be in the database, per session
        self._held: dict[str, _Held] = {}
        self._lock = threading.Lock()  # _held, read by `settle` and `report` on other threads
        self._conn: Any = None  # psycopg.Connection, this thread's own
        self._down_since: float | None = None
        self.shipped_batches = 0
        self.fenced_batches = 0
        self._thread = threading.Thread(target=self._run, name="compozy-replica", daemon=True)
        self._thread.start()

    def ship(self, session_id: str, lease: Lease, path: Path, rows: list[Row],
             done: Callable[[Outcome], None]) -> None:
        self._queue.put(_Shipment(session_id, lease, path, rows, done))

    def settle(self, session_id: str, timeout: float = SETTLE_SECONDS) -> bool:
        """Wait (a worker thread) until the session holds nothing back; False when it still does."""
        with self._lock:
            held = self._held.get(session_id)
        return held is None or held.settled.wait(timeout)

    def report(self) -> ShipperReport:
        with self._lock:
            held = list(self._held.values())
        return ShipperReport(len(held), sum(h.count for h in held), self._down_since is None,
                             self.shipped_batches, self.fenced_batches)

    # ---- the thread ------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            try:
                first: _Shipment | None = self._queue.get(timeout=CATCH_UP_SECONDS if self._held else None)
            except queue.Empty:
                first = None
            batch = [first] if first is not None else []
            while len(batch) < DRAIN_MAX:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            try:
                self._round(batch)
            except BaseException:  # never leave a batch unanswered: its session's flush would wait for ever
                logger.exception("replica: a round failed")
                for shipment in batch:
                    self._answer(shipment, Outcome.HELD)

    def _connect(self) -> Any:
        if self._conn is not None and not self._conn.closed:
            return self._conn
        import psycopg
        from django.db import connections

        params = dict(connections["default"].get_connection_params())
        params.pop("cursor_factory", None)
        params.pop("context", None)
        params.setdefault("connect_timeout", 3)
        # A server that stopped answering (a cut network) fails the round in seconds, never blocks it for good.
        options = f"{params.get('options') or ''} -c statement_timeout=10000".strip()
        # tcp_user_timeout: data the server never acknowledged (a partition) fails the round in 10 s, not the
        # kernel's quarter of an hour of retransmissions.
        params.update(keepalives=1, keepalives_idle=5, keepalives_interval=2, keepalives_count=2,
                      tcp_user_timeout=10000, options=options)
        self._conn = psycopg.connect(**params, autocommit=False)
        return self._conn

    def _round(self, batch: list[_Shipment]) -> None:
        by_session: dict[str, list[_Shipment]] = {}
        for shipment in batch:
            by_session.setdefault(shipment.session_id, []).append(shipment)
        with self._lock:
            held = dict(self._held)
        ids = sorted({*by_session, *held})
        if not ids:
            return
        try:
            verdicts, sent = self._transaction(ids, by_session, held)
        except Exception as exc:  # noqa: BLE001 - psycopg's errors and a lost socket alike: held, said once
            self._unreachable(exc, ids, by_session)
            return
        if self._down_since is not None:
            logger.warning("replica: the database answers again after %.1fs", time.monotonic() - self._down_since)
            self._down_since = None
        for session_id in ids:
            verdict = verdicts.get(session_id, Outcome.HELD)
            shipments = by_session.get(session_id, [])
            if verdict is Outcome.SHIPPED:
                self._sent(session_id, sent[session_id], shipments, held)
            elif verdict is Outcome.FENCED:
                self._fenced(session_id, shipments)
            else:
                self._hold(session_id, shipments)

    def _unreachable(self, exc: Exception, ids: list[str], by_session: dict[str, list[_Shipment]]) -> None:
        if self._down_since is None:
            self._down_since = time.monotonic()
            logger.warning("replica: the database did not answer (%s); events are held in events.db until it does",
                           exc)
        with contextlib.suppress(Exception):
            if self._conn is not None:
                self._conn.close()
        self._conn = None
        for session_id in ids:
            self._shipped.pop(session_id, None)  # a commit whose answer was lost: read the maximum again
        for session_id, shipments in by_session.items():
            self._hold(session_id, shipments)

    def _sent(self, session_id: str, top: int, shipments: list[_Shipment], held: dict[str, _Held]) -> None:
        self._shipped[session_id] = top
        if self._local_top(session_id, shipments, held) <= top:
            self._release(session_id)
        elif shipments:  # a backlog page went, not yet these rows: they follow in the next rounds
            self._keep_held(session_id, shipments[-1].lease, shipments[-1].path)
            for shipment in shipments:
                self._answer(shipment, Outcome.HELD)
            return
        self.shipped_batches += len(shipments)
        for shipment in shipments:
            self._answer(shipment, Outcome.SHIPPED)

    def _fenced(self, session_id: str, shipments: list[_Shipment]) -> None:
        self._release(session_id)
        self._shipped.pop(session_id, None)
        if shipments:
            self.fenced_batches += len(shipments)
            logger.error("replica: %s is no longer this node's (failed over or taken): %d batch(es) refused by the "
                         "database", session_id, len(shipments))
        for shipment in shipments:
            self._answer(shipment, Outcome.FENCED)

    def _local_top(self, session_id: str, shipments: list[_Shipment], held: dict[str, _Held]) -> int:
        if shipments and shipments[-1].rows:
            return int(shipments[-1].rows[-1][0])
        path = shipments[-1].path if shipments else held[session_id].path
        try:
            return event_store.max_sequence(path)
        except Exception:  # noqa: BLE001 - an unreadable store keeps its backlog held; the writer says why
            return 1 << 62

    def _transaction(self, ids: list[str], by_session: dict[str, list[_Shipment]],
                     held: dict[str, _Held]) -> tuple[dict[str, Outcome], dict[str, int]]:
        conn = self._connect()
        verdicts: dict[str, Outcome] = {}
        sent: dict[str, int] = {}
        columns: list[list[Any]] = [[] for _ in range(9)]
        with conn.transaction():
            cur = conn.cursor()
            cur.execute(f"SELECT session_id, node_id, run FROM {_LEASES} WHERE session_id = ANY(%s) FOR SHARE",
                        [ids])
            holders = {sid: Lease(node, run) for sid, node, run in cur.fetchall()}
            unknown = [sid for sid in ids if sid not in self._shipped]
            if unknown:
                cur.execute("SELECT session_id, MAX(sequence) FROM compozy_event_copy WHERE session_id = ANY(%s)"
                            " GROUP BY session_id", [unknown])
                found = dict(cur.fetchall())
                for sid in unknown:
                    self._shipped[sid] = int(found.get(sid) or 0)
            for sid in ids:
                shipments = by_session.get(sid, [])
                lease = shipments[-1].lease if shipments else held[sid].lease
                if holders.get(sid) != lease:
                    verdicts[sid] = Outcome.FENCED
                    continue
                path = shipments[-1].path if shipments else held[sid].path
                top = self._shipped[sid]
                rows = self._backlog(sid, path, top, shipments)
                for row in rows:
                    sequence = int(row[0])
                    if sequence <= top:
                        continue
                    if sequence != top + 1:
                        break  # a gap (a backlog page ends): the rest waits for the next round
                    top = sequence
                    for i, value in enumerate((sid, sequence, row[1], row[2], row[3], row[4], row[5], row[6],
                                               bool(row[7]))):
                        columns[i].append(value)
                verdicts[sid] = Outcome.SHIPPED
                sent[sid] = top
            if columns[0]:
                cur.execute(_INSERT, columns)
        return verdicts, sent

    def _backlog(self, session_id: str, path: Path, top: int, shipments: list[_Shipment]) -> list[Row]:
        """The rows to send after `top`: the shipments' own, preceded by what events.db holds that the database
        lacks (an outage's backlog, a repair's rows, a restart's), a page at a time."""
        rows = [row for shipment in shipments for row in shipment.rows]
        if rows and int(rows[0][0]) == top + 1:
            return rows
        if not rows and session_id not in self._held:
            return []
        local = event_store.read_rows(path, after=top, limit=BACKLOG_PAGE)
        if local and rows and int(local[-1][0]) + 1 >= int(rows[0][0]):
            return [*local, *rows]
        return local

    def _hold(self, session_id: str, shipments: list[_Shipment]) -> None:
        added = sum(len(s.rows) for s in shipments)
        with self._lock:
            held = self._held_entry(session_id, shipments[-1].lease, shipments[-1].path) if shipments else \
                self._held.get(session_id)
            if held is not None:
                held.count += added
                held.settled.clear()
        over = held is not None and held.count > HELD_LIMIT
        for shipment in shipments:
            self._answer(shipment, Outcome.OVERFLOW if over else Outcome.HELD)

    def _keep_held(self, session_id: str, lease: Lease, path: Path) -> None:
        with self._lock:
            self._held_entry(session_id, lease, path).settled.clear()

    def _held_entry(self, session_id: str, lease: Lease, path: Path) -> _Held:
        """The session's held entry, made if missing. The caller holds `_lock`."""
        held = self._held.get(session_id)
        if held is None:
            held = self._held[session_id] = _Held(lease, path)
        return held

    def _release(self, session_id: str) -> None:
        with self._lock:
            held = self._held.pop(session_id, None)
        if held is not None:
            held.settled.set()
            logger.info("replica: %s caught up with the database (%d held event(s) sent)", session_id, held.count)

    @staticmethod
    def _answer(shipment: _Shipment, outcome: Outcome) -> None:
        done, shipment.done = shipment.done, None
        if done is not None:
            try:
                done(outcome)
            except Exception:
                logger.exception("replica: the answer to %s's batch failed", shipment.session_id)

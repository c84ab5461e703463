"""Nodes and session ownership leases: several daemons on one catalog, each live session run by exactly one.

A lease is a `SessionLease` row (node id, the node's daemon start, address, expiry). The rules:
1. A node takes the lease before it launches a runtime (create or reactivation), with a compare-and-set: insert
   when there is no row, else move the row from the exact values read (an expired holder, or this node's own dead
   predecessor) to us. Exactly one changed row means ours; two nodes racing for one session cannot both win.
2. The owner's ticker renews its leases every third of `[cluster] lease_ttl`; the lease is deleted at stop.
3. "Is it live?" reads the lease: a session this process runs is live, so is one whose unexpired lease another
   node holds. A lease held under this node's id by an earlier daemon start is dead at once (one daemon per
   home): a restart never waits out its own leases.
4. When a lease expires, a survivor claims it and applies the stale-state rules to that session
   (docs/reference/sessions.md §13), so a dead node's sessions end `stopped`, never stuck `active`
   (`sessions/repair/failover.py`: it builds on the repair rules, which read the leases here). The claim turns the
   row into a fence (compare-and-set, `run` =
   `fenced:<the dead run>`, no address) instead of deleting it: any node may take a fenced lease (a reactivation),
   but the run it fenced never gets it back. A node that was only cut off (a stalled process, a lost database
   connection) learns at its next renewal that it was fenced and stops its agent without writing anything more,
   and until a renewal confirms its leases (`lease_confirmed`) its sessions' commits wait. Fences are deleted
   after `FENCE_KEEP`.

5. Every lease time is the database's clock (`db_now`: PostgreSQL's `now()`), never a node's: a node 60 s fast or
   slow takes, renews and judges leases exactly as the others do.
6. A node fails no other node's session over until it has itself been connected to the catalog for a full TTL
   (`Connection`): after an outage every owner first gets a TTL to renew what expired meanwhile.

The embedded default runs the same code on SQLite with one node; nothing here needs PostgreSQL or Redis.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TypedDict

from django.db import IntegrityError, transaction
from django.db.models import Q, QuerySet

from compozy_base.auth import cluster_token_state
from compozy_base.config.loader import get_config
from compozy_base.daemon_record import daemon_running
from compozy_base.home import sessions_dir
from sessions.catalog.claims import owner_id
from sessions.models import Node, Session, SessionLease
from sessions.store import folder

logger = logging.getLogger(__name__)

# A node counts as up while it heartbeated within this many lease TTLs (status and doctor only).
NODE_STALE_TTLS = 2.0
FENCED = "fenced:"  # a failed-over lease's run: `fenced:<the run that held it>`
FENCE_KEEP = timedelta(days=1)  # how long a fence outlives its failover (a node cut off longer may write again)
# Commits wait once the last renewal that confirmed this node's leases is older than this share of the TTL: two
# renewals (every third of it) were missed, and a survivor may fail the sessions over at the full TTL.
CONFIRMED_SHARE = 2 / 3


@dataclass(frozen=True)
class Identity:
    node_id: str
    run: str  # the daemon start (daemon.json `started_at`)
    address: str
    lease_ttl: float


_identity: Identity | None = None


def node_id() -> str:
    """`COMPOZY_NODE_ID`, else `[cluster] node_id`, else `hostname:COMPOZY_HOME` (one daemon per home)."""
    if _identity is not None:
        return _identity.node_id

    return os.environ.get("COMPOZY_NODE_ID") or get_config().cluster.node_id or owner_id()


def set_identity(identity: Identity | None) -> None:
    global _identity, _confirmed_at
    _identity = identity
    # A daemon start holds no lease yet, so none is unconfirmed: counted from the import instead, a boot slower
    # than two thirds of the TTL held its first sessions' commits until the first renewal.
    _confirmed_at = time.monotonic()
    _unconfirmed.clear()


def db_now() -> datetime:
    """The database's clock: PostgreSQL's `now()` in a cluster. SQLite sits on this one machine, whose real clock
    it is (never the skewed test clock of `folder.utcnow`)."""
    from django.db import connection

    if connection.vendor != "postgresql":
        return datetime.now(UTC)
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        value: datetime = cursor.fetchone()[0]
    return value


@dataclass
class Connection:
    """Since when this node has been connected to the catalog without a failed renewal (monotonic seconds), so that
    failover waits until it has been connected for a full TTL after an outage (rule 6). The clock is a parameter."""

    since: float | None = None

    def connected(self, at: float) -> None:
        if self.since is None:
            self.since = at

    def lost(self) -> None:
        self.since = None

    def may_fail_over(self, ttl: float, at: float) -> bool:
        return self.since is not None and at - self.since >= ttl


connection_state = Connection()


def may_judge_leases() -> bool:
    """Whether this process may take an expired lease for a dead owner's (failover, a read's stale repair): outside
    a cluster's daemon always (embedded, the catalog is this machine's file: there is no outage to come back from);
    in one, once connected for a full TTL (rule 6)."""
    me = _identity
    return me is None or not clustered() or connection_state.may_fail_over(me.lease_ttl, time.monotonic())


def identity() -> Identity | None:
    """This daemon's identity; None outside a daemon (manage.py, a test process)."""
    return _identity


def clustered() -> bool:
    """Several nodes may share this catalog: a database server, or an explicit node id."""
    return bool(os.environ.get("DATABASE_URL") or os.environ.get("COMPOZY_NODE_ID"))


# ---- nodes -----------------------------------------------------------------------------------

def heartbeat_node(me: Identity, now: datetime | None = None) -> None:
    now = now or db_now()
    fields = {"address": me.address, "run": me.run, "pid": os.getpid(), "last_seen": now}
    if not Node.objects.filter(id=me.node_id).update(**fields):
        Node.objects.update_or_create(id=me.node_id, defaults={**fields, "started_at": now})


def register_node(me: Identity) -> None:
    """At daemon start: the node row with a fresh `started_at`."""
    now = db_now()
    Node.objects.update_or_create(id=me.node_id, defaults={"address": me.address, "run": me.run,
                                                           "pid": os.getpid(), "started_at": now,
                                                           "last_seen": now})


class NodeView(TypedDict):
    id: str
    address: str
    pid: int | None
    this_node: bool
    status: str  # up or down
    started_at: str | None
    last_seen: str | None
    leases: int


class LeaseView(TypedDict):
    session_id: str
    node_id: str
    address: str
    acquired_at: str | None
    expires_at: str | None
    expired: bool


class HolderView(TypedDict):
    node_id: str
    address: str
    expires_at: str | None


class ServiceHealth(TypedDict, total=False):
    """A shared service's health (the catalog database, Redis), as `compozy status` and doctor show it."""

    status: str  # ok, error or not_used
    latency_ms: float
    error: str
    engine: str  # the database's
    name: str
    host: str
    port: int  # Redis's
    db: str


class Services(TypedDict):
    database: ServiceHealth
    redis: ServiceHealth


class ClusterStatus(TypedDict):
    """The `cluster` block of `compozy status`."""

    node_id: str
    address: str
    clustered: bool
    cluster_token: dict[str, str]
    lease_ttl: float | None
    sessions_dir: str
    nodes: list[NodeView]
    leases: list[LeaseView]
    lease_count: int
    services: Services


def nodes(now: datetime | None = None) -> list[NodeView]:
    """Every node the catalog knows, with its leases and whether it is up (heartbeated recently)."""
    now = now or db_now()
    me = _identity
    counts: dict[str, int] = {}
    for holder in _held().filter(expires_at__gte=now).values_list("node_id", flat=True):
        counts[holder] = counts.get(holder, 0) + 1
    out: list[NodeView] = []
    for node in Node.objects.order_by("id"):
        this = me is not None and node.id == me.node_id
        up = this or node_up(node, now)
        out.append({"id": node.id, "address": node.address, "pid": node.pid, "this_node": this,
                    "status": "up" if up else "down", "started_at": folder.isoformat(node.started_at),
                    "last_seen": folder.isoformat(node.last_seen), "leases": counts.get(node.id, 0)})
    return out


def leases(limit: int = 100) -> list[LeaseView]:
    now = db_now()
    return [{"session_id": row.session_id, "node_id": row.node_id, "address": row.address,
             "acquired_at": folder.isoformat(row.acquired_at), "expires_at": folder.isoformat(row.expires_at),
             "expired": row.expires_at < now}
            for row in _held().order_by("expires_at")[:limit]]


# ---- leases ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Holder:
    node_id: str
    address: str
    expires_at: datetime
    fenced: bool = False  # not a holder: failover ended this run's lease (the run asking was cut off)

    def public(self) -> HolderView:
        return {"node_id": self.node_id, "address": self.address, "expires_at": folder.isoformat(self.expires_at)}


def _held() -> QuerySet[SessionLease]:
    """Lease rows that stand for a holder: every row but the fences failover left."""
    return SessionLease.objects.exclude(run__startswith=FENCED)


def _fences(row: SessionLease, me: Identity | None) -> bool:
    """The row is the fence failover left on `me`'s own lease."""
    return me is not None and row.node_id == me.node_id and row.run == FENCED + me.run


def _dead(row: SessionLease, now: datetime, me: Identity | None) -> bool:
    if row.run.startswith(FENCED):
        return not _fences(row, me)  # free for any taker, never for the run it fenced
    if row.expires_at < now:
        return True
    # Our own node id under another daemon start: our predecessor, which no longer runs anything.
    return me is not None and row.node_id == me.node_id and row.run != me.run


def take(session_id: str, me: Identity | None = None, now: datetime | None = None) -> Holder | None:
    """Take the lease of `session_id` for this node. None: taken (ours now, or already ours); else the live holder
    that keeps it. The session's catalog row must exist."""
    me = me or _identity
    if me is None:
        return None  # not a daemon (manage.py): it runs no agents
    now = now or db_now()
    expires = now + timedelta(seconds=me.lease_ttl)
    fields = {"node_id": me.node_id, "run": me.run, "address": me.address, "acquired_at": now,
              "expires_at": expires}
    row = SessionLease.objects.filter(session_id=session_id).first()
    if row is None:
        try:
            with transaction.atomic():
                SessionLease.objects.create(session_id=session_id, **fields)
            _mark_taken(session_id)
            return None
        except IntegrityError:  # another node inserted first: read what it wrote
            row = SessionLease.objects.filter(session_id=session_id).first()
            if row is None:
                return take(session_id, me, now)
    if row.node_id == me.node_id and row.run == me.run:
        SessionLease.objects.filter(session_id=session_id, node_id=me.node_id, run=me.run).update(
            expires_at=expires)
        _mark_taken(session_id)
        return None
    if _fences(row, me):
        return Holder(row.node_id, "", row.expires_at, fenced=True)
    if not _dead(row, now, me):
        return Holder(row.node_id, row.address, row.expires_at)
    # Compare-and-set from the exact values read: of two nodes that both saw the lease dead, one moves it.
    changed = SessionLease.objects.filter(session_id=session_id, node_id=row.node_id, run=row.run,
                                          expires_at=row.expires_at).update(**fields)
    if changed == 1:
        _mark_taken(session_id)
        return None
    row = SessionLease.objects.filter(session_id=session_id).first()
    if row is None:
        return take(session_id, me, now)
    if (row.node_id, row.run) == (me.node_id, me.run):
        _mark_taken(session_id)
        return None
    return Holder(row.node_id, row.address, row.expires_at)


def release(session_id: str, me: Identity | None = None) -> None:
    me = me or _identity
    if me is None:
        return
    SessionLease.objects.filter(session_id=session_id, node_id=me.node_id, run=me.run).delete()


def renew(session_ids: list[str], me: Identity | None = None, now: datetime | None = None) -> set[str]:
    """Move the expiry of our leases forward; returns the ids whose lease is no longer ours. Once it answered,
    the leases it kept are confirmed from when it began (`lease_confirmed`)."""
    global _confirmed_at
    me = me or _identity
    if me is None:
        return set()
    began = time.monotonic()
    if not session_ids:
        _confirmed_at = began
        return set()
    now = now or db_now()
    ours = SessionLease.objects.filter(session_id__in=session_ids, node_id=me.node_id, run=me.run)
    ours.update(expires_at=now + timedelta(seconds=me.lease_ttl))
    lost = set(session_ids) - set(ours.values_list("session_id", flat=True))
    _mark_lost(lost, began)  # before the confirmation: a lost session's writer never sees it confirmed
    _confirmed_at = began
    return lost


def _mark_taken(session_id: str) -> None:
    """A take of the session's lease by this run completed: it is ours, whatever a renewal read before."""
    with _verdicts:
        _unconfirmed.discard(session_id)
        _taken_at[session_id] = time.monotonic()


def _mark_lost(lost: set[str], began: float) -> None:
    """A renewal that began at `began` found these no longer ours. A take that completed after it began may have
    written its row after the renewal read: that verdict is stale. (A create's take racing the renewal once left
    its brand-new session unconfirmed for good, and every commit of it waited.)"""
    with _verdicts:
        for session_id in lost:
            if _taken_at.get(session_id, float("-inf")) < began:
                _unconfirmed.add(session_id)
        for session_id in [sid for sid, at in _taken_at.items() if at < began]:
            del _taken_at[session_id]  # older than this renewal: its read saw the row


_confirmed_at = time.monotonic()  # when the last renewal that answered began
_unconfirmed: set[str] = set()  # sessions a renewal found no longer ours, until this run takes them again
_taken_at: dict[str, float] = {}  # when this run last completed a take of each session, until a renewal saw it
_verdicts = threading.Lock()  # takes (a runtime's thread) and renewals (the lease keeper) judge one set


def lease_confirmed(session_id: str) -> bool:
    """Whether this node's lease of the session was confirmed recently enough that no survivor can have failed
    it over: a clustered session's store writer waits while this is false (a node stalled or cut off from the
    catalog, or a lease found lost and not yet taken back or fenced)."""
    me = _identity
    if me is None:
        return True
    return session_id not in _unconfirmed and time.monotonic() - _confirmed_at < me.lease_ttl * CONFIRMED_SHARE


def usable_connection() -> None:
    """Replace this thread's catalog connection if it failed and no longer answers (a server database that
    restarted): Django does this at each request's start, but callers outside a request keep the dead one."""
    from django.db import connection

    if connection.connection is not None and connection.errors_occurred:
        if connection.is_usable():
            connection.errors_occurred = False
        else:
            connection.close()


def holder_elsewhere(session_id: str, now: datetime | None = None) -> Holder | None:
    """The live holder of the session's lease when it is another node (a daemon start) than this process."""
    now = now or db_now()
    row = SessionLease.objects.filter(session_id=session_id).first()
    if row is None or row.run.startswith(FENCED) or _dead(row, now, _identity):
        return None
    if _identity is not None and (row.node_id, row.run) == (_identity.node_id, _identity.run):
        return None
    if _identity is None and row.node_id == node_id() and not daemon_running():
        return None  # manage.py after this home's daemon died: its leases died with it
    return Holder(row.node_id, row.address, row.expires_at)


def held_elsewhere(now: datetime | None = None) -> set[str]:
    """Sessions whose unexpired lease another node (or another daemon start) holds: their live facts are there, so
    only that node judges them (their health, above all)."""
    now = now or db_now()
    live = _held().filter(expires_at__gte=now)
    if _identity is not None:
        # Ours, and our own node id under another start (our dead predecessor's): ours to judge.
        live = live.exclude(node_id=_identity.node_id)
    return set(live.values_list("session_id", flat=True))


def folder_node(session_id: str) -> str:
    """The node whose sessions folder holds the session ("" when the catalog has no row or does not know)."""
    return Session.objects.filter(id=session_id).values_list("folder_node", flat=True).first() or ""


def node_up(node: Node, now: datetime | None = None) -> bool:
    ttl = _identity.lease_ttl if _identity else 15.0
    return ((now or db_now()) - node.last_seen).total_seconds() <= ttl * NODE_STALE_TTLS


def folder_holder(session_id: str, now: datetime | None = None) -> Holder | None:
    """The other node, up and reachable by address, whose sessions folder holds the session: without a shared
    folder a stopped session is read (and continued) there. None: this node, an unknown one, or one that is down."""
    holder = folder_node(session_id)
    if not holder or holder == node_id():
        return None
    node = Node.objects.filter(id=holder).first()
    now = now or db_now()
    if node is None or not node.address or not node_up(node, now):
        return None
    return Holder(node.id, node.address, node.last_seen)


def expired(now: datetime | None = None, limit: int = 200) -> list[SessionLease]:
    """Leases whose holder stopped renewing (or this node's dead predecessor's), oldest first."""
    now = now or db_now()
    dead = Q(expires_at__lt=now)
    if _identity is not None:
        dead |= Q(node_id=_identity.node_id) & ~Q(run=_identity.run)
        # Ours, late (a suspended laptop, a stalled catalog): renewed by our next tick, never repaired by us.
        dead &= ~(Q(node_id=_identity.node_id) & Q(run=_identity.run))
    dead &= ~Q(run__startswith=FENCED)  # failed over already
    return list(SessionLease.objects.filter(dead).order_by("expires_at")[:limit])


def holds(session_id: str, me: Identity | None = None) -> bool:
    """This daemon start still holds the session's lease (expired or not: nobody took it)."""
    me = me or _identity
    if me is None:
        return True
    return SessionLease.objects.filter(session_id=session_id, node_id=me.node_id, run=me.run).exists()


def claim_expired(row: SessionLease, now: datetime | None = None) -> bool:
    """Compare-and-set of a dead lease into its fence: the one survivor that moves it repairs the session."""
    now = now or db_now()
    changed = SessionLease.objects.filter(session_id=row.session_id, node_id=row.node_id, run=row.run,
                                          expires_at=row.expires_at).update(
        run=FENCED + row.run, address="", expires_at=now + FENCE_KEEP)
    return changed >= 1


def drop_old_fences(now: datetime | None = None) -> int:
    deleted, _ = SessionLease.objects.filter(run__startswith=FENCED, expires_at__lt=now or db_now()).delete()
    return deleted


def leased(session_id: str) -> bool:
    """Some node holds (or is taking) the session's lease: a fence is no holder."""
    return _held().filter(session_id=session_id).exists()


# ---- shared services (status, doctor) --------------------------------------------------------

def database_health() -> ServiceHealth:
    """The catalog's engine and whether it answers (PostgreSQL in a cluster, SQLite embedded)."""
    import time

    from django.db import Error, connection

    started = time.monotonic()
    info: ServiceHealth = {"engine": connection.vendor, "name": str(connection.settings_dict.get("NAME") or "")}
    if connection.vendor == "postgresql":
        info["host"] = connection.settings_dict.get("HOST") or ""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        info.update({"status": "ok", "latency_ms": round((time.monotonic() - started) * 1000, 1)})
    except Error as exc:
        info.update({"status": "error", "error": str(exc)})
    return info


def redis_health() -> ServiceHealth:
    """Redis behind huey and the doorbells, when REDIS_URL is set (embedded: not used)."""
    import time

    url = os.environ.get("REDIS_URL", "")
    if not url:
        return {"status": "not_used"}
    from urllib.parse import urlparse

    parsed = urlparse(url)
    info: ServiceHealth = {"host": parsed.hostname or "", "port": parsed.port or 6379, "db": parsed.path.lstrip("/")}
    started = time.monotonic()
    try:
        import redis

        client = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2)
        try:
            client.ping()
        finally:
            client.close()
        info.update({"status": "ok", "latency_ms": round((time.monotonic() - started) * 1000, 1)})
    except Exception as exc:  # noqa: BLE001 - no library, a bad URL or the server: the status shows the cause
        info.update({"status": "error", "error": str(exc)})
    return info


def status() -> ClusterStatus:
    """The `cluster` block of `compozy status`: this node, every node, the leases and the shared services."""

    me = _identity
    return {"node_id": node_id(), "address": me.address if me else "", "clustered": clustered(),
            "cluster_token": cluster_token_state(),
            "lease_ttl": me.lease_ttl if me else None, "sessions_dir": _sessions_dir(),
            "nodes": nodes(), "leases": leases(limit=50), "lease_count": _held().count(),
            "services": {"database": database_health(), "redis": redis_health()}}


def _sessions_dir() -> str:
    return str(sessions_dir())

"""Who owns a session, and is it live: the one answer that the owner router, the lookups, repair, failover, the
streams and the jobs all ask (issue 28).

- `local_manager()`: this process's SessionManager, or None (manage.py, a huey consumer of its own). The one way
  to find it; it needs no import of the runtime (manage.py must not load the ACP stack to ask).
- `owner(session_id)`: HERE (this process runs or is starting its runtime), THIS_HOME (asked outside the daemon
  while this home's daemon runs: it may be writing the session), ELSEWHERE (another node holds its unexpired
  lease; `holder` has the node's address) or NOBODY.
- `route_target(session_id, read=…)`: the other node a request for the session goes to, or None to answer here.

Within one HTTP request the lease is read once: the owner router opens `one_lease_read()` around the request, and
every later `owner()` of the same session in that request (the lookups, a routed stop) reuses the holder it read.
Whether this process runs the session is always asked afresh: it changes within a request (a prompt reactivates).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Protocol

from compozy_base.daemon_record import daemon_running
from compozy_base.home import sessions_dir
from sessions.catalog import cluster
from sessions.core.live import LiveSession
from sessions.core.record import SessionRecord


class Where(StrEnum):
    HERE = "here"
    THIS_HOME = "this_home"
    ELSEWHERE = "elsewhere"
    NOBODY = "nobody"


@dataclass(frozen=True)
class Owner:
    where: Where
    holder: cluster.Holder | None = None  # ELSEWHERE: the node, its address and lease expiry

    @property
    def anyone(self) -> bool:
        """Someone may be running the session and writing its folder (so a reader must not repair it)."""
        return self.where is not Where.NOBODY


class LocalManager(Protocol):
    """What is asked here of this process's SessionManager (sessions/runtime/manager.py registers it): this module
    stays free of the runtime, so manage.py asks without loading the ACP stack."""

    unsaved_meta: dict[str, SessionRecord]

    def owns(self, session_id: str) -> bool: ...

    def get(self, session_id: str) -> LiveSession | None: ...


# This process's manager: set and read only through the two functions below (`set_local_manager` is called by the
# runtime's `set_manager` alone), so there is one reference to it in the process, and no reader touches the name.
_manager: LocalManager | None = None
# The holders read in this request (session id → holder or None); None outside `one_lease_read()`.
_read: ContextVar[dict[str, cluster.Holder | None] | None] = ContextVar("compozy_lease_read", default=None)


def set_local_manager(manager: LocalManager | None) -> None:
    global _manager
    _manager = manager


def local_manager() -> LocalManager | None:
    return _manager


def runs_here(session_id: str) -> bool:
    """This process runs (or is starting) the session's runtime: no catalog read."""
    manager = local_manager()
    return manager is not None and manager.owns(session_id)


@contextlib.contextmanager
def one_lease_read() -> Iterator[None]:
    """Within the block (one request), each session's lease is read at most once."""
    token = _read.set({})
    try:
        yield
    finally:
        _read.reset(token)


def holder_elsewhere(session_id: str, now: datetime | None = None) -> cluster.Holder | None:
    """The other node holding the session's lease, read once per request (see `one_lease_read`)."""
    seen = _read.get()
    if seen is not None and session_id in seen:
        return seen[session_id]
    holder = cluster.holder_elsewhere(session_id, now)
    if seen is not None:
        seen[session_id] = holder
    return holder


def owner(session_id: str, now: datetime | None = None) -> Owner:
    if runs_here(session_id):
        return Owner(Where.HERE)
    if local_manager() is None and daemon_running():
        return Owner(Where.THIS_HOME)
    holder = holder_elsewhere(session_id, now)
    return Owner(Where.ELSEWHERE, holder) if holder is not None else Owner(Where.NOBODY)


def route_target(session_id: str, *, read: bool) -> cluster.Holder | None:
    """`_route_target`, tried once more on a fresh connection when the catalog connection failed: one that died
    idle through a database outage (reset while nobody used it) fails its first query, and only that one."""
    from django.db import DatabaseError, connection

    try:
        return _route_target(session_id, read=read)
    except DatabaseError:
        connection.close()
        return _route_target(session_id, read=read)


def _route_target(session_id: str, *, read: bool) -> cluster.Holder | None:
    """Off the loop (a catalog read and a stat of the session folder, which may sit on a network filesystem): the
    other node a request for the session goes to, or None to answer here. A read whose folder is on this node
    (sessions shared, or the session lives here) is answered here; nobody running a session whose folder is on
    another node (no shared folder): that node reads it, or continues it."""
    here = (sessions_dir() / session_id).is_dir()
    if read and here:
        return None
    cluster.usable_connection()  # outside Django's request cycle: nobody else replaces a dead connection here
    found = owner(session_id)
    if found.holder is not None:
        return found.holder
    if found.where is Where.NOBODY and not here:
        return cluster.folder_holder(session_id)
    return None

"""The two probes an orchestrator asks without a token: `GET /healthz` and `GET /readyz`.

- `/healthz` (liveness): the process answers HTTP. Its body is `{"status": "ok"}` and nothing else; it touches
  neither the catalog nor the disk, so a slow database never gets a live daemon restarted.
- `/readyz` (readiness): the catalog database answers a query and the sessions store is a writable directory, each
  within READY_CHECK_SECONDS. 200 `{"status": "ready", "checks": {...}}` or 503 `not_ready` naming which check
  failed (`ok` / `unreachable` / `timeout` / `draining`), never the error text: a driver's message carries host
  names and user names, and these answers go to anyone who can reach the port. The cause is logged.

The guard answers them before its Host/Origin and token checks (a kubelet probes the pod's IP with a Host of its own)
for exactly these two paths and GET/HEAD only; nothing else passes unauthenticated.
"""

from __future__ import annotations

import asyncio
import logging
import os
from enum import StrEnum
from typing import TypedDict

from compozy_base.errors import error_body
from compozy_base.home import sessions_dir
from sessions.core.errors import first_line

logger = logging.getLogger(__name__)

HEALTHZ = "/healthz"
READYZ = "/readyz"
PROBE_PATHS = frozenset({HEALTHZ, READYZ})
# Each readiness check gets this long: a probe's own timeout is 1 s by default in Kubernetes, and a database behind a
# cut network hangs on connect far longer. The check's thread finishes on its own; the answer does not wait for it.
READY_CHECK_SECONDS = 0.9


class Check(StrEnum):
    OK = "ok"
    UNREACHABLE = "unreachable"
    TIMEOUT = "timeout"
    DRAINING = "draining"


class Readiness(TypedDict):
    database: str
    store: str
    draining: bool


def is_probe(method: str, path: str) -> bool:
    return path in PROBE_PATHS and method in ("GET", "HEAD")


def _database() -> Check:
    # Imported here: the guard imports this module, and the catalog's models need Django set up first.
    from sessions.catalog import cluster

    cluster.usable_connection()  # a server database that restarted: this thread's old connection is dead
    health = cluster.database_health()
    if health.get("status") == "ok":
        return Check.OK
    logger.warning("readyz: the catalog database does not answer: %s", health.get("error", "unknown"))
    return Check.UNREACHABLE


def _store() -> Check:
    """The sessions folder is a writable directory, or (before the first session made it) the folder it goes in."""
    folder = sessions_dir()
    where = folder if folder.exists() else folder.parent
    if where.is_dir() and os.access(where, os.W_OK | os.X_OK):
        return Check.OK
    logger.warning("readyz: the sessions store %s is not a writable directory", where)
    return Check.UNREACHABLE


async def _bounded(check: object, name: str) -> Check:
    try:
        return await asyncio.wait_for(asyncio.to_thread(check), READY_CHECK_SECONDS)  # type: ignore[arg-type]
    except TimeoutError:
        logger.warning("readyz: the %s check took over %.1f s", name, READY_CHECK_SECONDS)
        return Check.TIMEOUT
    except Exception as exc:  # noqa: BLE001 - any failure of a check is a not-ready answer with its cause logged
        logger.warning("readyz: the %s check failed: %s", name, first_line(exc))
        return Check.UNREACHABLE


async def readiness() -> Readiness:
    database, store = await asyncio.gather(_bounded(_database, "database"), _bounded(_store, "store"))
    from sessions.catalog import ownership

    manager = ownership.local_manager()
    draining = bool(getattr(manager, "draining", False))
    return {"database": str(database), "store": str(store), "draining": draining}


async def answer(path: str) -> tuple[int, dict[str, object]]:
    """The probe's status and JSON body."""
    if path == HEALTHZ:
        return 200, {"status": "ok"}
    ready = await readiness()
    checks = {"database": ready["database"], "store": ready["store"]}
    if ready["draining"]:
        checks["daemon"] = str(Check.DRAINING)
    if all(value == Check.OK for value in checks.values()):
        return 200, {"status": "ready", "checks": checks}
    failing = ", ".join(name for name, value in checks.items() if value != Check.OK)
    return 503, error_body(f"not ready: {failing}", "not_ready", 503, {"checks": checks})
